package layers

import (
	"os"
	"path/filepath"
	"testing"
)

// TestPathOfAFileWhoseNewestNameWentAway: a file's record keeps the newest
// of its names; when that name is removed and another stays, the file's
// path is the other one, in the live view and after a restart.
func TestPathOfAFileWhoseNewestNameWentAway(t *testing.T) {
	cases := []struct {
		name   string
		inBase bool // a/f comes from the base
		rmdir  bool // b, the directory of the removed name, goes too
	}{
		{"layer file, directory removed", false, true},
		{"layer file, directory stays", false, false},
		{"base file, directory removed", true, true},
		{"base file, directory stays", true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, func(base string) {
				if c.inBase {
					put(t, base+"/a/f", "base")
				}
			})
			v := e.view()
			var a, f Attr
			if c.inBase {
				a = lookup(t, v, RootIno, "a")
				f = lookup(t, v, a.Ino, "f")
			} else {
				a = mkdir(t, v, RootIno, "a")
				f = mkfile(t, v, a.Ino, "f", "layer")
			}
			b := mkdir(t, v, RootIno, "b")
			_, err := v.Link(f.Ino, b.Ino, "g")
			ok(t, "link", err)
			ok(t, "unlink b/g", v.Unlink(b.Ino, "g"))
			if c.rmdir {
				ok(t, "rmdir b", v.Rmdir(RootIno, "b"))
			}
			wantPath(t, v, f.Ino, "a/f", "live")
			v = e.reopen(v)
			defer v.Close()
			wantPath(t, v, f.Ino, "a/f", "after a restart")
		})
	}
}

// TestPathOfAFileWithNoNameLeft: a file none of whose names is left has no
// path; the search for another name says so instead of making one up.
func TestPathOfAFileWithNoNameLeft(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { ok(t, "mkdir", os.MkdirAll(base+"/d", 0o755)) })
	v := e.view()
	defer v.Close()
	f := mkfile(t, v, RootIno, "f", "x")
	ok(t, "open", v.Open(f.Ino))
	defer v.Release(f.Ino)
	ok(t, "unlink", v.Unlink(RootIno, "f"))
	v.mu.Lock()
	_, err := v.pathOf(f.Ino)
	v.mu.Unlock()
	wantErr(t, "path of a removed file", err, ErrNotFound)
}

// TestPathOfABaseFileByItsOtherBaseName: a base file with two names in the
// base (a hard link there) is renamed in the sandbox, then the new name is
// removed and taken by another file. Its one name left is its other base
// name, which no layer records: the path finds it by the base's names,
// also in a view that has listed nothing (after a restart), as the diff
// of two checkpoints does. Found by the stress test (seed
// 1795656464708500338: "no name left").
func TestPathOfABaseFileByItsOtherBaseName(t *testing.T) {
	cases := []struct {
		name    string
		others  []string // the base file's other names
		removed string   // one of them, removed in the sandbox too
		want    string
	}{
		{"other name in the same directory", []string{"w0/h"}, "", "w0/h"},
		{"other name in another directory", []string{"z/deep/h"}, "", "z/deep/h"},
		{"first other name removed too", []string{"w0/h", "w0/k"}, "h", "w0/k"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, func(base string) {
				put(t, base+"/w0/a", "shared")
				for _, o := range c.others {
					ok(t, "mkdir", os.MkdirAll(filepath.Dir(filepath.Join(base, o)), 0o755))
					ok(t, "base link", os.Link(base+"/w0/a", filepath.Join(base, o)))
				}
			})
			v := e.view()
			w0 := lookup(t, v, RootIno, "w0")
			f := lookup(t, v, w0.Ino, "a")
			ok(t, "rename a b", v.Rename(w0.Ino, "a", w0.Ino, "b", 0))
			ok(t, "unlink b", v.Unlink(w0.Ino, "b"))
			mkfile(t, v, w0.Ino, "b", "another file")
			if c.removed != "" {
				ok(t, "unlink "+c.removed, v.Unlink(w0.Ino, c.removed))
			}
			wantPath(t, v, f.Ino, c.want, "live")
			v = e.reopen(v)
			defer v.Close()
			wantPath(t, v, f.Ino, c.want, "after a restart")
		})
	}
}
