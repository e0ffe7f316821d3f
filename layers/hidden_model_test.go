package layers

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"testing"
)

// hiddenModel is what a sandbox holds, inode by inode, as the model-based
// test of collections sees it.
type hiddenModel struct {
	names map[string]int    // name -> model inode
	data  map[int][]byte    // model inode -> content
	real  map[int]uint64    // model inode -> the view's inode
	next  int               // the next model inode
	held  map[int]bool      // open and unlinked: read through the inode
	tmp   int               // an O_TMPFILE not linked yet (0: none)
	snaps map[string]string // frozen layer -> the tree it topped
}

// tree renders names -> contents, sorted.
func (m *hiddenModel) tree() string {
	var names []string
	for n := range m.names {
		names = append(names, n)
	}
	sort.Strings(names)
	out := ""
	for _, n := range names {
		out += fmt.Sprintf("%s=%x;", n, m.data[m.names[n]])
	}
	return out
}

// viewTree renders what v shows the same way.
func viewTree(t *testing.T, v *View) string {
	t.Helper()
	ents, err := v.ReadDir(RootIno)
	ok(t, "readdir", err)
	var names []string
	inos := map[string]uint64{}
	for _, e := range ents {
		if e.Name == "." || e.Name == ".." {
			continue
		}
		names = append(names, e.Name)
		inos[e.Name] = e.Ino
	}
	sort.Strings(names)
	out := ""
	for _, n := range names {
		out += fmt.Sprintf("%s=%x;", n, content(t, v, inos[n]))
	}
	return out
}

// TestHiddenBlocksModel applies random writes, truncates, removals,
// renames over, hard links, files removed while open and O_TMPFILEs
// linked later to a view and to a model, freezing layers and pinning
// some, unpinning others, collecting, and restarting; after each
// collection the live view, every pinned layer's stack and every file
// still open must read as the model says, and at the end fsck is clean.
// STRATA_HIDDEN_MODEL_SEEDS=N runs N seeds of 1,000 operations instead.
func TestHiddenBlocksModel(t *testing.T) {
	seeds, ops := []int64{1, 2, 3, 4, 5, 6}, 400
	if n, err := strconv.Atoi(os.Getenv("STRATA_HIDDEN_MODEL_SEEDS")); err == nil && n > 0 {
		seeds, ops = nil, 1000
		for i := 0; i < n; i++ {
			seeds = append(seeds, int64(100+i))
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			hiddenModelRun(t, seed, ops)
		})
	}
}

func hiddenModelRun(t *testing.T, seed int64, ops int) {
	const bs = reclaimBS
	rng := rand.New(rand.NewSource(seed))
	e := newEnv(t, bs, nil)
	v := e.view()
	defer func() { v.Close() }()
	m := &hiddenModel{names: map[string]int{}, data: map[int][]byte{}, real: map[int]uint64{}, held: map[int]bool{}, snaps: map[string]string{}}
	var pinned []string
	dropped := 0
	name := func() string { return fmt.Sprintf("f%d", rng.Intn(5)) }
	check := func(when string) {
		t.Helper()
		if got, want := viewTree(t, v), m.tree(); got != want {
			t.Fatalf("%s: live view\n got %s\nwant %s", when, got, want)
		}
		for id := range m.held {
			if got := content(t, v, m.real[id]); got != string(m.data[id]) {
				t.Fatalf("%s: an open unlinked file reads otherwise", when)
			}
		}
		for _, l := range pinned {
			snap, err := e.store.OpenSnapshot(e.name, l)
			ok(t, "snapshot", err)
			got := viewTree(t, snap)
			snap.Close()
			if got != m.snaps[l] {
				t.Fatalf("%s: pinned layer %s\n got %s\nwant %s", when, l, got, m.snaps[l])
			}
		}
	}
	for i := 0; i < ops; i++ {
		switch op := rng.Intn(20); {
		case op < 6: // write
			n := name()
			id, exists := m.names[n]
			if !exists {
				a := mkfile(t, v, RootIno, n, "")
				m.next++
				id = m.next
				m.names[n], m.real[id], m.data[id] = id, a.Ino, nil
			}
			off := rng.Intn(5 * bs)
			b := randBytes(rng.Int63(), 1+rng.Intn(2*bs))
			_, err := v.WriteAt(m.real[id], b, int64(off), false)
			ok(t, "write", err)
			d := m.data[id]
			if len(d) < off+len(b) {
				d = append(d, make([]byte, off+len(b)-len(d))...)
			}
			copy(d[off:], b)
			m.data[id] = d
		case op < 8: // truncate
			n := name()
			id, exists := m.names[n]
			if !exists {
				continue
			}
			size := rng.Intn(5 * bs)
			_, err := v.SetAttr(m.real[id], SetAttrIn{Size: ptr(int64(size))})
			ok(t, "truncate", err)
			d := m.data[id]
			if size <= len(d) {
				d = d[:size:size]
			} else {
				d = append(d, make([]byte, size-len(d))...)
			}
			m.data[id] = d
		case op < 10: // unlink, sometimes while open
			n := name()
			id, exists := m.names[n]
			if !exists {
				continue
			}
			if rng.Intn(3) == 0 && !m.held[id] {
				ok(t, "open", v.Open(m.real[id]))
				m.held[id] = true
			}
			ok(t, "unlink", v.Unlink(RootIno, n))
			delete(m.names, n)
		case op < 12: // rename over
			a, b := name(), name()
			ida, exists := m.names[a]
			if idb, over := m.names[b]; !exists || over && idb == ida {
				continue // POSIX: a rename between links of one file does nothing
			}
			ok(t, "rename", v.Rename(RootIno, a, RootIno, b, 0))
			m.names[b] = m.names[a]
			delete(m.names, a)
		case op < 13: // hard link
			a, b := name(), name()
			if _, exists := m.names[a]; !exists {
				continue
			}
			if _, exists := m.names[b]; exists {
				continue
			}
			_, err := v.Link(m.real[m.names[a]], RootIno, b)
			ok(t, "link", err)
			m.names[b] = m.names[a]
		case op < 14: // O_TMPFILE, linked in a later step
			if m.tmp == 0 {
				a, err := v.Tmpfile(RootIno, 0o644, root)
				ok(t, "tmpfile", err)
				ok(t, "open tmpfile", v.Open(a.Ino))
				b := randBytes(rng.Int63(), 1+rng.Intn(3*bs))
				_, err = v.WriteAt(a.Ino, b, 0, false)
				ok(t, "write tmpfile", err)
				m.next++
				m.tmp = m.next
				m.real[m.tmp], m.data[m.tmp] = a.Ino, b
				continue
			}
			n := name()
			if _, exists := m.names[n]; exists {
				continue
			}
			_, err := v.Link(m.real[m.tmp], RootIno, n)
			ok(t, "link tmpfile", err)
			v.Release(m.real[m.tmp])
			m.names[n] = m.tmp
			m.tmp = 0
		case op < 15: // let go of an open unlinked file
			for id := range m.held {
				v.Release(m.real[id])
				v.Forget(m.real[id])
				delete(m.held, id)
				break
			}
		case op < 18: // freeze, pinning half
			l := freeze(t, e.store, e.name)
			m.snaps[l] = m.tree()
			if rng.Intn(2) == 0 {
				pin(t, e.store, l)
				pinned = append(pinned, l)
			}
		case op < 19: // unpin one
			if len(pinned) == 0 {
				continue
			}
			k := rng.Intn(len(pinned))
			unpin(t, e.store, pinned[k])
			pinned = append(pinned[:k], pinned[k+1:]...)
		default: // collect, now and then after a restart
			if rng.Intn(4) == 0 {
				for id := range m.held {
					v.Release(m.real[id])
					delete(m.held, id)
				}
				if m.tmp != 0 {
					delete(m.data, m.tmp)
					m.tmp = 0
				}
				v = e.reopen(v)
			}
			res, err := e.store.CollectGarbage()
			ok(t, "gc", err)
			dropped += res.HiddenBlocks
			check(fmt.Sprintf("op %d, after gc", i))
		}
	}
	if _, err := e.store.CollectGarbage(); err != nil {
		t.Fatal(err)
	}
	check("at the end")
	fsckClean(t, e.store)
	t.Logf("seed %d: %d hidden blocks dropped, %d layers pinned at the end", seed, dropped, len(pinned))
}

func ptr[T any](v T) *T { return &v }
