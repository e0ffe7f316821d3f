package layers

import (
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestOnRepoint: a live view's repoint hook hears, under the view's lock
// and before anyone sees the new state, what each repoint touched: the
// written file's inode when the move was diffed, nil when not. A repoint
// to "" puts the sandbox on its base alone.
func TestOnRepoint(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, filepath.Join(base, "f"), "base") })
	v := e.view()
	defer v.Close()
	var heard []*Touched
	calls := 0
	v.OnRepoint(func(t *Touched) { calls++; heard = append(heard, t) })
	f := lookup(t, v, RootIno, "f")
	_, err := v.WriteAt(f.Ino, []byte("one"), 0, false)
	ok(t, "write", err)
	l1 := freeze(t, e.store, e.name)
	_, err = v.WriteAt(f.Ino, []byte("two"), 0, false)
	ok(t, "write", err)

	_, _, err = e.store.RepointDiffMoved(e.name, l1, noRepointFn, func(*Touched) {})
	ok(t, "repoint with a diff", err)
	if calls != 1 || heard[0] == nil || !slices.Contains(heard[0].Inodes, f.Ino) {
		t.Fatalf("after a diffed repoint the hook heard %d times: %+v; want f's inode %d", calls, heard, f.Ino)
	}
	_, err = e.store.Repoint(e.name, l1, noRepointFn)
	ok(t, "repoint without a diff", err)
	if calls != 2 || heard[1] != nil {
		t.Fatalf("after a repoint without a diff the hook heard %d times: %+v; want nil", calls, heard)
	}
	_, err = e.store.Repoint(e.name, "", noRepointFn)
	ok(t, "repoint onto the base", err)
	buf := make([]byte, 8)
	n, _ := v.ReadAt(f.Ino, buf, 0)
	if string(buf[:n]) != "base" || calls != 3 {
		t.Fatalf("f on the base alone: %q (hook heard %d times), want %q", buf[:n], calls, "base")
	}
	info, err := e.store.Sandbox(e.name)
	ok(t, "sandbox", err)
	l, err := e.store.Layer(info.Head)
	ok(t, "head layer", err)
	if l.Parent != "" || l.State != StateActive {
		t.Fatalf("head after a repoint onto the base: %+v, want an active layer over no layer", l)
	}
}

// TestNoteBaseChanged marks every sandbox over one base directory, however
// its path is spelled, and no other.
func TestNoteBaseChanged(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	other := t.TempDir()
	_, err := e.store.CreateSandbox("same", e.base, 0)
	ok(t, "create", err)
	_, err = e.store.CreateSandbox("elsewhere", other, 0)
	ok(t, "create", err)
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.FixedZone("x", 3600))
	ok(t, "note", e.store.Update(func(tx *Txn) error { return tx.NoteBaseChanged(e.base+"/./", at) }))
	for name, want := range map[string]bool{e.name: true, "same": true, "elsewhere": false} {
		info, err := e.store.Sandbox(name)
		ok(t, "sandbox", err)
		if got := !info.BaseChanged.IsZero(); got != want || (want && !info.BaseChanged.Equal(at)) {
			t.Errorf("%s: base changed %v, want %v at %v", name, info.BaseChanged, want, at)
		}
	}
	// A sandbox record that does not decode stops it.
	corrupt(t, e.store, keySandbox("bad"), []byte("["))
	err = e.store.Update(func(tx *Txn) error { return tx.NoteBaseChanged(e.base, at) })
	wantErr(t, "note with a corrupt sandbox record", err, ErrCorrupt)
}

// An empty set of attributes a layer records names the same as none at
// all; the base's attributes are named by the origin.
func TestXattrsID(t *testing.T) {
	tests := []struct {
		name string
		rec  Inode
		want string
	}{
		{"none", Inode{}, ""},
		{"recorded empty", Inode{XattrsSet: true, Xattrs: map[string][]byte{}}, ""},
		{"the base's", Inode{HasOrigin: true, Origin: "d/f"}, "base:d/f"},
	}
	for _, tt := range tests {
		if got := xattrsID(&tt.rec); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
	a := xattrsID(&Inode{XattrsSet: true, Xattrs: map[string][]byte{"user.a": []byte("1"), "user.b": nil}})
	b := xattrsID(&Inode{XattrsSet: true, Xattrs: map[string][]byte{"user.a": []byte("1"), "user.b": []byte("2")}})
	if a == "" || a == b {
		t.Errorf("digests of two sets: %q and %q, want two different ones", a, b)
	}
}
