package layers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

const reclaimBS = MinBlockSize

// pin pins layer for a test owner, as a checkpoint does.
func pin(t *testing.T, s *Store, layer string) {
	t.Helper()
	ok(t, "pin", s.Update(func(tx *Txn) error { return tx.Pin(layer, "test/"+layer) }))
}

// unpin drops pin's pin.
func unpin(t *testing.T, s *Store, layer string) {
	t.Helper()
	ok(t, "unpin", s.Update(func(tx *Txn) error { return tx.Unpin(layer, "test/"+layer) }))
}

// runsNow is what a pass would go through now.
func runsNow(s *Store) ([]reclaimRun, error) {
	_, tops := s.viewsNow()
	return s.reclaimRuns(tops)
}

// blockAt is one block record a test expects kept or dropped.
type blockAt struct {
	layer int // index into the scenario's frozen layers
	file  string
	blk   uint64
}

// hasRecord tells whether layer records block blk of ino.
func hasRecord(t *testing.T, s *Store, layer string, ino, blk uint64) bool {
	t.Helper()
	_, found, err := s.blockRecord(layer, ino, blk)
	ok(t, "block record", err)
	return found
}

// snapFiles reads the named files of the stack topped by layer; a file
// that is not there reads as "(none)".
func snapFiles(t *testing.T, s *Store, name, layer string, files []string) map[string]string {
	t.Helper()
	v, err := s.OpenSnapshot(name, layer)
	ok(t, "snapshot", err)
	defer v.Close()
	out := map[string]string{}
	for _, f := range files {
		a, err := v.Lookup(RootIno, f)
		if errors.Is(err, ErrNotFound) {
			out[f] = "(none)"
			continue
		}
		ok(t, "lookup "+f, err)
		out[f] = content(t, v, a.Ino)
	}
	return out
}

// reclaimScene is a sandbox whose frozen layers (l[0] first) a scenario
// built through a live view, some of them pinned.
type reclaimScene struct {
	e      *testEnv
	v      *View
	l      []string
	pinned map[int]bool
	ino    map[string]uint64
	files  []string
}

func (sc *reclaimScene) freeze(t *testing.T, pinned bool) {
	t.Helper()
	l := freeze(t, sc.e.store, sc.e.name)
	if pinned {
		pin(t, sc.e.store, l)
		sc.pinned[len(sc.l)] = true
	}
	sc.l = append(sc.l, l)
}

func (sc *reclaimScene) write(t *testing.T, name string, seed int64, off int64, n int) {
	t.Helper()
	ino, known := sc.ino[name]
	if !known {
		ino = mkfile(t, sc.v, RootIno, name, "").Ino
		sc.ino[name] = ino
		sc.files = append(sc.files, name)
	}
	_, err := sc.v.WriteAt(ino, randBytes(seed, n), off, false)
	ok(t, "write "+name, err)
}

func (sc *reclaimScene) truncate(t *testing.T, name string, size int64) {
	t.Helper()
	_, err := sc.v.SetAttr(sc.ino[name], SetAttrIn{Size: &size})
	ok(t, "truncate "+name, err)
}

// hiddenPair is a sandbox whose file f, n blocks, was written in frozen
// layer l0 and written again whole in l1, which is pinned: f's blocks in
// l0 are hidden. Its view is closed when the test ends.
type hiddenPair struct {
	e      *testEnv
	v      *View
	f      Attr
	l0, l1 string
}

func newHiddenPair(t *testing.T, n int) *hiddenPair {
	t.Helper()
	e := newEnv(t, reclaimBS, nil)
	p := &hiddenPair{e: e, v: e.view()}
	t.Cleanup(func() { p.v.Close() })
	p.f = mkfile(t, p.v, RootIno, "f", string(randBytes(1, n*reclaimBS)))
	p.l0 = freeze(t, e.store, e.name)
	_, err := p.v.WriteAt(p.f.Ino, randBytes(2, n*reclaimBS), 0, false)
	ok(t, "write again", err)
	p.l1 = freeze(t, e.store, e.name)
	pin(t, e.store, p.l1)
	return p
}

// TestReclaimHiddenBlocks: a collection drops the block records of
// unpinned frozen layers that every stack above them hides, and only
// those: every pinned layer's stack and the live view read as before,
// also after a restart; fsck is clean; the data files give the space
// back; a second collection drops nothing.
func TestReclaimHiddenBlocks(t *testing.T) {
	const bs = reclaimBS
	cases := []struct {
		name    string
		build   func(t *testing.T, sc *reclaimScene)
		dropped []blockAt
		kept    []blockAt
	}{
		{
			name: "blocks written again above",
			build: func(t *testing.T, sc *reclaimScene) {
				sc.write(t, "f", 1, 0, 3*bs)
				sc.freeze(t, false) // l0
				sc.write(t, "f", 2, 0, 2*bs)
				sc.freeze(t, false) // l1
				sc.write(t, "f", 3, 0, bs)
				sc.freeze(t, true) // l2
			},
			dropped: []blockAt{{1, "f", 0}, {0, "f", 0}, {0, "f", 1}},
			kept:    []blockAt{{1, "f", 1}, {0, "f", 2}, {2, "f", 0}},
		},
		{
			name: "blocks cut off by a truncate above",
			build: func(t *testing.T, sc *reclaimScene) {
				sc.write(t, "f", 1, 0, 4*bs)
				sc.freeze(t, false) // l0
				sc.truncate(t, "f", bs)
				sc.write(t, "f", 2, 3*bs, 10) // grows again: blk 3 new
				sc.freeze(t, true)            // l1
			},
			dropped: []blockAt{{0, "f", 1}, {0, "f", 2}, {0, "f", 3}},
			kept:    []blockAt{{0, "f", 0}, {1, "f", 3}},
		},
		{
			name: "a truncate inside a block keeps it",
			build: func(t *testing.T, sc *reclaimScene) {
				sc.write(t, "f", 1, 0, 3*bs)
				sc.freeze(t, false) // l0
				sc.truncate(t, "f", bs+100)
				sc.freeze(t, true) // l1
			},
			// The cut block is copied up to zero its tail.
			dropped: []blockAt{{0, "f", 1}, {0, "f", 2}},
			kept:    []blockAt{{0, "f", 0}, {1, "f", 1}},
		},
		{
			name: "the active layer hides nothing yet",
			build: func(t *testing.T, sc *reclaimScene) {
				sc.write(t, "f", 1, 0, 2*bs)
				sc.freeze(t, false) // l0
				sc.write(t, "f", 2, 0, 2*bs)
				ok(t, "sync", sc.v.Sync()) // its records are stored
			},
			kept: []blockAt{{0, "f", 0}, {0, "f", 1}},
		},
		{
			name: "a pinned layer keeps its blocks",
			build: func(t *testing.T, sc *reclaimScene) {
				sc.write(t, "f", 1, 0, 2*bs)
				sc.freeze(t, true) // l0
				sc.write(t, "f", 2, 0, 2*bs)
				sc.freeze(t, true) // l1
			},
			kept: []blockAt{{0, "f", 0}, {0, "f", 1}},
		},
		{
			name: "a pinned layer between ends the run",
			build: func(t *testing.T, sc *reclaimScene) {
				sc.write(t, "f", 1, 0, 2*bs)
				sc.freeze(t, false) // l0
				sc.write(t, "g", 2, 0, bs)
				sc.freeze(t, true) // l1: f as in l0
				sc.write(t, "f", 3, 0, 2*bs)
				sc.freeze(t, true) // l2
			},
			kept: []blockAt{{0, "f", 0}, {0, "f", 1}},
		},
		{
			name: "runs of several layers below one pin",
			build: func(t *testing.T, sc *reclaimScene) {
				// Layer i writes block i%2 of f (both in l0) and a
				// file of its own.
				sc.write(t, "f", 0, 0, 2*bs)
				for i := 0; i < 5; i++ {
					if i > 0 {
						sc.write(t, "f", int64(i), int64(i%2)*bs, bs)
					}
					sc.write(t, fmt.Sprintf("g%d", i), int64(10+i), 0, bs)
					sc.freeze(t, i == 4)
				}
			},
			dropped: []blockAt{{0, "f", 0}, {0, "f", 1}, {1, "f", 1}, {2, "f", 0}},
			kept:    []blockAt{{0, "g0", 0}, {3, "g3", 0}, {3, "f", 1}, {4, "f", 0}},
		},
		{
			name: "a file given a new content by a rename",
			build: func(t *testing.T, sc *reclaimScene) {
				sc.write(t, "f", 1, 0, 2*bs)
				sc.freeze(t, false) // l0
				sc.write(t, "f.tmp", 2, 0, bs)
				ok(t, "rename", sc.v.Rename(RootIno, "f.tmp", RootIno, "f", 0))
				sc.files = []string{"f"}
				// The old inode is gone; the view lets go of it as
				// the kernel does.
				sc.v.Forget(sc.ino["f"])
				sc.freeze(t, true) // l1
			},
			dropped: []blockAt{{0, "f", 0}, {0, "f", 1}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, bs, nil)
			sc := &reclaimScene{e: e, v: e.view(), pinned: map[int]bool{}, ino: map[string]uint64{}}
			defer func() { sc.v.Close() }()
			tc.build(t, sc)
			s := e.store
			for _, b := range append(append([]blockAt{}, tc.dropped...), tc.kept...) {
				if !hasRecord(t, s, sc.l[b.layer], sc.ino[b.file], b.blk) {
					t.Fatalf("before: layer %d has no block %d of %s", b.layer, b.blk, b.file)
				}
			}
			// What every kept stack reads before.
			want := map[string]map[string]string{}
			for i, l := range sc.l {
				if sc.pinned[i] {
					want[l] = snapFiles(t, s, e.name, l, sc.files)
				}
			}
			live := map[string]string{}
			for _, f := range sc.files {
				live[f] = content(t, sc.v, lookup(t, sc.v, RootIno, f).Ino)
			}
			use := map[string]int64{}
			for _, l := range sc.l {
				use[l] = diskUse(t, s, l)
			}
			res, err := s.CollectGarbage()
			ok(t, "gc", err)
			if res.HiddenBlocks != len(tc.dropped) || res.BytesFreed != int64(len(tc.dropped))*bs {
				t.Errorf("gc: %d hidden blocks, %d bytes freed; want %d and %d", res.HiddenBlocks, res.BytesFreed, len(tc.dropped), int64(len(tc.dropped))*bs)
			}
			check := func(when string) {
				t.Helper()
				for _, b := range tc.dropped {
					if hasRecord(t, s, sc.l[b.layer], sc.ino[b.file], b.blk) {
						t.Errorf("%s: layer %d still has block %d of %s", when, b.layer, b.blk, b.file)
					}
				}
				for _, b := range tc.kept {
					if !hasRecord(t, s, sc.l[b.layer], sc.ino[b.file], b.blk) {
						t.Errorf("%s: layer %d lost block %d of %s", when, b.layer, b.blk, b.file)
					}
				}
				for l, w := range want {
					if got := snapFiles(t, s, e.name, l, sc.files); fmt.Sprint(got) != fmt.Sprint(w) {
						t.Errorf("%s: the stack of pinned layer %s reads otherwise", when, l)
					}
				}
				for f, w := range live {
					if got := content(t, sc.v, lookup(t, sc.v, RootIno, f).Ino); got != w {
						t.Errorf("%s: live %s reads otherwise", when, f)
					}
				}
				fsckClean(t, s)
			}
			check("after gc")
			freed := int64(0)
			for _, l := range sc.l {
				freed += use[l] - diskUse(t, s, l)
			}
			if freed != int64(len(tc.dropped))*bs {
				t.Errorf("data files gave back %d bytes, want %d", freed, int64(len(tc.dropped))*bs)
			}
			again, err := s.CollectGarbage()
			ok(t, "gc again", err)
			if again.HiddenBlocks != 0 || again.BytesFreed != 0 {
				t.Errorf("a second gc dropped %d blocks, freed %d bytes", again.HiddenBlocks, again.BytesFreed)
			}
			sc.v = e.reopen(sc.v)
			s = e.store
			check("after a restart")
		})
	}
}

// TestReclaimKeepsHeldFiles: the blocks of a file removed above stay while
// an open view holds the file (an unlinked file still open reads them),
// and go once it lets go.
func TestReclaimKeepsHeldFiles(t *testing.T) {
	e := newEnv(t, reclaimBS, nil)
	v := e.view()
	defer func() { v.Close() }()
	s := e.store
	body := string(randBytes(1, 2*reclaimBS))
	f := mkfile(t, v, RootIno, "f", body)
	l0 := freeze(t, s, e.name)
	ok(t, "open", v.Open(f.Ino))
	ok(t, "unlink", v.Unlink(RootIno, "f"))
	mkfile(t, v, RootIno, "g", "g")
	l1 := freeze(t, s, e.name)
	pin(t, s, l1)
	res, err := s.CollectGarbage()
	ok(t, "gc", err)
	if res.HiddenBlocks != 0 || !hasRecord(t, s, l0, f.Ino, 1) {
		t.Fatalf("gc dropped %d blocks of a file still open", res.HiddenBlocks)
	}
	if got := content(t, v, f.Ino); got != body {
		t.Fatalf("the open unlinked file reads %d bytes, not what was written", len(got))
	}
	runs, err := runsNow(s)
	ok(t, "runs", err)
	if len(runs) != 1 {
		t.Fatalf("a run kept back by a held file is not marked done: %d runs left, want 1", len(runs))
	}
	v.Release(f.Ino)
	v.Forget(f.Ino)
	mkfile(t, v, RootIno, "h", "h") // the release's tombstone is in the active layer
	pin(t, s, freeze(t, s, e.name))
	res, err = s.CollectGarbage()
	ok(t, "gc after the release", err)
	if res.HiddenBlocks != 2 || hasRecord(t, s, l0, f.Ino, 0) || hasRecord(t, s, l0, f.Ino, 1) {
		t.Fatalf("gc after the release dropped %d blocks, want both of f", res.HiddenBlocks)
	}
	fsckClean(t, s)
}

// TestReclaimTmpfileLinkedLater: an O_TMPFILE file with no links in a
// pinned layer is linked above it; its blocks below stay, also when
// nothing holds it any more (a restart).
func TestReclaimTmpfileLinkedLater(t *testing.T) {
	e := newEnv(t, reclaimBS, nil)
	v := e.view()
	defer func() { v.Close() }()
	s := e.store
	a, err := v.Tmpfile(RootIno, 0o644, root)
	ok(t, "tmpfile", err)
	ok(t, "open", v.Open(a.Ino))
	body := randBytes(1, 2*reclaimBS)
	_, err = v.WriteAt(a.Ino, body, 0, false)
	ok(t, "write", err)
	l0 := freeze(t, s, e.name)
	_, err = v.WriteAt(a.Ino, []byte("x"), 0, false) // the next layer records it, still with no links
	ok(t, "write again", err)
	body[0] = 'x'
	pin(t, s, freeze(t, s, e.name))
	_, err = v.Link(a.Ino, RootIno, "t")
	ok(t, "link", err)
	v.Release(a.Ino)
	pin(t, s, freeze(t, s, e.name))
	v = e.reopen(v)
	s = e.store
	res, err := s.CollectGarbage()
	ok(t, "gc", err)
	// Block 0 is written again above; block 1 stays: the record above
	// has no links, but the file never had a name.
	if res.HiddenBlocks != 1 || !hasRecord(t, s, l0, a.Ino, 1) {
		t.Fatalf("gc dropped %d blocks of a tmpfile linked later, want 1", res.HiddenBlocks)
	}
	if got := content(t, v, lookup(t, v, RootIno, "t").Ino); got != string(body) {
		t.Fatalf("the linked tmpfile reads %d bytes, not what was written", len(got))
	}
}

// TestReclaimForkKeepsLayer: a layer two stacks share (a fork) keeps the
// blocks one of them hides.
func TestReclaimForkKeepsLayer(t *testing.T) {
	e := newEnv(t, reclaimBS, nil)
	v := e.view()
	defer func() { v.Close() }()
	s := e.store
	body := string(randBytes(1, 2*reclaimBS))
	f := mkfile(t, v, RootIno, "f", body)
	l0 := freeze(t, s, e.name)
	_, err := s.Fork("other", l0)
	ok(t, "fork", err)
	other, err := s.OpenView("other", false)
	ok(t, "fork's view", err)
	defer other.Close()
	_, err = v.WriteAt(f.Ino, randBytes(2, 2*reclaimBS), 0, false)
	ok(t, "write", err)
	pin(t, s, freeze(t, s, e.name))
	res, err := s.CollectGarbage()
	ok(t, "gc", err)
	if res.HiddenBlocks != 0 {
		t.Fatalf("gc dropped %d blocks of a layer a fork stands on", res.HiddenBlocks)
	}
	if got := content(t, other, f.Ino); got != body {
		t.Fatalf("the fork reads f otherwise after gc")
	}
	// Without the fork, the layer is a run's again.
	ok(t, "close fork's view", other.Close())
	ok(t, "rm fork", s.RemoveSandbox("other"))
	res, err = s.CollectGarbage()
	ok(t, "gc", err)
	if res.HiddenBlocks != 0 {
		// RemoveSandbox collected already.
		t.Fatalf("a second gc dropped %d blocks", res.HiddenBlocks)
	}
	if hasRecord(t, s, l0, f.Ino, 0) {
		t.Fatalf("the fork's removal left the hidden blocks")
	}
}

// TestReclaimSnapshotIsRoot: an open snapshot of an unpinned layer keeps
// what its stack reads, while it is open.
func TestReclaimSnapshotIsRoot(t *testing.T) {
	e := newEnv(t, reclaimBS, nil)
	v := e.view()
	defer func() { v.Close() }()
	s := e.store
	body := string(randBytes(1, 2*reclaimBS))
	f := mkfile(t, v, RootIno, "f", body)
	l0 := freeze(t, s, e.name)
	snap, err := s.OpenSnapshot(e.name, l0)
	ok(t, "snapshot", err)
	_, err = v.WriteAt(f.Ino, randBytes(2, 2*reclaimBS), 0, false)
	ok(t, "write", err)
	pin(t, s, freeze(t, s, e.name))
	res, err := s.CollectGarbage()
	ok(t, "gc", err)
	if res.HiddenBlocks != 0 {
		t.Fatalf("gc dropped %d blocks an open snapshot reads", res.HiddenBlocks)
	}
	if got := content(t, snap, f.Ino); got != body {
		t.Fatalf("the snapshot reads f otherwise")
	}
	ok(t, "close snapshot", snap.Close())
	res, err = s.CollectGarbage()
	ok(t, "gc", err)
	if res.HiddenBlocks != 2 {
		t.Fatalf("gc after the snapshot closed dropped %d blocks, want 2", res.HiddenBlocks)
	}
}

// TestReclaimRunsMarked: a run a pass went through is not read again until
// its top changes.
func TestReclaimRunsMarked(t *testing.T) {
	e := newEnv(t, reclaimBS, nil)
	v := e.view()
	defer func() { v.Close() }()
	s := e.store
	f := mkfile(t, v, RootIno, "f", string(randBytes(1, 2*reclaimBS)))
	l0 := freeze(t, s, e.name)
	_, err := v.WriteAt(f.Ino, randBytes(2, reclaimBS), 0, false)
	ok(t, "write", err)
	l1 := freeze(t, s, e.name)
	pin(t, s, l1)
	_, err = v.WriteAt(f.Ino, randBytes(3, reclaimBS), reclaimBS, false)
	ok(t, "write", err)
	l2 := freeze(t, s, e.name)
	pin(t, s, l2)
	res, err := s.CollectGarbage()
	ok(t, "gc", err)
	if res.HiddenBlocks != 1 || hasRecord(t, s, l0, f.Ino, 0) || !hasRecord(t, s, l0, f.Ino, 1) {
		t.Fatalf("first gc: %d blocks", res.HiddenBlocks)
	}
	runs, err := runsNow(s)
	ok(t, "runs", err)
	if len(runs) != 0 {
		t.Fatalf("%d runs left after a pass, want none", len(runs))
	}
	unpin(t, s, l1)
	runs, err = runsNow(s)
	ok(t, "runs", err)
	if len(runs) != 1 || runs[0].top.ID != l2 || !sameStrings(runs[0].layers, []string{l1, l0}) || runs[0].old != 1 {
		t.Fatalf("after the unpin: runs %+v, want l1 and l0 below l2", runs)
	}
	res, err = s.CollectGarbage()
	ok(t, "gc", err)
	// l0's block 1 is written again in l2; l1's block 0 is not.
	if res.HiddenBlocks != 1 || hasRecord(t, s, l0, f.Ino, 1) || !hasRecord(t, s, l1, f.Ino, 0) {
		t.Fatalf("gc after the unpin: %d blocks", res.HiddenBlocks)
	}
	fsckClean(t, s)
}

// TestReclaimKeptSlot: a dropped record whose slot holds the content of a
// record above (dedup) leaves the slot in place.
func TestReclaimKeptSlot(t *testing.T) {
	e := newEnv(t, reclaimBS, nil)
	v := e.view()
	defer func() { v.Close() }()
	s := e.store
	body := randBytes(1, 2*reclaimBS)
	f := mkfile(t, v, RootIno, "f", string(body))
	l0 := freeze(t, s, e.name)
	g := mkfile(t, v, RootIno, "g", string(body)) // the same content
	l1 := freeze(t, s, e.name)
	_, err := s.Dedup()
	ok(t, "dedup", err)
	ref, _, err := s.blockRecord(l1, g.Ino, 0)
	ok(t, "record", err)
	if ref.Home != l0 {
		t.Fatalf("dedup did not move g's block onto l0 (home %q)", ref.Home)
	}
	_, err = v.WriteAt(f.Ino, randBytes(2, 2*reclaimBS), 0, false)
	ok(t, "rewrite f", err)
	pin(t, s, freeze(t, s, e.name))
	use := diskUse(t, s, l0)
	res, err := s.CollectGarbage()
	ok(t, "gc", err)
	if res.HiddenBlocks != 2 || res.BytesFreed != 0 || hasRecord(t, s, l0, f.Ino, 0) {
		t.Fatalf("gc: %d blocks, %d bytes; want f's 2 records dropped and no slot punched", res.HiddenBlocks, res.BytesFreed)
	}
	if diskUse(t, s, l0) != use {
		t.Fatalf("l0's data file gave back the slots g keeps its content in")
	}
	v = e.reopen(v)
	if got := content(t, v, g.Ino); got != string(body) {
		t.Fatalf("g reads %d bytes, not its content", len(got))
	}
	fsckClean(t, e.store)
}

// TestReclaimPunchLater: a crash after the records went and before their
// slots did leaves the punches, which the next collection makes.
func TestReclaimPunchLater(t *testing.T) {
	p := newHiddenPair(t, 2)
	s, l0 := p.e.store, p.l0
	use := diskUse(t, s, l0)
	boom := errors.New("crash")
	punchHook = func(string, uint64, uint64) error { return boom }
	_, err := s.CollectGarbage()
	punchHook = nil
	wantErr(t, "gc with a failing punch", err, boom)
	if hasRecord(t, s, l0, p.f.Ino, 0) || diskUse(t, s, l0) != use {
		t.Fatalf("after the failed punch: the record should be gone and the slot still there")
	}
	p.v = p.e.reopen(p.v)
	s = p.e.store
	res, err := s.CollectGarbage()
	ok(t, "gc", err)
	if res.BytesFreed != 2*reclaimBS || diskUse(t, s, l0) != use-2*reclaimBS {
		t.Fatalf("the next gc freed %d bytes (disk %d -> %d), want the 2 slots", res.BytesFreed, use, diskUse(t, s, l0))
	}
	fsckClean(t, s)
}

// TestReclaimSlotStillRead: a punch whose slot an open view's block map
// still names waits until the view lets go of it.
func TestReclaimSlotStillRead(t *testing.T) {
	e := newEnv(t, reclaimBS, nil)
	v := e.view()
	defer func() { v.Close() }()
	s := e.store
	body := string(randBytes(1, reclaimBS))
	f := mkfile(t, v, RootIno, "f", body)
	l0 := freeze(t, s, e.name)
	mkfile(t, v, RootIno, "g", "g")
	l1 := freeze(t, s, e.name)
	// One snapshot reads f's block as its own layer's, one as a block of
	// a layer below.
	snap, err := s.OpenSnapshot(e.name, l0)
	ok(t, "snapshot", err)
	above, err := s.OpenSnapshot(e.name, l1)
	ok(t, "snapshot above", err)
	defer above.Close()
	if content(t, snap, f.Ino) != body || content(t, above, f.Ino) != body {
		t.Fatal("snapshot reads f otherwise")
	}
	// A punch record for the slot the snapshot reads, as if its record
	// had been dropped.
	ref, _, err := s.blockRecord(l0, f.Ino, 0)
	ok(t, "record", err)
	ok(t, "drop", s.update(func(txn *badger.Txn) error {
		if err := txn.Delete(keyBlock(l0, f.Ino, 0)); err != nil {
			return err
		}
		v := binary.AppendUvarint(nil, ref.Slot)
		return txn.Set(keyPunch(l0, f.Ino, 0), binary.AppendUvarint(v, uint64(ref.capPages())))
	}))
	freed, err := s.finishPunches()
	ok(t, "punch", err)
	if freed != 0 || bytes.Count([]byte(content(t, snap, f.Ino)), []byte{0}) == reclaimBS {
		t.Fatalf("a slot an open snapshot reads was punched (%d bytes)", freed)
	}
	ok(t, "close", snap.Close())
	if freed, err = s.finishPunches(); err != nil || freed != 0 {
		t.Fatalf("with the snapshot above still open: %d bytes freed, %v", freed, err)
	}
	ok(t, "close above", above.Close())
	freed, err = s.finishPunches()
	ok(t, "punch", err)
	if freed != reclaimBS {
		t.Fatalf("after the snapshot closed: %d bytes freed, want %d", freed, reclaimBS)
	}
}

// TestReclaimForkOfRemovedSandbox: layers whose sandbox was removed, that
// forks stand on, take their block size from the forks.
func TestReclaimForkOfRemovedSandbox(t *testing.T) {
	e := newEnv(t, reclaimBS, nil)
	v := e.view()
	s := e.store
	f := mkfile(t, v, RootIno, "f", string(randBytes(1, 2*reclaimBS)))
	l0 := freeze(t, s, e.name)
	body := string(randBytes(2, 2*reclaimBS))
	_, err := v.WriteAt(f.Ino, []byte(body), 0, false)
	ok(t, "write", err)
	l1 := freeze(t, s, e.name)
	for _, name := range []string{"b1", "b2"} {
		_, err := s.Fork(name, l1)
		ok(t, "fork "+name, err)
	}
	ok(t, "close", v.Close())
	ok(t, "rm", s.RemoveSandbox(e.name)) // collects: l1 is a fork point, l0 a run below it
	if hasRecord(t, s, l0, f.Ino, 0) || hasRecord(t, s, l0, f.Ino, 1) {
		t.Fatal("the blocks l1 hides in l0 stayed")
	}
	b1, err := s.OpenView("b1", false)
	ok(t, "view b1", err)
	defer b1.Close()
	if got := content(t, b1, f.Ino); got != body {
		t.Fatal("the fork reads f otherwise")
	}
	fsckClean(t, s)
}

// TestLiveTreeDamage: a collection stops at a chain it cannot follow.
func TestLiveTreeDamage(t *testing.T) {
	cases := []struct {
		name string
		all  map[string]LayerInfo
		want error
	}{
		{"missing parent", map[string]LayerInfo{"a": {ID: "a", Parent: "b"}}, ErrNotFound},
		{"cycle", map[string]LayerInfo{"a": {ID: "a", Parent: "b"}, "b": {ID: "b", Parent: "a"}}, ErrCorrupt},
		{"record that does not decode", map[string]LayerInfo{"a": {ID: "a", Parent: "b"}, "b": {ID: "b", State: badLayer}}, ErrCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := liveTree(tc.all, []string{"a"})
			wantErr(t, "live tree", err, tc.want)
		})
	}
}

// TestReclaimDamage: damaged records in a run stop the collection with
// ErrCorrupt, dropping nothing.
func TestReclaimDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(s *Store, l0, l1 string, ino uint64) (key, val []byte)
	}{
		{"inode record in the run", func(s *Store, l0, l1 string, ino uint64) ([]byte, []byte) {
			return keyInode(l0, ino), []byte{0xff}
		}},
		{"inode key in the run", func(s *Store, l0, l1 string, ino uint64) ([]byte, []byte) {
			return append(prefixLayerTable(tInode, l0), "abc"...), []byte{0}
		}},
		{"block key in the run", func(s *Store, l0, l1 string, ino uint64) ([]byte, []byte) {
			return append(prefixLayerTable(tBlock, l0), "abc"...), []byte{0}
		}},
		{"hidden block record", func(s *Store, l0, l1 string, ino uint64) ([]byte, []byte) {
			return keyBlock(l0, ino, 0), []byte{0xff}
		}},
		{"kept slot key", func(s *Store, l0, l1 string, ino uint64) ([]byte, []byte) {
			return append(prefixLayerTable(tKept, l0), "ab"...), nil
		}},
		{"inode record of the top", func(s *Store, l0, l1 string, ino uint64) ([]byte, []byte) {
			return keyInode(l1, ino), []byte{0xff}
		}},
		{"block key of the top", func(s *Store, l0, l1 string, ino uint64) ([]byte, []byte) {
			return append(prefixLayerTable(tBlock, l1), "abc"...), []byte{0}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newHiddenPair(t, 2)
			s := p.e.store
			key, val := tc.damage(s, p.l0, p.l1, p.f.Ino)
			corrupt(t, s, key, val)
			_, err := s.CollectGarbage()
			wantErr(t, "gc", err, ErrCorrupt)
			if !hasRecord(t, s, p.l0, p.f.Ino, 1) {
				t.Fatal("a failed collection dropped a record")
			}
		})
	}
}

// TestReclaimRecordChanged: a record that changed or went between the
// plan and the commit is left as it is.
func TestReclaimRecordChanged(t *testing.T) {
	p := newHiddenPair(t, 3)
	s, l0, f := p.e.store, p.l0, p.f
	ref, _, err := s.blockRecord(l0, f.Ino, 1)
	ok(t, "record", err)
	ref.CRCs = append([]uint32(nil), ref.CRCs...)
	ref.CRCs[0]++
	reclaimHook = func() {
		ok(t, "change", s.update(func(txn *badger.Txn) error {
			if err := txn.Delete(keyBlock(l0, f.Ino, 0)); err != nil {
				return err
			}
			return txn.Set(keyBlock(l0, f.Ino, 1), encodeBlockRef(ref))
		}))
	}
	res, err := s.CollectGarbage()
	reclaimHook = nil
	ok(t, "gc", err)
	if res.HiddenBlocks != 1 || !hasRecord(t, s, l0, f.Ino, 1) || hasRecord(t, s, l0, f.Ino, 2) {
		t.Fatalf("gc dropped %d blocks; want only block 2, the one unchanged", res.HiddenBlocks)
	}
}

// TestReclaimPunchErrors: a data file that cannot be punched fails the
// collection and keeps its punch records for the next one.
func TestReclaimPunchErrors(t *testing.T) {
	cases := []struct {
		name    string
		replace func(path string) error
	}{
		{"a directory", func(p string) error { return os.Mkdir(p, 0o700) }},
		{"a fifo", func(p string) error { return syscall.Mkfifo(p, 0o600) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newHiddenPair(t, 2)
			s, l0 := p.e.store, p.l0
			data, err := os.ReadFile(s.dataPath(l0))
			ok(t, "read data file", err)
			ok(t, "remove data file", os.Remove(s.dataPath(l0)))
			ok(t, "replace data file", tc.replace(s.dataPath(l0)))
			for i := 0; i < 2; i++ { // the next one fails finishing them
				if _, err := s.CollectGarbage(); err == nil {
					t.Fatal("gc punching a data file that is " + tc.name + " succeeded")
				}
			}
			ok(t, "remove", os.Remove(s.dataPath(l0)))
			ok(t, "put data file back", os.WriteFile(s.dataPath(l0), data, 0o600))
			res, err := s.CollectGarbage()
			ok(t, "gc", err)
			if res.BytesFreed != 2*reclaimBS {
				t.Fatalf("the next gc freed %d bytes, want the 2 slots left", res.BytesFreed)
			}
		})
	}
}

// TestReclaimUnknownBlockSize: a run no sandbox gives a block size is left
// as it is.
func TestReclaimUnknownBlockSize(t *testing.T) {
	p := newHiddenPair(t, 2)
	s, e, l0, f := p.e.store, p.e, p.l0, p.f
	ok(t, "damage", s.update(func(txn *badger.Txn) error {
		var info SandboxInfo
		if err := getJSON(txn, keySandbox(e.name), &info); err != nil {
			return err
		}
		info.BlockSize = 0
		return putJSON(txn, keySandbox(e.name), info)
	}))
	res, err := s.CollectGarbage()
	ok(t, "gc", err)
	if res.HiddenBlocks != 0 || !hasRecord(t, s, l0, f.Ino, 0) {
		t.Fatalf("gc dropped %d blocks of a run whose block size is not known", res.HiddenBlocks)
	}
}

// TestReclaimTreeDamage: a pass that cannot read the tree of layers (a
// sandbox record that does not decode, a head that is gone) fails before
// it drops anything.
func TestReclaimTreeDamage(t *testing.T) {
	cases := []struct {
		name string
		key  []byte
		val  string
		want error
	}{
		{"sandbox record", keySandbox("bad"), "[", ErrCorrupt},
		{"head gone", keySandbox("bad"), `{"name":"bad","head":"missing","block_size":4096}`, ErrNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newHiddenPair(t, 2)
			s := p.e.store
			corrupt(t, s, tc.key, []byte(tc.val))
			_, _, err := s.reclaimShadowed()
			wantErr(t, "pass", err, tc.want)
			if !hasRecord(t, s, p.l0, p.f.Ino, 0) {
				t.Fatal("a failed pass dropped a record")
			}
		})
	}
}

// TestReclaimOnFullDisk: a file rewritten at every step fills the store's
// file system until writes fail; unpinning the older states and
// collecting gives the space back, and writes work again.
func TestReclaimOnFullDisk(t *testing.T) {
	e := smallStoreEnv(t)
	v := e.view()
	defer func() { v.Close() }()
	s := e.store
	f := mkfile(t, v, RootIno, "big", "")
	var ls []string
	full := false
	for i := 0; i < 40 && !full; i++ {
		_, err := v.WriteAt(f.Ino, randBytes(int64(i), 1<<20), 0, false)
		if errors.Is(err, ErrNoSpace) {
			full = true
			break
		}
		ok(t, "write", err)
		l, _, err := s.Freeze(e.name, noFreezeFn)
		if errors.Is(err, ErrNoSpace) {
			full = true
			break
		}
		ok(t, "freeze", err)
		pin(t, s, l)
		ls = append(ls, l)
	}
	if !full || len(ls) < 3 {
		t.Fatalf("the store did not fill up (%d layers frozen)", len(ls))
	}
	want := snapFiles(t, s, e.name, ls[len(ls)-1], []string{"big"})
	for _, l := range ls[:len(ls)-1] {
		unpin(t, s, l)
	}
	res, err := s.CollectGarbage()
	ok(t, "gc on a full disk", err)
	if res.HiddenBlocks < (len(ls)-1)*(1<<20)/MinBlockSize {
		t.Fatalf("gc dropped %d hidden blocks, want every older copy of f", res.HiddenBlocks)
	}
	body := randBytes(99, 1<<20)
	_, err = v.WriteAt(f.Ino, body, 0, false)
	ok(t, "write after gc", err)
	ok(t, "sync", v.Sync())
	if got := snapFiles(t, s, e.name, ls[len(ls)-1], []string{"big"}); got["big"] != want["big"] {
		t.Fatal("the kept state reads otherwise")
	}
	if content(t, v, f.Ino) != string(body) {
		t.Fatal("the write after gc reads otherwise")
	}
	fsckClean(t, s)
}

// TestReclaimBottomDropped: a collection that drops a run's bottom layer
// while a pass goes through the run leaves no mark behind it.
func TestReclaimBottomDropped(t *testing.T) {
	p := newHiddenPair(t, 2)
	s := p.e.store
	reclaimHook = func() {
		ok(t, "drop", s.update(func(txn *badger.Txn) error {
			if err := txn.Delete(keyLayer(p.l0)); err != nil {
				return err
			}
			return txn.Set(keyDrop(p.l0), nil)
		}))
	}
	_, _, err := s.reclaimShadowed()
	reclaimHook = nil
	ok(t, "pass", err)
	if _, found, err := s.record(keyReclaimed(p.l0)); err != nil || found {
		t.Fatalf("a mark was left for a dropped layer (%v)", err)
	}
}
