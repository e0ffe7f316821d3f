package fs

import (
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// Invalidate drops what the kernel caches about this mount: for every
// inode the kernel knows, its attributes and pages; for every directory it
// knows, the entries it holds. Negative entries are never cached (see
// mount.go), so a name that a rollback brings back is found at once. Call it after the view was
// repointed and from outside any FUSE request: notifications issued from
// inside one can deadlock. It returns the number of notifications sent.
func (m *Mount) Invalidate() int {
	sent := 0
	seen := map[*gofs.Inode]bool{}
	queue := []*gofs.Inode{&m.root.Inode}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if seen[n] {
			continue
		}
		seen[n] = true
		n.NotifyContent(0, 0)
		sent++
		if n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFDIR {
			continue
		}
		names := map[string]bool{}
		for name, ch := range n.Children() {
			names[name] = true
			queue = append(queue, ch)
		}
		for name := range names {
			n.NotifyEntry(name)
			sent++
		}
	}
	return sent
}
