package main

import (
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

func newArchiveCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "archive",
		Short: "List, export and restore the states rollbacks left behind",
		Args:  cobra.ArbitraryArgs,
		RunE:  groupRun,
	}
	cmd.AddCommand(newArchiveListCommand(g), newArchiveExportCommand(g), newArchiveRestoreCommand(g))
	return cmd
}

func newArchiveListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list NAME",
		Aliases: []string{"ls"},
		Short:   "List a sandbox's archives, oldest first",
		Args:    exactArgs("NAME"),
		RunE:    func(cmd *cobra.Command, args []string) error { return runArchiveList(g, args[0]) },
	}
}

func runArchiveList(g *globals, name string) error {
	var ars []checkpoint.Archive
	if err := g.call("list archives of "+name, name, control.OpArchiveList, control.NameArgs{Name: name}, &ars); err != nil {
		return err
	}
	if g.json {
		if ars == nil {
			ars = []checkpoint.Archive{}
		}
		return printJSON(g.stdout, ars)
	}
	if len(ars) == 0 {
		_, err := fmt.Fprintf(g.stdout, "no archives; a rollback of %s makes one\n", name)
		return err
	}
	rows := make([][]string, 0, len(ars))
	for _, a := range ars {
		restored := "no"
		if a.Restored {
			restored = "yes"
		}
		rows = append(rows, []string{a.ID, formatTime(a.Created), dash(a.FromCheckpoint), dash(a.ToCheckpoint),
			strconv.Itoa(len(a.Layers)), humanSize(a.Bytes), restored})
	}
	return table(g.stdout, []string{"ARCHIVE", "CREATED", "FROM", "TO", "LAYERS", "SIZE", "RESTORED"}, rows)
}

func newArchiveExportCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "export ARCHIVE DIR",
		Short: "Write the files of an archived state into DIR (new or empty)",
		Args:  exactArgs("ARCHIVE", "DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := filepath.Abs(args[1])
			if err != nil {
				return fail("export archive "+args[0], err, "")
			}
			return runArchiveExport(g, control.ExportArgs{Archive: args[0], Dir: dir})
		},
	}
}

func runArchiveExport(g *globals, a control.ExportArgs) error {
	var r control.ExportResult
	p := g.startProgress("export: writing archive " + a.Archive + " into " + a.Dir)
	err := g.call("export archive", "", control.OpArchiveExport, a, &r)
	p.Stop()
	if err != nil {
		return err
	}
	if g.json {
		return printJSON(g.stdout, r)
	}
	_, err = fmt.Fprintf(g.stdout, "exported %d files of archive %s into %s\n", r.Files, r.Archive, r.Dir)
	return err
}

func newArchiveRestoreCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "restore ARCHIVE",
		Short: "Roll the sandbox forward to the state a rollback left (undo it)",
		Long: `Roll a sandbox forward to the state an archive holds: the state the
sandbox had just before the rollback that made the archive. The state it
leaves is archived in turn, so a restore can be undone too. A mounted
sandbox switches in place, as with rollback.`,
		Args: exactArgs("ARCHIVE"),
		RunE: func(cmd *cobra.Command, args []string) error { return runArchiveRestore(g, args[0]) },
	}
}

func runArchiveRestore(g *globals, id string) error {
	var r checkpoint.RollbackResult
	if err := g.call("restore", "", control.OpArchiveRestore, control.IDArgs{ID: id}, &r); err != nil {
		return err
	}
	return printRollback(g, "restored %s to the state after checkpoint %s", r)
}
