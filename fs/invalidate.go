package fs

import (
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/strata-sandbox/strata/layers"
)

// Invalidate drops what the kernel caches about this mount: for every
// inode the kernel knows, its attributes and pages; for every directory it
// knows, the entries it holds, and every missing name it was let cache
// (negative.go), so a name that a rollback brings back is found at once. Call
// it once the view was repointed, or while a repoint holds it (every
// request waits for the new state then: layers.MovedFunc), and from
// outside any FUSE request: notifications issued from inside one can
// deadlock. It returns the number of notifications sent.
func (m *Mount) Invalidate() int {
	m.negs.drop()
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
// are dropped, and in a directory only the names whose entries changed
// (Touched.Names), so the cost follows what changed, not what the kernel
// knows. The same rules apply.
func (m *Mount) InvalidateTouched(t layers.Touched) int {
	m.negs.drop()
	// The inodes' notifications go on a second goroutine while this one
	// sends the directories': the kernel serves both at once, and the
	// time is its own (on this VM 2-3.3 us an inode, 3 us a missing name,
	// 9 us a name it held: that one's inode is forgotten).
	var files atomic.Int64
	var wg sync.WaitGroup
	inodes := func() {
		for _, ino := range t.Inodes {
			for _, n := range m.nodesOf(ino) {
				n.NotifyContent(pagesFrom(n), 0)
				files.Add(1)
			}
		}
	}
	if len(t.Inodes) >= parallelNotifyMin && len(t.Dirs) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inodes()
		}()
	} else {
		inodes()
	}
	sent := 0
	// A directory among the inodes is dropped whole by their goroutine.
	asInode := make(map[uint64]bool, len(t.Inodes))
	for _, ino := range t.Inodes {
		asInode[ino] = true
	}
	dropped := map[*gofs.Inode]bool{}
	content := func(n *gofs.Inode) {
		if !dropped[n] {
			dropped[n] = true
			n.NotifyContent(0, 0)
			sent++
		}
	}
	var unnamed []uint64
	for _, dir := range t.Dirs {
		names, named := t.Names[dir]
		if !named {
			unnamed = append(unnamed, dir)
		}
		for _, n := range m.nodesOf(dir) {
			if !asInode[dir] {
				content(n)
			}
			if !named {
				for name := range n.Children() {
					n.NotifyEntry(name)
					sent++
				}
				continue
			}
			// A changed name may be cached as a child or as missing:
			// either way the kernel asks again.
			for _, name := range names {
				n.NotifyEntry(name)
				sent++
			}
		}
		for _, name := range names {
			m.negs.forget(dir, name)
		}
	}
	// A name missing before may exist now only in a directory whose
	// entries changed.
	sent += m.dropMissing(m.negs.take(unnamed, false))
	wg.Wait()
	return sent + int(files.Load())
}

// pagesFrom is the offset from which a repoint drops inode n's pages in
// the kernel: 0, or -1 (none, only its attributes) for a regular file
// no handle holds. A repoint moves every regular file it touched that the
// kernel holds to a new generation (Mount.repointed), and a stale inode's
// pages are reached only through a handle of it: an open through a name
// the kernel still holds is refused (node.open), and so is one that waits
// for the view while the repoint runs. The pages go with the inode. That
// cuts the kernel's work per file from 3.3 us to 2 (this VM), and most of
// a rollback's notifications are files an agent wrote and closed.
func pagesFrom(n *gofs.Inode) int64 {
	if fn, ok := n.Operations().(*node); ok && n.StableAttr().Mode == syscall.S_IFREG && fn.handles.Load() == 0 {
		return -1
	}
	return 0
}

// parallelNotifyMin is how many inodes a repoint must have touched for
// their notifications to go on a goroutine of their own.
const parallelNotifyMin = 16

// nodesOf is every inode of the tree the kernel knows under number ino.
func (m *Mount) nodesOf(ino uint64) []*gofs.Inode {
	list := m.index.known(ino)
	if ino == layers.RootIno {
		list = append(list, &m.root.Inode)
	}
	return list
}

// notifyInode drops n's attributes and pages and, for a directory, the
// entries the kernel holds in it; child is called with each child inode.
// It returns the number of notifications sent.
func notifyInode(n *gofs.Inode, child func(*gofs.Inode)) int {
	n.NotifyContent(0, 0)
	sent := 1
	if n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return sent
	}
	for name, ch := range n.Children() {
		n.NotifyEntry(name)
		sent++
		child(ch)
	}
	return sent
}
