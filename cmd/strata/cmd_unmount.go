package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

func newUnmountCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "unmount NAME|MOUNTPOINT",
		Aliases: []string{"umount"},
		Short:   "Flush and detach a mounted sandbox",
		Args:    exactArgs("NAME|MOUNTPOINT"),
		RunE:    func(cmd *cobra.Command, args []string) error { return runUnmount(g, args[0]) },
	}
}

// unmountArgs reads target as a sandbox name where it can be one, and as a
// path in any case; the server tries the name first.
func unmountArgs(target string) control.UnmountArgs {
	var a control.UnmountArgs
	if layers.ValidName(target) && !strings.Contains(target, "/") {
		a.Name = target
	}
	if abs, err := filepath.Abs(target); err == nil {
		a.Mountpoint = abs
		if real, err := filepath.EvalSymlinks(abs); err == nil {
			a.Mountpoint = real
		}
	}
	return a
}

func runUnmount(g *globals, target string) error {
	what := "unmount " + target
	args := unmountArgs(target)
	c, st, err := g.reach()
	if err != nil {
		return fail(what, err, target)
	}
	var info control.MountInfo
	if c != nil {
		err = c.Call(control.OpUnmount, args, &info)
		c.Close()
	} else {
		// Nothing serves the store: at most a dead server left its mounts.
		info, err = unmountStale(st, args, target)
	}
	if err != nil {
		return fail(what, err, target)
	}
	if g.json {
		return printJSON(g.stdout, info)
	}
	note := ""
	if info.Stale {
		note = " (its server had died; detached it)"
	}
	_, err = fmt.Fprintf(g.stdout, "unmounted %s from %s%s\n", info.Sandbox, info.Mountpoint, note)
	return err
}

func unmountStale(st *layers.Store, a control.UnmountArgs, target string) (control.MountInfo, error) {
	defer st.Close()
	cleaned, err := control.CleanStaleMounts(st.Dir())
	for _, m := range cleaned {
		if (a.Name != "" && m.Sandbox == a.Name) || m.Mountpoint == a.Mountpoint {
			return m, err
		}
	}
	if err != nil {
		return control.MountInfo{}, err
	}
	return control.MountInfo{}, control.ErrNotMounted
}
