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

// TestKeySetNames: a frozen layer's key set tells the names it holds in a
// directory, from its keys or from its delta, so a lookup of one name
// skips the layers that changed only other names there and still finds
// the names they hold; a set without names, or a key of another shape,
// says any name may be there.
func TestKeySetNames(t *testing.T) {
	e := newEnv(t, 0, func(base string) { put(t, base+"/b", "base") })
	v := e.view()
	mkfile(t, v, RootIno, "f", "one")
	l1 := freeze(t, e.store, e.name)
	mkfile(t, v, RootIno, "g", "two")
	l2 := freeze(t, e.store, e.name)
	fromDelta := map[string]*keySet{l1: e.store.deltas.get(l1).keySet(), l2: e.store.deltas.get(l2).keySet()}
	v = e.reopen(v) // no delta in memory: key sets are read from the keys
	defer v.Close()
	// Names looked up one by one, the root not listed: the layers that
	// lack a name are skipped, the one that holds it is not.
	for name, wantLayerFile := range map[string]bool{"f": true, "g": true, "b": false, "nothing": false} {
		v.mu.Lock()
		de, err := v.pointEntry(RootIno, name)
		v.mu.Unlock()
		ok(t, "point entry "+name, err)
		if (de != nil) != (name != "nothing") {
			t.Fatalf("entry %q: %+v", name, de)
		}
		if de != nil && (de.Ino >= 1<<62) != wantLayerFile {
			t.Errorf("entry %q names inode %d", name, de.Ino)
		}
	}
	for _, c := range []struct {
		name       string
		in1, in2   bool
		wantReadAs string
	}{
		{"f", true, false, "one"},
		{"g", false, true, "two"},
		{"b", false, false, "base"},
	} {
		if got := content(t, v, lookup(t, v, RootIno, c.name).Ino); got != c.wantReadAs {
			t.Errorf("%s reads %q, want %q", c.name, got, c.wantReadAs)
		}
		for l, want := range map[string]bool{l1: c.in1, l2: c.in2} {
			var read *keySet
			ok(t, "view", e.store.db.View(func(txn *badger.Txn) error { read = readKeySet(txn, l); return nil }))
			for how, ks := range map[string]*keySet{"keys": read, "delta": fromDelta[l]} {
				if got := ks.holdsEntry(RootIno, c.name); got != want {
					t.Errorf("set of layer %s from its %s: holds %q: %v, want %v", l, how, c.name, got, want)
				}
			}
		}
	}
	if (&keySet{dirs: map[uint64]struct{}{RootIno: {}}}).holdsEntry(RootIno, "any") != true {
		t.Errorf("a set without names said a name of one of its directories is not there")
	}
	if (&keySet{dirs: map[uint64]struct{}{}}).holdsEntry(RootIno, "any") {
		t.Errorf("a set said it may hold a name of a directory it does not hold")
	}
	err := e.store.db.Update(func(txn *badger.Txn) error {
		return txn.Set(append(prefixLayerTable(tEntry, "ZZ"), 0, 0, 0, 0, 0, 0, 0, 1, 'x'), []byte{})
	})
	ok(t, "put an odd key", err)
	ok(t, "view", e.store.db.View(func(txn *badger.Txn) error {
		if ks := readKeySet(txn, "ZZ"); ks == nil || !ks.holdsEntry(RootIno, "any") {
			t.Errorf("a set with a key of another shape: %+v, want any name there", ks)
		}
		return nil
	}))
}
