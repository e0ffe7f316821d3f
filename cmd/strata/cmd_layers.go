package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

func newLayersCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "layers",
		Aliases: []string{"layer"},
		Short:   "Show what each layer of a sandbox holds",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRun,
	}
	cmd.AddCommand(newLayersListCommand(g), newLayersInspectCommand(g))
	return cmd
}

func newLayersListCommand(g *globals) *cobra.Command {
	var archived bool
	cmd := &cobra.Command{
		Use:     "list NAME [--archived]",
		Aliases: []string{"ls"},
		Short:   "List a sandbox's layers, top (active) first: files, blocks, bytes",
		Args:    exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runLayersList(g, control.LayersArgs{Sandbox: args[0], Archived: archived})
		},
	}
	cmd.Flags().BoolVar(&archived, "archived", false, "also list the archived layers the sandbox created")
	return cmd
}

func runLayersList(g *globals, a control.LayersArgs) error {
	var ls []checkpoint.LayerReport
	if err := g.call("list layers of "+a.Sandbox, a.Sandbox, control.OpLayersList, a, &ls); err != nil {
		return err
	}
	if g.json {
		if ls == nil {
			ls = []checkpoint.LayerReport{}
		}
		return printJSON(g.stdout, ls)
	}
	rows := make([][]string, 0, len(ls))
	for _, l := range ls {
		rows = append(rows, []string{l.ID, l.State, dash(l.Checkpoint), strconv.Itoa(l.Files),
			strconv.FormatInt(l.Blocks, 10), humanSize(l.Bytes), formatTime(l.Created)})
	}
	return table(g.stdout, []string{"LAYER", "STATE", "CHECKPOINT", "FILES", "BLOCKS", "SIZE", "CREATED"}, rows)
}

func newLayersInspectCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect LAYER",
		Short: "Show one layer: its sandbox, parent, state, checkpoint and what it holds",
		Args:  exactArgs("LAYER"),
		RunE:  func(cmd *cobra.Command, args []string) error { return runLayersInspect(g, args[0]) },
	}
}

func runLayersInspect(g *globals, id string) error {
	var l checkpoint.LayerReport
	if err := g.call("inspect layer", "", control.OpLayersInspect, control.IDArgs{ID: id}, &l); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, l)
	}
	parent := l.Parent
	if parent == "" {
		parent = "- (the base)"
	}
	rows := [][]string{
		{"sandbox", l.Sandbox},
		{"state", l.State},
		{"parent", parent},
		{"checkpoint", dash(l.Checkpoint)},
		{"created", formatTime(l.Created)},
		{"files", strconv.Itoa(l.Files)},
		{"blocks", strconv.FormatInt(l.Blocks, 10)},
		{"shared blocks", fmt.Sprintf("%d (kept by a layer below)", l.Shared)},
		{"size", fmt.Sprintf("%s (%d bytes)", humanSize(l.Bytes), l.Bytes)},
	}
	return table(g.stdout, []string{"LAYER", l.ID}, rows)
}
