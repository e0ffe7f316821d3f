package layers

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"syscall"

	"github.com/dgraph-io/badger/v4"
)

// InodeState is what an inode is in one state of a sandbox, as far as its
// content goes: attributes, symlink target and content fingerprint.
type InodeState struct {
	Attr
	Target      string
	Fingerprint string
	// Xattrs names the extended attributes: "" for none, a digest of a
	// set a layer records, or the base file's origin when the inode
	// still has the base's (then they are not read: two such states are
	// the same, one and a recorded set differ).
	Xattrs string
}

// xattrsID is what InodeState.Xattrs says of record rec.
func xattrsID(rec *Inode) string {
	if !rec.XattrsSet {
		if rec.HasOrigin {
			return "base:" + rec.Origin
		}
		return ""
	}
	if len(rec.Xattrs) == 0 {
		return ""
	}
	names := make([]string, 0, len(rec.Xattrs))
	for k := range rec.Xattrs {
		names = append(names, k)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, k := range names {
		v := rec.Xattrs[k]
		var n [8]byte
		binary.BigEndian.PutUint32(n[:4], uint32(len(k)))
		binary.BigEndian.PutUint32(n[4:], uint32(len(v)))
		h.Write(n[:])
		h.Write([]byte(k))
		h.Write(v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// EntryChange is one directory entry that differs between two states; Old
// or New is nil where the name does not exist. Paths are filled by Compare
// when asked for.
type EntryChange struct {
	Dir              uint64
	Name             string
	Old, New         *DirEntry
	OldPath, NewPath string
	// OldTree and NewTree list, with paths, what lies below a directory
	// that went away or came (a replaced one too).
	OldTree, NewTree []PathAttr
}

// PathAttr is one path of a tree with its attributes.
type PathAttr struct {
	Path string
	Attr
}

// InodeChange is one inode whose state differs; Old or New is nil where it
// is not reachable (no links).
type InodeChange struct {
	Ino      uint64
	Old, New *InodeState
	Path     string // in the new state, when asked for and reachable
}

// Changes lists what differs between two states of a sandbox.
type Changes struct {
	Entries []EntryChange
	Inodes  []InodeChange
	// Touched, when not nil, names every inode and directory whose
	// records the layers between the two states hold: a superset of what
	// differs, attributes a diff leaves out (owner, times, links)
	// included, for dropping cached copies of them (fs.Mount). RepointDiff
	// fills it; Compare does not.
	Touched *Touched
}

// Touched is the inodes whose records, and the directories whose entries,
// some layer between two states holds.
type Touched struct {
	Inodes []uint64
	Dirs   []uint64
	// Names lists, for a directory of Dirs, the names whose entries those
	// layers hold: every other name is the same in both states, so a
	// cache of it stays right. A directory Names lacks may differ in any
	// name.
	Names map[uint64][]string
}

// Compare lists what differs between the stacks topped by layers from and
// to of a sandbox (frozen, archived or the active layer). Only the layers
// the two stacks do not share are read, so the cost follows what changed,
// not the size of the tree. from may be "" for the base alone.
func (s *Store) Compare(sandbox, from, to string, withPaths bool) (Changes, error) {
	if err := s.fault("compare", sandbox); err != nil {
		return Changes{}, err
	}
	var chA, chB []string
	err := s.view(func(txn *badger.Txn) error {
		var err error
		if from != "" {
			if chA, err = chainOf(txn, from); err != nil {
				return err
			}
		}
		chB, err = chainOf(txn, to)
		return err
	})
	if err != nil {
		return Changes{}, err
	}
	shared := map[string]bool{}
	inA := map[string]bool{}
	for _, l := range chA {
		inA[l] = true
	}
	for _, l := range chB {
		if inA[l] {
			shared[l] = true
		}
	}
	var delta []string
	for _, l := range append(append([]string{}, chA...), chB...) {
		if !shared[l] {
			delta = append(delta, l)
		}
	}
	va, err := s.openStack(sandbox, chA)
	if err != nil {
		return Changes{}, err
	}
	defer va.Close()
	vb, err := s.openStack(sandbox, chB)
	if err != nil {
		return Changes{}, err
	}
	defer vb.Close()
	va.mu.Lock()
	defer va.mu.Unlock()
	vb.mu.Lock()
	defer vb.mu.Unlock()

	entries := map[entryKey]bool{}
	inodes := map[uint64]bool{}
	err = s.view(func(txn *badger.Txn) error {
		for _, l := range delta {
			err := scanLayerRecords(txn, l, va, vb,
				func(k entryKey) { entries[k] = true },
				func(ino uint64) { inodes[ino] = true })
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return Changes{}, err
	}
	var out Changes
	for k := range entries {
		a, err := va.pointEntry(k.dir, k.name)
		if err != nil {
			return Changes{}, err
		}
		b, err := vb.pointEntry(k.dir, k.name)
		if err != nil {
			return Changes{}, err
		}
		if (a == nil) == (b == nil) && (a == nil || *a == *b) {
			continue
		}
		c := EntryChange{Dir: k.dir, Name: k.name, Old: a, New: b}
		if withPaths {
			if a != nil && a.Mode == syscall.S_IFDIR && (b == nil || b.Ino != a.Ino) {
				p, err := va.childPath(k.dir, k.name)
				if err != nil {
					return Changes{}, err
				}
				if c.OldTree, err = va.subtree(a.Ino, p); err != nil {
					return Changes{}, err
				}
			}
			if b != nil && b.Mode == syscall.S_IFDIR && (a == nil || b.Ino != a.Ino) {
				p, err := vb.childPath(k.dir, k.name)
				if err != nil {
					return Changes{}, err
				}
				if c.NewTree, err = vb.subtree(b.Ino, p); err != nil {
					return Changes{}, err
				}
			}
			if a != nil {
				if c.OldPath, err = va.childPath(k.dir, k.name); err != nil {
					return Changes{}, fmt.Errorf("old path of %q in %d: %w", k.name, k.dir, err)
				}
			}
			if b != nil {
				if c.NewPath, err = vb.childPath(k.dir, k.name); err != nil {
					return Changes{}, fmt.Errorf("new path of %q in %d: %w", k.name, k.dir, err)
				}
			}
		}
		out.Entries = append(out.Entries, c)
	}
	for ino := range inodes {
		a, err := va.inodeState(ino)
		if err != nil {
			return Changes{}, err
		}
		b, err := vb.inodeState(ino)
		if err != nil {
			return Changes{}, err
		}
		if sameState(a, b) {
			continue
		}
		c := InodeChange{Ino: ino, Old: a, New: b}
		if withPaths && b != nil {
			if c.Path, err = vb.pathOf(ino); err != nil {
				return Changes{}, fmt.Errorf("path of inode %d: %w", ino, err)
			}
		}
		out.Inodes = append(out.Inodes, c)
	}
	sort.Slice(out.Entries, func(i, j int) bool {
		if out.Entries[i].Dir != out.Entries[j].Dir {
			return out.Entries[i].Dir < out.Entries[j].Dir
		}
		return out.Entries[i].Name < out.Entries[j].Name
	})
	sort.Slice(out.Inodes, func(i, j int) bool { return out.Inodes[i].Ino < out.Inodes[j].Ino })
	return out, nil
}

// sameState compares what diffs care about: type and permission bits,
// size and content of files, symlink targets, extended attributes (the
// state hash leaves these out).
func sameState(a, b *InodeState) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if a.Mode != b.Mode || a.Target != b.Target || a.Xattrs != b.Xattrs {
		return false
	}
	if a.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return true
	}
	return a.Size == b.Size && a.Fingerprint == b.Fingerprint
}

// openStack opens a read-only view of an explicit chain (empty: the base).
func (s *Store) openStack(sandbox string, chain []string) (*View, error) {
	info, err := s.Sandbox(sandbox)
	if err != nil {
		return nil, err
	}
	base, err := openBase(info.Base)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", sandbox, err)
	}
	v := &View{
		s: s, info: info, ro: true, bs: int64(info.BlockSize), base: base,
		origins:  map[uint64]string{RootIno: ""},
		bparent:  map[uint64]uint64{},
		opens:    map[uint64]int{},
		stopped:  make(chan struct{}),
		snapshot: true,
	}
	close(v.stopped)
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.setStackLocked(chain); err != nil {
		base.close()
		return nil, err
	}
	return v, nil
}

// pointEntry finds one name of a directory without listing it: layers top
// down, then the base. nil: no such name (or the directory is gone).
func (v *View) pointEntry(dir uint64, name string) (*DirEntry, error) {
	if d, ok := v.dirs[dir]; ok {
		if e, ok := d.entries[name]; ok {
			return &DirEntry{Name: name, Ino: e.Ino, Mode: e.Type}, nil
		}
		return nil, nil
	}
	st, err := v.getInode(dir)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if st.rec.Mode&syscall.S_IFMT != syscall.S_IFDIR || st.rec.Nlink == 0 {
		return nil, nil
	}
	var found *entry
	err = v.viewIfHeld(dir, name, true, func(txn *badger.Txn) error {
		for i, l := range v.stack {
			if i > 0 && v.lacksEntry(txn, l, dir, name) {
				continue
			}
			item, err := txn.Get(keyEntry(l, dir, name))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var e entry
			if err := item.Value(func(b []byte) error { var err error; e, err = decodeEntry(b); return err }); err != nil {
				return err
			}
			found = &e
			return nil
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if found != nil {
		if found.Ino == 0 {
			return nil, nil
		}
		return &DirEntry{Name: name, Ino: found.Ino, Mode: found.Type}, nil
	}
	if !st.rec.HasOrigin {
		return nil, nil
	}
	rel := path.Join(st.rec.Origin, name)
	bst, err := v.base.lstat(rel)
	if err != nil {
		return nil, nil // not in the base either
	}
	v.origins[bst.Ino] = rel
	v.bparent[bst.Ino] = dir
	return &DirEntry{Name: name, Ino: bst.Ino, Mode: bst.Mode & syscall.S_IFMT}, nil
}

// inodeState is ino's content state, nil when it has no links.
func (v *View) inodeState(ino uint64) (*InodeState, error) {
	st, err := v.getInode(ino)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if st.rec.Nlink == 0 {
		return nil, nil
	}
	fp, err := v.fingerprintLocked(st, false)
	if err != nil {
		return nil, err
	}
	return &InodeState{Attr: st.attr(), Target: st.rec.Target, Fingerprint: fp, Xattrs: xattrsID(st.rec)}, nil
}

// childPath is the path of name in directory dir.
func (v *View) childPath(dir uint64, name string) (string, error) {
	p, err := v.pathOf(dir)
	if err != nil {
		return "", err
	}
	return path.Join(p, name), nil
}

// pathOf turns an inode back into a path, through the parent each record
// names or, for an untouched base inode, through its place in the base.
func (v *View) pathOf(ino uint64) (string, error) { return v.pathOfVisit(ino, nil) }

// errStopped: a pathOfVisit visitor stopped the walk, or the walk would
// have had to search the stack for a file's other name.
var errStopped = errors.New("path walk stopped")

// pathOfVisit is pathOf that calls visit (when not nil) with every inode
// whose record the path is derived from, ino first. When visit returns
// false, or a file's recorded name is gone (its other name would be
// searched for in every layer), the walk stops with errStopped: a caller
// that gives visit wants only a path the view tells at once.
func (v *View) pathOfVisit(ino uint64, visit func(uint64) bool) (string, error) {
	var parts []string
	for depth := 0; ino != RootIno; depth++ {
		if depth > 4096 {
			return "", fmt.Errorf("inode %d: path too deep: %w", ino, ErrCorrupt)
		}
		if visit != nil && !visit(ino) {
			return "", errStopped
		}
		st, err := v.getInode(ino)
		if err != nil {
			return "", err
		}
		switch {
		case st.rec.HasParent:
			parent, name := st.rec.Parent, st.rec.Name
			if _, known := v.origins[parent]; !known && st.rec.ParentOrigin != "" {
				v.origins[parent] = st.rec.ParentOrigin
			}
			if st.rec.Mode&syscall.S_IFMT != syscall.S_IFDIR {
				// A file keeps the newest of its names; when that one was
				// removed since, another names it.
				e, err := v.pointEntry(parent, name)
				if err != nil {
					return "", err
				}
				if e == nil || e.Ino != ino {
					if visit != nil {
						return "", errStopped
					}
					if parent, name, err = v.otherName(ino); err != nil {
						return "", err
					}
				}
			}
			parts = append(parts, name)
			ino = parent
		case st.rec.HasOrigin:
			parts = append(parts, path.Base(st.rec.Origin))
			dir := path.Dir(st.rec.Origin)
			if dir == "." || dir == "" {
				ino = RootIno
				continue
			}
			// The base directory that listed the inode is the one its
			// origin lies in; only an inode never listed costs an lstat.
			if p, ok := v.bparent[ino]; ok && p != RootIno && v.origins[p] == dir {
				ino = p
				continue
			}
			bst, err := v.base.lstat(dir)
			if err != nil {
				return "", err
			}
			v.origins[bst.Ino] = dir
			ino = bst.Ino
		default:
			return "", fmt.Errorf("inode %d has no recorded parent: %w", ino, ErrNotFound)
		}
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return path.Join(parts...), nil
}

// otherName finds a name of file ino when the one its record keeps is
// gone (link a/f b/g; rm b/g): a search of the entries the stack's layers
// record and, for a base file, of its place in the base. The first of
// them in (directory, name) order is taken, so every view of one state
// finds the same. It reads whole layers, but only files whose newest name
// was removed while another stayed need it.
func (v *View) otherName(ino uint64) (uint64, string, error) {
	var cands []entryKey
	err := v.s.view(func(txn *badger.Txn) error {
		for _, l := range v.stack {
			prefix := prefixLayerTable(tEntry, l)
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().Key()[len(prefix):]
				if len(k) < 10 {
					it.Close()
					return fmt.Errorf("entry key %q: %w", it.Item().Key(), ErrCorrupt)
				}
				e, err := decodeItem(it.Item(), decodeEntry)
				if err != nil {
					it.Close()
					return err
				}
				if e.Ino == ino {
					cands = append(cands, entryKey{beUint64(k), string(k[9:])})
				}
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		return 0, "", err
	}
	// A live view's listings may hold names its journal has not stored yet.
	for dir, d := range v.dirs {
		for name, e := range d.entries {
			if e.Ino == ino {
				cands = append(cands, entryKey{dir, name})
			}
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].dir != cands[j].dir {
			return cands[i].dir < cands[j].dir
		}
		return cands[i].name < cands[j].name
	})
	for _, c := range cands {
		e, err := v.pointEntry(c.dir, c.name)
		if err != nil {
			return 0, "", err
		}
		if e != nil && e.Ino == ino {
			return c.dir, c.name, nil
		}
	}
	st, err := v.getInode(ino)
	if err != nil {
		return 0, "", err
	}
	if st.rec.HasOrigin {
		// The name the base gives it, if its directory still has it; then
		// its other names in the base (hard links there), which no layer
		// records while they stay untouched.
		if dir, name, ok, err := v.baseNameLeft(st.ino, st.rec.Origin); ok || err != nil {
			return dir, name, err
		}
		others, err := v.otherBaseNames(st.rec.Origin)
		if err != nil {
			return 0, "", fmt.Errorf("inode %d: %w", ino, mapOSErr(err))
		}
		for _, p := range others {
			if dir, name, ok, err := v.baseNameLeft(st.ino, p); ok || err != nil {
				return dir, name, err
			}
		}
	}
	return 0, "", fmt.Errorf("inode %d: no name left: %w", ino, ErrNotFound)
}

// baseNameLeft tells whether base path p still names inode ino in the
// view, and as which directory and name.
func (v *View) baseNameLeft(ino uint64, p string) (uint64, string, bool, error) {
	dir := uint64(RootIno)
	if pdir := path.Dir(p); pdir != "." && pdir != "" {
		bst, err := v.base.lstat(pdir)
		if err != nil {
			return 0, "", false, fmt.Errorf("inode %d: %w", ino, mapOSErr(err))
		}
		v.origins[bst.Ino] = pdir
		dir = bst.Ino
	}
	e, err := v.pointEntry(dir, path.Base(p))
	if err != nil || e == nil || e.Ino != ino {
		return 0, "", false, err
	}
	return dir, path.Base(p), true, nil
}

// otherBaseNames are the base's other names of the base file at origin,
// in lexical order: none unless it has hard links there.
func (v *View) otherBaseNames(origin string) ([]string, error) {
	fst, err := v.base.lstat(origin)
	if err != nil || fst.Nlink < 2 {
		return nil, nil // gone from the base, or its one name
	}
	paths, err := v.base.namesOf(fst.Ino)
	return slices.DeleteFunc(paths, func(p string) bool { return p == origin }), err
}

// State is ino's content state in the view (nil: it has no links).
func (v *View) State(ino uint64) (*InodeState, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.inodeState(ino)
}

// OpenBase opens a read-only view of a sandbox's base alone, as it is now.
func (s *Store) OpenBase(sandbox string) (*View, error) { return s.openStack(sandbox, nil) }

// subtree lists every path below directory ino (whose path is top).
func (v *View) subtree(ino uint64, top string) ([]PathAttr, error) {
	d, _, err := v.getDir(ino)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", top, err)
	}
	names := make([]string, 0, len(d.entries))
	for n := range d.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []PathAttr
	for _, n := range names {
		e := d.entries[n]
		st, err := v.getInode(e.Ino)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", top, n, err)
		}
		p := path.Join(top, n)
		out = append(out, PathAttr{Path: p, Attr: st.attr()})
		if st.rec.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			below, err := v.subtree(e.Ino, p)
			if err != nil {
				return nil, err
			}
			out = append(out, below...)
		}
	}
	return out, nil
}

// scanLayerRecords calls entry for each directory entry and inode for each
// inode a layer records, and tells both views where the layer's base
// inodes come from: they are only known to a view through a listing.
func scanLayerRecords(txn dbTxn, layer string, va, vb *View, entry func(entryKey), inode func(uint64)) error {
	prefix := prefixLayerTable(tEntry, layer)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()[len(prefix):]
		if len(k) < 10 {
			it.Close()
			return fmt.Errorf("entry key %q: %w", it.Item().Key(), ErrCorrupt)
		}
		entry(entryKey{beUint64(k), string(k[9:])})
	}
	it.Close()
	prefix = prefixLayerTable(tInode, layer)
	it = txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()[len(prefix):]
		if len(k) != 8 {
			return fmt.Errorf("inode key %q: %w", it.Item().Key(), ErrCorrupt)
		}
		ino := beUint64(k)
		inode(ino)
		rec, err := decodeItem(it.Item(), decodeInode)
		if err != nil {
			return err
		}
		if rec.HasOrigin && ino != RootIno {
			va.origins[ino], vb.origins[ino] = rec.Origin, rec.Origin
		}
	}
	return nil
}
