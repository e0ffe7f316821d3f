package layers

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSyncSkipsWhatIsDurable checks the bookkeeping that lets an fsync(2)
// of an unchanged sandbox return without flushing: a metadata write is
// flushed by the next Sync and only then counted as synced, a data write
// marks the data file for the next Sync, and a Sync clears both.
func TestSyncSkipsWhatIsDurable(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	if e.store.synced.Load() >= e.store.commits.Load() {
		t.Fatalf("a new store counts itself synced (%d of %d): a log replayed after a crash would never be flushed", e.store.synced.Load(), e.store.commits.Load())
	}
	f := mkfile(t, v, RootIno, "f", "data")
	v.mu.Lock()
	unsynced := v.dataSynced < v.dataGen
	v.mu.Unlock()
	if !unsynced {
		t.Fatal("a write left the data file marked synced")
	}
	// Full syncs: one through the intent log leaves the data file and
	// badger's log for later (TestWAL*).
	ok(t, "sync", v.sync(false, false))
	v.mu.Lock()
	unsynced = v.dataSynced < v.dataGen
	v.mu.Unlock()
	if unsynced || e.store.synced.Load() != e.store.commits.Load() {
		t.Fatalf("after Sync: unsynced %v, synced %d of %d commits", unsynced, e.store.synced.Load(), e.store.commits.Load())
	}
	// A metadata change alone: counted, then covered by the next Sync.
	mode := uint32(0o600)
	_, err := v.SetAttr(f.Ino, SetAttrIn{Mode: &mode})
	ok(t, "chmod", err)
	ok(t, "commit", v.commit())
	if e.store.synced.Load() >= e.store.commits.Load() {
		t.Fatal("a committed chmod counts as synced before any Sync")
	}
	ok(t, "sync", v.sync(false, false))
	if e.store.synced.Load() != e.store.commits.Load() {
		t.Fatalf("after Sync: synced %d of %d commits", e.store.synced.Load(), e.store.commits.Load())
	}
	// Writes through the store's own transactions count too.
	ok(t, "update", e.store.Update(func(tx *Txn) error { return tx.Set("x/k", []byte("v")) }))
	if e.store.synced.Load() >= e.store.commits.Load() {
		t.Fatal("a store update counts as synced before any Sync")
	}
	ok(t, "store sync", e.store.Sync())
	ok(t, "sync again", v.Sync())
	a, err := v.GetAttr(f.Ino)
	ok(t, "getattr", err)
	v = e.reopen(v)
	if got := content(t, v, f.Ino); got != "data" || a.Mode&0o777 != 0o600 {
		t.Fatalf("after reopen: content %q, mode %o", got, a.Mode&0o777)
	}
}

// TestFreedSlotsArePunched checks that the space of blocks rewritten after
// a sync comes back: in batches while the view runs, and all of it at
// close.
func TestFreedSlotsArePunched(t *testing.T) {
	const bs = MinBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	defer func() { v.Close() }()
	f := mkfile(t, v, RootIno, "f", strings.Repeat("a", bs))
	ok(t, "sync", v.Sync())
	data := e.store.dataPath(v.Info().Head)
	if allocated(t, data) < bs {
		t.Skip("the data file system allocates nothing to measure")
	}
	// Each rewrite after a sync moves the block to a new slot.
	rewrite := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			_, err := v.WriteAt(f.Ino, bytes.Repeat([]byte{byte('b' + i%20)}, bs), 0, false)
			ok(t, "rewrite", err)
			ok(t, "sync", v.Sync())
		}
	}
	rewrite(punchBatch + 1)
	deadline := time.Now().Add(5 * time.Second)
	for allocated(t, data) > 8*bs && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := allocated(t, data); got > 8*bs {
		t.Fatalf("after %d rewrites the data file holds %d bytes: the freed slots were not punched", punchBatch+1, got)
	}
	rewrite(3) // fewer than a batch: they wait, until close
	ok(t, "close", v.Close())
	if got := allocated(t, data); got > 2*bs {
		t.Fatalf("after close the data file holds %d bytes, want at most %d", got, 2*bs)
	}
	v = e.view()
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != strings.Repeat("d", bs) {
		t.Fatalf("content after the rewrites: got %q...", got[:8])
	}
}

// TestXattrEncodingModel applies random attribute changes and checks, after
// each, that the set is the model's and that the record's stored form (kept
// up to date incrementally) is the one a fresh encoding gives, so equal
// sets keep encoding alike.
func TestXattrEncodingModel(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	f := mkfile(t, v, RootIno, "f", "")
	rng := rand.New(rand.NewSource(7))
	model := map[string]string{}
	for i := 0; i < 400; i++ {
		name := fmt.Sprintf("user.k%d", rng.Intn(40))
		if rng.Intn(3) == 0 {
			err := v.SetXattr(f.Ino, name, nil, 0)
			if _, in := model[name]; in {
				ok(t, "remove "+name, err)
				delete(model, name)
			} else {
				wantErr(t, "remove missing "+name, err, ErrNoAttr)
			}
		} else {
			val := fmt.Sprint(rng.Intn(1000))
			ok(t, "set "+name, v.SetXattr(f.Ino, name, []byte(val), 0))
			model[name] = val
		}
		v.mu.Lock()
		rec := v.inodes[f.Ino].rec
		got := encodeInode(rec)
		fresh := rec.clone()
		fresh.xattrEnc, fresh.xattrNames = nil, nil
		want := encodeInode(fresh)
		names := slices.Clone(rec.xattrNames)
		v.mu.Unlock()
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d: cached encoding differs from a fresh one", i)
		}
		if !slices.IsSorted(names) || len(names) != len(model) {
			t.Fatalf("step %d: names %v, model has %d", i, names, len(model))
		}
	}
	v = e.reopen(v)
	ls, err := v.ListXattr(f.Ino)
	ok(t, "list", err)
	if len(ls) != len(model) {
		t.Fatalf("after reopen: %d attributes, model has %d", len(ls), len(model))
	}
	for _, k := range ls {
		got, err := v.GetXattr(f.Ino, k)
		ok(t, "get "+k, err)
		if string(got) != model[k] {
			t.Fatalf("after reopen: %s = %q, model %q", k, got, model[k])
		}
	}
}

// TestJournalHold checks that a commit stops short of a held seal's
// operations (records of blocks whose data is still being synced) and
// takes them once the hold ends, in order, counting what it committed.
func TestJournalHold(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	ok(t, "sync", v.Sync())
	key := func(i int) []byte { return []byte(fmt.Sprintf("x/hold/%d", i)) }
	stored := func(i int) bool {
		t.Helper()
		found := false
		ok(t, "view", e.store.View(func(tx *Txn) error {
			_, err := tx.Get(string(key(i)))
			found = err == nil
			return nil
		}))
		return found
	}
	v.cmu.Lock() // keep the journal loop out while the test queues
	v.queue([]kv{{key: key(0), val: []byte("a")}})
	hold := v.holdJournal()
	v.queue([]kv{{key: key(1), val: []byte("b")}})
	other := v.holdJournal()
	v.queue([]kv{{key: key(2), val: []byte("c")}})
	ok(t, "commit", v.commitLocked())
	v.cmu.Unlock()
	if !stored(0) || stored(1) || stored(2) {
		t.Fatalf("with the hold: stored %v %v %v, want only the first", stored(0), stored(1), stored(2))
	}
	v.jmu.Lock()
	done, queued := v.jdone, v.jqueued
	v.jmu.Unlock()
	if done != queued-2 {
		t.Fatalf("committed %d of %d operations, want all but the held 2", done, queued)
	}
	// A caller whose data sync covers the second operation commits it
	// whoever holds it, and stops there.
	v.cmu.Lock()
	v.jmu.Lock()
	second := v.jqueued - 1
	v.jmu.Unlock()
	ok(t, "commit through", v.commitThroughLocked(second))
	v.cmu.Unlock()
	if !stored(1) || stored(2) {
		t.Fatalf("committed through the second: stored %v %v, want the second only", stored(1), stored(2))
	}
	v.releaseJournal(hold)
	ok(t, "commit", v.commit())
	if stored(2) {
		t.Fatal("the third operation is still held, but was committed")
	}
	v.releaseJournal(other)
	ok(t, "commit", v.commit())
	v.jmu.Lock()
	done, queued = v.jdone, v.jqueued
	v.jmu.Unlock()
	if !stored(2) || done != queued {
		t.Fatalf("after both holds: stored %v, committed %d of %d", stored(2), done, queued)
	}
}
