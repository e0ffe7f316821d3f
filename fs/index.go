package fs

import (
	"sync"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// inodeIndex finds the go-fuse inodes of an inode number, so a rollback
// can tell the kernel about the inodes it changed without walking every
// inode the kernel knows. go-fuse keeps one inode per number but may
// discard the one a lookup made when another lookup registered the
// number first; both are indexed, and the discarded one (never known to
// the kernel: Forgotten) is dropped when it is met.
type inodeIndex struct {
	mu sync.Mutex
	m  map[uint64][]*gofs.Inode
}

func (x *inodeIndex) add(ino uint64, in *gofs.Inode) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.m == nil {
		x.m = map[uint64][]*gofs.Inode{}
	}
	list := x.m[ino]
	for _, o := range list {
		if o == in {
			return
		}
	}
	x.m[ino] = append(list, in)
}

// remove drops in, which the kernel forgot.
func (x *inodeIndex) remove(ino uint64, in *gofs.Inode) {
	x.mu.Lock()
	defer x.mu.Unlock()
	list := x.m[ino]
	for i, o := range list {
		if o == in {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(x.m, ino)
	} else {
		x.m[ino] = list
	}
}

// known returns the inodes of ino the kernel may hold, dropping those it
// never knew.
func (x *inodeIndex) known(ino uint64) []*gofs.Inode {
	x.mu.Lock()
	defer x.mu.Unlock()
	list := x.m[ino]
	kept := list[:0]
	for _, in := range list {
		if !in.Forgotten() {
			kept = append(kept, in)
		}
	}
	if len(kept) == 0 {
		delete(x.m, ino)
		return nil
	}
	x.m[ino] = kept
	return append([]*gofs.Inode(nil), kept...)
}

// size is the number of inode numbers indexed (for tests).
func (x *inodeIndex) size() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.m)
}
