package layers

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// MaxNameLen is the longest name a directory entry may have.
const MaxNameLen = 255

// coarseNow is the kernel's coarse real-time clock, the one local file
// systems stamp files with (current_time): a program that reads
// CLOCK_REALTIME_COARSE after a change sees a time no earlier than the
// change's, as on ext4 (LTP's statx06 checks so).
func coarseNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
		return time.Now().UnixNano()
	}
	return ts.Nano()
}

// Times are kept as int64 nanoseconds since 1970, which reach from
// 1677-09-21 to 2262-04-11 (MinTimeSec and MaxTimeSec, whole seconds
// inside the range, are what a test harness is told).
const (
	MinTimeSec = math.MinInt64/nsPerSec - 1 // -9223372037: its fraction is partly out of range
	MaxTimeSec = math.MaxInt64 / nsPerSec   // 9223372036
	nsPerSec   = 1_000_000_000
)

// NanoOf is the time sec seconds and nsec nanoseconds after 1970 in
// nanoseconds, clamped to the range an int64 holds, as the kernel clamps a
// time to what a file system stores: a time outside it (touch -d 2300)
// would otherwise wrap around (to 1715).
func NanoOf(sec, nsec int64) int64 {
	switch {
	case sec > MaxTimeSec+1:
		return math.MaxInt64
	case sec < MinTimeSec-1:
		return math.MinInt64
	}
	sec += nsec / nsPerSec
	nsec %= nsPerSec
	if nsec < 0 {
		sec, nsec = sec-1, nsec+nsPerSec
	}
	switch {
	case sec > MaxTimeSec || sec == MaxTimeSec && nsec > math.MaxInt64%nsPerSec:
		return math.MaxInt64
	case sec < MinTimeSec || sec == MinTimeSec && nsec < math.MinInt64-MinTimeSec*nsPerSec:
		return math.MinInt64
	}
	return sec*nsPerSec + nsec
}

func tsNano(t unix.Timespec) int64 { return NanoOf(t.Sec, t.Nsec) }

// stamp is the time to record for a change of an inode whose ctime was
// prev: the coarse clock, unless that would not move the ctime on (a
// second change within one tick of the clock), when the fine clock is
// used, as Linux's multigrain timestamps do, so that every change shows
// (make and rsync compare times).
func stamp(prev int64) int64 {
	if t := coarseNow(); t > prev {
		return t
	}
	if t := time.Now().UnixNano(); t > prev {
		return t
	}
	return prev + 1
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') || strings.ContainsRune(name, 0) {
		return fmt.Errorf("name %q: %w", name, ErrInvalid)
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("name of %d bytes: %w", len(name), ErrNameTooLong)
	}
	return nil
}

// batch collects one operation's stored changes.
type batch struct {
	v  *View
	kv []kv
}

func (b *batch) putRec(st *inodeState) {
	if !st.inActive {
		// Not copied up first: what it was below is not known here.
		b.v.pre.unknownInode(st.ino)
	}
	st.inActive = true
	st.dirtyRec = false
	b.kv = append(b.kv, kv{key: keyInode(b.v.activeLayer(), st.ino), val: encodeInode(st.rec)})
}

func (b *batch) delRec(ino uint64) {
	b.kv = append(b.kv, kv{key: keyInode(b.v.activeLayer(), ino), del: true})
}

func (b *batch) putEntry(dir uint64, name string, e entry) {
	b.kv = append(b.kv, kv{key: keyEntry(b.v.activeLayer(), dir, name), val: encodeEntry(e)})
}

func (b *batch) delEntry(dir uint64, name string) {
	b.kv = append(b.kv, kv{key: keyEntry(b.v.activeLayer(), dir, name), del: true})
}

func (b *batch) done() {
	b.v.changes.Add(1)
	b.v.queue(b.kv)
}

// touch marks st changed now (ctime, and mtime when content changed).
func touch(st *inodeState, content bool) {
	t := stamp(st.rec.Ctime)
	st.rec.Ctime = t
	if content {
		st.rec.Mtime = t
	}
}

// setEntry makes name in d point at e, in memory and in the batch.
func (b *batch) setEntry(dirIno uint64, d *dirState, name string, e entry) {
	b.v.pre.entry(dirIno, d, name)
	d.entries[name] = e
	b.putEntry(dirIno, name, e)
}

// removeEntry removes name from d, leaving a whiteout when a lower layer or
// the base still has the name.
func (b *batch) removeEntry(dirIno uint64, d *dirState, name string) {
	b.v.pre.entry(dirIno, d, name)
	delete(d.entries, name)
	if d.below[name] {
		b.putEntry(dirIno, name, entry{})
	} else {
		b.delEntry(dirIno, name)
	}
}

// Lookup finds name in directory dir.
func (v *View) Lookup(dir uint64, name string) (Attr, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if f := v.fetchForLookupLocked(dir, name); f != nil {
		v.fetchUnlocked(f)
		defer func() { v.fetched = nil }()
	}
	st, err := v.lookupLocked(dir, name)
	if err != nil {
		return Attr{}, err
	}
	return v.statAttrLocked(st), nil
}

func (v *View) lookupLocked(dir uint64, name string) (*inodeState, error) {
	d, _, err := v.getDir(dir)
	if err != nil {
		return nil, err
	}
	e, ok := d.entries[name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", name, ErrNotFound)
	}
	st, err := v.getInode(e.Ino)
	if err != nil {
		return nil, fmt.Errorf("%q: inode %d: %w", name, e.Ino, err)
	}
	return st, nil
}

// GetAttr returns the attributes of ino.
func (v *View) GetAttr(ino uint64) (Attr, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	st, err := v.getInode(ino)
	if err != nil {
		return Attr{}, err
	}
	return v.statAttrLocked(st), nil
}

// ReadDir lists directory dir, sorted by name.
func (v *View) ReadDir(dir uint64) ([]DirEntry, error) {
	v.mu.Lock()
	if f := v.fetchForListLocked(dir); f != nil {
		v.fetchUnlocked(f)
	}
	d, _, err := v.getDir(dir)
	v.fetched = nil
	if err != nil {
		v.mu.Unlock()
		return nil, err
	}
	out := make([]DirEntry, 0, len(d.entries))
	for name, e := range d.entries {
		out = append(out, DirEntry{Name: name, Ino: e.Ino, Mode: e.Type})
	}
	v.mu.Unlock()
	// Sorted after letting go of the lock: a listing of 30,000 names
	// would otherwise hold every other operation for milliseconds.
	slices.SortFunc(out, func(a, b DirEntry) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Readlink returns a symlink's target.
func (v *View) Readlink(ino uint64) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	st, err := v.getInode(ino)
	if err != nil {
		return "", err
	}
	if st.rec.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return "", fmt.Errorf("inode %d is not a symlink: %w", ino, ErrInvalid)
	}
	return st.rec.Target, nil
}

// copyUp makes st's record belong to the active layer (it is stored with
// the next batch that writes it).
func (v *View) copyUp(st *inodeState) {
	if !st.inActive {
		// The record below stays as it is: clone, never change in place.
		v.pre.inode(st, st.rec)
		st.rec = st.rec.clone()
		st.rec.Floor = -1
		st.inActive = true
		st.pureBase = false
		if !st.rec.HasParent && st.rec.HasOrigin && st.ino != RootIno {
			if p, ok := v.bparent[st.ino]; ok {
				v.setParent(st, p, path.Base(st.rec.Origin))
			}
		}
	}
}

// setParent records where st was last named: directory dir, and the base
// path of dir if it has one.
func (v *View) setParent(st *inodeState, dir uint64, name string) {
	st.rec.Parent, st.rec.Name, st.rec.HasParent = dir, name, true
	st.rec.ParentOrigin = ""
	if d, ok := v.inodes[dir]; ok && d.rec.HasOrigin {
		st.rec.ParentOrigin = d.rec.Origin
	} else if o, ok := v.origins[dir]; ok {
		st.rec.ParentOrigin = o
	}
}

// newInode numbers a new inode of mode and rdev for caller c, to be named
// in directory dst, with one link. BSD group semantics in a set-group-ID
// directory, as Linux does it: dst's group, and its bit for a directory.
func (v *View) newInode(dst *inodeState, mode uint32, rdev uint64, c Caller) (*inodeState, error) {
	xs, err := v.inheritedLocked(dst, &mode, c)
	if err != nil {
		return nil, err
	}
	ino, err := v.s.nextIno()
	if err != nil {
		return nil, err
	}
	t := coarseNow()
	rec := &Inode{Mode: mode, UID: c.UID, GID: c.GID, Nlink: 1, Rdev: rdev, Atime: t, Mtime: t, Ctime: t, Btime: t, Floor: -1}
	if xs != nil {
		rec.Xattrs, rec.XattrsSet, rec.xattrNames = xs, true, sortedNames(xs)
	}
	if dst.rec.Mode&syscall.S_ISGID != 0 {
		rec.GID = dst.rec.GID
		if mode&syscall.S_IFMT == syscall.S_IFDIR {
			rec.Mode |= syscall.S_ISGID
		}
	}
	return &inodeState{ino: ino, rec: rec, blocksLoaded: true, active: map[uint64]*blockRef{}, frozen: map[uint64]frozenRef{}, bornIn: v.activeLayer()}, nil
}

// inheritedLocked is the attributes a new inode of *mode in directory
// dst starts with: the ACLs dst's default ACL hands down (nil: none), with
// *mode limited by them, or else by c's umask. Symlinks take neither, as
// on Linux.
func (v *View) inheritedLocked(dst *inodeState, mode *uint32, c Caller) (map[string][]byte, error) {
	if *mode&syscall.S_IFMT == syscall.S_IFLNK {
		return nil, nil
	}
	dxs, err := v.xattrsLocked(dst)
	if err != nil {
		return nil, err
	}
	var def []aclEntry
	b, ok := dxs[XattrACLDefault]
	if ok {
		// One that does not parse (a base directory's) hands nothing down.
		def, _ = parseACL(b)
	}
	if def == nil {
		if c.HasUmask {
			*mode &^= c.Umask & 0o777
		}
		return nil, nil
	}
	access, m := inheritACL(def, *mode)
	*mode = m
	xs := map[string][]byte{}
	if access != nil {
		xs[XattrACLAccess] = encodeACL(access)
	}
	if *mode&syscall.S_IFMT == syscall.S_IFDIR {
		xs[XattrACLDefault] = b
	}
	if len(xs) == 0 {
		return nil, nil
	}
	return xs, nil
}

// nameNewLocked records st, an inode newInode made, and names it name in
// directory dir (d its listing), in batch b.
func (v *View) nameNewLocked(b *batch, st *inodeState, dir uint64, d *dirState, name string) {
	v.pre.inode(st, nil)
	v.setParent(st, dir, name)
	v.inodes[st.ino] = st
	b.putRec(st)
	b.setEntry(dir, d, name, entry{Ino: st.ino, Type: st.rec.Mode & syscall.S_IFMT})
}

// newChild creates an inode in dir; mode carries the type bits.
func (v *View) newChild(dir uint64, name string, mode uint32, rdev uint64, target string, c Caller) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return Attr{}, err
	}
	if err := v.s.checkSpace(); err != nil {
		return Attr{}, err
	}
	d, dst, err := v.getDir(dir)
	if err != nil {
		return Attr{}, err
	}
	if dst.rec.Nlink == 0 {
		return Attr{}, fmt.Errorf("directory %d was removed: %w", dir, ErrNotFound)
	}
	if _, ok := d.entries[name]; ok {
		return Attr{}, fmt.Errorf("%q: %w", name, ErrExists)
	}
	st, err := v.newInode(dst, mode, rdev, c)
	if err != nil {
		return Attr{}, err
	}
	ino, rec := st.ino, st.rec
	typ := mode & syscall.S_IFMT
	switch typ {
	case syscall.S_IFDIR:
		rec.Nlink = 2
		rec.Size = 4096
	case syscall.S_IFLNK:
		rec.Target = target
		rec.Size = int64(len(target))
	}
	if typ == syscall.S_IFDIR {
		v.dirs[ino] = &dirState{entries: map[string]entry{}, below: map[string]bool{}}
	}
	b := &batch{v: v}
	v.nameNewLocked(b, st, dir, d, name)
	v.copyUp(dst)
	if typ == syscall.S_IFDIR {
		dst.rec.Nlink++
	}
	touch(dst, true)
	b.putRec(dst)
	b.done()
	return v.statAttrLocked(st), nil
}

// Mknod creates a regular file, fifo, socket or device node.
func (v *View) Mknod(dir uint64, name string, mode uint32, rdev uint64, c Caller) (Attr, error) {
	if mode&syscall.S_IFMT == 0 {
		mode |= syscall.S_IFREG
	}
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR, syscall.S_IFLNK:
		return Attr{}, fmt.Errorf("mknod of type %o: %w", mode&syscall.S_IFMT, ErrInvalid)
	}
	return v.newChild(dir, name, mode, rdev, "", c)
}

// Tmpfile creates an open regular file with no name in directory dir
// (open(2) with O_TMPFILE). It counts as opened once: the caller Releases
// it. Link can give it a name; if none does, it goes with its last handle.
func (v *View) Tmpfile(dir uint64, mode uint32, c Caller) (Attr, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return Attr{}, err
	}
	_, dst, err := v.getDir(dir)
	if err != nil {
		return Attr{}, err
	}
	if dst.rec.Nlink == 0 {
		return Attr{}, fmt.Errorf("directory %d was removed: %w", dir, ErrNotFound)
	}
	if err := v.s.checkSpace(); err != nil {
		return Attr{}, err
	}
	st, err := v.newInode(dst, syscall.S_IFREG|mode&07777, 0, c)
	if err != nil {
		return Attr{}, err
	}
	st.rec.Nlink = 0 // no name yet
	st.inActive, st.tmp = true, true
	v.pre.inode(st, nil)
	v.inodes[st.ino] = st
	if v.tmps == nil {
		v.tmps = map[uint64]*inodeState{}
	}
	v.tmps[st.ino] = st
	v.opens[st.ino]++
	return v.statAttrLocked(st), nil
}

// Mkdir creates a directory.
func (v *View) Mkdir(dir uint64, name string, mode uint32, c Caller) (Attr, error) {
	return v.newChild(dir, name, syscall.S_IFDIR|mode&07777, 0, "", c)
}

// Symlink creates a symlink to target.
func (v *View) Symlink(dir uint64, name, target string, c Caller) (Attr, error) {
	if len(target) == 0 {
		return Attr{}, fmt.Errorf("empty symlink target: %w", ErrInvalid)
	}
	if len(target) > 4095 {
		return Attr{}, fmt.Errorf("symlink target of %d bytes: %w", len(target), ErrNameTooLong)
	}
	return v.newChild(dir, name, syscall.S_IFLNK|0o777, 0, target, c)
}

// Link gives inode ino another name.
func (v *View) Link(ino, dir uint64, name string) (Attr, error) {
	if err := checkName(name); err != nil {
		return Attr{}, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return Attr{}, err
	}
	if err := v.s.checkSpace(); err != nil {
		return Attr{}, err
	}
	st, err := v.getInode(ino)
	if err != nil {
		return Attr{}, err
	}
	if st.rec.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return Attr{}, fmt.Errorf("link to a directory: %w", ErrIsDir)
	}
	d, dst, err := v.getDir(dir)
	if err != nil {
		return Attr{}, err
	}
	if _, ok := d.entries[name]; ok {
		return Attr{}, fmt.Errorf("%q: %w", name, ErrExists)
	}
	if st.rec.Nlink == 0 && !st.tmp {
		return Attr{}, fmt.Errorf("inode %d was removed: %w", ino, ErrNotFound)
	}
	st.tmp = false
	delete(v.tmps, ino)
	b := &batch{v: v}
	v.copyUp(st)
	st.rec.Nlink++
	v.setParent(st, dir, name)
	touch(st, false)
	b.putRec(st)
	b.setEntry(dir, d, name, entry{Ino: ino, Type: st.rec.Mode & syscall.S_IFMT})
	v.copyUp(dst)
	touch(dst, true)
	b.putRec(dst)
	b.done()
	return v.statAttrLocked(st), nil
}

// dropLink lowers st's link count for a name that went away; an inode
// that has no name and is not open loses its active-layer data.
func (v *View) dropLink(b *batch, st *inodeState) {
	v.copyUp(st)
	if st.rec.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		st.rec.Nlink = 0
	} else if st.rec.Nlink > 0 {
		st.rec.Nlink--
	}
	touch(st, false)
	if st.rec.Nlink > 0 || v.opens[st.ino] > 0 {
		b.putRec(st)
		return
	}
	v.purge(b, st)
}

// purge forgets an inode that nothing names or holds open any more. An
// inode that a lower layer or the base has keeps a tombstone (its record
// with no links, and the whiteouts of a directory) so that this layer
// records its removal; one born in this layer leaves nothing.
func (v *View) purge(b *batch, st *inodeState) {
	_ = v.ensureBlocks(st) // so that its blocks in this layer are known
	// A block truncated away since the last seal still has its stored
	// record, which that seal would have deleted; the inode leaves the
	// dirty set below, so the deletion goes into this batch.
	for blk := range st.dirtyBlocks {
		if _, ok := st.active[blk]; !ok {
			b.kv = append(b.kv, kv{key: keyBlock(v.activeLayer(), st.ino, blk), del: true})
		}
	}
	st.dirtyBlocks = nil
	for blk, ref := range st.active {
		b.kv = append(b.kv, kv{key: keyBlock(v.activeLayer(), st.ino, blk), del: true})
		v.freed = append(v.freed, ref.span())
		v.removed = true
	}
	if v.existsBelow(st) {
		st.rec.Nlink = 0
		b.putRec(st)
	} else {
		b.delRec(st.ino)
		if d, ok := v.dirs[st.ino]; ok {
			for name := range d.below {
				v.pre.entry(st.ino, d, name)
				b.delEntry(st.ino, name)
			}
		}
	}
	delete(v.dirs, st.ino)
	delete(v.dirty, st.ino)
	v.closeBaseLocked(st)
	delete(v.inodes, st.ino)
	delete(v.tmps, st.ino)
	st.rec.Nlink = 0
	st.tmp = false
	st.purged = true
	v.zombies[st.ino] = st
}

// Forget drops what the view keeps of an inode the kernel no longer holds.
func (v *View) Forget(ino uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.zombies[ino]; !ok {
		return
	}
	delete(v.zombies, ino)
	v.jmu.Lock()
	v.gone[ino] = v.jqueued
	v.jmu.Unlock()
}

// existsBelow reports whether a frozen layer or the base has the inode.
func (v *View) existsBelow(st *inodeState) bool {
	if st.rec.HasOrigin {
		return true
	}
	if st.bornIn == v.activeLayer() {
		return false
	}
	return v.recordIn(v.stack[1:], st.ino)
}

// recordIn tells whether a layer of ls (layers of the view's stack) records
// inode ino. Frozen layers known to lack it are not asked: most layers of
// a deep stack. A failing read counts as yes, which keeps a tombstone or
// stays off the base file: safe either way.
func (v *View) recordIn(ls []string, ino uint64) bool {
	found := false
	err := v.s.view(func(txn *badger.Txn) error {
		for _, l := range ls {
			if l != v.activeLayer() && v.lacks(txn, l, ino, false) {
				continue
			}
			_, err := txn.Get(keyInode(l, ino))
			if err == nil {
				found = true
				return nil
			}
			if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
		}
		return nil
	})
	return found || err != nil
}

// Unlink removes a non-directory name.
func (v *View) Unlink(dir uint64, name string) error {
	return v.remove(dir, name, false)
}

// Rmdir removes an empty directory.
func (v *View) Rmdir(dir uint64, name string) error {
	return v.remove(dir, name, true)
}

func (v *View) remove(dir uint64, name string, isDir bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return err
	}
	d, dst, err := v.getDir(dir)
	if err != nil {
		return err
	}
	e, ok := d.entries[name]
	if !ok {
		return fmt.Errorf("%q: %w", name, ErrNotFound)
	}
	st, err := v.getInode(e.Ino)
	if err != nil {
		return err
	}
	childIsDir := st.rec.Mode&syscall.S_IFMT == syscall.S_IFDIR
	if isDir && !childIsDir {
		return fmt.Errorf("%q: %w", name, ErrNotDir)
	}
	if !isDir && childIsDir {
		return fmt.Errorf("%q: %w", name, ErrIsDir)
	}
	if childIsDir {
		cd, _, err := v.getDir(e.Ino)
		if err != nil {
			return err
		}
		if len(cd.entries) > 0 {
			return fmt.Errorf("%q: %w", name, ErrNotEmpty)
		}
	}
	b := &batch{v: v}
	b.removeEntry(dir, d, name)
	v.copyUp(dst)
	if childIsDir && dst.rec.Nlink > 2 {
		dst.rec.Nlink--
	}
	touch(dst, true)
	b.putRec(dst)
	v.dropLink(b, st)
	b.done()
	return nil
}

// Rename moves oldname in olddir to newname in newdir (renameat2 semantics
// with RenameNoReplace and RenameExchange). Directories move like files,
// whether they come from the base or a layer: only their entry moves.
// RenameWhiteout needs RenameWhiteoutAs, which knows whose whiteout it is.
func (v *View) Rename(olddir uint64, oldname string, newdir uint64, newname string, flags uint32) error {
	return v.RenameWhiteoutAs(olddir, oldname, newdir, newname, flags, Caller{})
}

// RenameWhiteoutAs is Rename for caller c, who owns the whiteout that
// RenameWhiteout leaves at the old name.
func (v *View) RenameWhiteoutAs(olddir uint64, oldname string, newdir uint64, newname string, flags uint32, c Caller) error {
	if err := checkName(newname); err != nil {
		return err
	}
	if flags&^(RenameNoReplace|RenameExchange|RenameWhiteout) != 0 || flags&RenameExchange != 0 && flags != RenameExchange {
		return fmt.Errorf("rename flags %#x: %w", flags, ErrInvalid)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return err
	}
	if flags&RenameWhiteout != 0 {
		if err := v.s.checkSpace(); err != nil {
			return err
		}
	}
	od, ost, err := v.getDir(olddir)
	if err != nil {
		return err
	}
	nd, nst, err := v.getDir(newdir)
	if err != nil {
		return err
	}
	se, ok := od.entries[oldname]
	if !ok {
		return fmt.Errorf("%q: %w", oldname, ErrNotFound)
	}
	src, err := v.getInode(se.Ino)
	if err != nil {
		return err
	}
	srcDir := src.rec.Mode&syscall.S_IFMT == syscall.S_IFDIR
	if srcDir && olddir != newdir {
		if err := v.checkNotAncestor(se.Ino, newdir); err != nil {
			return err
		}
	}
	de, dstExists := nd.entries[newname]
	b := &batch{v: v}
	if flags&RenameExchange != 0 {
		if !dstExists {
			return fmt.Errorf("%q: %w", newname, ErrNotFound)
		}
		dstSt, err := v.getInode(de.Ino)
		if err != nil {
			return err
		}
		dstDir := dstSt.rec.Mode&syscall.S_IFMT == syscall.S_IFDIR
		if dstDir && olddir != newdir {
			if err := v.checkNotAncestor(de.Ino, olddir); err != nil {
				return err
			}
		}
		b.setEntry(olddir, od, oldname, de)
		b.setEntry(newdir, nd, newname, se)
		v.copyUp(src)
		v.copyUp(dstSt)
		v.setParent(src, newdir, newname)
		v.setParent(dstSt, olddir, oldname)
		touch(src, false)
		touch(dstSt, false)
		b.putRec(src)
		b.putRec(dstSt)
		v.copyUp(ost)
		v.copyUp(nst)
		if srcDir != dstDir && olddir != newdir {
			if srcDir {
				ost.rec.Nlink--
				nst.rec.Nlink++
			} else {
				ost.rec.Nlink++
				nst.rec.Nlink--
			}
		}
		touch(ost, true)
		touch(nst, true)
		b.putRec(ost)
		if newdir != olddir {
			b.putRec(nst)
		}
		b.done()
		return nil
	}
	var wh *inodeState
	if flags&RenameWhiteout != 0 {
		// Numbered before anything changes (a refused rename only
		// skips a number): running out of numbers leaves it undone.
		if wh, err = v.newInode(ost, syscall.S_IFCHR, 0, c); err != nil {
			return err
		}
	}
	if dstExists {
		if flags&RenameNoReplace != 0 {
			return fmt.Errorf("%q: %w", newname, ErrExists)
		}
		if de.Ino == se.Ino {
			return nil // two names of one inode: POSIX says do nothing
		}
		dstSt, err := v.getInode(de.Ino)
		if err != nil {
			return err
		}
		dstDir := dstSt.rec.Mode&syscall.S_IFMT == syscall.S_IFDIR
		switch {
		case srcDir && !dstDir:
			return fmt.Errorf("%q: %w", newname, ErrNotDir)
		case !srcDir && dstDir:
			return fmt.Errorf("%q: %w", newname, ErrIsDir)
		case dstDir:
			cd, _, err := v.getDir(de.Ino)
			if err != nil {
				return err
			}
			if len(cd.entries) > 0 {
				return fmt.Errorf("%q: %w", newname, ErrNotEmpty)
			}
		}
		if dstDir {
			v.copyUp(nst)
			nst.rec.Nlink--
		}
		v.dropLink(b, dstSt)
	}
	b.setEntry(newdir, nd, newname, se)
	if wh != nil {
		v.nameNewLocked(b, wh, olddir, od, oldname)
	} else {
		b.removeEntry(olddir, od, oldname)
	}
	// The moved inode's record is stored in the active layer so that its
	// base origin (where its data and entries come from) is kept.
	v.copyUp(src)
	v.setParent(src, newdir, newname)
	touch(src, false)
	b.putRec(src)
	v.copyUp(ost)
	v.copyUp(nst)
	if srcDir && olddir != newdir {
		ost.rec.Nlink--
		nst.rec.Nlink++
	}
	touch(ost, true)
	touch(nst, true)
	b.putRec(ost)
	if newdir != olddir {
		b.putRec(nst)
	}
	b.done()
	return nil
}

// checkNotAncestor refuses to move directory ino below itself. The kernel
// checks this too; the view checks it for its Go API callers, walking up
// from dir through the parents the records name (O(depth)).
func (v *View) checkNotAncestor(ino, dir uint64) error {
	for cur, depth := dir, 0; cur != RootIno && depth < 4096; depth++ {
		if cur == ino {
			return fmt.Errorf("move a directory below itself: %w", ErrInvalid)
		}
		parent, ok := v.parentOf(cur)
		if !ok {
			return nil
		}
		cur = parent
	}
	return nil
}

// parentOf is the directory that names directory dir.
func (v *View) parentOf(dir uint64) (uint64, bool) {
	st, err := v.getInode(dir)
	if err != nil {
		return 0, false
	}
	if st.rec.HasParent {
		if _, known := v.origins[st.rec.Parent]; !known && st.rec.ParentOrigin != "" {
			v.origins[st.rec.Parent] = st.rec.ParentOrigin
		}
		return st.rec.Parent, true
	}
	if p, ok := v.bparent[dir]; ok {
		return p, true
	}
	if !st.rec.HasOrigin {
		return 0, false
	}
	// An untouched base directory the view has not listed (after a
	// restart) lies where its origin says, as pathOf finds it.
	pdir := path.Dir(st.rec.Origin)
	if pdir == "." || pdir == "" {
		return RootIno, true
	}
	bst, err := v.base.lstat(pdir)
	if err != nil {
		return 0, false
	}
	v.origins[bst.Ino] = pdir
	return bst.Ino, true
}

// SetAttr changes mode, owner, size or times of ino.
func (v *View) SetAttr(ino uint64, in SetAttrIn) (Attr, error) {
	if in.Size != nil {
		v.ioMu.Lock()
		defer v.ioMu.Unlock()
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return Attr{}, err
	}
	st, err := v.getInode(ino)
	if err != nil {
		return Attr{}, err
	}
	// chmod(2) rewrites an access ACL to the new bits.
	var acl []aclEntry
	var xs map[string][]byte
	if in.Mode != nil {
		if xs, err = v.xattrsLocked(st); err != nil {
			return Attr{}, err
		}
		if b, ok := xs[XattrACLAccess]; ok {
			// One that does not parse (a base file's) is left as it is.
			acl, _ = parseACL(b)
		}
	}
	if in.Size != nil {
		if st.rec.Mode&syscall.S_IFMT != syscall.S_IFREG {
			if st.rec.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				return Attr{}, ErrIsDir
			}
			return Attr{}, fmt.Errorf("truncate a non-regular file: %w", ErrInvalid)
		}
		if err := v.truncateLocked(st, *in.Size); err != nil {
			return Attr{}, err
		}
	}
	v.copyUp(st)
	if in.Mode != nil {
		st.rec.Mode = st.rec.Mode&syscall.S_IFMT | *in.Mode&07777
		if acl != nil {
			next := maps.Clone(xs)
			next[XattrACLAccess] = encodeACL(chmodACL(acl, st.rec.Mode))
			st.rec.Xattrs, st.rec.XattrsSet = next, true
			st.rec.xattrNames, st.rec.xattrEnc = sortedNames(next), nil
		}
	}
	if in.KillSuidgid && in.Mode == nil {
		// Against the group the file has before a chown, as the kernel.
		st.rec.Mode = killSuidgid(st.rec.Mode, st.rec.GID, in.InGroup)
	}
	if in.UID != nil {
		st.rec.UID = *in.UID
	}
	if in.GID != nil {
		st.rec.GID = *in.GID
	}
	if in.Atime != nil {
		st.rec.Atime = *in.Atime
	}
	if in.Mtime != nil {
		st.rec.Mtime = *in.Mtime
	}
	st.rec.Ctime = stamp(st.rec.Ctime)
	b := &batch{v: v}
	b.putRec(st)
	b.done()
	return v.statAttrLocked(st), nil
}

// killSuidgid is mode without set-user-ID and, as the kernel's
// setattr_should_drop_sgid decides, without set-group-ID where the group
// may execute or the caller is outside the file's group gid (inGroup; nil:
// inside it). Without group execute, set-group-ID marks mandatory locking
// and stays for the group's members. A directory keeps both.
func killSuidgid(mode, gid uint32, inGroup func(uint32) bool) uint32 {
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		return mode
	}
	mode &^= syscall.S_ISUID
	if mode&syscall.S_IXGRP != 0 || (mode&syscall.S_ISGID != 0 && inGroup != nil && !inGroup(gid)) {
		mode &^= syscall.S_ISGID
	}
	return mode
}

// KillSuidgid drops set-user-ID and set-group-ID from file ino as a write
// by a caller without CAP_FSETID does (see SetAttrIn.KillSuidgid); inGroup
// tells whether the caller is in a group (nil: in every one). A file that
// has neither costs a lookup: nothing is recorded.
func (v *View) KillSuidgid(ino uint64, inGroup func(gid uint32) bool) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return err
	}
	st, err := v.getInode(ino)
	if err != nil {
		return err
	}
	mode := killSuidgid(st.rec.Mode, st.rec.GID, inGroup)
	if mode == st.rec.Mode {
		return nil
	}
	v.copyUp(st)
	st.rec.Mode = mode
	st.rec.Ctime = stamp(st.rec.Ctime)
	b := &batch{v: v}
	b.putRec(st)
	b.done()
	return nil
}

// ---- extended attributes ---------------------------------------------------

// bareNamespace reports whether name is a namespace prefix with nothing
// after it ("user."), which the kernel passes to FUSE unchecked and local
// file systems refuse with EINVAL.
func bareNamespace(name string) bool {
	switch name {
	case "user.", "trusted.", "security.", "system.":
		return true
	}
	return false
}

func xattrAllowed(name string) bool {
	return strings.HasPrefix(name, "user.") || strings.HasPrefix(name, "trusted.") || strings.HasPrefix(name, "security.") || isACL(name)
}

// MaxXattrValue is the largest value one extended attribute may have.
const MaxXattrValue = 64 << 10

// MaxXattrSpace bounds what one inode's extended attributes take, names
// (with their terminating NUL, as listxattr returns them) and values
// together; a set that would grow past it fails with ENOSPC. Programs size
// attributes by the block size a file reports: xfstests' attr_replace_test
// sets three quarters of st_blksize, 48 KiB at Strata's default 64 KiB
// block, where ext4 (4 KiB blocks, about one block of attributes) is asked
// for 3 KiB. So the bound is one value of the largest size the kernel
// passes (XATTR_SIZE_MAX). The attributes live in the inode's record, which
// is written again on every change of the inode, a write's mtime
// included: only a file that carries that much pays for it.
const MaxXattrSpace = 64 << 10

// xattrSpace is what a set of attributes takes against MaxXattrSpace.
func xattrSpace(xs map[string][]byte) int {
	n := 0
	for k, v := range xs {
		n += len(k) + 1 + len(v)
	}
	return n
}

func (v *View) xattrsLocked(st *inodeState) (map[string][]byte, error) {
	if st.rec.XattrsSet {
		return st.rec.Xattrs, nil
	}
	if st.rec.HasOrigin {
		// The kernel asks for security.capability before every write, so
		// the base's attributes (which never change) are read once.
		if st.baseXattrs == nil {
			xs, err := v.base.xattrs(st.rec.Origin, st.rec.Mode)
			if err != nil {
				return nil, err
			}
			st.baseXattrs = xs
		}
		return st.baseXattrs, nil
	}
	return map[string][]byte{}, nil
}

// GetXattr returns one extended attribute.
func (v *View) GetXattr(ino uint64, name string) ([]byte, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	st, err := v.getInode(ino)
	if err != nil {
		return nil, err
	}
	if bareNamespace(name) {
		return nil, fmt.Errorf("xattr %q: %w", name, ErrInvalid)
	}
	if !xattrAllowed(name) {
		return nil, fmt.Errorf("xattr %q: %w", name, ErrNoAttr)
	}
	xs, err := v.xattrsLocked(st)
	if err != nil {
		return nil, err
	}
	val, ok := xs[name]
	if !ok {
		return nil, fmt.Errorf("xattr %q: %w", name, ErrNoAttr)
	}
	return append([]byte(nil), val...), nil
}

// Xattrs returns every extended attribute of ino with its value, all read
// at one moment: what a copy of the file must carry.
func (v *View) Xattrs(ino uint64) (map[string][]byte, error) {
	var out map[string][]byte
	err := v.withXattrs(ino, func(xs map[string][]byte) {
		out = make(map[string][]byte, len(xs))
		for k, val := range xs {
			out[k] = append([]byte(nil), val...)
		}
	})
	return out, err
}

// ListXattr lists extended attribute names, sorted.
func (v *View) ListXattr(ino uint64) ([]string, error) {
	var out []string
	err := v.withXattrs(ino, func(xs map[string][]byte) {
		out = make([]string, 0, len(xs))
		for k := range xs {
			out = append(out, k)
		}
		sort.Strings(out)
	})
	return out, err
}

// withXattrs runs fn on the attributes of ino, under mu: fn must not keep
// the map.
func (v *View) withXattrs(ino uint64, fn func(map[string][]byte)) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	st, err := v.getInode(ino)
	if err != nil {
		return err
	}
	xs, err := v.xattrsLocked(st)
	if err != nil {
		return err
	}
	fn(xs)
	return nil
}

// Xattr set flags, as setxattr takes them.
const (
	XattrCreate  = 1
	XattrReplace = 2
	// XattrKillSgid, with an access ACL, also drops set-group-ID: the
	// kernel asks it when the caller is not in the file's group and
	// lacks CAP_FSETID, as ext4 does it itself.
	XattrKillSgid = 1 << 16
)

// SetXattr sets (val != nil) or removes (val == nil) an extended attribute.
func (v *View) SetXattr(ino uint64, name string, val []byte, flags uint32) error {
	if bareNamespace(name) {
		return fmt.Errorf("xattr %q: %w", name, ErrInvalid)
	}
	if !xattrAllowed(name) {
		return fmt.Errorf("xattr %q: %w", name, ErrNotSupported)
	}
	if len(name) > 255 {
		return fmt.Errorf("xattr name of %d bytes: %w", len(name), ErrTooLarge)
	}
	if len(val) > MaxXattrValue {
		return fmt.Errorf("xattr value of %d bytes: %w", len(val), ErrTooLarge)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return err
	}
	if err := v.s.checkSpace(); err != nil {
		return err
	}
	st, err := v.getInode(ino)
	if err != nil {
		return err
	}
	xs, err := v.xattrsLocked(st)
	if err != nil {
		return err
	}
	if isACL(name) {
		next, mode, err := setACL(st.rec.Mode, xs, name, val, flags&XattrKillSgid != 0)
		if err != nil {
			return fmt.Errorf("xattr %q: %w", name, err)
		}
		if n := xattrSpace(next); n > MaxXattrSpace && n > xattrSpace(xs) {
			return fmt.Errorf("xattr %q: the inode's attributes would take %d bytes, over %d: %w", name, n, MaxXattrSpace, ErrNoSpace)
		}
		v.copyUp(st)
		st.rec.Mode = mode
		v.putXattrsLocked(st, next, nil)
		return nil
	}
	_, exists := xs[name]
	switch {
	case val == nil && !exists:
		return fmt.Errorf("xattr %q: %w", name, ErrNoAttr)
	case val != nil && flags&XattrCreate != 0 && exists:
		return fmt.Errorf("xattr %q: %w", name, ErrExists)
	case val != nil && flags&XattrReplace != 0 && !exists:
		return fmt.Errorf("xattr %q: %w", name, ErrNoAttr)
	}
	next := make(map[string][]byte, len(xs)+1)
	for k, x := range xs {
		next[k] = x
	}
	var names []string
	if st.rec.XattrsSet && st.rec.xattrNames != nil {
		// The names in order follow from the old ones; the slices are
		// shared with copies of the record, so they are never changed in
		// place (Clip makes Insert and append copy).
		old := st.rec.xattrNames
		i, found := slices.BinarySearch(old, name)
		switch {
		case val == nil && found:
			names = append(slices.Clip(old[:i]), old[i+1:]...)
		case val != nil && !found:
			names = slices.Insert(slices.Clip(old), i, name)
		default:
			names = old
		}
	}
	if val == nil {
		delete(next, name)
	} else {
		next[name] = append([]byte(nil), val...)
		// A set over the bound already (a base file's, from a file
		// system that allows more) may still shrink.
		if n := xattrSpace(next); n > MaxXattrSpace && n > xattrSpace(xs) {
			return fmt.Errorf("xattr %q: the inode's attributes would take %d bytes, over %d: %w", name, n, MaxXattrSpace, ErrNoSpace)
		}
	}
	v.copyUp(st)
	v.putXattrsLocked(st, next, names)
	return nil
}

// putXattrsLocked gives st (copied up) the attributes xs, whose names in
// order are names (nil: not known yet), and records it.
func (v *View) putXattrsLocked(st *inodeState, xs map[string][]byte, names []string) {
	if names == nil {
		names = sortedNames(xs)
	}
	st.rec.Xattrs = xs
	st.rec.XattrsSet = true
	st.rec.xattrNames = names
	st.rec.xattrEnc = nil
	touch(st, false)
	b := &batch{v: v}
	b.putRec(st)
	b.done()
}

// ---- opens -----------------------------------------------------------------

// Open notes that a handle on ino was opened; an unlinked inode keeps its
// data until the last handle is released.
func (v *View) Open(ino uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, err := v.getInode(ino); err != nil {
		return err
	}
	v.opens[ino]++
	return nil
}

// Release is the counterpart of Open.
func (v *View) Release(ino uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.opens[ino] <= 1 {
		delete(v.opens, ino)
		if st, ok := v.inodes[ino]; ok && st.rec.Nlink == 0 && !v.closed && !v.ro {
			b := &batch{v: v}
			v.purge(b, st)
			b.done()
		}
		return
	}
	v.opens[ino]--
}

// StatFS describes the space of the file system that holds the store.
func (v *View) StatFS() (syscall.Statfs_t, error) {
	var st syscall.Statfs_t
	err := syscall.Statfs(v.s.dir, &st)
	return st, err
}
