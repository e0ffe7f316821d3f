package layers

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Txn is one metadata transaction handed to Store.Update and Store.View. It
// gives the packages above layers a place for their own tables (keys under
// "x/") in the same transaction that moves a sandbox's head, which is what
// makes a rollback atomic.
type Txn struct {
	txn dbTxn
	s   *Store
	// deltas are the layer deltas known in this transaction: those of the
	// layer it freezes or the layers it archives, kept by the store once
	// it commits.
	deltas map[string]*LayerDelta
	// pending is the layer whose journal this transaction commits along
	// with its own records (a freeze or repoint of a live view): the
	// store outside the transaction does not hold them yet, so reading
	// that layer from it fails with errNeedsJournal, and the caller
	// commits the journal first and runs again.
	pending string
}

// bind makes t write into txn, which holds layer's journal, not yet
// committed, when journal is true (pending).
func (t *Txn) bind(txn dbTxn, journal bool, layer string) {
	t.txn, t.pending = txn, ""
	if journal {
		t.pending = layer
	}
}

// errNeedsJournal is what a read of the pending layer's committed state
// returns inside a transaction that holds its journal (Txn.pending).
var errNeedsJournal = errors.New("the layer's journal is not committed yet")

// outside fails when reading layer from the store, outside the
// transaction, would miss the journal the transaction holds.
func (t *Txn) outside(layer string) error {
	if t.pending != "" && layer == t.pending {
		return fmt.Errorf("layer %s: %w", layer, errNeedsJournal)
	}
	return nil
}

// OpenSnapshot is Store.OpenSnapshot from inside a transaction.
func (t *Txn) OpenSnapshot(name, layer string) (*View, error) {
	if err := t.outside(layer); err != nil {
		return nil, err
	}
	return t.s.OpenSnapshot(name, layer)
}

func checkExtKey(key string) error {
	if !strings.HasPrefix(key, "x/") {
		return fmt.Errorf("key %q outside the x/ tables: %w", key, ErrInvalid)
	}
	return nil
}

// Get returns the value stored under key, or ErrNotFound.
func (t *Txn) Get(key string) ([]byte, error) {
	if err := checkExtKey(key); err != nil {
		return nil, err
	}
	if err := t.fault("get", key); err != nil {
		return nil, err
	}
	item, err := t.txn.Get([]byte(key))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return item.ValueCopy(nil)
}

// Set stores val under key.
func (t *Txn) Set(key string, val []byte) error {
	if err := checkExtKey(key); err != nil {
		return err
	}
	if err := t.fault("set", key); err != nil {
		return err
	}
	return t.txn.Set([]byte(key), val)
}

// Delete removes key; deleting a missing key is not an error.
func (t *Txn) Delete(key string) error {
	if err := checkExtKey(key); err != nil {
		return err
	}
	if err := t.fault("delete", key); err != nil {
		return err
	}
	return t.txn.Delete([]byte(key))
}

// Scan calls fn for every key under prefix, in key order, with a copy of
// its value. fn's error stops the scan and is returned.
func (t *Txn) Scan(prefix string, fn func(key string, val []byte) error) error {
	if err := checkExtKey(prefix); err != nil {
		return err
	}
	if err := t.fault("scan", prefix); err != nil {
		return err
	}
	it := t.txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix), PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return err
		}
		if err := fn(string(it.Item().Key()), v); err != nil {
			return err
		}
	}
	return nil
}

// NoteBaseChanged records, on every sandbox over host directory base, that
// something wrote onto it at time at (a plan apply): the states those
// sandboxes recorded before lie over base content that is gone.
func (t *Txn) NoteBaseChanged(base string, at time.Time) error {
	all, err := sandboxesIn(t.txn)
	if err != nil {
		return err
	}
	for _, info := range all {
		if filepath.Clean(info.Base) != filepath.Clean(base) {
			continue
		}
		info.BaseChanged = at.UTC()
		if err := putJSON(t.txn, keySandbox(info.Name), info); err != nil {
			return err
		}
	}
	return nil
}

// dbTxn is what the store's record helpers use of a badger transaction.
// A *badger.Txn is one; a recordingTxn in its place also keeps every
// write, which a checkpoint or rollback through the intent log writes
// there (quiesceLogged).
type dbTxn interface {
	Get(key []byte) (*badger.Item, error)
	Set(key, val []byte) error
	Delete(key []byte) error
	NewIterator(opt badger.IteratorOptions) *badger.Iterator
}

// recordingTxn is a badger transaction that keeps a copy of each write.
type recordingTxn struct {
	*badger.Txn
	writes []kv
}

// Set stores val under key and records it.
func (r *recordingTxn) Set(key, val []byte) error {
	if err := r.Txn.Set(key, val); err != nil {
		return err
	}
	r.writes = append(r.writes, kv{key: bytes.Clone(key), val: bytes.Clone(val)})
	return nil
}

// Delete removes key and records it.
func (r *recordingTxn) Delete(key []byte) error {
	if err := r.Txn.Delete(key); err != nil {
		return err
	}
	r.writes = append(r.writes, kv{key: bytes.Clone(key), del: true})
	return nil
}
