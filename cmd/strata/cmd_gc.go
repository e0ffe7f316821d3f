package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

func newGCCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "gc [NAME]",
		Short: "Remove the layers and block data nothing needs any more",
		Long: `Remove every layer that no sandbox, checkpoint, archive or fork stands on,
and the data files of layers that no longer exist. Collection covers the
whole store (layers are shared between forks); NAME, if given, must name a
sandbox. A crash part way leaves nothing a sandbox needs removed: the records
go in one transaction, the data after it.`,
		Args: maxArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return runGC(g, name)
		},
	}
}

func runGC(g *globals, name string) error {
	var r layers.GCResult
	if err := g.call("gc", name, control.OpGC, control.NameArgs{Name: name}, &r); err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, r)
	}
	_, err := fmt.Fprintf(g.stdout, "removed %d layers and %d data files; freed %s\n", len(r.Layers), r.DataFiles, humanSize(r.BytesFreed))
	return err
}
