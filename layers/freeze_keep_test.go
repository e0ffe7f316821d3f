package layers

// Open tmpfiles and removed inodes the kernel still holds live only in the
// view's cache; a freeze must carry them over to the new stack. And the
// ancestry check of rename must see through base directories the view has
// not listed.

import (
	"os"
	"testing"
)

// TestTmpfileSurvivesFreeze: a checkpoint taken while an O_TMPFILE file is
// open must not change what the file is. Freeze replaces the view's stack
// and forgets every cached inode; a tmpfile exists only in that cache (it
// has no record until written and sealed, and its "may be linked" mark is
// never stored), so afterwards an unwritten one is ENOENT to every
// operation and a written one can no longer be linked in.
func TestTmpfileSurvivesFreeze(t *testing.T) {
	for _, written := range []bool{false, true} {
		e := newEnv(t, MinBlockSize, nil)
		v := e.view()
		tf, err := v.Tmpfile(RootIno, 0o600, root)
		ok(t, "tmpfile", err)
		if written {
			_, err = v.WriteAt(tf.Ino, []byte("abc"), 0, false)
			ok(t, "write", err)
		}
		freeze(t, e.store, "sb")
		_, err = v.WriteAt(tf.Ino, []byte("def"), 3, false)
		if err != nil {
			t.Fatalf("written=%v: write after a freeze: %v", written, err)
		}
		if _, err := v.Link(tf.Ino, RootIno, "named"); err != nil {
			t.Fatalf("written=%v: link after a freeze: %v", written, err)
		}
		want := "\x00\x00\x00def"
		if written {
			want = "abcdef"
		}
		if got := content(t, v, lookup(t, v, RootIno, "named").Ino); got != want {
			t.Fatalf("written=%v: linked tmpfile: got %q, want %q", written, got, want)
		}
		v.Release(tf.Ino)
		ok(t, "close", v.Close())
	}
}

// TestMoveBelowOwnBaseDescendant: the view refuses, for its Go API callers,
// to move a directory below itself. When the walk up from the target meets
// a base directory the view has not listed (after a restart), it stops and
// allows the move, so a base directory can be moved into its own subtree,
// which detaches both from the tree. (Through FUSE the kernel refuses such
// a rename itself.) parentOf could find an untouched base directory's
// parent from its origin, as pathOf does (lstat of path.Dir(origin)).
func TestMoveBelowOwnBaseDescendant(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { ok(t, "mkdir", os.MkdirAll(base+"/a/b/c", 0o755)) })
	v := e.view()
	a := lookup(t, v, RootIno, "a")
	b := lookup(t, v, a.Ino, "b")
	c := lookup(t, v, b.Ino, "c")
	mkfile(t, v, c.Ino, "f", "")
	v = e.reopen(v)
	defer v.Close()
	wantErr(t, "move a below a/b/c", v.Rename(RootIno, "a", c.Ino, "a", 0), ErrInvalid)
	if got := names(t, v, RootIno); !sameStrings(got, []string{"a"}) {
		t.Fatalf("root: got %v, want [a]", got)
	}
}

// TestZombieSurvivesFreeze: a removed inode the kernel still holds (a
// process's cwd in a removed directory) answers getattr with no links
// until the kernel forgets it. Freeze drops the view's zombies with its
// other caches, so after a checkpoint such a getattr fails with ENOENT.
// Same cause as TestTmpfileSurvivesFreeze: state that lives only in the
// view must be carried over to the new stack.
func TestZombieSurvivesFreeze(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	d := mkdir(t, v, RootIno, "d")
	ok(t, "rmdir", v.Rmdir(RootIno, "d"))
	freeze(t, e.store, "sb")
	a, err := v.GetAttr(d.Ino)
	ok(t, "getattr of the removed directory after a freeze", err)
	if a.Nlink != 0 {
		t.Fatalf("removed directory: got %d links, want 0", a.Nlink)
	}
}

// TestOpenUnlinkedFileSurvivesFreeze: a file removed while open keeps its
// data for its handles across a checkpoint, and once released answers
// getattr with no links (a zombie the kernel may still hold) across the
// next one.
func TestOpenUnlinkedFileSurvivesFreeze(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	f := mkfile(t, v, RootIno, "f", "kept for its handle")
	ok(t, "open", v.Open(f.Ino))
	ok(t, "unlink", v.Unlink(RootIno, "f"))
	freeze(t, e.store, "sb")
	a, err := v.GetAttr(f.Ino)
	ok(t, "getattr of the open removed file after a freeze", err)
	if a.Nlink != 0 {
		t.Fatalf("open removed file: got %d links, want 0", a.Nlink)
	}
	if got := content(t, v, f.Ino); got != "kept for its handle" {
		t.Fatalf("open removed file: got %q", got)
	}
	v.Release(f.Ino)
	freeze(t, e.store, "sb")
	a, err = v.GetAttr(f.Ino)
	ok(t, "getattr of the released removed file after a freeze", err)
	if a.Nlink != 0 {
		t.Fatalf("released removed file: got %d links, want 0", a.Nlink)
	}
}

// TestUnlinkedTmpfileLeavesNothingAfterFreeze: a tmpfile carried over a
// freeze and released without a name leaves no record in the new layer.
func TestUnlinkedTmpfileLeavesNothingAfterFreeze(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	tf, err := v.Tmpfile(RootIno, 0o600, root)
	ok(t, "tmpfile", err)
	freeze(t, e.store, "sb")
	_, err = v.WriteAt(tf.Ino, []byte("scratch"), 0, false)
	ok(t, "write after a freeze", err)
	v.Release(tf.Ino)
	ok(t, "sync", v.Sync())
	v.mu.Lock()
	active := v.activeLayer()
	v.mu.Unlock()
	if storedInLayer(t, e.store, active, tf.Ino) {
		t.Fatalf("released tmpfile: the active layer keeps a record of it")
	}
	if got := names(t, v, RootIno); len(got) != 0 {
		t.Fatalf("root: got %v, want nothing", got)
	}
}
