package checkpoint

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// TestIncrementalAgreesWithFullWalk applies random operations to a live
// view, checkpoints and rolls back at random, and checks that the state
// hash kept by layer deltas equals the one recomputed from the whole tree,
// and that the layer-delta diff equals a diff of every path.
// STRATA_MODEL_SEED replays a run.
func TestIncrementalAgreesWithFullWalk(t *testing.T) {
	seeds := []int64{1, 2, 3, time.Now().UnixNano()}
	if s := os.Getenv("STRATA_MODEL_SEED"); s != "" {
		n, _ := strconv.ParseInt(s, 10, 64)
		seeds = []int64{n}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runIncremental(t, seed, seed%2 == 0) })
	}
}

func runIncremental(t *testing.T, seed int64, links bool) {
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	for i := 0; i < 6; i++ {
		os.MkdirAll(filepath.Join(base, fmt.Sprintf("d%d/e", i)), 0o755)
		os.WriteFile(filepath.Join(base, fmt.Sprintf("d%d/f", i)), []byte(fmt.Sprint("base", i)), 0o644)
		os.WriteFile(filepath.Join(base, fmt.Sprintf("d%d/e/g", i)), make([]byte, 70000+i), 0o644)
	}
	os.Symlink("d0/f", filepath.Join(base, "link"))
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateSandbox("s", base, layers.MinBlockSize*4); err != nil {
		t.Fatal(err)
	}
	v, err := st.OpenView("s", false)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { v.Close() }()
	m := New(st, nil)
	c := layers.Caller{}
	// dirs and files known to exist now (by inode); stale ones just fail.
	pick := func(isDir bool) (uint64, string, uint64) {
		var dirs []uint64
		var walkDirs func(d uint64)
		walkDirs = func(d uint64) {
			dirs = append(dirs, d)
			ents, _ := v.ReadDir(d)
			for _, e := range ents {
				if e.Mode == 0o040000 {
					walkDirs(e.Ino)
				}
			}
		}
		walkDirs(layers.RootIno)
		d := dirs[rng.Intn(len(dirs))]
		ents, _ := v.ReadDir(d)
		var cands []layers.DirEntry
		for _, e := range ents {
			if (e.Mode == 0o040000) == isDir {
				cands = append(cands, e)
			}
		}
		if len(cands) == 0 {
			return d, "", 0
		}
		e := cands[rng.Intn(len(cands))]
		return d, e.Name, e.Ino
	}
	var prev Checkpoint
	for step := 0; step < 120; step++ {
		switch rng.Intn(12) {
		case 0, 1:
			d, _, _ := pick(true)
			v.Mknod(d, fmt.Sprintf("n%d", step), 0o100644, 0, c)
		case 2:
			if _, _, f := pick(false); f != 0 {
				v.WriteAt(f, make([]byte, 1+rng.Intn(40000)), int64(rng.Intn(100000)), false)
			}
		case 3:
			if _, _, f := pick(false); f != 0 {
				sz := int64(rng.Intn(90000))
				v.SetAttr(f, layers.SetAttrIn{Size: &sz})
			}
		case 4:
			if d, n, f := pick(false); f != 0 {
				v.Unlink(d, n)
			}
		case 5:
			d, _, _ := pick(true)
			v.Mkdir(d, fmt.Sprintf("m%d", step), 0o755, c)
		case 6:
			if d, n, f := pick(true); f != 0 {
				nd, _, _ := pick(true)
				v.Rename(d, n, nd, fmt.Sprintf("r%d", step), 0)
			}
		case 7:
			if d, n, f := pick(false); f != 0 {
				nd, _, _ := pick(true)
				v.Rename(d, n, nd, fmt.Sprintf("r%d", step), 0)
			}
		case 8:
			if d, n, f := pick(true); f != 0 {
				v.Rmdir(d, n) // fails unless empty
			}
		case 9:
			if _, _, f := pick(false); f != 0 {
				mode := uint32(0o600 + rng.Intn(0o177))
				v.SetAttr(f, layers.SetAttrIn{Mode: &mode})
			}
		case 10:
			if _, _, f := pick(false); f != 0 && links {
				d, _, _ := pick(true)
				v.Link(f, d, fmt.Sprintf("h%d", step))
			} else {
				d, _, _ := pick(true)
				v.Symlink(d, fmt.Sprintf("s%d", step), "../x", c)
			}
		case 11:
			cp, err := m.Create("s", Options{Step: step})
			if err != nil {
				t.Fatalf("seed %d step %d: checkpoint: %v", seed, step, err)
			}
			full, err := m.StateHash("s", cp.Layer)
			if err != nil {
				t.Fatal(err)
			}
			if full != cp.StateHash {
				t.Fatalf("seed %d step %d: incremental hash %s, full walk %s", seed, step, cp.StateHash, full)
			}
			if prev.ID != "" && !links {
				got, err := m.compare("s", prev.Layer, cp.Layer)
				if err != nil {
					t.Fatal(err)
				}
				want, err := m.diffLayers("s", prev.Layer, cp.Layer)
				if err != nil {
					t.Fatal(err)
				}
				got.ChangedBytes, want.ChangedBytes = 0, 0
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("seed %d step %d: delta diff\n%+v\nfull diff\n%+v", seed, step, got, want)
				}
			}
			prev = cp
			if rng.Intn(4) == 0 {
				cps, _ := m.List("s")
				if _, err := m.Rollback("s", cps[rng.Intn(len(cps))].ID); err != nil {
					t.Fatalf("seed %d step %d: rollback: %v", seed, step, err)
				}
			}
		}
	}
}
