package layers

import (
	"os"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// storedRecord reads inode ino's record from layer.
func storedRecord(t *testing.T, s *Store, layer string, ino uint64) *Inode {
	t.Helper()
	var rec *Inode
	err := s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(keyInode(layer, ino))
		if err != nil {
			return err
		}
		return item.Value(func(b []byte) error {
			var err error
			rec, err = decodeInode(b)
			return err
		})
	})
	ok(t, "read record", err)
	return rec
}

// TestParentOriginAfterFreeze: a base file copied up after a freeze (which
// drops the view's cached inodes) records the base path of the directory
// that listed it, so a later view that never listed that directory still
// finds the file's path.
func TestParentOriginAfterFreeze(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/bd/f", "base") })
	v := e.view()
	defer func() { v.Close() }()
	bd := lookup(t, v, RootIno, "bd")
	f := lookup(t, v, bd.Ino, "f")
	l1 := freeze(t, e.store, "sb")
	_, err := v.WriteAt(f.Ino, []byte("B"), 0, false)
	ok(t, "copy-up write", err)
	ok(t, "sync", v.Sync())
	stack, err := e.store.Stack("sb")
	ok(t, "stack", err)
	head := stack[0]
	rec := storedRecord(t, e.store, head, f.Ino)
	if !rec.HasParent || rec.Parent != bd.Ino || rec.Name != "f" || rec.ParentOrigin != "bd" {
		t.Fatalf("copied-up record: parent %d %q (has %v), parent origin %q; want %d \"f\" in \"bd\"",
			rec.Parent, rec.Name, rec.HasParent, rec.ParentOrigin, bd.Ino)
	}
	ch, err := e.store.Compare("sb", l1, head, true)
	ok(t, "compare", err)
	if len(ch.Inodes) != 1 || ch.Inodes[0].Ino != f.Ino || ch.Inodes[0].Path != "bd/f" {
		t.Fatalf("changes: got %+v, want inode %d at bd/f", ch.Inodes, f.Ino)
	}
}

// TestMoveThroughUnloadedBaseDirs moves a directory into a base directory
// a fresh view reaches by number only: the ancestry walk goes up through
// the parents the records name and their base paths, and stops where the
// base has not been listed.
func TestMoveThroughUnloadedBaseDirs(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { ok(t, "mkdir", os.MkdirAll(base+"/a/b/c", 0o755)) })
	v := e.view()
	a := lookup(t, v, RootIno, "a")
	b := lookup(t, v, a.Ino, "b")
	c := lookup(t, v, b.Ino, "c")
	mkfile(t, v, c.Ino, "f", "") // copies c up: its record names b, at base path a/b
	x := mkdir(t, v, RootIno, "x")
	v = e.reopen(v)
	defer func() { v.Close() }()
	ok(t, "move x into c", v.Rename(RootIno, "x", c.Ino, "x", 0))
	if got := names(t, v, RootIno); !sameStrings(got, []string{"a"}) {
		t.Fatalf("root after the move: got %v, want [a]", got)
	}
	a = lookup(t, v, RootIno, "a")
	b = lookup(t, v, a.Ino, "b")
	c = lookup(t, v, b.Ino, "c")
	if got := lookup(t, v, c.Ino, "x"); got.Ino != x.Ino {
		t.Fatalf("a/b/c/x: got inode %d, want %d", got.Ino, x.Ino)
	}
	if got := names(t, v, c.Ino); !sameStrings(got, []string{"f", "x"}) {
		t.Fatalf("a/b/c: got %v, want [f x]", got)
	}
}

// TestMoveBelowDamagedAncestor: a record that does not load ends the
// ancestry walk; the move itself, which does not need it, goes ahead.
func TestMoveBelowDamagedAncestor(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	p := mkdir(t, v, RootIno, "p")
	q := mkdir(t, v, p.Ino, "q")
	y := mkdir(t, v, RootIno, "y")
	ok(t, "close", v.Close())
	info, err := e.store.Sandbox("sb")
	ok(t, "sandbox", err)
	corrupt(t, e.store, keyInode(info.Head, p.Ino), []byte{9})
	v = e.view()
	defer v.Close()
	ok(t, "move y into q", v.Rename(RootIno, "y", q.Ino, "y", 0))
	if got := lookup(t, v, q.Ino, "y"); got.Ino != y.Ino {
		t.Fatalf("q/y: got inode %d, want %d", got.Ino, y.Ino)
	}
	_, err = v.GetAttr(p.Ino)
	wantErr(t, "the damaged record", err, ErrCorrupt)
}
