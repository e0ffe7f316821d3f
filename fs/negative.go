package fs

import (
	"sync"
	"sync/atomic"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// negatives are the names a lookup found missing and the kernel was let
// cache as missing. Builds and shells look up the same missing names again
// and again (include paths, PATH, config files); without the cache each
// of those is a round trip. The kernel does not say which negative entries
// it keeps, so this index is how a repoint finds the ones it must drop: a
// name missing before a rollback may exist after it.
//
// Negative entries the kernel makes itself (after an unlink or rmdir) are
// not in it: the kernel marks those stale at once, so they are looked up
// again anyway.
type negatives struct {
	mu    sync.Mutex
	dirs  map[uint64]map[string]struct{} // directory inode -> names
	count int
	// drops counts the repoints that began dropping the kernel's caches
	// (drop): a lookup that began before one may have read the state the
	// repoint leaves, and a repoint drops what it touched before the view
	// moves (layers.MovedFunc), so the view's epoch alone cannot tell.
	// It moves before the drop takes names under mu, so an add under mu
	// either sees it or is seen by the take.
	drops atomic.Uint64
}

// maxNegatives bounds the index; past it, missing names are not cached
// until names leave it (made through the mount, or dropped by a repoint).
const maxNegatives = 1 << 16

// add records that name is missing in dir, when no repoint began a drop
// since the lookup began (since: dropsNow then) and current still holds:
// it reports whether the kernel may cache the answer. current tells
// whether the view was not repointed since the lookup asked it; checking
// both under the index's lock means a repoint's drop either sees the
// name or the lookup sees the repoint.
func (ng *negatives) add(dir uint64, name string, since uint64, current func() bool) bool {
	ng.mu.Lock()
	defer ng.mu.Unlock()
	if ng.count >= maxNegatives || ng.drops.Load() != since || !current() {
		return false
	}
	names := ng.dirs[dir]
	if names == nil {
		if ng.dirs == nil {
			ng.dirs = map[uint64]map[string]struct{}{}
		}
		names = map[string]struct{}{}
		ng.dirs[dir] = names
	}
	if _, ok := names[name]; !ok {
		names[name] = struct{}{}
		ng.count++
	}
	return true
}

// dropsNow is the count of drops begun, for a lookup beginning (add).
func (ng *negatives) dropsNow() uint64 { return ng.drops.Load() }

// drop notes that a repoint begins dropping the kernel's caches: lookups
// under way may not cache what they find missing.
func (ng *negatives) drop() { ng.drops.Add(1) }

// len is how many names the index holds.
func (ng *negatives) len() int {
	ng.mu.Lock()
	defer ng.mu.Unlock()
	return ng.count
}

// forget drops name from dir's missing names: it exists now, and the
// kernel knows, having made it.
func (ng *negatives) forget(dir uint64, name string) {
	ng.mu.Lock()
	defer ng.mu.Unlock()
	if names := ng.dirs[dir]; names != nil {
		if _, ok := names[name]; ok {
			delete(names, name)
			ng.count--
			if len(names) == 0 {
				delete(ng.dirs, dir)
			}
		}
	}
}

// take removes and returns the missing names of the directories given,
// or of every directory when all is set.
func (ng *negatives) take(dirs []uint64, all bool) map[uint64]map[string]struct{} {
	ng.mu.Lock()
	defer ng.mu.Unlock()
	if all {
		out := ng.dirs
		ng.dirs, ng.count = nil, 0
		return out
	}
	out := map[uint64]map[string]struct{}{}
	for _, d := range dirs {
		if names, ok := ng.dirs[d]; ok {
			out[d] = names
			ng.count -= len(names)
			delete(ng.dirs, d)
		}
	}
	return out
}

// negativeTimeout is how long the kernel may trust a missing name.
var negativeTimeout = entryTimeout

// cacheMissing lets the kernel cache that name is missing in n, unless the
// index is full or the view was repointed, or a repoint began dropping
// caches, since the lookup began (epoch, drops).
func (n *node) cacheMissing(name string, epoch, drops uint64, out *fuse.EntryOut) {
	v := n.view()
	if n.m.negs.add(n.ino(), name, drops, func() bool { return v.Epoch() == epoch }) {
		return // go-fuse answers with an entry of no inode, cached for negativeTimeout
	}
	// A non-zero timeout keeps go-fuse from caching the miss: the answer
	// is a plain ENOENT, which the kernel asks again about.
	out.SetEntryTimeout(time.Nanosecond)
}

// dropMissing tells the kernel to forget the missing names it may hold in
// the directories taken from the index.
func (m *Mount) dropMissing(taken map[uint64]map[string]struct{}) int {
	sent := 0
	for dir, names := range taken {
		for _, in := range m.nodesOf(dir) {
			sent += notifyNames(in, names)
		}
	}
	return sent
}

func notifyNames(in *gofs.Inode, names map[string]struct{}) int {
	for name := range names {
		in.NotifyEntry(name)
	}
	return len(names)
}
