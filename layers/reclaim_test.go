package layers

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// firstData is the offset of the first byte of path the file system holds
// data for (SEEK_DATA from 0), or -1 when the file is all hole.
func firstData(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Open(path)
	ok(t, "open "+path, err)
	defer f.Close()
	off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	if err == unix.ENXIO {
		return -1
	}
	ok(t, "seek data", err)
	return off
}

// TestBackgroundSealPunchesFreedSlots: a slot freed by an overwrite of a
// sealed block is given back to the file system by the periodic seal,
// without any Sync, once the change that freed it is durable.
func TestBackgroundSealPunchesFreedSlots(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 5 s seal timer")
	}
	const bs = MinBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	defer v.Close()
	f := mkfile(t, v, RootIno, "f", strings.Repeat("a", 2*bs)) // slots 0 and 1
	ok(t, "sync", v.Sync())
	data := e.store.dataPath(v.Info().Head)
	if off := firstData(t, data); off != 0 {
		t.Skipf("data file starts with a hole before anything was freed (first data at %d): cannot tell a punch", off)
	}
	_, err := v.WriteAt(f.Ino, []byte(strings.Repeat("b", bs)), 0, false) // block 0 moves to slot 2
	ok(t, "overwrite", err)
	deadline := time.Now().Add(15 * time.Second)
	for firstData(t, data) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("slot 0 still holds data 15 s after it was freed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := content(t, v, f.Ino); got != strings.Repeat("b", bs)+strings.Repeat("a", bs) {
		t.Fatalf("content after the punch: got %d bytes, first %q", len(got), got[:1])
	}
}

// TestFsckArchivedBlockDamage: a damaged block of an archived layer is
// reported against the layer alone; no sandbox's current path shows it.
func TestFsckArchivedBlockDamage(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/f", "base") })
	v := e.view()
	l0 := freeze(t, e.store, "sb")
	f := lookup(t, v, RootIno, "f")
	_, err := v.WriteAt(f.Ino, []byte("changed"), 0, false)
	ok(t, "write", err)
	l1 := freeze(t, e.store, "sb")
	_, err = e.store.Repoint("sb", l0, noRepointFn) // l1 leaves the stack, archived
	ok(t, "repoint", err)
	ok(t, "close", v.Close())
	p := e.store.dataPath(l1)
	raw, err := os.ReadFile(p)
	ok(t, "read", err)
	raw[1] ^= 1
	ok(t, "write", os.WriteFile(p, raw, 0o600))
	rep, err := e.store.Fsck()
	ok(t, "fsck", err)
	if len(rep.Problems) != 1 {
		t.Fatalf("problems: got %+v, want one", rep.Problems)
	}
	pr := rep.Problems[0]
	if pr.Kind != "checksum" || pr.Layer != l1 || pr.Ino != f.Ino || pr.Path != "" || pr.Sandbox != "" {
		t.Fatalf("problem: got %+v, want a checksum problem of layer %s, inode %d, with no path", pr, l1, f.Ino)
	}
}

// TestFingerprintFrozenDataGone: a file whose frozen data file is gone has
// no fingerprint.
func TestFingerprintFrozenDataGone(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "frozen")
	l1 := freeze(t, e.store, "sb")
	ok(t, "close", v.Close())
	ok(t, "remove data", os.Remove(e.store.dataPath(l1)))
	v = e.view()
	defer v.Close()
	_, err := v.Fingerprint(f.Ino)
	wantErr(t, "fingerprint", err, ErrNotFound)
}
