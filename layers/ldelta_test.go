package layers

import (
	"crypto/sha256"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"
)

// stateKey is what the state hash and diffs look at in an inode state
// (times are left out: a base file's atime moves when it is read).
type stateKey struct {
	Ino, Size           int64
	Mode                uint32
	Fingerprint, Target string
}

func keyOf(s *InodeState) *stateKey {
	if s == nil {
		return nil
	}
	return &stateKey{Ino: int64(s.Ino), Size: s.Size, Mode: s.Mode, Fingerprint: s.Fingerprint, Target: s.Target}
}

// deltaView is a delta as comparable text: every key whose state changes
// or exists on either side, with its states (and naming where it has a
// state).
func deltaView(d *LayerDelta) []string {
	var out []string
	for _, c := range d.Entries {
		if c.Old == nil && c.New == nil {
			continue
		}
		out = append(out, fmt.Sprintf("e %d/%s %+v %+v", c.Dir, c.Name, c.Old, c.New))
	}
	for _, c := range d.Inodes {
		if c.Old == nil && c.New == nil {
			continue
		}
		nm := d.names[c.Ino]
		if c.Old == nil {
			nm[0] = naming{}
		}
		if c.New == nil {
			nm[1] = naming{}
		}
		out = append(out, fmt.Sprintf("i %d %+v %+v %+v", c.Ino, keyOf(c.Old), keyOf(c.New), nm))
	}
	sort.Strings(out)
	return out
}

// changesView is Changes as comparable text, paths included.
func changesView(ch Changes) []string {
	var out []string
	tree := func(t []PathAttr) string {
		s := ""
		for _, p := range t {
			s += fmt.Sprintf("[%s %d %o %d]", p.Path, p.Ino, p.Mode, p.Size)
		}
		return s
	}
	for _, c := range ch.Entries {
		out = append(out, fmt.Sprintf("e %d/%s %+v %+v old %q %s new %q %s", c.Dir, c.Name, c.Old, c.New, c.OldPath, tree(c.OldTree), c.NewPath, tree(c.NewTree)))
	}
	for _, c := range ch.Inodes {
		out = append(out, fmt.Sprintf("i %d %+v %+v %q", c.Ino, keyOf(c.Old), keyOf(c.New), c.Path))
	}
	return out
}

// TestDeltasFromMemoryAgreeWithStore runs random operations on a live view,
// freezing and moving its head at random. Every freeze's delta, built from
// the view's memory, must equal the one read back from the store, block
// count included; every RepointDiff must list what Compare lists, paths
// included. A reopen in the middle of a layer makes the view fall back
// on the store.
func TestDeltasFromMemoryAgreeWithStore(t *testing.T) {
	for _, seed := range deltaSeeds() {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runDeltas(t, seed) })
	}
}

// deltaSeeds are the runs of TestDeltasFromMemoryAgreeWithStore;
// STRATA_DELTA_SEEDS=N runs N more.
func deltaSeeds() []int64 {
	seeds := []int64{1, 2, 3, 4, 5, 6}
	if n, err := strconv.Atoi(os.Getenv("STRATA_DELTA_SEEDS")); err == nil {
		for i := 0; i < n; i++ {
			seeds = append(seeds, time.Now().UnixNano()+int64(i))
		}
	}
	return seeds
}

func runDeltas(t *testing.T, seed int64) {
	rng := rand.New(rand.NewSource(seed))
	e := newEnv(t, MinBlockSize*2, func(base string) {
		for i := 0; i < 4; i++ {
			put(t, filepath.Join(base, fmt.Sprintf("d%d/f", i)), fmt.Sprint("base ", i))
			put(t, filepath.Join(base, fmt.Sprintf("d%d/e/g", i)), string(make([]byte, 20000+i)))
		}
		ok(t, "symlink", os.Symlink("d0/f", filepath.Join(base, "link")))
	})
	v := e.view()
	t.Cleanup(func() { v.Close() })
	// pick returns a random directory and, in it, a random entry of the
	// wanted kind (name "" when there is none).
	pick := func(isDir bool) (uint64, string, uint64) {
		dirs := []uint64{RootIno}
		for i := 0; i < len(dirs); i++ {
			ents, _ := v.ReadDir(dirs[i])
			for _, en := range ents {
				if isType(Attr{Mode: en.Mode}, 0o040000) {
					dirs = append(dirs, en.Ino)
				}
			}
		}
		d := dirs[rng.Intn(len(dirs))]
		ents, _ := v.ReadDir(d)
		var cands []DirEntry
		for _, en := range ents {
			if isType(Attr{Mode: en.Mode}, 0o040000) == isDir {
				cands = append(cands, en)
			}
		}
		if len(cands) == 0 {
			return d, "", 0
		}
		c := cands[rng.Intn(len(cands))]
		return d, c.Name, c.Ino
	}
	var frozen []string
	fast, slow, diffs := 0, 0, 0
	for step := 0; step < 150; step++ {
		switch rng.Intn(17) {
		case 0:
			d, _, _ := pick(true)
			v.Mknod(d, name(rng, "n"), 0o100644, 0, root)
		case 1, 2:
			if _, _, f := pick(false); f != 0 {
				v.WriteAt(f, make([]byte, 1+rng.Intn(9000)), int64(rng.Intn(20000)), rng.Intn(3) == 0)
			}
		case 3:
			if _, _, f := pick(false); f != 0 {
				sz := int64(rng.Intn(30000))
				v.SetAttr(f, SetAttrIn{Size: &sz})
			}
		case 4:
			if d, n, f := pick(false); f != 0 {
				v.Unlink(d, n)
			}
		case 5:
			d, _, _ := pick(true)
			v.Mkdir(d, name(rng, "m"), 0o755, root)
		case 6:
			if d, n, f := pick(true); f != 0 {
				nd, _, _ := pick(true)
				v.Rename(d, n, nd, name(rng, "r"), 0)
			}
		case 7:
			if d, n, f := pick(false); f != 0 {
				nd, _, _ := pick(true)
				v.Rename(d, n, nd, name(rng, "r"), 0)
			}
		case 8:
			if d, n, f := pick(true); f != 0 {
				v.Rmdir(d, n)
			}
		case 9:
			if _, _, f := pick(false); f != 0 {
				mode := uint32(0o600 + rng.Intn(0o177))
				v.SetAttr(f, SetAttrIn{Mode: &mode})
			}
		case 10:
			if _, _, f := pick(false); f != 0 && rng.Intn(2) == 0 {
				d, _, _ := pick(true)
				v.Link(f, d, name(rng, "h"))
			} else {
				d, _, _ := pick(true)
				v.Symlink(d, name(rng, "s"), "../x", root)
			}
		case 14:
			d, _, _ := pick(true)
			if a, err := v.Tmpfile(d, 0o644, root); err == nil {
				v.WriteAt(a.Ino, make([]byte, 1+rng.Intn(9000)), 0, false)
				if rng.Intn(2) == 0 {
					v.Link(a.Ino, d, name(rng, "t"))
				}
				v.Release(a.Ino)
			}
		case 15:
			if _, _, f := pick(false); f != 0 {
				v.SetXattr(f, "user.k", []byte(name(rng, "x")), 0)
			}
		case 16:
			if _, _, f := pick(false); f != 0 {
				if rng.Intn(2) == 0 {
					v.Zero(f, int64(rng.Intn(20000)), int64(1+rng.Intn(20000)), rng.Intn(2) == 0)
				} else {
					v.Allocate(f, int64(rng.Intn(20000)), int64(1+rng.Intn(20000)), false)
				}
			}
		case 11:
			if rng.Intn(6) == 0 {
				v = e.reopen(v) // the active layer now holds records of another view
			}
		case 12:
			var got *LayerDelta
			var blocks Usage
			l, _, err := e.store.Freeze("sb", func(tx *Txn, frozen, _ string) error {
				if tx.deltas[frozen] != nil {
					fast++ // built from memory before the transaction
				}
				var err error
				if got, err = tx.LayerDelta("sb", frozen); err != nil {
					return err
				}
				blocks, err = tx.LayerUsage(frozen)
				return err
			})
			ok(t, "freeze", err)
			if e.store.deltas.get(l) != got {
				t.Fatalf("seed %d step %d: the store does not keep the delta of %s", seed, step, l)
			}
			want, err := e.store.computeDelta("sb", l)
			ok(t, "delta from the store", err)
			if g, w := deltaView(got), deltaView(want); !reflect.DeepEqual(g, w) {
				t.Fatalf("seed %d step %d: delta of %s from memory\n%s\nfrom the store\n%s", seed, step, l, join(g), join(w))
			}
			if usage, err := e.store.LayerUsage(l); err != nil || usage != blocks || got.Usage != blocks {
				t.Fatalf("seed %d step %d: delta counts %+v (txn %+v), the store %+v (%v)", seed, step, got.Usage, blocks, usage, err)
			}
			sameTree(t, fmt.Sprintf("seed %d step %d: after freezing %s", seed, step, l), v, e.store, l)
			frozen = append(frozen, l)
		case 13:
			if len(frozen) == 0 {
				continue
			}
			to := frozen[rng.Intn(len(frozen))]
			head, err := e.store.Sandbox("sb")
			ok(t, "sandbox", err)
			_, ch, err := e.store.RepointDiff("sb", to, noRepointFn)
			ok(t, "repoint", err)
			want, err := e.store.Compare("sb", head.Head, to, true)
			ok(t, "compare", err)
			sameTree(t, fmt.Sprintf("seed %d step %d: after moving to %s", seed, step, to), v, e.store, to)
			if ch == nil {
				slow++
				continue
			}
			touchedCovers(t, fmt.Sprintf("seed %d step %d", seed, step), *ch)
			if g, w := changesView(*ch), changesView(want); !reflect.DeepEqual(g, w) {
				t.Fatalf("seed %d step %d: repoint from %s to %s lists\n%s\nCompare lists\n%s", seed, step, head.Head, to, join(g), join(w))
			}
			diffs++
		}
	}
	// The fixed seeds must exercise both paths (random ones may not).
	if seed <= 6 && (fast == 0 || diffs == 0) {
		t.Errorf("seed %d: %d deltas from memory, %d rollbacks told their changes", seed, fast, diffs)
	}
	t.Logf("seed %d: %d deltas from memory, %d rollbacks told their changes, %d compared after", seed, fast, diffs, slow)
}

// touchedCovers checks that ch.Touched names every inode and directory
// ch lists as changed: a live mount drops the kernel's caches of those.
func touchedCovers(t *testing.T, what string, ch Changes) {
	t.Helper()
	if ch.Touched == nil {
		t.Fatalf("%s: a repoint's changes name nothing as touched", what)
	}
	inos, dirs := map[uint64]bool{}, map[uint64]bool{}
	for _, i := range ch.Touched.Inodes {
		inos[i] = true
	}
	for _, d := range ch.Touched.Dirs {
		dirs[d] = true
	}
	for _, c := range ch.Inodes {
		if !inos[c.Ino] {
			t.Errorf("%s: inode %d changed but is not named touched", what, c.Ino)
		}
	}
	for _, c := range ch.Entries {
		if !dirs[c.Dir] {
			t.Errorf("%s: entry %q of %d changed but its directory is not named touched", what, c.Name, c.Dir)
		}
		// A live mount tells the kernel about these names only.
		if names, ok := ch.Touched.Names[c.Dir]; !ok || !slices.Contains(names, c.Name) {
			t.Errorf("%s: entry %q of %d changed but is not among its directory's touched names %q", what, c.Name, c.Dir, names)
		}
	}
	for _, d := range ch.Touched.Dirs {
		if _, ok := ch.Touched.Names[d]; !ok {
			t.Errorf("%s: directory %d is touched without its names", what, d)
		}
	}
}

// treeOf lists every path of a view with what it is (times left out).
func treeOf(t *testing.T, v *View) []string {
	t.Helper()
	var out []string
	var walk func(dir uint64, prefix string)
	walk = func(dir uint64, prefix string) {
		ents, err := v.ReadDir(dir)
		ok(t, "readdir "+prefix, err)
		for _, en := range ents {
			p := prefix + "/" + en.Name
			a, err := v.GetAttr(en.Ino)
			ok(t, "getattr "+p, err)
			line := fmt.Sprintf("%s ino %d mode %o size %d links %d", p, a.Ino, a.Mode, a.Size, a.Nlink)
			switch {
			case isType(a, 0o100000):
				fp, err := v.Fingerprint(a.Ino)
				ok(t, "fingerprint "+p, err)
				line += fmt.Sprintf(" fp %s data %x", fp, sha(content(t, v, a.Ino)))
			case isType(a, 0o120000):
				target, err := v.Readlink(a.Ino)
				ok(t, "readlink "+p, err)
				line += " -> " + target
			}
			xs, err := v.ListXattr(a.Ino)
			ok(t, "listxattr "+p, err)
			line += fmt.Sprint(" xattrs ", xs)
			out = append(out, line)
			if a.IsDir() {
				walk(en.Ino, p)
			}
		}
	}
	walk(RootIno, "")
	return out
}

func sha(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// sameTree fails unless the live view shows what a fresh view of the
// stack topped by layer shows: what it kept in its caches over a freeze or
// a move of its head is still right.
func sameTree(t *testing.T, what string, live *View, s *Store, layer string) {
	t.Helper()
	snap, err := s.OpenSnapshot("sb", layer)
	ok(t, "snapshot", err)
	defer snap.Close()
	if got, want := treeOf(t, live), treeOf(t, snap); !reflect.DeepEqual(got, want) {
		t.Fatalf("%s the live view shows\n%s\na fresh view\n%s", what, join(got), join(want))
	}
}

// name picks from a few names, so that a layer records one name several
// times: made, removed, made again, renamed over.
func name(rng *rand.Rand, prefix string) string { return fmt.Sprint(prefix, rng.Intn(4)) }

func join(ss []string) string {
	out := ""
	for _, s := range ss {
		out += "  " + s + "\n"
	}
	return out
}
