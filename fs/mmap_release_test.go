package fs

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

const mmapChildEnv = "STRATA_TEST_MMAP_CHILD"

// TestMmapSharedRightAfterReadingABaseFile: reading an untouched base file
// and at once mapping it shared and writable must work. When such reads
// were passthrough, close(2) returned before the kernel's RELEASE reached
// us, the next open got a direct-I/O handle, and MAP_SHARED on that failed
// with ENODEV (the stress test found it).
//
// The mapping is touched in a child process: a page fault served by this
// process's own FUSE server can stall the Go runtime's stop-the-world.
func TestMmapSharedRightAfterReadingABaseFile(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 50
	}
	const size = 40000
	sb := newSandbox(t, func(base string) {
		for i := 0; i < n; i++ {
			if err := os.WriteFile(filepath.Join(base, fmt.Sprint("f", i)), make([]byte, size), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	})
	cmd := exec.Command(os.Args[0], "-test.run=^TestMmapChild$", "-test.v")
	cmd.Env = append(os.Environ(), mmapChildEnv+"="+sb.mnt, "STRATA_TEST_MMAP_N="+strconv.Itoa(n))
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestMmapChild")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for i := 0; i < n; i++ {
		got, err := os.ReadFile(sb.path(fmt.Sprint("f", i)))
		if err != nil {
			t.Fatal(err)
		}
		if want := append([]byte{'x'}, make([]byte, size-1)...); !bytes.Equal(got, want) {
			t.Fatalf("file %d: the write through the mapping is not in the file", i)
		}
	}
}

// TestMmapChild is the child of TestMmapSharedRightAfterReadingABaseFile;
// it does nothing unless that test runs it.
func TestMmapChild(t *testing.T) {
	mnt := os.Getenv(mmapChildEnv)
	if mnt == "" {
		t.Skip("run by TestMmapSharedRightAfterReadingABaseFile")
	}
	n, _ := strconv.Atoi(os.Getenv("STRATA_TEST_MMAP_N"))
	const size = 40000
	for i := 0; i < n; i++ {
		p := filepath.Join(mnt, fmt.Sprint("f", i))
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(p, unix.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			unix.Close(fd)
			t.Fatalf("file %d: mmap MAP_SHARED right after a read: %v", i, err)
		}
		m[0] = 'x'
		err = unix.Msync(m, unix.MS_SYNC)
		unix.Munmap(m)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("file %d: msync: %v", i, err)
		}
	}
}

// TestWriteWhileReaderHoldsABaseFile: a process keeps an untouched base
// file open for reading while others open it for writing, as `tail -f`
// and a logger do; every open must succeed and the reader sees the writes.
// (With passthrough reads on a writable mount the kernel failed the
// writers' opens with EIO.)
func TestWriteWhileReaderHoldsABaseFile(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		if err := os.WriteFile(filepath.Join(base, "log"), []byte("base\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	r, err := os.Open(sb.path("log"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for i := 0; i < 20; i++ {
		w, err := os.OpenFile(sb.path("log"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatalf("open %d for append while a reader holds the file: %v", i, err)
		}
		if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		rw, err := os.OpenFile(sb.path("log"), os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("open %d read-write while a reader holds the file: %v", i, err)
		}
		rw.Close()
	}
	buf := make([]byte, 4096)
	n, err := r.ReadAt(buf, 0)
	if err != nil && n == 0 {
		t.Fatal(err)
	}
	if want := "base\nline 0\n"; !bytes.HasPrefix(buf[:n], []byte(want)) || !bytes.HasSuffix(buf[:n], []byte("line 19\n")) {
		t.Fatalf("the reader's handle reads %q", buf[:n])
	}
}
