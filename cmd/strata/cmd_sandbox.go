package main

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

func newSandboxCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "sandbox",
		Short: "Create, list, show and remove sandboxes",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(
		newSandboxCreateCommand(g),
		newSandboxListCommand(g),
		newSandboxShowCommand(g),
		newSandboxRemoveCommand(g),
		newSandboxForkCommand(g),
	)
	return cmd
}

// sandboxCreateOptions are the arguments of `sandbox create`.
type sandboxCreateOptions struct {
	name      string
	base      string
	blockSize sizeValue
}

func (o *sandboxCreateOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.base, "base", "", "host directory the sandbox starts from (required)")
	cmd.Flags().Var(&o.blockSize, "block-size", "block size: 64K, 1M, 65536 (default 64K)")
}

func newSandboxCreateCommand(g *globals) *cobra.Command {
	o := &sandboxCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME --base DIR [--block-size SIZE]",
		Short: "Create a sandbox over a base directory",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			if o.base == "" {
				return usageErrorf(cmd, "missing --base DIR")
			}
			if cmd.Flags().Changed("block-size") && o.blockSize == 0 {
				// 0 is how the store is told "the default"; said aloud it
				// is a mistake.
				return usageErrorf(cmd, "--block-size 0: want a power of two such as 64K or 1M")
			}
			return runSandboxCreate(g, o)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func runSandboxCreate(g *globals, o *sandboxCreateOptions) error {
	what := "create sandbox " + o.name
	base, err := filepath.Abs(o.base)
	if err != nil {
		return fail(what, err, o.name)
	}
	s, err := g.connect()
	if err != nil {
		return fail(what, err, o.name)
	}
	defer s.Close()
	var sb control.Sandbox
	err = s.Call(control.OpSandboxCreate, control.CreateArgs{Name: o.name, Base: base, BlockSize: int(o.blockSize)}, &sb)
	if err != nil {
		return fail(what, err, o.name)
	}
	if g.json {
		return printJSON(g.stdout, sb)
	}
	_, err = fmt.Fprintf(g.stdout, "created sandbox %s over %s (blocks of %s)\n", sb.Name, sb.Base, humanSize(int64(sb.BlockSize)))
	return err
}

func newSandboxListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the sandboxes of the store",
		Args:    exactArgs(),
		RunE:    func(cmd *cobra.Command, args []string) error { return runSandboxList(g) },
	}
}

func runSandboxList(g *globals) error {
	s, err := g.connect()
	if err != nil {
		return fail("list sandboxes", err, "")
	}
	defer s.Close()
	var sbs []control.Sandbox
	if err := s.Call(control.OpSandboxList, nil, &sbs); err != nil {
		return fail("list sandboxes", err, "")
	}
	if g.json {
		if sbs == nil {
			sbs = []control.Sandbox{}
		}
		return printJSON(g.stdout, sbs)
	}
	if len(sbs) == 0 {
		_, err := fmt.Fprintln(g.stdout, "no sandboxes; create one with `strata sandbox create NAME --base DIR`")
		return err
	}
	rows := make([][]string, 0, len(sbs))
	for _, sb := range sbs {
		mp := "-"
		if sb.Mounted {
			mp = sb.Mountpoint
		}
		rows = append(rows, []string{sb.Name, sb.Base, humanSize(int64(sb.BlockSize)), mp, formatTime(sb.Created)})
	}
	return table(g.stdout, []string{"NAME", "BASE", "BLOCK", "MOUNTPOINT", "CREATED"}, rows)
}

func newSandboxShowCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a sandbox and its layer stack",
		Args:  exactArgs("NAME"),
		RunE:  func(cmd *cobra.Command, args []string) error { return runSandboxShow(g, args[0]) },
	}
}

func runSandboxShow(g *globals, name string) error {
	what := "show sandbox " + name
	s, err := g.connect()
	if err != nil {
		return fail(what, err, name)
	}
	defer s.Close()
	var d control.SandboxDetail
	if err := s.Call(control.OpSandboxShow, control.NameArgs{Name: name}, &d); err != nil {
		return fail(what, err, name)
	}
	if g.json {
		return printJSON(g.stdout, d)
	}
	mounted := "no"
	if d.Mounted {
		mode := "read-write"
		if d.ReadOnly {
			mode = "read-only"
		}
		mounted = fmt.Sprintf("at %s (%s)", d.Mountpoint, mode)
	}
	rows := [][]string{
		{"name", d.Name},
		{"base", d.Base},
		{"block size", humanSize(int64(d.BlockSize))},
		{"created", formatTime(d.Created)},
		{"mounted", mounted},
		{"head", d.Head},
		{"layers", strconv.Itoa(len(d.Layers))},
	}
	if err := table(g.stdout, []string{"SANDBOX", d.Name}, rows[1:]); err != nil {
		return err
	}
	if len(d.Layers) == 0 {
		return nil
	}
	fmt.Fprintln(g.stdout)
	lrows := make([][]string, 0, len(d.Layers))
	for _, l := range d.Layers {
		lrows = append(lrows, []string{l.ID, l.State, l.Sandbox, formatTime(l.Created)})
	}
	return table(g.stdout, []string{"LAYER", "STATE", "SANDBOX", "CREATED"}, lrows)
}

func newSandboxRemoveCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"remove"},
		Short:   "Remove a sandbox, its checkpoints and archives, and the layers only it uses",
		Args:    exactArgs("NAME"),
		RunE:    func(cmd *cobra.Command, args []string) error { return runSandboxRemove(g, args[0]) },
	}
}

func runSandboxRemove(g *globals, name string) error {
	what := "remove sandbox " + name
	s, err := g.connect()
	if err != nil {
		return fail(what, err, name)
	}
	defer s.Close()
	var sb control.Sandbox
	if err := s.Call(control.OpSandboxRemove, control.NameArgs{Name: name}, &sb); err != nil {
		return fail(what, err, name)
	}
	if g.json {
		return printJSON(g.stdout, sb)
	}
	_, err = fmt.Fprintf(g.stdout, "removed sandbox %s\n", name)
	return err
}

func newSandboxForkCommand(g *globals) *cobra.Command {
	var from string
	cmd := &cobra.Command{
		Use:   "fork NEW --from CHECKPOINT",
		Short: "Create a sandbox from a checkpoint, sharing its layers (no data is copied)",
		Args:  exactArgs("NEW"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if from == "" {
				return usageErrorf(cmd, "missing --from CHECKPOINT")
			}
			return runSandboxFork(g, args[0], from)
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the checkpoint to start from: id, unique id prefix, or label (required)")
	return cmd
}

func runSandboxFork(g *globals, name, from string) error {
	var sb control.Sandbox
	if err := g.call("fork "+name, "", control.OpSandboxFork, control.ForkArgs{Name: name, From: from}, &sb); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, sb)
	}
	_, err := fmt.Fprintf(g.stdout, "forked sandbox %s from checkpoint %s over %s\n", sb.Name, from, sb.Base)
	return err
}
