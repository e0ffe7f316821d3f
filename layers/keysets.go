package layers

import (
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// keySet is the inodes whose records, and the directories whose entries, a
// frozen layer holds: what a lookup in a deep stack needs to skip the
// layer without asking the store for the key. A frozen layer never
// changes, so the set is made once (from its delta, or from its keys) and
// kept.
type keySet struct {
	inodes map[uint64]struct{}
	dirs   map[uint64]struct{}
	// names are the entries it holds, as hashes of directory and name
	// (entryHash): a lookup of one name in a deep stack skips the layers
	// that changed other names of its directory. nil: not known, any
	// name of dirs may be there.
	names map[uint64]struct{}
}

// holds tells whether the layer has a record of inode ino (its
// attributes, and with them any of its blocks) or, for dir, entries of
// directory ino.
func (ks *keySet) holds(ino uint64, dir bool) bool {
	var ok bool
	if dir {
		_, ok = ks.dirs[ino]
	} else {
		_, ok = ks.inodes[ino]
	}
	return ok
}

// holdsEntry tells whether the layer may hold the entry name of
// directory dir: a hash that matches says yes for a name it lacks, which
// costs only the store's answer.
func (ks *keySet) holdsEntry(dir uint64, name string) bool {
	if _, ok := ks.dirs[dir]; !ok {
		return false
	}
	if ks.names == nil {
		return true
	}
	_, ok := ks.names[entryHash(dir, name)]
	return ok
}

// entryHash is FNV-1a of a directory's number and a name.
func entryHash(dir uint64, name string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < 8; i++ {
		h = (h ^ (dir >> (8 * i) & 0xff)) * 1099511628211
	}
	for i := 0; i < len(name); i++ {
		h = (h ^ uint64(name[i])) * 1099511628211
	}
	return h
}

func (ks *keySet) size() int { return len(ks.inodes) + len(ks.dirs) + len(ks.names) + 1 }

// layerCache keeps values of frozen and archived layers, which never
// change, up to a bound of keys in all: the oldest go first, and one
// larger than the bound is not kept.
type layerCache[T any] struct {
	mu    sync.Mutex // protects the fields below
	m     map[string]cached[T]
	order []string
	keys  int
}

type cached[T any] struct {
	v T
	n int // its keys
}

func (c *layerCache[T]) get(layer string) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[layer]
	return e.v, ok
}

// put keeps v, of n keys, for layer unless it has a value already or n
// exceeds bound.
func (c *layerCache[T]) put(layer string, v T, n, bound int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]cached[T]{}
	}
	if _, ok := c.m[layer]; ok || n > bound {
		return
	}
	c.m[layer] = cached[T]{v, n}
	c.order = append(c.order, layer)
	c.keys += n
	for c.keys > bound && len(c.order) > 0 {
		if old, ok := c.m[c.order[0]]; ok {
			c.keys -= old.n
			delete(c.m, c.order[0])
		}
		c.order = c.order[1:]
	}
	if len(c.order) > 2*len(c.m)+64 {
		// Layers collected (forget) leave their ids behind.
		kept := c.order[:0]
		for _, l := range c.order {
			if _, ok := c.m[l]; ok {
				kept = append(kept, l)
			}
		}
		c.order = kept
	}
}

// forget drops what is kept of layer, which was collected.
func (c *layerCache[T]) forget(layer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[layer]; ok {
		c.keys -= e.n
		delete(c.m, layer)
	}
}

// keySetCache keeps the key sets of frozen layers read from the store.
type keySetCache struct{ layerCache[*keySet] }

// keySetKeys bounds the keys the cache holds (16 bytes or so each), and
// so the one layer it reads: a larger layer is read per lookup, as before.
var keySetKeys = 1 << 20

func (c *keySetCache) get(layer string) *keySet {
	ks, _ := c.layerCache.get(layer)
	return ks
}

func (c *keySetCache) put(layer string, ks *keySet) {
	c.layerCache.put(layer, ks, ks.size(), keySetKeys)
}

// readKeySet reads the key set of layer l in txn; nil when the layer holds
// more keys than the cache bound.
func readKeySet(txn dbTxn, l string) *keySet {
	ks := &keySet{inodes: map[uint64]struct{}{}, dirs: map[uint64]struct{}{}, names: map[uint64]struct{}{}}
	n := 1
	for _, t := range []byte{tInode, tEntry} {
		prefix := prefixLayerTable(t, l)
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()[len(prefix):]
			if len(k) < 8 {
				continue // malformed: fsck reports it; never skip on it
			}
			if n++; n > keySetKeys {
				it.Close()
				return nil
			}
			switch {
			case t == tInode:
				ks.inodes[beUint64(k)] = struct{}{}
			case len(k) > 8 && k[8] == '/':
				ks.dirs[beUint64(k)] = struct{}{}
				ks.names[entryHash(beUint64(k), string(k[9:]))] = struct{}{}
			default:
				ks.dirs[beUint64(k)] = struct{}{}
				ks.names = nil // a key not of the usual shape: any name may be there
			}
		}
		it.Close()
	}
	return ks
}
