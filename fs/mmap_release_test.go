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
// (a passthrough handle) and at once mapping it shared and writable must
// work: close(2) returns before the kernel's RELEASE reaches us, and an
// open that still saw the passthrough handle used to get a direct-I/O
// handle, on which MAP_SHARED fails with ENODEV (the stress test found it).
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
