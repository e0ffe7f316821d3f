package layers

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// TestGCInterruptedDrop stops a collection at every step of a layer's
// drop, as a crash would, and reopens the store: fsck names the layer as
// being dropped and finds no orphan, and the next collection removes what
// is left of it (keys, data file and mark).
func TestGCInterruptedDrop(t *testing.T) {
	crash := errors.New("crash")
	for _, c := range []struct {
		name string
		step byte
	}{
		{"before inodes", tInode},
		{"before entries", tEntry},
		{"before blocks", tBlock},
		{"before the data file", 0},
		{"before the mark", tDrop},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			d := mkdir(t, v, RootIno, "d")
			mkfile(t, v, d.Ino, "f", "doomed data")
			ok(t, "close", v.Close())
			doomed := freeze(t, e.store, "sb")
			// Back to the base alone: the frozen layer leaves the stack.
			_, err := e.store.Repoint("sb", "", noRepointFn)
			ok(t, "repoint to the base", err)
			v = e.view()
			mkfile(t, v, RootIno, "kept", "kept data")
			ok(t, "close", v.Close())

			dropStepHook = func(id string, step byte) error {
				if id == doomed && step == c.step {
					return crash
				}
				return nil
			}
			t.Cleanup(func() { dropStepHook = nil })
			_, err = e.store.CollectGarbage()
			wantErr(t, "interrupted gc", err, crash)
			dropStepHook = nil
			ok(t, "close store", e.store.Close())
			s, err := Open(filepath.Join(e.dir, "store"))
			ok(t, "reopen", err)
			e.store = s

			rep, err := s.Fsck()
			ok(t, "fsck", err)
			if len(rep.Problems) != 0 {
				t.Fatalf("fsck after the crash: %+v", rep.Problems)
			}
			if !slices.Contains(rep.Dropping, doomed) {
				t.Fatalf("fsck dropping = %v, want %s among them", rep.Dropping, doomed)
			}

			res, err := s.CollectGarbage()
			ok(t, "gc", err)
			if !slices.Contains(res.Layers, doomed) {
				t.Fatalf("gc dropped %v, want %s among them", res.Layers, doomed)
			}
			if n := countLayerKeys(t, s, doomed); n != 0 {
				t.Fatalf("%d keys of the dropped layer left", n)
			}
			if _, err := os.Stat(s.dataPath(doomed)); !os.IsNotExist(err) {
				t.Fatalf("data file of the dropped layer: %v", err)
			}
			rep, err = s.Fsck()
			ok(t, "fsck", err)
			if len(rep.Problems) != 0 || len(rep.Dropping) != 0 {
				t.Fatalf("fsck after gc: dropping %v, problems %+v", rep.Dropping, rep.Problems)
			}
			// The sandbox's own layer was not touched.
			v, err = s.OpenView("sb", false)
			ok(t, "open view", err)
			defer v.Close()
			if got := content(t, v, lookup(t, v, RootIno, "kept").Ino); got != "kept data" {
				t.Fatalf("the sandbox's file: %q", got)
			}
		})
	}
}

// TestFsckOrphanKeysWithoutMark: keys of a layer that is gone and was not
// being dropped are still orphans.
func TestFsckOrphanKeysWithoutMark(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	mkfile(t, v, RootIno, "f", "x")
	ok(t, "close", v.Close())
	freeze(t, e.store, "sb")
	ok(t, "orphan", e.store.update(func(txn *badger.Txn) error {
		return txn.Set(keyInode(NewID(), 99), []byte{1})
	}))
	rep, err := e.store.Fsck()
	ok(t, "fsck", err)
	n := 0
	for _, p := range rep.Problems {
		if p.Kind == "orphan" {
			n++
		}
	}
	if n != 1 || len(rep.Dropping) != 0 {
		t.Fatalf("fsck: dropping %v, problems %+v; want one orphan", rep.Dropping, rep.Problems)
	}
}

func countLayerKeys(t *testing.T, s *Store, id string) int {
	t.Helper()
	n := 0
	ok(t, "count", s.view(func(txn *badger.Txn) error {
		for _, tb := range []byte{tInode, tEntry, tBlock, tDrop} {
			prefix := prefixLayerTable(tb, id)
			if tb == tDrop {
				prefix = keyDrop(id)
			}
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			it.Close()
		}
		return nil
	}))
	return n
}
