package checkpoint

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// TestHiddenPassBesideRollbacks: hidden-block passes run without any lock
// of the operations that move heads (the control server runs them after
// Exclusive), so they go on while checkpoints are taken, removed and
// rolled back to: every rollback still shows its checkpoint's tree, and at
// the end every kept checkpoint reads and verifies as it was taken.
func TestHiddenPassBesideRollbacks(t *testing.T) {
	e := newStoreEnv(t, nil)
	m := New(e.store, e.inval).LeaveHidden()
	rng := rand.New(rand.NewSource(1))
	done := make(chan struct{})
	var wg sync.WaitGroup
	var passes, dropped int
	var passErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			res, err := e.store.CollectHidden()
			if err != nil {
				passErr = err
				return
			}
			passes++
			dropped += res.HiddenBlocks
		}
	}()
	trees := map[string]tree{}
	var kept []Checkpoint
	for i := 0; i < 60; i++ {
		for _, f := range []string{"a", "b", "d/c"} {
			if rng.Intn(2) == 0 {
				e.put("s", f, strings.Repeat(fmt.Sprint(i), 1+rng.Intn(3000)))
			}
		}
		cp := e.checkpoint("s", "")
		trees[cp.ID] = e.liveTree("s")
		kept = append(kept, cp)
		switch rng.Intn(4) {
		case 0: // back to a kept checkpoint
			to := kept[rng.Intn(len(kept))]
			if _, err := m.Rollback("s", to.ID); err != nil {
				t.Fatalf("rollback: %v", err)
			}
			if got := e.liveTree("s"); !reflect.DeepEqual(got, trees[to.ID]) {
				t.Fatalf("after a rollback beside the passes the tree differs at %v", diffTrees(trees[to.ID], got))
			}
		case 1: // drop an older one
			if len(kept) > 2 {
				k := rng.Intn(len(kept) - 1)
				if _, err := m.Remove(kept[k].ID); err != nil {
					t.Fatalf("rm: %v", err)
				}
				kept = append(kept[:k], kept[k+1:]...)
			}
		}
	}
	close(done)
	wg.Wait()
	if passErr != nil {
		t.Fatalf("a pass failed: %v", passErr)
	}
	if _, err := e.store.CollectHidden(); err != nil {
		t.Fatal(err)
	}
	for _, cp := range kept {
		if got := e.snapTree("s", cp.Layer); !reflect.DeepEqual(got, trees[cp.ID]) {
			t.Fatalf("checkpoint %s reads otherwise at the end: %v", cp.ID, diffTrees(trees[cp.ID], got))
		}
		if v, err := m.Verify(cp.ID); err != nil || !v.OK {
			t.Fatalf("verify %s: %+v %v", cp.ID, v, err)
		}
	}
	rep, err := e.store.Fsck()
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("fsck: %+v %v", rep.Problems, err)
	}
	t.Logf("%d passes dropped %d hidden blocks beside the operations", passes, dropped)
}
