package layers

import (
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// storedInLayer reports whether layer holds a record of inode ino.
func storedInLayer(t *testing.T, s *Store, layer string, ino uint64) bool {
	t.Helper()
	found := false
	err := s.view(func(txn *badger.Txn) error {
		_, err := txn.Get(keyInode(layer, ino))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		found = err == nil
		return err
	})
	ok(t, "read inode record", err)
	return found
}

// TestTmpfileLinkedIn follows open(O_TMPFILE) then linkat: the file has no
// name and no links until Link names it, holds data meanwhile, and keeps
// both across a restart once linked.
func TestTmpfileLinkedIn(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer func() { v.Close() }()
	d := mkdir(t, v, RootIno, "d")
	tf, err := v.Tmpfile(d.Ino, 0o640|syscall.S_ISUID, Caller{UID: 7, GID: 8})
	ok(t, "tmpfile", err)
	if tf.Nlink != 0 || !isType(tf, syscall.S_IFREG) || tf.Mode&07777 != 0o640|syscall.S_ISUID || tf.UID != 7 || tf.GID != 8 {
		t.Fatalf("tmpfile attr: got %+v, want a regular file 0640|setuid of 7:8 with no links", tf)
	}
	if got := names(t, v, d.Ino); len(got) != 0 {
		t.Fatalf("directory lists the tmpfile: got %v", got)
	}
	const data = "written before it had a name"
	_, err = v.WriteAt(tf.Ino, []byte(data), 0, false)
	ok(t, "write tmpfile", err)
	ok(t, "sync", v.Sync())
	if got := content(t, v, tf.Ino); got != data {
		t.Fatalf("tmpfile content: got %q, want %q", got, data)
	}
	a, err := v.Link(tf.Ino, d.Ino, "named")
	ok(t, "link tmpfile", err)
	if a.Nlink != 1 || a.Ino != tf.Ino {
		t.Fatalf("linked tmpfile: got %+v, want ino %d with one link", a, tf.Ino)
	}
	// A second name is an ordinary hard link.
	a, err = v.Link(tf.Ino, RootIno, "again")
	ok(t, "second link", err)
	if a.Nlink != 2 {
		t.Fatalf("second link: got %d links, want 2", a.Nlink)
	}
	v.Release(tf.Ino) // the last handle: a named file stays
	if got := lookup(t, v, d.Ino, "named"); got.Ino != tf.Ino {
		t.Fatalf("lookup named: got ino %d, want %d", got.Ino, tf.Ino)
	}
	v = e.reopen(v)
	d = lookup(t, v, RootIno, "d")
	for _, c := range []struct {
		dir  uint64
		name string
	}{{d.Ino, "named"}, {RootIno, "again"}} {
		got := lookup(t, v, c.dir, c.name)
		if got.Ino != tf.Ino || got.Nlink != 2 {
			t.Fatalf("%s after reopen: got %+v, want ino %d with 2 links", c.name, got, tf.Ino)
		}
		if s := content(t, v, got.Ino); s != data {
			t.Fatalf("%s after reopen: got %q, want %q", c.name, s, data)
		}
	}
}

// TestTmpfileNeverLinked: a tmpfile that is released without a name goes
// away with its data; until the kernel forgets it, it answers getattr with
// no links, then not at all, and no record of it stays in the store.
func TestTmpfileNeverLinked(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer func() { v.Close() }()
	tf, err := v.Tmpfile(RootIno, 0o600, root)
	ok(t, "tmpfile", err)
	_, err = v.WriteAt(tf.Ino, make([]byte, 3*MinBlockSize), 0, false)
	ok(t, "write", err)
	ok(t, "sync", v.Sync())
	head := v.Info().Head
	if !storedInLayer(t, e.store, head, tf.Ino) {
		t.Fatalf("a synced tmpfile has no record in the active layer")
	}
	v.Release(tf.Ino)
	a, err := v.GetAttr(tf.Ino)
	ok(t, "getattr of the released tmpfile", err)
	if a.Nlink != 0 {
		t.Fatalf("released tmpfile: got %d links, want 0", a.Nlink)
	}
	_, err = v.Link(tf.Ino, RootIno, "late")
	wantErr(t, "link after the last release", err, ErrNotFound)
	v.Forget(tf.Ino)
	v.Forget(tf.Ino) // twice, or for an inode it never held: nothing happens
	v.Forget(RootIno)
	_, err = v.GetAttr(tf.Ino)
	wantErr(t, "getattr after forget", err, ErrNotFound)
	ok(t, "sync", v.Sync())
	_, err = v.GetAttr(tf.Ino)
	wantErr(t, "getattr after forget and sync", err, ErrNotFound)
	if _, err := v.GetAttr(RootIno); err != nil {
		t.Fatalf("root after a stray forget: %v", err)
	}
	if storedInLayer(t, e.store, head, tf.Ino) {
		t.Fatalf("the released tmpfile's record stayed in the store")
	}
	usage, err := e.store.LayerUsage(head)
	ok(t, "layer usage", err)
	if usage != (Usage{}) {
		t.Fatalf("layer usage after the tmpfile went: got %+v, want none", usage)
	}
	v = e.reopen(v)
	if got := names(t, v, RootIno); len(got) != 0 {
		t.Fatalf("root after reopen: got %v, want empty", got)
	}
	_, err = v.GetAttr(tf.Ino)
	wantErr(t, "getattr after reopen", err, ErrNotFound)
}

// TestTmpfileSetGIDDirectory: in a set-group-ID directory a tmpfile takes
// the directory's group, as a named file does.
func TestTmpfileSetGIDDirectory(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	d, err := v.Mkdir(RootIno, "shared", 0o2775, Caller{UID: 1, GID: 50})
	ok(t, "mkdir", err)
	tf, err := v.Tmpfile(d.Ino, 0o644, Caller{UID: 2, GID: 60})
	ok(t, "tmpfile", err)
	defer v.Release(tf.Ino)
	if tf.GID != 50 || tf.UID != 2 {
		t.Fatalf("tmpfile in a setgid dir: got %d:%d, want 2:50", tf.UID, tf.GID)
	}
	if tf.Mode&syscall.S_ISGID != 0 {
		t.Fatalf("tmpfile took the directory's set-group-ID bit: mode %o", tf.Mode)
	}
}

func TestTmpfileErrors(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "x")
	gone := mkdir(t, v, RootIno, "gone")
	ok(t, "open dir", v.Open(gone.Ino))
	ok(t, "rmdir", v.Rmdir(RootIno, "gone"))
	cases := []struct {
		name string
		dir  uint64
		want error
	}{
		{"in a file", f.Ino, ErrNotDir},
		{"in a removed directory", gone.Ino, ErrNotFound},
		{"in an unknown inode", 1<<62 + 999999, ErrNotFound},
	}
	for _, c := range cases {
		_, err := v.Tmpfile(c.dir, 0o644, root)
		wantErr(t, c.name, err, c.want)
	}
	v.Release(gone.Ino)
	ok(t, "close", v.Close())
	_, err := v.Tmpfile(RootIno, 0o644, root)
	wantErr(t, "closed view", err, ErrClosed)
	ro, err := e.store.OpenView("sb", true)
	ok(t, "open read-only", err)
	defer ro.Close()
	_, err = ro.Tmpfile(RootIno, 0o644, root)
	wantErr(t, "read-only view", err, ErrReadOnly)
}

// TestFreezeCarriesOpenTmpfiles: a checkpoint keeps the open tmpfiles
// not linked yet (they can still be written and linked after it) and no
// others, whatever else the view caches: not the ones since linked or
// released, nor those of a state a rollback left.
func TestFreezeCarriesOpenTmpfiles(t *testing.T) {
	for _, tc := range []struct {
		name     string
		then     func(t *testing.T, v *View, ino uint64)
		wantKept bool
	}{
		{"open, no name", func(*testing.T, *View, uint64) {}, true},
		{"linked", func(t *testing.T, v *View, ino uint64) {
			_, err := v.Link(ino, RootIno, "named")
			ok(t, "link", err)
		}, false},
		{"released", func(t *testing.T, v *View, ino uint64) { v.Release(ino) }, false},
		{"a rollback since", func(t *testing.T, v *View, ino uint64) {
			_, err := v.s.Repoint("sb", "", noRepointFn) // onto the base alone
			ok(t, "rollback", err)
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, func(base string) {
				for i := 0; i < 50; i++ {
					put(t, fmt.Sprintf("%s/f%d", base, i), "base")
				}
			})
			v := e.view()
			defer v.Close()
			for i := 0; i < 50; i++ {
				lookup(t, v, RootIno, fmt.Sprintf("f%d", i))
			}
			tf, err := v.Tmpfile(RootIno, 0o600, root)
			ok(t, "tmpfile", err)
			_, err = v.WriteAt(tf.Ino, []byte("before"), 0, false)
			ok(t, "write", err)
			tc.then(t, v, tf.Ino)
			freeze(t, e.store, "sb")
			v.mu.Lock()
			_, inTmps := v.tmps[tf.Ino]
			st := v.inodes[tf.Ino]
			kept := st != nil && st.tmp
			v.mu.Unlock()
			if kept != tc.wantKept || inTmps != tc.wantKept {
				t.Fatalf("after the checkpoint: kept as an open tmpfile %v (in the list %v), want %v", kept, inTmps, tc.wantKept)
			}
			if !tc.wantKept {
				return
			}
			_, err = v.WriteAt(tf.Ino, []byte(" and after"), 6, false)
			ok(t, "write after the checkpoint", err)
			a, err := v.Link(tf.Ino, RootIno, "late")
			ok(t, "link after the checkpoint", err)
			if got := content(t, v, a.Ino); got != "before and after" {
				t.Fatalf("content: %q", got)
			}
		})
	}
}
