package layers

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRepointDiffScenarios moves a live sandbox back over changes that
// rename, delete and replace directories: RepointDiff must tell, from the
// layers' deltas, exactly what Compare of the two states lists, with the
// paths of both sides, and name the paths the scenario touched.
func TestRepointDiffScenarios(t *testing.T) {
	cases := []struct {
		name string
		// change runs in the layers above the checkpoint moved back to.
		change func(t *testing.T, v *View)
		// paths must all appear among the changes' paths.
		paths []string
	}{
		{"rename a base directory", func(t *testing.T, v *View) {
			ok(t, "rename", v.Rename(RootIno, "d", RootIno, "moved", 0))
		}, []string{"/d", "/moved"}},
		{"rename a directory made in the layer", func(t *testing.T, v *View) {
			n := mkdir(t, v, RootIno, "new")
			mkfile(t, v, n.Ino, "f", "x")
			ok(t, "rename", v.Rename(RootIno, "new", lookup(t, v, RootIno, "d").Ino, "inner", 0))
		}, []string{"/d/inner", "/d/inner/f"}},
		{"delete a directory tree", func(t *testing.T, v *View) {
			d := lookup(t, v, RootIno, "d")
			e := lookup(t, v, d.Ino, "e")
			ok(t, "unlink g", v.Unlink(e.Ino, "g"))
			ok(t, "rmdir e", v.Rmdir(d.Ino, "e"))
			ok(t, "unlink f", v.Unlink(d.Ino, "f"))
			ok(t, "rmdir d", v.Rmdir(RootIno, "d"))
		}, []string{"/d", "/d/e/g"}},
		{"replace a file with a directory", func(t *testing.T, v *View) {
			d := lookup(t, v, RootIno, "d")
			ok(t, "unlink f", v.Unlink(d.Ino, "f"))
			n := mkdir(t, v, d.Ino, "f")
			mkfile(t, v, n.Ino, "in", "y")
		}, []string{"/d/f", "/d/f/in"}},
		{"write below a renamed directory", func(t *testing.T, v *View) {
			d := lookup(t, v, RootIno, "d")
			e := lookup(t, v, d.Ino, "e")
			g := lookup(t, v, e.Ino, "g")
			_, err := v.WriteAt(g.Ino, []byte("changed"), 0, false)
			ok(t, "write", err)
			ok(t, "rename", v.Rename(d.Ino, "e", RootIno, "e2", 0))
		}, []string{"/d/e/g", "/e2/g"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, func(base string) {
				put(t, filepath.Join(base, "d/f"), "base f")
				put(t, filepath.Join(base, "d/e/g"), "base g")
				put(t, filepath.Join(base, "top"), "top")
			})
			v := e.view()
			t.Cleanup(func() { v.Close() })
			mkfile(t, v, RootIno, "before", "b")
			cp, _, err := e.store.Freeze("sb", func(*Txn, string, string) error { return nil })
			ok(t, "freeze", err)
			c.change(t, v)
			// One more layer between: the rollback leaves two.
			_, _, err = e.store.Freeze("sb", func(*Txn, string, string) error { return nil })
			ok(t, "freeze", err)
			mkfile(t, v, RootIno, "after", "a")
			ok(t, "sync", v.Sync()) // Compare reads what is committed
			head, err := e.store.Sandbox("sb")
			ok(t, "sandbox", err)
			want, err := e.store.Compare("sb", head.Head, cp, true)
			ok(t, "compare", err)
			_, ch, err := e.store.RepointDiff("sb", cp, noRepointFn)
			ok(t, "repoint", err)
			if ch == nil {
				t.Fatal("a live view did not tell the changes")
			}
			if g, w := changesView(*ch), changesView(want); !reflect.DeepEqual(g, w) {
				t.Fatalf("RepointDiff lists\n%s\nCompare lists\n%s", join(g), join(w))
			}
			seen := map[string]bool{}
			for _, ec := range ch.Entries {
				seen[ec.OldPath], seen[ec.NewPath] = true, true
				for _, p := range append(append([]PathAttr(nil), ec.OldTree...), ec.NewTree...) {
					seen[p.Path] = true
				}
			}
			for _, ic := range ch.Inodes {
				seen[ic.Path] = true
			}
			for _, p := range append([]string{"/after"}, c.paths...) {
				if !seen[strings.TrimPrefix(p, "/")] && !seen[p] {
					t.Errorf("%s not among the changed paths %v", p, seen)
				}
			}
			sameTree(t, "after the rollback", v, e.store, cp)
		})
	}
}

// TestRepointDiffWithoutView: with no live view the changes are left to
// the caller (nil), and the move still happens.
func TestRepointDiffWithoutView(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	mkfile(t, v, RootIno, "a", "1")
	cp, _, err := e.store.Freeze("sb", func(*Txn, string, string) error { return nil })
	ok(t, "freeze", err)
	mkfile(t, v, RootIno, "b", "2")
	ok(t, "close", v.Close())
	next, ch, err := e.store.RepointDiff("sb", cp, noRepointFn)
	ok(t, "repoint", err)
	if ch != nil {
		t.Fatalf("changes told without a live view: %+v", ch)
	}
	info, err := e.store.Sandbox("sb")
	ok(t, "sandbox", err)
	if info.Head != next {
		t.Fatalf("head %s, want %s", info.Head, next)
	}
	v = e.view()
	defer v.Close()
	if got := names(t, v, RootIno); !sameStrings(got, []string{"a"}) {
		t.Fatalf("after the move the root lists %v", got)
	}
}

// TestSpareDataFiles: a live view keeps an empty data file ready for its
// next layer, which a freeze takes as the new layer's data file; closing
// the view removes it, and one a crashed process left is removed when the
// store opens.
func TestSpareDataFiles(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	spareDir := filepath.Join(e.dir, "store", "spare")
	spares := func() []string {
		t.Helper()
		ents, err := os.ReadDir(spareDir)
		ok(t, "read spare dir", err)
		var out []string
		for _, en := range ents {
			out = append(out, en.Name())
		}
		return out
	}
	waitSpares := func() []string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if s := spares(); len(s) == keepSpares {
				return s
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("not %d spare data files: %v", keepSpares, spares())
		return nil
	}
	v := e.view()
	first := waitSpares()[0] // the oldest: ids grow with time
	_, next, err := e.store.Freeze("sb", func(*Txn, string, string) error { return nil })
	ok(t, "freeze", err)
	if _, err := os.Stat(e.store.dataPath(next)); err != nil {
		t.Fatalf("the new layer has no data file: %v", err)
	}
	if slices.Contains(waitSpares(), first) {
		t.Fatalf("the spare %s was not taken by the freeze", first)
	}
	// The new layer writes into the file the spare became.
	a := mkfile(t, v, RootIno, "f", "data after the freeze")
	ok(t, "sync", v.Sync())
	if st, err := os.Stat(e.store.dataPath(next)); err != nil || st.Size() == 0 {
		t.Fatalf("data file of %s after a write: %v %v", next, st, err)
	}
	if got := content(t, v, a.Ino); got != "data after the freeze" {
		t.Fatalf("read back %q", got)
	}
	ok(t, "close", v.Close())
	if s := spares(); len(s) != 0 {
		t.Fatalf("spares left after close: %v", s)
	}
	// A leftover of a process that died holding the store.
	put(t, filepath.Join(spareDir, "LEFTOVER"), "")
	ok(t, "close store", e.store.Close())
	s, err := Open(filepath.Join(e.dir, "store"))
	ok(t, "open", err)
	e.store = s
	if got := spares(); len(got) != 0 {
		t.Fatalf("spares after open: %v", got)
	}
	v = e.view()
	defer v.Close()
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != "data after the freeze" {
		t.Fatalf("after reopen read %q", got)
	}
}
