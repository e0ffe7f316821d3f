package layers

import (
	"bytes"
	"os"
	"syscall"
	"testing"
)

// allocated is the space the file system holds for path, in bytes.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	ok(t, "stat "+path, syscall.Stat(path, &st))
	return st.Blocks * 512
}

// TestZeroGivesSpaceBack: zeroing whole blocks the active layer holds
// turns them into holes, so the data file shrinks once the change is
// durable, and the rest of the file keeps its bytes.
func TestZeroGivesSpaceBack(t *testing.T) {
	const bs = MinBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	defer func() { v.Close() }()
	want := bytes.Repeat([]byte("z"), 4*bs)
	f := mkfile(t, v, RootIno, "f", string(want))
	ok(t, "sync", v.Sync())
	data := e.store.dataPath(v.Info().Head)
	before := allocated(t, data)
	if before < 4*bs {
		t.Skipf("data file holds %d bytes for 4 blocks: no allocation to measure", before)
	}
	ok(t, "zero two whole blocks", v.Zero(f.Ino, bs, 2*bs, true))
	copy(want[bs:3*bs], make([]byte, 2*bs))
	ok(t, "sync", v.Sync())
	if got := content(t, v, f.Ino); got != string(want) {
		t.Fatalf("content after zero differs from the model")
	}
	if after := allocated(t, data); after > before-2*bs {
		t.Fatalf("data file holds %d bytes after zeroing 2 of 4 blocks, was %d: want at most %d", after, before, before-2*bs)
	}
	v = e.reopen(v)
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != string(want) {
		t.Fatalf("content after reopen differs from the model")
	}
}

func TestZeroErrors(t *testing.T) {
	const bs = MinBlockSize
	e := newEnv(t, bs, func(base string) {
		put(t, base+"/b", string(bytes.Repeat([]byte("b"), 2*bs)))
	})
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "frozen")
	b := lookup(t, v, RootIno, "b")
	// Block 1 of b comes from the frozen layer, block 0 from the base.
	_, err := v.WriteAt(b.Ino, []byte("B"), bs, false)
	ok(t, "write b", err)
	frozen := freeze(t, e.store, "sb")
	g := mkfile(t, v, RootIno, "g", "unsealed") // its block is open in the active layer
	wantErr(t, "unknown inode", v.Zero(1<<62+999999, 0, 1, true), ErrNotFound)
	wantErr(t, "past the largest file", v.Zero(f.Ino, MaxFileSize-1, 2, true), ErrInvalid)
	wantErr(t, "empty range", v.Zero(f.Ino, 0, 0, true), ErrInvalid)

	// A failed write of the zeros is reported.
	v.mu.Lock()
	v.files[v.activeLayer()].Close()
	v.mu.Unlock()
	wantErr(t, "zero with a failing data file", v.Zero(g.Ino, 1, 2, true), os.ErrClosed)
	v.mu.Lock()
	v.dirty = map[uint64]*inodeState{} // nothing left to seal into the closed file
	v.mu.Unlock()
	v.Close()

	// A partial block over frozen data whose data file is gone cannot be
	// copied up; a read that reaches it fails too, even after a base block.
	ok(t, "remove frozen data", os.Remove(e.store.dataPath(frozen)))
	v = e.view()
	wantErr(t, "zero over missing frozen data", v.Zero(f.Ino, 1, 2, true), ErrNotFound)
	_, err = v.ReadAt(b.Ino, make([]byte, 2*bs), 0)
	wantErr(t, "read across the base and missing frozen data", err, ErrNotFound)
	buf := make([]byte, 4)
	if _, err := v.ReadAt(b.Ino, buf, 0); err != nil || string(buf) != "bbbb" {
		t.Fatalf("base block after the failed read: got %q, %v", buf, err)
	}
	v.Close()

	// A damaged block map is reported, not zeroed over.
	corrupt(t, e.store, keyBlock(frozen, f.Ino, 0), []byte{1})
	v = e.view()
	wantErr(t, "zero over a corrupt block map", v.Zero(f.Ino, 0, 1, true), ErrCorrupt)
	ok(t, "close", v.Close())
	wantErr(t, "closed view", v.Zero(f.Ino, 0, 1, true), ErrClosed)

	ro, err := e.store.OpenView("sb", true)
	ok(t, "open read-only", err)
	defer ro.Close()
	wantErr(t, "read-only view", ro.Zero(f.Ino, 0, 1, true), ErrReadOnly)
}
