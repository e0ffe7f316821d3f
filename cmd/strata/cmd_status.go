package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

func newStatusCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status [NAME]",
		Short: "Show the store's server and mounts, or one sandbox's",
		Args:  maxArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			}
			return runStatus(g, name)
		},
	}
}

func runStatus(g *globals, name string) error {
	what := "status"
	if name != "" {
		what += " of " + name
	}
	s, err := g.connect()
	if err != nil {
		return fail(what, err, name)
	}
	defer s.Close()
	if l, ok := s.(*localSession); ok {
		// No server: mounts a dead one left are detached first, so that
		// the kernel's table says what status does.
		if _, err := control.CleanStaleMounts(l.st.Dir()); err != nil {
			return fail(what, err, name)
		}
	}
	var st control.Status
	if err := s.Call(control.OpStatus, control.NameArgs{Name: name}, &st); err != nil {
		return fail(what, err, name)
	}
	if g.json {
		return printJSON(g.stdout, st)
	}
	server := "not running"
	if st.Server {
		server = fmt.Sprintf("running (pid %d)", st.PID)
	}
	fmt.Fprintf(g.stdout, "store:   %s\nserver:  %s\n", st.Store, server)
	if st.Sandbox != nil {
		state := "not mounted"
		if st.Sandbox.Mounted {
			state = "mounted at " + st.Sandbox.Mountpoint
		}
		fmt.Fprintf(g.stdout, "sandbox: %s, %s\n", st.Sandbox.Name, state)
		return nil
	}
	if len(st.Mounts) == 0 {
		_, err := fmt.Fprintln(g.stdout, "mounts:  none")
		return err
	}
	fmt.Fprintln(g.stdout)
	rows := make([][]string, 0, len(st.Mounts))
	for _, m := range st.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		if m.NoExec {
			mode += ",noexec"
		}
		rows = append(rows, []string{m.Sandbox, m.Mountpoint, mode, formatTime(m.Since)})
	}
	return table(g.stdout, []string{"SANDBOX", "MOUNTPOINT", "MODE", "SINCE"}, rows)
}
