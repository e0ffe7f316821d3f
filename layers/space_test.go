package layers

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// smallStoreEnv is a store on a 16 MiB tmpfs the test mounts (as root),
// over a base outside it. The reserve checkSpace keeps is then a quarter
// of the file system, 4 MiB.
func smallStoreEnv(t *testing.T) *testEnv {
	t.Helper()
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	ok(t, "mkdir mnt", os.Mkdir(mnt, 0o700))
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=16m"); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	// Registered first, so it runs after the store is closed.
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	put(t, filepath.Join(dir, "base", "f"), "base file")
	return envAt(t, mnt, filepath.Join(dir, "base"), MinBlockSize)
}

// envAt opens a store in dir/store and creates sandbox "sb" over base
// (which must exist) with block size bs; the store is closed when the
// test ends.
func envAt(t *testing.T, dir, base string, bs int) *testEnv {
	t.Helper()
	e := &testEnv{t: t, dir: dir, base: base, name: "sb"}
	s, err := Open(filepath.Join(dir, "store"))
	ok(t, "open", err)
	e.store = s
	t.Cleanup(func() { e.store.Close() })
	_, err = s.CreateSandbox(e.name, e.base, bs)
	ok(t, "create", err)
	return e
}

// fillTo writes a filler file next to the store until the file system has
// about want bytes free, and returns its path.
func fillTo(t *testing.T, dir string, want int64) string {
	t.Helper()
	var fs syscall.Statfs_t
	ok(t, "statfs", syscall.Statfs(dir, &fs))
	free := int64(fs.Bavail) * fs.Bsize
	if free <= want {
		t.Fatalf("only %d bytes free before filling, want more than %d", free, want)
	}
	p := filepath.Join(dir, "filler")
	ok(t, "fill", os.WriteFile(p, make([]byte, free-want), 0o600))
	return p
}

// TestStoreReserve: below the metadata reserve every operation that grows
// the store fails with ErrNoSpace before it writes anything, while those
// that free space, reads and checkpoints still work; with space back,
// writes work again.
func TestStoreReserve(t *testing.T) {
	e := smallStoreEnv(t)
	v := e.view()
	defer func() { v.Close() }()
	f := mkfile(t, v, RootIno, "f2", "before")
	victim := mkfile(t, v, RootIno, "victim", "goes")
	mkfile(t, v, RootIno, "w", "moves")
	mkdir(t, v, RootIno, "d")
	ok(t, "sync", v.Sync())
	filler := fillTo(t, e.dir, 2<<20) // under the 4 MiB reserve, with room for badger
	grow := []struct {
		name string
		op   func() error
	}{
		{"write", func() error { _, err := v.WriteAt(f.Ino, []byte("more"), 6, false); return err }},
		{"mknod", func() error { _, err := v.Mknod(RootIno, "n", 0o644, 0, root); return err }},
		{"mkdir", func() error { _, err := v.Mkdir(RootIno, "m", 0o755, root); return err }},
		{"symlink", func() error { _, err := v.Symlink(RootIno, "l", "target", root); return err }},
		{"link", func() error { _, err := v.Link(f.Ino, RootIno, "hard"); return err }},
		{"setxattr", func() error { return v.SetXattr(f.Ino, "user.k", []byte("v"), 0) }},
		{"tmpfile", func() error { _, err := v.Tmpfile(RootIno, 0o600, root); return err }},
		{"rename leaving a whiteout", func() error { return v.RenameWhiteoutAs(RootIno, "w", RootIno, "w2", RenameWhiteout, root) }},
	}
	for _, c := range grow {
		wantErr(t, c.name+" below the reserve", c.op(), ErrNoSpace)
	}
	if got := names(t, v, RootIno); !sameStrings(got, []string{"d", "f", "f2", "victim", "w"}) {
		t.Fatalf("root after refused creates: got %v", got)
	}
	if got := content(t, v, f.Ino); got != "before" {
		t.Fatalf("f2 after a refused write: got %q", got)
	}
	// Freeing space and checkpoints may dip into the reserve.
	ok(t, "unlink", v.Unlink(RootIno, "victim"))
	sz := int64(2)
	_, err := v.SetAttr(f.Ino, SetAttrIn{Size: &sz})
	ok(t, "truncate", err)
	ok(t, "rmdir", v.Rmdir(RootIno, "d"))
	_, _, err = e.store.Freeze("sb", noFreezeFn)
	ok(t, "freeze", err)
	if _, err := v.Lookup(RootIno, "victim"); err == nil {
		t.Fatalf("victim (inode %d) still has its name after unlink", victim.Ino)
	}
	ok(t, "remove filler", os.Remove(filler))
	for _, c := range grow {
		ok(t, c.name+" with space back", c.op())
	}
	v = e.reopen(v)
	if got := content(t, v, lookup(t, v, RootIno, "f2").Ino); got != "be\x00\x00\x00\x00more" {
		t.Fatalf("f2 after reopen: got %q", got)
	}
}

// TestSpaceCheckTrust: a space check that finds more than spaceSlack
// beyond the reserve is trusted for spaceTrust, so writes skip statfs(2)
// meanwhile; one that finds less (a small file system, or one filling
// up) is never trusted, so every write asks again and stops at the
// reserve.
func TestSpaceCheckTrust(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     func(t *testing.T) *testEnv
		trusted bool
	}{
		{"the test's file system", func(t *testing.T) *testEnv { return newEnv(t, MinBlockSize, nil) }, true},
		{"a 16 MiB file system", smallStoreEnv, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env(t)
			if tc.trusted {
				var fs syscall.Statfs_t
				ok(t, "statfs", syscall.Statfs(e.store.dir, &fs))
				if free := fs.Bavail * uint64(fs.Bsize); free < 2*spaceSlack {
					t.Skipf("only %d bytes free here", free)
				}
			}
			e.store.spaceOKUntil.Store(0)
			before := time.Now().UnixNano()
			ok(t, "check", e.store.checkSpace())
			until := e.store.spaceOKUntil.Load()
			if trusted := until > before; trusted != tc.trusted {
				t.Fatalf("trusted until %d (checked at %d): %v, want %v", until, before, trusted, tc.trusted)
			}
			if tc.trusted && until > time.Now().UnixNano()+int64(spaceTrust) {
				t.Fatalf("trusted for more than %v", spaceTrust)
			}
		})
	}
}
