package fs

import (
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// TestPosix runs go-fuse's reusable POSIX conformance cases against a real
// mount, each on a fresh sandbox whose base holds a file and a directory.
// notPOSIX lists cases that assert behaviour a native file system does not
// have either, with the reason.
var notPOSIX = map[string]string{
	// POSIX record locks belong to the process: a second descriptor of the
	// same process never conflicts (ext4 returns success too). The case
	// passes only on go-fuse's loopback, which turns them into OFD locks.
	"FcntlFlockLocksFile": "expects two descriptors of one process to conflict",
}

func TestPosix(t *testing.T) {
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fn := posixtest.All[name]
		t.Run(name, func(t *testing.T) {
			if why, ok := notPOSIX[name]; ok {
				t.Skip(why)
			}
			sb := newSandbox(t, nil)
			fn(t, sb.mnt)
		})
	}
}
