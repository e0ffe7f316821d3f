package fs

import "sync"

// generations numbers the kernel inodes of regular files and directories.
// go-fuse keys its nodes by StableAttr, generation included, so a new
// generation makes the next lookup give the kernel a new inode.
//
// A rollback (or restore) that touches a regular file moves it to a new
// generation. The kernel keeps a page cache and the shared mappings per
// inode, not per open: were the file to keep its kernel inode, a mapping
// made before the rollback would fault in the pages a new open brought
// in, and its stores would reach the checkpoint's file through that
// open's writeback. On the new inode, new opens and old mappings share
// nothing: the old inode's page-ins and writebacks come with the old
// handles, which fail with ESTALE. An open that reaches the old inode
// through a dentry the kernel still holds fails with ESTALE too
// (node.stale), and the kernel then looks the path up again
// (LOOKUP_REVAL) and opens the new inode.
//
// Directories keep their inodes across rollbacks, so a process's working
// directory stays where it is, unless the kernel made one dead (removed,
// or replaced by a rename: Mount.buried): a dead directory lists nothing
// and finds no name for as long as anything holds it, so one a rollback
// brings back needs a new inode.
type generations struct {
	mu    sync.Mutex
	cur   uint64              // the newest generation handed out
	all   uint64              // every file's floor: a rollback that could not tell what it touched
	files map[uint64]uint64   // regular files a rollback touched, while the kernel holds them
	gone  map[uint64]struct{} // of files, whose last kernel inode went since the last repoint
	dirs  map[uint64]uint64   // directories the kernel made dead, while it holds them
}

// file is the generation of regular file ino.
func (g *generations) file(ino uint64) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(g.all, g.files[ino])
}

// dir is the generation of directory ino.
func (g *generations) dir(ino uint64) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dirs[ino]
}

// bury moves directory ino, which the kernel made dead, to a new
// generation.
func (g *generations) bury(ino uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cur++
	if g.dirs == nil {
		g.dirs = map[uint64]uint64{}
	}
	g.dirs[ino] = g.cur
}

// forget notes that the kernel holds no inode of number ino any more. A
// generation only has to tell apart the kernel inodes of one file that
// exist at once, so the entries stay as many as what the kernel knows. A
// directory's goes now. A file's goes at the next repoint if still none is
// held (repoint), not here: a lookup may have read the generation and not
// yet registered its inode, and a generation that changed under it would
// make the inode stale at birth, its open refused after the kernel's one
// retry. A repoint may do that to a lookup racing with it, as to any open
// racing with it. (Two inodes of one directory at once do no harm: a
// directory is never refused as stale.)
func (g *generations) forget(ino uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.dirs, ino)
	if _, ok := g.files[ino]; ok {
		if g.gone == nil {
			g.gone = map[uint64]struct{}{}
		}
		g.gone[ino] = struct{}{}
	}
}

// repoint drops the entries of files the kernel let go of and no longer
// holds (held false), then moves files inos to a new generation.
func (g *generations) repoint(held func(uint64) bool, inos []uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for ino := range g.gone {
		if !held(ino) {
			delete(g.files, ino)
		}
	}
	clear(g.gone)
	if len(inos) == 0 {
		return
	}
	g.cur++
	if g.files == nil {
		g.files = map[uint64]uint64{}
	}
	for _, ino := range inos {
		g.files[ino] = g.cur
	}
}

// touchAll moves every file to a new generation.
func (g *generations) touchAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cur++
	g.all = g.cur
	clear(g.files) // all is above every entry
	clear(g.gone)
}
