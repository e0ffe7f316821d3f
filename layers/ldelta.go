package layers

import (
	"errors"
	"fmt"
	"path"
	"sort"
	"sync"
	"syscall"

	"github.com/dgraph-io/badger/v4"
)

// What one layer changed, key by key.
//
// A checkpoint's state hash and a rollback's list of changed paths both
// need, for every inode and directory entry a layer records, what it was
// below the layer and what it is with it. Reading both states back from
// the store costs a view of each stack and, for untouched base files, an
// lstat each. A live view instead notes, the first time an operation
// records a key in its active layer, what the key was until then (its
// pre-image): the record it replaces — records are cloned on copy-up and
// never changed in place, so keeping the pointer is enough — or the
// directory entry it overwrites. A freeze then builds the layer's delta
// from memory. A frozen layer never changes, so the store keeps its delta
// (LayerDelta), and a rollback composes the deltas of the layers it leaves
// and joins instead of comparing trees.
//
// Base files count as immutable here, as everywhere in a sandbox's life:
// their identity (inode number, size, modification time) is taken from the stat
// the view made when it first read them.

type entryKey struct {
	dir  uint64
	name string
}

// preImages are the pre-images of the keys the active layer records.
type preImages struct {
	// complete: the active layer was empty when the view started on it,
	// so every key it records went through this view and is noted here.
	complete bool
	inodes   map[uint64]preInode
	entries  map[entryKey]preEntry
	// dirs counts the entries noted per directory: with complete, a
	// directory it lacks has no entry in the active layer.
	dirs map[uint64]int
}

type preInode struct {
	// st is the inode as the view holds it: its block map below the
	// active layer (frozen, baseLimit) is never changed by the active one.
	st *inodeState
	// rec is its record below the active layer; nil: it did not exist.
	rec *Inode
	// unknown: recorded without a copy-up, so rec could not be kept.
	unknown bool
}

type preEntry struct {
	e  entry
	ok bool // the name existed
}

func newPreImages(complete bool) *preImages {
	return &preImages{complete: complete, inodes: map[uint64]preInode{}, entries: map[entryKey]preEntry{}, dirs: map[uint64]int{}}
}

// inode notes st's record below the active layer (nil for a new inode),
// unless the layer already recorded st.
func (p *preImages) inode(st *inodeState, rec *Inode) {
	if p == nil {
		return
	}
	if _, ok := p.inodes[st.ino]; !ok {
		p.inodes[st.ino] = preInode{st: st, rec: rec}
	}
}

func (p *preImages) unknownInode(ino uint64) {
	if p == nil {
		return
	}
	if _, ok := p.inodes[ino]; !ok {
		p.inodes[ino] = preInode{unknown: true}
	}
}

// entry notes what name in directory dir (listed as d) is before the
// active layer first records it.
func (p *preImages) entry(dir uint64, d *dirState, name string) {
	if p == nil {
		return
	}
	k := entryKey{dir, name}
	if _, ok := p.entries[k]; !ok {
		e, ok := d.entries[name]
		p.entries[k] = preEntry{e: e, ok: ok}
		p.dirs[dir]++
	}
}

// LayerDelta is what one layer changed against the stack below it: every
// directory entry and inode the layer records, with its state below the
// layer (Old) and in the stack the layer tops (New). Either may be nil
// (no such name, or no live inode), and both may be equal (a record that
// changed only times or links); built from a live view, it may also name
// a key the layer recorded and dropped again, with neither. Paths are not
// filled.
type LayerDelta struct {
	Layer   string
	Entries []EntryChange
	Inodes  []InodeChange
	// Usage counts the blocks the layer holds.
	Usage

	// names says where each inode of Inodes is named below the layer and
	// with it, for turning inodes into paths.
	names map[uint64][2]naming

	// The inodes and directories the layer records, made once on first
	// use (keySet): a view looking a key up in a deep stack skips the
	// layers that do not hold it instead of asking the store.
	setsOnce sync.Once
	sets     *keySet
}

// keySet is the key set of the layer.
func (d *LayerDelta) keySet() *keySet {
	d.setsOnce.Do(func() {
		ks := &keySet{inodes: make(map[uint64]struct{}, len(d.Inodes)), dirs: map[uint64]struct{}{}, names: make(map[uint64]struct{}, len(d.Entries))}
		for _, c := range d.Inodes {
			ks.inodes[c.Ino] = struct{}{}
		}
		for _, c := range d.Entries {
			ks.dirs[c.Dir] = struct{}{}
			ks.names[entryHash(c.Dir, c.Name)] = struct{}{}
		}
		d.sets = ks
	})
	return d.sets
}

// keys are the inodes and directories the layer records.
func (d *LayerDelta) keys() *changedKeys {
	c := newChangedKeys(len(d.Inodes))
	d.addKeys(c)
	return c
}

func (d *LayerDelta) addKeys(c *changedKeys) {
	for _, ic := range d.Inodes {
		c.inodes[ic.Ino] = true
	}
	for _, ec := range d.Entries {
		names := c.dirs[ec.Dir]
		if names == nil {
			names = map[string]struct{}{}
			c.dirs[ec.Dir] = names
		}
		names[ec.Name] = struct{}{}
	}
}

// naming is what an inode's record says about its place in the tree; a
// path is derived from nothing else (View.pathOf).
type naming struct {
	known                bool // a record (the base's included) exists
	hasParent, hasOrigin bool
	parent               uint64
	name, parentOrigin   string
	origin               string
}

func namingOf(rec *Inode) naming {
	if rec == nil {
		return naming{}
	}
	return naming{
		known: true, hasParent: rec.HasParent, hasOrigin: rec.HasOrigin,
		parent: rec.Parent, name: rec.Name, parentOrigin: rec.ParentOrigin, origin: rec.Origin,
	}
}

// stateLocked is ino's content state and naming in the view. trustBase
// takes base files' identity from the stat made when they were loaded.
func (v *View) stateLocked(ino uint64, trustBase bool) (*InodeState, naming, error) {
	st, err := v.getInode(ino)
	if errors.Is(err, ErrNotFound) {
		return nil, naming{}, nil
	}
	if err != nil {
		return nil, naming{}, err
	}
	nm := namingOf(st.rec)
	if st.rec.Nlink == 0 {
		return nil, nm, nil
	}
	fp, err := v.fingerprintLocked(st, trustBase)
	if err != nil {
		return nil, naming{}, err
	}
	return &InodeState{Attr: st.attr(), Target: st.rec.Target, Fingerprint: fp, Xattrs: xattrsID(st.rec)}, nm, nil
}

// preStateLocked is the content state of a noted inode below the active
// layer: its old record over the blocks the layers below hold.
func (v *View) preStateLocked(p preInode) (*InodeState, error) {
	if p.rec == nil || p.rec.Nlink == 0 {
		return nil, nil
	}
	st := p.st
	if p.rec.Mode&syscall.S_IFMT == syscall.S_IFREG {
		if err := v.ensureBlocks(st); err != nil {
			return nil, err
		}
	}
	below := &inodeState{
		ino: st.ino, rec: p.rec, blocksLoaded: true, frozen: st.frozen, baseLimit: st.baseLimit,
		bsize: st.bsize, bmtime: st.bmtime, bknown: st.bknown,
	}
	fp, err := v.fingerprintLocked(below, true)
	if err != nil {
		return nil, err
	}
	if below.bknown && !st.bknown {
		st.bsize, st.bmtime, st.bknown = below.bsize, below.bmtime, true
	}
	return &InodeState{Attr: below.attr(), Target: p.rec.Target, Fingerprint: fp, Xattrs: xattrsID(p.rec)}, nil
}

// activeDeltaLocked builds the delta of the active layer from the
// pre-images; every block must be sealed. ok is false when some key of
// the layer has no pre-image (the view started on a layer that already
// held records).
func (v *View) activeDeltaLocked() (d *LayerDelta, ok bool, err error) {
	p := v.pre
	if p == nil || !p.complete || v.closed {
		return nil, false, nil
	}
	d = &LayerDelta{Layer: v.activeLayer(), names: make(map[uint64][2]naming, len(p.inodes))}
	inos := make([]uint64, 0, len(p.inodes))
	for ino, pi := range p.inodes {
		if pi.unknown {
			return nil, false, nil
		}
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		pi := p.inodes[ino]
		old, err := v.preStateLocked(pi)
		if err != nil {
			return nil, false, fmt.Errorf("inode %d below layer %s: %w", ino, d.Layer, err)
		}
		cur, nm, err := v.stateLocked(ino, true)
		if err != nil {
			return nil, false, fmt.Errorf("inode %d: %w", ino, err)
		}
		d.Inodes = append(d.Inodes, InodeChange{Ino: ino, Old: old, New: cur})
		d.names[ino] = [2]naming{namingOf(pi.rec), nm}
		// The blocks the layer holds are those of the inodes it recorded;
		// a purged inode's went with it.
		if st := pi.st; !st.purged && st.rec.Mode&syscall.S_IFMT == syscall.S_IFREG {
			if err := v.ensureBlocks(st); err != nil {
				return nil, false, err
			}
			d.Blocks += int64(len(st.active))
			if len(st.active) > 0 {
				d.Files++
			}
			for _, r := range st.active {
				d.Bytes += r.capBytes()
			}
		}
	}
	keys := make([]entryKey, 0, len(p.entries))
	for k := range p.entries {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].dir != keys[j].dir {
			return keys[i].dir < keys[j].dir
		}
		return keys[i].name < keys[j].name
	})
	for _, k := range keys {
		pe := p.entries[k]
		var old *DirEntry
		if pe.ok && pe.e.Ino != 0 {
			old = &DirEntry{Name: k.name, Ino: pe.e.Ino, Mode: pe.e.Type}
		}
		cur, err := v.pointEntry(k.dir, k.name)
		if err != nil {
			return nil, false, fmt.Errorf("entry %q of %d: %w", k.name, k.dir, err)
		}
		d.Entries = append(d.Entries, EntryChange{Dir: k.dir, Name: k.name, Old: old, New: cur})
	}
	return d, true, nil
}

// computeDelta builds the delta of a layer from the store: a view of the
// stack below it and one of the stack it tops, read only where the layer
// has records.
func (s *Store) computeDelta(sandbox, layer string) (*LayerDelta, error) {
	var chain []string
	err := s.view(func(txn *badger.Txn) error {
		var err error
		chain, err = chainOf(txn, layer)
		return err
	})
	if err != nil {
		return nil, err
	}
	va, err := s.openStack(sandbox, chain[1:])
	if err != nil {
		return nil, err
	}
	defer va.Close()
	vb, err := s.openStack(sandbox, chain)
	if err != nil {
		return nil, err
	}
	defer vb.Close()
	va.mu.Lock()
	defer va.mu.Unlock()
	vb.mu.Lock()
	defer vb.mu.Unlock()
	d := &LayerDelta{Layer: layer, names: map[uint64][2]naming{}}
	var keys []entryKey
	var inos []uint64
	err = s.view(func(txn *badger.Txn) error {
		err := scanLayerRecords(txn, layer, va, vb,
			func(k entryKey) { keys = append(keys, k) },
			func(ino uint64) { inos = append(inos, ino) })
		if err != nil {
			return err
		}
		d.Usage, err = layerUsage(txn, layer)
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		a, err := va.pointEntry(k.dir, k.name)
		if err != nil {
			return nil, err
		}
		b, err := vb.pointEntry(k.dir, k.name)
		if err != nil {
			return nil, err
		}
		d.Entries = append(d.Entries, EntryChange{Dir: k.dir, Name: k.name, Old: a, New: b})
	}
	for _, ino := range inos {
		a, an, err := va.stateLocked(ino, false)
		if err != nil {
			return nil, err
		}
		b, bn, err := vb.stateLocked(ino, false)
		if err != nil {
			return nil, err
		}
		d.Inodes = append(d.Inodes, InodeChange{Ino: ino, Old: a, New: b})
		d.names[ino] = [2]naming{an, bn}
	}
	return d, nil
}

// deltaCache keeps the deltas of frozen and archived layers, which never
// change, up to a number of keys; the oldest go first.
type deltaCache struct{ layerCache[*LayerDelta] }

// deltaCacheKeys bounds the entries and inodes the cache holds (a few
// hundred bytes each).
const deltaCacheKeys = 1 << 17

func deltaKeys(d *LayerDelta) int { return len(d.Entries) + len(d.Inodes) + 1 }

func (c *deltaCache) get(layer string) *LayerDelta {
	d, _ := c.layerCache.get(layer)
	return d
}

func (c *deltaCache) put(d *LayerDelta) {
	c.layerCache.put(d.Layer, d, deltaKeys(d), deltaCacheKeys)
}

// LayerDelta returns what layer changed against the stack below it (see
// LayerDelta), reading the stacks of sandbox, whose base they stand on.
// The delta of a frozen or archived layer is kept once known — a live
// view computes it at the freeze — so that only the first call reads the
// store; an active layer's is computed anew each time, from what is
// committed.
func (s *Store) LayerDelta(sandbox, layer string) (*LayerDelta, error) {
	if d := s.deltas.get(layer); d != nil {
		return d, nil
	}
	l, err := s.Layer(layer)
	if err != nil {
		return nil, err
	}
	d, err := s.computeDelta(sandbox, layer)
	if err != nil {
		return nil, fmt.Errorf("delta of layer %s: %w", layer, err)
	}
	if l.State != StateActive {
		s.deltas.put(d)
	}
	return d, nil
}

// LayerDelta is Store.LayerDelta inside a transaction that freezes a layer
// or moves a head: the layer being frozen or left is answered from the
// live view that held it.
func (t *Txn) LayerDelta(sandbox, layer string) (*LayerDelta, error) {
	if d := t.deltas[layer]; d != nil {
		return d, nil
	}
	if err := t.outside(layer); err != nil {
		return nil, err
	}
	d, err := t.s.LayerDelta(sandbox, layer)
	if err != nil {
		return nil, err
	}
	// Kept for this transaction; once it commits the layer cannot change.
	t.keepDelta(d)
	return d, nil
}

func (t *Txn) keepDelta(d *LayerDelta) {
	if t.deltas == nil {
		t.deltas = map[string]*LayerDelta{}
	}
	t.deltas[d.Layer] = d
}

// LayerUsage is Store.LayerUsage inside a transaction (which it reads
// from, so it sees the transaction's own writes), answered from the
// layer's delta when one is known.
func (t *Txn) LayerUsage(layer string) (Usage, error) {
	if err := t.fault("blocks", layer); err != nil {
		return Usage{}, err
	}
	d := t.deltas[layer]
	if d == nil {
		d = t.s.deltas.get(layer)
	}
	if d != nil {
		return d.Usage, nil
	}
	return layerUsage(t.txn, layer)
}

// rememberDeltas keeps the deltas a committed transaction computed for the
// given layers, which it made frozen or archived.
func (t *Txn) rememberDeltas(layers []string) {
	for _, l := range layers {
		if d := t.deltas[l]; d != nil {
			t.s.deltas.put(d)
		}
	}
}

// layerEmpty reports whether a layer records no inode and no entry.
func (s *Store) layerEmpty(layer string) (bool, error) {
	empty := true
	err := s.view(func(txn *badger.Txn) error {
		for _, t := range []byte{tInode, tEntry} {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixLayerTable(t, layer)})
			it.Rewind()
			if it.Valid() {
				empty = false
			}
			it.Close()
		}
		return nil
	})
	return empty, err
}

// ---- rollback: what differs between the state left and the one joined ----

// inodeSides is one inode's state in the stacks a rollback compares: below
// the layers they do not share, and in each of them.
type inodeSides struct {
	below, from, to          *InodeState
	belowN, fromN, toN       naming
	hasBelow, hasFrom, hasTo bool
}

func (s *inodeSides) fromState() (*InodeState, naming) {
	if s.hasFrom {
		return s.from, s.fromN
	}
	return s.below, s.belowN
}

func (s *inodeSides) toState() (*InodeState, naming) {
	if s.hasTo {
		return s.to, s.toN
	}
	return s.below, s.belowN
}

// entrySides is inodeSides for a directory entry.
type entrySides struct {
	below, from, to          *DirEntry
	hasBelow, hasFrom, hasTo bool
}

// repointDiff is a rollback's list of changes while the view still shows
// the state it leaves; the paths only the new state can tell are filled
// by finishLocked after the switch.
type repointDiff struct {
	ch         Changes
	newPaths   []int // Entries whose NewPath the new state tells
	newTrees   []int // Entries whose NewTree the new state lists
	inodePaths []int // Inodes whose Path the new state tells
	origins    map[uint64]string
	changed    *changedKeys // every key the layers left and joined record
}

// diffLocked lists what differs between the view's state (its whole
// stack, the sealed active layer included, whose delta is dA) and the
// stack topped by layer to, as Compare(sandbox, head, to, true) does,
// from the deltas of the layers the two stacks do not share. Paths in
// the old state come from the view; a path in the new state is the old
// one when nothing on its way up is named differently there.
func (v *View) diffLocked(to string, dA *LayerDelta) (*repointDiff, error) {
	oldStack := v.stack
	// A rollback's target lies on the view's stack: its chain is the
	// stack's tail, with no layer record read.
	var newChain []string
	var err error
	for i, l := range oldStack {
		if l == to {
			newChain = oldStack[i:]
			break
		}
	}
	if newChain == nil {
		err = v.s.view(func(txn *badger.Txn) error {
			var err error
			newChain, err = chainOf(txn, to)
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	inNew, inOld := map[string]bool{}, map[string]bool{}
	for _, l := range newChain {
		inNew[l] = true
	}
	for _, l := range oldStack {
		inOld[l] = true
	}
	var left, joined []string
	for _, l := range oldStack {
		if !inNew[l] {
			left = append(left, l)
		}
	}
	for _, l := range newChain {
		if !inOld[l] {
			joined = append(joined, l)
		}
	}
	// Deltas not known yet (a store opened since they were frozen) are
	// read from the store one layer at a time; past a few, one Compare of
	// the two stacks afterwards costs less.
	cold := 0
	for _, l := range append(append([]string(nil), left...), joined...) {
		if l != dA.Layer && v.s.deltas.get(l) == nil {
			cold++
		}
	}
	if cold > maxColdDeltas {
		return nil, fmt.Errorf("%d layer deltas not known: %w", cold, ErrNotFound)
	}
	delta := func(l string) (*LayerDelta, error) {
		if l == dA.Layer {
			return dA, nil
		}
		return v.s.LayerDelta(v.info.Name, l)
	}
	inodes := map[uint64]*inodeSides{}
	entries := map[entryKey]*entrySides{}
	changed := newChangedKeys(0)
	// Layers bottom up, so the topmost record of a key wins; the state
	// below the first layer that records it is the shared state.
	compose := func(ls []string, from bool) error {
		for i := len(ls) - 1; i >= 0; i-- {
			d, err := delta(ls[i])
			if err != nil {
				return err
			}
			d.addKeys(changed)
			for _, c := range d.Inodes {
				s := inodes[c.Ino]
				if s == nil {
					s = &inodeSides{}
					inodes[c.Ino] = s
				}
				nm := d.names[c.Ino]
				if !s.hasBelow {
					s.below, s.belowN, s.hasBelow = c.Old, nm[0], true
				}
				if from {
					s.from, s.fromN, s.hasFrom = c.New, nm[1], true
				} else {
					s.to, s.toN, s.hasTo = c.New, nm[1], true
				}
			}
			for _, c := range d.Entries {
				k := entryKey{c.Dir, c.Name}
				s := entries[k]
				if s == nil {
					s = &entrySides{}
					entries[k] = s
				}
				if !s.hasBelow {
					s.below, s.hasBelow = c.Old, true
				}
				if from {
					s.from, s.hasFrom = c.New, true
				} else {
					s.to, s.hasTo = c.New, true
				}
			}
		}
		return nil
	}
	if err := compose(left, true); err != nil {
		return nil, err
	}
	if err := compose(joined, false); err != nil {
		return nil, err
	}
	rd := &repointDiff{origins: map[uint64]string{}, changed: changed}
	for ino, s := range inodes {
		for _, n := range []naming{s.belowN, s.fromN, s.toN} {
			if n.hasOrigin && ino != RootIno {
				rd.origins[ino] = n.origin
			}
		}
	}
	// sameName: the inode is named alike in both states.
	sameName := func(ino uint64) bool {
		s, ok := inodes[ino]
		if !ok {
			return true
		}
		_, a := s.fromState()
		_, b := s.toState()
		if a == b {
			return true
		}
		pa, na, oka := v.placeOf(ino, a)
		pb, nb, okb := v.placeOf(ino, b)
		return oka && okb && pa == pb && na == nb
	}
	// newPath is ino's path in the new state when the old state tells it.
	newPath := func(ino uint64) (string, bool) {
		p, err := v.pathOfVisit(ino, sameName)
		return p, err == nil
	}
	for k, s := range entries {
		var a, b *DirEntry
		if s.hasFrom {
			a = s.from
		} else {
			a = s.below
		}
		if s.hasTo {
			b = s.to
		} else {
			b = s.below
		}
		if (a == nil) == (b == nil) && (a == nil || *a == *b) {
			continue
		}
		c := EntryChange{Dir: k.dir, Name: k.name, Old: a, New: b}
		if a != nil {
			if c.OldPath, err = v.childPath(k.dir, k.name); err != nil {
				return nil, fmt.Errorf("old path of %q in %d: %w", k.name, k.dir, err)
			}
			if a.Mode == syscall.S_IFDIR && (b == nil || b.Ino != a.Ino) {
				if c.OldTree, err = v.subtree(a.Ino, c.OldPath); err != nil {
					return nil, err
				}
			}
		}
		i := len(rd.ch.Entries)
		if b != nil {
			if p, ok := newPath(k.dir); ok {
				c.NewPath = path.Join(p, k.name)
			} else {
				rd.newPaths = append(rd.newPaths, i)
			}
			if b.Mode == syscall.S_IFDIR && (a == nil || b.Ino != a.Ino) {
				rd.newTrees = append(rd.newTrees, i)
			}
		}
		rd.ch.Entries = append(rd.ch.Entries, c)
	}
	for ino, s := range inodes {
		a, _ := s.fromState()
		b, _ := s.toState()
		if sameState(a, b) {
			continue
		}
		c := InodeChange{Ino: ino, Old: a, New: b}
		if b != nil {
			if p, ok := newPath(ino); ok {
				c.Path = p
			} else {
				rd.inodePaths = append(rd.inodePaths, len(rd.ch.Inodes))
			}
		}
		rd.ch.Inodes = append(rd.ch.Inodes, c)
	}
	return rd, nil
}

// maxColdDeltas is how many layer deltas a rollback reads from the store
// before it leaves the list of changes to a Compare.
const maxColdDeltas = 2

// placeOf is the directory and name a naming puts ino at, as pathOf
// reads them: a copy-up records as its parent the base directory an
// untouched base inode is found in, so both name the same place.
func (v *View) placeOf(ino uint64, n naming) (uint64, string, bool) {
	switch {
	case !n.known:
		return 0, "", false
	case n.hasParent:
		return n.parent, n.name, true
	case n.hasOrigin:
		dir := path.Dir(n.origin)
		if dir == "." || dir == "" {
			return RootIno, path.Base(n.origin), true
		}
		if p, ok := v.bparent[ino]; ok && v.origins[p] == dir {
			return p, path.Base(n.origin), true
		}
		bst, err := v.base.lstat(dir)
		if err != nil {
			return 0, "", false
		}
		return bst.Ino, path.Base(n.origin), true
	}
	return 0, "", false
}

// finishLocked fills, from the view now showing the new state, the paths
// diffLocked could not tell, and sorts the changes as Compare does; t is
// what the changes touched (rd.changed.touched()).
func (rd *repointDiff) finishLocked(v *View, t *Touched) (*Changes, error) {
	for ino, o := range rd.origins {
		if _, ok := v.origins[ino]; !ok {
			v.origins[ino] = o
		}
	}
	var err error
	for _, i := range rd.newPaths {
		c := &rd.ch.Entries[i]
		if c.NewPath, err = v.childPath(c.Dir, c.Name); err != nil {
			return nil, fmt.Errorf("new path of %q in %d: %w", c.Name, c.Dir, err)
		}
	}
	for _, i := range rd.newTrees {
		c := &rd.ch.Entries[i]
		if c.NewTree, err = v.subtree(c.New.Ino, c.NewPath); err != nil {
			return nil, err
		}
	}
	for _, i := range rd.inodePaths {
		c := &rd.ch.Inodes[i]
		if c.Path, err = v.pathOf(c.Ino); err != nil {
			return nil, fmt.Errorf("path of inode %d: %w", c.Ino, err)
		}
	}
	sortChanges(&rd.ch)
	rd.ch.Touched = t
	return &rd.ch, nil
}

// touched lists the keys as Changes.Touched does.
func (c *changedKeys) touched() *Touched {
	t := &Touched{
		Inodes: make([]uint64, 0, len(c.inodes)),
		Dirs:   make([]uint64, 0, len(c.dirs)),
		Names:  make(map[uint64][]string, len(c.dirs)),
	}
	for ino := range c.inodes {
		t.Inodes = append(t.Inodes, ino)
	}
	for ino, names := range c.dirs {
		t.Dirs = append(t.Dirs, ino)
		list := make([]string, 0, len(names))
		for name := range names {
			list = append(list, name)
		}
		t.Names[ino] = list
	}
	return t
}

func sortChanges(ch *Changes) {
	sort.Slice(ch.Entries, func(i, j int) bool {
		if ch.Entries[i].Dir != ch.Entries[j].Dir {
			return ch.Entries[i].Dir < ch.Entries[j].Dir
		}
		return ch.Entries[i].Name < ch.Entries[j].Name
	})
	sort.Slice(ch.Inodes, func(i, j int) bool { return ch.Inodes[i].Ino < ch.Inodes[j].Ino })
}
