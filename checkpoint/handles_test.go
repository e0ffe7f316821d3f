package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenHandlesAcrossRollback pins down what docs/design.md promises: an
// older handle gets ESTALE for I/O, a new open sees the checkpoint, and a
// working directory inside the sandbox keeps working.
func TestOpenHandlesAcrossRollback(t *testing.T) {
	l := newLive(t, nil)
	l.write("dir/a.txt", "before")
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.write("dir/a.txt", "after!")
	f, err := os.OpenFile(filepath.Join(l.mnt, "dir/a.txt"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir, err := os.Open(filepath.Join(l.mnt, "dir"))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if _, err := l.mgr.Rollback("s", cp.ID); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("read on old handle: got %v, want ESTALE", err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("write on old handle: got %v, want ESTALE", err)
	}
	if _, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("SEEK_DATA on old handle: got %v, want ESTALE", err)
	}
	other, err := os.Create(filepath.Join(l.mnt, "copy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := unix.CopyFileRange(int(f.Fd()), nil, int(other.Fd()), nil, 4, 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("copy_file_range from old handle: got %v, want ESTALE", err)
	}
	// Metadata changes through the old handle fail too: they would land
	// on the checkpoint's file.
	oldFd := int(f.Fd())
	for name, err := range map[string]error{
		"fchmod":       unix.Fchmod(oldFd, 0o600),
		"fchown":       unix.Fchown(oldFd, 1, 1),
		"futimens":     unix.UtimesNanoAt(oldFd, "", []unix.Timespec{{Sec: 1}, {Sec: 1}}, unix.AT_EMPTY_PATH),
		"fsetxattr":    unix.Fsetxattr(oldFd, "user.x", []byte("1"), 0),
		"fremovexattr": unix.Fremovexattr(oldFd, "user.x"),
	} {
		if !errors.Is(err, syscall.ESTALE) {
			t.Errorf("%s on old handle: got %v, want ESTALE", name, err)
		}
	}
	if got, _ := l.read("dir/a.txt"); got != "before" {
		t.Errorf("new open: got %q, want %q", got, "before")
	}
	// By path the kernel finds the file's new inode.
	if err := os.Chmod(filepath.Join(l.mnt, "dir/a.txt"), 0o640); err != nil {
		t.Errorf("chmod by path after the rollback: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(l.mnt, "dir/a.txt")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after chmod by path: %v, %v", fi, err)
	}
	// The directory handle (as a working directory would) still resolves
	// names, in the checkpoint's tree.
	fd, err := syscall.Openat(int(dir.Fd()), "a.txt", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("openat through old directory handle: %v", err)
	}
	n, _ := syscall.Read(fd, buf)
	syscall.Close(fd)
	if string(buf[:n]) != "before" {
		t.Errorf("openat through old directory handle reads %q, want %q", buf[:n], "before")
	}
}

// TestSharedMappingAcrossRollback: a shared mapping made before a rollback
// cannot reach the file the rollback brought back. The kernel keeps pages
// and mappings per inode, so while the file kept its kernel inode, the old
// mapping faulted in the pages a new open read, its stores showed in the
// new mapping and were saved by the new open's writeback, and the new
// handle's msync reported the old handle's ESTALE. Now a rolled-back file
// gets a new kernel inode: the old mapping faults (SIGBUS, the page-in
// fails with ESTALE), or at least changes nothing the new one sees.
func TestSharedMappingAcrossRollback(t *testing.T) {
	l := newLive(t, nil)
	l.write("f", strings.Repeat("\x00", 8192))
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(l.mnt, "f")
	// Mappings and files are let go before the mount goes (newLive's
	// cleanup, or the remount below), each once.
	var undo []func()
	release := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
		undo = nil
	}
	t.Cleanup(release)
	mapRW := func() ([]byte, *os.File) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		undo = append(undo, func() { f.Close() })
		m, err := unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		undo = append(undo, func() { unix.Munmap(m) })
		return m, f
	}
	old, _ := mapRW()
	copy(old, "PRE!")
	if err := unix.Msync(old, unix.MS_SYNC); err != nil {
		t.Fatal(err)
	}
	if _, err := l.mgr.Rollback("s", cp.ID); err != nil {
		t.Fatal(err)
	}
	cur, curf := mapRW()
	if got := string(cur[:4]); got != "\x00\x00\x00\x00" {
		t.Fatalf("new mapping after the rollback: %q, want zeros", got)
	}
	// The old mapping's store: a fault is the expected outcome.
	faulted := func() (f bool) {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		defer func() { f = recover() != nil }()
		copy(old[100:], "EVIL")
		return false
	}()
	t.Logf("store through the old mapping faulted: %v", faulted)
	if got := string(cur[100:104]); got != "\x00\x00\x00\x00" {
		t.Errorf("new mapping after a store through the old one: %q, want zeros", got)
	}
	copy(cur[4000:], "NEW!")
	if err := unix.Msync(cur, unix.MS_SYNC); err != nil {
		t.Errorf("msync of the new mapping: %v", err)
	}
	if _, err := curf.WriteAt([]byte("pw"), 6000); err != nil {
		t.Errorf("pwrite on the new handle: %v", err)
	}
	if err := curf.Sync(); err != nil {
		t.Errorf("fsync of the new handle: %v", err)
	}
	// Whatever the old mapping holds goes nowhere, even once it is gone.
	release()
	l.unmount()
	l.mount()
	got, _ := l.read("f")
	want := []byte(strings.Repeat("\x00", 8192))
	copy(want[4000:], "NEW!")
	copy(want[6000:], "pw")
	if got != string(want) {
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("f after a remount differs at %d: %q, want %q (the old mapping's store reached it)", i, got[i:min(i+8, len(got))], want[i:i+8])
			}
		}
	}
}

// TestDeadDirectoryComesBack: a directory removed (or replaced by a
// rename) while a process holds it is dead in the kernel for as long as
// it is held: it lists nothing and finds no name. A rollback that brings
// it back must give the kernel a new inode for it, or the directory reads
// as empty and refuses new entries until the holder lets go (found by an
// agent workload test: a shell sitting in build/ while rm -rf build ran).
func TestDeadDirectoryComesBack(t *testing.T) {
	l := newLive(t, func(base string) {
		os.MkdirAll(filepath.Join(base, "fromBase"), 0o755)
		os.WriteFile(filepath.Join(base, "fromBase/f"), []byte("base"), 0o644)
	})
	l.write("d/file", "data")
	l.write("d/sub/deep", "deep")
	if err := os.Mkdir(filepath.Join(l.mnt, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var holders []*os.File
	defer func() {
		for _, f := range holders {
			f.Close()
		}
	}()
	for _, dir := range []string{"d", "d/sub", "fromBase", "empty"} {
		f, err := os.Open(filepath.Join(l.mnt, dir))
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, f)
	}
	for _, dir := range []string{"d", "fromBase"} {
		if err := os.RemoveAll(filepath.Join(l.mnt, dir)); err != nil {
			t.Fatal(err)
		}
	}
	// "empty" is replaced by another directory.
	if err := os.Mkdir(filepath.Join(l.mnt, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	// (os.Rename refuses to replace a directory; rename(2) does it.)
	if err := syscall.Rename(filepath.Join(l.mnt, "other"), filepath.Join(l.mnt, "empty")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.mgr.Rollback("s", cp.ID); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"d/file": "data", "d/sub/deep": "deep", "fromBase/f": "base"} {
		if got, ok := l.read(rel); got != want {
			t.Errorf("%s after the rollback: %q (found %v), want %q", rel, got, ok, want)
		}
	}
	for _, dir := range []string{"d", "d/sub", "fromBase", "empty"} {
		ents, err := os.ReadDir(filepath.Join(l.mnt, dir))
		if err != nil || (dir == "d" && len(ents) != 2) {
			t.Errorf("listing %s after the rollback: %d entries, %v", dir, len(ents), err)
		}
		if err := os.WriteFile(filepath.Join(l.mnt, dir, "new"), []byte("x"), 0o644); err != nil {
			t.Errorf("creating a file in %s after the rollback: %v", dir, err)
		}
	}
}
