package layers

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// TestRelativePathsWithoutWorkingDir: a relative store or base path cannot
// be resolved once the working directory is gone; both fail with the
// cause instead of resolving against nothing.
func TestRelativePathsWithoutWorkingDir(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	cwd := filepath.Join(t.TempDir(), "cwd")
	ok(t, "mkdir", os.Mkdir(cwd, 0o700))
	t.Chdir(cwd)
	ok(t, "remove the working dir", os.Remove(cwd))
	_, err := Open("store")
	wantErr(t, "open a relative store", err, syscall.ENOENT)
	_, err = e.store.CreateSandbox("rel", "base", 0)
	wantErr(t, "create over a relative base", err, syscall.ENOENT)
}

// TestOpenOnReadOnlyFileSystem: a store on a read-only file system fails to
// open with the cause.
func TestOpenOnReadOnlyFileSystem(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "mnt")
	ok(t, "mkdir", os.Mkdir(mnt, 0o700))
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	dir := filepath.Join(mnt, "store")
	for _, d := range []string{"meta", "data", "run"} {
		ok(t, "mkdir "+d, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	ok(t, "remount read-only", unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""))
	_, err := Open(dir)
	wantErr(t, "open", err, syscall.EROFS)
}

// TestCheckSpaceWithoutFileSystem: when the store's file system cannot be
// asked (the store is closed), the reserve check lets writes through; they
// report a full disk themselves.
func TestCheckSpaceWithoutFileSystem(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	ok(t, "check open store", e.store.checkSpace())
	ok(t, "close", e.store.Close())
	ok(t, "check closed store", e.store.checkSpace())
}

// TestInodeSequence: inode numbers are never handed out twice, in one
// process or across restarts, when writing a lease fails (badger's own
// Sequence handed a range out twice then), and Close reports a lease it
// could not give back.
func TestInodeSequence(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	t.Cleanup(func() { inoSeqHook = nil })
	seen := map[uint64]bool{}
	take := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			ino, err := e.store.nextIno()
			ok(t, "next inode", err)
			if seen[ino] {
				t.Fatalf("inode number %d handed out twice", ino)
			}
			seen[ino] = true
		}
	}
	take(inoLease + 10)
	failed := errors.New("writes are blocked")
	inoSeqHook = func(uint64) error { return failed }
	take(inoLease - 10) // the rest of the lease needs no write
	if _, err := e.store.nextIno(); !errors.Is(err, failed) {
		t.Fatalf("next inode with the lease unwritable: %v, want the write's error", err)
	}
	if _, err := e.store.nextIno(); !errors.Is(err, failed) {
		t.Fatalf("next inode again with the lease unwritable: %v, want the write's error", err)
	}
	inoSeqHook = nil
	take(2*inoLease + 5)
	// Across a restart, numbers go on from what was handed out.
	ok(t, "close", e.store.Close())
	s, err := Open(filepath.Join(e.dir, "store"))
	ok(t, "reopen", err)
	e.store = s
	take(inoLease / 2) // half the lease is left to give back
	inoSeqHook = func(uint64) error { return failed }
	wantErr(t, "close with the lease unwritable", e.store.Close(), failed)
	inoSeqHook = nil
	s, err = Open(filepath.Join(e.dir, "store"))
	ok(t, "reopen", err)
	e.store = s
	take(10)
}

// TestTxnAfterItsTransaction: a Txn kept past the function it was given to
// fails instead of reading from a finished transaction.
func TestTxnAfterItsTransaction(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	var kept *Txn
	ok(t, "update", e.store.Update(func(tx *Txn) error {
		kept = tx
		return tx.Set("x/k", []byte("v"))
	}))
	if _, err := kept.Get("x/k"); err == nil {
		t.Fatalf("get through a finished transaction succeeded")
	}
	ok(t, "view", e.store.View(func(tx *Txn) error {
		got, err := tx.Get("x/k")
		if err == nil && string(got) != "v" {
			t.Fatalf("x/k: got %q, want v", got)
		}
		return err
	}))
}

// TestCompareUnknownSandbox: layers that exist do not make a comparison
// of a sandbox that does not.
func TestCompareUnknownSandbox(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	l1 := freeze(t, e.store, "sb")
	_, err := e.store.Compare("nosuch", "", l1, false)
	wantErr(t, "compare", err, ErrNotFound)
}

// TestNewIDOrdered: ids made in a burst (many within one millisecond) sort
// in the order they were made.
func TestNewIDOrdered(t *testing.T) {
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = NewID()
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatalf("ids made in order do not sort in order")
	}
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Fatalf("id %d repeats %s", i, ids[i])
		}
	}
}

// TestGCDeletesInBatches: a dropped layer's keys go in batches of
// ordinary writes, however many there are; the store stays consistent.
func TestGCDeletesInBatches(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	t.Cleanup(func() { deleteBatch = 10000 })
	deleteBatch = 3
	v := e.view()
	for i := 0; i < 10; i++ {
		mkfile(t, v, RootIno, "f"+string(rune('a'+i)), "x")
	}
	ok(t, "close view", v.Close())
	ok(t, "remove sandbox", e.store.RemoveSandbox(e.name))
	n := 0
	ok(t, "count", e.store.View(func(tx *Txn) error {
		it := tx.txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tInode, '/'}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}))
	if n != 0 {
		t.Fatalf("%d inode keys left after the sandbox went", n)
	}
}

// TestCorruptInodeLease: a lease record of the wrong size fails the open.
func TestCorruptInodeLease(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	ok(t, "break", e.store.update(func(txn *badger.Txn) error { return txn.Set(inoSeqKey, []byte{1, 2, 3}) }))
	ok(t, "close", e.store.Close())
	s, err := Open(filepath.Join(e.dir, "store"))
	if err == nil {
		s.Close()
	}
	wantErr(t, "open", err, ErrCorrupt)
	s, err = Open(filepath.Join(e.dir, "store")) // for the cleanup's Close
	if err == nil {
		e.store = s
	}
}
