package layers

import (
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestRepointDiffMoved: with a live view, moved runs while the view is
// held for the move, is told what the move touched, may use the view (the
// repoint lets go of it before it waits; what it reads then is the new
// state), and has returned when the repoint returns. Without a live view
// it is not called.
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

// TestMovedBeforeTheMoveCommits: moved is told what the move touches as
// soon as the repoint knows it, before the move commits, so a move that
// then fails has called it; the view still shows the state it had, and
// answers made while moved ran are that state's.
func TestMovedBeforeTheMoveCommits(t *testing.T) {
	e := newEnv(t, 0, func(base string) { put(t, base+"/f", "base") })
	v := e.view()
	defer v.Close()
	f := lookup(t, v, RootIno, "f")
	to := freeze(t, e.store, e.name)
	_, err := v.WriteAt(f.Ino, []byte("changed"), 0, false)
	ok(t, "write", err)
	mkfile(t, v, RootIno, "g", "new")
	info, err := e.store.Sandbox(e.name)
	ok(t, "sandbox", err)

	boom := errors.New("refused")
	var told *Touched
	_, _, err = e.store.RepointDiffMoved(e.name, to, func(*Txn, []string, []string, string) error { return boom }, func(tc *Touched) {
		told = tc
	})
	if !errors.Is(err, boom) {
		t.Fatalf("repoint: %v, want %v", err, boom)
	}
	if told == nil || !slices.Contains(told.Inodes, f.Ino) {
		t.Fatalf("moved was told %+v before the failed move; want what it was to touch (inode %d)", told, f.Ino)
	}
	after, err := e.store.Sandbox(e.name)
	ok(t, "sandbox", err)
	if after.Head != info.Head {
		t.Fatalf("head %s after a failed move, want %s", after.Head, info.Head)
	}
	if got, err := readAll(v, f.Ino); err != nil || got != "changed" {
		t.Fatalf("f reads %q (%v) after a failed move, want \"changed\"", got, err)
	}
	if _, err := v.Lookup(RootIno, "g"); err != nil {
		t.Fatalf("g after a failed move: %v", err)
	}
}
