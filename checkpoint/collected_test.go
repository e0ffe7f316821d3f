package checkpoint

import (
	"fmt"
	"math/rand"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// TestRollbackAcrossCollectedLayers: checkpoints removed from the middle
// of a history leave layers whose hidden blocks collections drop; a live
// sandbox then rolls back across them to every kept checkpoint and
// restores, and the trees, the changed paths a rollback reports (which it
// composes from the layers' deltas), the diffs between kept checkpoints
// and every state hash must come out as before.
func TestRollbackAcrossCollectedLayers(t *testing.T) {
	for _, seed := range []int64{1, 2, 3, 4, 5, 6} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			collectedRun(t, seed)
		})
	}
}

func collectedRun(t *testing.T, seed int64) {
	const bs = layers.MinBlockSize
	rng := rand.New(rand.NewSource(seed))
	e := newStoreEnv(t, func(base string) {
		writeBase(t, base, "b0", strings.Repeat("B", 3*bs))
		writeBase(t, base, "d/b1", "base one")
	})
	files := []string{"f0", "f1", "f2", "b0", "d/b1", "d/f3"}
	body := func() string {
		b := make([]byte, 1+rng.Intn(3*bs))
		rng.Read(b)
		return string(b)
	}
	exists := func(rel string) bool {
		_, ok := e.liveTree("s")[rel]
		return ok
	}
	var cps []Checkpoint
	trees := map[string]tree{}
	for step := 0; step < 12; step++ {
		for k := 0; k < 6; k++ {
			rel := files[rng.Intn(len(files))]
			switch op := rng.Intn(5); {
			case op == 0 || !exists(rel):
				e.put("s", rel, body())
			case op == 1: // part of the file, in place
				v := e.view("s")
				a := lookupPath(t, v, rel)
				if _, err := v.WriteAt(a.Ino, []byte(body()), int64(rng.Intn(2*bs)), false); err != nil {
					t.Fatal(err)
				}
			case op == 2:
				e.remove("s", rel)
			case op == 3 && !strings.Contains(rel, "/"): // a new file renamed over it
				e.put("s", "tmp", body())
				if err := e.view("s").Rename(layers.RootIno, "tmp", layers.RootIno, rel, 0); err != nil {
					t.Fatal(err)
				}
			default:
				v := e.view("s")
				a := lookupPath(t, v, rel)
				size := int64(rng.Intn(2 * bs))
				if _, err := v.SetAttr(a.Ino, layers.SetAttrIn{Size: &size}); err != nil {
					t.Fatal(err)
				}
			}
		}
		cp := e.checkpoint("s", fmt.Sprintf("c%d", step))
		cps = append(cps, cp)
		trees[cp.ID] = e.liveTree("s")
	}
	blocks := func() int {
		rep, err := e.store.Fsck()
		if err != nil || len(rep.Problems) > 0 {
			t.Fatalf("fsck: %+v %v", rep.Problems, err)
		}
		return rep.Blocks
	}
	before := blocks()
	// Remove every checkpoint but the first, the last and a few between.
	kept := []Checkpoint{cps[0]}
	for _, cp := range cps[1 : len(cps)-1] {
		if rng.Intn(3) == 0 {
			kept = append(kept, cp)
			continue
		}
		if _, err := e.mgr.Remove(cp.ID); err != nil {
			t.Fatal(err)
		}
	}
	kept = append(kept, cps[len(cps)-1])
	dropped := before - blocks()
	for _, cp := range kept {
		if got := e.snapTree("s", cp.Layer); !reflect.DeepEqual(got, trees[cp.ID]) {
			t.Fatalf("kept checkpoint %s reads otherwise after the collection: %v", cp.Label, diffTrees(trees[cp.ID], got))
		}
	}
	for i := 0; i < 8; i++ {
		cur := e.liveTree("s")
		target := kept[rng.Intn(len(kept))]
		r, err := e.mgr.Rollback("s", target.ID)
		if err != nil {
			t.Fatalf("rollback to %s: %v", target.Label, err)
		}
		if got := e.liveTree("s"); !reflect.DeepEqual(got, trees[target.ID]) {
			t.Fatalf("rollback to %s: the tree differs at %v", target.Label, diffTrees(trees[target.ID], got))
		}
		if want := diffTrees(cur, trees[target.ID]); !reflect.DeepEqual(r.ChangedPaths, want) {
			t.Fatalf("rollback to %s reports %v changed, want %v", target.Label, r.ChangedPaths, want)
		}
		if rng.Intn(2) == 0 {
			if _, err := e.mgr.Restore(r.Archive); err != nil {
				t.Fatalf("restore: %v", err)
			}
			if got := e.liveTree("s"); !reflect.DeepEqual(got, cur) {
				t.Fatalf("restore after the rollback to %s: the tree differs at %v", target.Label, diffTrees(cur, got))
			}
		}
		if _, err := e.store.CollectGarbage(); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range kept {
		for _, b := range kept {
			d, err := e.mgr.DiffCheckpoints(a.ID, b.ID)
			if err != nil {
				t.Fatal(err)
			}
			got := append(append(append([]string{}, d.Added...), d.Modified...), d.Deleted...)
			sort.Strings(got)
			if want := diffTrees(trees[a.ID], trees[b.ID]); !reflect.DeepEqual(got, want) {
				t.Fatalf("diff %s..%s: %v, want %v", a.Label, b.Label, got, want)
			}
		}
		if v, err := e.mgr.Verify(a.ID); err != nil || !v.OK {
			t.Fatalf("verify %s: %+v %v", a.Label, v, err)
		}
	}
	if dropped == 0 {
		t.Fatalf("removing %d checkpoints dropped no block", len(cps)-len(kept))
	}
	t.Logf("seed %d: %d checkpoints kept of %d, %d of %d blocks dropped", seed, len(kept), len(cps), dropped, before)
}
