package layers

import (
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// keySet is the inodes whose records, and the directories whose entries, a
// frozen layer holds: what a lookup in a deep stack needs to skip the
// layer without asking the store for the key. A frozen layer never
// changes, so the set is read once (the keys only) and kept.
type keySet struct {
	inodes map[uint64]struct{}
	dirs   map[uint64]struct{}
}

// keySetCache keeps the key sets of frozen layers, up to a bound of keys
// in all (the oldest go first).
type keySetCache struct {
	mu    sync.Mutex // protects the fields below
	m     map[string]*keySet
	order []string
	keys  int
}

// keySetKeys bounds the keys the cache holds (16 bytes or so each), and
// so the one layer it reads: a larger layer is read per lookup, as before.
var keySetKeys = 1 << 20

func (c *keySetCache) get(layer string) *keySet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[layer]
}

func (c *keySetCache) put(layer string, ks *keySet) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*keySet{}
	}
	if _, ok := c.m[layer]; ok {
		return
	}
	n := len(ks.inodes) + len(ks.dirs) + 1
	c.m[layer] = ks
	c.order = append(c.order, layer)
	c.keys += n
	for c.keys > keySetKeys && len(c.order) > 1 {
		old := c.order[0]
		c.order = c.order[1:]
		if o := c.m[old]; o != nil {
			c.keys -= len(o.inodes) + len(o.dirs) + 1
		}
		delete(c.m, old)
	}
}

// readKeySet reads the key set of layer l in txn; nil when the layer holds
// more keys than the cache bound.
func readKeySet(txn *badger.Txn, l string) *keySet {
	ks := &keySet{inodes: map[uint64]struct{}{}, dirs: map[uint64]struct{}{}}
	n := 0
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
			if t == tInode {
				ks.inodes[beUint64(k)] = struct{}{}
			} else {
				ks.dirs[beUint64(k)] = struct{}{}
			}
		}
		it.Close()
	}
	return ks
}
