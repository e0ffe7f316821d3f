package fs

import (
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// inodeIndex finds the go-fuse inodes of an inode number, so a rollback
// can tell the kernel about the inodes it changed without walking every
// inode the kernel knows. go-fuse keeps one inode per number and
// generation (generation.go): when two lookups of one race, it keeps the
// first and discards the other,
// which stays here (never forgotten, as the kernel never knew it) and gets
// notifications the kernel ignores. Lookups and links hand go-fuse the
// inode it already has (live), so only such races leave one behind.
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

// remove drops in, which the kernel forgot, and reports whether the
// kernel still holds another inode of number ino (a file's inode of
// another generation).
func (x *inodeIndex) remove(ino uint64, in *gofs.Inode) (others bool) {
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
		return false
	}
	x.m[ino] = list
	for _, o := range list {
		//lint:ignore SA1019 see live
		if !o.Forgotten() {
			return true
		}
	}
	return false
}

// live returns the inode of id that go-fuse holds for the kernel, if one
// is indexed.
func (x *inodeIndex) live(id gofs.StableAttr) *gofs.Inode {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, in := range x.m[id.Ino] {
		// Forgotten is what tells a registered inode from one go-fuse
		// discarded or the kernel let go; NodeOnForgetter, its
		// replacement, is never called for a discarded one.
		//lint:ignore SA1019 see above
		if in.StableAttr() == id && !in.Forgotten() {
			return in
		}
	}
	return nil
}

// known returns the inodes of ino the kernel may hold.
func (x *inodeIndex) known(ino uint64) []*gofs.Inode {
	x.mu.Lock()
	defer x.mu.Unlock()
	return append([]*gofs.Inode(nil), x.m[ino]...)
}

// holds reports whether the index has inodes of number ino.
func (x *inodeIndex) holds(ino uint64) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.m[ino]) > 0
}

// heldFiles returns those of inos the index has regular files' inodes of.
func (x *inodeIndex) heldFiles(inos []uint64) []uint64 {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []uint64
	for _, ino := range inos {
		for _, in := range x.m[ino] {
			if in.StableAttr().Mode == syscall.S_IFREG {
				out = append(out, ino)
				break
			}
		}
	}
	return out
}

// mostPerNumber is the largest number of inodes indexed for one inode
// number: more than one means go-fuse discarded some (for tests).
func (x *inodeIndex) mostPerNumber() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	most := 0
	for _, l := range x.m {
		most = max(most, len(l))
	}
	return most
}
