package layers

import (
	"bytes"
	"math/rand"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestAllocCountsFollowWrites: the st_blocks a stat reports, kept block by
// block as writes go (allocTrack), equals a count from scratch after every
// step of random writes, appends, writes past the end, truncates, punched
// and zeroed ranges, allocations, syncs and a checkpoint-like freeze of
// the layer, over base files dense and sparse.
func TestAllocCountsFollowWrites(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 4} {
		const bs = 64 << 10
		rng := rand.New(rand.NewSource(seed))
		dense := make([]byte, 5*bs+1234)
		rng.Read(dense)
		e := newEnv(t, bs, func(base string) {
			put(t, base+"/dense", string(dense))
			f, err := os.Create(base + "/sparse")
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("head"), 0)
			f.WriteAt(bytes.Repeat([]byte("m"), 10000), 3*bs+100)
			f.Truncate(9 * bs)
			f.Close()
		})
		v := e.view()
		inos := []uint64{lookup(t, v, RootIno, "dense").Ino, lookup(t, v, RootIno, "sparse").Ino, mkfile(t, v, RootIno, "new", "").Ino}
		check := func(step int, what string, ino uint64) {
			t.Helper()
			// No sync between the two counts: a seal turns pages written
			// with zeros into holes, which changes the count itself (the
			// journal loop syncs 20 ms after a removal).
			v.ioMu.RLock()
			defer v.ioMu.RUnlock()
			a, err := v.GetAttr(ino)
			ok(t, "getattr", err)
			v.mu.Lock()
			st := v.inodes[ino]
			if st != nil {
				st.allocKnown = false
			}
			v.mu.Unlock()
			b, err := v.GetAttr(ino)
			ok(t, "getattr", err)
			if a.Blocks != b.Blocks {
				t.Fatalf("seed %d step %d (%s): st_blocks %d as kept, %d counted anew (size %d)", seed, step, what, a.Blocks, b.Blocks, b.Size)
			}
		}
		for step := 0; step < 400; step++ {
			ino := inos[rng.Intn(len(inos))]
			a, err := v.GetAttr(ino)
			ok(t, "getattr", err)
			size := a.Size
			var what string
			switch r := rng.Intn(20); {
			case r < 8:
				off := rng.Int63n(size + 2*bs + 1)
				n := 1 + rng.Intn(3*bs)
				buf := make([]byte, n)
				if rng.Intn(3) == 0 {
					rng.Read(buf) // else zeros: pages written with zeros
				}
				_, err = v.WriteAt(ino, buf, off, false)
				what = "write"
			case r < 11:
				_, err = v.WriteAt(ino, []byte("appended line\n"), 0, true)
				what = "append"
			case r < 12:
				_, err = v.WriteAt(ino, []byte("far"), size+int64(rng.Intn(400))*bs, false)
				what = "write far past the end"
			case r < 14:
				s := rng.Int63n(size + bs + 1)
				_, err = v.SetAttr(ino, SetAttrIn{Size: &s})
				what = "truncate"
			case r < 15:
				err = v.Zero(ino, rng.Int63n(size+1), 1+rng.Int63n(2*bs), true)
				what = "punch"
			case r < 16:
				err = v.Allocate(ino, rng.Int63n(size+1), 1+rng.Int63n(2*bs), rng.Intn(2) == 0)
				what = "allocate"
			case r < 18:
				err = v.Sync()
				what = "sync"
			default:
				_, _, err = e.store.Freeze(e.name, noFreezeFn)
				what = "freeze"
			}
			ok(t, what, err)
			for _, i := range inos {
				check(step, what, i)
			}
		}
		ok(t, "close", v.Close())
	}
}

// TestFreedSpaceReturnsSoon: the space of a removed file's data goes back
// to the file system within a fraction of a second, not at the next 5 s
// sync (df before and after, as xfstests generic/315 compares them).
func TestFreedSpaceReturnsSoon(t *testing.T) {
	const bs = 64 << 10
	e := newEnv(t, bs, nil)
	v := e.view()
	defer func() { v.Close() }()
	mkfile(t, v, RootIno, "big", string(bytes.Repeat([]byte("x"), 40*bs)))
	ok(t, "sync", v.Sync())
	allocated := func() int64 {
		var st syscall.Stat_t
		ok(t, "stat data file", syscall.Stat(e.store.dataPath(v.activeLayer()), &st))
		return st.Blocks * 512
	}
	before := allocated()
	if before < 40*bs {
		t.Fatalf("data file holds %d bytes after writing %d", before, 40*bs)
	}
	ok(t, "unlink", v.Unlink(RootIno, "big"))
	deadline := time.Now().Add(2 * time.Second)
	for allocated() > before-40*bs && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := allocated(); got > before-40*bs {
		t.Fatalf("data file holds %d bytes 2 s after the removal, want at most %d", got, before-40*bs)
	}
}

// Only slots a removal, truncate or punch freed ask for the quick sync;
// those a write superseded wait for the regular one (a sync seals, and
// sealing makes the next writes copy their blocks).
func TestQuickSyncOnlyForRemovals(t *testing.T) {
	const bs = 64 << 10
	e := newEnv(t, bs, nil)
	v := e.view()
	defer func() { v.Close() }()
	a := mkfile(t, v, RootIno, "f", string(bytes.Repeat([]byte("x"), 4*bs)))
	ok(t, "sync", v.Sync())
	v.takeRemoved()
	_, err := v.WriteAt(a.Ino, []byte("over a sealed block"), 10, false)
	ok(t, "write", err)
	if v.takeRemoved() {
		t.Errorf("a write that superseded a sealed slot asked for the quick sync")
	}
	// (That a removal does ask is TestFreedSpaceReturnsSoon's: here the
	// journal loop may take the request first.)
}
