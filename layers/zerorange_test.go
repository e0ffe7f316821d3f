package layers

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestZeroRangeKeepsSpace: ZeroRange zeroes a range and keeps it
// allocated, where Zero gives the space back; st_blocks counts an
// allocated block whole, across a sync, a freeze, a write that moves the
// block (in the active layer and from a frozen one) and a reopen. Run with
// the store on the test's file system and on tmpfs, which has no
// ZERO_RANGE (the slot is zeroed by a write there).
func TestZeroRangeKeepsSpace(t *testing.T) {
	dirs := []struct{ name, dir string }{{"disk", ""}}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		dirs = append(dirs, struct{ name, dir string }{"tmpfs", "/dev/shm"})
	}
	for _, d := range dirs {
		t.Run(d.name, func(t *testing.T) {
			const bs = MinBlockSize
			e := newEnvIn(t, d.dir, bs)
			v := e.view()
			defer func() { v.Close() }()
			want := bytes.Repeat([]byte("abc"), bs) // three blocks
			f := mkfile(t, v, RootIno, "f", string(want))
			blocks := func(when string, n int64) {
				t.Helper()
				a, err := v.GetAttr(f.Ino)
				ok(t, "getattr", err)
				if a.Blocks*512 != n*bs {
					t.Fatalf("%s: %d bytes allocated, want %d blocks (%d)", when, a.Blocks*512, n, n*bs)
				}
				if got := content(t, v, f.Ino); got != string(want) {
					t.Fatalf("%s: content differs from the model", when)
				}
			}
			ok(t, "sync", v.Sync())
			blocks("written", 3)
			ok(t, "punch", v.Zero(f.Ino, bs, bs, true))
			clear(want[bs : 2*bs])
			ok(t, "sync", v.Sync())
			blocks("punched", 2)
			ok(t, "zero range", v.ZeroRange(f.Ino, bs-1, bs+2, true))
			clear(want[bs-1 : 2*bs+1])
			blocks("zeroed", 3)
			ok(t, "sync", v.Sync())
			blocks("zeroed, synced", 3)
			// A write moves the sealed block to a new slot, allocated too.
			_, err := v.WriteAt(f.Ino, []byte("w"), bs+1, false)
			ok(t, "write", err)
			want[bs+1] = 'w'
			blocks("written into, active", 3)
			_, _, err = e.store.Freeze(e.name, noFreezeFn)
			ok(t, "freeze", err)
			_, err = v.WriteAt(f.Ino, []byte("v"), bs+2, false)
			ok(t, "write", err)
			want[bs+2] = 'v'
			blocks("written into, from a frozen layer", 3)
			// Past the end, without keepSize: the file grows and the new
			// block is allocated.
			ok(t, "zero range past the end", v.ZeroRange(f.Ino, 3*bs, bs, false))
			want = append(want, make([]byte, bs)...)
			blocks("grown", 4)
			v = e.reopen(v)
			f = lookup(t, v, RootIno, "f")
			blocks("reopened", 4)
			for _, c := range []struct{ off, n int64 }{{-1, 1}, {0, 0}, {1, MaxFileSize}} {
				wantErr(t, "zero range", v.ZeroRange(f.Ino, c.off, c.n, true), ErrInvalid)
			}
			wantErr(t, "zero range of a directory", v.ZeroRange(RootIno, 0, 1, true), ErrInvalid)
		})
	}
}

// newEnvIn is newEnv with the store, and the base, under dir ("" for the
// test's temporary directory).
func newEnvIn(t *testing.T, dir string, bs int) *testEnv {
	t.Helper()
	if dir == "" {
		return newEnv(t, bs, nil)
	}
	d, err := os.MkdirTemp(dir, "strata-test-")
	ok(t, "temp dir", err)
	t.Cleanup(func() { os.RemoveAll(d) })
	ok(t, "base", os.MkdirAll(filepath.Join(d, "base"), 0o755))
	return envAt(t, d, filepath.Join(d, "base"), bs)
}
