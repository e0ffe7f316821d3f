package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// openFDs lists this process's open descriptors with what they point at.
func openFDs(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("list descriptors: %v", err)
	}
	var out []string
	for _, e := range ents {
		// The descriptor ReadDir itself holds is gone by now: readlink fails.
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil {
			continue
		}
		out = append(out, e.Name()+" -> "+target)
	}
	return out
}

// resources is what a leak would grow.
type resources struct {
	goroutines int
	fds        []string
}

func measure(t *testing.T) resources {
	t.Helper()
	return resources{goroutines: runtime.NumGoroutine(), fds: openFDs(t)}
}

// settle waits until the goroutines and descriptors are back to at most
// base plus slack (goroutines of go-fuse, badger and the runtime wind down
// a little after the calls that stop them return) and returns what it
// measured last.
func settle(t *testing.T, base resources, slack int, within time.Duration) (resources, bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		runtime.GC() // finalizers close descriptors of files dropped unclosed
		now := measure(t)
		if now.goroutines <= base.goroutines+slack && len(now.fds) <= len(base.fds)+slack {
			return now, true
		}
		if time.Now().After(deadline) {
			return now, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// quiet measures once the counts stop falling: the lowest of samples
// taken over half a second.
func quiet(t *testing.T) resources {
	t.Helper()
	low := measure(t)
	for i := 0; i < 10; i++ {
		time.Sleep(50 * time.Millisecond)
		runtime.GC()
		if now := measure(t); now.goroutines+len(now.fds) < low.goroutines+len(low.fds) {
			low = now
		}
	}
	return low
}

// newFDs lists the descriptors of now that base does not have.
func newFDs(base, now []string) []string {
	had := map[string]bool{}
	for _, f := range base {
		had[f] = true
	}
	var out []string
	for _, f := range now {
		if !had[f] {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// cycle opens the store, mounts the sandbox, writes through the mount,
// makes a checkpoint, rolls back to it, and undoes all of it.
func cycle(t *testing.T, storeDir, base, mnt string, i int) {
	t.Helper()
	st, err := layers.Open(storeDir)
	if err != nil {
		t.Fatalf("cycle %d: open store: %v", i, err)
	}
	defer st.Close()
	if _, err := st.Sandbox("s"); err != nil {
		if _, err := st.CreateSandbox("s", base, 0); err != nil {
			t.Fatalf("cycle %d: create sandbox: %v", i, err)
		}
	}
	v, err := st.OpenView("s", false)
	if err != nil {
		t.Fatalf("cycle %d: open view: %v", i, err)
	}
	m, err := New(mnt, v, Options{})
	if err != nil {
		v.Close()
		t.Fatalf("cycle %d: mount: %v", i, err)
	}
	unmounted := false
	defer func() {
		if !unmounted {
			m.Unmount()
			v.Close()
		}
	}()
	mgr := checkpoint.New(st, invalidatorFunc(func(string) { m.Invalidate() }))

	kept := fmt.Sprintf("cycle %d", i)
	writeFile(t, filepath.Join(mnt, "kept"), kept)
	// A base file read (passthrough) and a changed one read back.
	readFile(t, filepath.Join(mnt, "base.txt"))
	f, err := os.Open(filepath.Join(mnt, "kept"))
	if err != nil {
		t.Fatalf("cycle %d: %v", i, err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("cycle %d: fsync: %v", i, err)
	}
	cp, err := mgr.Create("s", checkpoint.Options{})
	if err != nil {
		t.Fatalf("cycle %d: checkpoint: %v", i, err)
	}
	writeFile(t, filepath.Join(mnt, "kept"), "rolled back")
	writeFile(t, filepath.Join(mnt, "dir", "gone"), "rolled back")
	if _, err := mgr.Rollback("s", cp.ID); err != nil {
		t.Fatalf("cycle %d: rollback: %v", i, err)
	}
	// A handle opened before the rollback, closed after it.
	f.Close()
	if got := readFile(t, filepath.Join(mnt, "kept")); got != kept {
		t.Fatalf("cycle %d: kept after rollback: got %q, want %q", i, got, kept)
	}
	unmounted = true
	if err := m.Unmount(); err != nil {
		t.Fatalf("cycle %d: %v", i, err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("cycle %d: close view: %v", i, err)
	}
}

type invalidatorFunc func(sandbox string)

func (f invalidatorFunc) Invalidate(sandbox string) { f(sandbox) }

// Mount, write, checkpoint, rollback and unmount, many times over in one
// process: goroutines and open descriptors come back to where they were.
// The short variant runs 50 cycles, or as many as fit in 5 s (at least
// 10) on a slow or loaded machine or under the race detector;
// STRATA_LONG=1 runs 500.
func TestNoLeaksAcrossMountCycles(t *testing.T) {
	cycles, minCycles, budget := 50, 10, 5*time.Second
	if os.Getenv("STRATA_LONG") != "" {
		cycles, minCycles, budget = 500, 500, time.Duration(1<<63-1)
	}
	dir := t.TempDir()
	storeDir, base, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "base"), filepath.Join(dir, "mnt")
	for _, d := range []string{base, mnt, filepath.Join(base, "dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(base, "base.txt"), "from the base")

	// The first cycle starts what lives as long as the process (badger's
	// and go-fuse's package-level workers), so the baseline follows it.
	cycle(t, storeDir, base, mnt, 0)
	baseline := quiet(t)
	start := time.Now()
	done := 0
	for done < cycles && (done < minCycles || time.Since(start) < budget) {
		done++
		cycle(t, storeDir, base, mnt, done)
	}
	elapsed := time.Since(start)
	const slack = 2
	got, ok := settle(t, baseline, slack, 15*time.Second)
	t.Logf("%d cycles in %v: goroutines %d -> %d, descriptors %d -> %d",
		done, elapsed.Round(time.Millisecond), baseline.goroutines, got.goroutines, len(baseline.fds), len(got.fds))
	if !ok {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("after %d cycles: %d goroutines (baseline %d), %d descriptors (baseline %d); new descriptors:\n%s\ngoroutines:\n%s",
			done, got.goroutines, baseline.goroutines, len(got.fds), len(baseline.fds),
			strings.Join(newFDs(baseline.fds, got.fds), "\n"), buf)
	}
}
