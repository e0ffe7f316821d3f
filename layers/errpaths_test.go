package layers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// TestBaseVanishes removes base files and directories behind an open view:
// every operation that needs them fails with an error, never with made-up
// data.
func TestBaseVanishes(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) {
		put(t, base+"/f", string(bytes.Repeat([]byte("f"), 3*MinBlockSize)))
		put(t, base+"/g", "g")
		put(t, base+"/d/x", "x")
		ok(t, "mkdir", os.MkdirAll(base+"/d/q", 0o755))
	})
	v := e.view()
	defer v.Close()
	f := lookup(t, v, RootIno, "f")
	g := lookup(t, v, RootIno, "g")
	d := lookup(t, v, RootIno, "d")
	ok(t, "remove f", os.Remove(e.base+"/f"))
	ok(t, "remove g", os.Remove(e.base+"/g"))
	buf := make([]byte, 10)
	_, err := v.ReadAt(f.Ino, buf, 0)
	wantErr(t, "read", err, ErrNotFound)
	_, err = v.WriteAt(f.Ino, []byte("x"), 5, false)
	wantErr(t, "partial block write", err, ErrNotFound)
	sz := int64(100)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Size: &sz})
	wantErr(t, "truncate mid-block", err, ErrNotFound)
	_, err = v.Fingerprint(f.Ino)
	wantErr(t, "fingerprint", err, ErrNotFound)
	_, err = v.BaseFile(g.Ino)
	wantErr(t, "base file", err, ErrNotFound)
	_, err = v.GetXattr(g.Ino, "user.x")
	wantErr(t, "getxattr", err, ErrNotFound)
	_, err = v.ListXattr(g.Ino)
	wantErr(t, "listxattr", err, ErrNotFound)
	wantErr(t, "setxattr", v.SetXattr(g.Ino, "user.x", []byte("1"), 0), ErrNotFound)
	// A directory below a base directory replaced by a symlink is not
	// read through the link.
	q := lookup(t, v, d.Ino, "q")
	ok(t, "remove d", os.RemoveAll(e.base+"/d"))
	ok(t, "mkdir elsewhere", os.MkdirAll(e.base+"/elsewhere/q", 0o755))
	put(t, e.base+"/elsewhere/q/secret", "s")
	ok(t, "symlink d", os.Symlink("elsewhere", e.base+"/d"))
	_, err = v.ReadDir(q.Ino)
	wantErr(t, "readdir below a symlink", err, syscall.ELOOP)
	// Whole-block writes need nothing from the base.
	_, err = v.WriteAt(f.Ino, make([]byte, MinBlockSize), MinBlockSize, false)
	ok(t, "whole-block write", err)
	// Opening a snapshot needs the base.
	frozen := freeze(t, e.store, "sb")
	ok(t, "remove base", os.RemoveAll(e.base))
	_, err = e.store.OpenSnapshot("sb", frozen)
	wantErr(t, "snapshot without a base", err, ErrNotFound)
}

func TestBaseXattrNamespaces(t *testing.T) {
	// A POSIX ACL with a named user is stored as system.posix_acl_access,
	// which the view carries over as it is; other system. names it does
	// not show.
	acl := []byte{2, 0, 0, 0}
	for _, ent := range []struct {
		tag, perm uint16
		id        uint32
	}{{1, 6, 0xffffffff}, {2, 4, 1000}, {4, 4, 0xffffffff}, {0x10, 4, 0xffffffff}, {0x20, 4, 0xffffffff}} {
		acl = binary.LittleEndian.AppendUint16(acl, ent.tag)
		acl = binary.LittleEndian.AppendUint16(acl, ent.perm)
		acl = binary.LittleEndian.AppendUint32(acl, ent.id)
	}
	e := newEnv(t, MinBlockSize, func(base string) {
		put(t, base+"/acl", "a")
		put(t, base+"/plain", "p")
		if err := unix.Setxattr(base+"/acl", "system.posix_acl_access", acl, 0); err != nil {
			t.Skipf("no POSIX ACLs here: %v", err)
		}
		ok(t, "setxattr", unix.Setxattr(base+"/acl", "user.u", []byte("u"), 0))
	})
	v := e.view()
	defer v.Close()
	ino := lookup(t, v, RootIno, "acl").Ino
	ls, err := v.ListXattr(ino)
	if err != nil || !sameStrings(ls, []string{XattrACLAccess, "user.u"}) {
		t.Fatalf("acl file: got %v, %v; want [%s user.u]", ls, err, XattrACLAccess)
	}
	got, err := v.GetXattr(ino, XattrACLAccess)
	if err != nil || !bytes.Equal(got, acl) {
		t.Fatalf("acl file's ACL: got %v, %v; want the base's %v", got, err, acl)
	}
	ls, err = v.ListXattr(lookup(t, v, RootIno, "plain").Ino)
	if err != nil || len(ls) != 0 {
		t.Fatalf("plain file: got %v, %v; want none", ls, err)
	}
	// Xattrs has them all at once, as copies.
	all, err := v.Xattrs(ino)
	if err != nil || len(all) != 2 || !bytes.Equal(all[XattrACLAccess], acl) || string(all["user.u"]) != "u" {
		t.Fatalf("Xattrs of the acl file: got %q, %v", all, err)
	}
	all["user.u"][0] = 'x'
	if got, _ := v.GetXattr(ino, "user.u"); string(got) != "u" {
		t.Fatalf("changing Xattrs' result changed the view: user.u is %q", got)
	}
	if _, err := v.Xattrs(1 << 40); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Xattrs of an unknown inode: got %v, want ErrNotFound", err)
	}
}

func TestFrozenDataMissing(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "frozen bytes")
	frozen := freeze(t, e.store, "sb")
	ok(t, "close", v.Close())
	ok(t, "remove data", os.Remove(e.store.dataPath(frozen)))
	v = e.view()
	defer v.Close()
	_, err := v.ReadAt(f.Ino, make([]byte, 4), 0)
	wantErr(t, "read of a block whose data file is gone", err, ErrNotFound)
}

// ghost makes directory dir of the active layer name an inode that does not
// exist anywhere.
func ghost(t *testing.T, s *Store, dir uint64, name string, typ uint32) {
	t.Helper()
	info, err := s.Sandbox("sb")
	ok(t, "sandbox", err)
	corrupt(t, s, keyEntry(info.Head, dir, name), encodeEntry(entry{Ino: 1<<62 + 999999, Type: typ}))
}

func TestDanglingEntries(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/f", "f") })
	v := e.view()
	d := mkdir(t, v, RootIno, "d")
	ok(t, "close", v.Close())
	ghost(t, e.store, RootIno, "ghost", syscall.S_IFREG)
	ghost(t, e.store, d.Ino, "gd", syscall.S_IFDIR)
	v = e.view()
	defer v.Close()
	_, err := v.Lookup(RootIno, "ghost")
	wantErr(t, "lookup", err, ErrNotFound)
	wantErr(t, "unlink", v.Unlink(RootIno, "ghost"), ErrNotFound)
	wantErr(t, "rename from", v.Rename(RootIno, "ghost", RootIno, "x", 0), ErrNotFound)
	wantErr(t, "rename onto", v.Rename(RootIno, "f", RootIno, "ghost", 0), ErrNotFound)
	wantErr(t, "exchange with", v.Rename(RootIno, "f", RootIno, "ghost", RenameExchange), ErrNotFound)
	// A directory whose listing holds a dangling entry is not empty.
	wantErr(t, "rmdir", v.Rmdir(RootIno, "d"), ErrNotEmpty)
}

func TestCorruptChildDirectory(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	d := mkdir(t, v, RootIno, "d")
	mkdir(t, v, RootIno, "e")
	ok(t, "close", v.Close())
	info, _ := e.store.Sandbox("sb")
	corrupt(t, e.store, keyEntry(info.Head, d.Ino, "bad"), []byte{0xff})
	v = e.view()
	defer v.Close()
	wantErr(t, "rmdir", v.Rmdir(RootIno, "d"), ErrCorrupt)
	wantErr(t, "rename over", v.Rename(RootIno, "e", RootIno, "d", 0), ErrCorrupt)
}

func TestCorruptFrozenRecord(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "one")
	frozen := freeze(t, e.store, "sb")
	_, err := v.WriteAt(f.Ino, []byte("two"), 0, false)
	ok(t, "write", err)
	ok(t, "close", v.Close())
	corrupt(t, e.store, keyInode(frozen, f.Ino), []byte{7})
	v = e.view()
	defer v.Close()
	_, err = v.ReadAt(f.Ino, make([]byte, 3), 0)
	wantErr(t, "read over a corrupt frozen record", err, ErrCorrupt)
}

func TestCorruptBlockMapEverywhere(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/b", "base") })
	v := e.view()
	b := lookup(t, v, RootIno, "b")
	_, err := v.WriteAt(b.Ino, []byte("B"), 0, false)
	ok(t, "write", err)
	frozen := freeze(t, e.store, "sb")
	ok(t, "close", v.Close())
	corrupt(t, e.store, keyBlock(frozen, b.Ino, 0), []byte{1})
	for _, c := range []struct {
		name string
		do   func(v *View) error
	}{
		{"write", func(v *View) error { _, err := v.WriteAt(b.Ino, []byte("x"), 0, false); return err }},
		{"truncate", func(v *View) error { n := int64(1); _, err := v.SetAttr(b.Ino, SetAttrIn{Size: &n}); return err }},
		{"base file", func(v *View) error { _, err := v.BaseFile(b.Ino); return err }},
		{"fingerprint", func(v *View) error { _, err := v.Fingerprint(b.Ino); return err }},
	} {
		v := e.view()
		lookup(t, v, RootIno, "b")
		err := c.do(v)
		v.Close()
		wantErr(t, c.name, err, ErrCorrupt)
	}
}

func TestStoreCorruptRecords(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	s := e.store
	v := e.view()
	mkfile(t, v, RootIno, "f", "data")
	ok(t, "close", v.Close())
	l1 := freeze(t, s, "sb")
	usage, err := s.LayerUsage(l1)
	if err != nil || usage.Blocks != 1 {
		t.Fatalf("usage: got %+v, %v", usage, err)
	}
	corrupt(t, s, append(prefixLayerTable(tBlock, l1), 1, 2, 3), []byte("x"))
	_, err = s.LayerUsage(l1)
	wantErr(t, "usage with a bad block key", err, ErrCorrupt)

	_, err = s.Layers("nope", false)
	wantErr(t, "layers of a missing sandbox", err, ErrNotFound)
	_, err = s.Repoint("nope", l1, noRepointFn)
	wantErr(t, "repoint a missing sandbox", err, ErrNotFound)
	corrupt(t, s, keyLayer("orphan"), []byte(`{"id":"orphan","parent":"gone","state":"frozen"}`))
	_, err = s.Repoint("sb", "orphan", noRepointFn)
	wantErr(t, "repoint onto a broken chain", err, ErrNotFound)
	// The empty stack is the base alone.
	bv, err := s.OpenSnapshot("sb", "")
	ok(t, "snapshot of the base alone", err)
	if got := names(t, bv, RootIno); len(got) != 0 {
		t.Fatalf("base alone: got %v, want the empty base", got)
	}
	ok(t, "close", bv.Close())

	// A pinned layer whose sandbox is gone can no longer be forked.
	ok(t, "pin", s.Update(func(tx *Txn) error { return tx.Pin(l1, "keeper") }))
	ok(t, "pin owned by the sandbox", s.Update(func(tx *Txn) error { return tx.Pin(l1, "sb/cp") }))
	ok(t, "remove", s.RemoveSandbox("sb"))
	if _, err := s.Layer(l1); err != nil {
		t.Fatalf("pinned layer after removing its sandbox: %v", err)
	}
	pins := 0
	_ = s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tPin, '/'}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			pins++
		}
		return nil
	})
	if pins != 1 {
		t.Fatalf("pins after removing the sandbox: got %d, want 1 (the sandbox's own pin goes)", pins)
	}
	_, err = s.Fork("fk", l1)
	wantErr(t, "fork of a layer whose sandbox is gone", err, ErrNotFound)

	// Corrupt records stop the listing and the collection.
	_, err = s.CreateSandbox("sb", e.base, 0)
	ok(t, "create again", err)
	corrupt(t, s, keyLayer("zz-bad"), []byte("{"))
	_, err = s.Layers("sb", true)
	wantErr(t, "layers with a corrupt record", err, ErrCorrupt)
	corrupt(t, s, keySandbox("bad"), []byte("["))
	_, err = s.CollectGarbage()
	wantErr(t, "gc with a corrupt sandbox", err, ErrCorrupt)
	_, err = s.CreateSandbox("bad", e.base, 0)
	wantErr(t, "create over a corrupt record", err, ErrCorrupt)
	corrupt(t, s, keySandbox("bad"), []byte(`{"name":"bad","head":"missing"}`))
	_, err = s.CollectGarbage()
	wantErr(t, "gc with a dangling head", err, ErrNotFound)
}

func TestGarbageCollectionDataErrors(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	s := e.store
	// An orphan data "file" that cannot be removed is reported.
	orphan := filepath.Join(s.Dir(), "data", "orphan")
	ok(t, "mkdir", os.MkdirAll(filepath.Join(orphan, "x"), 0o700))
	_, err := s.CollectGarbage()
	if err == nil {
		t.Fatalf("gc with an undeletable orphan: got no error")
	}
	ok(t, "clean", os.RemoveAll(orphan))
	// So is a doomed layer whose data cannot be removed.
	v := e.view()
	mkfile(t, v, RootIno, "f", "x")
	ok(t, "close", v.Close())
	l1 := freeze(t, s, "sb")
	l2 := freeze(t, s, "sb")
	_, err = s.Repoint("sb", l1, noRepointFn)
	ok(t, "repoint", err)
	ok(t, "mkdir", os.MkdirAll(filepath.Join(s.dataPath(l2), "x"), 0o700))
	_, err = s.CollectGarbage()
	if err == nil {
		t.Fatalf("gc with an undeletable layer data file: got no error")
	}
}

func TestFreezeErrorsWithLiveView(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	s := e.store
	v := e.view()
	defer v.Close()
	mkfile(t, v, RootIno, "f", "x")
	boom := errors.New("boom")
	_, _, err := s.Freeze("sb", func(*Txn, string, string) error { return boom })
	wantErr(t, "failing fn", err, boom)
	info, _ := s.Sandbox("sb")
	ok(t, "damage", s.update(func(txn *badger.Txn) error { return setLayerState(txn, info.Head, StateFrozen) }))
	_, _, err = s.Freeze("sb", noFreezeFn)
	wantErr(t, "frozen head", err, ErrCorrupt)
	ok(t, "repair", s.update(func(txn *badger.Txn) error { return setLayerState(txn, info.Head, StateActive) }))
	ok(t, "drop head layer", s.update(func(txn *badger.Txn) error { return txn.Delete(keyLayer(info.Head)) }))
	_, _, err = s.Freeze("sb", noFreezeFn)
	wantErr(t, "missing head layer", err, ErrNotFound)
}

func TestRepointReadOnlyView(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	l1 := freeze(t, e.store, "sb")
	v, err := e.store.OpenView("sb", true)
	ok(t, "open ro", err)
	defer v.Close()
	_, err = e.store.Repoint("sb", l1, noRepointFn)
	wantErr(t, "repoint under a read-only view", err, ErrReadOnly)
}

func TestRemovedButOpen(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) {
		put(t, base+"/bd/a", "a")
		put(t, base+"/bd/s/b", "b")
		put(t, base+"/file", "file")
	})
	v := e.view()
	defer func() { v.Close() }()
	// A removed directory held open takes no new names.
	d := mkdir(t, v, RootIno, "d")
	ok(t, "open dir", v.Open(d.Ino))
	ok(t, "rmdir", v.Rmdir(RootIno, "d"))
	_, err := v.Mknod(d.Ino, "x", 0o644, 0, root)
	wantErr(t, "create in a removed open dir", err, ErrNotFound)
	v.Release(d.Ino)
	// A base directory emptied by whiteouts can be removed; its whiteouts
	// stay as its tombstone, so the layer records what it removed.
	bd := lookup(t, v, RootIno, "bd")
	s := lookup(t, v, bd.Ino, "s")
	ok(t, "unlink", v.Unlink(s.Ino, "b"))
	ok(t, "rmdir s", v.Rmdir(bd.Ino, "s"))
	ok(t, "unlink a", v.Unlink(bd.Ino, "a"))
	ok(t, "rmdir bd", v.Rmdir(RootIno, "bd"))
	// A base file that was read (its base file is open) can be removed.
	f := lookup(t, v, RootIno, "file")
	if got := content(t, v, f.Ino); got != "file" {
		t.Fatalf("file: got %q", got)
	}
	ok(t, "unlink file", v.Unlink(RootIno, "file"))
	v = e.reopen(v)
	if got := names(t, v, RootIno); len(got) != 0 {
		t.Fatalf("root after removals: got %v, want empty", got)
	}
	info, _ := e.store.Sandbox("sb")
	entries := 0
	_ = e.store.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefixEntries(info.Head, bd.Ino)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			entries++
		}
		return nil
	})
	if entries != 2 {
		t.Fatalf("whiteouts kept under the removed base dir: got %d, want 2", entries)
	}
}

func TestRenameIntoUnloadedDir(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	a := mkdir(t, v, RootIno, "a")
	b := mkdir(t, v, a.Ino, "b")
	mkdir(t, v, RootIno, "x")
	v = e.reopen(v)
	defer func() { v.Close() }()
	// b is reached by number, without its parent a being loaded.
	x := lookup(t, v, RootIno, "x")
	ok(t, "rename", v.Rename(RootIno, "x", b.Ino, "x2", 0))
	if got := lookup(t, v, b.Ino, "x2"); got.Ino != x.Ino {
		t.Fatalf("moved dir: got ino %d, want %d", got.Ino, x.Ino)
	}
}

func TestCreateOverCorruptSandboxRecord(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	corrupt(t, e.store, keySandbox("x"), []byte("not json"))
	_, err := e.store.CreateSandbox("x", e.base, 0)
	wantErr(t, "create", err, ErrCorrupt)
	_, err = e.store.Sandbox("x")
	wantErr(t, "sandbox", err, ErrCorrupt)
}

func TestFrozenDataUnreadable(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "frozen bytes")
	frozen := freeze(t, e.store, "sb")
	ok(t, "close", v.Close())
	path := e.store.dataPath(frozen)
	ok(t, "remove data", os.Remove(path))
	ok(t, "mkdir in its place", os.Mkdir(path, 0o700))
	v = e.view()
	defer v.Close()
	_, err := v.ReadAt(f.Ino, make([]byte, 4), 0)
	wantErr(t, "read of a block from an unreadable data file", err, syscall.EISDIR)
}

// TestStoreFull puts the store's data directory on a tiny file system:
// writes that do not fit fail with ErrNoSpace, and what was written before
// stays readable.
func TestStoreFull(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) {
		put(t, base+"/f", string(bytes.Repeat([]byte("b"), 4*MinBlockSize)))
	})
	data := filepath.Join(e.store.Dir(), "data")
	if err := unix.Mount("tmpfs", data, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(data, unix.MNT_DETACH) })
	v := e.view()
	defer v.Close()
	f := lookup(t, v, RootIno, "f")
	n := mkfile(t, v, RootIno, "n", "kept")
	_, err := v.WriteAt(n.Ino, make([]byte, 1<<20), 0, false)
	wantErr(t, "large write", err, ErrNoSpace)
	// The file system is full now: a copy-up and a truncate's zeroing fail too.
	_, err = v.WriteAt(f.Ino, []byte("x"), 1, false)
	wantErr(t, "copy-up", err, ErrNoSpace)
	sz := int64(MinBlockSize + 10)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Size: &sz})
	wantErr(t, "truncate", err, ErrNoSpace)
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); len(got) == 0 {
		t.Fatalf("base file unreadable after ENOSPC")
	}
}

func TestGarbageCollectionWithoutDataDir(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	ok(t, "remove data dir", os.RemoveAll(filepath.Join(e.store.Dir(), "data")))
	_, err := e.store.CollectGarbage()
	wantErr(t, "gc", err, os.ErrNotExist)
}

// TestDataFileIOError makes the active layer's data file fail (as a disk
// error would): Sync, Freeze, Fingerprint and Close report it instead of
// sealing or committing blocks whose bytes were never read.
func TestDataFileIOError(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "unsealed")
	v.mu.Lock()
	v.files[v.activeLayer()].Close()
	v.mu.Unlock()
	_, err := v.Fingerprint(f.Ino)
	wantErr(t, "fingerprint", err, os.ErrClosed)
	wantErr(t, "sync", v.Sync(), os.ErrClosed)
	_, _, err = e.store.Freeze("sb", noFreezeFn)
	wantErr(t, "freeze", err, os.ErrClosed)
	wantErr(t, "store close", e.store.Close(), os.ErrClosed)
}

func TestFreezeClosedView(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	ok(t, "close", v.Close())
	// A view that closes while a freeze picks it up.
	e.store.mu.Lock()
	e.store.views["sb"] = v
	e.store.mu.Unlock()
	_, _, err := e.store.Freeze("sb", noFreezeFn)
	wantErr(t, "freeze", err, ErrClosed)
	e.store.mu.Lock()
	delete(e.store.views, "sb")
	e.store.mu.Unlock()
}

func TestRenameIntoVeryDeepTree(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	x := mkdir(t, v, RootIno, "x")
	cur := x.Ino
	for i := 0; i < 4100; i++ {
		cur = mkdir(t, v, cur, "d").Ino
	}
	y := mkdir(t, v, RootIno, "y")
	// Deeper than the walk goes, a move is allowed (the kernel checks
	// ancestry itself); a shallow move below itself is not.
	ok(t, "rename y deep", v.Rename(RootIno, "y", cur, "y", 0))
	if got := lookup(t, v, cur, "y"); got.Ino != y.Ino {
		t.Fatalf("moved: got ino %d, want %d", got.Ino, y.Ino)
	}
	wantErr(t, "rename x below itself", v.Rename(RootIno, "x", lookup(t, v, x.Ino, "d").Ino, "x", 0), ErrInvalid)
}

// TestDataFileSyncErrors: with nothing left to seal, Sync and Freeze still
// flush the data file and report when that fails; a truncate that zeroes
// the tail of an unsealed block reports a failed write.
func TestDataFileSyncErrors(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "0123456789")
	ok(t, "sync", v.Sync())
	_, err := v.WriteAt(f.Ino, []byte("x"), 0, false) // a fresh unsealed slot
	ok(t, "write", err)
	v.mu.Lock()
	v.files[v.activeLayer()].Close()
	v.mu.Unlock()
	sz := int64(5)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Size: &sz})
	wantErr(t, "truncate", err, os.ErrClosed)
	v.mu.Lock()
	v.dirty = map[uint64]*inodeState{} // nothing to seal
	v.mu.Unlock()
	// A full sync (the intent log would take no data: nothing is sealed).
	wantErr(t, "sync", v.sync(false, false), syscall.EBADF)
	_, _, err = e.store.Freeze("sb", noFreezeFn)
	wantErr(t, "freeze", err, os.ErrClosed)
}

// TestRemovalTombstones: removing an inode that a lower layer holds leaves
// its tombstone (its record with no links) in the active layer; one born
// in the active layer leaves nothing, and the removal asks no lower layer
// (bornIn), even after many freezes below it.
func TestRemovalTombstones(t *testing.T) {
	for _, tc := range []struct {
		name      string
		freezes   int  // freezes before the file is made
		between   bool // a freeze between making and removing it
		tombstone bool
	}{
		{"born and removed in one layer", 0, false, false},
		{"born over a deep stack", 40, false, false},
		{"made below, removed above", 0, true, true},
		{"made below a deep stack's top", 40, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			defer func() { v.Close() }()
			for i := 0; i < tc.freezes; i++ {
				mkfile(t, v, RootIno, fmt.Sprintf("k%d", i), "k")
				_, _, err := e.store.Freeze("sb", noFreezeFn)
				ok(t, "freeze", err)
			}
			f := mkfile(t, v, RootIno, "f", "data")
			if tc.between {
				_, _, err := e.store.Freeze("sb", noFreezeFn)
				ok(t, "freeze", err)
			}
			ok(t, "unlink", v.Unlink(RootIno, "f"))
			ok(t, "sync", v.Sync())
			info, err := e.store.Sandbox("sb")
			ok(t, "sandbox", err)
			val, found, err := e.store.record(keyInode(info.Head, f.Ino))
			ok(t, "read the record", err)
			if found != tc.tombstone {
				t.Fatalf("record of the removed inode in the active layer: found %v, want %v", found, tc.tombstone)
			}
			if found {
				rec, err := decodeInode(val)
				ok(t, "decode", err)
				if rec.Nlink != 0 {
					t.Fatalf("tombstone has %d links, want 0", rec.Nlink)
				}
			}
			v = e.reopen(v)
			_, err = v.Lookup(RootIno, "f")
			wantErr(t, "lookup after a restart", err, ErrNotFound)
		})
	}
}

// TestSyncWhileAFreezeClosesTheDataFile: a Sync lets go of the view's
// locks after its seal and then syncs the data file; a checkpoint taken
// in between syncs that file itself and closes it. The Sync then finds
// the file closed: its data is durable already, and the fsync must not
// fail (it failed with EBADF in the crash test, 1 run in 17).
func TestSyncWhileAFreezeClosesTheDataFile(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer func() { v.Close() }()
	f := mkfile(t, v, RootIno, "f", "before")
	ok(t, "first sync", v.Sync())
	_, err := v.WriteAt(f.Ino, []byte("after!"), 0, false)
	ok(t, "write", err)
	froze := false
	syncGapHook = func(hv *View) {
		if hv != v || froze {
			return
		}
		froze = true
		_, _, err := e.store.Freeze("sb", noFreezeFn)
		ok(t, "freeze in the gap", err)
	}
	t.Cleanup(func() { syncGapHook = nil })
	ok(t, "sync across a freeze", v.Sync())
	syncGapHook = nil
	if !froze {
		t.Fatal("the hook did not run")
	}
	v = e.reopen(v)
	if got := content(t, v, f.Ino); got != "after!" {
		t.Fatalf("after a restart: %q, want %q", got, "after!")
	}
}
