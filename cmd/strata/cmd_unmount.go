package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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
	var res control.UnmountResult
	if c != nil {
		err = c.Call(control.OpUnmount, args, &res)
		pid := c.PID()
		c.Close()
		if err == nil && res.ServerExits {
			// The server exits with its last mount: return once it has
			// let go of the store, so that the next command can open it.
			if err := waitExit(pid, serverExitTimeout); err != nil {
				return &cliError{what: what, err: err, hint: "see " + g.serverLog()}
			}
		}
	} else {
		// Nothing serves the store: at most a dead server left its mounts.
		res.MountInfo, err = unmountStale(st, args, target)
	}
	if err != nil {
		return fail(what, err, target)
	}
	info := res.MountInfo
	if g.json {
		return printJSON(g.stdout, res)
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

// serverExitTimeout bounds how long unmount waits for a server that exits
// with its last mount to release the store: a close flushes the store's
// tables, which takes a moment on a loaded machine, never this long.
const serverExitTimeout = 30 * time.Second

// waitExit waits until process pid has exited (a zombie counts: it holds
// no files, so no store lock), for at most d.
func waitExit(pid int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !processExited(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the mount is gone, but its server (pid %d) still holds the store after %v", pid, d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// processExited reports whether process pid is gone or a zombie.
func processExited(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// "pid (comm) S ...": the state follows the last ')'; comm may hold
	// anything, parentheses too.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}
