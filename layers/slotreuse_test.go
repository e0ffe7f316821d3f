package layers

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// dataFileUse is the apparent size and the allocated bytes of the active
// layer's data file.
func dataFileUse(t *testing.T, e *testEnv, v *View) (size, alloc int64) {
	t.Helper()
	v.mu.Lock()
	layer := v.activeLayer()
	v.mu.Unlock()
	return layerFileUse(t, e, layer)
}

func layerFileUse(t *testing.T, e *testEnv, layer string) (size, alloc int64) {
	t.Helper()
	fi, err := os.Stat(e.store.dataPath(layer))
	ok(t, "stat data file", err)
	return fi.Size(), fi.Sys().(*syscall.Stat_t).Blocks * 512
}

// TestSlotReuseFsyncLoop: a small write into a sealed block followed by a
// sync, over and over (a database's or an editor's pattern), copies the
// block into a slot an earlier sync freed, not into a new one at the end
// of the data file: the file stops growing, every version reads back as
// written, and so it does after a restart and a freeze.
func TestSlotReuseFsyncLoop(t *testing.T) {
	const bs = DefaultBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	want := bytes.Repeat([]byte("x"), 2*bs)
	db := mkfile(t, v, RootIno, "db", string(want))
	ok(t, "sync", v.Sync())
	size0, _ := dataFileUse(t, e, v)
	for i := range 300 {
		rec := []byte(fmt.Sprintf("record %04d;", i))
		off := int64(i%10)*pageSize + int64(i%2)*bs // both blocks
		_, err := v.WriteAt(db.Ino, rec, off, false)
		ok(t, "write", err)
		copy(want[off:], rec)
		ok(t, "sync", v.Sync())
		if i%50 == 0 {
			if got := content(t, v, db.Ino); got != string(want) {
				t.Fatalf("after write %d the file reads otherwise", i)
			}
		}
	}
	size, alloc := dataFileUse(t, e, v)
	// Without reuse every sync would leave a block behind: 300 blocks.
	// (A pause of the writer longer than idleSync, on a loaded machine,
	// gives the kept slots back and costs a new one.)
	if size > size0+40*bs {
		t.Fatalf("the data file grew from %d to %d bytes over 300 synced writes", size0, size)
	}
	if alloc > 40*bs {
		t.Fatalf("the data file holds %d bytes for a file of 2 blocks", alloc)
	}
	v = e.reopen(v)
	if got := content(t, v, db.Ino); got != string(want) {
		t.Fatal("after a restart the file reads otherwise")
	}
	// A freeze gives the kept slots back to the file system.
	keepReuseWhenIdle = true
	t.Cleanup(func() { keepReuseWhenIdle = false })
	_, err := v.WriteAt(db.Ino, []byte("after restart"), 0, false)
	ok(t, "write", err)
	copy(want, "after restart")
	ok(t, "sync", v.Sync())
	_, err = v.WriteAt(db.Ino, []byte("AFTER"), 0, false)
	ok(t, "write", err)
	copy(want, "AFTER")
	ok(t, "sync", v.Sync())
	v.mu.Lock()
	layer, kept := v.activeLayer(), v.reusePages
	v.mu.Unlock()
	if kept == 0 {
		t.Fatal("no freed slot is kept for reuse after the restart")
	}
	frozen, _, err := e.store.Freeze(e.name, noFreezeFn)
	ok(t, "freeze", err)
	if frozen != layer {
		t.Fatalf("froze %s, want %s", frozen, layer)
	}
	v.mu.Lock()
	kept = v.reusePages
	v.mu.Unlock()
	if kept != 0 {
		t.Fatalf("%d pages kept for reuse over the new active layer", kept)
	}
	if _, alloc := layerFileUse(t, e, frozen); alloc > 2*bs+8*pageSize {
		t.Fatalf("the frozen layer's data file holds %d bytes for 2 blocks", alloc)
	}
	if got := content(t, v, db.Ino); got != string(want) {
		t.Fatal("after the freeze the file reads otherwise")
	}
	fsckClean(t, e.store)
}

// TestSlotReuseReadsZeros: a reused slot held another block's bytes; the
// pages of it a copy-up does not write read as zeros, as a new slot's
// hole does: a short slot taken from a whole one, a slot growing into
// reused pages, a file extended over them by truncate, and all of it after
// a sync and a restart.
func TestSlotReuseReadsZeros(t *testing.T) {
	const bs = DefaultBlockSize
	keepReuseWhenIdle = true
	t.Cleanup(func() { keepReuseWhenIdle = false })
	e := newEnv(t, bs, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	junk := mkfile(t, v, RootIno, "junk", string(bytes.Repeat([]byte{0xff}, bs)))
	ok(t, "sync", v.Sync())
	_, err := v.WriteAt(junk.Ino, []byte{1}, 0, false) // the whole block moves
	ok(t, "write", err)
	ok(t, "sync", v.Sync()) // its old slot is kept for reuse
	v.mu.Lock()
	kept := v.reusePages
	v.mu.Unlock()
	if kept != bs/pageSize {
		t.Fatalf("%d pages kept for reuse, want %d", kept, bs/pageSize)
	}
	junkWant := append([]byte{1}, bytes.Repeat([]byte{0xff}, bs-1)...)

	f := mkfile(t, v, RootIno, "new", "")
	want := []byte{}
	write := func(p []byte, off int64) {
		t.Helper()
		_, err := v.WriteAt(f.Ino, p, off, false)
		ok(t, "write", err)
		if need := off + int64(len(p)); int64(len(want)) < need {
			want = append(want, make([]byte, need-int64(len(want)))...)
		}
		copy(want[off:], p)
	}
	check := func(what string) {
		t.Helper()
		if got := content(t, v, f.Ino); got != string(want) {
			i := 0
			for i < len(got) && i < len(want) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s: the file reads %d bytes, differing from byte %d of %d", what, len(got), i, len(want))
		}
		if got := content(t, v, junk.Ino); got != string(junkWant) {
			t.Fatalf("%s: the other file changed", what)
		}
	}
	write([]byte("a"), 1)
	ref := activeRef(t, v, f.Ino, 0)
	if ref.capPages() != 1 {
		t.Fatalf("a one-byte file took a slot of %d pages", ref.capPages())
	}
	check("a short slot")
	write([]byte("b"), 3*pageSize+7) // the slot grows
	check("a grown slot")
	ok(t, "sync", v.Sync())
	check("sealed")
	write([]byte("c"), 2) // copied to a new slot
	sz := int64(bs)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Size: &sz})
	ok(t, "extend", err)
	want = append(want, make([]byte, int(sz)-len(want))...)
	check("extended")
	ok(t, "sync", v.Sync())
	v = e.reopen(v)
	check("after a restart")
	fsckClean(t, e.store)
}

// TestSlotReuseBesideReaders: readers of one file never see another
// file's bytes while both are rewritten and synced over and over, so that
// each takes the slots the other's syncs freed (in make test's -race run).
func TestSlotReuseBesideReaders(t *testing.T) {
	const bs = DefaultBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	upper := mkfile(t, v, RootIno, "upper", string(bytes.Repeat([]byte("A"), bs)))
	lower := mkfile(t, v, RootIno, "lower", string(bytes.Repeat([]byte("a"), bs)))
	ok(t, "sync", v.Sync())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for _, r := range []struct {
		ino    uint64
		lo, hi byte
	}{{upper.Ino, 'A', 'Z'}, {lower.Ino, 'a', 'z'}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, bs)
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := v.ReadAt(r.ino, buf, 0)
				if err != nil {
					errs <- err
					return
				}
				for _, c := range buf[:n] {
					if (c < r.lo || c > r.hi) && c != 0 {
						errs <- fmt.Errorf("inode %d read byte %q", r.ino, c)
						return
					}
				}
			}
		}()
	}
	for i := range 200 {
		ino, c := upper.Ino, byte('A'+i%26)
		if i%2 == 1 {
			ino, c = lower.Ino, byte('a'+i%26)
		}
		// Partial writes: every sync frees the block's slot and the next
		// write copies it into a freed one.
		_, err := v.WriteAt(ino, bytes.Repeat([]byte{c}, pageSize), int64(i%16)*pageSize, false)
		ok(t, "write", err)
		ok(t, "sync", v.Sync())
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if size, _ := dataFileUse(t, e, v); size > 8*bs {
		t.Fatalf("the data file grew to %d bytes", size)
	}
}

// TestSlotReuseGivenBackWhenIdle: once the writer pauses, the slots kept
// for reuse go back to the file system, so df shows what the files hold.
func TestSlotReuseGivenBackWhenIdle(t *testing.T) {
	const bs = DefaultBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	f := mkfile(t, v, RootIno, "f", string(bytes.Repeat([]byte("x"), 8*bs)))
	ok(t, "sync", v.Sync())
	for blk := range int64(8) {
		_, err := v.WriteAt(f.Ino, []byte("y"), blk*bs, false)
		ok(t, "write", err)
	}
	ok(t, "sync", v.Sync()) // 8 moved slots kept
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, alloc := dataFileUse(t, e, v)
		if alloc <= 8*bs+4*pageSize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the data file holds %d bytes 5 s after the last write, for 8 blocks", alloc)
		}
		time.Sleep(20 * time.Millisecond)
	}
	want := strings.Repeat("y"+strings.Repeat("x", bs-1), 8)
	if got := content(t, v, f.Ino); got != want {
		t.Fatal("the file reads otherwise after the kept slots went")
	}
}
