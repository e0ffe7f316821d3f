package layers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/dgraph-io/badger/v4"
)

// Pins say which layers the packages above layers still need: a checkpoint
// pins its layer, an archive the top of the state it holds. A layer lives
// while a sandbox's stack or a pinned layer's stack contains it; GC removes
// the rest.
//
//	p/<layer>/<owner>
const tPin = 'p'

func keyPin(layer, owner string) []byte {
	return []byte(string(tPin) + "/" + layer + "/" + owner)
}

// Pin records that owner needs layer (and so every layer below it).
func (t *Txn) Pin(layer, owner string) error {
	if err := t.fault("pin", layer); err != nil {
		return err
	}
	if _, err := t.Layer(layer); err != nil {
		return err
	}
	return t.txn.Set(keyPin(layer, owner), nil)
}

// Unpin drops owner's pin of layer.
func (t *Txn) Unpin(layer, owner string) error {
	if err := t.fault("unpin", layer); err != nil {
		return err
	}
	return t.txn.Delete(keyPin(layer, owner))
}

// GCResult says what a collection removed.
type GCResult struct {
	Layers     []string `json:"layers"`
	DataFiles  int      `json:"data_files"`
	BytesFreed int64    `json:"bytes_freed"`
	// HiddenBlocks is how many block records of layers no pin names the
	// collection dropped because every stack above hides them
	// (hidden.go); their slots are in BytesFreed.
	HiddenBlocks int `json:"hidden_blocks"`
	// Dedup is what a dedup pass after the collection did, when one ran
	// (CollectGarbageDedup).
	Dedup *DedupResult `json:"dedup,omitempty"`
}

// CollectGarbageDedup collects garbage, then runs a dedup pass (Dedup) over
// what is left.
func (s *Store) CollectGarbageDedup() (GCResult, error) {
	res, err := s.CollectGarbage()
	if err != nil {
		return res, err
	}
	d, err := s.Dedup()
	res.Dedup = &d
	return res, err
}

// stackRoots lists the tops of every stack GC keeps: the sandboxes' heads
// and the pinned layers.
func stackRoots(txn dbTxn) ([]string, error) {
	roots, _, err := stackRootsAndSandboxes(txn)
	return roots, err
}

// stackRootsAndSandboxes is stackRoots with the sandboxes' records.
func stackRootsAndSandboxes(txn dbTxn) ([]string, []SandboxInfo, error) {
	var roots []string
	var sbs []SandboxInfo
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tSandbox, '/'}, PrefetchValues: true})
	for it.Rewind(); it.Valid(); it.Next() {
		var info SandboxInfo
		if err := it.Item().Value(func(b []byte) error { return jsonUnmarshal(b, &info) }); err != nil {
			it.Close()
			return nil, nil, err
		}
		roots = append(roots, info.Head)
		sbs = append(sbs, info)
	}
	it.Close()
	it = txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tPin, '/'}})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		rest := it.Item().Key()[2:]
		if i := bytes.IndexByte(rest, '/'); i > 0 {
			roots = append(roots, string(rest[:i]))
		}
	}
	sort.Strings(roots)
	return slices.Compact(roots), sbs, nil
}

// layerTree reads every layer record, keyed by id: the tree collections
// walk, read once instead of a chain per root (a sandbox with a hundred
// kept checkpoints 1,000 layers deep has 100,000 links in its chains).
//
// A record that does not decode is there with only its id, and liveTree
// fails when a stack needs it; otherwise it is a layer no stack contains,
// as before.
func layerTree(txn dbTxn) (map[string]LayerInfo, error) {
	all := map[string]LayerInfo{}
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tLayer, '/'}, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		id := string(it.Item().Key()[2:])
		var l LayerInfo
		err := it.Item().Value(func(b []byte) error { return jsonUnmarshal(b, &l) })
		if errors.Is(err, ErrCorrupt) {
			all[id] = LayerInfo{ID: id, State: badLayer}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", id, err)
		}
		all[id] = l
	}
	return all, nil
}

// badLayer marks, in layerTree, a layer whose record does not decode.
const badLayer = "\x00bad"

// liveTree lists the layers of the stacks topped by roots and, for each,
// its children in those stacks. A missing layer or a parent cycle fails
// it: a collection must not guess.
func liveTree(all map[string]LayerInfo, roots []string) (live map[string]bool, children map[string]map[string]bool, err error) {
	live = map[string]bool{}
	children = map[string]map[string]bool{}
	walk := map[string]int{} // the walk that marked each layer
	for w, r := range roots {
		for id, child := r, ""; id != ""; id, child = all[id].Parent, id {
			if l, ok := all[id]; !ok {
				return nil, nil, fmt.Errorf("layer %s: %w", id, ErrNotFound)
			} else if l.State == badLayer {
				return nil, nil, fmt.Errorf("layer %s: record does not decode: %w", id, ErrCorrupt)
			}
			if child != "" {
				if children[id] == nil {
					children[id] = map[string]bool{}
				}
				children[id][child] = true
			}
			if live[id] {
				if walk[id] == w {
					return nil, nil, fmt.Errorf("layer %s: parent cycle: %w", id, ErrCorrupt)
				}
				break // the rest of the chain is marked
			}
			live[id], walk[id] = true, w
		}
	}
	return live, children, nil
}

// CollectGarbage removes every layer that no sandbox stack and no pinned
// stack contains, and data files that belong to no layer (CollectLayers),
// then the blocks of the layers no pin names that every stack above them
// hides (CollectHidden).
func (s *Store) CollectGarbage() (GCResult, error) {
	res, err := s.CollectLayers()
	if err != nil {
		return res, err
	}
	h, err := s.CollectHidden()
	res.HiddenBlocks, res.BytesFreed = h.HiddenBlocks, res.BytesFreed+h.BytesFreed
	return res, err
}

// CollectHidden drops the block records of the layers no pin names that
// every stack above them hides, and gives their slots back (hidden.go).
// It needs no lock of the callers that move heads: what it drops stays
// hidden whatever they do meanwhile, so a server runs it after letting go
// of its own lock, and a long pass holds up no checkpoint or rollback.
func (s *Store) CollectHidden() (GCResult, error) {
	n, freed, err := s.reclaimShadowed()
	res := GCResult{Layers: []string{}, HiddenBlocks: n, BytesFreed: freed}
	if err != nil {
		return res, fmt.Errorf("gc: hidden blocks: %w", err)
	}
	return res, nil
}

// CollectLayers removes every layer that no sandbox stack and no pinned
// stack contains, and data files that belong to no layer. The layer
// records go in one transaction, which also marks each layer as being
// dropped; its tables (in batches, which a crash can interrupt) and its
// data file go after it, and the mark last. So a crash in between leaves
// marked layers, whose drop the next collection finishes, and fsck knows
// their keys for what they are, not for orphans.
func (s *Store) CollectLayers() (GCResult, error) {
	var res GCResult
	var doomed []string
	err := s.update(func(txn *badger.Txn) error {
		doomed = doomed[:0] // update runs this again after a conflict
		// Drops a crash interrupted come first.
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tDrop, '/'}})
		for it.Rewind(); it.Valid(); it.Next() {
			doomed = append(doomed, string(it.Item().Key()[2:]))
		}
		it.Close()
		pending := len(doomed)
		roots, err := stackRoots(txn)
		if err != nil {
			return err
		}
		all, err := layerTree(txn)
		if err != nil {
			return err
		}
		live, _, err := liveTree(all, roots)
		if err != nil {
			return err
		}
		for id := range all {
			if !live[id] {
				doomed = append(doomed, id)
			}
		}
		sort.Strings(doomed[pending:])
		for _, id := range doomed[pending:] {
			if err := txn.Delete(keyLayer(id)); err != nil {
				return err
			}
			if err := txn.Set(keyDrop(id), nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("gc: %w", err)
	}
	for _, id := range doomed {
		if fi, err := os.Stat(s.dataPath(id)); err == nil {
			res.BytesFreed += fi.Size()
		}
		if err := s.dropLayerData(id); err != nil {
			return res, fmt.Errorf("gc: layer %s: %w", id, err)
		}
		res.Layers = append(res.Layers, id)
	}
	// Data files whose layer record is gone (a crash after the commit above).
	ents, err := os.ReadDir(filepath.Join(s.dir, "data"))
	if err != nil {
		return res, fmt.Errorf("gc: %w", err)
	}
	for _, e := range ents {
		if _, err := s.Layer(e.Name()); errors.Is(err, ErrNotFound) {
			if fi, err := e.Info(); err == nil {
				res.BytesFreed += fi.Size()
			}
			if err := s.dropLayerData(e.Name()); err != nil {
				return res, fmt.Errorf("gc: %w", err)
			}
			res.DataFiles++
		}
	}
	return res, nil
}
