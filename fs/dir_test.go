package fs

import (
	"os"
	"sort"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
)

// TestCachedListings: the kernel keeps directory listings across opens,
// and every change shows in the next listing: creates, removes and renames
// through the mount, and a rollback that changes the directory, whether it
// drops only what it touched or everything.
func TestCachedListings(t *testing.T) {
	underBothInvalidations(t, func(t *testing.T, sb *sandbox, mgr *checkpoint.Manager) {
		list := func(want ...string) {
			t.Helper()
			ents, err := os.ReadDir(sb.path("d"))
			mustNil(t, "readdir", err)
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			sort.Strings(want)
			if !equalStrings(got, want) {
				t.Fatalf("listing of d: got %v, want %v", got, want)
			}
		}
		list("base.txt")
		list("base.txt") // from the kernel's cache
		writeFile(t, sb.path("d/a"), "a")
		list("a", "base.txt")
		cp, err := mgr.Create(sb.name, checkpoint.Options{})
		mustNil(t, "checkpoint", err)
		mustNil(t, "rename", os.Rename(sb.path("d/a"), sb.path("d/b")))
		mustNil(t, "remove", os.Remove(sb.path("d/base.txt")))
		mustNil(t, "mkdir", os.Mkdir(sb.path("d/sub"), 0o755))
		list("b", "sub")
		list("b", "sub")
		_, err = mgr.Rollback(sb.name, cp.ID)
		mustNil(t, "rollback", err)
		list("a", "base.txt")
		sb.remount()
		list("a", "base.txt")
	})
}
