package fs

import (
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRenameWhiteoutThroughTheMount: renameat2(RENAME_WHITEOUT) through a
// real mount moves a base file and leaves a character device 0:0 at its
// old name, as ext4 does, and both outlive a remount; the base keeps its
// file.
func TestRenameWhiteoutThroughTheMount(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		writeFile(t, filepath.Join(base, "file"), "file")
	})
	if err := unix.Renameat2(unix.AT_FDCWD, sb.path("file"), unix.AT_FDCWD, sb.path("moved"), unix.RENAME_WHITEOUT); err != nil {
		t.Fatalf("renameat2 RENAME_WHITEOUT: %v", err)
	}
	check := func(when string) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(sb.path("file"), &st); err != nil {
			t.Fatalf("%s: lstat the old name: %v", when, err)
		}
		if st.Mode != syscall.S_IFCHR || st.Rdev != 0 {
			t.Fatalf("%s: old name has mode %#o rdev %d, want a whiteout (%#o, 0)", when, st.Mode, st.Rdev, syscall.S_IFCHR)
		}
		if got := readFile(t, sb.path("moved")); got != "file" {
			t.Fatalf("%s: moved holds %q", when, got)
		}
	}
	check("live")
	sb.remount()
	check("after remount")
	if got := readFile(t, filepath.Join(sb.base, "file")); got != "file" {
		t.Fatalf("base file: %q", got)
	}
}
