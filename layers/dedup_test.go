package layers

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// dedupBS is the block size of the dedup tests: blocks of several pages.
const dedupBS = 4 * pageSize

// randBytes is n bytes of a seeded random stream.
func randBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// diskUse is the space a layer's data file takes on disk.
func diskUse(t *testing.T, s *Store, layer string) int64 {
	t.Helper()
	var st syscall.Stat_t
	ok(t, "stat data file", syscall.Stat(s.dataPath(layer), &st))
	return st.Blocks * 512
}

// fsckClean runs fsck and fails on any problem.
func fsckClean(t *testing.T, s *Store) {
	t.Helper()
	rep, err := s.Fsck()
	ok(t, "fsck", err)
	if len(rep.Problems) != 0 {
		t.Fatalf("fsck: %+v", rep.Problems)
	}
}

// dedupFiles is a sandbox with three frozen layers whose files repeat one
// content: l1 holds a; l2 holds b (a's content), c (a's first block, then
// other bytes) and u (unique); l3 holds d and e (a's content, twice in
// one layer). The view is open and has read every file.
type dedupFiles struct {
	e          *testEnv
	v          *View
	l1, l2, l3 string
	want       map[string][]byte
	ino        map[string]uint64
}

func newDedupFiles(t *testing.T) *dedupFiles {
	t.Helper()
	e := newEnv(t, dedupBS, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	data := randBytes(1, 3*dedupBS)
	f := &dedupFiles{e: e, v: v, want: map[string][]byte{}, ino: map[string]uint64{}}
	mk := func(name string, b []byte) {
		f.ino[name] = mkfile(t, v, RootIno, name, string(b)).Ino
		f.want[name] = bytes.Clone(b)
	}
	mk("a", data)
	f.l1 = freeze(t, e.store, e.name)
	mk("b", data)
	mk("c", append(append([]byte(nil), data[:dedupBS]...), randBytes(2, dedupBS)...))
	mk("u", randBytes(3, 2*dedupBS))
	f.l2 = freeze(t, e.store, e.name)
	mk("d", data)
	mk("e", data)
	f.l3 = freeze(t, e.store, e.name)
	f.check(t, v, "before")
	return f
}

// check reads every file through v.
func (f *dedupFiles) check(t *testing.T, v *View, when string) {
	t.Helper()
	for name, want := range f.want {
		if got := content(t, v, lookup(t, v, RootIno, name).Ino); got != string(want) {
			t.Errorf("%s: %s reads %d bytes, not what was written", when, name, len(got))
		}
	}
}

// restart reopens the store and the view, reads every file and runs fsck.
func (f *dedupFiles) restart(t *testing.T) {
	t.Helper()
	f.v = f.e.reopen(f.v)
	f.check(t, f.v, "after a restart")
	fsckClean(t, f.e.store)
}

// TestDedupKeepsContentOnce: a pass moves every block whose content a
// layer below (or its own layer) holds onto that slot and punches its
// own; the live view, a snapshot opened before and a restart read the
// same; fsck is clean; usage counts only the slots a layer keeps; a
// second pass finds nothing.
func TestDedupKeepsContentOnce(t *testing.T) {
	f := newDedupFiles(t)
	s := f.e.store
	snap, err := s.OpenSnapshot(f.e.name, f.l3)
	ok(t, "snapshot", err)
	defer snap.Close()
	f.check(t, snap, "snapshot before")
	before := map[string]int64{}
	for _, l := range []string{f.l1, f.l2, f.l3} {
		before[l] = diskUse(t, s, l)
	}
	oldRef, _, err := s.blockRecord(f.l2, f.ino["b"], 0)
	ok(t, "record", err)
	res, err := s.Dedup()
	ok(t, "dedup", err)
	// fsck reading a block as a pass moves it: the old slot fails (it is
	// punched), the record now names a slot below, which fsck checks as
	// that layer's own block.
	df, err := os.Open(s.dataPath(f.l2))
	ok(t, "open", err)
	page, err := s.checkBlockLive(df, f.l2, f.ino["b"], 0, oldRef, dedupBS)
	df.Close()
	if err != nil || page != -1 {
		t.Errorf("fsck of a block moved under it: page %d, %v; want none failing", page, err)
	}
	// And of a block whose record went meanwhile: nothing left to check.
	df, err = os.Open(s.dataPath(f.l2))
	ok(t, "open", err)
	page, err = s.checkBlockLive(df, f.l2, 999, 0, oldRef, dedupBS)
	df.Close()
	if err != nil || page != -1 {
		t.Errorf("fsck of a block removed under it: page %d, %v; want none failing", page, err)
	}
	// b: 3 blocks, c: 1, d: 3, e: 3.
	if res.Blocks != 10 || res.BytesFreed != 10*dedupBS {
		t.Errorf("dedup: %+v, want 10 blocks and %d bytes", res, 10*dedupBS)
	}
	f.check(t, f.v, "live view")
	f.check(t, snap, "snapshot")
	for l, freed := range map[string]int64{f.l1: 0, f.l2: 4 * dedupBS, f.l3: 6 * dedupBS} {
		if got := before[l] - diskUse(t, s, l); got != freed {
			t.Errorf("layer %s: %d bytes given back, want %d", l, got, freed)
		}
	}
	for l, want := range map[string]Usage{
		f.l1: {Blocks: 3, Files: 1, Bytes: 3 * dedupBS},
		f.l2: {Blocks: 7, Files: 3, Bytes: 3 * dedupBS, Shared: 4},
		f.l3: {Blocks: 6, Files: 2, Shared: 6},
	} {
		u, err := s.LayerUsage(l)
		ok(t, "usage", err)
		if u != want {
			t.Errorf("layer %s: usage %+v, want %+v", l, u, want)
		}
	}
	fsckClean(t, s)
	// A snapshot opened after the pass reads its top layer's moved
	// blocks from the layers below.
	snap2, err := s.OpenSnapshot(f.e.name, f.l3)
	ok(t, "snapshot after", err)
	f.check(t, snap2, "snapshot opened after")
	snap2.Close()
	again, err := s.Dedup()
	ok(t, "second dedup", err)
	if again.Blocks != 0 || again.BytesFreed != 0 {
		t.Errorf("second dedup: %+v, want nothing", again)
	}
	// New writes over moved blocks copy them up from their new slots.
	_, err = f.v.WriteAt(f.ino["d"], []byte("xyz"), dedupBS+5, false)
	ok(t, "write", err)
	copy(f.want["d"][dedupBS+5:], "xyz")
	f.check(t, f.v, "after a write")
	f.restart(t)
}

// TestDedupComparesBytes: blocks whose names collide but whose bytes
// differ are left alone; equal ones still move.
func TestDedupComparesBytes(t *testing.T) {
	f := newDedupFiles(t)
	old := dedupHash
	dedupHash = func([]byte) [32]byte { return [32]byte{1} }
	defer func() { dedupHash = old }()
	res, err := f.e.store.Dedup()
	ok(t, "dedup", err)
	// Every block names the same content: only those equal to the first
	// block seen (a's first) move: b's, c's and d's and e's first.
	if res.Blocks != 4 {
		t.Errorf("dedup: %+v, want 4 blocks", res)
	}
	f.check(t, f.v, "live view")
	fsckClean(t, f.e.store)
}

// TestDedupSkipsDamagedSlot: a slot whose bytes no longer match its
// record (a damaged disk) takes in no other block, even when their names
// and checksums agree: the bytes are compared.
func TestDedupSkipsDamagedSlot(t *testing.T) {
	f := newDedupFiles(t)
	s := f.e.store
	df, err := os.OpenFile(s.dataPath(f.l1), os.O_RDWR, 0)
	ok(t, "open data file", err)
	// a's first block is l1's first slot.
	_, err = df.WriteAt([]byte{0xff, 0xfe}, 100)
	ok(t, "damage", err)
	df.Close()
	old := dedupHash
	dedupHash = func([]byte) [32]byte { return [32]byte{7} }
	defer func() { dedupHash = old }()
	_, err = s.Dedup()
	ok(t, "dedup", err)
	delete(f.want, "a")
	f.check(t, f.v, "after the pass")
}

// TestDedupLeavesActiveAndKeptSlots: the active layer's blocks stay in
// their slots, and a slot another record keeps its content in is never
// punched, even when its own block could move.
func TestDedupLeavesActiveAndKeptSlots(t *testing.T) {
	e := newEnv(t, dedupBS, nil)
	v := e.view()
	defer func() { v.Close() }()
	data := randBytes(5, dedupBS)
	want := map[string][]byte{}
	mk := func(name string) { mkfile(t, v, RootIno, name, string(data)); want[name] = data }
	mk("x")
	mk("y")
	mk("z")
	l1 := freeze(t, e.store, e.name)
	mk("active")
	// A first pass that names x, y and z apart, but y and z alike: z
	// moves onto y's slot, in the same layer.
	old := dedupHash
	calls := 0
	dedupHash = func([]byte) [32]byte {
		calls++
		if calls == 1 {
			return [32]byte{1}
		}
		return [32]byte{2}
	}
	res, err := e.store.Dedup()
	dedupHash = old
	ok(t, "first dedup", err)
	if res.Blocks != 1 {
		t.Fatalf("first dedup: %+v, want z's block", res)
	}
	// As if the pass had stopped after the move, before keeping the
	// layer's names: the next one goes through l1 again.
	for _, tab := range []byte{tHash, tHashed} {
		ok(t, "forget the names", e.store.deletePrefix(prefixLayerTable(tab, l1)))
	}
	// Now y is x's content, but z keeps its content in y's slot.
	res, err = e.store.Dedup()
	ok(t, "second dedup", err)
	if res.Blocks != 0 {
		t.Errorf("second dedup: %+v, want nothing (y's slot is kept for z; the active layer stays)", res)
	}
	for name, b := range want {
		if got := content(t, v, lookup(t, v, RootIno, name).Ino); got != string(b) {
			t.Errorf("%s reads wrong", name)
		}
	}
	u, err := e.store.LayerUsage(l1)
	ok(t, "usage", err)
	if u.Bytes != 2*dedupBS || u.Shared != 1 {
		t.Errorf("l1's usage %+v, want x's and y's slots and z shared", u)
	}
	v = e.reopen(v)
	for name, b := range want {
		if got := content(t, v, lookup(t, v, RootIno, name).Ino); got != string(b) {
			t.Errorf("after a restart: %s reads wrong", name)
		}
	}
	fsckClean(t, e.store)
}

// TestDedupPunchFails: a punch that fails leaves the moved records and
// their old slots (reads stay right); the next pass punches them.
func TestDedupPunchFails(t *testing.T) {
	f := newDedupFiles(t)
	s := f.e.store
	boom := errors.New("boom")
	punchHook = func(string, uint64, uint64) error { return boom }
	_, err := s.Dedup()
	punchHook = nil
	wantErr(t, "dedup", err, boom)
	f.check(t, f.v, "after the failed punch")
	fsckClean(t, s)
	// As after a crash there: the records moved, the punches to come.
	f.v = f.e.reopen(f.v)
	s = f.e.store
	f.check(t, f.v, "after a restart")
	res, err := s.Dedup()
	ok(t, "dedup again", err)
	if res.Blocks != 0 || res.BytesFreed != 10*dedupBS {
		t.Errorf("dedup again: %+v, want the 10 punches left and no move", res)
	}
	f.check(t, f.v, "after the punches")
	f.restart(t)
}

// TestDedupAfterDrop: punches of a layer dropped meanwhile are let go.
func TestDedupAfterDrop(t *testing.T) {
	f := newDedupFiles(t)
	s := f.e.store
	punchHook = func(string, uint64, uint64) error { return errors.New("boom") }
	_, err := s.Dedup()
	punchHook = nil
	if err == nil {
		t.Fatal("dedup with failing punches succeeded")
	}
	// l3's pending punches outlive its data file (a drop that a crash cut
	// short after removing it).
	ok(t, "remove data file", os.Remove(s.dataPath(f.l3)))
	freed, err := s.finishPunches()
	ok(t, "finish punches", err)
	if freed != 4*dedupBS {
		t.Errorf("freed %d bytes, want l2's %d", freed, 4*dedupBS)
	}
	// And the drop of a layer takes its pending punches with it.
	ok(t, "drop", s.dropLayerData(f.l3))
	var n int
	ok(t, "count", s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tPunch, '/'}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	}))
	if n != 0 {
		t.Errorf("%d punch records left", n)
	}
}

// TestFsckHomeNotBelow: a record keeping its block in a layer that is
// not below it is reported.
func TestFsckHomeNotBelow(t *testing.T) {
	f := newDedupFiles(t)
	s := f.e.store
	ref := blockRef{Slot: 0, CRCs: make([]uint32, dedupBS/pageSize), Home: f.l3}
	corrupt(t, s, keyBlock(f.l1, f.ino["a"], 0), encodeBlockRef(ref))
	rep, err := s.Fsck()
	ok(t, "fsck", err)
	found := false
	for _, p := range rep.Problems {
		found = found || p.Kind == "record" && bytes.Contains([]byte(p.Detail), []byte("not below it"))
	}
	if !found {
		t.Errorf("fsck: %+v, want a block kept in a layer above", rep.Problems)
	}
}

// TestDedupHashIsSHA256: contents are named by their SHA-256.
func TestDedupHashIsSHA256(t *testing.T) {
	b := randBytes(9, 100)
	if dedupHash(b) != sha256.Sum256(b) {
		t.Fatal("dedupHash is not SHA-256")
	}
}

// TestDedupWhileReading: readers of the live view and of a snapshot go on
// while passes move and punch blocks under them, and always read what was
// written.
func TestDedupWhileReading(t *testing.T) {
	for round := range 5 {
		f := newDedupFiles(t)
		s := f.e.store
		snap, err := s.OpenSnapshot(f.e.name, f.l3)
		ok(t, "snapshot", err)
		stop := make(chan struct{})
		errs := make(chan error, 4)
		for _, v := range []*View{f.v, snap, f.v, snap} {
			go func() {
				buf := make([]byte, 3*dedupBS)
				for {
					select {
					case <-stop:
						errs <- nil
						return
					default:
					}
					for name, want := range f.want {
						n, err := v.ReadAt(f.ino[name], buf[:len(want)], 0)
						if err != nil || !bytes.Equal(buf[:n], want) {
							errs <- fmt.Errorf("round %d: %s: %d bytes, %v", round, name, n, err)
							return
						}
					}
				}
			}()
		}
		_, err = s.Dedup()
		close(stop)
		for range 4 {
			if e := <-errs; e != nil {
				t.Error(e)
			}
		}
		ok(t, "dedup", err)
		snap.Close()
	}
}

// TestDedupSharedStacks: a layer that several stacks contain (a pinned
// one, as a checkpoint or an archive pins it) is gone through once, and
// the blocks above it in every stack are kept against it.
func TestDedupSharedStacks(t *testing.T) {
	f := newDedupFiles(t)
	s := f.e.store
	for _, pin := range []struct{ layer, owner string }{{f.l2, "cp-a"}, {f.l2, "cp-b"}, {f.l1, "archive"}} {
		ok(t, "pin", s.Update(func(tx *Txn) error { return tx.Pin(pin.layer, pin.owner) }))
	}
	res, err := s.CollectGarbageDedup()
	ok(t, "gc and dedup", err)
	defer func() {
		// A collection that fails runs no pass.
		corrupt(t, s, keySandbox("other"), []byte("{"))
		if res, err := s.CollectGarbageDedup(); !errors.Is(err, ErrCorrupt) || res.Dedup != nil {
			t.Errorf("gc and dedup of a damaged store: %+v, %v", res, err)
		}
	}()
	if len(res.Layers) != 0 || res.Dedup == nil || res.Dedup.Blocks != 10 {
		t.Errorf("gc and dedup: %+v (dedup %+v), want no layer dropped and 10 blocks", res, res.Dedup)
	}
	f.check(t, f.v, "live view")
	fsckClean(t, s)
}

// TestDedupDamage: a pass that meets a damaged store stops with the
// error (want; nil: it goes on), and what it read stays readable.
func TestDedupDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, f *dedupFiles)
		want   error
	}{
		{"a block record that does not decode", func(t *testing.T, f *dedupFiles) {
			corrupt(t, f.e.store, keyBlock(f.l2, 99, 0), []byte{1})
		}, ErrCorrupt},
		{"a malformed block key", func(t *testing.T, f *dedupFiles) {
			k := append(prefixLayerTable(tBlock, f.l2), 1, 2, 3)
			corrupt(t, f.e.store, k, encodeBlockRef(blockRef{CRCs: []uint32{1, 2, 3, 4}}))
		}, ErrCorrupt},
		{"a data file gone", func(t *testing.T, f *dedupFiles) {
			ok(t, "remove", os.Remove(f.e.store.dataPath(f.l1)))
			delete(f.want, "a")
		}, os.ErrNotExist},
		// Reads past the end of a data file give zeros, which match no
		// other block: nothing of it moves, and the pass goes on.
		{"a data file cut short", func(t *testing.T, f *dedupFiles) {
			ok(t, "truncate", os.Truncate(f.e.store.dataPath(f.l2), pageSize))
			for _, n := range []string{"b", "c", "u"} {
				delete(f.want, n)
			}
		}, nil},
		{"a malformed punch key", func(t *testing.T, f *dedupFiles) {
			corrupt(t, f.e.store, []byte("u/short"), []byte{1, 1})
		}, ErrCorrupt},
		{"a punch record that does not decode", func(t *testing.T, f *dedupFiles) {
			corrupt(t, f.e.store, keyPunch(f.l2, 5, 0), []byte{1})
		}, ErrCorrupt},
		{"a punch of a block whose record does not decode", func(t *testing.T, f *dedupFiles) {
			corrupt(t, f.e.store, keyPunch(f.l2, 99, 0), []byte{1, 1})
			corrupt(t, f.e.store, keyBlock(f.l2, 99, 0), []byte{1})
		}, ErrCorrupt},
		{"a malformed kept slot key", func(t *testing.T, f *dedupFiles) {
			corrupt(t, f.e.store, []byte("r/short"), nil)
		}, ErrCorrupt},
		{"a sandbox record that does not decode", func(t *testing.T, f *dedupFiles) {
			corrupt(t, f.e.store, keySandbox("other"), []byte("{"))
		}, ErrCorrupt},
		{"a stack whose bottom layer is gone", func(t *testing.T, f *dedupFiles) {
			ok(t, "delete", f.e.store.update(func(txn *badger.Txn) error { return txn.Delete(keyLayer(f.l1)) }))
		}, ErrNotFound},
		{"a block name that is not a SHA-256", func(t *testing.T, f *dedupFiles) {
			_, err := f.e.store.Dedup()
			ok(t, "first pass", err)
			corrupt(t, f.e.store, keyHash(f.l1, f.ino["a"], 0), []byte{1, 2, 3})
		}, ErrCorrupt},
		{"the metadata sync fails", func(t *testing.T, f *dedupFiles) {
			syncLogHook = func(string) error { return syscall.EIO }
			t.Cleanup(func() { syncLogHook = nil })
		}, syscall.EIO},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newDedupFiles(t)
			c.damage(t, f)
			_, err := f.e.store.Dedup()
			if !errors.Is(err, c.want) {
				t.Fatalf("dedup: got %v, want %v", err, c.want)
			}
			syncLogHook = nil
			f.check(t, f.v, "after the failed pass")
		})
	}
}

// TestCommitMovesLeavesChangedRecords: a move whose record changed or
// went since the pass read it is left out, with no punch.
func TestCommitMovesLeavesChangedRecords(t *testing.T) {
	f := newDedupFiles(t)
	s := f.e.store
	ref, found, err := s.blockRecord(f.l2, f.ino["b"], 0)
	ok(t, "record", err)
	if !found {
		t.Fatal("no record of b's first block")
	}
	other := ref
	other.Slot += 100
	moved := ref
	moved.Home = f.l1
	corrupt(t, s, keyBlock(f.l2, 98, 0), []byte{1})
	wantErr(t, "commit over a record that does not decode", s.commitMoves([]blockMove{{layer: f.l2, ino: 98, blk: 0, old: ref, ref: moved}}), ErrCorrupt)
	ok(t, "commit", s.commitMoves([]blockMove{
		{layer: f.l2, ino: f.ino["b"], blk: 0, old: other, ref: moved}, // changed since
		{layer: f.l2, ino: f.ino["b"], blk: 77, old: ref, ref: moved},  // gone
	}))
	now, _, err := s.blockRecord(f.l2, f.ino["b"], 0)
	ok(t, "record", err)
	if now.Home != "" || now.Slot != ref.Slot {
		t.Errorf("a changed record moved: %+v", now)
	}
	freed, err := s.finishPunches()
	ok(t, "punches", err)
	if freed != 0 {
		t.Errorf("punched %d bytes for moves left out", freed)
	}
	f.check(t, f.v, "after")
}

// TestDedupReadsOnlyNewLayers: a layer a pass went through is not read
// again; a later pass reads the layers frozen since, and the slots below
// their blocks may move to; dropping a layer drops its names.
func TestDedupReadsOnlyNewLayers(t *testing.T) {
	f := newDedupFiles(t)
	s := f.e.store
	reads := map[string]int{}
	dedupReadHook = func(layer string, _ uint64) { reads[layer]++ }
	defer func() { dedupReadHook = nil }()
	_, err := s.Dedup()
	ok(t, "first dedup", err)
	if reads[f.l1] == 0 || reads[f.l2] == 0 || reads[f.l3] == 0 {
		t.Fatalf("first pass read %v, want every layer", reads)
	}
	clear(reads)
	res, err := s.Dedup()
	ok(t, "second dedup", err)
	if len(reads) != 0 || res.Blocks != 0 {
		t.Errorf("second pass: read %v, moved %d; want nothing", reads, res.Blocks)
	}
	// A new step writes a's content again, and something new.
	mkfile(t, f.v, RootIno, "g", string(f.want["a"]))
	f.want["g"] = f.want["a"]
	mkfile(t, f.v, RootIno, "h", string(randBytes(11, dedupBS)))
	f.want["h"] = randBytes(11, dedupBS)
	l4 := freeze(t, s, f.e.name)
	clear(reads)
	res, err = s.Dedup()
	ok(t, "third dedup", err)
	// g's 3 blocks and h's 1 read; g's 3 candidates in l1 read to compare.
	if res.Blocks != 3 || reads[l4] != 4 || reads[f.l1] != 3 || reads[f.l2] != 0 || reads[f.l3] != 0 {
		t.Errorf("third pass: read %v, moved %d; want l4's 4 blocks, l1's 3 and 3 moves", reads, res.Blocks)
	}
	f.check(t, f.v, "after the third pass")
	ok(t, "drop", s.dropLayerData(l4))
	for _, tab := range []byte{tHash, tHashed} {
		n := 0
		ok(t, "count", s.view(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixLayerTable(tab, l4)})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			return nil
		}))
		if n != 0 {
			t.Errorf("table %c of the dropped layer: %d keys left", tab, n)
		}
	}
}
