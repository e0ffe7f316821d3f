package fs

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMountFlags: the mount says what it does. Set-id bits and device
// nodes take no effect through it, and reads leave atime alone (noatime),
// where the mount used to claim relatime and still never moved it.
func TestMountFlags(t *testing.T) {
	sb := newSandbox(t, func(base string) { writeFile(t, base+"/f", "f") })
	var fs unix.Statfs_t
	mustNil(t, "statfs", unix.Statfs(sb.mnt, &fs))
	for _, f := range []struct {
		name string
		bit  int64
	}{{"nosuid", unix.ST_NOSUID}, {"nodev", unix.ST_NODEV}, {"noatime", unix.ST_NOATIME}} {
		if fs.Flags&f.bit == 0 {
			t.Errorf("mount flags %#x lack %s", fs.Flags, f.name)
		}
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range []string{"f", "new"} {
		p := sb.path(name)
		if name == "new" {
			writeFile(t, p, "n")
		}
		mustNil(t, "utimes", os.Chtimes(p, old, old))
		readFile(t, p)
		var st unix.Stat_t
		mustNil(t, "stat", unix.Stat(p, &st))
		if got := time.Unix(st.Atim.Unix()); !got.Equal(old) {
			t.Errorf("%s: a read moved atime to %v", name, got)
		}
	}
}
