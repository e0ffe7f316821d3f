// Command strata-bench runs the same file-system workloads on several
// targets side by side — a plain directory (native), kernel overlayfs,
// fuse-overlayfs, go-fuse's loopback and strata — and prints how each
// target's time and storage compare with native, as Markdown or JSON.
//
// With -suite checkpoint it measures checkpoint and rollback instead:
// Strata through its Go API and its CLI, side by side with git commits,
// cp -a copies and btrfs snapshots of the same workspace (see ckpt.go).
//
// Every target gets an identical, deterministically generated base for each
// workload, and every repetition runs on a fresh target. Mounts are taken
// down on return, on error, on panic and on SIGINT/SIGTERM/SIGHUP.
//
// Usage:
//
//	strata-bench [-targets native,overlayfs,...] [-workloads ...] [-quick]
//	             [-size SCALE] [-reps N] [-strata BIN] [-work DIR] [-out FILE] [-json]
//	strata-bench -suite checkpoint [-peers strata-api,git,...] [-files 1000,50000]
//	             [-rounds N] [-changes N] [-budget D] [-quick] [-strata BIN] [-out FILE] [-json]
//	strata-bench -serve-loopback DIR MNT   # internal: serve a go-fuse loopback
//
// It needs root for overlayfs, drop_caches and direct FUSE mounts.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("strata-bench", flag.ContinueOnError)
	fl.SetOutput(stderr)
	var (
		targets   = fl.String("targets", strings.Join(allTargets, ","), "comma-separated targets; native is always run as the baseline")
		workloads = fl.String("workloads", strings.Join(workloadNames(), ","), "comma-separated workloads")
		quick     = fl.Bool("quick", false, "shrink every workload ~50x and run 1 repetition (for tests)")
		scale     = fl.Float64("size", 1, "scale factor applied to every workload size (1 = full sizes)")
		reps      = fl.Int("reps", 3, "repetitions per workload and target; the median is reported")
		strataBin = fl.String("strata", "", "path to the strata binary (default: build ./cmd/strata of the enclosing module)")
		work      = fl.String("work", "", "work directory for fixtures and targets (default: a new directory under /var/tmp, removed afterwards); not tmpfs")
		keep      = fl.Bool("keep", false, "keep the work directory")
		out       = fl.String("out", "", "also write the report to this file")
		asJSON    = fl.Bool("json", false, "print the report as JSON instead of Markdown")
		timeout   = fl.Duration("timeout", 30*time.Minute, "abort a single workload run after this long (its mount is force-detached)")
		serveLoop = fl.Bool("serve-loopback", false, "internal: serve a go-fuse loopback of DIR at MNT until unmounted")
		suite     = fl.String("suite", "fs", "fs: file-system workloads on each target; checkpoint: checkpoint and rollback against git, cp -a and btrfs")
		ckpt      = addCkptFlags(fl)
	)
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *serveLoop {
		if fl.NArg() != 2 {
			fmt.Fprintln(stderr, "strata-bench: -serve-loopback needs DIR MNT")
			return 2
		}
		if err := serveLoopback(fl.Arg(0), fl.Arg(1), os.Stdout); err != nil {
			fmt.Fprintf(stderr, "strata-bench: serve loopback: %v\n", err)
			return 1
		}
		return 0
	}
	if fl.NArg() != 0 {
		fmt.Fprintf(stderr, "strata-bench: unexpected arguments %q\n", fl.Args())
		return 2
	}
	set := map[string]bool{}
	fl.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *suite != "fs" && *suite != "checkpoint" {
		fmt.Fprintf(stderr, "strata-bench: -suite %q: want fs or checkpoint\n", *suite)
		return 2
	}
	var cc ckptConfig
	if *suite == "checkpoint" {
		var err error
		if cc, err = ckpt.config(set, *quick, args); err != nil {
			fmt.Fprintf(stderr, "strata-bench: %v\n", err)
			return 2
		}
	} else {
		for _, n := range ckpt.names {
			if set[n] {
				fmt.Fprintf(stderr, "strata-bench: -%s belongs to -suite checkpoint\n", n)
				return 2
			}
		}
	}
	cfg := config{
		Targets:   splitList(*targets),
		Workloads: splitList(*workloads),
		Scale:     *scale,
		Reps:      *reps,
		StrataBin: *strataBin,
		WorkDir:   *work,
		Keep:      *keep,
		Timeout:   *timeout,
		Log:       stderr,
	}
	if *quick {
		if !set["size"] {
			cfg.Scale = quickScale
		}
		if !set["reps"] {
			cfg.Reps = 1
		}
	}
	if err := cfg.validate(); err != nil {
		fmt.Fprintf(stderr, "strata-bench: %v\n", err)
		return 2
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHarness(cfg)

	// On a signal: stop, force every mount down, remove the work dir, exit.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigc)
	go func() {
		s, ok := <-sigc
		if !ok {
			return
		}
		fmt.Fprintf(stderr, "strata-bench: %v: cleaning up\n", s)
		cancel()
		h.finish(true)
		code := 128
		if n, ok := s.(syscall.Signal); ok {
			code += int(n)
		}
		os.Exit(code)
	}()

	var rep suiteReport
	var err error
	if *suite == "checkpoint" {
		rep, err = h.runCheckpoint(ctx, cc)
	} else {
		rep, err = h.run(ctx)
	}
	if err != nil {
		fmt.Fprintf(stderr, "strata-bench: %v\n", err)
		return 1
	}
	var text []byte
	if *asJSON {
		text, err = rep.JSON()
		if err != nil {
			fmt.Fprintf(stderr, "strata-bench: %v\n", err)
			return 1
		}
	} else {
		text = []byte(rep.Markdown())
	}
	if _, err := stdout.Write(text); err != nil {
		return 1
	}
	if *out != "" {
		if err := os.WriteFile(*out, text, 0o644); err != nil {
			fmt.Fprintf(stderr, "strata-bench: %v\n", err)
			return 1
		}
	}
	if errs := rep.errorCount(); errs > 0 {
		fmt.Fprintf(stderr, "strata-bench: %d run(s) failed; see the report\n", errs)
	}
	return 0
}

// suiteReport is what a suite's run returns.
type suiteReport interface {
	Markdown() string
	JSON() ([]byte, error)
	errorCount() int
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
