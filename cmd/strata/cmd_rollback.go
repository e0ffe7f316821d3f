package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

// rollbackOptions are the arguments of `rollback`.
type rollbackOptions struct {
	sandbox string
	to      string
}

func (o *rollbackOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().StringVar(&o.to, "to-checkpoint", "", "the checkpoint to go back to: id, unique id prefix, or label (required)")
}

func newRollbackCommand(g *globals) *cobra.Command {
	o := &rollbackOptions{}
	cmd := &cobra.Command{
		Use:   "rollback NAME --to-checkpoint ID",
		Short: "Put a sandbox back to any of its checkpoints, mounted or not",
		Long: `Put a sandbox back to one of its checkpoints — any of them, not only the
last. A mounted sandbox switches in place: when the command returns, every
path read through the mount shows the checkpoint's content.

The state being left is kept in an archive: ` + "`strata archive list`" + ` shows it,
` + "`strata archive export`" + ` writes its files out and ` + "`strata archive restore`" + `
undoes the rollback. Files held open across the rollback fail their next
read or write with ESTALE; opening them again shows the checkpoint. A
process whose working directory is in the sandbox keeps it.`,
		Args: exactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.sandbox = args[0]
			if o.to == "" {
				return usageErrorf(cmd, "missing --to-checkpoint ID")
			}
			return runRollback(g, o)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func runRollback(g *globals, o *rollbackOptions) error {
	var r checkpoint.RollbackResult
	a := control.RollbackArgs{Sandbox: o.sandbox, Checkpoint: o.to}
	if err := g.call("rollback "+o.sandbox, o.sandbox, control.OpRollback, a, &r); err != nil {
		return err
	}
	return printRollback(g, "rolled %s back to checkpoint %s", r)
}

// printRollback prints what a rollback or restore did; verb has the
// sandbox and the checkpoint as its arguments.
func printRollback(g *globals, verb string, r checkpoint.RollbackResult) error {
	if g.json {
		if r.ChangedPaths == nil {
			r.ChangedPaths = []string{}
		}
		return printJSON(g.stdout, r)
	}
	fmt.Fprintf(g.stdout, verb+" in %.2f ms\n", r.Sandbox, dash(r.Checkpoint), r.Millis)
	if n := len(r.ChangedPaths); n > 0 {
		shown := r.ChangedPaths
		more := ""
		if n > 8 {
			shown, more = shown[:8], fmt.Sprintf(" and %d more", n-8)
		}
		fmt.Fprintf(g.stdout, "%d paths changed: %s%s\n", n, strings.Join(shown, ", "), more)
	} else {
		fmt.Fprintln(g.stdout, "no paths changed")
	}
	_, err := fmt.Fprintf(g.stdout, "the state left is archive %s; undo with `strata archive restore %s`\n", r.Archive, r.Archive)
	return err
}
