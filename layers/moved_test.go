package layers

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestRepointDiffMoved: with a live view, moved runs once the view shows
// the new state, is told what the move touched, may use the view (the
// repoint lets go of it before it waits), and has returned when the
// repoint returns. Without a live view it is not called.
func TestRepointDiffMoved(t *testing.T) {
	e := newEnv(t, 0, func(base string) { put(t, base+"/f", "base") })
	v := e.view()
	f := lookup(t, v, RootIno, "f")
	to := freeze(t, e.store, e.name)
	_, err := v.WriteAt(f.Ino, []byte("changed"), 0, false)
	ok(t, "write", err)
	g := mkfile(t, v, RootIno, "g", "new")

	var calls atomic.Int32
	var done atomic.Bool
	var seen *Touched
	var sawOld bool
	_, ch, err := e.store.RepointDiffMoved(e.name, to, noRepointFn, func(tc *Touched) {
		calls.Add(1)
		seen = tc
		// The view answers with the new state, which needs its lock.
		if _, err := v.Lookup(RootIno, "g"); err == nil {
			sawOld = true
		}
		time.Sleep(20 * time.Millisecond)
		done.Store(true)
	})
	ok(t, "repoint", err)
	if calls.Load() != 1 || !done.Load() {
		t.Fatalf("moved called %d times, finished %v; want once, finished before the repoint returned", calls.Load(), done.Load())
	}
	if sawOld {
		t.Error("moved saw g, which the state moved to lacks")
	}
	if seen == nil || ch == nil || ch.Touched == nil {
		t.Fatalf("moved told %v, changes %v; want what the move touched", seen, ch)
	}
	has := func(list []uint64, ino uint64) bool {
		for _, i := range list {
			if i == ino {
				return true
			}
		}
		return false
	}
	if !has(seen.Inodes, f.Ino) || !has(seen.Inodes, g.Ino) || !has(seen.Dirs, RootIno) {
		t.Errorf("moved told %+v; want inodes %d and %d and directory %d", seen, f.Ino, g.Ino, RootIno)
	}
	ok(t, "close view", v.Close())

	// Without a live view the caller compares and drops caches itself.
	_, _, err = e.store.RepointDiffMoved(e.name, to, noRepointFn, func(*Touched) { calls.Add(1) })
	ok(t, "repoint without a view", err)
	if calls.Load() != 1 {
		t.Errorf("moved called without a live view")
	}
}
