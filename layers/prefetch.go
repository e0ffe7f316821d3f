package layers

import (
	"path"
	"syscall"

	"golang.org/x/sys/unix"
)

// baseFetch is base I/O made without the view's lock for the operation
// that then takes it: the listing of a base directory the view has not
// loaded, the stat (and a symlink's target) of a base inode it has not
// loaded. getDir and baseRec use what it holds when it is of the path they
// want, instead of asking the base themselves under the lock. On a cold
// cache each of those waits on the disk, and under the lock every other
// request of the mount waited too: a first `git status` of a 15,000-file
// repository, whose threads stat in parallel, was served one disk read at
// a time.
type baseFetch struct {
	epoch uint64 // the view's epoch when it was chosen
	name  string // looked up: stat'ed too when the listing holds it

	listing bool   // the directory listOf is listed
	listOf  string // base-relative path ("" for the base's root)
	list    []baseEntry
	listErr error

	stat      bool   // statOf is stat'ed
	statOf    string // base-relative path
	st        unix.Stat_t
	btime     int64
	target    string // a symlink's
	statErr   error
	targetErr error
}

// fetchForLookupLocked is the base I/O that looking up name in directory
// dir would make under the lock, or nil: the directory's listing when it
// is not loaded, and the stat of name's base inode when it is not loaded
// and the base is where name comes from (as far as the view knows now;
// baseRec uses the stat only for the very path it wants).
func (v *View) fetchForLookupLocked(dir uint64, name string) *baseFetch {
	if v.closed {
		return nil
	}
	dst, err := v.getInode(dir)
	if err != nil || dst.rec.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil
	}
	f := &baseFetch{epoch: v.epoch.Load(), name: name}
	d, ok := v.dirs[dir]
	switch {
	case !ok && dst.rec.HasOrigin:
		f.listing, f.listOf = true, dst.rec.Origin
	case !ok:
		return nil
	default:
		e, ok := d.entries[name]
		if !ok {
			return nil
		}
		if _, ok := v.inodes[e.Ino]; ok {
			return nil
		}
		origin, ok := v.origins[e.Ino]
		if !ok {
			return nil
		}
		f.stat, f.statOf = true, origin
	}
	return f
}

// fetchForListLocked is the base I/O that listing directory dir would
// make under the lock, or nil: its base listing when it is not loaded.
func (v *View) fetchForListLocked(dir uint64) *baseFetch {
	if v.closed || v.dirs[dir] != nil {
		return nil
	}
	dst, err := v.getInode(dir)
	if err != nil || dst.rec.Mode&syscall.S_IFMT != syscall.S_IFDIR || !dst.rec.HasOrigin {
		return nil
	}
	return &baseFetch{epoch: v.epoch.Load(), listing: true, listOf: dst.rec.Origin}
}

// fetchUnlocked makes f's base I/O with the view's lock let go, and
// takes the lock again. The base's descriptor stays open meanwhile
// (baseIO: Close waits for it). What it read is kept as v.fetched unless
// the view moved meanwhile (a rollback, a plan's apply): the caller then
// reads under the lock, as without it.
func (v *View) fetchUnlocked(f *baseFetch) {
	v.baseIO.RLock()
	v.mu.Unlock()
	if fetchGapHook != nil {
		fetchGapHook(v)
	}
	if f.listing {
		f.list, f.listErr = v.base.readDir(f.listOf)
		for _, be := range f.list {
			if be.name == f.name {
				v.fetchStat(f, path.Join(f.listOf, be.name))
				break
			}
		}
	} else if f.stat {
		v.fetchStat(f, f.statOf)
	}
	v.baseIO.RUnlock()
	v.mu.Lock()
	if v.epoch.Load() == f.epoch {
		v.fetched = f
	}
}

// fetchGapHook, when a test sets it, runs in fetchUnlocked while the
// view's lock is let go, before the base I/O.
var fetchGapHook func(v *View)

// fetchStat stats origin into f, and reads its target when it is a link.
func (v *View) fetchStat(f *baseFetch, origin string) {
	f.stat, f.statOf = true, origin
	f.st, f.btime, f.statErr = v.base.lstatx(origin)
	if f.statErr == nil && f.st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		f.target, f.targetErr = v.base.readlink(origin)
	}
}

// fetchedList is the listing of base directory origin that v.fetched
// holds.
func (v *View) fetchedList(origin string) ([]baseEntry, error, bool) {
	f := v.fetched
	if f == nil || !f.listing || f.listOf != origin {
		return nil, nil, false
	}
	return f.list, f.listErr, true
}

// fetchedStat is the stat of base path origin that v.fetched holds.
func (v *View) fetchedStat(origin string) (*baseFetch, bool) {
	f := v.fetched
	if f == nil || !f.stat || f.statOf != origin {
		return nil, false
	}
	return f, true
}
