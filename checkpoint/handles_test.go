package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
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
