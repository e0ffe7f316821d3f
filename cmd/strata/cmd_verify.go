package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

func newVerifyCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "verify NAME|CHECKPOINT",
		Short: "Recompute checkpoints' state hashes from the store and compare",
		Long: `Recompute the state hash of a checkpoint — or of every checkpoint of a
sandbox, when NAME names one — reading every block and checking its
checksums, and compare it with the hash recorded at checkpoint time.
Exits 1 if any checkpoint fails. A checkpoint recorded before a plan apply
wrote onto the base is listed as stale: the base it lay over is gone.`,
		Args: exactArgs("NAME|CHECKPOINT"),
		RunE: func(cmd *cobra.Command, args []string) error { return runVerify(g, args[0]) },
	}
}

func runVerify(g *globals, ref string) error {
	var rs []control.VerifyReport
	if err := g.call("verify "+ref, "", control.OpVerify, control.VerifyArgs{Ref: ref}, &rs); err != nil {
		return err
	}
	failed := 0
	for _, r := range rs {
		if !r.OK && !r.BaseChanged {
			failed++
		}
	}
	if g.json {
		if rs == nil {
			rs = []control.VerifyReport{}
		}
		if err := printJSON(g.stdout, rs); err != nil {
			return err
		}
	} else {
		for _, r := range rs {
			switch {
			case r.Error != "":
				fmt.Fprintf(g.stdout, "FAIL  %s%s: %s\n", r.Checkpoint, labelSuffix(r.Label), r.Error)
			case r.BaseChanged:
				fmt.Fprintf(g.stdout, "stale %s%s: recorded before a plan apply changed the base\n", r.Checkpoint, labelSuffix(r.Label))
			case !r.OK:
				fmt.Fprintf(g.stdout, "FAIL  %s%s: state hash %.12s, recorded %.12s\n", r.Checkpoint, labelSuffix(r.Label), r.Computed, r.Recorded)
			default:
				fmt.Fprintf(g.stdout, "ok    %s%s\n", r.Checkpoint, labelSuffix(r.Label))
			}
		}
		if len(rs) == 0 {
			fmt.Fprintf(g.stdout, "%s has no checkpoints to verify\n", ref)
		}
	}
	if failed > 0 {
		return &cliError{what: "verify " + ref, err: fmt.Errorf("%d of %d checkpoints failed", failed, len(rs)),
			hint: "roll back to a checkpoint that verifies; the failing ones name what could not be read"}
	}
	return nil
}
