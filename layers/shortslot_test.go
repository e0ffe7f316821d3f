package layers

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// activeRef is the open or sealed ref of block blk of ino in the view's
// active layer.
func activeRef(t *testing.T, v *View, ino, blk uint64) blockRef {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	st, err := v.getInode(ino)
	ok(t, "inode", err)
	ok(t, "blocks", v.ensureBlocks(st))
	ref, found := st.active[blk]
	if !found {
		t.Fatalf("inode %d block %d has no slot in the active layer", ino, blk)
	}
	return *ref
}

// TestShortSlots: a block copied up from a short file, or first written
// near its start, takes only the pages it needs, next to the slot handed
// out before it; writes past the slot move the block to a larger one, and
// the file reads the same all along, sealed, after a restart and after a
// freeze.
func TestShortSlots(t *testing.T) {
	const bs = DefaultBlockSize
	small := "package main // a short base file\n"
	e := newEnv(t, bs, func(base string) {
		for i := range 3 {
			put(t, filepath.Join(base, fmt.Sprintf("f%d", i)), small)
		}
	})
	v := e.view()
	t.Cleanup(func() { v.Close() })
	want := map[uint64][]byte{}
	write := func(ino uint64, p string, off int64) {
		t.Helper()
		_, err := v.WriteAt(ino, []byte(p), off, false)
		ok(t, "write", err)
		w := want[ino]
		if need := off + int64(len(p)); int64(len(w)) < need {
			w = append(w, make([]byte, need-int64(len(w)))...)
		}
		copy(w[off:], p)
		want[ino] = w
	}
	check := func(what string) {
		t.Helper()
		for ino, w := range want {
			if got := content(t, v, ino); got != string(w) {
				t.Fatalf("%s: inode %d reads %d bytes %q..., want %d bytes", what, ino, len(got), got[:min(len(got), 40)], len(w))
			}
		}
	}
	var inos []uint64
	for i := range 3 {
		a := lookup(t, v, RootIno, fmt.Sprintf("f%d", i))
		inos = append(inos, a.Ino)
		want[a.Ino] = []byte(small)
		write(a.Ino, "PACKAGE", 0)
	}
	// Three edits, three one-page slots one after the other.
	for i, ino := range inos {
		ref := activeRef(t, v, ino, 0)
		if ref.capPages() != 1 || ref.Slot != uint64(i) {
			t.Fatalf("edit %d: slot %d of %d pages, want slot %d of 1", i, ref.Slot, ref.capPages(), i)
		}
	}
	check("after the edits")
	ok(t, "sync", v.Sync())
	check("sealed")

	// A write past the slot of a sealed block copies it to a new slot
	// large enough; one past an open slot moves it.
	write(inos[0], "tail", 3*pageSize+10)
	ref := activeRef(t, v, inos[0], 0)
	if ref.capPages() < 4 || ref.Slot < 3 {
		t.Fatalf("after a write at page 3: slot %d of %d pages", ref.Slot, ref.capPages())
	}
	write(inos[1], "x", 1)
	before := activeRef(t, v, inos[1], 0)
	write(inos[1], "far", bs-3)
	after := activeRef(t, v, inos[1], 0)
	if after.Slot == before.Slot || after.capPages() != int(bs/pageSize) {
		t.Fatalf("a write at the block's end: slot %d of %d pages, was %d of %d", after.Slot, after.capPages(), before.Slot, before.capPages())
	}
	// A file written a page at a time grows its slot by doubling.
	nf := mkfile(t, v, RootIno, "grown", "")
	want[nf.Ino] = nil
	moves, last := 0, uint64(1<<63)
	for p := int64(0); p < bs/pageSize; p++ {
		write(nf.Ino, string(bytes.Repeat([]byte{byte('a' + p)}, pageSize)), p*pageSize)
		if r := activeRef(t, v, nf.Ino, 0); r.Slot != last {
			moves, last = moves+1, r.Slot
		}
	}
	if moves > 6 {
		t.Fatalf("a block written a page at a time took %d slots", moves)
	}
	// Truncating into a short slot and growing again reads zeros.
	sz := int64(5)
	_, err := v.SetAttr(inos[2], SetAttrIn{Size: &sz})
	ok(t, "truncate", err)
	want[inos[2]] = want[inos[2]][:5]
	sz = 2 * pageSize
	_, err = v.SetAttr(inos[2], SetAttrIn{Size: &sz})
	ok(t, "extend", err)
	want[inos[2]] = append(want[inos[2]], make([]byte, sz-5)...)
	check("after growing and truncating")
	ok(t, "sync", v.Sync())
	if _, err := e.store.Fsck(); err != nil {
		t.Fatalf("fsck: %v", err)
	}
	v = e.reopen(v)
	check("after a restart")
	_, _, err = e.store.Freeze("sb", noFreezeFn)
	ok(t, "freeze", err)
	write(inos[2], "after the freeze", 100)
	check("after a freeze")
	rep, err := e.store.Fsck()
	ok(t, "fsck", err)
	if len(rep.Problems) != 0 {
		t.Fatalf("fsck: %+v", rep.Problems)
	}
}

// TestShortSlotsAfterACrash: a process killed after a sync leaves its
// data file ending inside the last short slot, past which that slot's
// record still names pages; the next view hands out none of them again.
func TestShortSlotsAfterACrash(t *testing.T) {
	e := newEnv(t, DefaultBlockSize, func(base string) { put(t, base+"/f", "base bytes") })
	v := e.view()
	t.Cleanup(func() { v.Close() })
	f := lookup(t, v, RootIno, "f")
	// Thirteen one-page slots, then a new file written 3 pages long,
	// whose slot keeps room to grow (4 pages): the data file ends at page
	// 16, a block boundary, and the slot at page 17.
	for i := range 13 {
		mkfile(t, v, RootIno, fmt.Sprintf("small%d", i), "x")
	}
	g := mkfile(t, v, RootIno, "g", "")
	_, err := v.WriteAt(g.Ino, bytes.Repeat([]byte("g"), 3*pageSize), 0, false)
	ok(t, "write g", err)
	if r := activeRef(t, v, g.Ino, 0); r.capPages() != 4 || r.Slot != 13 {
		t.Fatalf("a growing block's slot: %d pages at page %d, want 4 at 13", r.capPages(), r.Slot)
	}
	ok(t, "sync", v.Sync())
	// The image a kill -9 leaves: what the kernel has, no Close.
	crashed := filepath.Join(t.TempDir(), "store")
	if out, err := exec.Command("cp", "-a", filepath.Join(e.dir, "store"), crashed).CombinedOutput(); err != nil {
		t.Fatalf("copy the store: %v %s", err, out)
	}
	s2, err := Open(crashed)
	ok(t, "open the image", err)
	t.Cleanup(func() { s2.Close() })
	v2, err := s2.OpenView("sb", false)
	ok(t, "view of the image", err)
	t.Cleanup(func() { v2.Close() })
	if f2 := lookup(t, v2, RootIno, "f"); f2.Ino != f.Ino || lookup(t, v2, RootIno, "g").Ino != g.Ino {
		t.Fatalf("inode numbers changed across the crash")
	}
	_, err = v2.WriteAt(f.Ino, []byte("BASE"), 0, false)
	ok(t, "write f", err)
	ok(t, "sync image", v2.Sync())
	for _, c := range []struct {
		ino  uint64
		want string
	}{{f.Ino, "BASE bytes"}, {g.Ino, string(bytes.Repeat([]byte("g"), 3*pageSize))}} {
		if got := content(t, v2, c.ino); got != c.want {
			t.Fatalf("inode %d reads %d bytes, want %d", c.ino, len(got), len(c.want))
		}
	}
	rf, rg := activeRef(t, v2, f.Ino, 0), activeRef(t, v2, g.Ino, 0)
	if rf.Slot < rg.Slot+uint64(rg.capPages()) {
		t.Fatalf("the slot handed out after the crash (%d) lies in the one before it (%d, %d pages)", rf.Slot, rg.Slot, rg.capPages())
	}
}

// TestShortSlotsGrowUnderConcurrentWriters: writers that share the view
// while each grows the same block must not lose one another's bytes to a
// slot that moved under them.
func TestShortSlotsGrowUnderConcurrentWriters(t *testing.T) {
	e := newEnv(t, DefaultBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	const writers, rounds = 8, 20
	var files []uint64
	for i := range 4 {
		files = append(files, mkfile(t, v, RootIno, fmt.Sprintf("c%d", i), "").Ino)
	}
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				// Writer w owns every writers-th 100-byte cell of each file.
				off := int64(r*writers+w) * 100
				for _, ino := range files {
					if _, err := v.WriteAt(ino, bytes.Repeat([]byte{byte('A' + w)}, 100), off, false); err != nil {
						errs <- err
						return
					}
				}
				if r%7 == w%7 {
					if err := v.Sync(); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var want []byte
	for r := range rounds {
		for w := range writers {
			_ = r
			want = append(want, bytes.Repeat([]byte{byte('A' + w)}, 100)...)
		}
	}
	for _, ino := range files {
		if got := content(t, v, ino); got != string(want) {
			t.Fatalf("inode %d lost bytes: %d read, want %d", ino, len(got), len(want))
		}
	}
}

// TestShortSlotReadsPastItsPages: a block whose slot holds fewer pages than
// the file now spans (the file grew by truncate, not by writes) reads as
// its pages, then zeros, at every offset and length, before and after the
// slot is sealed, and the truncate does not grow the slot.
func TestShortSlotReadsPastItsPages(t *testing.T) {
	const bs = DefaultBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	a := mkfile(t, v, RootIno, "f", "head")
	size := int64(bs + 100)
	_, err := v.SetAttr(a.Ino, SetAttrIn{Size: &size})
	ok(t, "truncate up", err)
	if ref := activeRef(t, v, a.Ino, 0); ref.capPages() != 1 {
		t.Fatalf("the truncate made the slot %d pages, want 1", ref.capPages())
	}
	want := append([]byte("head"), make([]byte, size-4)...)
	for _, when := range []string{"open", "sealed"} {
		if when == "sealed" {
			ok(t, "sync", v.Sync())
		}
		for _, c := range []struct {
			name     string
			off, len int64
		}{
			{"within the page", 0, 4},
			{"across the page's end", 2, pageSize},
			{"wholly past the page", 2 * pageSize, pageSize},
			{"the block's last byte", bs - 1, 1},
			{"into the next block", bs - 10, 20},
			{"the whole file", 0, size},
		} {
			buf := make([]byte, c.len)
			for i := range buf {
				buf[i] = 0xff
			}
			n, err := v.ReadAt(a.Ino, buf, c.off)
			ok(t, c.name, err)
			if int64(n) != c.len || string(buf) != string(want[c.off:c.off+c.len]) {
				t.Errorf("%s, %s: read %d bytes, not what the file holds", when, c.name, n)
			}
		}
	}
}
