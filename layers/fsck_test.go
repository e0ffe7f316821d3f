package layers

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// fsckEnv is a healthy store: sandbox sb over a base with one file, a
// frozen layer holding d/x (two blocks) and an active layer on top.
type fsckEnv struct {
	*testEnv
	l1, head string
	d, x, f  uint64
}

func newFsckEnv(t *testing.T) *fsckEnv {
	t.Helper()
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/f", "base file") })
	v := e.view()
	d := mkdir(t, v, RootIno, "d")
	x := mkfile(t, v, d.Ino, "x", strings.Repeat("x", 2*MinBlockSize))
	f := lookup(t, v, RootIno, "f")
	ok(t, "close", v.Close())
	l1 := freeze(t, e.store, "sb")
	info, _ := e.store.Sandbox("sb")
	return &fsckEnv{testEnv: e, l1: l1, head: info.Head, d: d.Ino, x: x.Ino, f: f.Ino}
}

func TestFsckHealthy(t *testing.T) {
	e := newFsckEnv(t)
	// A key outside Strata's tables is none of fsck's business.
	corrupt(t, e.store, []byte("zz"), []byte("foreign"))
	rep, err := e.store.Fsck()
	ok(t, "fsck", err)
	if len(rep.Problems) != 0 {
		t.Fatalf("healthy store: got problems %+v", rep.Problems)
	}
	if rep.Sandboxes != 1 || rep.Layers != 2 || rep.Blocks != 2 || rep.Inodes < 3 || rep.Entries < 2 || rep.Paths < 4 {
		t.Fatalf("counts: got %+v", rep)
	}
	// Archived layers (out of every stack) are checked too, and are fine.
	_, err = e.store.Repoint("sb", e.l1, noRepointFn)
	ok(t, "repoint", err)
	v := e.view()
	_, err = v.WriteAt(lookup(t, v, lookup(t, v, RootIno, "d").Ino, "x").Ino, []byte("new"), 0, false)
	ok(t, "write", err)
	ok(t, "close", v.Close())
	l2 := freeze(t, e.store, "sb")
	_, err = e.store.Repoint("sb", e.l1, noRepointFn)
	ok(t, "repoint again", err)
	if l, _ := e.store.Layer(l2); l.State != StateArchived {
		t.Fatalf("l2: got state %q, want archived", l.State)
	}
	rep, err = e.store.Fsck()
	ok(t, "fsck", err)
	if len(rep.Problems) != 0 || rep.Blocks != 3 {
		t.Fatalf("store with archived layers: got %d blocks, problems %+v; want 3 blocks, none", rep.Blocks, rep.Problems)
	}
}

func TestFsckFindsDamage(t *testing.T) {
	const fakeLayer = "01ZZZZZZZZZZZZZZZZZZZZZZZZ" // 26 characters, like a ULID
	set := func(t *testing.T, s *Store, key, val []byte) { corrupt(t, s, key, val) }
	cases := []struct {
		name   string
		damage func(t *testing.T, e *fsckEnv)
		kind   string
		detail string
		path   string
	}{
		{"sandbox record", func(t *testing.T, e *fsckEnv) { set(t, e.store, keySandbox("bad"), []byte("{")) }, "record", "sandbox record", ""},
		{"layer record", func(t *testing.T, e *fsckEnv) { set(t, e.store, keyLayer("bad"), []byte("{")) }, "record", "layer record", ""},
		{"malformed key", func(t *testing.T, e *fsckEnv) { set(t, e.store, []byte("i/short"), []byte("x")) }, "record", "malformed key", ""},
		{"inode key", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, append(prefixLayerTable(tInode, e.l1), 1, 2), []byte("x"))
		}, "record", "malformed inode key", ""},
		{"inode record", func(t *testing.T, e *fsckEnv) { set(t, e.store, keyInode(e.l1, e.x), []byte{9}) }, "record", "inode record", "d/x"},
		{"entry key", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, append(prefixLayerTable(tEntry, e.l1), 1), []byte("x"))
		}, "record", "malformed entry key", ""},
		{"entry value", func(t *testing.T, e *fsckEnv) { set(t, e.store, keyEntry(e.l1, e.d, "bad"), []byte{0xff}) }, "record", "entry \"bad\"", ""},
		{"block key", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, append(prefixLayerTable(tBlock, e.l1), 1), []byte("x"))
		}, "record", "malformed block key", ""},
		{"block ref", func(t *testing.T, e *fsckEnv) { set(t, e.store, keyBlock(e.l1, e.x, 0), []byte{1}) }, "record", "block ref", ""},
		{"checksum count", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyBlock(e.l1, e.x, 0), encodeBlockRef(blockRef{Slot: 0, CRCs: []uint32{1, 2}}))
		}, "record", "has 2 checksums", ""},
		{"key of a missing layer", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyInode(fakeLayer, 5), encodeInode(&Inode{Floor: -1}))
		}, "orphan", "does not exist", ""},
		{"block of a missing layer", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyBlock(fakeLayer, 5, 0), encodeBlockRef(blockRef{CRCs: []uint32{0}}))
		}, "orphan", "does not exist", ""},
		{"missing parent", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyLayer("lonely"), []byte(`{"id":"lonely","sandbox":"x","parent":"gone","state":"frozen"}`))
		}, "structure", "parent layer gone", ""},
		{"unknown state", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyLayer("odd"), []byte(`{"id":"odd","sandbox":"x","state":"melted"}`))
		}, "record", "unknown state", ""},
		{"missing stack layer", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keySandbox("nohead"), []byte(`{"name":"nohead","base":"`+e.base+`","block_size":4096,"head":"gone"}`))
		}, "structure", "layer of the stack does not exist", ""},
		{"cycle", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyLayer("cyc"), []byte(`{"id":"cyc","sandbox":"cy","parent":"cyc","state":"active"}`))
			set(t, e.store, keySandbox("cy"), []byte(`{"name":"cy","base":"`+e.base+`","block_size":4096,"head":"cyc"}`))
		}, "structure", "cycle", ""},
		{"frozen head", func(t *testing.T, e *fsckEnv) {
			ok(t, "state", e.store.update(func(txn *badger.Txn) error { return setLayerState(txn, e.head, StateFrozen) }))
		}, "structure", "not active", ""},
		{"missing data file", func(t *testing.T, e *fsckEnv) {
			ok(t, "remove", os.Remove(e.store.dataPath(e.l1)))
		}, "checksum", "data file", ""},
		{"flipped byte", func(t *testing.T, e *fsckEnv) {
			p := e.store.dataPath(e.l1)
			raw, err := os.ReadFile(p)
			ok(t, "read", err)
			raw[MinBlockSize+10] ^= 1
			ok(t, "write", os.WriteFile(p, raw, 0o600))
		}, "checksum", "fails its checksum", "d/x"},
		{"unreadable data file", func(t *testing.T, e *fsckEnv) {
			p := e.store.dataPath(e.l1)
			ok(t, "remove", os.Remove(p))
			ok(t, "mkdir", os.Mkdir(p, 0o700))
		}, "checksum", "block", ""},
		{"orphan data file", func(t *testing.T, e *fsckEnv) {
			ok(t, "write", os.WriteFile(e.store.dataPath(fakeLayer), []byte("junk"), 0o600))
		}, "orphan", "data file", ""},
		{"entry to nothing", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyEntry(e.head, RootIno, "ghost"), encodeEntry(entry{Ino: 1<<62 + 424242, Type: 0o100000}))
		}, "structure", "does not load", "ghost"},
		{"entry of the wrong type", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyEntry(e.head, RootIno, "d2"), encodeEntry(entry{Ino: e.x, Type: 0o40000}))
		}, "structure", "entry says type", "d2"},
		{"named inode without links", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyInode(e.head, e.x), encodeInode(&Inode{Mode: 0o100644, Size: 1, Floor: -1}))
		}, "structure", "no links", "d/x"},
		{"directory that does not list", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyEntry(e.head, e.d, "junk"), []byte{0xff})
		}, "structure", "does not list", "d"},
		{"directory cycle", func(t *testing.T, e *fsckEnv) {
			set(t, e.store, keyEntry(e.head, e.d, "loop"), encodeEntry(entry{Ino: e.d, Type: 0o40000}))
		}, "structure", "too deep", ""},
		{"base gone", func(t *testing.T, e *fsckEnv) {
			ok(t, "remove base", os.RemoveAll(e.base))
		}, "structure", "cannot open the stack", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newFsckEnv(t)
			c.damage(t, e)
			rep, err := e.store.Fsck()
			ok(t, "fsck", err)
			for _, p := range rep.Problems {
				if p.Kind == c.kind && strings.Contains(p.Detail, c.detail) && (c.path == "" || p.Path == c.path) {
					return
				}
			}
			t.Fatalf("got problems %+v, want one of kind %q about %q (path %q)", rep.Problems, c.kind, c.detail, c.path)
		})
	}
}

func TestFsckCleanAndCorrupt(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) {
		put(t, base+"/dir/a", "base a")
	})
	v := e.view()
	f := mkfile(t, v, RootIno, "f", strings.Repeat("x", 3*MinBlockSize))
	d := lookup(t, v, RootIno, "dir")
	ok(t, "unlink base file", v.Unlink(d.Ino, "a"))
	ok(t, "close", v.Close())

	rep, err := e.store.Fsck()
	ok(t, "fsck", err)
	if len(rep.Problems) != 0 {
		t.Fatalf("fsck of a healthy store: got %+v, want no problems", rep.Problems)
	}
	if rep.Blocks != 3 || rep.Sandboxes != 1 || rep.Layers != 1 || rep.Paths != 3 {
		t.Fatalf("fsck counted %+v, want 3 blocks, 1 sandbox, 1 layer, 3 paths", rep)
	}

	// Flip one byte of the file's second block in the layer's data file.
	info, _ := e.store.Sandbox("sb")
	data := e.store.dataPath(info.Head)
	b, err := os.ReadFile(data)
	ok(t, "read data", err)
	b[MinBlockSize+100] ^= 0xff
	ok(t, "write data", os.WriteFile(data, b, 0o600))
	// An orphan data file too.
	ok(t, "orphan", os.WriteFile(e.store.dataPath("01ORPHANORPHANORPHANORPHAN"), nil, 0o600))

	rep, err = e.store.Fsck()
	ok(t, "fsck", err)
	var checksum, orphan bool
	for _, p := range rep.Problems {
		switch p.Kind {
		case "checksum":
			checksum = true
			if p.Path != "f" || p.Ino != f.Ino || p.Sandbox != "sb" {
				t.Errorf("checksum problem %+v: want path f, inode %d, sandbox sb", p, f.Ino)
			}
		case "orphan":
			orphan = true
		}
	}
	if !checksum || !orphan || len(rep.Problems) != 2 {
		t.Fatalf("fsck after damage: got %+v, want one checksum and one orphan problem", rep.Problems)
	}
	// fsck repaired nothing: the damage is still there.
	v = e.view()
	defer v.Close()
	buf := make([]byte, MinBlockSize)
	if _, err := v.ReadAt(f.Ino, buf, MinBlockSize); !strings.Contains(errString(err), "checksum") {
		t.Fatalf("read of the damaged block: got %v, want a checksum error", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestFsckFollowsMovedBlocks checks fsck against a live writer: a block
// whose old slot was punched after a write moved it is checked at its new
// slot, a block that is gone is not a problem, and damage under a record
// that did not move still is.
func TestFsckFollowsMovedBlocks(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	f := mkfile(t, v, RootIno, "f", strings.Repeat("x", 2*MinBlockSize))
	ok(t, "sync", v.Sync())
	info, _ := e.store.Sandbox("sb")
	act := info.Head
	data, err := os.Open(e.store.dataPath(act))
	ok(t, "open data", err)
	defer data.Close()
	record := func(blk uint64) blockRef {
		t.Helper()
		ref, found, err := e.store.blockRecord(act, f.Ino, blk)
		ok(t, "block record", err)
		if !found {
			t.Fatalf("block %d: no record", blk)
		}
		return ref
	}
	check := func(what string, blk uint64, ref blockRef, want int) {
		t.Helper()
		page, err := e.store.checkBlockLive(data, act, f.Ino, blk, ref, MinBlockSize)
		ok(t, what, err)
		if page != want {
			t.Fatalf("%s: got failing page %d, want %d", what, page, want)
		}
	}
	old0, old1 := record(0), record(1)
	check("healthy block", 0, old0, -1)

	// The write moves block 0; once durable, its old slot is a hole.
	_, err = v.WriteAt(f.Ino, []byte("y"), 0, false)
	ok(t, "write", err)
	ok(t, "sync", v.Sync())
	if now := record(0); now.Slot == old0.Slot {
		t.Fatalf("the write did not move block 0 (slot %d)", now.Slot)
	}
	if page := failingPage(make([]byte, MinBlockSize), old0.CRCs); page != 0 {
		t.Fatalf("the stale record should fail on a punched slot at page 0, got %d", page)
	}
	check("moved block", 0, old0, -1)

	// Truncation drops block 1: its stale record describes nothing now.
	one := int64(1)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Size: &one})
	ok(t, "truncate", err)
	ok(t, "sync", v.Sync())
	check("dropped block", 1, old1, -1)

	// Damage under a record that stays put is reported.
	now0 := record(0)
	bad := make([]byte, 1)
	_, err = data.ReadAt(bad, now0.off())
	ok(t, "read", err)
	bad[0] ^= 0xff
	w, err := os.OpenFile(e.store.dataPath(act), os.O_WRONLY, 0)
	ok(t, "open for damage", err)
	_, err = w.WriteAt(bad, now0.off())
	ok(t, "damage", err)
	ok(t, "close", w.Close())
	check("damaged block", 0, now0, 0)

	// A record that no longer decodes is an error, not a verdict.
	corrupt(t, e.store, keyBlock(act, f.Ino, 0), []byte{1})
	if _, err := e.store.checkBlockLive(data, act, f.Ino, 0, now0, MinBlockSize); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("undecodable record: got %v, want ErrCorrupt", err)
	}
	// So is a data file that cannot be read.
	closed, err := os.Open(e.store.dataPath(act))
	ok(t, "open", err)
	closed.Close()
	if _, err := e.store.checkBlockLive(closed, act, f.Ino, 0, now0, MinBlockSize); err == nil {
		t.Fatal("read of a closed data file: got no error")
	}
}

// TestFsckWhileWriting runs fsck again and again while a writer keeps
// rewriting and syncing the same blocks, which moves them and punches their
// old slots under fsck's feet: fsck must find nothing wrong.
func TestFsckWhileWriting(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	const blocks = 256
	f := mkfile(t, v, RootIno, "f", strings.Repeat("x", blocks*MinBlockSize))
	ok(t, "sync", v.Sync())
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			if _, err := v.WriteAt(f.Ino, []byte{byte(i)}, int64(i%blocks)*MinBlockSize+pageSize, false); err != nil {
				done <- err
				return
			}
			if err := v.Sync(); err != nil {
				done <- err
				return
			}
		}
	}()
	for i, end := 0, time.Now().Add(time.Second); time.Now().Before(end); i++ {
		rep, err := e.store.Fsck()
		if err != nil || len(rep.Problems) != 0 {
			close(stop)
			<-done
			t.Fatalf("fsck %d while writing: %v, problems %+v", i, err, rep.Problems)
		}
	}
	close(stop)
	ok(t, "writer", <-done)
}
