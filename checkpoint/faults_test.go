package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

var errInjected = errors.New("injected fault")

// failOn is a fault function failing every operation op on a key that
// starts with prefix, counting how many it failed.
func failOn(op, prefix string, hits *int) layers.FaultFunc {
	return func(o, key string) error {
		if o == op && strings.HasPrefix(key, prefix) {
			*hits++
			return fmt.Errorf("%s %s: %w", o, key, errInjected)
		}
		return nil
	}
}

// faultState is what a failed operation must leave as it was.
type faultState struct {
	Head        string
	Checkpoints []string
	Archives    []string
	Restored    []bool
	Tree        tree
}

func (e *storeEnv) faultState(mounted bool) faultState {
	e.t.Helper()
	info, err := e.store.Sandbox("s")
	if err != nil {
		e.t.Fatal(err)
	}
	cps, err := e.mgr.List("s")
	if err != nil {
		e.t.Fatal(err)
	}
	ars, err := e.mgr.Archives("s")
	if err != nil {
		e.t.Fatal(err)
	}
	st := faultState{Head: info.Head, Checkpoints: ids(cps)}
	for _, a := range ars {
		st.Archives = append(st.Archives, a.ID)
		st.Restored = append(st.Restored, a.Restored)
	}
	if mounted {
		st.Tree = readTree(e.t, e.view("s"))
	} else {
		v, err := e.store.OpenSnapshot("s", info.Head)
		if err != nil {
			e.t.Fatal(err)
		}
		defer v.Close()
		st.Tree = readTree(e.t, v)
	}
	return st
}

// TestInjectedFaults makes one transactional read or write of each
// operation fail: the operation must fail with that error and leave the
// sandbox's head, checkpoints, archives and files as they were, whether it
// is mounted (a live view) or not. Once the fault is gone the same
// operation succeeds.
func TestInjectedFaults(t *testing.T) {
	type call func(e *storeEnv, ar Archive) error
	create := func(e *storeEnv, _ Archive) error { _, err := e.mgr.Create("s", Options{Label: "new"}); return err }
	rollback := func(e *storeEnv, _ Archive) error { _, err := e.mgr.Rollback("s", "c0"); return err }
	restore := func(e *storeEnv, ar Archive) error { _, err := e.mgr.Restore(ar.ID); return err }
	remove := func(e *storeEnv, _ Archive) error { _, err := e.mgr.Remove("c1"); return err }
	prune := func(e *storeEnv, _ Archive) error {
		_, err := e.mgr.Prune("s", Policy{KeepLast: 1})
		return err
	}
	cases := []struct {
		name, op, prefix string
		call             call
	}{
		{"create: label lookup", "get", "x/cpl/", create},
		{"create: label key", "set", "x/cpl/", create},
		{"create: state hash", "set", "x/lh/", create},
		{"create: record", "set", "x/cp/", create},
		{"create: index", "set", "x/cps/", create},
		{"create: pin", "pin", "", create},
		{"create: layer index", "set", "x/lcp/", create},
		{"rollback: archive", "set", "x/ar/", rollback},
		{"rollback: archive pin", "pin", "", rollback},
		{"rollback: archive index", "set", "x/ars/", rollback},
		{"restore: archive read", "get", "x/ar/", restore},
		{"restore: archive update", "set", "x/ar/", restore},
		{"remove: record", "delete", "x/cp/", remove},
		{"remove: index", "delete", "x/cps/", remove},
		{"remove: layer index", "delete", "x/lcp/", remove},
		{"remove: unpin", "unpin", "", remove},
		{"remove: label lookup", "get", "x/cpl/", remove},
		{"remove: label key", "delete", "x/cpl/", remove},
		{"prune: record", "delete", "x/cp/", prune},
	}
	for _, mounted := range []bool{true, false} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s mounted=%v", c.name, mounted), func(t *testing.T) {
				e := newStoreEnv(t, func(base string) { writeBase(t, base, "b", "base") })
				e.put("s", "x", "1")
				e.checkpoint("s", "c0")
				e.put("s", "x", "2")
				e.checkpoint("s", "c1")
				if _, err := e.mgr.Rollback("s", "c0"); err != nil {
					t.Fatal(err)
				}
				ars, err := e.mgr.Archives("s")
				if err != nil || len(ars) != 1 {
					t.Fatalf("archives: %v %v", ars, err)
				}
				e.put("s", "x", "3")
				if !mounted {
					e.close("s")
				}
				before := e.faultState(mounted)
				hits := 0
				restore := e.store.InjectFault(failOn(c.op, c.prefix, &hits))
				err = c.call(e, ars[0])
				restore()
				if !errors.Is(err, errInjected) {
					t.Fatalf("got %v, want the injected fault", err)
				}
				if hits == 0 {
					t.Fatal("the fault was never asked")
				}
				if after := e.faultState(mounted); !reflect.DeepEqual(before, after) {
					t.Fatalf("a failed operation changed the state\nbefore %+v\nafter  %+v", before, after)
				}
				// The store is still usable: without the fault the
				// operation goes through and changes something.
				if err := c.call(e, ars[0]); err != nil {
					t.Fatalf("without the fault: %v", err)
				}
				if after := e.faultState(mounted); reflect.DeepEqual(before, after) {
					t.Fatalf("the operation without the fault changed nothing: %+v", after)
				}
			})
		}
	}
}

// TestInjectFaultRestore checks the hook itself: it affects only the
// store it is installed on, restore removes it (twice is harmless), and a
// second install replaces the first.
func TestInjectFaultRestore(t *testing.T) {
	e := newStoreEnv(t, nil)
	other := newStoreEnv(t, nil)
	e.put("s", "x", "1")
	other.put("s", "x", "1")
	hits := 0
	restore := e.store.InjectFault(failOn("set", "x/cp/", &hits))
	if _, err := other.mgr.Create("s", Options{}); err != nil {
		t.Fatalf("a fault of another store failed this one: %v", err)
	}
	if _, err := e.mgr.Create("s", Options{}); !errors.Is(err, errInjected) {
		t.Fatalf("create with the fault: %v", err)
	}
	restore2 := e.store.InjectFault(failOn("set", "x/lcp/", &hits))
	if _, err := e.mgr.Create("s", Options{}); !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "x/lcp/") {
		t.Fatalf("create with the second fault: %v", err)
	}
	restore2()
	restore()
	restore()
	if _, err := e.mgr.Create("s", Options{}); err != nil {
		t.Fatalf("create after restore: %v", err)
	}
	if hits != 2 {
		t.Fatalf("faults asked %d times, want 2", hits)
	}
}

// TestCreateWithoutParentHash: when the parent's stored state hash cannot
// be read, a checkpoint hashes its whole tree instead, to the same hash.
func TestCreateWithoutParentHash(t *testing.T) {
	for _, mounted := range []bool{true, false} {
		t.Run(fmt.Sprint("mounted=", mounted), func(t *testing.T) {
			e := newStoreEnv(t, func(base string) { writeBase(t, base, "d/b", "base") })
			e.put("s", "x", "1")
			e.checkpoint("s", "c0")
			e.put("s", "d/b", "2")
			if !mounted {
				e.close("s")
			}
			hits := 0
			restore := e.store.InjectFault(failOn("get", "x/lh/", &hits))
			cp, err := e.mgr.Create("s", Options{})
			restore()
			if err != nil || hits == 0 {
				t.Fatalf("create without the parent's hash: %v (asked %d times)", err, hits)
			}
			want, err := e.mgr.StateHash("s", cp.Layer)
			if err != nil {
				t.Fatal(err)
			}
			if cp.StateHash != want {
				t.Fatalf("checkpoint hash %s, the tree hashes to %s", cp.StateHash, want)
			}
		})
	}
}

// TestRemoveSandboxFaults: a sandbox whose records cannot be deleted
// stays, and so do the records of the step that failed.
func TestRemoveSandboxFaults(t *testing.T) {
	cases := []struct {
		name, op, prefix string
		cpsLeft          int // checkpoints left after the failure
	}{
		{"checkpoint record", "delete", "x/cp/", 2},
		{"checkpoint pin", "unpin", "", 2},
		{"archive record", "delete", "x/ar/", 0},
		{"archive index", "delete", "x/ars/", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newStoreEnv(t, nil)
			e.put("s", "x", "1")
			e.checkpoint("s", "c0")
			e.put("s", "x", "2")
			e.checkpoint("s", "c1")
			if _, err := e.mgr.Rollback("s", "c0"); err != nil {
				t.Fatal(err)
			}
			e.close("s")
			hits := 0
			restore := e.store.InjectFault(failOn(c.op, c.prefix, &hits))
			err := e.mgr.RemoveSandbox("s")
			restore()
			if !errors.Is(err, errInjected) || !strings.Contains(err.Error(), "sandbox rm s") {
				t.Fatalf("got %v, want the injected fault", err)
			}
			cps, err := e.mgr.List("s")
			if err != nil || len(cps) != c.cpsLeft {
				t.Fatalf("checkpoints after the failure: %v %v, want %d", ids(cps), err, c.cpsLeft)
			}
			if ars, err := e.mgr.Archives("s"); err != nil || len(ars) != 1 {
				t.Fatalf("archives after the failure: %v %v", ars, err)
			}
			if err := e.mgr.RemoveSandbox("s"); err != nil {
				t.Fatalf("without the fault: %v", err)
			}
			if _, err := e.store.Sandbox("s"); !errors.Is(err, layers.ErrNotFound) {
				t.Fatalf("sandbox after removal: %v", err)
			}
		})
	}
}

// TestBaseGoneAfterRollback: a sandbox whose base directory disappeared cannot read
// the files it never copied up. Whatever needs them fails with
// ErrNotFound and records nothing; a rollback, which needs only layers,
// still moves the head, with a short report.
func TestBaseGoneAfterRollback(t *testing.T) {
	e := newStoreEnv(t, func(base string) { writeBase(t, base, "d/f", "base f") })
	e.put("s", "x", "1")
	e.checkpoint("s", "c0")
	e.put("s", "x", "2")
	e.checkpoint("s", "c1")
	if _, err := e.mgr.Rollback("s", "c0"); err != nil {
		t.Fatal(err)
	}
	e.put("s", "x", "3")
	e.close("s")
	ars, err := e.mgr.Archives("s")
	if err != nil || len(ars) != 1 {
		t.Fatalf("archives: %v %v", ars, err)
	}
	if err := os.RemoveAll(e.base); err != nil {
		t.Fatal(err)
	}
	before, err := e.mgr.List("s")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "out")
	runOps(t, e.mgr, layers.ErrNotFound, []op{
		{"create", func(m *Manager) error { _, err := m.Create("s", Options{}); return err }},
		{"state hash", func(m *Manager) error { _, err := m.StateHash("s", ""); return err }},
		{"verify", func(m *Manager) error { _, err := m.Verify("c0"); return err }},
		{"diff", func(m *Manager) error { _, err := m.DiffCheckpoints("c0", "c1"); return err }},
		{"export", func(m *Manager) error { _, err := m.Export(ars[0].ID, out); return err }},
	})
	if after, err := e.mgr.List("s"); err != nil || !reflect.DeepEqual(ids(after), ids(before)) {
		t.Fatalf("checkpoints after the failures: %v %v, were %v", ids(after), err, ids(before))
	}
	if ents, _ := os.ReadDir(out); len(ents) != 0 {
		t.Fatalf("a failed export wrote %d entries", len(ents))
	}
	head, err := e.store.Sandbox("s")
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.mgr.Rollback("s", "c1")
	if err != nil {
		t.Fatalf("rollback without the base: %v", err)
	}
	if res.Archive == "" || len(res.ChangedPaths) != 0 {
		t.Fatalf("rollback report %+v, want an archive and no paths", res)
	}
	if now, err := e.store.Sandbox("s"); err != nil || now.Head == head.Head {
		t.Fatalf("the head did not move: %v %v", now.Head, err)
	}
}

// TestCreateWithoutParentHashOrBase: with neither the parent's hash nor
// the base to hash the whole tree from, a checkpoint fails and records
// nothing.
func TestCreateWithoutParentHashOrBase(t *testing.T) {
	e := newStoreEnv(t, func(base string) { writeBase(t, base, "b", "base") })
	e.put("s", "x", "1")
	e.checkpoint("s", "c0")
	e.put("s", "x", "2")
	e.close("s")
	if err := os.RemoveAll(e.base); err != nil {
		t.Fatal(err)
	}
	hits := 0
	restore := e.store.InjectFault(failOn("get", "x/lh/", &hits))
	_, err := e.mgr.Create("s", Options{})
	restore()
	if !errors.Is(err, layers.ErrNotFound) || hits == 0 {
		t.Fatalf("create: %v (fault asked %d times), want ErrNotFound", err, hits)
	}
	if cps, err := e.mgr.List("s"); err != nil || len(cps) != 1 {
		t.Fatalf("checkpoints after the failure: %v %v", ids(cps), err)
	}
}

// TestLiveDiffReadsAgain: a diff with the live state of a mount that is
// being written can read a file as having no name (renamed, then removed,
// between two reads); it reads again, a bounded number of times.
func TestLiveDiffReadsAgain(t *testing.T) {
	l := newLive(t, nil)
	c0, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.write("f", "new")
	tries := 0
	failFirst := func(n int) layers.FaultFunc {
		return func(op, key string) error {
			if op != "compare" {
				return nil
			}
			if tries++; tries <= n {
				return fmt.Errorf("path of inode 7: %w", layers.ErrNotFound)
			}
			return nil
		}
	}
	restore := l.store.InjectFault(failFirst(2))
	d, err := l.mgr.DiffCheckpoints(c0.ID, "")
	restore()
	if err != nil || strings.Join(d.Added, " ") != "f" || tries != 3 {
		t.Fatalf("diff read twice as a file with no name: %+v, %v after %d reads; want f added after 3", d, err, tries)
	}
	tries = 0
	restore = l.store.InjectFault(failFirst(100))
	_, err = l.mgr.DiffCheckpoints(c0.ID, "")
	restore()
	if !errors.Is(err, layers.ErrNotFound) || tries != liveDiffTries {
		t.Fatalf("diff that always reads a file with no name: %v after %d reads; want not found after %d", err, tries, liveDiffTries)
	}
	// Between checkpoints nothing moves: no second read.
	c1, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	tries = 0
	restore = l.store.InjectFault(failFirst(1))
	_, err = l.mgr.DiffCheckpoints(c0.ID, c1.ID)
	restore()
	if !errors.Is(err, layers.ErrNotFound) || tries != 1 {
		t.Fatalf("diff between checkpoints failing once: %v after %d reads; want not found after 1", err, tries)
	}
}
