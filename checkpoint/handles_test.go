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
	if got, _ := l.read("dir/a.txt"); got != "before" {
		t.Errorf("new open: got %q, want %q", got, "before")
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
