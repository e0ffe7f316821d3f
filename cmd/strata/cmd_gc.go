package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

func newGCCommand(g *globals) *cobra.Command {
	var dedup bool
	cmd := &cobra.Command{
		Use:   "gc [NAME]",
		Short: "Remove the layers and block data nothing needs any more",
		Long: `Remove every layer that no sandbox, checkpoint, archive or fork stands on,
and the data files of layers that no longer exist. Collection covers the
whole store (layers are shared between forks); NAME, if given, must name a
sandbox. A crash part way leaves nothing a sandbox needs removed: the records
go in one transaction, the data after it.

A layer that a later checkpoint stands on stays, but of the layers no
checkpoint, archive or fork pins (those of pruned or removed checkpoints)
only what a kept state still shows is kept: a block written again above
it, cut off by a truncate above it or of a file removed above it is
dropped and its space given back (hidden blocks). Prune and rm collect
the same way.

With --dedup, every block of the frozen layers is then read and named by
its content, and a block whose content a layer below it already holds (or
an earlier block of its own layer) is kept once: its own slot is given
back. Mounted sandboxes go on reading meanwhile.`,
		Args: maxArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return runGC(g, name, dedup)
		},
	}
	cmd.Flags().BoolVar(&dedup, "dedup", false, "also store each block content of the frozen layers once per stack")
	return cmd
}

func runGC(g *globals, name string, dedup bool) error {
	var r layers.GCResult
	p := g.startProgress("gc: collecting " + g.store)
	err := g.call("gc", name, control.OpGC, control.GCArgs{Name: name, Dedup: dedup}, &r)
	p.Stop()
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, r)
	}
	if _, err := fmt.Fprintf(g.stdout, "removed %d layers, %d data files and %d hidden blocks; freed %s\n", len(r.Layers), r.DataFiles, r.HiddenBlocks, humanSize(r.BytesFreed)); err != nil {
		return err
	}
	if r.Dedup == nil {
		return nil
	}
	_, err = fmt.Fprintf(g.stdout, "dedup: %d blocks kept once; freed %s\n", r.Dedup.Blocks, humanSize(r.Dedup.BytesFreed))
	return err
}
