package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

func newCheckpointCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "checkpoint",
		Aliases: []string{"cp"},
		Short:   "Create, list, compare and remove checkpoints",
		Args:    cobra.ArbitraryArgs,
		RunE:    groupRun,
	}
	cmd.AddCommand(
		newCheckpointCreateCommand(g),
		newCheckpointListCommand(g),
		newCheckpointShowCommand(g),
		newCheckpointDiffCommand(g),
		newCheckpointRemoveCommand(g),
		newCheckpointPruneCommand(g),
	)
	return cmd
}

// checkpointCreateOptions are the arguments of `checkpoint create`.
type checkpointCreateOptions struct {
	control.CheckpointCreateArgs
}

func (o *checkpointCreateOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Label, "label", "", "a name for the checkpoint, unique in the sandbox; usable in place of its id")
	f.StringVar(&o.Reason, "reason", "", "why the checkpoint was taken")
	f.StringVar(&o.Plan, "plan", "", "the plan the checkpoint belongs to")
	f.IntVar(&o.Step, "step", 0, "the plan's step index")
	f.StringVar(&o.Decision, "decision", "", "the decision the checkpoint precedes")
	f.StringVar(&o.SourceTool, "source-tool", "", "the tool that asked for it")
	f.StringVar(&o.Phase, "phase", "", "the phase: before-step, after-step, ...")
}

func newCheckpointCreateCommand(g *globals) *cobra.Command {
	o := &checkpointCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME [--label L] [--reason R] [--plan P] [--step N] [--decision D] [--source-tool T] [--phase X]",
		Short: "Freeze the sandbox's current state as a checkpoint",
		Args:  exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Sandbox = args[0]
			if o.Step < 0 {
				return usageErrorf(cmd, "--step %d: want 0 or more", o.Step)
			}
			return runCheckpointCreate(g, o)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func runCheckpointCreate(g *globals, o *checkpointCreateOptions) error {
	var cp checkpoint.Checkpoint
	if err := g.call("checkpoint "+o.Sandbox, o.Sandbox, control.OpCheckpointCreate, o.CheckpointCreateArgs, &cp); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, cp)
	}
	_, err := fmt.Fprintf(g.stdout, "created checkpoint %s%s of %s (%s in its layer)\n", cp.ID, labelSuffix(cp.Label), cp.Sandbox, humanSize(cp.Bytes))
	return err
}

func labelSuffix(label string) string {
	if label == "" {
		return ""
	}
	return fmt.Sprintf(" (%s)", label)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newCheckpointListCommand(g *globals) *cobra.Command {
	var plan string
	cmd := &cobra.Command{
		Use:     "list NAME [--plan P]",
		Aliases: []string{"ls"},
		Short:   "List a sandbox's checkpoints, oldest first",
		Args:    exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCheckpointList(g, control.CheckpointListArgs{Sandbox: args[0], Plan: plan})
		},
	}
	cmd.Flags().StringVar(&plan, "plan", "", "only the checkpoints of this plan")
	return cmd
}

func runCheckpointList(g *globals, a control.CheckpointListArgs) error {
	var cps []checkpoint.Checkpoint
	if err := g.call("list checkpoints of "+a.Sandbox, a.Sandbox, control.OpCheckpointList, a, &cps); err != nil {
		return err
	}
	if g.json {
		if cps == nil {
			cps = []checkpoint.Checkpoint{}
		}
		return printJSON(g.stdout, cps)
	}
	if len(cps) == 0 {
		_, err := fmt.Fprintf(g.stdout, "no checkpoints; create one with `strata checkpoint create %s`\n", a.Sandbox)
		return err
	}
	rows := make([][]string, 0, len(cps))
	for _, cp := range cps {
		step := "-"
		if cp.Plan != "" {
			step = strconv.Itoa(cp.Step)
		}
		rows = append(rows, []string{cp.ID, dash(cp.Label), formatTime(cp.Created), humanSize(cp.Bytes), dash(cp.Plan), step, dash(cp.Reason)})
	}
	return table(g.stdout, []string{"CHECKPOINT", "LABEL", "CREATED", "SIZE", "PLAN", "STEP", "REASON"}, rows)
}

func newCheckpointShowCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a checkpoint (by id, unique id prefix, or label)",
		Args:  exactArgs("ID"),
		RunE:  func(cmd *cobra.Command, args []string) error { return runCheckpointShow(g, args[0]) },
	}
}

func runCheckpointShow(g *globals, id string) error {
	var cp checkpoint.Checkpoint
	if err := g.call("show checkpoint", "", control.OpCheckpointShow, control.IDArgs{ID: id}, &cp); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, cp)
	}
	rows := [][]string{
		{"sandbox", cp.Sandbox},
		{"label", dash(cp.Label)},
		{"created", formatTime(cp.Created)},
		{"layer", cp.Layer},
		{"size", humanSize(cp.Bytes)},
		{"state hash", cp.StateHash},
		{"plan", dash(cp.Plan)},
		{"step", strconv.Itoa(cp.Step)},
		{"decision", dash(cp.Decision)},
		{"reason", dash(cp.Reason)},
		{"source tool", dash(cp.SourceTool)},
		{"phase", dash(cp.Phase)},
	}
	return table(g.stdout, []string{"CHECKPOINT", cp.ID}, rows)
}

func newCheckpointDiffCommand(g *globals) *cobra.Command {
	var sandbox string
	cmd := &cobra.Command{
		Use:   "diff FROM [TO] [--sandbox NAME]",
		Short: "What changed from checkpoint FROM to checkpoint TO (default: the live state)",
		Long: `What changed from checkpoint FROM to checkpoint TO (default: the live state
of FROM's sandbox). FROM and TO are ids, unique id prefixes or labels; TO is
looked up in FROM's sandbox. --sandbox looks FROM up in that sandbox, for a
label that several sandboxes use.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf(cmd, "missing FROM")
			}
			return maxArgs("FROM", "TO")(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			a := control.DiffArgs{From: args[0], Sandbox: sandbox}
			if len(args) == 2 {
				a.To = args[1]
			}
			if cmd.Flags().Changed("sandbox") && sandbox == "" {
				return usageErrorf(cmd, "--sandbox: empty; want a sandbox's name")
			}
			return runCheckpointDiff(g, a)
		},
	}
	cmd.Flags().StringVar(&sandbox, "sandbox", "", "look FROM up in this sandbox")
	return cmd
}

func runCheckpointDiff(g *globals, a control.DiffArgs) error {
	var d checkpoint.Diff
	if err := g.call("diff", a.Sandbox, control.OpCheckpointDiff, a, &d); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, d)
	}
	for _, c := range []struct {
		mark  string
		paths []string
	}{{"A", d.Added}, {"M", d.Modified}, {"D", d.Deleted}} {
		for _, p := range c.paths {
			fmt.Fprintf(g.stdout, "%s  %s\n", c.mark, p)
		}
	}
	to := "the live state"
	if a.To != "" {
		to = a.To
	}
	_, err := fmt.Fprintf(g.stdout, "%s to %s: %d added, %d modified, %d deleted; %s changed\n",
		a.From, to, len(d.Added), len(d.Modified), len(d.Deleted), humanSize(d.ChangedBytes))
	return err
}

func newCheckpointRemoveCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID",
		Aliases: []string{"remove"},
		Short:   "Remove a checkpoint; its layer stays while anything stands on it",
		Long: `Remove a checkpoint. Its layer stays while anything stands on it (a later
checkpoint, an archive, a fork, the sandbox itself), but only the blocks a
kept state still shows: those a later layer wrote again, cut off or removed
go, and their space is given back.`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error { return runCheckpointRemove(g, args[0]) },
	}
}

func runCheckpointRemove(g *globals, id string) error {
	var cp checkpoint.Checkpoint
	if err := g.call("remove checkpoint", "", control.OpCheckpointRemove, control.IDArgs{ID: id}, &cp); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, cp)
	}
	_, err := fmt.Fprintf(g.stdout, "removed checkpoint %s%s of %s\n", cp.ID, labelSuffix(cp.Label), cp.Sandbox)
	return err
}

// checkpointPruneOptions are the arguments of `checkpoint prune`.
type checkpointPruneOptions struct {
	sandbox    string
	keepLast   int
	keepWithin string
}

func (o *checkpointPruneOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().IntVar(&o.keepLast, "keep-last", 0, "keep the last N checkpoints")
	cmd.Flags().StringVar(&o.keepWithin, "keep-within", "", "keep the checkpoints younger than this: 36h, 90m, 7d")
}

func newCheckpointPruneCommand(g *globals) *cobra.Command {
	o := &checkpointPruneOptions{}
	d := checkpoint.DefaultPolicy
	cmd := &cobra.Command{
		Use:   "prune NAME [--keep-last N] [--keep-within DURATION]",
		Short: "Remove the checkpoints a retention policy does not keep",
		Long: fmt.Sprintf(`Remove the checkpoints of a sandbox that the retention policy does not keep,
then collect the layers nothing needs any more.

A checkpoint is kept if it is among the last N (--keep-last) or younger than
--keep-within. Without either flag the default policy applies: the last %d
checkpoints and every checkpoint of the last %d days. Layers that a kept
checkpoint, an archive, a fork or the sandbox itself stands on are never
removed, but of a removed checkpoint's layer only the blocks a kept state
still shows stay: a file rewritten at every step keeps one copy per kept
checkpoint, not one per step. The checkpoints of an open plan (not yet
complete or applied) are kept whatever the policy says, since the plan may
still roll back or revert to any of them.`, d.KeepLast, int(d.KeepWithin.Hours()/24)),
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.sandbox = args[0]
			a := control.PruneArgs{Sandbox: o.sandbox, KeepWithin: o.keepWithin}
			if cmd.Flags().Changed("keep-last") {
				a.KeepLast = &o.keepLast
			}
			if cmd.Flags().Changed("keep-within") && o.keepWithin == "" {
				return usageErrorf(cmd, "--keep-within: want a duration such as 36h, 90m or 7d")
			}
			// Check the policy here, so a bad one is bad usage.
			if _, err := control.ParsePolicy(a.KeepLast, a.KeepWithin); err != nil {
				return usageErrorf(cmd, "%v", err)
			}
			return runCheckpointPrune(g, a)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func runCheckpointPrune(g *globals, a control.PruneArgs) error {
	var r control.PruneReport
	if err := g.call("prune "+a.Sandbox, a.Sandbox, control.OpCheckpointPrune, a, &r); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, r)
	}
	held := ""
	if len(r.Held) > 0 {
		held = fmt.Sprintf(" (%d held by open plans)", len(r.Held))
	}
	_, err := fmt.Fprintf(g.stdout, "removed %d checkpoints of %s, kept %d%s; freed %s (%d layers, %d hidden blocks)\n",
		len(r.Removed), a.Sandbox, len(r.Kept), held, humanSize(r.GC.BytesFreed), len(r.GC.Layers), r.GC.HiddenBlocks)
	return err
}
