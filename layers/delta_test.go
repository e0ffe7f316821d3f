package layers

import (
	"errors"
	"os"
	"sort"
	"strings"
	"testing"
)

// changeSummary renders Changes as sorted lines, e.g. "entry dir/new +"
// (added), "entry old -" (removed), "entry x ~" (points elsewhere) and
// "inode path ~".
func changeSummary(c Changes) []string {
	var out []string
	for _, e := range c.Entries {
		p := e.NewPath
		if p == "" {
			p = e.OldPath
		}
		switch {
		case e.Old == nil:
			out = append(out, "entry "+p+" +")
		case e.New == nil:
			out = append(out, "entry "+p+" -")
		default:
			out = append(out, "entry "+p+" ~")
		}
	}
	for _, i := range c.Inodes {
		switch {
		case i.Old == nil:
			out = append(out, "inode "+i.Path+" +")
		case i.New == nil:
			out = append(out, "inode (removed) -")
		default:
			out = append(out, "inode "+i.Path+" ~")
		}
	}
	sort.Strings(out)
	return out
}

func TestCompareStates(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) {
		put(t, base+"/keep", "keep")
		put(t, base+"/edit", "edit")
		put(t, base+"/gone", "gone")
		put(t, base+"/dir/inner", "inner")
	})
	s := e.store
	v := e.view()
	defer func() { v.Close() }()
	edit := lookup(t, v, RootIno, "edit")
	_, err := v.WriteAt(edit.Ino, []byte("EDIT"), 0, false)
	ok(t, "write", err)
	ok(t, "unlink", v.Unlink(RootIno, "gone"))
	nd := mkdir(t, v, RootIno, "nd")
	mkfile(t, v, nd.Ino, "new", "new")
	l1 := freeze(t, s, "sb")

	c, err := s.Compare("sb", "", l1, true)
	ok(t, "compare base..l1", err)
	got := changeSummary(c)
	want := []string{"entry gone -", "entry nd +", "entry nd/new +", "inode (removed) -", "inode edit ~", "inode nd +", "inode nd/new +"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("base..l1: got %q, want %q", got, want)
	}
	// A rename moves one entry; the renamed inode is unchanged in content.
	ok(t, "rename", v.Rename(RootIno, "dir", nd.Ino, "dir2", 0))
	ok(t, "chmod", func() error { m := uint32(0o600); _, err := v.SetAttr(edit.Ino, SetAttrIn{Mode: &m}); return err }())
	l2 := freeze(t, s, "sb")
	c, err = s.Compare("sb", l1, l2, true)
	ok(t, "compare l1..l2", err)
	got = changeSummary(c)
	want = []string{"entry dir -", "entry nd/dir2 +", "inode edit ~"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("l1..l2: got %q, want %q", got, want)
	}
	// A base file edited deep in the tree is named by its base path; names
	// in a directory removed since are reported as removed.
	inner := lookup(t, v, lookup(t, v, nd.Ino, "dir2").Ino, "inner")
	_, err = v.WriteAt(inner.Ino, []byte("INNER"), 0, false)
	ok(t, "write inner", err)
	ok(t, "unlink new", v.Unlink(nd.Ino, "new"))
	ok(t, "move dir2 back", v.Rename(nd.Ino, "dir2", RootIno, "dir", 0))
	ok(t, "rmdir nd", v.Rmdir(RootIno, "nd"))
	l3 := freeze(t, s, "sb")
	c, err = s.Compare("sb", l2, l3, true)
	ok(t, "compare l2..l3", err)
	got = changeSummary(c)
	want = []string{"entry dir +", "entry nd -", "entry nd/dir2 -", "entry nd/new -", "inode (removed) -", "inode (removed) -", "inode dir/inner ~"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("l2..l3: got %q, want %q", got, want)
	}
	// Nothing differs between a state and itself; without paths none are filled.
	c, err = s.Compare("sb", l2, l2, false)
	if err != nil || len(c.Entries)+len(c.Inodes) != 0 {
		t.Fatalf("l2..l2: got %+v, %v; want no changes", c, err)
	}
	c, err = s.Compare("sb", "", l2, false)
	ok(t, "compare without paths", err)
	for _, ch := range c.Entries {
		if ch.OldPath != "" || ch.NewPath != "" {
			t.Fatalf("paths filled without being asked: %+v", ch)
		}
	}
	_, err = s.Compare("sb", "nope", l2, true)
	wantErr(t, "missing from", err, ErrNotFound)
	_, err = s.Compare("sb", l1, "nope", true)
	wantErr(t, "missing to", err, ErrNotFound)
	_, err = s.Compare("nope", l1, l2, true)
	wantErr(t, "missing sandbox", err, ErrNotFound)

	// State of an inode in the live view.
	st, err := v.State(edit.Ino)
	ok(t, "state", err)
	if st == nil || st.Size != 4 || st.Mode&0o777 != 0o600 || st.Fingerprint == "" {
		t.Fatalf("state: got %+v", st)
	}
	keep := lookup(t, v, RootIno, "keep")
	sk, err := v.State(keep.Ino)
	ok(t, "state", err)
	if sameState(st, sk) || !sameState(sk, sk) || sameState(sk, nil) || !sameState(nil, nil) {
		t.Fatalf("sameState: wrong answers")
	}
	if none, err := v.State(1 << 61); err != nil || none != nil {
		t.Fatalf("state of a missing inode: got %+v, %v; want nil, nil", none, err)
	}

	// The base alone, as it is now.
	bv, err := s.OpenBase("sb")
	ok(t, "open base", err)
	if got := names(t, bv, RootIno); !sameStrings(got, []string{"dir", "edit", "gone", "keep"}) {
		t.Fatalf("base alone: got %v", got)
	}
	if got := content(t, bv, lookup(t, bv, RootIno, "edit").Ino); got != "edit" {
		t.Fatalf("base edit: got %q", got)
	}
	ok(t, "close base", bv.Close())
	_, err = s.OpenBase("nope")
	wantErr(t, "base of a missing sandbox", err, ErrNotFound)

	// The base paths the stack holds records for.
	origins, err := s.BaseOrigins("sb")
	ok(t, "origins", err)
	if want := []string{"dir", "dir/inner", "edit"}; !sameStrings(origins, want) {
		t.Fatalf("BaseOrigins: got %v, want %v", origins, want)
	}
	_, err = s.BaseOrigins("nope")
	wantErr(t, "origins of a missing sandbox", err, ErrNotFound)
}

func TestCompareCorruptLayer(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	s := e.store
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "x")
	ok(t, "close", v.Close())
	l1 := freeze(t, s, "sb")
	corrupt(t, s, keyInode(l1, f.Ino), []byte{9})
	_, err := s.Compare("sb", "", l1, true)
	wantErr(t, "compare over a corrupt record", err, ErrCorrupt)
	_, err = s.BaseOrigins("sb")
	wantErr(t, "origins over a corrupt record", err, ErrCorrupt)
	corrupt(t, s, append(prefixLayerTable(tInode, l1), 1, 2), []byte{9})
	_, err = s.BaseOrigins("sb")
	wantErr(t, "origins over a bad key", err, ErrCorrupt)
	_, err = s.Compare("sb", "", l1, true)
	wantErr(t, "compare over a bad key", err, ErrCorrupt)
	corrupt(t, s, append(prefixLayerTable(tEntry, l1), 1), []byte{9})
	_, err = s.Compare("sb", "", l1, true)
	wantErr(t, "compare over a bad entry key", err, ErrCorrupt)
	ok(t, "remove base", os.RemoveAll(e.base))
	_, err = s.OpenBase("sb")
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("base of a sandbox whose base is gone: got %v, want ErrNotFound", err)
	}
}

// TestComparePathsThroughBaseDirs edits a file deep below untouched base
// directories: its path is found through the base.
func TestComparePathsThroughBaseDirs(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) {
		put(t, base+"/a/b/c", "c")
		put(t, base+"/a/b/d/e", "e")
	})
	s := e.store
	v := e.view()
	defer func() { v.Close() }()
	a := lookup(t, v, RootIno, "a")
	b := lookup(t, v, a.Ino, "b")
	c := lookup(t, v, b.Ino, "c")
	_, err := v.WriteAt(c.Ino, []byte("C"), 0, false)
	ok(t, "write", err)
	// A base directory with contents is replaced by a new one.
	d := lookup(t, v, b.Ino, "d")
	ok(t, "unlink e", v.Unlink(d.Ino, "e"))
	ok(t, "rmdir d", v.Rmdir(b.Ino, "d"))
	nd := mkdir(t, v, b.Ino, "d")
	mkfile(t, v, nd.Ino, "f", "f")
	l1 := freeze(t, s, "sb")
	ch, err := s.Compare("sb", "", l1, true)
	ok(t, "compare", err)
	var paths []string
	removed := 0
	for _, i := range ch.Inodes {
		if i.New == nil {
			removed++
			continue
		}
		paths = append(paths, i.Path)
	}
	if removed != 2 {
		t.Fatalf("removed inodes: got %d, want 2 (old d and e)", removed)
	}
	sort.Strings(paths)
	if want := []string{"a/b/c", "a/b/d", "a/b/d/f"}; !sameStrings(paths, want) {
		t.Fatalf("changed inode paths: got %v, want %v", paths, want)
	}
	var replaced *EntryChange
	for i := range ch.Entries {
		if ch.Entries[i].Name == "d" {
			replaced = &ch.Entries[i]
		}
	}
	if replaced == nil || replaced.OldPath != "a/b/d" || replaced.NewPath != "a/b/d" {
		t.Fatalf("replaced dir: got %+v", replaced)
	}
	if len(replaced.OldTree) != 1 || replaced.OldTree[0].Path != "a/b/d/e" {
		t.Fatalf("old tree: got %+v, want [a/b/d/e]", replaced.OldTree)
	}
	if len(replaced.NewTree) != 1 || replaced.NewTree[0].Path != "a/b/d/f" || replaced.NewTree[0].Size != 1 {
		t.Fatalf("new tree: got %+v, want [a/b/d/f]", replaced.NewTree)
	}
}

func TestCompareDamagedStates(t *testing.T) {
	// Each case builds l1 (f created, 8 KiB) and l2 (f changed), then
	// damages something Compare(l1, l2) must read.
	cases := []struct {
		name   string
		damage func(t *testing.T, s *Store, l1, l2 string, f uint64)
		want   error
	}{
		{"record in the shared layer", func(t *testing.T, s *Store, l1, l2 string, f uint64) {
			corrupt(t, s, keyInode(l1, f), []byte{9})
		}, ErrCorrupt},
		{"block map in the shared layer", func(t *testing.T, s *Store, l1, l2 string, f uint64) {
			corrupt(t, s, keyBlock(l1, f, 1), []byte{9})
		}, ErrCorrupt},
		{"entry in the delta layer", func(t *testing.T, s *Store, l1, l2 string, f uint64) {
			corrupt(t, s, keyEntry(l2, RootIno, "f"), []byte{0xff})
		}, ErrCorrupt},
		{"record without a parent", func(t *testing.T, s *Store, l1, l2 string, f uint64) {
			corrupt(t, s, keyInode(l2, f), encodeInode(&Inode{Mode: 0o100644, Nlink: 1, Size: 3, Floor: -1}))
		}, ErrNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			f := mkfile(t, v, RootIno, "f", strings.Repeat("f", 2*MinBlockSize))
			l1 := freeze(t, e.store, "sb")
			_, err := v.WriteAt(f.Ino, []byte("F"), 0, false)
			ok(t, "write", err)
			l2 := freeze(t, e.store, "sb")
			ok(t, "close", v.Close())
			c.damage(t, e.store, l1, l2, f.Ino)
			_, err = e.store.Compare("sb", l1, l2, true)
			wantErr(t, "compare", err, c.want)
		})
	}
}

func TestCompareRenameAwayAndBack(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	mkfile(t, v, RootIno, "f", "f")
	l1 := freeze(t, e.store, "sb")
	ok(t, "rename away", v.Rename(RootIno, "f", RootIno, "g", 0))
	ok(t, "rename back", v.Rename(RootIno, "g", RootIno, "f", 0))
	l2 := freeze(t, e.store, "sb")
	ch, err := e.store.Compare("sb", l1, l2, true)
	ok(t, "compare", err)
	if len(ch.Entries) != 0 {
		t.Fatalf("entries after a rename away and back: got %+v, want none", ch.Entries)
	}
}

// TestCompareDamagedTrees damages what Compare reads to name paths and
// list the trees of replaced directories; every damage is an error.
func TestCompareDamagedTrees(t *testing.T) {
	type state struct {
		s          *Store
		l1, l2     string
		old, nd    uint64 // the replaced directory d (old) and the kept one
		oldSub, fx uint64
	}
	cases := []struct {
		name   string
		damage func(t *testing.T, st state)
		want   error
	}{
		{"entry below a replaced dir", func(t *testing.T, st state) {
			corrupt(t, st.s, keyEntry(st.l1, st.old, "bad"), []byte{0xff})
		}, ErrCorrupt},
		{"entry deep below a replaced dir", func(t *testing.T, st state) {
			corrupt(t, st.s, keyEntry(st.l1, st.oldSub, "bad"), []byte{0xff})
		}, ErrCorrupt},
		{"dangling entry below a replaced dir", func(t *testing.T, st state) {
			corrupt(t, st.s, keyEntry(st.l1, st.old, "ghost"), encodeEntry(entry{Ino: 1<<62 + 777777, Type: 0o100000}))
		}, ErrNotFound},
		{"kept dir without a parent", func(t *testing.T, st state) {
			corrupt(t, st.s, keyInode(st.l2, st.nd), encodeInode(&Inode{Mode: 0o40755, Nlink: 2, Size: 4096, Floor: -1}))
		}, ErrNotFound},
		{"kept dir without a parent before", func(t *testing.T, st state) {
			corrupt(t, st.s, keyInode(st.l1, st.nd), encodeInode(&Inode{Mode: 0o40755, Nlink: 2, Size: 4096, Floor: -1}))
		}, ErrNotFound},
		{"kept dir its own parent", func(t *testing.T, st state) {
			corrupt(t, st.s, keyInode(st.l2, st.nd), encodeInode(&Inode{Mode: 0o40755, Nlink: 2, Size: 4096, Floor: -1, HasParent: true, Parent: st.nd, Name: "nd"}))
		}, ErrCorrupt},
		{"kept dir with a missing parent", func(t *testing.T, st state) {
			corrupt(t, st.s, keyInode(st.l2, st.nd), encodeInode(&Inode{Mode: 0o40755, Nlink: 2, Size: 4096, Floor: -1, HasParent: true, Parent: 1<<62 + 31337, Name: "nd"}))
		}, ErrNotFound},
		{"kept dir record", func(t *testing.T, st state) {
			corrupt(t, st.s, keyInode(st.l1, st.nd), []byte{9})
		}, ErrCorrupt},
		{"block map in the delta layer", func(t *testing.T, st state) {
			corrupt(t, st.s, keyBlock(st.l2, st.fx, 0), []byte{9})
		}, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			d := mkdir(t, v, RootIno, "d")
			sub := mkdir(t, v, d.Ino, "sub")
			mkfile(t, v, sub.Ino, "x", "x")
			nd := mkdir(t, v, RootIno, "nd")
			fx := mkfile(t, v, nd.Ino, "fx", "fx")
			mkfile(t, v, nd.Ino, "gone", "gone")
			l1 := freeze(t, e.store, "sb")
			ok(t, "unlink gone", v.Unlink(nd.Ino, "gone"))
			ok(t, "unlink", v.Unlink(sub.Ino, "x"))
			ok(t, "rmdir sub", v.Rmdir(d.Ino, "sub"))
			ok(t, "rmdir d", v.Rmdir(RootIno, "d"))
			mkdir(t, v, RootIno, "d")
			mkfile(t, v, nd.Ino, "y", "y")
			_, err := v.WriteAt(fx.Ino, []byte("FX"), 0, false)
			ok(t, "write", err)
			l2 := freeze(t, e.store, "sb")
			ok(t, "close", v.Close())
			c.damage(t, state{s: e.store, l1: l1, l2: l2, old: d.Ino, nd: nd.Ino, oldSub: sub.Ino, fx: fx.Ino})
			_, err = e.store.Compare("sb", l1, l2, true)
			wantErr(t, "compare", err, c.want)
		})
	}
}

func TestOpenViewEmptyHead(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	corrupt(t, e.store, keySandbox("sb"), []byte(`{"name":"sb","base":"`+e.base+`","block_size":4096,"head":""}`))
	_, err := e.store.OpenView("sb", false)
	wantErr(t, "open a sandbox without a head", err, ErrCorrupt)
}
