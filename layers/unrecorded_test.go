package layers

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// forgetCaches drops every inode and listing v holds in memory, keeping
// what it noted of the active layer, so that the next lookups load from
// the stack again (as a repoint does for what it changed).
func forgetCaches(t *testing.T, v *View) {
	t.Helper()
	ok(t, "sync", v.Sync())
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.dirty) > 0 {
		t.Fatalf("%d dirty inodes after a sync", len(v.dirty))
	}
	clear(v.inodes)
	clear(v.dirs)
}

// TestUnrecordedKeysSkipTheStore: once the active layer is known whole
// (the view started on it empty) and the frozen layers' key sets are at
// hand, a lookup, stat or read of a base file no layer records begins no
// read transaction, while everything a layer records (a rewrite, a
// removal, a rename, a new file, in the active layer or a frozen one)
// still reads as the stack says after the view forgot its caches.
func TestUnrecordedKeysSkipTheStore(t *testing.T) {
	e := newEnv(t, 0, func(base string) {
		for i := 0; i < 12; i++ {
			put(t, fmt.Sprintf("%s/b%02d", base, i), fmt.Sprintf("base %d", i))
		}
		put(t, base+"/d/x", "x")
		put(t, base+"/d/y", "y")
		put(t, base+"/e/z", "z")
		put(t, base+"/u/w", "w")
	})
	v := e.view()
	defer func() { v.Close() }()
	write := func(name, data string) {
		t.Helper()
		a := lookup(t, v, RootIno, name)
		zero := int64(0)
		_, err := v.SetAttr(a.Ino, SetAttrIn{Size: &zero})
		ok(t, "truncate "+name, err)
		_, err = v.WriteAt(a.Ino, []byte(data), 0, false)
		ok(t, "write "+name, err)
	}
	// A frozen layer: b00 rewritten, a new file, b01 removed.
	write("b00", "frozen layer")
	mkfile(t, v, RootIno, "one", "1")
	ok(t, "unlink b01", v.Unlink(RootIno, "b01"))
	freeze(t, e.store, e.name)
	// The active layer, empty when the view moved onto it.
	if !v.pre.complete {
		t.Fatalf("the active layer after a checkpoint is not known whole")
	}
	write("b02", "active layer")
	ok(t, "unlink b03", v.Unlink(RootIno, "b03"))
	ok(t, "rename d/x e/x2", v.Rename(lookup(t, v, RootIno, "d").Ino, "x", lookup(t, v, RootIno, "e").Ino, "x2", 0))
	n := mkdir(t, v, RootIno, "n")
	mkfile(t, v, n.Ino, "f", "new")
	forgetCaches(t, v)

	cases := []struct {
		path string
		want string // "" : no such file
	}{
		{"b00", "frozen layer"},
		{"one", "1"},
		{"b01", ""},
		{"b02", "active layer"},
		{"b03", ""},
		{"d/x", ""},
		{"d/y", "y"},
		{"e/x2", "x"},
		{"e/z", "z"},
		{"n/f", "new"},
		{"u/w", "w"},
		{"b04", "base 4"},
	}
	for _, c := range cases {
		got, found := readPath(t, v, c.path)
		if found != (c.want != "") || got != c.want {
			t.Errorf("%s after the caches went: %q (found %v), want %q", c.path, got, found, c.want)
		}
	}
	for dir, want := range map[string][]string{"d": {"y"}, "e": {"x2", "z"}, "n": {"f"}} {
		if got := names(t, v, lookup(t, v, RootIno, dir).Ino); !slices.Equal(got, want) {
			t.Errorf("listing of %s: %v, want %v", dir, got, want)
		}
	}

	// One name looked up without listing its directory (how a rollback
	// turns inodes into paths).
	dirD, dirE := lookup(t, v, RootIno, "d").Ino, lookup(t, v, RootIno, "e").Ino
	forgetCaches(t, v)
	for _, c := range []struct {
		dir  uint64
		name string
		want bool
	}{
		{dirE, "x2", true}, {dirD, "x", false}, {dirD, "y", true},
		{RootIno, "b03", false}, {RootIno, "n", true}, {RootIno, "b01", false}, {RootIno, "one", true}, {RootIno, "b05", true},
	} {
		v.mu.Lock()
		de, err := v.pointEntry(c.dir, c.name)
		v.mu.Unlock()
		ok(t, "point entry "+c.name, err)
		if (de != nil) != c.want {
			t.Errorf("entry %q of %d: %+v, want found %v", c.name, c.dir, de, c.want)
		}
	}

	// The untouched base files, and the listing of a base directory no
	// layer changed: no read transaction at all.
	forgetCaches(t, v)
	names(t, v, RootIno)
	before := e.store.reads.Load()
	for i := 5; i < 12; i++ {
		name := fmt.Sprintf("b%02d", i)
		if got, _ := readPath(t, v, name); got != fmt.Sprintf("base %d", i) {
			t.Errorf("%s: %q", name, got)
		}
	}
	u := lookup(t, v, RootIno, "u")
	if got := names(t, v, u.Ino); !slices.Equal(got, []string{"w"}) {
		t.Errorf("listing of u: %v", got)
	}
	if got := e.store.reads.Load() - before; got != 0 {
		t.Errorf("%d read transactions for base files no layer records, want 0", got)
	}
	// A recorded one asks the store.
	forgetCaches(t, v)
	names(t, v, RootIno)
	before = e.store.reads.Load()
	if got, _ := readPath(t, v, "b02"); got != "active layer" {
		t.Errorf("b02: %q", got)
	}
	if e.store.reads.Load() == before {
		t.Errorf("a file the active layer records was read without the store")
	}

	// A view that starts on an active layer it did not write (a reopen
	// with changes since the checkpoint) cannot know it whole: it asks.
	v = e.reopen(v)
	if v.pre.complete {
		t.Fatalf("a reopened view over a written active layer says it is known whole")
	}
	for _, c := range cases {
		got, found := readPath(t, v, c.path)
		if found != (c.want != "") || got != c.want {
			t.Errorf("%s after a reopen: %q (found %v), want %q", c.path, got, found, c.want)
		}
	}
	before = e.store.reads.Load()
	readPath(t, v, "b06")
	if e.store.reads.Load() == before {
		t.Errorf("a lookup over an active layer not known whole began no read transaction")
	}
}

// readPath reads the file at a slash-separated path from the root, and
// tells whether it exists.
func readPath(t *testing.T, v *View, path string) (string, bool) {
	t.Helper()
	dir := uint64(RootIno)
	var a Attr
	for _, name := range strings.Split(path, "/") {
		var err error
		if a, err = v.Lookup(dir, name); err != nil {
			wantErr(t, "lookup "+path, err, ErrNotFound)
			return "", false
		}
		dir = a.Ino
	}
	return content(t, v, a.Ino), true
}
