package fs

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMountRaisesReadahead: as root, the mount's readahead window is
// readaheadKB, not the kernel's 128 KiB (cold sequential reads of base
// files take a round trip per window).
func TestMountRaisesReadahead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root may set a mount's readahead")
	}
	sb := newSandbox(t, nil)
	var st unix.Stat_t
	if err := unix.Stat(sb.mnt, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != fmt.Sprint(readaheadKB) {
		t.Fatalf("read_ahead_kb: got %s, want %d", got, readaheadKB)
	}
}
