package layers

import (
	"fmt"
	"reflect"
	"testing"
)

// TestDeltaCache checks the bounds of the cache of frozen layers' deltas:
// the oldest go first past deltaCacheKeys, one too large is not kept, a
// layer kept once is not replaced, and forgotten layers leave neither
// their keys nor, for long, their ids.
func TestDeltaCache(t *testing.T) {
	big := func(layer string, n int) *LayerDelta {
		return &LayerDelta{Layer: layer, Entries: make([]EntryChange, n)}
	}
	half := deltaCacheKeys / 2
	cases := []struct {
		name     string
		run      func(c *deltaCache)
		kept     []string
		dropped  []string
		keys     int
		maxOrder int
	}{
		{"oldest evicted", func(c *deltaCache) {
			c.put(big("a", half))
			c.put(big("b", half))
			c.put(big("c", 10))
		}, []string{"b", "c"}, []string{"a"}, half + 1 + 11, 2},
		{"too large not kept", func(c *deltaCache) {
			c.put(big("a", 5))
			c.put(big("huge", deltaCacheKeys))
		}, []string{"a"}, []string{"huge"}, 6, 1},
		{"kept once", func(c *deltaCache) {
			c.put(big("a", 5))
			c.put(big("a", 50))
		}, []string{"a"}, nil, 6, 1},
		{"forget", func(c *deltaCache) {
			c.put(big("a", 5))
			c.put(big("b", 7))
			c.forget("a")
			c.forget("never")
		}, []string{"b"}, []string{"a", "never"}, 8, 2},
		{"forgotten ids compacted", func(c *deltaCache) {
			for i := 0; i < 200; i++ {
				l := fmt.Sprint("l", i)
				c.put(big(l, 1))
				c.forget(l)
			}
			c.put(big("last", 1))
		}, []string{"last"}, []string{"l0", "l199"}, 2, 66},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c deltaCache
			tc.run(&c)
			for _, l := range tc.kept {
				if c.get(l) == nil {
					t.Errorf("%s not kept", l)
				}
			}
			for _, l := range tc.dropped {
				if c.get(l) != nil {
					t.Errorf("%s kept", l)
				}
			}
			if c.keys != tc.keys {
				t.Errorf("cache counts %d keys, want %d", c.keys, tc.keys)
			}
			if len(c.order) > tc.maxOrder {
				t.Errorf("cache remembers %d ids, want at most %d", len(c.order), tc.maxOrder)
			}
			if d := c.get("a"); d != nil && len(d.Entries) != 5 && tc.name == "kept once" {
				t.Errorf("kept delta replaced: %d entries", len(d.Entries))
			}
		})
	}
}

// TestLayerUsageSources: a transaction counts what a layer holds from the
// delta it knows, else the store's cache, else the store's records; all
// agree with LayerUsage, and Bytes counts the pages the slots take, not
// whole blocks.
func TestLayerUsageSources(t *testing.T) {
	const bs = DefaultBlockSize
	cases := []struct {
		name string
		// write changes the sandbox before the freeze.
		write func(t *testing.T, v *View)
		want  Usage
	}{
		{"three whole blocks", func(t *testing.T, v *View) {
			a := mkfile(t, v, RootIno, "f", string(make([]byte, 3*bs)))
			_, err := v.WriteAt(a.Ino, []byte("x"), 0, false)
			ok(t, "write", err)
		}, Usage{Blocks: 3, Files: 1, Bytes: 3 * bs}},
		{"two short files", func(t *testing.T, v *View) {
			mkfile(t, v, RootIno, "a", "short")
			mkfile(t, v, RootIno, "b", string(make([]byte, pageSize+1)))
		}, Usage{Blocks: 2, Files: 2, Bytes: 3 * pageSize}},
		{"a short file and a whole block", func(t *testing.T, v *View) {
			mkfile(t, v, RootIno, "a", "short")
			mkfile(t, v, RootIno, "b", string(make([]byte, bs)))
		}, Usage{Blocks: 2, Files: 2, Bytes: pageSize + bs}},
		{"nothing", func(t *testing.T, v *View) {
			mkdir(t, v, RootIno, "d")
		}, Usage{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, bs, nil)
			v := e.view()
			defer v.Close()
			tc.write(t, v)
			var inTxn Usage
			l, _, err := e.store.Freeze("sb", func(tx *Txn, frozen, _ string) error {
				var err error
				inTxn, err = tx.LayerUsage(frozen)
				return err
			})
			ok(t, "freeze", err)
			want, err := e.store.LayerUsage(l)
			ok(t, "usage", err)
			if want != tc.want || inTxn != want {
				t.Fatalf("in the freeze %+v, usage %+v, want %+v", inTxn, want, tc.want)
			}
			count := func(what string) Usage {
				t.Helper()
				var u Usage
				ok(t, what, e.store.View(func(tx *Txn) error {
					var err error
					u, err = tx.LayerUsage(l)
					return err
				}))
				return u
			}
			if e.store.deltas.get(l) == nil {
				t.Fatal("the store does not keep the frozen layer's delta")
			}
			if u := count("from the cache"); u != want {
				t.Fatalf("from the cache: %+v, want %+v", u, want)
			}
			e.store.deltas.forget(l)
			if u := count("from the records"); u != want {
				t.Fatalf("from the records: %+v, want %+v", u, want)
			}
			e.store.deltas.forget(l)
			d, err := e.store.LayerDelta("sb", l)
			ok(t, "delta from the store", err)
			if d.Usage != want {
				t.Fatalf("delta from the store: %+v, want %+v", d.Usage, want)
			}
		})
	}
}

// TestLayerUsageOfMissingLayer: unknown layers hold nothing, and have no
// delta.
func TestLayerUsageOfMissingLayer(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	none := Usage{Blocks: -1}
	ok(t, "usage of a missing layer", e.store.View(func(tx *Txn) error {
		var err error
		none, err = tx.LayerUsage("nope")
		return err
	}))
	if none != (Usage{}) {
		t.Fatalf("a missing layer holds %+v", none)
	}
	var err error
	_, err = e.store.LayerDelta("sb", "nope")
	wantErr(t, "delta of a missing layer", err, ErrNotFound)
	err = e.store.View(func(tx *Txn) error { _, err := tx.LayerDelta("sb", "nope"); return err })
	wantErr(t, "delta of a missing layer in a txn", err, ErrNotFound)
}

// TestLayerDeltaFallsBackToStore: a view opened on an active layer that
// already holds records cannot build the delta from memory; the freeze
// then reads it from the store, and an active layer's delta is computed
// anew each time and never cached.
func TestLayerDeltaFallsBackToStore(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	a := mkfile(t, v, RootIno, "f", "one")
	_, _, err := e.store.Freeze("sb", func(*Txn, string, string) error { return nil })
	ok(t, "freeze", err)
	mkfile(t, v, RootIno, "h", "in the active layer")
	v = e.reopen(v) // the active layer now holds records of another view
	defer v.Close()
	_, err = v.WriteAt(a.Ino, []byte("two"), 0, false)
	ok(t, "write", err)
	ok(t, "rename", v.Rename(RootIno, "f", RootIno, "g", 0))
	ok(t, "sync", v.Sync())
	info, err := e.store.Sandbox("sb")
	ok(t, "sandbox", err)
	active, err := e.store.LayerDelta("sb", info.Head)
	ok(t, "delta of the active layer", err)
	if e.store.deltas.get(info.Head) != nil {
		t.Fatal("the active layer's delta was cached")
	}
	var fromMemory bool
	var got *LayerDelta
	l, _, err := e.store.Freeze("sb", func(tx *Txn, frozen, _ string) error {
		fromMemory = tx.deltas[frozen] != nil
		var err error
		got, err = tx.LayerDelta("sb", frozen)
		return err
	})
	ok(t, "freeze", err)
	if fromMemory {
		t.Fatal("a delta built from memory for a layer the view did not start")
	}
	if g, w := deltaView(got), deltaView(active); !reflect.DeepEqual(g, w) {
		t.Fatalf("delta at the freeze\n%s\nof the active layer before\n%s", join(g), join(w))
	}
	// The delta names the renamed file on both sides.
	var sawOld, sawNew bool
	for _, c := range got.Entries {
		sawOld = sawOld || (c.Name == "f" && c.Old != nil && c.Old.Ino == a.Ino && c.New == nil)
		sawNew = sawNew || (c.Name == "g" && c.New != nil && c.New.Ino == a.Ino)
	}
	if !sawOld || !sawNew {
		t.Fatalf("rename not in the delta: %s", join(deltaView(got)))
	}
	if e.store.deltas.get(l) != got {
		t.Fatal("the frozen layer's delta is not kept")
	}
}
