package layers

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countDataSyncs counts the data syncs of the store's live views until
// the test ends.
func countDataSyncs(t *testing.T, s *Store) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	restore := s.InjectFault(func(op, key string) error {
		if op == "datasync" {
			n.Add(1)
		}
		return nil
	})
	t.Cleanup(restore)
	return &n
}

// watchIdleSyncs counts the syncs the idle timer starts until the test
// ends.
func watchIdleSyncs(t *testing.T) *atomic.Int32 {
	t.Helper()
	var n atomic.Int32
	idleSyncHook = func(*View) { n.Add(1) }
	t.Cleanup(func() { idleSyncHook = nil })
	return &n
}

// syncedView opens a sandbox's view with file f written and synced; the
// view is closed when the test ends.
func syncedView(t *testing.T) (*testEnv, *View, Attr) {
	t.Helper()
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	f := mkfile(t, v, RootIno, "f", "data")
	ok(t, "sync", v.Sync())
	return e, v, f
}

// inodeChange is d's change of inode ino, or nil.
func inodeChange(d *LayerDelta, ino uint64) *InodeChange {
	for i := range d.Inodes {
		if d.Inodes[i].Ino == ino {
			return &d.Inodes[i]
		}
	}
	return nil
}

// idleState is what an idle sync is to leave behind.
func idleState(v *View) (dirty int, dataBehind, journalBehind bool, kept *idleDelta) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.jmu.Lock()
	defer v.jmu.Unlock()
	return len(v.dirty), v.dataSynced < v.dataGen, v.jdone < v.jqueued, v.idleDelta
}

// TestIdleSync: once a sandbox has had no change for idleSync, what was
// written is sealed, its data synced, its records committed and the
// store's log flushed, and the active layer's delta is told; the freeze
// that comes next syncs no data and keeps that delta. Writes that go on
// keep pushing the idle sync back.
func TestIdleSync(t *testing.T) {
	idles := watchIdleSyncs(t)
	e := newEnv(t, MinBlockSize, nil)
	syncs := countDataSyncs(t, e.store)
	v := e.view()
	defer v.Close()
	f := mkfile(t, v, RootIno, "f", "first")
	// Writes every 5 ms for 300 ms: no idle sync meanwhile.
	for i := 0; i < 60; i++ {
		_, err := v.WriteAt(f.Ino, []byte("more"), int64(5+4*i), false)
		ok(t, "write", err)
		time.Sleep(5 * time.Millisecond)
	}
	if n := idles.Load(); n != 0 {
		t.Fatalf("%d idle syncs while writes went on every 5 ms", n)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		dirty, dataBehind, journalBehind, kept := idleState(v)
		if dirty == 0 && !dataBehind && !journalBehind && kept != nil {
			if c := inodeChange(kept.d, f.Ino); kept.layer != v.activeLayer() || c == nil || c.New.Size != 5+4*60 {
				t.Fatalf("the idle delta is of layer %s with %+v; want layer %s with inode %d of %d bytes", kept.layer, kept.d.Inodes, v.activeLayer(), f.Ino, 5+4*60)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("10 s after the last write: %d dirty inodes, data behind %v, journal behind %v, delta kept %v", dirty, dataBehind, journalBehind, kept != nil)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := idles.Load(); n != 1 {
		t.Fatalf("%d idle syncs after one pause, want 1", n)
	}
	if e.store.synced.Load() < e.store.commits.Load() {
		t.Fatalf("the store's log was not flushed: %d commits, %d synced", e.store.commits.Load(), e.store.synced.Load())
	}
	kept := v.idleDelta.d
	before := syncs.Load()
	frozen, _, err := e.store.Freeze("sb", noFreezeFn)
	ok(t, "freeze", err)
	if n := syncs.Load() - before; n != 0 {
		t.Fatalf("the freeze after an idle sync made %d data syncs, want none", n)
	}
	if got := e.store.deltas.get(frozen); got != kept {
		t.Fatalf("the freeze kept delta %p, not the idle sync's %p", got, kept)
	}
	if got := content(t, v, f.Ino); len(got) != 5+4*60 {
		t.Fatalf("after the freeze the file holds %d bytes", len(got))
	}
}

// TestIdleDeltaAfterAChange: a change after the idle sync told the
// active layer's delta, of any kind, makes a freeze tell it again, so the
// delta it keeps holds the change; with no change it keeps the told one.
func TestIdleDeltaAfterAChange(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, v *View, f Attr)
		// has reports whether the delta holds the change.
		has func(d *LayerDelta, f Attr) bool
	}{
		{"none", func(*testing.T, *View, Attr) {}, func(d *LayerDelta, f Attr) bool {
			c := inodeChange(d, f.Ino)
			return c != nil && c.New.Size == 4
		}},
		{"data write", func(t *testing.T, v *View, f Attr) {
			_, err := v.WriteAt(f.Ino, []byte("longer"), 4, false)
			ok(t, "write", err)
		}, func(d *LayerDelta, f Attr) bool {
			c := inodeChange(d, f.Ino)
			return c != nil && c.New.Size == 10
		}},
		{"chmod", func(t *testing.T, v *View, f Attr) {
			mode := uint32(0o600)
			_, err := v.SetAttr(f.Ino, SetAttrIn{Mode: &mode})
			ok(t, "chmod", err)
		}, func(d *LayerDelta, f Attr) bool {
			c := inodeChange(d, f.Ino)
			return c != nil && c.New.Mode&0o777 == 0o600
		}},
		{"mkdir", func(t *testing.T, v *View, f Attr) {
			mkdir(t, v, RootIno, "d")
		}, func(d *LayerDelta, f Attr) bool {
			for _, e := range d.Entries {
				if e.Name == "d" && e.New != nil {
					return true
				}
			}
			return false
		}},
		{"rename", func(t *testing.T, v *View, f Attr) {
			ok(t, "rename", v.Rename(RootIno, "f", RootIno, "g", 0))
		}, func(d *LayerDelta, f Attr) bool {
			for _, e := range d.Entries {
				if e.Name == "g" && e.New != nil && e.New.Ino == f.Ino {
					return true
				}
			}
			return false
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, v, f := syncedView(t)
			// What the idle timer does, now.
			v.keepIdleDelta()
			if v.idleDelta == nil {
				t.Fatal("no delta told after a sync")
			}
			told := v.idleDelta.d
			tc.change(t, v, f)
			frozen, _, err := e.store.Freeze("sb", noFreezeFn)
			ok(t, "freeze", err)
			d := e.store.deltas.get(frozen)
			if d == nil || !tc.has(d, f) {
				t.Fatalf("the frozen layer's delta lacks the change (delta kept: %v)", d != nil)
			}
			if reused := d == told; reused != (tc.name == "none") {
				t.Fatalf("the told delta reused: %v", reused)
			}
		})
	}
}

// TestFreezeSyncsOnlyUnsyncedData: a freeze syncs the data file when
// something was written since its last data sync, and not otherwise.
func TestFreezeSyncsOnlyUnsyncedData(t *testing.T) {
	tests := []struct {
		name      string
		sync      bool // v.Sync() after the write
		wantSyncs int32
	}{
		{"written since the last sync", false, 1},
		{"synced since the last write", true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			defer v.Close()
			mkfile(t, v, RootIno, "f", "data")
			if tc.sync {
				ok(t, "sync", v.Sync())
			}
			syncs := countDataSyncs(t, e.store)
			_, _, err := e.store.Freeze("sb", noFreezeFn)
			ok(t, "freeze", err)
			if n := syncs.Load(); n != tc.wantSyncs {
				t.Fatalf("the freeze made %d data syncs, want %d", n, tc.wantSyncs)
			}
			v = e.reopen(v)
			if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != "data" {
				t.Fatalf("after a restart f holds %q", got)
			}
		})
	}
}

// TestKeepIdleDeltaOnlyWhenSealed: the idle sync keeps no delta when a
// write came in after its seal (blocks left to seal) or the view closed.
func TestKeepIdleDeltaOnlyWhenSealed(t *testing.T) {
	tests := []struct {
		name  string
		max   int // idleDeltaMax for the case; 0: the default
		after func(t *testing.T, v *View, f Attr)
		want  bool
	}{
		{"sealed", 0, func(*testing.T, *View, Attr) {}, true},
		{"written since", 0, func(t *testing.T, v *View, f Attr) {
			_, err := v.WriteAt(f.Ino, []byte("x"), 0, false)
			ok(t, "write", err)
		}, false},
		{"closed", 0, func(t *testing.T, v *View, f Attr) { ok(t, "close", v.Close()) }, false},
		// f, its entry and the root: 3 changes.
		{"more changes than idleDeltaMax", 2, func(*testing.T, *View, Attr) {}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.max > 0 {
				// Set while no view's loop runs, which reads it.
				old := idleDeltaMax
				idleDeltaMax = tc.max
				defer func() { idleDeltaMax = old }()
			}
			_, v, f := syncedView(t)
			defer v.Close()
			tc.after(t, v, f)
			v.keepIdleDelta()
			if got := v.idleDelta != nil; got != tc.want {
				t.Fatalf("delta kept: %v, want %v", got, tc.want)
			}
		})
	}
}

// TestIdleDiffForAnUndo: the idle sync also tells how the state differs
// from the latest checkpoints (idleBacks of them). A rollback onto one of
// them (an agent's undo) uses that when nothing changed since, and
// reports what a rollback that works it out reports; after a change, onto
// another layer, or onto a checkpoint whose undo would take more than
// idleDeltaMax changes, the rollback works it out.
func TestIdleDiffForAnUndo(t *testing.T) {
	const latest, before, base = 2, 1, 0 // targets: c2, c1, the base alone
	tests := []struct {
		name   string
		change func(t *testing.T, v *View)
		target int
		tight  bool // idleDeltaMax just the active layer's changes
		reuse  bool
	}{
		{"undo, nothing changed", func(*testing.T, *View) {}, latest, false, true},
		{"two checkpoints back, nothing changed", func(*testing.T, *View) {}, before, false, true},
		{"undo after a change", func(t *testing.T, v *View) { mkfile(t, v, RootIno, "d", "later") }, latest, false, false},
		{"two back after a change", func(t *testing.T, v *View) { mkfile(t, v, RootIno, "d", "later") }, before, false, false},
		{"onto the base", func(*testing.T, *View) {}, base, false, false},
		{"undo within the bound", func(*testing.T, *View) {}, latest, true, true},
		{"two back past the bound", func(*testing.T, *View) {}, before, true, false},
	}
	// run makes two checkpoints and three changes over them in a new
	// sandbox, lets the idle sync's work be done when idle is set (with
	// idleDeltaMax cut to the active layer's changes when tight), makes
	// change and rolls back onto target; it returns the rollback's
	// changes and whether they are the ones the idle sync told.
	run := func(t *testing.T, idle, tight bool, change func(*testing.T, *View), target int) ([]string, bool) {
		t.Helper()
		e := newEnv(t, MinBlockSize, func(base string) {
			put(t, filepath.Join(base, "a"), "A")
			put(t, filepath.Join(base, "b"), "B")
		})
		v := e.view()
		defer v.Close()
		_, err := v.WriteAt(lookup(t, v, RootIno, "a").Ino, []byte("A2"), 0, false)
		ok(t, "write a", err)
		c1, _, err := e.store.Freeze("sb", noFreezeFn)
		ok(t, "freeze", err)
		mkfile(t, v, RootIno, "e", "E")
		c2, _, err := e.store.Freeze("sb", noFreezeFn)
		ok(t, "freeze", err)
		_, err = v.WriteAt(lookup(t, v, RootIno, "b").Ino, []byte("B2"), 0, false)
		ok(t, "write b", err)
		mkfile(t, v, RootIno, "c", "new")
		ok(t, "remove a", v.Unlink(RootIno, "a"))
		ok(t, "sync", v.Sync())
		to := []string{"", c1, c2}[target]
		var told *Changes
		if idle {
			v.keepIdleDelta()
			k := v.idleDelta
			if k == nil || len(k.backs) != idleBacks || k.backTo(c2) == nil || k.backTo(c1) == nil {
				t.Fatalf("the idle sync told no undo onto %s and %s: %+v", c2, c1, k)
			}
			if tight {
				old := idleDeltaMax
				idleDeltaMax = len(k.d.Inodes) + len(k.d.Entries)
				defer func() { idleDeltaMax = old }()
				v.keepIdleDelta()
				if k = v.idleDelta; k == nil || len(k.backs) != 1 || k.backTo(c2) == nil {
					t.Fatalf("with idleDeltaMax %d the idle sync told %+v, want the undo onto %s alone", idleDeltaMax, k, c2)
				}
			}
			if d := k.backTo(to); d != nil {
				told = &d.ch
			}
		}
		change(t, v)
		_, ch, err := e.store.RepointDiff("sb", to, func(*Txn, []string, []string, string) error { return nil })
		ok(t, "roll back", err)
		return changeSummary(*ch), told != nil && ch == told
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reused := run(t, true, tc.tight, tc.change, tc.target)
			want, _ := run(t, false, false, tc.change, tc.target)
			if reused != tc.reuse {
				t.Fatalf("the idle sync's diff used: %v, want %v", reused, tc.reuse)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("the rollback reports\n%s\nwhere one that works it out reports\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if len(got) == 0 {
				t.Fatal("the rollback reports no change")
			}
		})
	}
}

// TestIdleDiffAfterARestart: after a restart the store knows no frozen
// layer's delta until asked, and the idle sync does not read one to tell
// a difference further back than the latest checkpoint; the rollback two
// checkpoints back then works it out, and gets it right.
func TestIdleDiffAfterARestart(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, filepath.Join(base, "a"), "A") })
	v := e.view()
	mkfile(t, v, RootIno, "b", "B")
	c1, _, err := e.store.Freeze("sb", noFreezeFn)
	ok(t, "freeze", err)
	mkfile(t, v, RootIno, "c", "C")
	c2, _, err := e.store.Freeze("sb", noFreezeFn)
	ok(t, "freeze", err)
	v = e.reopen(v)
	defer v.Close()
	mkfile(t, v, RootIno, "d", "D")
	ok(t, "sync", v.Sync())
	v.keepIdleDelta()
	k := v.idleDelta
	if k == nil || len(k.backs) != 1 || k.backTo(c2) == nil || k.backTo(c1) != nil {
		t.Fatalf("after a restart the idle sync told %+v, want the undo onto %s alone", k, c2)
	}
	_, ch, err := e.store.RepointDiff("sb", c1, func(*Txn, []string, []string, string) error { return nil })
	ok(t, "roll back", err)
	got := changeSummary(*ch)
	for _, name := range []string{"c", "d"} {
		if !slices.Contains(got, "entry "+name+" -") {
			t.Errorf("the rollback two checkpoints back reports\n%s\nwithout removing %s", strings.Join(got, "\n"), name)
		}
	}
	if _, err := v.Lookup(RootIno, "c"); !errors.Is(err, ErrNotFound) {
		t.Errorf("after the rollback c is still there (err %v)", err)
	}
	lookup(t, v, RootIno, "b")
}

// TestSetIdleSync: a longer idle delay holds the idle sync off past the
// default's 100 ms, and restoring the default brings it back.
func TestSetIdleSync(t *testing.T) {
	n := watchIdleSyncs(t)
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	restore := SetIdleSync(time.Hour)
	mkfile(t, v, RootIno, "f", "data")
	time.Sleep(4 * idleSync)
	if got := n.Load(); got != 0 {
		t.Errorf("%d idle syncs within %v with the delay set to an hour", got, 4*idleSync)
	}
	restore()
	mkfile(t, v, RootIno, "g", "data")
	deadline := time.Now().Add(5 * time.Second)
	for n.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n.Load() == 0 {
		t.Errorf("no idle sync within 5 s once the default was back")
	}
}
