package main

import (
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

// serveCommandName is the hidden command a background server runs as.
const serveCommandName = "__serve"

// serveIdleGrace is how long a new background server waits for its first
// mount before it exits.
const serveIdleGrace = 30 * time.Second

// retentionEnv says how often a server applies the default retention
// policy (the last 100 checkpoints and those of the last 7 days) to the
// sandboxes it serves: a duration such as 30m or 24h, or off. A background
// server takes it from the environment of the `strata mount` that starts
// it.
const retentionEnv = "STRATA_RETENTION_EVERY"

// defaultRetention is how often when retentionEnv is not set.
const defaultRetention = time.Hour

// retentionEvery reads retentionEnv: 0 for off.
func retentionEvery() (time.Duration, error) {
	v := os.Getenv(retentionEnv)
	switch v {
	case "":
		return defaultRetention, nil
	case "0", "off":
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 1h or 24h, or off: %w", retentionEnv, v, layers.ErrInvalid)
	}
	return d, nil
}

func newServeCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:    serveCommandName,
		Short:  "Serve the store's mounts and control socket (started by mount)",
		Hidden: true,
		Args:   exactArgs(),
		RunE:   func(cmd *cobra.Command, args []string) error { return runServe(g) },
	}
}

// runServe is the background server: it holds the store, serves its
// mounts and socket, and exits when the last mount goes away or on
// SIGINT/SIGTERM, after unmounting everything cleanly. Its output is the
// server log.
func runServe(g *globals) error {
	lg := log.New(g.stderr, fmt.Sprintf("strata[%d] ", os.Getpid()), log.LstdFlags)
	if stop := startProfile(lg); stop != nil {
		defer stop()
	}
	every, err := retentionEvery()
	if err != nil {
		lg.Printf("%v", err)
		return fail("serve", err, "")
	}
	signal.Ignore(syscall.SIGHUP)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	st, err := layers.Open(g.store)
	if err != nil {
		lg.Printf("open store: %v", err)
		return fail("serve", err, "")
	}
	defer st.Close()
	if cleaned, err := control.CleanStaleMounts(st.Dir()); err != nil {
		lg.Printf("clean stale mounts: %v", err)
	} else {
		for _, m := range cleaned {
			lg.Printf("detached the dead mount of %s at %s", m.Sandbox, m.Mountpoint)
		}
	}
	srv := control.NewServer(st, control.Options{ExitWhenIdle: true, IdleGrace: serveIdleGrace, Logger: lg, Retention: every})
	if err := srv.Listen(); err != nil {
		lg.Printf("%v", err)
		return fail("serve", err, "")
	}
	lg.Printf("serving %s", st.Dir())
	go func() {
		select {
		case s := <-sigs:
			lg.Printf("%v: unmounting everything", s)
			srv.Shutdown()
		case <-srv.Done():
		}
	}()
	if err := srv.Serve(); err != nil {
		return fail("serve", err, "")
	}
	if err := st.Close(); err != nil {
		lg.Printf("close store: %v", err)
		return fail("serve", err, "")
	}
	lg.Printf("exiting")
	return nil
}

// profileEnv names a file the server writes a CPU profile of its whole
// life to (go tool pprof): the way to see where a mount's time goes under
// a real workload.
const profileEnv = "STRATA_CPUPROFILE"

// startProfile starts the CPU profile profileEnv asks for; the function it
// returns stops it. Without the variable it returns nil.
func startProfile(lg *log.Logger) func() {
	path := os.Getenv(profileEnv)
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		lg.Printf("%s: %v", profileEnv, err)
		return nil
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		lg.Printf("%s: %v", profileEnv, err)
		f.Close()
		return nil
	}
	lg.Printf("writing a CPU profile to %s", path)
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
