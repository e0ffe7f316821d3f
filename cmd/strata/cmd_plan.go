package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/correction"
)

func newPlanCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Record an agent's plan, checkpoint its decisions, correct and apply it",
		Long: `A plan records what an agent does in a sandbox, decision by decision.
` + "`plan step begin`" + ` takes a pre-decision checkpoint (milestone before-step, on by
default); ` + "`plan correct --mode revert`" + ` rolls back to it and marks the decision
and every later one for re-execution; ` + "`plan correct --mode append`" + ` adds a
correction step instead; ` + "`plan apply`" + ` writes the sandbox's changes onto its base.`,
		Args: cobra.ArbitraryArgs,
		RunE: groupRun,
	}
	step := &cobra.Command{Use: "step", Short: "Begin and end a plan's decisions", Args: cobra.ArbitraryArgs, RunE: groupRun}
	step.AddCommand(newPlanStepBeginCommand(g), newPlanStepEndCommand(g))
	cmd.AddCommand(
		newPlanCreateCommand(g),
		newPlanListCommand(g),
		newPlanShowCommand(g),
		step,
		newPlanCompleteCommand(g),
		newPlanRollbackCommand(g),
		newPlanCorrectCommand(g),
		newPlanApplyCommand(g),
	)
	return cmd
}

// planHint suggests the next step for the plan commands' errors.
func planFail(what string, err error, sandbox string) error {
	e := opFail(what, err, sandbox)
	ce, ok := e.(*cliError)
	if !ok || ce.hint != "" {
		return e
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, correction.ErrPlanApplied.Error()):
		ce.hint = "an applied plan is final; create a new plan to go on"
	case strings.Contains(msg, correction.ErrNoFailedDecision.Error()):
		ce.hint = "name the decision to revert to with --decision D"
	case strings.Contains(msg, correction.ErrStepNotBegun.Error()):
		ce.hint = "run `strata plan step begin PLAN --decision D` first"
	case strings.Contains(msg, correction.ErrConflict.Error()):
		ce.hint = "the base changed under the sandbox; resolve the paths above on the host, or start a new sandbox over the base"
	case strings.Contains(msg, "plan ") && strings.Contains(msg, "not found"):
		ce.hint = "run `strata plan list` to see the plans"
	case strings.Contains(msg, "decision ") && strings.Contains(msg, "not found"):
		ce.hint = "run `strata plan show PLAN` to see its decisions"
	}
	return ce
}

func (g *globals) planCall(what, op string, args, result any) error {
	s, err := g.connect()
	if err != nil {
		return planFail(what, err, "")
	}
	defer s.Close()
	if err := s.Call(op, args, result); err != nil {
		return planFail(what, err, "")
	}
	return nil
}

// planCreateOptions are the arguments of `plan create`.
type planCreateOptions struct {
	control.PlanCreateArgs
	on string
}

func (o *planCreateOptions) AddFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.Sandbox, "sandbox", "", "the sandbox the plan works in (required, but for a subplan)")
	f.StringVar(&o.on, "checkpoint-on", "", "milestones, comma-separated: before-step, after-step, after-subplan, or none (default before-step)")
	f.StringVar(&o.Parent, "parent", "", "start the plan as a subplan of this plan")
	f.StringVar(&o.ParentDecision, "parent-decision", "", "the parent's decision the subplan runs under")
}

func newPlanCreateCommand(g *globals) *cobra.Command {
	o := &planCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create PLAN --sandbox NAME [--checkpoint-on before-step,after-step,after-subplan]",
		Short: "Start recording a plan in a sandbox",
		Args:  exactArgs("PLAN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Name = args[0]
			if o.Sandbox == "" && o.Parent == "" {
				return usageErrorf(cmd, "missing --sandbox NAME")
			}
			if (o.Parent == "") != (o.ParentDecision == "") {
				return usageErrorf(cmd, "--parent and --parent-decision go together")
			}
			if cmd.Flags().Changed("checkpoint-on") {
				o.CheckpointOn = strings.Split(o.on, ",")
				if len(o.CheckpointOn) == 0 || o.on == "" {
					o.CheckpointOn = []string{"none"}
				}
			}
			return runPlanCreate(g, o)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func runPlanCreate(g *globals, o *planCreateOptions) error {
	var p control.PlanReport
	if err := g.planCall("plan create "+o.Name, control.OpPlanCreate, o.PlanCreateArgs, &p); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, p)
	}
	_, err := fmt.Fprintf(g.stdout, "created plan %s (%s) in sandbox %s, checkpoints on %s\n", p.Name, p.ID, p.Sandbox, milestones(p.CheckpointOn))
	return err
}

func milestones(ms []string) string {
	if len(ms) == 0 {
		return "none"
	}
	return strings.Join(ms, ",")
}

func newPlanListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the plans of the store",
		Args:  exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ps []control.PlanReport
			if err := g.planCall("plan list", control.OpPlanList, struct{}{}, &ps); err != nil {
				return err
			}
			if g.json {
				return printJSON(g.stdout, ps)
			}
			rows := make([][]string, 0, len(ps))
			for _, p := range ps {
				rows = append(rows, []string{p.Name, p.ID, p.Sandbox, p.Status, strconv.Itoa(len(p.Decisions)),
					strconv.Itoa(len(p.Corrections)), dash(strings.Join(p.NeedsReexecution, ",")), formatTime(p.Created)})
			}
			return table(g.stdout, []string{"NAME", "ID", "SANDBOX", "STATUS", "DECISIONS", "CORRECTIONS", "RE-EXECUTE", "CREATED"}, rows)
		},
	}
}

func newPlanShowCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show PLAN",
		Short: "Show a plan's decisions, checkpoints and corrections",
		Args:  exactArgs("PLAN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p control.PlanReport
			if err := g.planCall("plan show "+args[0], control.OpPlanShow, control.PlanArgs{Plan: args[0]}, &p); err != nil {
				return err
			}
			if g.json {
				if p.Checkpoints == nil {
					p.Checkpoints = []checkpoint.Checkpoint{}
				}
				return printJSON(g.stdout, p)
			}
			return printPlan(g, p)
		},
	}
}

func printPlan(g *globals, p control.PlanReport) error {
	w := g.stdout
	fmt.Fprintf(w, "plan %s (%s) in sandbox %s: %s\n", p.Name, p.ID, p.Sandbox, p.Status)
	fmt.Fprintf(w, "checkpoints on: %s\n", milestones(p.CheckpointOn))
	if p.Parent != "" {
		fmt.Fprintf(w, "subplan of %s under decision %s\n", p.Parent, p.ParentDecision)
	}
	if len(p.NeedsReexecution) > 0 {
		fmt.Fprintf(w, "needs re-execution: %s\n", strings.Join(p.NeedsReexecution, ", "))
	}
	fmt.Fprintln(w)
	rows := make([][]string, 0, len(p.Decisions))
	for _, d := range p.Decisions {
		status := d.Status
		if d.NeedsReexecution {
			status += " (re-execute)"
		}
		rows = append(rows, []string{strconv.Itoa(d.Step), d.ID, dash(d.Label), status, dash(d.Checkpoint)})
	}
	if err := table(w, []string{"STEP", "DECISION", "LABEL", "STATUS", "CHECKPOINT"}, rows); err != nil {
		return err
	}
	if len(p.Corrections) > 0 {
		fmt.Fprintln(w)
		rows = rows[:0]
		for _, c := range p.Corrections {
			rows = append(rows, []string{c.ID, c.Mode, c.Decision, c.Reason, dash(c.Archive), formatTime(c.Created)})
		}
		if err := table(w, []string{"CORRECTION", "MODE", "DECISION", "REASON", "ARCHIVE", "CREATED"}, rows); err != nil {
			return err
		}
	}
	if len(p.Checkpoints) > 0 {
		fmt.Fprintln(w)
		return printPlanCheckpoints(g, p.Checkpoints)
	}
	return nil
}

func printPlanCheckpoints(g *globals, cps []checkpoint.Checkpoint) error {
	rows := make([][]string, 0, len(cps))
	for _, c := range cps {
		rows = append(rows, []string{c.ID, dash(c.Label), strconv.Itoa(c.Step), dash(c.Decision), dash(c.Phase), formatTime(c.Created)})
	}
	return table(g.stdout, []string{"CHECKPOINT", "LABEL", "STEP", "DECISION", "PHASE", "CREATED"}, rows)
}

// planStepOptions are the arguments of `plan step begin|end`.
type planStepOptions struct {
	control.PlanStepArgs
}

func newPlanStepBeginCommand(g *globals) *cobra.Command {
	o := &planStepOptions{}
	cmd := &cobra.Command{
		Use:   "begin PLAN --decision D [--label L]",
		Short: "Begin a decision; takes the pre-decision checkpoint",
		Args:  exactArgs("PLAN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Plan = args[0]
			if o.Decision == "" {
				return usageErrorf(cmd, "missing --decision D")
			}
			var d correction.Decision
			if err := g.planCall("plan step begin "+o.Plan, control.OpPlanStepBegin, o.PlanStepArgs, &d); err != nil {
				return err
			}
			if g.json {
				return printJSON(g.stdout, d)
			}
			cp := ""
			if d.Checkpoint != "" {
				cp = ", pre-decision checkpoint " + d.Checkpoint
			}
			_, err := fmt.Fprintf(g.stdout, "began decision %s (step %d)%s\n", d.ID, d.Step, cp)
			return err
		},
	}
	cmd.Flags().StringVar(&o.Decision, "decision", "", "the decision's id (required)")
	cmd.Flags().StringVar(&o.Label, "label", "", "what the decision does")
	return cmd
}

func newPlanStepEndCommand(g *globals) *cobra.Command {
	o := &planStepOptions{}
	cmd := &cobra.Command{
		Use:   "end PLAN --decision D [--failed]",
		Short: "End a running decision, as done or failed",
		Args:  exactArgs("PLAN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Plan = args[0]
			if o.Decision == "" {
				return usageErrorf(cmd, "missing --decision D")
			}
			var d correction.Decision
			if err := g.planCall("plan step end "+o.Plan, control.OpPlanStepEnd, o.PlanStepArgs, &d); err != nil {
				return err
			}
			if g.json {
				return printJSON(g.stdout, d)
			}
			_, err := fmt.Fprintf(g.stdout, "decision %s (step %d): %s\n", d.ID, d.Step, d.Status)
			return err
		},
	}
	cmd.Flags().StringVar(&o.Decision, "decision", "", "the decision's id (required)")
	cmd.Flags().BoolVar(&o.Failed, "failed", false, "the decision failed")
	return cmd
}

func newPlanCompleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "complete PLAN",
		Short: "Mark a plan complete; a subplan checkpoints its parent (milestone after-subplan)",
		Args:  exactArgs("PLAN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p correction.Plan
			if err := g.planCall("plan complete "+args[0], control.OpPlanComplete, control.PlanArgs{Plan: args[0]}, &p); err != nil {
				return err
			}
			if g.json {
				return printJSON(g.stdout, p)
			}
			_, err := fmt.Fprintf(g.stdout, "plan %s is complete\n", p.Name)
			return err
		},
	}
}

func newPlanRollbackCommand(g *globals) *cobra.Command {
	var to string
	cmd := &cobra.Command{
		Use:   "rollback PLAN [--to-checkpoint ID]",
		Short: "List a plan's checkpoints, or roll its sandbox back to one",
		Args:  exactArgs("PLAN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if to == "" {
				var cps []checkpoint.Checkpoint
				if err := g.planCall("plan rollback "+args[0], control.OpPlanCheckpoints, control.PlanArgs{Plan: args[0]}, &cps); err != nil {
					return err
				}
				if g.json {
					return printJSON(g.stdout, cps)
				}
				return printPlanCheckpoints(g, cps)
			}
			var r correction.RollbackResult
			a := control.PlanRollbackArgs{Plan: args[0], Checkpoint: to}
			if err := g.planCall("plan rollback "+args[0], control.OpPlanRollback, a, &r); err != nil {
				return err
			}
			if g.json {
				if r.ChangedPaths == nil {
					r.ChangedPaths = []string{}
				}
				return printJSON(g.stdout, r)
			}
			if err := printRollback(g, "rolled %s back to checkpoint %s", r.RollbackResult); err != nil {
				return err
			}
			if len(r.Reverted) > 0 {
				fmt.Fprintf(g.stdout, "decisions to re-execute: %s\n", strings.Join(r.Reverted, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&to, "to-checkpoint", "", "the plan's checkpoint to go back to: id, unique id prefix, or label")
	return cmd
}

// planCorrectOptions are the arguments of `plan correct`.
type planCorrectOptions struct {
	control.PlanCorrectArgs
}

func newPlanCorrectCommand(g *globals) *cobra.Command {
	o := &planCorrectOptions{}
	cmd := &cobra.Command{
		Use:   "correct PLAN --mode revert|append --reason R [--decision D] [--step TEXT]",
		Short: "Correct a plan: revert to a decision's pre-decision checkpoint, or append a correction step",
		Long: `--mode revert rolls the sandbox back to the pre-decision checkpoint of
--decision D, or without it to the last clean checkpoint (the one before the
first failed decision); D and every later decision are marked for
re-execution and what they wrote goes to an archive (` + "`strata archive export`" + `).
--mode append records a correction step after the current one and takes a
checkpoint; it reverts nothing.`,
		Args: exactArgs("PLAN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.Plan = args[0]
			switch o.Mode {
			case correction.Revert:
				if o.Step != "" {
					return usageErrorf(cmd, "--step goes with --mode append")
				}
			case correction.Append:
				if o.Decision != "" {
					return usageErrorf(cmd, "--decision goes with --mode revert")
				}
			case "":
				return usageErrorf(cmd, "missing --mode revert|append")
			default:
				return usageErrorf(cmd, "--mode %q: want revert or append", o.Mode)
			}
			if strings.TrimSpace(o.Reason) == "" {
				return usageErrorf(cmd, "missing --reason R")
			}
			var r correction.CorrectResult
			if err := g.planCall("plan correct "+o.Plan, control.OpPlanCorrect, o.PlanCorrectArgs, &r); err != nil {
				return err
			}
			if g.json {
				return printJSON(g.stdout, r)
			}
			if r.Mode == correction.Revert {
				fmt.Fprintf(g.stdout, "reverted plan to before decision %s (checkpoint %s); %d paths changed\n", r.Decision, r.Checkpoint, len(r.ChangedPaths))
				fmt.Fprintf(g.stdout, "decisions to re-execute: %s\n", dash(strings.Join(r.Reverted, ", ")))
				_, err := fmt.Fprintf(g.stdout, "what they wrote is archive %s; see it with `strata archive export %s DIR`\n", r.Archive, r.Archive)
				return err
			}
			_, err := fmt.Fprintf(g.stdout, "appended correction step %s, checkpoint %s\n", r.Decision, r.Checkpoint)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Mode, "mode", "", "revert or append (required)")
	f.StringVar(&o.Decision, "decision", "", "revert: the decision to revert to (default: the first failed one)")
	f.StringVar(&o.Reason, "reason", "", "why (required)")
	f.StringVar(&o.Step, "step", "", "append: what the correction step does")
	return cmd
}

func newPlanApplyCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "apply PLAN",
		Short: "Write the plan's net changes onto the sandbox's base directory",
		Long: `Write what the sandbox changed — creates, edits, deletes, renames, modes,
extended attributes and ACLs, symlinks — onto its base directory. Refuses, listing the paths, when the
base changed under the sandbox since it was created. New content is staged
next to the base first and moved into place; a failure puts everything
back. An applied plan can no longer be rolled back or reverted.`,
		Args: exactArgs("PLAN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r correction.ApplyResult
			p := g.startProgress("plan apply: writing " + args[0] + " onto its base")
			err := g.planCall("plan apply "+args[0], control.OpPlanApply, control.PlanArgs{Plan: args[0]}, &r)
			p.Stop()
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(g.stdout, r)
			}
			_, err = fmt.Fprintf(g.stdout, "applied plan onto %s: %d added, %d modified, %d deleted, %d mode changes, %d attribute changes, %d owner changes, %d time changes in %.2f ms\n",
				r.Base, len(r.Added), len(r.Modified), len(r.Deleted), len(r.Modes), len(r.Xattrs), len(r.Owners), len(r.Times), r.Millis)
			return err
		},
	}
}
