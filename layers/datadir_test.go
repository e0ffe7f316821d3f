package layers

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDataDirUnusable replaces the store's data directory with a file
// behind a live view: whatever has to open a layer's data file (snapshots,
// comparisons, the switch to a new active layer after a freeze or a
// repoint) fails with the cause instead of running without its data; the
// metadata committed before stays, and with the directory back a new view
// shows every file.
func TestDataDirUnusable(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer func() { v.Close() }()
	f := mkfile(t, v, RootIno, "f", "kept")
	l1 := freeze(t, e.store, "sb")
	data := filepath.Join(e.store.Dir(), "data")
	away := data + ".away"
	ok(t, "move data away", os.Rename(data, away))
	ok(t, "file in its place", os.WriteFile(data, nil, 0o600))
	restore := func() {
		os.Remove(data)
		os.Rename(away, data)
	}
	defer restore()

	_, err := e.store.OpenSnapshot("sb", l1)
	wantErr(t, "snapshot", err, syscall.ENOTDIR)
	_, err = e.store.Compare("sb", "", l1, false)
	wantErr(t, "compare", err, syscall.ENOTDIR)

	before, err := e.store.Stack("sb")
	ok(t, "stack", err)
	_, _, err = e.store.Freeze("sb", noFreezeFn)
	wantErr(t, "freeze", err, syscall.ENOTDIR)
	after, err := e.store.Stack("sb")
	ok(t, "stack", err)
	if len(after) != len(before)+1 {
		t.Fatalf("stack after a freeze that could not open the new layer: got %d layers, want %d (the freeze is committed)", len(after), len(before)+1)
	}
	_, err = e.store.Repoint("sb", l1, noRepointFn)
	wantErr(t, "repoint", err, syscall.ENOTDIR)

	restore()
	ok(t, "close", v.Close())
	v = e.view()
	stack, err := e.store.Stack("sb")
	ok(t, "stack", err)
	if len(stack) != 2 || stack[1] != l1 {
		t.Fatalf("stack after the repoint: got %v, want a new layer over %s", stack, l1)
	}
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != "kept" {
		t.Fatalf("f (inode %d) after the data directory came back: got %q", f.Ino, got)
	}
}
