package fs

import (
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/strata-sandbox/strata/layers"
)

// Invalidate drops what the kernel caches about this mount: for every
// inode the kernel knows, its attributes and pages; for every directory it
// knows, the entries it holds, and every missing name it was let cache
// (negative.go), so a name that a rollback brings back is found at once. Call
// it after the view was repointed and from outside any FUSE request:
// notifications issued from inside one can deadlock. It returns the
// number of notifications sent.
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
		sent += notifyInode(n, func(ch *gofs.Inode) { queue = append(queue, ch) })
	}
	return sent + m.dropMissing(m.negs.take(nil, true))
}

// InvalidateTouched is Invalidate for a repoint that told what it touched
// (layers.Changes.Touched): only the inodes and directories named there
// are dropped, so the cost follows what changed, not what the kernel
// knows. The same rules apply: call it after the view was repointed, from
// outside any FUSE request.
func (m *Mount) InvalidateTouched(t layers.Touched) int {
	sent := 0
	seen := map[*gofs.Inode]bool{}
	each := func(ino uint64) {
		list := m.index.known(ino)
		if ino == layers.RootIno {
			list = append(list, &m.root.Inode)
		}
		for _, n := range list {
			if !seen[n] {
				seen[n] = true
				sent += notifyInode(n, nil)
			}
		}
	}
	for _, ino := range t.Dirs {
		each(ino)
	}
	for _, ino := range t.Inodes {
		each(ino)
	}
	// A name missing before may exist now only in a directory whose
	// entries changed.
	return sent + m.dropMissing(m.negs.take(t.Dirs, false))
}

// notifyInode drops n's attributes and pages and, for a directory, the
// entries the kernel holds in it; child, when not nil, is called with
// each child inode. It returns the number of notifications sent.
func notifyInode(n *gofs.Inode, child func(*gofs.Inode)) int {
	n.NotifyContent(0, 0)
	sent := 1
	if n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return sent
	}
	for name, ch := range n.Children() {
		n.NotifyEntry(name)
		sent++
		if child != nil {
			child(ch)
		}
	}
	return sent
}
