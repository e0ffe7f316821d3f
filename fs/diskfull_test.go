package fs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// smallFS mounts a tmpfs of size bytes in a temporary directory and
// returns it; it is unmounted when the test ends. Tests that need a full
// disk put their store on it.
func smallFS(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("mounting a small tmpfs needs root (euid %d)", os.Geteuid())
	}
	dir := filepath.Join(t.TempDir(), "small")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size="+strconv.FormatInt(size, 10)+",mode=0700"); err != nil {
		t.Fatalf("mount tmpfs of %d bytes at %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		// The sandbox mounted from it goes first (cleanups run last in,
		// first out); a busy tmpfs is detached rather than left behind.
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount tmpfs %s: %v; detaching it", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

// freeBytes is what an unprivileged writer may still put on dir's file system.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	return int64(st.Bavail) * st.Bsize
}

// newSandboxOn is newSandbox with the store in storeDir.
func newSandboxOn(t *testing.T, storeDir string, fill func(base string)) *sandbox {
	t.Helper()
	dir := t.TempDir()
	sb := &sandbox{t: t, base: filepath.Join(dir, "base"), mnt: filepath.Join(dir, "mnt"), name: "test"}
	for _, d := range []string{sb.base, sb.mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if fill != nil {
		fill(sb.base)
	}
	st, err := layers.Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	sb.store = st
	t.Cleanup(func() {
		if sb.m != nil {
			sb.unmount()
		}
		st.Close()
	})
	if _, err := st.CreateSandbox(sb.name, sb.base, 0); err != nil {
		t.Fatal(err)
	}
	sb.mount()
	return sb
}

// Invalidate lets a sandbox serve as the checkpoint manager's link to its
// live mount.
func (sb *sandbox) Invalidate(name string) {
	if sb.m != nil && name == sb.name {
		sb.m.Invalidate()
	}
}

// fillUntilFull appends chunks to path through the mount until a write
// fails, and returns that error and how many bytes went in. It gives up
// (failing the test) after limit bytes.
func fillUntilFull(t *testing.T, path string, limit int64) (int64, error) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	chunk := randBytes(7, 1<<20)
	var n int64
	for n < limit {
		w, err := f.Write(chunk)
		n += int64(w)
		if err != nil {
			return n, err
		}
	}
	t.Fatalf("wrote %d bytes to %s on a file system smaller than that, and no error", n, path)
	return n, nil
}

// The store's file system fills up (a 64 MiB tmpfs holding only the
// store and a filler): writes and creates through the mount fail with
// ENOSPC — at the store's metadata reserve, not at zero, since badger maps
// its files and a write into a mapped page the file system cannot back is
// a SIGBUS. Checkpoints and rollbacks work or fail with ErrNoSpace; once
// space is freed everything works again, a remount shows what was synced,
// and fsck finds nothing wrong.
func TestDiskFull(t *testing.T) {
	const fsSize = 64 << 20
	small := smallFS(t, fsSize)
	sb := newSandboxOn(t, filepath.Join(small, "store"), func(base string) {
		writeFile(t, filepath.Join(base, "base.txt"), "from the base")
	})
	mgr := checkpoint.New(sb.store, sb)

	keep := randBytes(1, 300<<10)
	writeBytes(t, sb.path("keep"), keep)
	cp1, err := mgr.Create(sb.name, checkpoint.Options{Label: "before"})
	mustNil(t, "checkpoint before the disk fills", err)

	// A filler on the store's file system that the test can take away:
	// the space something else on the host holds.
	filler := filepath.Join(small, "filler")
	mustNil(t, "filler", os.WriteFile(filler, make([]byte, 8<<20), 0o600))

	n, err := fillUntilFull(t, sb.path("big"), 2*fsSize)
	wantErrno(t, "writing until the store is full", err, syscall.ENOSPC)
	t.Logf("wrote %d MiB before ENOSPC; %d MiB left on the store's file system", n>>20, freeBytes(t, small)>>20)
	if free := freeBytes(t, small); free <= 0 {
		t.Fatalf("the store's file system is completely full (%d bytes free): no reserve kept for metadata", free)
	}

	// What went in before the error is intact.
	b := readBytes(t, sb.path("big"))
	chunk := randBytes(7, 1<<20)
	if int64(len(b)) != n {
		t.Fatalf("big after ENOSPC: %d bytes, want the %d written", len(b), n)
	}
	for off := 0; off < len(b); off += len(chunk) {
		if !bytes.Equal(b[off:min(off+len(chunk), len(b))], chunk[:min(len(chunk), len(b)-off)]) {
			t.Fatalf("big after ENOSPC: the MiB at %d differs from what was written", off)
		}
	}

	// Everything that grows the store fails the same way, cleanly.
	faults := []struct {
		name string
		op   func() error
	}{
		{"write to an existing file", func() error {
			f, err := os.OpenFile(sb.path("keep"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.WriteAt([]byte("x"), 10<<20)
			return err
		}},
		{"create", func() error { return os.WriteFile(sb.path("new"), nil, 0o644) }},
		{"mkdir", func() error { return os.Mkdir(sb.path("newdir"), 0o755) }},
		{"symlink", func() error { return os.Symlink("target", sb.path("newlink")) }},
		{"link", func() error { return os.Link(sb.path("keep"), sb.path("keep2")) }},
		{"mknod fifo", func() error { return unix.Mkfifo(sb.path("fifo"), 0o644) }},
		{"O_TMPFILE", func() error {
			fd, err := unix.Open(sb.mnt, unix.O_TMPFILE|unix.O_WRONLY, 0o600)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"setxattr", func() error { return unix.Setxattr(sb.path("keep"), "user.k", []byte("v"), 0) }},
		{"copy-up write into a base file", func() error {
			f, err := os.OpenFile(sb.path("base.txt"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("more"))
			return err
		}},
	}
	for _, f := range faults {
		wantErrno(t, f.name+" on a full store", f.op(), syscall.ENOSPC)
	}
	t.Logf("%d operations failed with ENOSPC on the full store", len(faults))

	// Reading, listing and stat still work.
	checkBytes(t, sb.path("keep"), keep)
	if got := readFile(t, sb.path("base.txt")); got != "from the base" {
		t.Fatalf("base.txt on a full store: got %q", got)
	}
	if _, err := os.ReadDir(sb.mnt); err != nil {
		t.Fatalf("readdir on a full store: %v", err)
	}
	for _, name := range []string{"new", "newdir", "newlink", "keep2", "fifo"} {
		if _, err := os.Lstat(sb.path(name)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s after its creation failed: lstat got %v, want it absent", name, err)
		}
	}

	// A checkpoint only writes metadata, which the reserve is for: it
	// either works or fails with ErrNoSpace, and the sandbox stays usable.
	cp2, err := mgr.Create(sb.name, checkpoint.Options{Label: "full"})
	switch {
	case err == nil:
		t.Logf("checkpoint on the full store: made %s", cp2.ID)
	case errors.Is(err, layers.ErrNoSpace):
		t.Logf("checkpoint on the full store: %v", err)
	default:
		t.Fatalf("checkpoint on the full store: got %v, want success or %v", err, layers.ErrNoSpace)
	}
	res, err := mgr.Rollback(sb.name, cp1.ID)
	switch {
	case err == nil:
		t.Logf("rollback on the full store: archive %s", res.Archive)
		if _, err := os.Lstat(sb.path("big")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("big after the rollback to %s: lstat got %v, want it absent", cp1.ID, err)
		}
	case errors.Is(err, layers.ErrNoSpace):
		t.Logf("rollback on the full store: %v", err)
	default:
		t.Fatalf("rollback on the full store: got %v, want success or %v", err, layers.ErrNoSpace)
	}
	checkBytes(t, sb.path("keep"), keep)

	// Free the space: writes, checkpoints and rollbacks work again.
	mustNil(t, "remove the filler", os.Remove(filler))
	after := randBytes(2, 4<<20)
	writeBytes(t, sb.path("after"), after)
	f, err := os.Open(sb.path("after"))
	mustNil(t, "open after", err)
	mustNil(t, "fsync after", f.Sync())
	f.Close()
	mustNil(t, "mkdir after the space came back", os.Mkdir(sb.path("dir"), 0o755))
	cp3, err := mgr.Create(sb.name, checkpoint.Options{Label: "after"})
	mustNil(t, "checkpoint after the space came back", err)
	writeFile(t, sb.path("doomed"), "rolled back")
	if _, err := mgr.Rollback(sb.name, cp3.ID); err != nil {
		t.Fatalf("rollback after the space came back: %v", err)
	}
	if _, err := os.Lstat(sb.path("doomed")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("doomed after the rollback: lstat got %v, want it absent", err)
	}

	// What was synced survives a remount, and the store checks clean.
	sb.remount()
	checkBytes(t, sb.path("keep"), keep)
	checkBytes(t, sb.path("after"), after)
	if st, err := os.Stat(sb.path("dir")); err != nil || !st.IsDir() {
		t.Fatalf("dir after remount: %v", err)
	}
	sb.unmount()
	rep, err := sb.store.Fsck()
	mustNil(t, "fsck", err)
	if len(rep.Problems) != 0 {
		t.Fatalf("fsck after the disk was full: %d problems: %+v", len(rep.Problems), rep.Problems)
	}
	t.Logf("fsck: %d layers, %d inodes, %d blocks, no problems", rep.Layers, rep.Inodes, rep.Blocks)
}

// Deleting through the mount gives the space back: the slots of a removed
// file are punched once its removal is durable.
func TestDiskFullFreedByDelete(t *testing.T) {
	const fsSize = 64 << 20
	small := smallFS(t, fsSize)
	sb := newSandboxOn(t, filepath.Join(small, "store"), nil)
	n, err := fillUntilFull(t, sb.path("big"), 2*fsSize)
	wantErrno(t, "writing until the store is full", err, syscall.ENOSPC)
	mustNil(t, "remove big", os.Remove(sb.path("big")))
	// The freed slots go back once the removal is durable.
	d, err := os.Open(sb.mnt)
	mustNil(t, "open root", err)
	mustNil(t, "fsync root", d.Sync())
	d.Close()
	want := randBytes(3, int(n/2))
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.WriteFile(sb.path("again"), want, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.ENOSPC) || time.Now().After(deadline) {
			t.Fatalf("writing %d MiB after deleting %d MiB: %v (%d MiB free)", len(want)>>20, n>>20, err, freeBytes(t, small)>>20)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sb.remount()
	checkBytes(t, sb.path("again"), want)
}

// TestFsyncAfterADataSyncFailure: through a mount, an fsync whose data
// sync fails returns EIO, and so does every later one, also once the disk
// works again (a later sync could not tell whether the first one's data
// reached the disk); reads go on. The unmount reports the failure, and the
// next mount shows what was stored before it.
func TestFsyncAfterADataSyncFailure(t *testing.T) {
	sb := newSandbox(t, nil)
	writeFile(t, sb.path("kept"), "stored")
	f, err := os.OpenFile(sb.path("kept"), os.O_RDWR, 0)
	mustNil(t, "open", err)
	mustNil(t, "fsync", f.Sync())
	f.Close()
	g, err := os.Create(sb.path("g"))
	mustNil(t, "create", err)
	defer g.Close()
	_, err = g.Write([]byte("not stored"))
	mustNil(t, "write", err)
	restore := sb.store.InjectFault(func(op, key string) error {
		// Every sync of the disk: the intent log's, then the data file's.
		if op == "datasync" || op == "walsync" {
			return errors.New("disk failed")
		}
		return nil
	})
	err = g.Sync()
	restore()
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync with a failing disk: %v, want EIO", err)
	}
	if err := g.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync once the disk works: %v, want EIO", err)
	}
	if got := readFile(t, sb.path("kept")); got != "stored" {
		t.Fatalf("read after the failure: %q", got)
	}
	g.Close()
	if err := sb.m.Unmount(); err != nil {
		t.Fatal(err)
	}
	if err := sb.m.View().Close(); !errors.Is(err, layers.ErrDataSync) {
		t.Fatalf("closing the view: %v, want ErrDataSync", err)
	}
	sb.m = nil
	sb.mount()
	if got := readFile(t, sb.path("kept")); got != "stored" {
		t.Fatalf("kept after a new mount: %q", got)
	}
}
