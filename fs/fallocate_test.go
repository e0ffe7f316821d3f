package fs

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFallocateModes punches a hole and zeroes a range through the mount,
// as fsx and xfstests do, and checks the bytes (also after a remount).
func TestFallocateModes(t *testing.T) {
	content := bytes.Repeat([]byte("0123456789abcdef"), 20000) // 320000 bytes
	sb := newSandbox(t, func(base string) { writeFile(t, base+"/f", string(content)) })
	f, err := os.OpenFile(sb.path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte(nil), content...)
	zero := func(off, n int) {
		for i := off; i < off+n && i < len(want); i++ {
			want[i] = 0
		}
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1000, 150000); err != nil {
		t.Fatalf("punch hole: %v", err)
	}
	zero(1000, 150000)
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE, 300000, 40000); err != nil {
		t.Fatalf("zero range: %v", err)
	}
	zero(300000, 40000)
	want = append(want, make([]byte, 340000-len(want))...)
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE, 0, 10); err != unix.EOPNOTSUPP {
		t.Errorf("punch hole without KEEP_SIZE: got %v, want EOPNOTSUPP", err)
	}
	f.Close()
	for _, when := range []string{"live", "after remount"} {
		if when != "live" {
			sb.remount()
		}
		got, err := os.ReadFile(sb.path("f"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: content differs (got %d bytes, want %d)", when, len(got), len(want))
		}
	}
}
