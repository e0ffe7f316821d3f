package fs

import "sync"

// generations numbers the kernel inodes of regular files. A rollback (or
// restore) that touches a file moves it to a new generation; go-fuse keys
// its nodes by StableAttr, generation included, so the next lookup of the
// file gives the kernel a new inode. The kernel keeps a page cache and the
// shared mappings per inode, not per open: were the file to keep its
// kernel inode, a mapping made before the rollback would fault in the
// pages a new open brought in, and its stores would reach the
// checkpoint's file through that open's writeback. On the new inode, new
// opens and old mappings share nothing: the old inode's page-ins and
// writebacks come with the old handles, which fail with ESTALE. An open
// that reaches the old inode through a dentry the kernel still holds
// fails with ESTALE too (staleOpen), and the kernel then looks the path
// up again (LOOKUP_REVAL) and opens the new inode. Directories keep their
// inodes: they have no pages to share, and a process's working directory
// stays where it is.
type generations struct {
	mu   sync.Mutex
	cur  uint64            // the newest generation handed out
	all  uint64            // every file's floor: a rollback that could not tell what it touched
	byNo map[uint64]uint64 // by inode number: the last rollback that touched it, while the kernel holds it
	gone []uint64          // of byNo, whose last kernel inode went since the last repoint
}

// of is the generation of inode ino.
func (g *generations) of(ino uint64) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.all, g.byNo[ino])
}

// touch moves inodes inos to a new generation. Only inodes the kernel
// holds need it (Mount.repointed): a kernel inode with pages or mappings
// was looked up, so go-fuse and the index have its node.
func (g *generations) touch(inos []uint64) {
	if len(inos) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cur++
	if g.byNo == nil {
		g.byNo = map[uint64]uint64{}
	}
	for _, ino := range inos {
		g.byNo[ino] = g.cur
	}
}

// forget notes that the kernel holds no inode of number ino any more. A
// generation only has to tell apart the kernel inodes of one file that
// exist at once, so the next repoint drops its entry if still none is
// held (repoint): the map stays as large as what the kernel knows. Not
// here: a lookup may have read the generation and not yet registered its
// inode, and a generation that changed under it would make the inode
// stale at birth, its open refused after the kernel's one retry. A
// repoint may do that to a lookup racing with it, as to any open racing
// with it.
func (g *generations) forget(ino uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.byNo[ino]; ok {
		g.gone = append(g.gone, ino)
	}
}

// repoint drops the entries of files the kernel let go of and no longer
// holds (held false), then moves inos to a new generation.
func (g *generations) repoint(held func(uint64) bool, inos []uint64) {
	g.mu.Lock()
	for _, ino := range g.gone {
		if !held(ino) {
			delete(g.byNo, ino)
		}
	}
	g.gone = g.gone[:0]
	g.mu.Unlock()
	g.touch(inos)
}

// touchAll moves every inode to a new generation.
func (g *generations) touchAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cur++
	g.all = g.cur
	clear(g.byNo) // all is above every entry
	g.gone = g.gone[:0]
}
