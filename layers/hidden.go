package layers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// Reclaiming the blocks that no stack shows any more.
//
// A layer lives while some stack contains it (gc.go), so pruning a
// checkpoint drops its pin but not its layer when a later checkpoint
// stands on it: an agent that rewrites a file at every step and keeps the
// last checkpoint only would keep every old copy of the file. Yet a block
// of such a layer that every stack above it hides is never read again:
// once a frozen layer above it holds the same block, cuts the file below
// it (a truncate's Floor), or records the file removed for good, no stack
// containing both ever shows it, and the stacks a layer is in only grow
// upwards (new layers go on top of heads, which are roots).
//
// So a collection goes through the layers that are neither the top of a
// kept stack (a sandbox head, a pinned layer, an open snapshot) nor a
// fork in the tree of layers: each such layer has exactly one child,
// and the layers above it up to the next root or fork (its run) are in
// every stack that contains it. Going down a run from its top, a block
// record is dead when a frozen layer above it in the run hides it; its
// record goes (with its dedup name), and its slot is punched once that is
// durable (the u/ records of dedup.go, which a crash leaves for the next
// pass), unless a record above keeps its content there (r/).
//
// What hides a block, each for every stack above it:
//   - a record of the same block in a frozen layer above (the topmost
//     record wins outright, view.go's ensureBlocks);
//   - a Floor at or before the block's start in a frozen layer above
//     (blocks past a truncate's cut are never shown);
//   - the file's topmost record up to the run's top having no links, when
//     the file had a name (or is a base file): the kernel links an inode
//     with no links again only if it is an O_TMPFILE never named
//     (I_LINKABLE), so such a file is gone for every stack above too. A
//     file some open view still holds (an open or unlinked-but-open file,
//     a tmpfile) is left for a later pass: its handles read its blocks.
//
// The active layer does not count: its records may still change. The
// states a run's middle layers topped are not kept: their block
// records go, so a view of such a layer would not show what it showed when
// it was frozen; nothing opens one (checkpoints, archives and forks pin
// their layers, and rollbacks, diffs and hashes compose deltas whose
// inputs at a kept state the dropped blocks never were).
//
// A run that a pass went through whole is marked with the top it was
// checked against; a later pass skips it until its top changes (the
// pin of its top was dropped, so the run now reaches higher) or it
// reaches lower:
//
//	m/<bottom layer of the run>/ -> the run's top
const tReclaimed = 'm'

func keyReclaimed(bottom string) []byte { return prefixLayerTable(tReclaimed, bottom) }

// reclaimRun is one run of a collection: its top (a root or a fork) and
// its layers, top first.
type reclaimRun struct {
	top    LayerInfo
	layers []string
	bs     int64 // the block size of the sandboxes the run is in
	// old is where the layers a pass went through before begin: they
	// were checked against every layer above them up to an earlier top,
	// so only the layers above that (and it) can hide more of theirs.
	old int
}

// deadBlock is a block record a collection drops.
type deadBlock struct {
	layer    string
	ino, blk uint64
	ref      blockRef
	raw      []byte // the record as read, which must not have changed
	// punch: its slot goes too; not when the content lives elsewhere
	// (a dedup home) or a record above keeps its content in it.
	punch bool
}

// reclaimHook, when a test sets it, is called after a pass planned its
// drops and before it commits them.
var reclaimHook func()

// reclaimShadowed drops the block records of unpinned frozen layers that
// every stack above them hides (see above) and gives their slots back. It
// returns the records dropped and the bytes punched.
func (s *Store) reclaimShadowed() (int, int64, error) {
	s.dedupMu.Lock()
	defer s.dedupMu.Unlock()
	if err := s.syncLazyViews(); err != nil {
		return 0, 0, err
	}
	freed, err := s.finishPunches()
	if err != nil {
		return 0, freed, err
	}
	held, tops := s.viewsNow()
	runs, err := s.reclaimRuns(tops)
	if err != nil {
		return 0, freed, err
	}
	dropped := 0
	for _, r := range runs {
		dead, complete, err := s.deadBlocks(r, held)
		if err != nil {
			return dropped, freed, fmt.Errorf("run below %s: %w", r.top.ID, err)
		}
		if reclaimHook != nil {
			reclaimHook()
		}
		n, err := s.commitDead(dead)
		dropped += n
		if err != nil {
			return dropped, freed, err
		}
		for _, l := range r.layers {
			s.deltas.forget(l) // its usage changed
		}
		if complete {
			bottom := r.layers[len(r.layers)-1]
			if err := s.update(func(txn *badger.Txn) error {
				// A collection dropping the layer meanwhile takes its
				// tables: no mark is left behind it.
				if _, err := txn.Get(keyLayer(bottom)); err != nil {
					return ignoreNotFound(err)
				}
				return txn.Set(keyReclaimed(bottom), []byte(r.top.ID))
			}); err != nil {
				return dropped, freed, err
			}
		}
	}
	if dropped == 0 {
		return 0, freed, nil
	}
	n, err := s.finishPunches()
	return dropped, freed + n, err
}

// viewsNow reads, under each open view's lock (a mount or a snapshot),
// the inodes it holds, whose handles may read blocks no stack shows, and
// the top of its stack, which a pass keeps as it is (a snapshot reads its
// stack as it is). A view changes them under its lock, which a
// transaction must not wait for: they are read before.
func (s *Store) viewsNow() (held map[uint64]bool, tops []string) {
	held = map[uint64]bool{}
	for _, v := range s.openViews() {
		v.mu.Lock()
		for _, m := range []map[uint64]*inodeState{v.inodes, v.zombies, v.tmps} {
			for ino := range m {
				held[ino] = true
			}
		}
		for ino := range v.opens {
			held[ino] = true
		}
		if len(v.stack) > 0 {
			tops = append(tops, v.stack[0])
		}
		v.mu.Unlock()
	}
	return held, tops
}

// reclaimRuns reads the tree of the layers collections keep (the stacks
// of the sandboxes' heads, the pinned layers and the open views' tops)
// and lists its runs that a pass has not gone through against their
// present top.
func (s *Store) reclaimRuns(tops []string) ([]reclaimRun, error) {
	var runs []reclaimRun
	err := s.view(func(txn *badger.Txn) error {
		roots, sbs, err := stackRootsAndSandboxes(txn)
		if err != nil {
			return err
		}
		isRoot := map[string]bool{}
		for _, r := range roots {
			isRoot[r] = true
		}
		for _, top := range tops {
			if !isRoot[top] {
				isRoot[top] = true
				roots = append(roots, top)
			}
		}
		infos, err := layerTree(txn)
		if err != nil {
			return err
		}
		live, children, err := liveTree(infos, roots)
		if err != nil {
			return err
		}
		// A layer's block size is its sandbox's; a layer whose sandbox
		// was removed (a fork stands on it) has the size of the
		// sandboxes whose stacks contain it, which forks copy.
		bsOf := map[string]int64{}
		for _, sb := range sbs {
			bsOf["s/"+sb.Name] = int64(sb.BlockSize)
			for l := sb.Head; l != "" && bsOf[l] == 0; l = infos[l].Parent {
				bsOf[l] = int64(sb.BlockSize)
			}
		}
		stop := func(id string) bool {
			return isRoot[id] || len(children[id]) != 1 || infos[id].State == StateActive
		}
		for id := range live {
			top := infos[id]
			if !stop(id) || top.Parent == "" || stop(top.Parent) {
				continue
			}
			r := reclaimRun{top: top, bs: bsOf["s/"+top.Sandbox]}
			if r.bs == 0 {
				r.bs = bsOf[id]
			}
			if r.bs <= 0 {
				continue // no sandbox tells its block size: left as it is
			}
			for l := top.Parent; l != "" && !stop(l); l = infos[l].Parent {
				r.layers = append(r.layers, l)
			}
			r.old = len(r.layers)
			item, err := txn.Get(keyReclaimed(r.layers[len(r.layers)-1]))
			if err == nil {
				err = item.Value(func(b []byte) error {
					if string(b) == top.ID {
						r.layers = nil
					} else if i := slices.Index(r.layers, string(b)); i >= 0 {
						r.old = i + 1
					}
					return nil
				})
			}
			if err != nil && !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			if r.layers != nil {
				runs = append(runs, r)
			}
		}
		return nil
	})
	return runs, err
}

// hidden is what the frozen layers above a point of a run hide.
type hidden struct {
	blocks map[[16]byte]bool // (ino, blk) recorded above
	floor  map[uint64]int64  // the lowest Floor above
	// gone: the topmost record above says whether the inode is gone for
	// good (no links, and a name once); absent: no record above.
	gone map[uint64]bool
}

// deadBlocks goes down run r and lists the block records that the frozen
// layers above them hide. complete is false when a held inode kept some.
func (s *Store) deadBlocks(r reclaimRun, held map[uint64]bool) (dead []deadBlock, complete bool, err error) {
	complete = true
	err = s.view(func(txn *badger.Txn) error {
		bs := r.bs
		h := hidden{blocks: map[[16]byte]bool{}, floor: map[uint64]int64{}, gone: map[uint64]bool{}}
		add := func(recs map[uint64]*Inode, blocks [][16]byte) {
			for _, bk := range blocks {
				h.blocks[bk] = true
			}
			for ino, rec := range recs {
				if rec.Floor >= 0 {
					if f, ok := h.floor[ino]; !ok || rec.Floor < f {
						h.floor[ino] = rec.Floor
					}
				}
				if _, ok := h.gone[ino]; !ok {
					h.gone[ino] = goneForGood(rec)
				}
			}
		}
		if r.top.State != StateActive {
			recs, err := layerInodes(txn, r.top.ID)
			if err != nil {
				return err
			}
			blocks, err := layerBlocks(txn, r.top.ID, nil)
			if err != nil {
				return err
			}
			add(recs, blocks)
		}
		for i, l := range r.layers {
			old := i >= r.old
			var recs map[uint64]*Inode
			if !old {
				var err error
				if recs, err = layerInodes(txn, l); err != nil {
					return err
				}
			}
			kept, err := keptSlots(txn, l)
			if err != nil {
				return err
			}
			blocks, err := layerBlocks(txn, l, func(bk [16]byte, ino, blk uint64, item *badger.Item) error {
				if !h.blocks[bk] && !pastFloor(h.floor, ino, blk, bs) {
					// A layer gone through before had its own records
					// weighed then; the layers above it now are the new
					// ones.
					gone, ok := h.gone[ino]
					if !ok && !old && recs[ino] != nil {
						gone = goneForGood(recs[ino])
					}
					if !gone {
						return nil
					}
					if held[ino] {
						complete = false
						return nil
					}
				}
				raw, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				ref, err := decodeBlockRef(raw)
				if err != nil {
					return fmt.Errorf("inode %d block %d in layer %s: %w", ino, blk, l, err)
				}
				punch := ref.Home == "" && !kept[ref.Slot]
				dead = append(dead, deadBlock{layer: l, ino: ino, blk: blk, ref: ref, raw: raw, punch: punch})
				return nil
			})
			if err != nil {
				return err
			}
			if !old {
				add(recs, blocks)
			}
		}
		return nil
	})
	return dead, complete, err
}

// goneForGood tells whether an inode whose topmost record is rec is gone
// from every stack above: no links, and a name once (only an O_TMPFILE
// never named can be linked again).
func goneForGood(rec *Inode) bool {
	return rec.Nlink == 0 && (rec.HasParent || rec.HasOrigin)
}

// pastFloor tells whether a Floor above cuts block blk off.
func pastFloor(floor map[uint64]int64, ino, blk uint64, bs int64) bool {
	f, ok := floor[ino]
	return ok && int64(blk) >= (f+bs-1)/bs
}

// layerInodes reads the inode records of a layer.
func layerInodes(txn dbTxn, layer string) (map[uint64]*Inode, error) {
	recs := map[uint64]*Inode{}
	prefix := prefixLayerTable(tInode, layer)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(prefix)+8 {
			return nil, fmt.Errorf("inode key %q: %w", k, ErrCorrupt)
		}
		ino := beUint64(k[len(prefix):])
		rec, err := decodeItem(it.Item(), decodeInode)
		if err != nil {
			return nil, fmt.Errorf("inode %d in layer %s: %w", ino, layer, err)
		}
		recs[ino] = rec
	}
	return recs, nil
}

// layerBlocks lists the blocks a layer records, calling fn (when not nil)
// with each record.
func layerBlocks(txn dbTxn, layer string, fn func(bk [16]byte, ino, blk uint64, item *badger.Item) error) ([][16]byte, error) {
	var out [][16]byte
	prefix := prefixLayerTable(tBlock, layer)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: fn != nil})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(prefix)+17 || k[len(prefix)+8] != '/' {
			return nil, fmt.Errorf("block key %q: %w", k, ErrCorrupt)
		}
		var bk [16]byte
		copy(bk[:8], k[len(prefix):])
		copy(bk[8:], k[len(prefix)+9:])
		if fn != nil {
			if err := fn(bk, beUint64(bk[:8]), beUint64(bk[8:]), it.Item()); err != nil {
				return nil, err
			}
		}
		out = append(out, bk)
	}
	return out, nil
}

// keptSlots lists the slots of layer whose content records above keep
// there (dedup.go).
func keptSlots(txn dbTxn, layer string) (map[uint64]bool, error) {
	kept := map[uint64]bool{}
	prefix := prefixLayerTable(tKept, layer)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(prefix)+8 {
			return nil, fmt.Errorf("kept slot key %q: %w", k, ErrCorrupt)
		}
		kept[beUint64(k[len(prefix):])] = true
	}
	return kept, nil
}

// commitDead drops the records of dead, with the punches of the slots
// they leave, in transactions of up to dedupBatch records. A record that
// changed since it was read is left as it is.
func (s *Store) commitDead(dead []deadBlock) (int, error) {
	n := 0
	err := inBatches(dead, func(batch []deadBlock) error {
		done := 0
		err := s.update(func(txn *badger.Txn) error {
			done = 0
			for _, d := range batch {
				key := keyBlock(d.layer, d.ino, d.blk)
				item, err := txn.Get(key)
				if errors.Is(err, badger.ErrKeyNotFound) {
					continue
				}
				if err != nil {
					return err
				}
				now, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				if !bytes.Equal(now, d.raw) {
					continue
				}
				if err := txn.Delete(key); err != nil {
					return err
				}
				if err := txn.Delete(keyHash(d.layer, d.ino, d.blk)); err != nil {
					return err
				}
				if d.punch {
					v := binary.AppendUvarint(nil, d.ref.Slot)
					v = binary.AppendUvarint(v, uint64(d.ref.capPages()))
					if err := txn.Set(keyPunch(d.layer, d.ino, d.blk), v); err != nil {
						return err
					}
				}
				done++
			}
			return nil
		})
		if err == nil {
			n += done
		}
		return err
	})
	return n, err
}

// ignoreNotFound is err unless it says the key was not found.
func ignoreNotFound(err error) error {
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil
	}
	return err
}
