package fs

import (
	"sync"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
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

// reviveFS keeps the index right when a lookup or link hands go-fuse an
// inode it has (inodeIndex.live) and the kernel's FORGET of that inode's
// last reference comes in before go-fuse registers it again: go-fuse then
// registers the inode anew, but OnForget has taken it out of the index,
// and a rollback would not tell the kernel about it. Seen as a kernel
// LOOKUP_REVAL after an open refused as stale (TestOldGenerationForgotten
// failed 4 times in 150 runs under -race): the kernel forgets the
// revalidated reference while it looks the name up again. After the
// request, the inode go-fuse holds again goes back into the index. Only
// a request that found a live inode leaves anything for its wrapper.
type reviveFS struct {
	fuse.RawFileSystem
	m *Mount
}

func (r *reviveFS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	st := r.RawFileSystem.Lookup(cancel, header, name, out)
	r.m.revived(cancel)
	return st
}

func (r *reviveFS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	st := r.RawFileSystem.Link(cancel, in, name, out)
	r.m.revived(cancel)
	return st
}

// revived puts back into the index the inode child handed go-fuse for
// the request of cancel, if it did (Mount.revives), when go-fuse holds it
// (registered again after a FORGET took it out, or still there: adding it
// again changes nothing).
func (m *Mount) revived(cancel <-chan struct{}) {
	in, ok := m.revives.take(cancel)
	//lint:ignore SA1019 see inodeIndex.live
	if ok && !in.Forgotten() {
		m.index.add(in.StableAttr().Ino, in)
	}
}
