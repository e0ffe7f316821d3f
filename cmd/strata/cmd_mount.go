package main

import (
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

// mountOptions are the arguments of `mount`.
type mountOptions struct {
	name       string
	mountpoint string
	foreground bool
	retention  time.Duration // how often the server applies the retention policy
	readOnly   bool
	allowOther bool
	noExec     bool
}

func (o *mountOptions) AddFlags(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&o.foreground, "foreground", false, "serve the mount in this process until SIGINT/SIGTERM or unmount")
	cmd.Flags().BoolVar(&o.readOnly, "read-only", false, "mount read-only")
	cmd.Flags().BoolVar(&o.allowOther, "allow-other", false, "let other users in (the kernel still checks permissions)")
	cmd.Flags().BoolVar(&o.noExec, "no-exec", false, "refuse to execute programs from the sandbox (noexec)")
}

func newMountCommand(g *globals) *cobra.Command {
	o := &mountOptions{}
	cmd := &cobra.Command{
		Use:   "mount NAME MOUNTPOINT [--foreground] [--read-only] [--allow-other] [--no-exec]",
		Short: "Mount a sandbox; returns once the mount is live",
		Long: `Mount a sandbox at MOUNTPOINT.

Without --foreground the mount is served by the store's background server
(started if none runs) and the command returns once the mount is live; the
server exits when its last mount goes away. With --foreground this process
serves the mount until SIGINT, SIGTERM or ` + "`strata unmount`" + `.

The serving process applies the default retention policy (the last 100
checkpoints and those of the last 7 days stay, as with ` + "`strata checkpoint prune`" + `)
to the sandboxes it serves, a minute after it starts and then every hour;
STRATA_RETENTION_EVERY in the environment sets how often (30m, 24h) or
turns it off (off).

mount(8) and /etc/fstab mount sandboxes too, as file system type
fuse.strata (see ` + "`strata help mount-helper`" + `).`,
		Args: exactArgs("NAME", "MOUNTPOINT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name, o.mountpoint = args[0], args[1]
			// Checked here, not only by the server it may start, so
			// that a bad value fails the mount with a clear line.
			every, err := retentionEvery()
			if err != nil {
				return usageErrorf(cmd, "%v", err)
			}
			o.retention = every
			if o.foreground {
				return runMountForeground(g, o)
			}
			return runMount(g, o)
		},
	}
	o.AddFlags(cmd)
	return cmd
}

func (o *mountOptions) args() (control.MountArgs, error) {
	mp, err := filepath.Abs(o.mountpoint)
	if err != nil {
		return control.MountArgs{}, err
	}
	return control.MountArgs{Name: o.name, Mountpoint: mp, ReadOnly: o.readOnly, AllowOther: o.allowOther, NoExec: o.noExec}, nil
}

// runMount has the store's server mount the sandbox, starting a server
// first when none runs.
func runMount(g *globals, o *mountOptions) error {
	what := fmt.Sprintf("mount %s", o.name)
	args, err := o.args()
	if err != nil {
		return fail(what, err, o.name)
	}
	for attempt := 0; ; attempt++ {
		var info control.MountInfo
		c, err := mountServer(g, args)
		if err == nil {
			err = c.Call(control.OpMount, args, &info)
			c.Close()
		}
		if errors.Is(err, control.ErrShuttingDown) && attempt < 5 {
			// The server was exiting as we asked; the next one will do.
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil {
			return fail(what, err, hintTarget(err, o))
		}
		return printMounted(g, info)
	}
}

// hintTarget is what a hint about a failed mount names: the mountpoint when
// it is the mountpoint that is wrong, else the sandbox.
func hintTarget(err error, o *mountOptions) string {
	if errors.Is(err, control.ErrBusy) {
		return o.mountpoint
	}
	return o.name
}

// mountServer returns a client of the server that is to serve the mount.
// When none runs, it checks what it can with the store in hand (so that a
// doomed mount starts no server) and starts one.
func mountServer(g *globals, args control.MountArgs) (*control.Client, error) {
	c, st, err := g.reach()
	if err != nil {
		return nil, err
	}
	if c != nil {
		return c, nil
	}
	_, cleanErr := control.CleanStaleMounts(st.Dir())
	_, err = st.Sandbox(args.Name)
	st.Close()
	if err != nil {
		return nil, err
	}
	if cleanErr != nil {
		return nil, cleanErr
	}
	if err := control.CheckFuseDevice(args.AllowOther); err != nil {
		return nil, err
	}
	if _, err := control.CheckMountpoint(args.Mountpoint); err != nil {
		return nil, err
	}
	return g.startServer()
}

func printMounted(g *globals, info control.MountInfo) error {
	if g.json {
		return printJSON(g.stdout, info)
	}
	mode := ""
	if info.ReadOnly {
		mode = " read-only"
	}
	if info.NoExec {
		mode += " noexec"
	}
	_, err := fmt.Fprintf(g.stdout, "mounted %s at %s%s (served by pid %d)\n", info.Sandbox, info.Mountpoint, mode, info.PID)
	return err
}

// runMountForeground serves the mount in this process, and the store's
// socket with it, until a signal or an unmount; then it unmounts cleanly.
func runMountForeground(g *globals, o *mountOptions) error {
	what := fmt.Sprintf("mount %s", o.name)
	args, err := o.args()
	if err != nil {
		return fail(what, err, o.name)
	}
	c, st, err := g.reach()
	if err != nil {
		return fail(what, err, o.name)
	}
	if c != nil {
		pid := c.PID()
		c.Close()
		return &cliError{what: what, err: fmt.Errorf("the store is served by another strata process (pid %d)", pid),
			hint: "mount without --foreground to have that process serve it"}
	}
	defer st.Close()
	lg := log.New(g.stderr, "strata: ", 0)
	if cleaned, err := control.CleanStaleMounts(st.Dir()); err != nil {
		lg.Printf("clean stale mounts: %v", err)
	} else {
		for _, m := range cleaned {
			lg.Printf("detached the dead mount of %s at %s", m.Sandbox, m.Mountpoint)
		}
	}
	srv := control.NewServer(st, control.Options{ExitWhenIdle: true, Retention: o.retention})
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var info control.MountInfo
	if err := srv.Call(control.OpMount, args, &info); err != nil {
		srv.Shutdown()
		return fail(what, err, hintTarget(err, o))
	}
	// Listen only now: a client that came and went during the mount
	// would otherwise find the server idle and end it.
	if err := srv.Listen(); err != nil {
		srv.Shutdown()
		return fail(what, err, o.name)
	}
	if err := printMounted(g, info); err != nil {
		srv.Shutdown()
		return err
	}
	go func() {
		select {
		case <-sigs:
			srv.Shutdown()
		case <-srv.Done():
		}
	}()
	if err := srv.Serve(); err != nil {
		return fail(what, err, o.name)
	}
	if err := st.Close(); err != nil {
		return fail("close store "+g.store, err, "")
	}
	if !g.json {
		fmt.Fprintf(g.stdout, "unmounted %s from %s\n", info.Sandbox, info.Mountpoint)
	}
	return nil
}
