package layers

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// Content addressing of sealed blocks.
//
// A layer writes its blocks into its own data file, so the same content
// written in two steps of an agent (a file restored by hand, a build
// output made again, a copy) is stored once per layer. Dedup names every
// block of the frozen layers by a SHA-256 of its slot and stores each
// content once per stack: a block whose content a layer below it (or an
// earlier block of its own layer) already holds, in a slot of the same
// size, gets a record naming that layer and slot (blockRef.Home), and its
// own slot is punched out of its data file.
//
// Only references downwards are made, so nothing needs counting: a layer
// lives while any stack contains it, and every stack that contains a
// layer contains the layers below it; frozen layers never change their
// blocks. Contents are compared byte for byte before a record moves, so a
// hash collision can only cost a missed dedup. The slots to punch are
// recorded in the transaction that moves the records
// (u/<layer>/<ino><blk> -> the old slot) and punched once that is
// durable and every open view (mounts and snapshots) has been pointed at
// the new slots, under its I/O lock, so that no reader still uses the
// old one; a crash in between leaves them for the next pass.
//
//	u/<layer>/<ino be64><blk be64> -> uvarint slot, uvarint pages
//
// A layer a pass went through keeps the names of its blocks that stay in
// their slots, and a mark, so that later passes read only the layers
// frozen since (its blocks were checked against the layers below it,
// which do not change):
//
//	h/<layer>/<ino be64><blk be64> -> the block's SHA-256
//	H/<layer>/ -> nothing: the layer has been gone through
//
// The slots records keep their content in are listed by their layer, in
// the transaction that moves the records, so that a pass knows them
// without reading every record (a key left by a record since dropped
// only keeps that slot where it is):
//
//	r/<layer>/<slot be64> -> nothing
const (
	tPunch  = 'u'
	tHash   = 'h'
	tHashed = 'H'
	tKept   = 'r'
)

func keyKept(layer string, slot uint64) []byte {
	return binary.BigEndian.AppendUint64(prefixLayerTable(tKept, layer), slot)
}

func keyHash(layer string, ino, blk uint64) []byte {
	k := binary.BigEndian.AppendUint64(prefixLayerTable(tHash, layer), ino)
	return binary.BigEndian.AppendUint64(k, blk)
}

func keyPunch(layer string, ino, blk uint64) []byte {
	k := binary.BigEndian.AppendUint64(prefixLayerTable(tPunch, layer), ino)
	return binary.BigEndian.AppendUint64(k, blk)
}

// dedupHash names a block's content; tests replace it to make contents
// collide.
var dedupHash = func(b []byte) [32]byte { return sha256.Sum256(b) }

// DedupResult says what a dedup pass did.
type DedupResult struct {
	// Blocks is how many block records now share a slot with the same
	// content.
	Blocks int `json:"blocks"`
	// BytesFreed is the size of the slots given back to the file system.
	BytesFreed int64 `json:"bytes_freed"`
}

// contentKey is what two interchangeable blocks share: their content and
// the size of their slots.
type contentKey struct {
	sum   [32]byte
	pages int
}

// slotLoc is a block's slot: the layer whose data file holds it.
type slotLoc struct {
	layer string
	slot  uint64
}

// canonical is the block a content is kept in.
type canonical struct {
	slotLoc
	ref blockRef
	sum [32]byte
}

// blockMove is one record dedup moved: the block of ino at blk in layer,
// from the slot old to ref's.
type blockMove struct {
	layer    string
	ino, blk uint64
	old      blockRef
	ref      blockRef
}

// Dedup stores each content of the frozen layers' blocks once per stack
// (see above). It reads the data of the frozen layers no pass went through
// yet, so it is for an explicit pass
// (`strata gc --dedup`), not for every checkpoint. It finishes the punches
// a crash interrupted first.
func (s *Store) Dedup() (DedupResult, error) {
	s.dedupMu.Lock()
	defer s.dedupMu.Unlock()
	var res DedupResult
	if err := s.syncLazyViews(); err != nil {
		return res, fmt.Errorf("dedup: %w", err)
	}
	left, err := s.finishPunches()
	res.BytesFreed = left
	if err != nil {
		return res, fmt.Errorf("dedup: %w", err)
	}
	chains, states, referenced, err := s.dedupPlan()
	if err != nil {
		return res, fmt.Errorf("dedup: %w", err)
	}
	d := &deduper{s: s, states: states, referenced: referenced, canon: map[string][]canonical{}, files: map[string]*os.File{}}
	defer d.close()
	for _, chain := range chains {
		index := map[contentKey]canonical{}
		for i := len(chain) - 1; i >= 0; i-- {
			if err := d.layer(chain[i], index); err != nil {
				return res, fmt.Errorf("dedup: layer %s: %w", chain[i], err)
			}
		}
	}
	if d.moved == 0 {
		return res, nil
	}
	freed, err := s.finishPunches()
	res.Blocks, res.BytesFreed = d.moved, res.BytesFreed+freed
	if err != nil {
		return res, fmt.Errorf("dedup: %w", err)
	}
	return res, nil
}

// dedupPlan reads the stacks to go through (each top first), the state
// of each layer in them, and the slots some record names as its Home
// (which stay where they are).
func (s *Store) dedupPlan() (chains [][]string, states map[string]string, referenced map[slotLoc]bool, err error) {
	states = map[string]string{}
	referenced = map[slotLoc]bool{}
	err = s.view(func(txn *badger.Txn) error {
		roots, err := stackRoots(txn)
		if err != nil {
			return err
		}
		for _, r := range roots {
			infos, err := chainInfos(txn, r)
			if err != nil {
				return err
			}
			chains = append(chains, layerIDs(infos))
			for _, l := range infos {
				states[l.ID] = l.State
			}
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tKept, '/'}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			rest := it.Item().Key()[2:]
			if len(rest) != 26+1+8 || rest[26] != '/' {
				return fmt.Errorf("kept slot key %q: %w", it.Item().Key(), ErrCorrupt)
			}
			referenced[slotLoc{string(rest[:26]), beUint64(rest[27:])}] = true
		}
		return nil
	})
	return chains, states, referenced, err
}

// deduper is one pass.
type deduper struct {
	s          *Store
	states     map[string]string
	referenced map[slotLoc]bool
	// canon lists, for each layer gone through, the blocks that keep
	// their content, so that a layer shared by several stacks is read
	// once.
	canon map[string][]canonical
	files map[string]*os.File
	moved int
}

func (d *deduper) close() {
	for _, f := range d.files {
		f.Close()
	}
}

func (d *deduper) file(layer string) (*os.File, error) {
	if f, ok := d.files[layer]; ok {
		return f, nil
	}
	f, err := os.Open(d.s.dataPath(layer))
	if err != nil {
		return nil, err
	}
	d.files[layer] = f
	return f, nil
}

// dedupReadHook, when a test sets it, is told of every slot a pass reads.
var dedupReadHook func(layer string, slot uint64)

// read reads the slot of ref in layer's data file into buf.
func (d *deduper) read(layer string, ref blockRef, buf []byte) ([]byte, error) {
	if dedupReadHook != nil {
		dedupReadHook(layer, ref.Slot)
	}
	f, err := d.file(layer)
	if err != nil {
		return nil, err
	}
	b := buf[:ref.capBytes()]
	if err := readFull(f, b, ref.off()); err != nil {
		return nil, err
	}
	return b, nil
}

// layer adds the blocks of layer that keep their content to index, and
// moves those whose content index already holds.
func (d *deduper) layer(id string, index map[contentKey]canonical) error {
	if d.states[id] == StateActive {
		return nil // still written: its blocks are not sealed for good
	}
	if kept, ok := d.canon[id]; ok {
		for _, c := range kept {
			index[contentKey{c.sum, c.ref.capPages()}] = c
		}
		return nil
	}
	type rec struct {
		ino, blk uint64
		ref      blockRef
	}
	var recs []rec
	// The names a pass before kept (hashed: it went through the layer).
	hashed := false
	sums := map[[16]byte][32]byte{}
	err := d.s.view(func(txn *badger.Txn) error {
		prefix := prefixLayerTable(tBlock, id)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != len(prefix)+17 {
				return fmt.Errorf("block key %q: %w", k, ErrCorrupt)
			}
			ref, err := decodeItem(it.Item(), decodeBlockRef)
			if err != nil {
				return err
			}
			recs = append(recs, rec{beUint64(k[len(prefix):]), beUint64(k[len(prefix)+9:]), ref})
		}
		if _, err := txn.Get(prefixLayerTable(tHashed, id)); err != nil {
			return nil
		}
		hashed = true
		prefix = prefixLayerTable(tHash, id)
		hit := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer hit.Close()
		for hit.Rewind(); hit.Valid(); hit.Next() {
			k := hit.Item().Key()
			if len(k) != len(prefix)+16 || hit.Item().ValueSize() != 32 {
				return fmt.Errorf("block name %q: %w", k, ErrCorrupt)
			}
			var bk [16]byte
			var sum [32]byte
			copy(bk[:], k[len(prefix):])
			if _, err := hit.Item().ValueCopy(sum[:0]); err != nil {
				return err
			}
			sums[bk] = sum
		}
		return nil
	})
	if err != nil {
		return err
	}
	var kept []canonical
	var moves []blockMove
	stay := map[[16]byte][32]byte{}
	var ours, theirs []byte
	for _, r := range recs {
		if r.ref.Home != "" {
			continue // its content is kept elsewhere
		}
		var bk [16]byte
		binary.BigEndian.PutUint64(bk[:], r.ino)
		binary.BigEndian.PutUint64(bk[8:], r.blk)
		if ours == nil || int64(cap(ours)) < r.ref.capBytes() {
			ours, theirs = make([]byte, r.ref.capBytes()), make([]byte, r.ref.capBytes())
		}
		sum, known := sums[bk]
		var b []byte
		if !known {
			if b, err = d.read(id, r.ref, ours); err != nil {
				return err
			}
			sum = dedupHash(b)
		}
		key := contentKey{sum, r.ref.capPages()}
		c, ok := index[key]
		// A layer gone through before was checked against the same layers
		// below: what could move, moved then.
		if ok && !hashed && !d.referenced[slotLoc{id, r.ref.Slot}] {
			t, err := d.read(c.layer, c.ref, theirs)
			if err != nil {
				return err
			}
			if bytes.Equal(b, t) && slices.Equal(r.ref.CRCs, c.ref.CRCs) {
				nref := r.ref
				nref.Slot, nref.Pages, nref.Home = c.ref.Slot, c.ref.Pages, c.layer
				moves = append(moves, blockMove{layer: id, ino: r.ino, blk: r.blk, old: r.ref, ref: nref})
				continue
			}
		}
		stay[bk] = sum
		if !ok {
			c := canonical{slotLoc{id, r.ref.Slot}, r.ref, key.sum}
			index[key] = c
			kept = append(kept, c)
		}
	}
	if err := d.s.commitMoves(moves); err != nil {
		return err
	}
	d.moved += len(moves)
	if !hashed {
		if err := d.s.keepNames(id, stay); err != nil {
			return err
		}
	}
	d.canon[id] = kept
	return nil
}

// keepNames stores the names of layer's blocks that stay in their slots,
// then the mark that the layer has been gone through.
func (s *Store) keepNames(layer string, stay map[[16]byte][32]byte) error {
	keys := make([][16]byte, 0, len(stay))
	for bk := range stay {
		keys = append(keys, bk)
	}
	err := inBatches(keys, func(batch [][16]byte) error {
		return s.update(func(txn *badger.Txn) error {
			for _, bk := range batch {
				sum := stay[bk]
				if err := txn.Set(keyHash(layer, beUint64(bk[:]), beUint64(bk[8:])), sum[:]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	return s.update(func(txn *badger.Txn) error { return txn.Set(prefixLayerTable(tHashed, layer), nil) })
}

// commitMoves moves the records of moves, each with its punch to come, in
// transactions of up to dedupBatch records. A record that changed since
// it was read (it cannot, short of another pass) is left as it is.
func (s *Store) commitMoves(moves []blockMove) error {
	return inBatches(moves, func(batch []blockMove) error {
		return s.update(func(txn *badger.Txn) error {
			for _, m := range batch {
				key := keyBlock(m.layer, m.ino, m.blk)
				item, err := txn.Get(key)
				if err != nil {
					if errors.Is(err, badger.ErrKeyNotFound) {
						continue
					}
					return err
				}
				now, err := decodeItem(item, decodeBlockRef)
				if err != nil {
					return err
				}
				if !bytes.Equal(encodeBlockRef(now), encodeBlockRef(m.old)) {
					continue
				}
				if err := txn.Set(key, encodeBlockRef(m.ref)); err != nil {
					return err
				}
				v := binary.AppendUvarint(nil, m.old.Slot)
				v = binary.AppendUvarint(v, uint64(m.old.capPages()))
				if err := txn.Set(keyPunch(m.layer, m.ino, m.blk), v); err != nil {
					return err
				}
				if err := txn.Set(keyKept(m.ref.Home, m.ref.Slot), nil); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// inBatches calls fn with items in runs of up to dedupBatch.
func inBatches[T any](items []T, fn func(batch []T) error) error {
	for len(items) > 0 {
		n := min(len(items), dedupBatch)
		if err := fn(items[:n]); err != nil {
			return err
		}
		items = items[n:]
	}
	return nil
}

// dedupBatch is how many records one transaction of a pass moves.
var dedupBatch = 1000

// punchHook, when a test sets it, is called before each slot a pass
// punches; an error it returns is that punch's.
var punchHook func(layer string, slot, pages uint64) error

// finishPunches punches the slots moved records left, once the moves are
// durable and no open view reads them any more, and returns the bytes
// given back.
func (s *Store) finishPunches() (int64, error) {
	type pending struct {
		m   blockMove // m.old.Slot: the slot to punch
		n   uint64    // its pages
		key []byte
		// moved: the record names its slot's new home (a dedup move);
		// dropped: it is gone (hidden.go). Either way the old slot
		// goes; otherwise the punch record is stale and only it goes.
		moved, dropped bool
	}
	var todo []pending
	err := s.view(func(txn *badger.Txn) error {
		prefix := []byte{tPunch, '/'}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			rest := k[2:]
			if len(rest) != 26+1+16 || rest[26] != '/' {
				return fmt.Errorf("punch key %q: %w", k, ErrCorrupt)
			}
			p := pending{key: k}
			p.m.layer, p.m.ino, p.m.blk = string(rest[:26]), beUint64(rest[27:]), beUint64(rest[35:])
			val, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			dec := decoder{b: val}
			p.m.old.Slot, p.n = dec.uvarint(), dec.uvarint()
			if dec.err != nil || len(dec.b) != 0 || p.n == 0 || p.n > maxSlotPages {
				return fmt.Errorf("punch key %q: %w", k, ErrCorrupt)
			}
			item, err := txn.Get(keyBlock(p.m.layer, p.m.ino, p.m.blk))
			switch {
			case err == nil:
				if p.m.ref, err = decodeItem(item, decodeBlockRef); err != nil {
					return err
				}
				p.moved = p.m.ref.Home != ""
			case errors.Is(err, badger.ErrKeyNotFound):
				p.dropped = true
			default:
				return err
			}
			todo = append(todo, p)
		}
		return nil
	})
	if err != nil || len(todo) == 0 {
		return 0, err
	}
	// The moves are durable before their old slots go.
	if err := s.Sync(); err != nil {
		return 0, err
	}
	moves := make([]blockMove, 0, len(todo))
	dropped := map[slotLoc]bool{}
	for _, p := range todo {
		if p.moved {
			moves = append(moves, p.m)
		}
		if p.dropped {
			dropped[slotLoc{p.m.layer, p.m.old.Slot}] = true
		}
	}
	// A slot whose record was dropped is read by no view: every stack
	// above hides it, and files open views hold are left alone. Should
	// a view still have it in its block map, it stays, and so does its
	// punch record.
	inUse := map[slotLoc]bool{}
	for _, v := range s.openViews() {
		v.redirectCached(moves)
		v.slotsInUse(dropped, inUse)
	}
	// Adjacent slots of a layer go in one punch: a file written again
	// whole left them side by side, and a punch is a journaled change of
	// the data file's extents.
	var spans []punchSpan
	for _, p := range todo {
		if p.moved || p.dropped && !inUse[slotLoc{p.m.layer, p.m.old.Slot}] {
			spans = append(spans, punchSpan{p.m.layer, p.m.old.Slot, p.n})
		}
	}
	freed, err := s.punchSpans(spans)
	if err != nil {
		return freed, err
	}
	done := todo[:0]
	for _, p := range todo {
		if !p.dropped || !inUse[slotLoc{p.m.layer, p.m.old.Slot}] {
			done = append(done, p)
		}
	}
	err = inBatches(done, func(batch []pending) error {
		return s.update(func(txn *badger.Txn) error {
			for _, p := range batch {
				if err := txn.Delete(p.key); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return freed, err
}

// maxSlotPages bounds a slot's pages in a punch record.
const maxSlotPages = 1<<32 - 1

// openViews lists the views open on this store: mounts and snapshots.
func (s *Store) openViews() []*View {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*View, 0, len(s.views)+len(s.snaps))
	for _, v := range s.views {
		out = append(out, v)
	}
	for v := range s.snaps {
		out = append(out, v)
	}
	return out
}

// redirectCached points the block maps v keeps at the slots dedup moved
// blocks to, under the I/O lock: a reader holds it from resolving a slot
// until it has read it, so once this returns none uses an old slot.
func (v *View) redirectCached(moves []blockMove) {
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, m := range moves {
		for _, st := range []*inodeState{v.inodes[m.ino], v.zombies[m.ino]} {
			if st == nil {
				continue
			}
			if fr, ok := st.frozen[m.blk]; ok && fr.layer == m.layer && fr.ref.Home == "" && fr.ref.Slot == m.old.Slot {
				st.frozen[m.blk] = frozenRef{layer: m.ref.dataLayer(m.layer), ref: m.ref}
			}
			// A snapshot's top layer is frozen, but its view keeps it as
			// the one it would write.
			if ref, ok := st.active[m.blk]; ok && v.snapshot && len(v.stack) > 0 && v.stack[0] == m.layer && ref.Home == "" && ref.Slot == m.old.Slot {
				r := m.ref
				st.active[m.blk] = &r
			}
		}
	}
}

// slotsInUse adds to inUse the slots of dropped that v's block maps still
// name.
func (v *View) slotsInUse(dropped, inUse map[slotLoc]bool) {
	if len(dropped) == 0 {
		return
	}
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, m := range []map[uint64]*inodeState{v.inodes, v.zombies, v.tmps} {
		for _, st := range m {
			for _, fr := range st.frozen {
				if l := (slotLoc{fr.layer, fr.ref.Slot}); dropped[l] {
					inUse[l] = true
				}
			}
			if v.snapshot && len(v.stack) > 0 {
				for _, ref := range st.active {
					if l := (slotLoc{ref.dataLayer(v.stack[0]), ref.Slot}); dropped[l] {
						inUse[l] = true
					}
				}
			}
		}
	}
}

// punchSpan is pages pages of a layer's data file from slot on.
type punchSpan struct {
	layer       string
	slot, pages uint64
}

// punchSpans punches spans out of their layers' data files, joining
// adjacent ones, and returns the bytes given back. A layer whose data file
// is gone (dropped) is skipped.
func (s *Store) punchSpans(spans []punchSpan) (int64, error) {
	slices.SortFunc(spans, func(a, b punchSpan) int {
		if a.layer != b.layer {
			return strings.Compare(a.layer, b.layer)
		}
		return cmp.Compare(a.slot, b.slot)
	})
	var joined []punchSpan
	for _, sp := range spans {
		if n := len(joined); n > 0 && joined[n-1].layer == sp.layer && joined[n-1].slot+joined[n-1].pages >= sp.slot {
			joined[n-1].pages = max(joined[n-1].pages, sp.slot+sp.pages-joined[n-1].slot)
			continue
		}
		joined = append(joined, sp)
	}
	var freed int64
	var f *os.File
	layer := ""
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for _, sp := range joined {
		if sp.layer != layer || layer == "" {
			if f != nil {
				f.Close()
			}
			layer = sp.layer
			var err error
			f, err = os.OpenFile(s.dataPath(sp.layer), os.O_RDWR, 0)
			if err != nil {
				f = nil // nil: the layer is gone with its file
				if !errors.Is(err, os.ErrNotExist) {
					return freed, err
				}
			}
		}
		if f == nil {
			continue
		}
		if punchHook != nil {
			if err := punchHook(sp.layer, sp.slot, sp.pages); err != nil {
				return freed, err
			}
		}
		if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(sp.slot)*pageSize, int64(sp.pages)*pageSize); err != nil {
			return freed, fmt.Errorf("punch layer %s: %w", sp.layer, err)
		}
		freed += int64(sp.pages) * pageSize
	}
	return freed, nil
}
