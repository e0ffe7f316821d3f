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
func stackRoots(txn *badger.Txn) ([]string, error) {
	var roots []string
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tSandbox, '/'}, PrefetchValues: true})
	for it.Rewind(); it.Valid(); it.Next() {
		var info SandboxInfo
		if err := it.Item().Value(func(b []byte) error { return jsonUnmarshal(b, &info) }); err != nil {
			it.Close()
			return nil, err
		}
		roots = append(roots, info.Head)
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
	return slices.Compact(roots), nil
}

// CollectGarbage removes every layer that no sandbox stack and no pinned
// stack contains, and data files that belong to no layer. The layer
// records go in one transaction, which also marks each layer as being
// dropped; its tables (in batches, which a crash can interrupt) and its
// data file go after it, and the mark last. So a crash in between leaves
// marked layers, whose drop the next collection finishes, and fsck knows
// their keys for what they are, not for orphans.
func (s *Store) CollectGarbage() (GCResult, error) {
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
		live := map[string]bool{}
		roots, err := stackRoots(txn)
		if err != nil {
			return err
		}
		for _, r := range roots {
			chain, err := chainOf(txn, r)
			if err != nil {
				return err
			}
			for _, id := range chain {
				live[id] = true
			}
		}
		it = txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tLayer, '/'}})
		for it.Rewind(); it.Valid(); it.Next() {
			id := string(it.Item().Key()[2:])
			if !live[id] {
				doomed = append(doomed, id)
			}
		}
		it.Close()
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
