package layers

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// slotOf is the slot of block blk of file ino in the active layer.
func slotOf(t *testing.T, v *View, ino, blk uint64) (slot uint64, sealed bool) {
	t.Helper()
	v.mu.Lock()
	defer v.mu.Unlock()
	st, err := v.getInode(ino)
	ok(t, "inode", err)
	ref, found := st.active[blk]
	if !found {
		t.Fatalf("block %d of inode %d has no slot in the active layer", blk, ino)
	}
	return ref.Slot, ref.sealed()
}

// lastRecordData is the number of data bytes the last record of the
// view's intent log carries.
func lastRecordData(t *testing.T, v *View) int {
	t.Helper()
	log, err := os.ReadFile(v.s.walPath(v.info.Name))
	ok(t, "read log", err)
	recs := walCycle(bytes.NewReader(log), int64(len(log)))
	if len(recs) == 0 {
		t.Fatal("the intent log holds no record")
	}
	n := 0
	for _, sg := range recs[len(recs)-1].segs {
		n += len(sg.data)
	}
	return n
}

// rewriteEnv is a sandbox with a file of four blocks whose blocks a Sync
// through the intent log sealed, so that they may be rewritten in place.
func rewriteEnv(t *testing.T) (*testEnv, *View, uint64, []byte) {
	t.Helper()
	noLoopSyncs(t)
	e := newEnv(t, DefaultBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	ok(t, "full sync", v.sync(false, false)) // the log's cycle starts empty
	data := bytes.Repeat([]byte("0123456789abcdef"), 4*DefaultBlockSize/16)
	a := mkfile(t, v, RootIno, "db", string(data))
	ok(t, "logged sync", v.Sync())
	if n := lastRecordData(t, v); n != len(data) {
		t.Fatalf("the first Sync logged %d bytes of data, want the file's %d", n, len(data))
	}
	return e, v, a.Ino, data
}

// TestRewriteInPlace: after a Sync through the log, a small write into a
// sealed block writes into the block's slot, and the next Sync logs the
// page it wrote, not the block; the data file does not grow.
func TestRewriteInPlace(t *testing.T) {
	e, v, ino, data := rewriteEnv(t)
	f := v.files[v.activeLayer()]
	before, err := f.Stat()
	ok(t, "stat data file", err)
	for i, off := range []int64{DefaultBlockSize + 100, DefaultBlockSize + 5000, 3*DefaultBlockSize + 4090} {
		slot, _ := slotOf(t, v, ino, uint64(off/DefaultBlockSize))
		p := []byte(strings.Repeat("X", 10+i))
		_, err := v.WriteAt(ino, p, off, false)
		ok(t, "write", err)
		copy(data[off:], p)
		if now, sealed := slotOf(t, v, ino, uint64(off/DefaultBlockSize)); now != slot || sealed {
			t.Fatalf("write %d: the block moved from slot %d to %d (sealed %v), want it written in place", i, slot, now, sealed)
		}
		ok(t, "logged sync", v.Sync())
		// The last write crosses a page boundary: two pages.
		want := pageSize
		if i == 2 {
			want = 2 * pageSize
		}
		if n := lastRecordData(t, v); n != want {
			t.Fatalf("write %d: the Sync logged %d bytes of data, want %d", i, n, want)
		}
	}
	if got := v.rewrites.Load(); got != 3 {
		t.Fatalf("%d slots were reopened, want 3", got)
	}
	after, err := f.Stat()
	ok(t, "stat data file", err)
	if after.Size() != before.Size() {
		t.Fatalf("the data file grew from %d to %d bytes", before.Size(), after.Size())
	}
	if got := content(t, v, ino); got != string(data) {
		t.Fatal("the file reads otherwise than written")
	}
	fsckClean(t, e.store)
}

// TestRewriteKilledBeforeTheSync: a kill -9 after writes in place and
// before the next Sync leaves slots with bytes their stored checksums do
// not expect; the replay of the log puts back what the last Sync made
// durable, from the record that sealed the slot whole and the records of
// the pages rewritten since, so every block reads, and fsck finds
// nothing. A power cut, which also loses every data page written since
// the last full sync, is replayed the same way.
func TestRewriteKilledBeforeTheSync(t *testing.T) {
	for _, c := range []struct {
		name    string
		resyncs int  // Syncs through the log of rewritten pages before the last writes
		power   bool // the data files and badger as the full sync before the file left them
	}{
		{"first rewrite", 0, false},
		{"after rewrites", 3, false},
		{"power cut after rewrites", 3, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, v, ino, data := rewriteEnv(t)
			durable := filepath.Join(t.TempDir(), "durable")
			if c.power {
				// rewriteEnv's full sync came before the file.
				copyDir(t, filepath.Join(e.dir, "store"), durable)
			}
			for i := 0; i < c.resyncs; i++ {
				off := int64(2*DefaultBlockSize + i*pageSize + 7)
				_, err := v.WriteAt(ino, []byte("synced"), off, false)
				ok(t, "write", err)
				copy(data[off:], "synced")
				ok(t, "logged sync", v.Sync())
			}
			synced := string(data)
			for p := 0; p < 4; p++ {
				_, err := v.WriteAt(ino, []byte("NOT SYNCED"), int64(2*DefaultBlockSize+p*pageSize+3), false)
				ok(t, "write", err)
			}
			if v.rewrites.Load() == 0 {
				t.Fatal("no slot was rewritten in place")
			}
			img := filepath.Join(t.TempDir(), "store")
			if c.power {
				img, _ = powerCutImage(t, e, durable, nil)
			} else {
				// What a kill -9 leaves: every file as the page cache
				// has it.
				copyDir(t, filepath.Join(e.dir, "store"), img)
			}
			s2, v2 := openImage(t, img)
			if got := content(t, v2, ino); got != synced {
				t.Fatal("after the crash the file does not read as the last Sync left it")
			}
			fsckClean(t, s2)
		})
	}
}

// TestRewriteNeedsALoggedSync: a full sync, a checkpoint or a paused
// store leave sealed blocks to be copied, as before; so does a write
// past the slot, which moves it.
func TestRewriteNeedsALoggedSync(t *testing.T) {
	for _, c := range []struct {
		name string
		then func(t *testing.T, e *testEnv, v *View) func()
		off  int64
	}{
		{"full sync", func(t *testing.T, e *testEnv, v *View) func() {
			ok(t, "full sync", v.sync(false, false))
			return nil
		}, 100},
		{"checkpoint", func(t *testing.T, e *testEnv, v *View) func() {
			freeze(t, e.store, e.name)
			return nil
		}, 100},
		{"paused", func(t *testing.T, e *testEnv, v *View) func() {
			return e.store.PauseRewrites()
		}, 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, v, ino, data := rewriteEnv(t)
			resume := c.then(t, e, v)
			_, err := v.WriteAt(ino, []byte("copied"), c.off, false)
			ok(t, "write", err)
			copy(data[c.off:], "copied")
			if resume != nil {
				resume()
			}
			if got := v.rewrites.Load(); got != 0 {
				t.Fatalf("%d slots were reopened, want the block copied", got)
			}
			ok(t, "sync", v.Sync())
			if got := content(t, v, ino); got != string(data) {
				t.Fatal("the file reads otherwise than written")
			}
			fsckClean(t, e.store)
		})
	}
}

// TestRewriteGrowsTheSlot: a short file's slot rewritten in place and
// then written past its pages moves to a larger slot, which the next
// Sync logs whole.
func TestRewriteGrowsTheSlot(t *testing.T) {
	noLoopSyncs(t)
	e := newEnv(t, DefaultBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	ok(t, "full sync", v.sync(false, false))
	a := mkfile(t, v, RootIno, "short", strings.Repeat("s", 5000)) // a slot of two pages
	ok(t, "logged sync", v.Sync())
	_, err := v.WriteAt(a.Ino, []byte("in place"), 10, false)
	ok(t, "write in place", err)
	_, err = v.WriteAt(a.Ino, []byte("past the slot"), 20000, false)
	ok(t, "write past the slot", err)
	if v.rewrites.Load() != 1 {
		t.Fatalf("%d slots were reopened, want 1", v.rewrites.Load())
	}
	ok(t, "logged sync", v.Sync())
	if n := lastRecordData(t, v); n < 5*pageSize {
		t.Fatalf("the Sync after the move logged %d bytes, want the whole new slot", n)
	}
	want := []byte(strings.Repeat("s", 5000))
	copy(want[10:], "in place")
	want = append(want, make([]byte, 20000-len(want))...)
	want = append(want, "past the slot"...)
	img := filepath.Join(t.TempDir(), "store")
	copyDir(t, filepath.Join(e.dir, "store"), img)
	s2, v2 := openImage(t, img)
	if got := content(t, v2, a.Ino); got != string(want) {
		t.Fatal("after the kill the file does not read as the last Sync left it")
	}
	fsckClean(t, s2)
}

// TestRewriteWhileRead: reads of a block racing with its rewrites in
// place and the Syncs that seal them never fail (a read that resolved the
// slot sealed checks what it reads against the old checksums, so a write
// reopening it waits for such reads).
func TestRewriteWhileRead(t *testing.T) {
	_, v, ino, _ := rewriteEnv(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, pageSize)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := v.ReadAt(ino, buf, DefaultBlockSize); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	page := make([]byte, pageSize)
	for i := 0; i < 300; i++ {
		for k := range page {
			page[k] = byte('A' + i%26)
		}
		_, err := v.WriteAt(ino, page, DefaultBlockSize, false)
		ok(t, "write", err)
		if i%3 == 0 {
			ok(t, "sync", v.Sync())
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if v.rewrites.Load() == 0 {
		t.Fatal("no slot was rewritten in place")
	}
}
