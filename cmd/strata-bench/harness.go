package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// quickScale shrinks every workload about 50x (-quick).
const quickScale = 0.02

type config struct {
	Targets   []string // requested targets; native is added as the baseline
	Workloads []string
	Scale     float64 // 1 = full sizes
	Reps      int
	StrataBin string // "" = build ./cmd/strata of the enclosing module
	WorkDir   string // "" = a fresh directory under /var/tmp, removed at the end
	Keep      bool   // keep the work directory
	Timeout   time.Duration
	Log       io.Writer // progress lines; nil = discard
}

func (c *config) validate() error {
	for _, t := range c.Targets {
		if driverByName(t) == nil {
			return fmt.Errorf("unknown target %q (have %s)", t, strings.Join(allTargets, ", "))
		}
	}
	if len(c.Workloads) == 0 {
		return errors.New("no workloads")
	}
	for _, w := range c.Workloads {
		if workloadByName(w) == nil {
			return fmt.Errorf("unknown workload %q (have %s)", w, strings.Join(workloadNames(), ", "))
		}
	}
	if c.Scale <= 0 || c.Scale > 16 {
		return fmt.Errorf("-size %g out of range (0, 16]", c.Scale)
	}
	if c.Reps < 1 {
		return fmt.Errorf("-reps %d: need at least 1", c.Reps)
	}
	if c.Timeout <= 0 {
		c.Timeout = 30 * time.Minute
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// harness runs one benchmark. Everything it mounts is registered in cleanup,
// so finish can take it down from any path, including a signal handler.
type harness struct {
	cfg   config
	sz    sizes
	work  string // work directory
	owned bool   // work was created by us and is removed by finish

	strataBin string // resolved strata binary, when the strata target runs
	selfExe   string // this binary, for -serve-loopback
	goBin     string

	dropErr error // why caches could not be dropped; nil when they can

	mu       sync.Mutex
	cleanups []*instance // live instances, oldest first
	notes    []string
}

func newHarness(cfg config) *harness {
	return &harness{cfg: cfg, sz: scaledSizes(cfg.Scale)}
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.cfg.Log, "strata-bench: "+format+"\n", args...)
}

func (h *harness) note(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := fmt.Sprintf(format, args...)
	if !slices.Contains(h.notes, n) {
		h.notes = append(h.notes, n)
	}
}

// track registers a live instance so finish can take it down.
func (h *harness) track(in *instance) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cleanups = append(h.cleanups, in)
}

func (h *harness) untrack(in *instance) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cleanups = slices.DeleteFunc(h.cleanups, func(x *instance) bool { return x == in })
}

// finish takes down every live instance, newest first, and removes the work
// directory if we made it and nothing is still mounted below it. force skips
// polite unmounts and detaches at once (signal path). Safe to call twice.
func (h *harness) finish(force bool) {
	h.mu.Lock()
	live := slices.Clone(h.cleanups)
	h.mu.Unlock()
	for i := len(live) - 1; i >= 0; i-- {
		if err := live[i].teardown(force); err != nil {
			h.logf("cleanup %s: %v", live[i].name, err)
		}
	}
	if h.work == "" || !h.owned || h.cfg.Keep {
		return
	}
	if m := mountsUnder(h.work); len(m) > 0 {
		h.logf("not removing %s: still mounted: %s", h.work, strings.Join(m, " "))
		return
	}
	if err := os.RemoveAll(h.work); err != nil {
		h.logf("remove work dir: %v", err)
	}
}

func (h *harness) prepareWork() error {
	if h.cfg.WorkDir != "" {
		if err := os.MkdirAll(h.cfg.WorkDir, 0o755); err != nil {
			return err
		}
		abs, err := filepath.Abs(h.cfg.WorkDir)
		if err != nil {
			return err
		}
		h.work = abs
	} else {
		dir, err := os.MkdirTemp("/var/tmp", "strata-bench-")
		if err != nil {
			return err
		}
		h.work, h.owned = dir, true
	}
	if fsType(h.work) == "tmpfs" {
		h.note("The work directory %s is on tmpfs: native and overlay figures do not reflect a disk.", h.work)
	}
	for _, d := range []string{"fixtures", "runs"} {
		if err := os.MkdirAll(filepath.Join(h.work, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// run executes every requested workload on every usable target.
func (h *harness) run(ctx context.Context) (rep *report, err error) {
	defer h.finish(false)
	if err := h.prepareWork(); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	h.logf("work dir %s, scale %g, %d repetition(s)", h.work, h.cfg.Scale, h.cfg.Reps)
	h.selfExe, _ = os.Executable()
	h.goBin = findGo()
	if err := dropCaches(); err != nil {
		h.dropErr = err
		h.note("Caches could not be dropped (%v): \"cold\" figures are not cold.", err)
	}

	rep = &report{Meta: h.meta()}
	var usable []*driver
	for _, d := range h.selectedDrivers() {
		st := h.checkTarget(ctx, d)
		rep.Targets = append(rep.Targets, st)
		if st.Status == statusOK {
			usable = append(usable, d)
			rep.Columns = append(rep.Columns, d.name)
		}
		h.logf("target %s: %s", d.name, st.String())
	}
	if len(usable) == 0 || usable[0].name != "native" {
		return nil, errors.New("the native baseline is not usable")
	}

	acc := newAccumulator()
	for _, name := range h.cfg.Workloads {
		w := workloadByName(name)
		base, err := h.fixture(w.fixture(h.sz))
		if err != nil {
			return nil, fmt.Errorf("fixture for %s: %w", w.name, err)
		}
		for r := 0; r < h.cfg.Reps; r++ {
			for _, d := range usable {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				samples, stored, err := h.runOne(ctx, w, d, base, r)
				if err != nil {
					h.logf("%s on %s (rep %d): %v", w.name, d.name, r+1, err)
					acc.fail(w, d.name, err)
					continue
				}
				for _, s := range samples {
					h.logf("%s on %s (rep %d): %s", rowName(w.name, s.phase), d.name, r+1, fmtSeconds(s.dur.Seconds()))
				}
				acc.add(w, d.name, samples, stored)
			}
		}
	}
	h.mu.Lock()
	rep.Notes = slices.Clone(h.notes)
	h.mu.Unlock()
	rep.fill(acc, h.cfg.Workloads)
	rep.Meta.LoadEnd = loadAverage()
	return rep, nil
}

// runOne sets up a fresh target over base, runs the workload once, takes the
// target down and measures how much its storage grew.
func (h *harness) runOne(ctx context.Context, w *workload, d *driver, base string, rep int) (samples []sample, stored int64, err error) {
	dir, err := os.MkdirTemp(filepath.Join(h.work, "runs"), fmt.Sprintf("%s-%s-%d-", d.name, w.name, rep+1))
	if err != nil {
		return nil, 0, err
	}
	in, err := h.setup(ctx, d, base, dir)
	if err != nil {
		h.removeRun(dir)
		return nil, 0, fmt.Errorf("setup: %w", err)
	}
	var before int64
	if in.storage != "" {
		before = duBytes(in.storage)
	}
	defer func() {
		if terr := in.teardown(false); terr != nil && err == nil {
			err = fmt.Errorf("teardown: %w", terr)
		}
		if err == nil && in.storage != "" {
			// Measured after teardown, so whatever the target flushes on
			// unmount counts too.
			stored = duBytes(in.storage) - before
		}
		h.removeRun(dir)
	}()
	// Start every run from the same state: nothing dirty, nothing cached.
	// Dropping caches also matters for ext4 without a journal (as on our
	// VMs): its inode allocator skips inodes deleted in the last minutes
	// while their inode table blocks are cached, scanning thousands of them
	// per create after a mass delete (ialloc.c recently_deleted), which made
	// small-files creates 6x slower in every repetition after the first.
	_ = dropCaches() // when it fails, it has still synced; the note says so

	// Watchdog: a wedged FUSE server would block the workload forever.
	var timedOut atomic.Bool
	timer := time.AfterFunc(h.cfg.Timeout, func() {
		timedOut.Store(true)
		h.logf("%s on %s exceeded %v: forcing the mount down", w.name, d.name, h.cfg.Timeout)
		_ = in.teardown(true)
	})
	defer timer.Stop()
	e := &env{root: in.root, sz: h.sz, goBin: h.goBin, h: h}
	samples, err = w.run(ctx, e)
	if timedOut.Load() {
		return nil, 0, fmt.Errorf("exceeded -timeout %v, mount forced down: %v", h.cfg.Timeout, err)
	}
	return samples, 0, err
}

func (h *harness) removeRun(dir string) {
	if m := mountsUnder(dir); len(m) > 0 {
		h.logf("not removing %s: still mounted: %s", dir, strings.Join(m, " "))
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		h.logf("remove %s: %v", dir, err)
	}
}

func (h *harness) selectedDrivers() []*driver {
	want := map[string]bool{"native": true}
	for _, t := range h.cfg.Targets {
		want[t] = true
	}
	var ds []*driver
	for _, name := range allTargets {
		if want[name] {
			ds = append(ds, driverByName(name))
		}
	}
	return ds
}

func (h *harness) meta() meta {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	return meta{
		Date:      time.Now().UTC().Format(time.RFC3339),
		Kernel:    unix.ByteSliceToString(uts.Release[:]),
		CPUs:      runtime.NumCPU(),
		Go:        runtime.Version(),
		WorkDir:   h.work,
		WorkFS:    fsType(h.work),
		Scale:     h.cfg.Scale,
		Reps:      h.cfg.Reps,
		ColdRead:  h.dropErr == nil,
		LoadStart: loadAverage(),
	}
}

// loadAverage is the 1-minute load average, or -1 if unknown.
func loadAverage() float64 {
	var info unix.Sysinfo_t
	if unix.Sysinfo(&info) != nil {
		return -1
	}
	return float64(info.Loads[0]) / (1 << unix.SI_LOAD_SHIFT)
}

// accumulator gathers per-run results until the report is built.
type accumulator struct {
	runs   map[string][]sample // key: workload|phase|target
	stored map[string][]int64  // key: workload|target
	errs   map[string][]string // key: workload|target
}

func newAccumulator() *accumulator {
	return &accumulator{runs: map[string][]sample{}, stored: map[string][]int64{}, errs: map[string][]string{}}
}

func (a *accumulator) add(w *workload, target string, samples []sample, stored int64) {
	for _, s := range samples {
		k := w.name + "|" + s.phase + "|" + target
		a.runs[k] = append(a.runs[k], s)
	}
	k := w.name + "|" + target
	a.stored[k] = append(a.stored[k], stored)
}

func (a *accumulator) fail(w *workload, target string, err error) {
	k := w.name + "|" + target
	a.errs[k] = append(a.errs[k], err.Error())
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
