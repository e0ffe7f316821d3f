package layers

import (
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// TestKeySets: a frozen layer's key set names the inodes and directories
// it records; a view skips the layers that lack a key and still finds what
// lower layers hold; a layer larger than the bound gets no set (and is
// read per lookup); the cache drops its oldest sets past the bound.
func TestKeySets(t *testing.T) {
	e := newEnv(t, 0, func(base string) { put(t, base+"/b", "base") })
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "one")
	d := mkdir(t, v, RootIno, "d")
	mkfile(t, v, d.Ino, "g", "two")
	l1 := freeze(t, e.store, e.name)
	mkfile(t, v, RootIno, "h", "three")
	l2 := freeze(t, e.store, e.name)
	v = e.reopen(v) // no delta in memory: lookups use key sets
	defer v.Close()
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != "one" {
		t.Fatalf("f through two frozen layers: %q", got)
	}
	if got := content(t, v, lookup(t, v, lookup(t, v, RootIno, "d").Ino, "g").Ino); got != "two" {
		t.Fatalf("d/g: %q", got)
	}
	ks1, ks2 := e.store.keySets.get(l1), e.store.keySets.get(l2)
	if ks1 == nil || ks2 == nil {
		t.Fatalf("key sets after lookups: %v %v; want both read", ks1, ks2)
	}
	if _, ok := ks1.inodes[f.Ino]; !ok {
		t.Errorf("layer 1's set lacks f (%d): %v", f.Ino, ks1.inodes)
	}
	if _, ok := ks1.dirs[d.Ino]; !ok {
		t.Errorf("layer 1's set lacks directory d (%d): %v", d.Ino, ks1.dirs)
	}
	if _, ok := ks2.inodes[f.Ino]; ok {
		t.Errorf("layer 2's set names f, which it does not record")
	}

	// A malformed key is not taken for an inode, and a set over the bound
	// is not made: lacks then says nothing is lacking.
	err := e.store.db.Update(func(txn *badger.Txn) error {
		return txn.Set(append(prefixLayerTable(tInode, "ZZ"), 1, 2), []byte{})
	})
	ok(t, "put a malformed key", err)
	err = e.store.db.View(func(txn *badger.Txn) error {
		if ks := readKeySet(txn, "ZZ"); ks == nil || len(ks.inodes) != 0 {
			t.Errorf("key set of a layer with one malformed key: %+v", ks)
		}
		old := keySetKeys
		keySetKeys = 1
		defer func() { keySetKeys = old }()
		if ks := readKeySet(txn, l1); ks != nil {
			t.Errorf("key set over the bound: %+v, want none", ks)
		}
		e.store.keySets = keySetCache{}
		if v.lacks(txn, l1, f.Ino+1000, false) {
			t.Errorf("a layer over the bound was said to lack a key")
		}
		return nil
	})
	ok(t, "view", err)

	// Past the bound the oldest sets go; a set put twice is kept once.
	var c keySetCache
	old := keySetKeys
	keySetKeys = 5
	defer func() { keySetKeys = old }()
	one := &keySet{inodes: map[uint64]struct{}{1: {}, 2: {}}, dirs: map[uint64]struct{}{}}
	c.put("a", one)
	c.put("a", one)
	c.put("b", one)
	if c.get("a") != nil || c.get("b") == nil || c.keys != 3 {
		t.Errorf("after putting a, a again and b with a bound of 5 keys: a %v, b %v, %d keys; want only b, 3 keys", c.get("a"), c.get("b"), c.keys)
	}
}
