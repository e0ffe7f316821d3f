package layers

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// logScene is a live view with files written and fully synced, and a copy
// of the store made then: the image a power cut leaves of everything not
// synced since (powerCutImage adds the intent log as it is).
type logScene struct {
	e       *testEnv
	v       *View
	durable string
	dataAt  string // withDataFrom
	files   map[string]string
	inos    map[string]uint64
}

func newLogScene(t *testing.T) *logScene {
	t.Helper()
	noLoopSyncs(t)
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	sc := &logScene{e: e, v: v, files: map[string]string{}, inos: map[string]uint64{}}
	for i := range 4 {
		sc.write(t, fmt.Sprintf("f%d", i), strings.Repeat(fmt.Sprint(i), 3000))
	}
	sc.snapshot(t)
	return sc
}

// write makes or rewrites file name with c.
func (sc *logScene) write(t *testing.T, name, c string) {
	t.Helper()
	if ino, found := sc.inos[name]; found {
		_, err := sc.v.WriteAt(ino, []byte(c), 0, false)
		ok(t, "write", err)
		if old := sc.files[name]; len(old) > len(c) {
			c += old[len(c):]
		}
	} else {
		sc.inos[name] = mkfile(t, sc.v, RootIno, name, c).Ino
	}
	sc.files[name] = c
}

// snapshot syncs everything and copies the store.
func (sc *logScene) snapshot(t *testing.T) {
	t.Helper()
	ok(t, "full sync", sc.v.sync(false, false))
	sc.durable = filepath.Join(t.TempDir(), "durable")
	copyDir(t, filepath.Join(sc.e.dir, "store"), sc.durable)
	sc.dataAt = ""
}

// quiesce runs a checkpoint or rollback, noting a data sync it made.
func (sc *logScene) quiesce(t *testing.T, fn func()) {
	t.Helper()
	if d := syncedData(t, sc.e, fn); d != "" {
		sc.dataAt = d
	}
}

// checkImage opens the image a power cut would leave now and wants the
// files, the layers and the archived ones the live store has.
func (sc *logScene) checkImage(t *testing.T, want map[string]string) {
	t.Helper()
	layers := layerIDsOf(t, sc.e.store)
	img, _ := powerCutImage(t, sc.e, sc.durable, nil)
	withDataFrom(t, img, sc.dataAt)
	s2, v2 := openImage(t, img)
	if got := layerIDsOf(t, s2); !slices.Equal(got, layers) {
		t.Fatalf("the image's layers are %v, want %v", got, layers)
	}
	sameFiles(t, "image", fileTree(t, v2), want)
	ok(t, "close the image's view", v2.Close())
	fsckClean(t, s2)
}

func lazyFiles(v *View) int {
	v.lzMu.Lock()
	defer v.lzMu.Unlock()
	return len(v.lazy)
}

// TestCheckpointThroughTheLog: a checkpoint goes through the intent log:
// with a little data written since the last sync the record carries it
// and the data file is left to the next full sync; with more, the data
// file is synced and the record holds the metadata. Either way neither
// badger's log nor (when carried) the data file is synced, and the image
// of a power cut right after holds the checkpoint and its files.
func TestCheckpointThroughTheLog(t *testing.T) {
	for _, tc := range []struct {
		name  string
		data  int  // bytes written into each of the files before the checkpoint
		carry bool // the record carries the sealed pages
	}{
		{"nothing written", 0, false},
		{"little written", 100, true},
		{"much written", walCarryData / 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := newLogScene(t)
			for i := range 4 {
				if tc.data > 0 {
					sc.write(t, fmt.Sprintf("f%d", i), strings.Repeat("w", tc.data))
				}
			}
			full, synced := sc.v.fullSyncs.Load(), sc.e.store.synced.Load()
			var datasyncs atomic.Int32
			restore := sc.e.store.InjectFault(func(op, key string) error {
				if op == "datasync" {
					datasyncs.Add(1)
				}
				return nil
			})
			frozen := freeze(t, sc.e.store, sc.e.name)
			restore()
			if n := sc.v.loggedQuiesces.Load(); n != 1 {
				t.Fatalf("%d checkpoints went through the log, want 1", n)
			}
			if sc.v.fullSyncs.Load() != full || sc.e.store.synced.Load() != synced {
				t.Fatal("the checkpoint synced badger's log")
			}
			wantSyncs, wantLazy := int32(0), 0
			if tc.data > 0 && !tc.carry {
				wantSyncs = 1
			}
			if tc.carry {
				wantLazy = 1
			}
			if datasyncs.Load() != wantSyncs || lazyFiles(sc.v) != wantLazy {
				t.Fatalf("data syncs %d, left to a later sync %d; want %d and %d", datasyncs.Load(), lazyFiles(sc.v), wantSyncs, wantLazy)
			}
			if wantSyncs > 0 {
				sc.dataAt = filepath.Join(t.TempDir(), "data")
				copyDir(t, filepath.Join(sc.e.dir, "store", "data"), sc.dataAt)
			}
			sc.checkImage(t, sc.files)
			snap, err := sc.e.store.OpenSnapshot(sc.e.name, frozen)
			ok(t, "snapshot", err)
			sameFiles(t, "the checkpoint", fileTree(t, snap), sc.files)
			ok(t, "close snapshot", snap.Close())

			// The next full sync syncs the data file left behind, and the
			// log starts again.
			datasyncs.Store(0)
			restore = sc.e.store.InjectFault(func(op, key string) error {
				if op == "datasync" {
					datasyncs.Add(1)
				}
				return nil
			})
			ok(t, "full sync", sc.v.sync(false, false))
			restore()
			if lazyFiles(sc.v) != 0 || int(datasyncs.Load()) != 1+wantLazy {
				t.Fatalf("after a full sync: %d data files left, %d data syncs (want 0, %d)", lazyFiles(sc.v), datasyncs.Load(), 1+wantLazy)
			}
			if walOffset(sc.v) != 0 {
				t.Fatalf("the log did not start again: at %d", walOffset(sc.v))
			}
		})
	}
}

// TestQuiesceSyncsLeftFilesFirst: a checkpoint with nothing written waits
// for no data sync, unless an earlier one through the log left a data
// file to a later sync: its mark says all data is synced, so that file is
// synced first. And one that finds the left files being synced (by an
// idle sync, which holds the data syncs' lock) waits for that sync too.
func TestQuiesceSyncsLeftFilesFirst(t *testing.T) {
	sc := newLogScene(t)
	sc.write(t, "f0", "little")
	freeze(t, sc.e.store, sc.e.name) // carries it: f0's data file is left
	if lazyFiles(sc.v) != 1 {
		t.Fatalf("%d data files left by a carrying checkpoint, want 1", lazyFiles(sc.v))
	}
	// A full sync that read the count of writes before that checkpoint
	// and synced the left files before it came leaves the new one there,
	// with every write counted as synced: nothing written, a file left.
	sc.v.mu.Lock()
	sc.v.dataSynced = sc.v.dataGen
	sc.v.mu.Unlock()
	sc.v.dsMu.Lock()
	if sc.v.noLazySync() {
		t.Error("a sync of the left files under way counts as none to wait for")
	}
	sc.v.dsMu.Unlock()
	if sc.v.noLazySync() {
		t.Fatal("a data file left to a later sync counts as none")
	}
	var datasyncs atomic.Int32
	restore := sc.e.store.InjectFault(func(op, key string) error {
		if op == "datasync" {
			datasyncs.Add(1)
		}
		return nil
	})
	freeze(t, sc.e.store, sc.e.name) // nothing written since
	restore()
	if datasyncs.Load() != 1 || lazyFiles(sc.v) != 0 {
		t.Fatalf("a checkpoint after one that left a data file: %d data syncs, %d files left; want 1 and 0", datasyncs.Load(), lazyFiles(sc.v))
	}
	if !sc.v.noLazySync() {
		t.Fatal("no file left, yet some to wait for")
	}
	datasyncs.Store(0)
	restore = sc.e.store.InjectFault(func(op, key string) error {
		if op == "datasync" {
			datasyncs.Add(1)
		}
		return nil
	})
	freeze(t, sc.e.store, sc.e.name)
	restore()
	if datasyncs.Load() != 0 {
		t.Fatalf("a checkpoint with nothing to sync made %d data syncs", datasyncs.Load())
	}
	sc.checkImage(t, sc.files)
}

// TestRollbackThroughTheLog: a rollback goes through the log too, and the
// image of a power cut right after it shows the checkpoint's files, the
// layers left archived and the new head.
func TestRollbackThroughTheLog(t *testing.T) {
	for _, carry := range []bool{true, false} {
		t.Run(fmt.Sprintf("carry=%v", carry), func(t *testing.T) {
			sc := newLogScene(t)
			var c0 string
			sc.quiesce(t, func() { c0 = freeze(t, sc.e.store, sc.e.name) })
			at := maps.Clone(sc.files)
			sc.write(t, "f1", "later")
			sc.write(t, "new", "made after the checkpoint")
			sc.quiesce(t, func() { freeze(t, sc.e.store, sc.e.name) })
			n := 10
			if !carry {
				n = walCarryData/pageSize + 8
			}
			for i := range n {
				sc.write(t, fmt.Sprintf("g%d", i), "x")
			}
			before := sc.v.loggedQuiesces.Load()
			sc.quiesce(t, func() {
				_, err := sc.e.store.Repoint(sc.e.name, c0, noRepointFn)
				ok(t, "rollback", err)
			})
			if sc.v.loggedQuiesces.Load() != before+1 {
				t.Fatal("the rollback did not go through the log")
			}
			if got := lazyFiles(sc.v); (got > 0) != carry {
				t.Fatalf("%d data files left to a later sync", got)
			}
			sameFiles(t, "after the rollback", fileTree(t, sc.v), at)
			sc.checkImage(t, at)
		})
	}
}

// TestQuiesceLogFallsBack: what the log cannot take goes the full way and
// loses nothing: a record larger than the log (it starts again after the
// full checkpoint), a log whose write or sync fails, and a commit that
// fails after the record is in the log (a conflict: the function runs
// again, and the failed record is never replayed over what follows).
func TestQuiesceLogFallsBack(t *testing.T) {
	for _, tc := range []struct {
		name  string
		carry bool
		setup func(t *testing.T, sc *logScene) (restore func())
	}{
		{"log too small, data carried", true, func(t *testing.T, sc *logScene) func() {
			sc.v.cmu.Lock()
			sc.v.wal.off = walSize - 100
			sc.v.cmu.Unlock()
			return func() {}
		}},
		{"log too small, data synced", false, func(t *testing.T, sc *logScene) func() {
			sc.v.cmu.Lock()
			sc.v.wal.off = walSize - 100
			sc.v.cmu.Unlock()
			return func() {}
		}},
		{"log sync fails, data carried", true, func(t *testing.T, sc *logScene) func() {
			return sc.e.store.InjectFault(func(op, _ string) error {
				if op == "walsync" {
					return errors.New("log device gone")
				}
				return nil
			})
		}},
		// Committed beside the log's failed sync: badger's log is synced.
		{"log sync fails, data synced", false, func(t *testing.T, sc *logScene) func() {
			return sc.e.store.InjectFault(func(op, _ string) error {
				if op == "walsync" {
					return errors.New("log device gone")
				}
				return nil
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := newLogScene(t)
			n := 3
			if !tc.carry {
				n = walCarryData/pageSize + 8
			}
			for i := range n {
				sc.write(t, fmt.Sprintf("g%d", i), "x")
			}
			restore := tc.setup(t, sc)
			frozen := freeze(t, sc.e.store, sc.e.name)
			restore()
			if sc.v.loggedQuiesces.Load() != 0 {
				t.Fatal("counted as a checkpoint through the log")
			}
			if lazyFiles(sc.v) != 0 {
				t.Fatal("a data file was left to a later sync")
			}
			// Everything is durable now: a power cut's image is the store.
			sc.durable = filepath.Join(t.TempDir(), "durable")
			copyDir(t, filepath.Join(sc.e.dir, "store"), sc.durable)
			sc.checkImage(t, sc.files)
			snap, err := sc.e.store.OpenSnapshot(sc.e.name, frozen)
			ok(t, "snapshot", err)
			sameFiles(t, "the checkpoint", fileTree(t, snap), sc.files)
			ok(t, "close snapshot", snap.Close())
			// The log serves the next checkpoint again (after a full
			// sync when it broke).
			ok(t, "full sync", sc.v.sync(false, false))
			sc.write(t, "h", "y")
			before := sc.v.loggedQuiesces.Load()
			freeze(t, sc.e.store, sc.e.name)
			if sc.v.loggedQuiesces.Load() != before+1 {
				t.Fatal("the next checkpoint did not go through the log")
			}
		})
	}
}

// TestQuiesceLogCommitConflict: a transaction whose commit badger refuses
// after its record is in the log (a key it read was rewritten meanwhile)
// runs again the full way; the record's number is passed, so an image of
// a power cut after the retry replays nothing of it.
func TestQuiesceLogCommitConflict(t *testing.T) {
	for _, c := range []struct {
		carry, eraseFails bool
	}{{true, false}, {false, false}, {true, true}, {false, true}} {
		t.Run(fmt.Sprintf("carry=%v/erase-fails=%v", c.carry, c.eraseFails), func(t *testing.T) {
			sc := newLogScene(t)
			ok(t, "seed", sc.e.store.Update(func(tx *Txn) error { return tx.Set("x/n", []byte("0")) }))
			n := 3
			op := "walsync" // the carrying record is synced before the commit
			if !c.carry {
				n = walCarryData/pageSize + 8
				op = "datasync" // the commit starts once the data is synced
			}
			for i := range n {
				sc.write(t, fmt.Sprintf("g%d", i), "x")
			}
			var fired atomic.Bool
			var walsyncs atomic.Int32
			built := make(chan struct{}) // the transaction read x/n
			restore := sc.e.store.InjectFault(func(o, _ string) error {
				// The record's sync, then the erasure's.
				if o == "walsync" && walsyncs.Add(1) == 2 && c.eraseFails {
					return errors.New("log device failed")
				}
				if o != op || fired.Swap(true) {
					return nil
				}
				// The data sync runs beside the transaction's building:
				// the rewrite comes after the read.
				<-built
				return sc.e.store.Update(func(tx *Txn) error { return tx.Set("x/n", []byte("1")) })
			})
			runs := 0
			_, _, err := sc.e.store.Freeze(sc.e.name, func(tx *Txn, frozen, next string) error {
				runs++
				if runs == 1 {
					defer close(built)
				}
				b, err := tx.Get("x/n")
				if err != nil {
					return err
				}
				return tx.Set("x/n", append(b, '+'))
			})
			restore()
			ok(t, "checkpoint", err)
			if runs != 2 || !fired.Load() || walsyncs.Load() != 2 {
				t.Fatalf("the checkpoint's function ran %d times (conflict made: %v, log syncs %d), want 2 (and 2)", runs, fired.Load(), walsyncs.Load())
			}
			var got []byte
			ok(t, "read", sc.e.store.View(func(tx *Txn) (err error) { got, err = tx.Get("x/n"); return }))
			if string(got) != "1+" {
				t.Fatalf("x/n is %q, want \"1+\"", got)
			}
			// The refused record, made on the stale read, is gone from the
			// log, or (its erasure failed) behind the mark.
			log, err := os.ReadFile(sc.e.store.walPath(sc.e.name))
			ok(t, "read the log", err)
			_, committed, _, err := sc.e.store.walState(sc.e.name)
			ok(t, "mark", err)
			for _, r := range walCycle(bytes.NewReader(log), int64(len(log))) {
				for _, o := range r.ops {
					for _, e := range o {
						if string(e.key) == "x/n" && (!c.eraseFails || r.seq > committed) {
							t.Fatalf("record %d (mark %d) writes x/n = %q", r.seq, committed, e.val)
						}
					}
				}
			}
			ok(t, "full sync", sc.v.sync(false, false))
			sc.durable = filepath.Join(t.TempDir(), "durable")
			copyDir(t, filepath.Join(sc.e.dir, "store"), sc.durable)
			sc.write(t, "after", "z")
			ok(t, "sync", sc.v.Sync())
			img, _ := powerCutImage(t, sc.e, sc.durable, nil)
			s2, v2 := openImage(t, img)
			ok(t, "read the image", s2.View(func(tx *Txn) (err error) { got, err = tx.Get("x/n"); return }))
			if string(got) != "1+" {
				t.Fatalf("the image's x/n is %q, want \"1+\"", got)
			}
			sameFiles(t, "image", fileTree(t, v2), sc.files)
		})
	}
}

// TestLazyDataSyncFailure: when the full sync that follows a checkpoint
// through the log cannot sync the data file the checkpoint left, the view
// stops as after any failed data sync, the mark never says that data is
// synced, and a new mount has the checkpoint and its files (the log's
// copy is written again when the store opens).
func TestLazyDataSyncFailure(t *testing.T) {
	sc := newLogScene(t)
	sc.write(t, "f2", "little")
	frozen := freeze(t, sc.e.store, sc.e.name)
	if lazyFiles(sc.v) != 1 {
		t.Fatal("the checkpoint left no data file to a later sync")
	}
	boom := errors.New("disk failed")
	restore := sc.e.store.InjectFault(func(op, _ string) error {
		if op == "datasync" {
			return boom
		}
		return nil
	})
	err := sc.v.sync(false, false)
	restore()
	wantErr(t, "full sync", err, ErrDataSync)
	wantErr(t, "checkpoint after it", func() error { _, _, err := sc.e.store.Freeze(sc.e.name, noFreezeFn); return err }(), ErrDataSync)
	_, committed, synced, err := sc.e.store.walState(sc.e.name)
	ok(t, "mark", err)
	if synced >= committed {
		t.Fatalf("the mark says the data up to record %d is synced (committed %d)", synced, committed)
	}
	wantErr(t, "close", sc.v.Close(), ErrDataSync)
	ok(t, "close store", sc.e.store.Close())
	s, err := Open(filepath.Join(sc.e.dir, "store"))
	ok(t, "open", err)
	sc.e.store = s
	sc.v = sc.e.view()
	sameFiles(t, "after a new mount", fileTree(t, sc.v), sc.files)
	snap, err := s.OpenSnapshot(sc.e.name, frozen)
	ok(t, "snapshot", err)
	sameFiles(t, "the checkpoint", fileTree(t, snap), sc.files)
	ok(t, "close snapshot", snap.Close())
	fsckClean(t, s)
}

// TestCollectionsSyncLazyFiles: the passes that drop block records or
// share slots first sync the data files checkpoints through the log left
// (a replay writes a slot only where its own block's record still names
// it, which they may change).
func TestCollectionsSyncLazyFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(s *Store) error
	}{
		{"hidden blocks", func(s *Store) error { _, err := s.CollectHidden(); return err }},
		{"dedup", func(s *Store) error { _, err := s.Dedup(); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := newLogScene(t)
			sc.write(t, "f1", "little")
			freeze(t, sc.e.store, sc.e.name)
			if lazyFiles(sc.v) != 1 {
				t.Fatal("the checkpoint left no data file to a later sync")
			}
			ok(t, tc.name, tc.run(sc.e.store))
			if lazyFiles(sc.v) != 0 {
				t.Fatalf("%s left the data file unsynced", tc.name)
			}
			boom := errors.New("disk failed")
			sc.write(t, "f2", "little")
			freeze(t, sc.e.store, sc.e.name)
			restore := sc.e.store.InjectFault(func(op, _ string) error {
				if op == "datasync" {
					return boom
				}
				return nil
			})
			err := tc.run(sc.e.store)
			restore()
			wantErr(t, tc.name+" with a failing disk", err, ErrDataSync)
		})
	}
}

// TestQuiesceLogReplaysTheTransaction: a checkpoint's own writes and
// deletions go into its record and come back from it after a power cut
// that lost badger's copy; a function that fails commits nothing of its
// own (the journal goes in, the error comes back).
func TestQuiesceLogReplaysTheTransaction(t *testing.T) {
	sc := newLogScene(t)
	ok(t, "seed", sc.e.store.Update(func(tx *Txn) error {
		if err := tx.Set("x/gone", []byte("old")); err != nil {
			return err
		}
		return tx.Set("x/kept", []byte("old"))
	}))
	sc.snapshot(t)
	sc.write(t, "f1", "little")
	_, _, err := sc.e.store.Freeze(sc.e.name, func(tx *Txn, frozen, next string) error {
		if err := tx.Delete("x/gone"); err != nil {
			return err
		}
		return tx.Set("x/kept", []byte("new"))
	})
	ok(t, "checkpoint", err)
	if sc.v.loggedQuiesces.Load() != 1 {
		t.Fatal("the checkpoint did not go through the log")
	}
	img, _ := powerCutImage(t, sc.e, sc.durable, nil)
	s2, v2 := openImage(t, img)
	sameFiles(t, "image", fileTree(t, v2), sc.files)
	ok(t, "read the image", s2.View(func(tx *Txn) error {
		if _, err := tx.Get("x/gone"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("x/gone: %v, want not found", err)
		}
		b, err := tx.Get("x/kept")
		if err == nil && string(b) != "new" {
			err = fmt.Errorf("x/kept is %q, want \"new\"", b)
		}
		return err
	}))

	sc.write(t, "f2", "more")
	head, err := sc.e.store.Sandbox(sc.e.name)
	ok(t, "sandbox", err)
	for _, fn := range []FreezeFunc{
		func(tx *Txn, frozen, next string) error {
			return tx.Set("x/"+strings.Repeat("k", 70000), nil) // too long a key
		},
		func(tx *Txn, frozen, next string) error {
			return tx.Delete("x/" + strings.Repeat("k", 70000))
		},
	} {
		if _, _, err = sc.e.store.Freeze(sc.e.name, fn); err == nil {
			t.Fatal("a checkpoint whose function failed succeeded")
		}
	}
	after, err := sc.e.store.Sandbox(sc.e.name)
	ok(t, "sandbox", err)
	if after.Head != head.Head {
		t.Fatal("a failed checkpoint moved the head")
	}
	sameFiles(t, "after the failed checkpoint", fileTree(t, sc.v), sc.files)
	ok(t, "sync", sc.v.Sync())
}

// TestCheckpointTakesALoggedSyncsData: a checkpoint that comes while an
// fsync through the log is between its seal and its commit takes that
// seal's operations, and with them its data: into its own record when it
// carries data, or back to the journal (synced by its data sync) when
// the log cannot take the record. Either way a power cut after both
// keeps every byte.
func TestCheckpointTakesALoggedSyncsData(t *testing.T) {
	for _, full := range []bool{false, true} {
		t.Run(fmt.Sprintf("log full=%v", full), func(t *testing.T) {
			sc := newLogScene(t)
			sc.write(t, "f0", "1")
			inGap := false
			syncGapHook = func(hv *View) {
				if inGap || hv != sc.v {
					return
				}
				inGap = true
				sc.write(t, "f1", "2")
				if full {
					sc.v.cmu.Lock()
					sc.v.wal.off = walSize - 100
					sc.v.cmu.Unlock()
				}
				freeze(t, sc.e.store, sc.e.name)
			}
			t.Cleanup(func() { syncGapHook = nil })
			ok(t, "fsync", sc.v.Sync())
			syncGapHook = nil
			if !inGap {
				t.Fatal("the Sync made no gap")
			}
			if got := sc.v.loggedQuiesces.Load() == 1; got == full {
				t.Fatalf("checkpoint through the log: %v, log full: %v", got, full)
			}
			if full {
				// The checkpoint went the full way: all is durable.
				sc.durable = filepath.Join(t.TempDir(), "durable")
				copyDir(t, filepath.Join(sc.e.dir, "store"), sc.durable)
			}
			sc.checkImage(t, sc.files)
		})
	}
}
