package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

func newFsckCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "fsck",
		Short: "Check the whole store: records, layer stacks, trees and every block's checksums",
		Long: `Check the whole store: every record decodes, every sandbox's stack of layers
is whole, every sandbox's tree leads to inodes that load, and every stored
block matches its checksums. Problems are listed with the sandbox and path
they affect where fsck can tell; nothing is repaired and no data is dropped.

When the store is served (something is mounted), the check runs in the
server, after the live mounts have been synced. Exits 1 if any problem is
found.`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error { return runFsck(g) },
	}
}

func runFsck(g *globals) error {
	p := g.startProgress("fsck: checking " + g.store)
	var r control.FsckResult
	err := g.call("fsck", "", control.OpFsck, nil, &r)
	p.Stop()
	if err != nil {
		return err
	}
	if g.json {
		if err := printJSON(g.stdout, r); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(g.stdout, "checked %d sandboxes: %d layers, %d inodes, %d entries, %d blocks, %d paths\n",
			r.Sandboxes, r.Layers, r.Inodes, r.Entries, r.Blocks, r.Paths)
		if n := len(r.Dropping); n > 0 {
			fmt.Fprintf(g.stdout, "%d layers were being dropped when a gc was interrupted; `strata gc` finishes them\n", n)
		}
		if len(r.Problems) == 0 {
			fmt.Fprintln(g.stdout, "no problems found")
		}
		for _, pr := range r.Problems {
			fmt.Fprintln(g.stdout, problemLine(pr))
		}
	}
	if n := len(r.Problems); n > 0 {
		return &cliError{what: "fsck", err: fmt.Errorf("%d problems found", n),
			hint: "fsck repaired nothing; roll the affected sandboxes back to a checkpoint that `strata verify` passes, or restore the named paths"}
	}
	return nil
}

// problemLine prints one problem: its kind, where it is (sandbox, path,
// layer, inode — what fsck could tell) and what is wrong.
func problemLine(p layers.Problem) string {
	var where []string
	if p.Sandbox != "" {
		where = append(where, "sandbox "+p.Sandbox)
	}
	if p.Path != "" {
		where = append(where, "path "+p.Path)
	}
	if p.Layer != "" {
		where = append(where, "layer "+p.Layer)
	}
	if p.Ino != 0 {
		where = append(where, fmt.Sprintf("inode %d", p.Ino))
	}
	if len(where) == 0 {
		where = append(where, "store")
	}
	return fmt.Sprintf("%-9s %s: %s", p.Kind, strings.Join(where, ", "), p.Detail)
}
