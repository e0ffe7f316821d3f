package fs

import (
	"bytes"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestXattrOfThreeQuartersBlock does what xfstests' attr_replace_test
// does: an attribute replaced by a value of three quarters of the file's
// st_blksize (as programs size them), read back whole, on a new file and
// on a base file, and after a remount.
func TestXattrOfThreeQuartersBlock(t *testing.T) {
	sb := newSandbox(t, func(base string) { writeFile(t, base+"/base", "b") })
	writeFile(t, sb.path("new"), "n")
	for _, name := range []string{"new", "base"} {
		p := sb.path(name)
		var st unix.Stat_t
		mustNil(t, "stat", unix.Stat(p, &st))
		size := min(int(st.Blksize)*3/4, 64<<10)
		mustNil(t, "create", unix.Setxattr(p, "user.world", []byte("0"), unix.XATTR_CREATE))
		val := bytes.Repeat([]byte{'1'}, size)
		mustNil(t, "replace", unix.Setxattr(p, "user.world", val, unix.XATTR_REPLACE))
		sb.remount()
		buf := make([]byte, 64<<10)
		n, err := unix.Getxattr(p, "user.world", buf)
		mustNil(t, "get", err)
		if !bytes.Equal(buf[:n], val) {
			t.Fatalf("%s: read back %d bytes, want %d", name, n, size)
		}
		// A second value that size does not fit beside it.
		if err := unix.Setxattr(p, "user.more", val[:size/2], 0); err != syscall.ENOSPC {
			t.Fatalf("%s: a second large value: %v, want ENOSPC", name, err)
		}
	}
}
