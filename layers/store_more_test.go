package layers

import (
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

// TestCloseWithLostInodeSequence: Close reports that it could not record
// how far the inode sequence went when its record is gone.
func TestCloseWithLostInodeSequence(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	mkfile(t, v, RootIno, "f", "")
	ok(t, "close view", v.Close())
	ok(t, "drop the sequence", e.store.update(func(txn *badger.Txn) error { return txn.Delete([]byte("q/ino")) }))
	wantErr(t, "close", e.store.Close(), badger.ErrKeyNotFound)
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
