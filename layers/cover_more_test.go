package layers

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// reopenStore closes the store and opens it again with no view, as a
// restart does, so that nothing it kept in memory (layer deltas) is left.
func reopenStore(t *testing.T, e *testEnv) {
	t.Helper()
	ok(t, "close store", e.store.Close())
	s, err := Open(filepath.Join(e.dir, "store"))
	ok(t, "reopen store", err)
	e.store = s
}

// pathOfLocked is v.pathOf under the view's lock.
func pathOfLocked(v *View, ino uint64) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.pathOf(ino)
}

// wantPath fails t unless file ino's path in v is want.
func wantPath(t *testing.T, v *View, ino uint64, want, when string) {
	t.Helper()
	p, err := pathOfLocked(v, ino)
	ok(t, when+": path", err)
	if p != want {
		t.Fatalf("%s: path: got %q, want %q", when, p, want)
	}
}

// TestLayerDeltaOverCorruptLayer: a frozen layer whose stored keys or
// records are damaged has no delta; LayerDelta says which layer and that
// the store is corrupt, instead of making one up or panicking.
func TestLayerDeltaOverCorruptLayer(t *testing.T) {
	cases := []struct {
		name string
		key  func(layer string, f uint64) []byte
		val  []byte
	}{
		{"entry key too short", func(l string, _ uint64) []byte { return append(prefixLayerTable(tEntry, l), 1) }, []byte{9}},
		{"inode key of the wrong length", func(l string, _ uint64) []byte { return append(prefixLayerTable(tInode, l), 1, 2) }, []byte{9}},
		{"inode record undecodable", func(l string, f uint64) []byte { return keyInode(l, f) }, []byte{9}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			f := mkfile(t, v, RootIno, "f", "x")
			ok(t, "close view", v.Close())
			l1 := freeze(t, e.store, "sb")
			corrupt(t, e.store, c.key(l1, f.Ino), c.val)
			reopenStore(t, e)
			_, err := e.store.LayerDelta("sb", l1)
			wantErr(t, "delta of a corrupt layer", err, ErrCorrupt)
			if !strings.Contains(err.Error(), "delta of layer "+l1) {
				t.Fatalf("the error does not name the layer: %v", err)
			}
			// A failed delta is not kept: the next call fails again.
			_, err = e.store.LayerDelta("sb", l1)
			wantErr(t, "delta of a corrupt layer, asked again", err, ErrCorrupt)
		})
	}
}

// TestOtherNameOverCorruptEntries: the search for a file's other name
// reads every entry of the stack's layers; a damaged entry key or value
// fails it with ErrCorrupt rather than being skipped.
func TestOtherNameOverCorruptEntries(t *testing.T) {
	cases := []struct {
		name string
		key  func(layer string) []byte
		val  []byte
	}{
		{"entry key too short", func(l string) []byte { return append(prefixLayerTable(tEntry, l), 1) }, []byte{9}},
		{"entry value undecodable", func(l string) []byte { return keyEntry(l, 1<<40, "zz") }, []byte{0xff}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			defer v.Close()
			a := mkdir(t, v, RootIno, "a")
			f := mkfile(t, v, a.Ino, "f", "x")
			b := mkdir(t, v, RootIno, "b")
			_, err := v.Link(f.Ino, b.Ino, "g")
			ok(t, "link", err)
			ok(t, "unlink b/g", v.Unlink(b.Ino, "g"))
			// Its path is found while the store is sound.
			p, err := pathOfLocked(v, f.Ino)
			ok(t, "path before the damage", err)
			if p != "a/f" {
				t.Fatalf("path: got %q, want a/f", p)
			}
			corrupt(t, e.store, c.key(v.activeLayer()), c.val)
			_, err = pathOfLocked(v, f.Ino)
			wantErr(t, "path over a corrupt entry", err, ErrCorrupt)
		})
	}
}

// TestOtherNameTakesTheFirstName: when a file's newest name goes away and
// several stay, its path is the first of them in (directory, name) order,
// the same in the live view and after a restart.
func TestOtherNameTakesTheFirstName(t *testing.T) {
	cases := []struct {
		name  string
		links [][2]string // directory and name of each extra link, in order
		want  string
	}{
		// The earlier directory (lower inode) wins over names in b.
		{"across directories", [][2]string{{"b", "a"}, {"a", "z"}, {"c", "n"}}, "a/z"},
		// In one directory the names are compared.
		{"within a directory", [][2]string{{"b", "e"}, {"b", "c"}, {"c", "n"}}, "b/c"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			dirs := map[string]uint64{}
			for _, d := range []string{"a", "b", "c"} {
				dirs[d] = mkdir(t, v, RootIno, d).Ino
			}
			f := mkfile(t, v, dirs["b"], "f", "x")
			for _, l := range c.links {
				_, err := v.Link(f.Ino, dirs[l[0]], l[1])
				ok(t, "link "+l[0]+"/"+l[1], err)
			}
			// The newest name, which the record keeps, goes.
			last := c.links[len(c.links)-1]
			ok(t, "unlink the newest name", v.Unlink(dirs[last[0]], last[1]))
			wantPath(t, v, f.Ino, c.want, "live")
			v = e.reopen(v)
			defer v.Close()
			wantPath(t, v, f.Ino, c.want, "after a restart")
		})
	}
}

// TestOtherNameOfABaseFileWhoseDirectoryWent: after a restart a base
// file's remaining name is found where its origin says; if the base
// directory it came from is no longer there, the file has no path and
// the error says so (ErrNotFound) instead of naming a wrong place.
func TestOtherNameOfABaseFileWhoseDirectoryWent(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/d/f", "base") })
	v := e.view()
	d := lookup(t, v, RootIno, "d")
	f := lookup(t, v, d.Ino, "f")
	b := mkdir(t, v, RootIno, "b")
	_, err := v.Link(f.Ino, b.Ino, "g")
	ok(t, "link", err)
	ok(t, "unlink b/g", v.Unlink(b.Ino, "g"))
	v = e.reopen(v)
	t.Cleanup(func() { v.Close() }) // the view open when the test ends
	p, err := pathOfLocked(v, f.Ino)
	ok(t, "path with the base directory there", err)
	if p != "d/f" {
		t.Fatalf("path: got %q, want d/f", p)
	}
	v = e.reopen(v) // forget the base directory the view has seen
	ok(t, "remove the base directory", os.RemoveAll(filepath.Join(e.base, "d")))
	_, err = pathOfLocked(v, f.Ino)
	wantErr(t, "path with the base directory gone", err, ErrNotFound)
}

// TestLayerDeltaOverDamageBelowOrInTheLayer: the delta of the top layer of
// two reads every key it records in the stack below it and in the stack it
// tops; damage on either side (a record or entry of the layer below, a
// block or entry value of the layer itself) fails it with ErrCorrupt.
func TestLayerDeltaOverDamageBelowOrInTheLayer(t *testing.T) {
	type layers struct {
		l1, l2 string
		d, f   uint64 // directory d and file d/f, both made in l1
	}
	cases := []struct {
		name   string
		damage func(ls layers) (key, val []byte)
	}{
		{"record of the file below", func(ls layers) ([]byte, []byte) { return keyInode(ls.l1, ls.f), []byte{9} }},
		{"block of the file in the layer", func(ls layers) ([]byte, []byte) { return keyBlock(ls.l2, ls.f, 0), []byte{9} }},
		{"entry below", func(ls layers) ([]byte, []byte) { return keyEntry(ls.l1, ls.d, "g"), []byte{0xff} }},
		{"entry in the layer", func(ls layers) ([]byte, []byte) { return keyEntry(ls.l2, ls.d, "g"), []byte{0xff} }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			d := mkdir(t, v, RootIno, "d")
			f := mkfile(t, v, d.Ino, "f", "one")
			mkfile(t, v, d.Ino, "g", "g")
			ok(t, "close view", v.Close())
			l1 := freeze(t, e.store, "sb")
			v = e.view()
			_, err := v.WriteAt(f.Ino, []byte("two"), 0, false)
			ok(t, "write in the second layer", err)
			ok(t, "unlink d/g in the second layer", v.Unlink(d.Ino, "g"))
			ok(t, "close view", v.Close())
			l2 := freeze(t, e.store, "sb")
			key, val := c.damage(layers{l1: l1, l2: l2, d: d.Ino, f: f.Ino})
			corrupt(t, e.store, key, val)
			reopenStore(t, e)
			_, err = e.store.LayerDelta("sb", l2)
			wantErr(t, "delta over the damage", err, ErrCorrupt)
		})
	}
}

// TestRepointDiffOverADamagedDelta: when the delta of a layer a rollback
// leaves or joins cannot be read, RepointDiff still moves the head and the
// live view, and leaves the list of changes to the caller (nil) rather
// than telling a wrong one.
func TestRepointDiffOverADamagedDelta(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	mkfile(t, v, RootIno, "f", "f")
	ok(t, "close view", v.Close())
	l1 := freeze(t, e.store, "sb")
	v = e.view()
	mkfile(t, v, RootIno, "g", "g")
	ok(t, "close view", v.Close())
	l2 := freeze(t, e.store, "sb")
	// A short entry key: only a delta of l2 reads it.
	corrupt(t, e.store, append(prefixLayerTable(tEntry, l2), 1), []byte{9})
	reopenStore(t, e)
	_, err := e.store.LayerDelta("sb", l2)
	wantErr(t, "delta of the damaged layer", err, ErrCorrupt)
	v = e.view()
	t.Cleanup(func() { v.Close() })
	mkfile(t, v, RootIno, "h", "h")

	steps := []struct {
		name string
		to   string
		want []string
	}{
		{"leaving the damaged layer", l1, []string{"f"}},
		{"joining it again", l2, []string{"f", "g"}},
	}
	for _, s := range steps {
		_, ch, err := e.store.RepointDiff("sb", s.to, noRepointFn)
		ok(t, s.name, err)
		if ch != nil {
			t.Fatalf("%s: changes told over a damaged delta: %+v", s.name, ch)
		}
		if got := names(t, v, RootIno); !sameStrings(got, s.want) {
			t.Fatalf("%s: the view lists %v, want %v", s.name, got, s.want)
		}
	}
}

// TestFreezeOverADamagedLayerBelow: a freeze whose live view cannot tell
// the layer's delta (the block map below a file it changed is damaged)
// still freezes, and keeps no delta for the layer.
func TestFreezeOverADamagedLayerBelow(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "content")
	ok(t, "close view", v.Close())
	l1 := freeze(t, e.store, "sb")
	corrupt(t, e.store, keyBlock(l1, f.Ino, 0), []byte{9})
	reopenStore(t, e)
	v = e.view()
	defer v.Close()
	// A chmod copies the record up; the blocks below are not read.
	mode := uint32(0o600)
	_, err := v.SetAttr(f.Ino, SetAttrIn{Mode: &mode})
	ok(t, "chmod", err)
	l2, _, err := e.store.Freeze("sb", noFreezeFn)
	ok(t, "freeze", err)
	if d := e.store.deltas.get(l2); d != nil {
		t.Fatalf("a delta was kept for a layer whose state below is unreadable: %+v", d)
	}
	if got := names(t, v, RootIno); !sameStrings(got, []string{"f"}) {
		t.Fatalf("after the freeze the view lists %v", got)
	}
}

// TestInjectFaultOnRecordReads: the reads of layer and sandbox records
// that callers make ask the store's fault function with their own op name
// and key and fail with its error; another store's fault function leaves
// this store alone.
func TestInjectFaultOnRecordReads(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	mkfile(t, v, RootIno, "f", "x")
	ok(t, "close view", v.Close())
	l1 := freeze(t, e.store, "sb")
	boom := errors.New("boom")
	cases := []struct {
		op, key string
		run     func() error
	}{
		{"sandboxes", "", func() error { _, err := e.store.Sandboxes(); return err }},
		{"stack", "sb", func() error { _, err := e.store.Stack("sb"); return err }},
		{"layers", "sb", func() error { _, err := e.store.Layers("sb", true); return err }},
		{"usage", l1, func() error { _, err := e.store.LayerUsage(l1); return err }},
		{"layer", l1, func() error {
			return e.store.View(func(tx *Txn) error { _, err := tx.Layer(l1); return err })
		}},
		{"blocks", l1, func() error {
			return e.store.View(func(tx *Txn) error { _, err := tx.LayerUsage(l1); return err })
		}},
		{"compare", "sb", func() error { _, err := e.store.Compare("sb", "", l1, true); return err }},
	}
	for _, c := range cases {
		t.Run(c.op, func(t *testing.T) {
			ok(t, c.op+" with no fault", c.run())
			var asked []string
			restore := e.store.InjectFault(func(op, key string) error {
				asked = append(asked, op+" "+key)
				if op == c.op && key == c.key {
					return boom
				}
				return nil
			})
			err := c.run()
			restore()
			if !errors.Is(err, boom) {
				t.Fatalf("%s with a fault: %v", c.op, err)
			}
			if len(asked) == 0 || asked[0] != c.op+" "+c.key {
				t.Fatalf("the fault function was asked %v", asked)
			}
			ok(t, c.op+" after restore", c.run())
		})
	}
	// A fault on another store is not this store's.
	other := newEnv(t, MinBlockSize, nil)
	restore := other.store.InjectFault(func(string, string) error { return boom })
	defer restore()
	for _, c := range cases {
		ok(t, c.op+" beside another store's fault", c.run())
	}
}

// TestCreateSandboxOverANonUTF8Base: a base path that is not valid UTF-8
// would be stored (as JSON) as another path; the sandbox is refused.
func TestCreateSandboxOverANonUTF8Base(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	base := filepath.Join(t.TempDir(), "b\xff")
	ok(t, "mkdir", os.Mkdir(base, 0o755))
	_, err := e.store.CreateSandbox("odd", base, MinBlockSize)
	wantErr(t, "sandbox over a non-UTF-8 base", err, ErrInvalid)
	_, err = e.store.Sandbox("odd")
	wantErr(t, "the refused sandbox", err, ErrNotFound)
}

// TestBaseReadlinkErrors: reading the target of a base name that is gone,
// or is no symlink, fails instead of returning a target.
func TestBaseReadlinkErrors(t *testing.T) {
	dir := t.TempDir()
	put(t, filepath.Join(dir, "file"), "x")
	ok(t, "symlink", os.Symlink("file", filepath.Join(dir, "link")))
	b, err := openBase(dir)
	ok(t, "open base", err)
	defer b.close()
	target, err := b.readlink("link")
	ok(t, "readlink of a symlink", err)
	if target != "file" {
		t.Fatalf("target: got %q, want file", target)
	}
	for _, name := range []string{"missing", "file"} {
		if target, err := b.readlink(name); err == nil {
			t.Fatalf("readlink %s: got target %q, want an error", name, target)
		}
	}
}

// TestLayerDeltaOfABrokenStack: a layer's delta needs the sandbox and the
// whole chain below the layer; a missing sandbox, a missing parent record
// or a data file that cannot be opened fails it with the cause.
func TestLayerDeltaOfABrokenStack(t *testing.T) {
	cases := []struct {
		name    string
		sandbox string
		damage  func(e *testEnv, l1, l2 string)
		want    error
	}{
		{"missing sandbox", "nope", func(*testEnv, string, string) {}, ErrNotFound},
		{"parent record gone", "sb", func(e *testEnv, l1, _ string) {
			ok(t, "delete the parent record", e.store.update(func(txn *badger.Txn) error { return txn.Delete(keyLayer(l1)) }))
		}, nil},
		{"data file unopenable", "sb", func(e *testEnv, _, l2 string) {
			p := e.store.dataPath(l2)
			ok(t, "remove the data file", os.Remove(p))
			ok(t, "a link loop in its place", os.Symlink(filepath.Base(p), p))
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			mkfile(t, v, RootIno, "f", "f")
			ok(t, "close view", v.Close())
			l1 := freeze(t, e.store, "sb")
			v = e.view()
			mkfile(t, v, RootIno, "g", "g")
			ok(t, "close view", v.Close())
			l2 := freeze(t, e.store, "sb")
			c.damage(e, l1, l2)
			reopenStore(t, e)
			_, err := e.store.LayerDelta(c.sandbox, l2)
			if err == nil {
				t.Fatal("delta of a broken stack: no error")
			}
			if c.want != nil {
				wantErr(t, "delta of a broken stack", err, c.want)
			}
		})
	}
}

// TestRepointDiffToAMissingLayer: a live rollback to a layer that does not
// exist fails with ErrNotFound and leaves the sandbox where it was.
func TestRepointDiffToAMissingLayer(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	mkfile(t, v, RootIno, "f", "f")
	before, err := e.store.Sandbox("sb")
	ok(t, "sandbox", err)
	_, _, err = e.store.RepointDiff("sb", "no-such-layer", noRepointFn)
	wantErr(t, "rollback to a missing layer", err, ErrNotFound)
	after, err := e.store.Sandbox("sb")
	ok(t, "sandbox", err)
	if after.Head != before.Head {
		t.Fatalf("the head moved from %s to %s", before.Head, after.Head)
	}
	if got := names(t, v, RootIno); !sameStrings(got, []string{"f"}) {
		t.Fatalf("the view lists %v", got)
	}
}

// TestRemoveAFileTruncatedSinceTheLastSeal: blocks a seal stored and a
// truncation dropped before the next seal still have stored records; a
// file removed then leaves none of them behind, in any layer.
func TestRemoveAFileTruncatedSinceTheLastSeal(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "")
	_, err := v.WriteAt(f.Ino, make([]byte, 3*MinBlockSize), 0, false)
	ok(t, "write three blocks", err)
	ok(t, "sync", v.Sync())
	layer := v.activeLayer()
	stored := func() int {
		t.Helper()
		n := 0
		ok(t, "scan blocks", e.store.view(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixBlocks(layer, f.Ino)})
			defer it.Close()
			for it.Rewind(); it.Valid(); it.Next() {
				n++
			}
			return nil
		}))
		return n
	}
	if n := stored(); n != 3 {
		t.Fatalf("blocks stored after the sync: %d, want 3", n)
	}
	size := int64(MinBlockSize)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Size: &size})
	ok(t, "truncate to one block", err)
	ok(t, "unlink", v.Unlink(RootIno, "f"))
	ok(t, "close view", v.Close())
	if n := stored(); n != 0 {
		t.Fatalf("blocks left of a removed file: %d", n)
	}
}

// TestPathOfACopiedUpBaseFileWhoseDirectoryWent: a base file changed in
// place is named by its origin; after a restart, with its base directory
// gone, it has no path, and the error says the directory is missing.
func TestPathOfACopiedUpBaseFileWhoseDirectoryWent(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/d/f", "base") })
	v := e.view()
	d := lookup(t, v, RootIno, "d")
	f := lookup(t, v, d.Ino, "f")
	mode := uint32(0o600)
	_, err := v.SetAttr(f.Ino, SetAttrIn{Mode: &mode})
	ok(t, "chmod", err)
	v = e.reopen(v)
	t.Cleanup(func() { v.Close() })
	p, err := pathOfLocked(v, f.Ino)
	ok(t, "path with the base directory there", err)
	if p != "d/f" {
		t.Fatalf("path: got %q, want d/f", p)
	}
	v = e.reopen(v) // forget the base directory the view has seen
	ok(t, "remove the base directory", os.RemoveAll(filepath.Join(e.base, "d")))
	_, err = pathOfLocked(v, f.Ino)
	if !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("path with the base directory gone: got %v, want ENOENT", err)
	}
}

// TestMapOSErrClosedStore: the metadata store's "closed" error is told to
// callers as ErrClosed, keeping the cause.
func TestMapOSErrClosedStore(t *testing.T) {
	got := mapOSErr(badger.ErrDBClosed)
	if !errors.Is(got, ErrClosed) || !errors.Is(got, badger.ErrDBClosed) {
		t.Fatalf("mapOSErr(ErrDBClosed): got %v, want ErrClosed wrapping the cause", got)
	}
}

// TestFreezeWhenTheSpareDataFileWent: a freeze hands the next layer the
// spare data file made in advance; if the spare is gone, the next layer
// makes its own, and data written to it is kept across a restart.
func TestFreezeWhenTheSpareDataFileWent(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	for _, p := range waitSpares(t, v, keepSpares) {
		ok(t, "remove a spare", os.Remove(p))
	}
	_, next, err := e.store.Freeze("sb", noFreezeFn)
	ok(t, "freeze", err)
	if _, err := os.Stat(e.store.dataPath(next)); err != nil {
		t.Fatalf("the next layer has no data file: %v", err)
	}
	want := strings.Repeat("n", 2*MinBlockSize)
	f := mkfile(t, v, RootIno, "f", want)
	ok(t, "sync", v.Sync())
	v = e.reopen(v)
	if got := content(t, v, f.Ino); got != want {
		t.Fatalf("after a restart the file holds %d bytes, want %d", len(got), len(want))
	}
}

// waitSpares waits until v keeps n spare data files and returns their
// paths.
func waitSpares(t *testing.T, v *View, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		v.mu.Lock()
		var paths []string
		for _, sp := range v.spares {
			paths = append(paths, sp.path)
		}
		v.mu.Unlock()
		if len(paths) >= n {
			return paths
		}
	}
	t.Fatalf("the view made fewer than %d spare data files in 20 s", n)
	return nil
}

// TestSpareMadeWhileTheJournalIsBusy: after a freeze takes the spare data
// file, the next one is made even while the journal cannot commit (its
// lock held here, as by a long commit), so the next checkpoint does not
// create a file on its own critical path. The journal loop made spares
// once, and behind a busy journal they were missing for every other
// checkpoint of a benchmark's steady edits.
func TestSpareMadeWhileTheJournalIsBusy(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	waitSpares(t, v, keepSpares)
	v.cmu.Lock()
	// A write kicks the journal, which then waits for cmu.
	mkfile(t, v, RootIno, "f", "x")
	time.Sleep(3 * journalDelay)
	// What freezes do with the spares, while the journal cannot.
	var layers []string
	v.mu.Lock()
	for range keepSpares {
		layers = append(layers, NewID())
		v.useSpareLocked(layers[len(layers)-1])
	}
	v.mu.Unlock()
	got := waitSpares(t, v, keepSpares)
	v.cmu.Unlock()
	for _, p := range got {
		for _, l := range layers {
			if p == e.store.dataPath(l) {
				t.Fatalf("the spare %s is a new layer's own data file", p)
			}
		}
	}
}

// TestFreezeWhenABaseFileVanished: the base is not to change under a
// sandbox; when a base file the layer changed vanishes anyway, the state
// below the layer cannot be told, and the freeze still goes ahead without
// keeping a delta for the layer.
func TestFreezeWhenABaseFileVanished(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/f", "base") })
	v := e.view()
	f := lookup(t, v, RootIno, "f")
	chmod := func(mode uint32) {
		t.Helper()
		_, err := v.SetAttr(f.Ino, SetAttrIn{Mode: &mode})
		ok(t, "chmod", err)
	}
	chmod(0o600)
	ok(t, "close view", v.Close())
	freeze(t, e.store, "sb")
	reopenStore(t, e)
	// The view now loads f from its record, not from a stat of the base.
	v = e.view()
	defer v.Close()
	chmod(0o640)
	ok(t, "remove the base file", os.Remove(filepath.Join(e.base, "f")))
	l, _, err := e.store.Freeze("sb", noFreezeFn)
	ok(t, "freeze", err)
	if d := e.store.deltas.get(l); d != nil {
		t.Fatalf("a delta was kept for a layer whose state below is unknown: %+v", d)
	}
}
