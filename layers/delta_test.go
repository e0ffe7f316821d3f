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
