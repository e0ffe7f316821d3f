package layers

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

func noFreezeFn(*Txn, string, string) error { return nil }

func noRepointFn(*Txn, []string, []string, string) error { return nil }

func freeze(t *testing.T, s *Store, name string) string {
	t.Helper()
	frozen, _, err := s.Freeze(name, noFreezeFn)
	ok(t, "freeze", err)
	return frozen
}

// TestFrozenLayersMerge builds a stack of several frozen layers with
// writes, truncations, whiteouts and renames in each, and checks the merged
// view, a reopen of it, and snapshots of every frozen layer.
func TestFrozenLayersMerge(t *testing.T) {
	const bs = MinBlockSize
	orig := bytes.Repeat([]byte("B"), 3*bs+10)
	e := newEnv(t, bs, func(base string) {
		put(t, base+"/f", string(orig))
		put(t, base+"/gone", "gone")
		put(t, base+"/d/x", "x")
	})
	v := e.view()
	defer func() { v.Close() }()
	f := lookup(t, v, RootIno, "f")
	m := model(append([]byte(nil), orig...))
	write := func(p string, off int64) {
		t.Helper()
		_, err := v.WriteAt(f.Ino, []byte(p), off, false)
		ok(t, "write", err)
		m.write([]byte(p), off)
	}
	trunc := func(n int64) {
		t.Helper()
		_, err := v.SetAttr(f.Ino, SetAttrIn{Size: &n})
		ok(t, "truncate", err)
		m.truncate(n)
	}
	var snaps []string
	var models []model
	// Layer 1: a write in block 1, a whiteout, a new dir.
	write("one", bs+5)
	ok(t, "unlink gone", v.Unlink(RootIno, "gone"))
	nd := mkdir(t, v, RootIno, "nd")
	mkfile(t, v, nd.Ino, "inner", "inner")
	snaps = append(snaps, freeze(t, e.store, "sb"))
	models = append(models, append(model(nil), m...))
	// Layer 2: truncate into block 1 (hiding base block 2 and 3), rename a
	// base dir, write block 0.
	trunc(bs + 6)
	write("two", 0)
	ok(t, "rename", v.Rename(RootIno, "d", nd.Ino, "d2", 0))
	snaps = append(snaps, freeze(t, e.store, "sb"))
	models = append(models, append(model(nil), m...))
	// A second file truncated to a block boundary in layer 2 over blocks
	// written in layer 1.
	g := mkfile(t, v, RootIno, "g", string(bytes.Repeat([]byte("g"), 3*bs)))
	gm := model(bytes.Repeat([]byte("g"), 3*bs))
	freeze(t, e.store, "sb")
	aligned := int64(bs)
	_, err := v.SetAttr(g.Ino, SetAttrIn{Size: &aligned})
	ok(t, "truncate g", err)
	gm.truncate(bs)
	freeze(t, e.store, "sb")
	grown := int64(3 * bs)
	_, err = v.SetAttr(g.Ino, SetAttrIn{Size: &grown})
	ok(t, "grow g", err)
	gm.truncate(3 * bs)
	// Layer 3: grow again: the hidden bytes must read as zeros.
	trunc(4 * bs)
	write("three", 3*bs)
	checkModel(t, v, f.Ino, m, "live")
	if _, err := v.Lookup(RootIno, "gone"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("whiteout from a frozen layer: got %v", err)
	}
	v = e.reopen(v)
	lookup(t, v, RootIno, "f")
	checkModel(t, v, f.Ino, m, "after reopen")
	checkModel(t, v, g.Ino, gm, "g after reopen")
	x := lookup(t, v, lookup(t, v, nd.Ino, "d2").Ino, "x")
	if got := content(t, v, x.Ino); got != "x" {
		t.Fatalf("moved base dir: got %q", got)
	}
	if got := names(t, v, RootIno); !sameStrings(got, []string{"f", "g", "nd"}) {
		t.Fatalf("root: got %v, want [f g nd]", got)
	}
	// Recreating a name whited out in a frozen layer, then removing it
	// again, leaves the whiteout in place.
	mkfile(t, v, RootIno, "gone", "again")
	ok(t, "unlink again", v.Unlink(RootIno, "gone"))
	mkdir(t, v, RootIno, "gone")
	ok(t, "rmdir", v.Rmdir(RootIno, "gone"))
	v = e.reopen(v)
	if got := names(t, v, RootIno); !sameStrings(got, []string{"f", "g", "nd"}) {
		t.Fatalf("root after re-removal: got %v, want [f g nd]", got)
	}
	for i, id := range snaps {
		sv, err := e.store.OpenSnapshot("sb", id)
		ok(t, "snapshot", err)
		sf := lookup(t, sv, RootIno, "f")
		checkModel(t, sv, sf.Ino, models[i], "snapshot")
		_, err = sv.WriteAt(sf.Ino, []byte("x"), 0, false)
		wantErr(t, "write to a snapshot", err, ErrReadOnly)
		ok(t, "close snapshot", sv.Close())
		if e.store.LiveView("sb") != v {
			t.Fatalf("LiveView changed by a snapshot")
		}
	}
	_, err = e.store.OpenSnapshot("nope", snaps[0])
	wantErr(t, "snapshot of a missing sandbox", err, ErrNotFound)
	_, err = e.store.OpenSnapshot("sb", "nope")
	wantErr(t, "snapshot of a missing layer", err, ErrNotFound)
	checkModel(t, v, f.Ino, m, "end")
}

func TestFreezeAndRepoint(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/f", "base") })
	s := e.store
	// Freeze without a live view.
	v := e.view()
	f := lookup(t, v, RootIno, "f")
	_, err := v.WriteAt(f.Ino, []byte("ONE!"), 0, false)
	ok(t, "write", err)
	ok(t, "close", v.Close())
	var seen [2]string
	l1, next, err := s.Freeze("sb", func(tx *Txn, frozen, next string) error {
		seen = [2]string{frozen, next}
		info, err := tx.Sandbox("sb")
		if err != nil || info.Head != next {
			t.Fatalf("head inside the freeze: got %+v, %v; want %s", info, err, next)
		}
		l, err := tx.Layer(frozen)
		if err != nil || l.State != StateFrozen {
			t.Fatalf("frozen layer inside the freeze: got %+v, %v", l, err)
		}
		return tx.Set("x/cp/"+frozen, []byte("1"))
	})
	ok(t, "freeze", err)
	if seen != [2]string{l1, next} {
		t.Fatalf("fn args: got %v, want %v", seen, [2]string{l1, next})
	}
	boom := errors.New("boom")
	_, _, err = s.Freeze("sb", func(*Txn, string, string) error { return boom })
	wantErr(t, "failing freeze fn", err, boom)
	if stack, _ := s.Stack("sb"); len(stack) != 2 || stack[0] != next || stack[1] != l1 {
		t.Fatalf("stack after a failed freeze: got %v, want [%s %s]", stack, next, l1)
	}
	_, _, err = s.Freeze("nope", noFreezeFn)
	wantErr(t, "freeze a missing sandbox", err, ErrNotFound)
	_, err = s.Repoint("sb", next, noRepointFn)
	wantErr(t, "repoint onto the active layer", err, ErrInvalid)
	_, err = s.Repoint("sb", "nope", noRepointFn)
	wantErr(t, "repoint onto a missing layer", err, ErrNotFound)

	// Freeze with a live view.
	v = e.view()
	f = lookup(t, v, RootIno, "f")
	_, err = v.WriteAt(f.Ino, []byte("TWO!"), 0, false)
	ok(t, "write", err)
	l2, _, err := s.Freeze("sb", noFreezeFn)
	ok(t, "live freeze", err)
	_, err = v.WriteAt(f.Ino, []byte("3"), 0, false)
	ok(t, "write after freeze", err)
	if got := content(t, v, f.Ino); got != "3WO!" {
		t.Fatalf("after a live freeze: got %q", got)
	}
	usage, err := s.LayerUsage(l2)
	if err != nil || usage.Blocks != 1 || usage.Files != 1 {
		t.Fatalf("LayerUsage: got %d blocks in %d files, %v; want 1 in 1", usage.Blocks, usage.Files, err)
	}
	if ls, err := s.Layers("sb", false); err != nil || len(ls) != 3 || ls[1].ID != l2 || ls[2].ID != l1 {
		t.Fatalf("Layers: got %+v, %v", ls, err)
	}

	// Repoint the live view back to l1: l2 and the active layer are archived.
	epoch := v.Epoch()
	var left, joined []string
	head, err := s.Repoint("sb", l1, func(tx *Txn, l, j []string, next string) error {
		left, joined = l, j
		return nil
	})
	ok(t, "repoint", err)
	if v.Epoch() != epoch+1 {
		t.Fatalf("epoch: got %d, want %d", v.Epoch(), epoch+1)
	}
	if len(left) != 2 || left[1] != l2 || len(joined) != 0 {
		t.Fatalf("left %v joined %v; want [active %s] and none", left, l2, joined)
	}
	if got := content(t, v, f.Ino); got != "ONE!" {
		t.Fatalf("after repoint: got %q, want %q", got, "ONE!")
	}
	if l, _ := s.Layer(l2); l.State != StateArchived {
		t.Fatalf("l2 state: got %s, want archived", l.State)
	}
	arch, err := s.Layers("sb", true)
	ok(t, "layers with archived", err)
	if len(arch) != 4 {
		t.Fatalf("layers with archived: got %d, want 4 (2 in the stack, 2 archived)", len(arch))
	}
	// Roll forward to the archived l2: it joins the stack again.
	ok(t, "close", v.Close())
	_, err = s.Repoint("sb", l2, func(tx *Txn, l, j []string, next string) error {
		left, joined = l, j
		return nil
	})
	ok(t, "repoint without a view", err)
	if len(joined) != 1 || joined[0] != l2 {
		t.Fatalf("joined: got %v, want [%s]", joined, l2)
	}
	_ = head
	v = e.view()
	defer v.Close()
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != "TWO!" {
		t.Fatalf("after roll forward: got %q, want %q", got, "TWO!")
	}
	if s.LiveView("sb") != v || s.LiveView("nope") != nil {
		t.Fatalf("LiveView: wrong answers")
	}
	_, err = s.Repoint("sb", l1, func(*Txn, []string, []string, string) error { return boom })
	wantErr(t, "failing repoint fn", err, boom)
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != "TWO!" {
		t.Fatalf("after a failed repoint: got %q, want %q", got, "TWO!")
	}
	// Layer state changes through a transaction.
	ok(t, "set state", s.Update(func(tx *Txn) error { return tx.SetLayerState(l1, StateFrozen) }))
	info, _ := s.Sandbox("sb")
	err = s.Update(func(tx *Txn) error { return tx.SetLayerState(info.Head, StateFrozen) })
	wantErr(t, "set state of the active layer", err, ErrInvalid)
	err = s.Update(func(tx *Txn) error { return tx.SetLayerState("nope", StateFrozen) })
	wantErr(t, "set state of a missing layer", err, ErrNotFound)
	err = s.View(func(tx *Txn) error { _, err := tx.Layer("nope"); return err })
	wantErr(t, "Txn.Layer missing", err, ErrNotFound)
	err = s.View(func(tx *Txn) error { _, err := tx.Sandbox("nope"); return err })
	wantErr(t, "Txn.Sandbox missing", err, ErrNotFound)
}

func TestFreezeReadOnlyAndClosedViews(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v, err := e.store.OpenView("sb", true)
	ok(t, "open ro", err)
	_, _, err = e.store.Freeze("sb", noFreezeFn)
	wantErr(t, "freeze through a read-only view", err, ErrReadOnly)
	ok(t, "close", v.Close())
	// A head that is not active (a damaged store) cannot be frozen.
	info, _ := e.store.Sandbox("sb")
	ok(t, "damage", e.store.update(func(txn *badger.Txn) error { return setLayerState(txn, info.Head, StateFrozen) }))
	_, _, err = e.store.Freeze("sb", noFreezeFn)
	wantErr(t, "freeze a frozen head", err, ErrCorrupt)
}

func TestForkAndGarbageCollection(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/f", "base") })
	s := e.store
	v := e.view()
	mkfile(t, v, RootIno, "shared", "shared data")
	ok(t, "close", v.Close())
	l1 := freeze(t, s, "sb")
	for _, c := range []struct {
		name, sandbox, layer string
		want                 error
	}{
		{"bad name", "/x", l1, ErrInvalid},
		{"existing name", "sb", l1, ErrExists},
		{"missing layer", "fk", "nope", ErrNotFound},
	} {
		_, err := s.Fork(c.sandbox, c.layer)
		wantErr(t, c.name, err, c.want)
	}
	info, _ := s.Sandbox("sb")
	_, err := s.Fork("fk", info.Head)
	wantErr(t, "fork of an active layer", err, ErrInvalid)
	fk, err := s.Fork("fk", l1)
	ok(t, "fork", err)
	if fk.Base != e.base || fk.BlockSize != MinBlockSize {
		t.Fatalf("fork: got %+v", fk)
	}
	fv, err := s.OpenView("fk", false)
	ok(t, "open fork", err)
	sh := lookup(t, fv, RootIno, "shared")
	if got := content(t, fv, sh.Ino); got != "shared data" {
		t.Fatalf("fork sees: got %q", got)
	}
	_, err = fv.WriteAt(sh.Ino, []byte("FORK"), 0, false)
	ok(t, "write in fork", err)
	ok(t, "close fork", fv.Close())
	v = e.view()
	if got := content(t, v, lookup(t, v, RootIno, "shared").Ino); got != "shared data" {
		t.Fatalf("origin after the fork wrote: got %q", got)
	}
	ok(t, "close", v.Close())

	// Archive l1's successor, pin it, and collect: pinned layers stay.
	l2 := freeze(t, s, "sb")
	ok(t, "pin", s.Update(func(tx *Txn) error { return tx.Pin(l2, "cp1") }))
	err = s.Update(func(tx *Txn) error { return tx.Pin("nope", "cp1") })
	wantErr(t, "pin a missing layer", err, ErrNotFound)
	_, err = s.Repoint("sb", l1, noRepointFn)
	ok(t, "repoint", err)
	res, err := s.CollectGarbage()
	ok(t, "gc", err)
	if _, err := s.Layer(l2); err != nil {
		t.Fatalf("pinned layer after gc: %v", err)
	}
	ok(t, "unpin", s.Update(func(tx *Txn) error { return tx.Unpin(l2, "cp1") }))
	// An orphan data file (a crash between commit and cleanup) goes too.
	orphan := filepath.Join(s.Dir(), "data", NewID())
	ok(t, "orphan", os.WriteFile(orphan, []byte("junk"), 0o600))
	res, err = s.CollectGarbage()
	ok(t, "gc", err)
	if _, err := s.Layer(l2); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unpinned archived layer after gc: got %v, want ErrNotFound", err)
	}
	if _, err := os.Stat(orphan); !os.IsNotExist(err) {
		t.Fatalf("orphan data file after gc: %v", err)
	}
	if res.DataFiles < 1 || len(res.Layers) < 1 {
		t.Fatalf("gc result: got %+v", res)
	}
	// Removing the fork keeps l1, which sb still stands on.
	ok(t, "remove fork", s.RemoveSandbox("fk"))
	if _, err := s.Layer(l1); err != nil {
		t.Fatalf("shared layer after removing the fork: %v", err)
	}
	v = e.view()
	defer v.Close()
	if got := content(t, v, lookup(t, v, RootIno, "shared").Ino); got != "shared data" {
		t.Fatalf("sb after removing the fork: got %q", got)
	}
}

func TestFingerprintAndVerify(t *testing.T) {
	const bs = MinBlockSize
	e := newEnv(t, bs, func(base string) {
		put(t, base+"/a", string(bytes.Repeat([]byte("a"), 2*bs+1)))
		put(t, base+"/b", string(bytes.Repeat([]byte("a"), 2*bs+1)))
	})
	v := e.view()
	defer func() { v.Close() }()
	a := lookup(t, v, RootIno, "a")
	b := lookup(t, v, RootIno, "b")
	fp := func(ino uint64) string {
		t.Helper()
		s, err := v.Fingerprint(ino)
		ok(t, "fingerprint", err)
		return s
	}
	fa0 := fp(a.Ino)
	if fa0 != fp(a.Ino) {
		t.Fatalf("fingerprint not stable")
	}
	_, err := v.WriteAt(a.Ino, []byte("X"), bs, false)
	ok(t, "write", err)
	fa1 := fp(a.Ino) // an unsealed block
	if fa1 == fa0 {
		t.Fatalf("fingerprint unchanged by a write")
	}
	ok(t, "sync", v.Sync())
	if fp(a.Ino) != fa1 {
		t.Fatalf("fingerprint changed by sealing")
	}
	n := mkfile(t, v, RootIno, "n", "")
	_, err = v.WriteAt(n.Ino, []byte("X"), bs, false) // block 0 is a hole
	ok(t, "write", err)
	fp(n.Ino)
	l, err := v.Symlink(RootIno, "l", "target", root)
	ok(t, "symlink", err)
	l2, err := v.Symlink(RootIno, "l2", "target", root)
	ok(t, "symlink", err)
	if fp(l.Ino) != fp(l2.Ino) {
		t.Fatalf("equal symlinks fingerprint differently")
	}
	_, err = v.Fingerprint(1 << 61)
	wantErr(t, "fingerprint of a missing inode", err, ErrNotFound)
	for _, ino := range []uint64{a.Ino, b.Ino, n.Ino, l.Ino, RootIno} {
		ok(t, "verify", v.VerifyData(ino))
	}
	wantErr(t, "verify a missing inode", v.VerifyData(1<<61), ErrNotFound)
}

// TestRemoveWhatAFrozenLayerCreated removes, in the active layer, a file
// and a directory that a frozen layer created: they are gone from the live
// view (also after a reopen) and still there in the frozen layer's snapshot.
func TestRemoveWhatAFrozenLayerCreated(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer func() { v.Close() }()
	f := mkfile(t, v, RootIno, "f", "in layer one")
	d := mkdir(t, v, RootIno, "d")
	l1 := freeze(t, e.store, "sb")
	ok(t, "unlink", v.Unlink(RootIno, "f"))
	ok(t, "rmdir", v.Rmdir(RootIno, "d"))
	for pass := 0; pass < 2; pass++ {
		if got := names(t, v, RootIno); len(got) != 0 {
			t.Fatalf("pass %d: root: got %v, want empty", pass, got)
		}
		for _, ino := range []uint64{f.Ino, d.Ino} {
			if a, err := v.GetAttr(ino); err == nil && a.Nlink != 0 {
				t.Fatalf("pass %d: removed inode %d: got nlink %d, want gone or 0", pass, ino, a.Nlink)
			}
		}
		v = e.reopen(v)
	}
	sv, err := e.store.OpenSnapshot("sb", l1)
	ok(t, "snapshot", err)
	defer sv.Close()
	if got := content(t, sv, lookup(t, sv, RootIno, "f").Ino); got != "in layer one" {
		t.Fatalf("snapshot f: got %q", got)
	}
	lookup(t, sv, RootIno, "d")
}

// TestChainTo: the records from the head down to a target on the chain,
// and the whole chain when the target is not on it; a cycle is damage.
func TestChainTo(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	l1 := freeze(t, e.store, e.name)
	l2 := freeze(t, e.store, e.name)
	l3 := freeze(t, e.store, e.name)
	info, err := e.store.Sandbox(e.name)
	ok(t, "sandbox", err)
	head := info.Head
	for _, c := range []struct {
		target  string
		want    []string
		onChain bool
	}{
		{head, []string{head}, true},
		{l2, []string{head, l3, l2}, true},
		{l1, []string{head, l3, l2, l1}, true},
		{"", []string{head, l3, l2, l1}, false},
		{"elsewhere", []string{head, l3, l2, l1}, false},
	} {
		var got []LayerInfo
		var on bool
		ok(t, "view", e.store.db.View(func(txn *badger.Txn) error {
			var err error
			got, on, err = chainTo(txn, head, c.target)
			return err
		}))
		if !slices.Equal(layerIDs(got), c.want) || on != c.onChain {
			t.Errorf("chain to %q: %v, %v; want %v, %v", c.target, layerIDs(got), on, c.want, c.onChain)
		}
	}
	// l1 made its own grandparent.
	ok(t, "update", e.store.db.Update(func(txn *badger.Txn) error {
		var l LayerInfo
		if err := getJSON(txn, keyLayer(l1), &l); err != nil {
			return err
		}
		l.Parent = l2
		return putJSON(txn, keyLayer(l1), l)
	}))
	err = e.store.db.View(func(txn *badger.Txn) error {
		_, _, err := chainTo(txn, head, "")
		return err
	})
	wantErr(t, "chain with a cycle", err, ErrCorrupt)
	// l2's record gone: the walk stops at l3's parent with ErrNotFound.
	ok(t, "delete", e.store.db.Update(func(txn *badger.Txn) error { return txn.Delete(keyLayer(l2)) }))
	err = e.store.db.View(func(txn *badger.Txn) error {
		_, _, err := chainTo(txn, head, l1)
		return err
	})
	wantErr(t, "chain with a missing layer", err, ErrNotFound)
}

// TestRepointRefusesAStackNotStored: a rollback takes the chain below its
// target from the live view's stack; a view whose stack is not the stored
// chain is refused as damage, and nothing moves.
func TestRepointRefusesAStackNotStored(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	l1 := freeze(t, e.store, e.name)
	freeze(t, e.store, e.name)
	before, err := e.store.Sandbox(e.name)
	ok(t, "sandbox", err)
	v.mu.Lock()
	kept := v.stack
	v.stack = append([]string{kept[0], "not-a-layer"}, kept[2:]...)
	v.mu.Unlock()
	_, err = e.store.Repoint(e.name, l1, func(*Txn, []string, []string, string) error { return nil })
	v.mu.Lock()
	v.stack = kept
	v.mu.Unlock()
	wantErr(t, "repoint with a stack not stored", err, ErrCorrupt)
	after, err := e.store.Sandbox(e.name)
	ok(t, "sandbox", err)
	if after.Head != before.Head {
		t.Fatalf("the head moved from %s to %s", before.Head, after.Head)
	}
}

// TestFreezesWithoutSpareFiles: when spare data files cannot be made (the
// spare directory is gone, a file in its place), each new active layer
// creates its data file itself, and what every layer holds reads back,
// live and after a reopen (which needs the directory back: the store makes
// it on open). With the directory back, spares are made again.
func TestFreezesWithoutSpareFiles(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer func() { v.Close() }()
	spareDir := filepath.Dir(e.store.sparePath("x"))
	// Wait for the view's first spares, then take their directory away:
	// the spares it holds cannot be renamed into data/ any more either.
	deadline := time.Now().Add(5 * time.Second)
	for {
		v.mu.Lock()
		n := len(v.spares)
		v.mu.Unlock()
		if n == keepSpares || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	ok(t, "remove spares", os.RemoveAll(spareDir))
	ok(t, "a file in their place", os.WriteFile(spareDir, nil, 0o600))
	want := map[string]string{}
	for i := range 4 {
		name, body := fmt.Sprintf("f%d", i), strings.Repeat(fmt.Sprint(i), MinBlockSize+i)
		mkfile(t, v, RootIno, name, body)
		want[name] = body
		freeze(t, e.store, e.name)
	}
	if v.makeOneSpare() {
		t.Fatal("a spare was made with no directory to make it in")
	}
	check := func(when string) {
		t.Helper()
		for name, body := range want {
			if got := content(t, v, lookup(t, v, RootIno, name).Ino); got != body {
				t.Fatalf("%s: %s reads %d bytes, want %d", when, name, len(got), len(body))
			}
		}
	}
	check("live")
	ok(t, "remove the file", os.Remove(spareDir))
	ok(t, "spare directory back", os.Mkdir(spareDir, 0o700))
	// The journal loop may have made them first, on a request left over.
	v.makeOneSpare()
	v.mu.Lock()
	have := len(v.spares)
	v.mu.Unlock()
	if have == 0 {
		t.Fatal("no spare made with the directory back")
	}
	v = e.reopen(v)
	check("after a reopen")
}
