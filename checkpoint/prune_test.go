package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// backdate moves the creation time of checkpoints back by age, as if
// they were made that long ago.
func backdate(e *storeEnv, age time.Duration, cps ...Checkpoint) {
	e.t.Helper()
	err := e.store.Update(func(tx *layers.Txn) error {
		for _, cp := range cps {
			cp.Created = cp.Created.Add(-age)
			b, err := json.Marshal(cp)
			if err != nil {
				return err
			}
			if err := tx.Set(keyCP(cp.ID), b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// makeCheckpoints writes one file version per checkpoint, n times.
func makeCheckpoints(e *storeEnv, n int) []Checkpoint {
	e.t.Helper()
	var out []Checkpoint
	for i := 0; i < n; i++ {
		e.put("s", "f.txt", "version "+string(rune('a'+i%26))+string(rune('0'+i/26)))
		cp, err := e.mgr.Create("s", Options{Step: i})
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, cp)
	}
	return out
}

func TestPrunePolicies(t *testing.T) {
	tests := []struct {
		name    string
		n       int
		old     []int // indexes of checkpoints made two days ago
		policy  Policy
		removed []int
	}{
		{"keep last", 5, nil, Policy{KeepLast: 2}, []int{0, 1, 2}},
		{"keep last more than there are", 3, nil, Policy{KeepLast: 10}, nil},
		{"keep within", 5, []int{0, 1, 2}, Policy{KeepWithin: 24 * time.Hour}, []int{0, 1, 2}},
		{"keep within, nothing old", 3, nil, Policy{KeepWithin: time.Hour}, nil},
		{"either rule keeps", 5, []int{0, 1, 2, 3}, Policy{KeepLast: 2, KeepWithin: 24 * time.Hour}, []int{0, 1, 2}},
		{"an old checkpoint among young ones", 4, []int{1}, Policy{KeepWithin: 24 * time.Hour}, []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t, nil)
			cps := makeCheckpoints(e, tc.n)
			var old []Checkpoint
			for _, i := range tc.old {
				old = append(old, cps[i])
			}
			backdate(e, 48*time.Hour, old...)
			live := e.liveTree("s")
			res, err := e.mgr.Prune("s", tc.policy)
			if err != nil {
				t.Fatal(err)
			}
			wantRemoved, wantKept := []string{}, []string{}
			gone := map[int]bool{}
			for _, i := range tc.removed {
				gone[i] = true
				wantRemoved = append(wantRemoved, cps[i].ID)
			}
			for i, cp := range cps {
				if !gone[i] {
					wantKept = append(wantKept, cp.ID)
				}
			}
			if !reflect.DeepEqual(res.Removed, wantRemoved) || !reflect.DeepEqual(res.Kept, wantKept) {
				t.Fatalf("prune removed %v kept %v, want removed %v kept %v", res.Removed, res.Kept, wantRemoved, wantKept)
			}
			left, err := e.mgr.List("s")
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(ids(left), wantKept) {
				t.Fatalf("list after prune: %v, want %v", ids(left), wantKept)
			}
			for _, id := range wantRemoved {
				if _, err := e.mgr.Resolve(id); !errors.Is(err, layers.ErrNotFound) {
					t.Fatalf("pruned checkpoint %s resolves: %v", id, err)
				}
			}
			// Every layer is still in the sandbox's stack: nothing goes.
			if len(res.GC.Layers) != 0 {
				t.Fatalf("prune collected layers %v of the live stack", res.GC.Layers)
			}
			if got := e.liveTree("s"); !reflect.DeepEqual(got, live) {
				t.Fatalf("prune changed the sandbox from %v to %v", live, got)
			}
		})
	}
}

func TestDefaultPolicy(t *testing.T) {
	if DefaultPolicy.KeepLast != 100 || DefaultPolicy.KeepWithin != 7*24*time.Hour {
		t.Fatalf("DefaultPolicy %+v, want the last 100 and a week", DefaultPolicy)
	}
	// Past the last 100, only what is younger than a week stays.
	e := newStoreEnv(t, nil)
	cps := makeCheckpoints(e, 102)
	backdate(e, 8*24*time.Hour, cps[0])
	backdate(e, 6*24*time.Hour, cps[1])
	res, err := e.mgr.Prune("s", Policy{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Removed, []string{cps[0].ID}) || len(res.Kept) != 101 {
		t.Fatalf("default prune removed %v (kept %d), want only the week-old first", res.Removed, len(res.Kept))
	}
}

func TestPruneRefuses(t *testing.T) {
	e := newStoreEnv(t, nil)
	cps := makeCheckpoints(e, 2)
	for _, p := range []Policy{{KeepLast: -1}, {KeepWithin: -time.Second}, {KeepLast: 3, KeepWithin: -time.Second}} {
		if _, err := e.mgr.Prune("s", p); !errors.Is(err, layers.ErrInvalid) {
			t.Fatalf("prune with %+v: got %v, want ErrInvalid", p, err)
		}
	}
	if left, _ := e.mgr.List("s"); len(left) != len(cps) {
		t.Fatalf("refused prune removed checkpoints: %v", ids(left))
	}
	if _, err := e.mgr.Prune("ghost", Policy{KeepLast: 1}); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("prune of a missing sandbox: %v", err)
	}
}

// TestPruneKeepsWhatOthersStandOn prunes every checkpoint but the last
// after a rollback and a fork: the archive still exports and restores, the
// fork still reads its state, and the last checkpoint still verifies.
func TestPruneKeepsWhatOthersStandOn(t *testing.T) {
	h := newHistory(t)
	e := h.e
	res, err := e.mgr.Rollback("s", "c1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.mgr.Fork("f", "c2"); err != nil {
		t.Fatal(err)
	}
	dataFiles := func() int {
		ents, err := os.ReadDir(filepath.Join(e.store.Dir(), "data"))
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	before := dataFiles()
	pr, err := e.mgr.Prune("s", Policy{KeepLast: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(pr.Removed) != 3 || len(pr.Kept) != 1 || pr.Kept[0] != h.cps[3].ID {
		t.Fatalf("prune: %+v", pr)
	}
	if len(pr.GC.Layers) != 0 || dataFiles() != before {
		t.Fatalf("prune collected %v (data files %d -> %d)", pr.GC.Layers, before, dataFiles())
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[1]) {
		t.Fatalf("sandbox after prune shows\n%v\nwant c1\n%v", got, h.trees[1])
	}
	if got := e.liveTree("f"); !reflect.DeepEqual(got, h.trees[2]) {
		t.Fatalf("fork after prune shows\n%v\nwant c2\n%v", got, h.trees[2])
	}
	if vr, err := e.mgr.Verify("c3"); err != nil || !vr.OK {
		t.Fatalf("verify c3 after prune: %+v, %v", vr, err)
	}
	dst := filepath.Join(e.dir, "export")
	if _, err := e.mgr.Export(res.Archive, dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := dirTree(t, dst); !reflect.DeepEqual(got, h.trees[3]) {
		t.Fatalf("archive exported after prune:\n%v\nwant c3\n%v", got, h.trees[3])
	}
	if _, err := e.mgr.Restore(res.Archive); err != nil {
		t.Fatal(err)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[3]) {
		t.Fatalf("restore after prune shows\n%v\nwant c3\n%v", got, h.trees[3])
	}
}

func TestRemove(t *testing.T) {
	h := newHistory(t)
	e := h.e
	cp, err := e.mgr.Remove("c1")
	if err != nil {
		t.Fatal(err)
	}
	if cp.ID != h.cps[1].ID {
		t.Fatalf("remove c1 removed %s", cp.ID)
	}
	for _, ref := range []string{"c1", h.cps[1].ID} {
		if _, err := e.mgr.Resolve(ref); !errors.Is(err, layers.ErrNotFound) {
			t.Fatalf("removed checkpoint resolves by %s: %v", ref, err)
		}
	}
	if left, _ := e.mgr.List("s"); len(left) != 3 {
		t.Fatalf("list after remove: %v", ids(left))
	}
	if _, err := e.mgr.Remove("c1"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	// Its layer stays under the later checkpoints.
	if _, err := e.mgr.Rollback("s", "c2"); err != nil {
		t.Fatal(err)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[2]) {
		t.Fatalf("rollback to c2 after removing c1 shows\n%v\nwant\n%v", got, h.trees[2])
	}
	r, err := e.mgr.Inspect(h.cps[1].Layer)
	if err != nil {
		t.Fatal(err)
	}
	if r.Checkpoint != "" || r.State != layers.StateFrozen {
		t.Fatalf("layer of the removed checkpoint: %+v", r)
	}
	// A label freed by remove can be used again.
	e.put("s", "x", "x")
	if _, err := e.mgr.Create("s", Options{Label: "c1"}); err != nil {
		t.Fatalf("reuse of a removed label: %v", err)
	}
}

func TestFork(t *testing.T) {
	h := newHistory(t)
	e := h.e
	info, err := e.mgr.Fork("f", "c1")
	if err != nil {
		t.Fatal(err)
	}
	sInfo, _ := e.store.Sandbox("s")
	if info.Name != "f" || info.Base != sInfo.Base || info.BlockSize != sInfo.BlockSize {
		t.Fatalf("fork %+v of %+v", info, sInfo)
	}
	if got := e.liveTree("f"); !reflect.DeepEqual(got, h.trees[1]) {
		t.Fatalf("fork of c1 shows\n%v\nwant\n%v", got, h.trees[1])
	}
	// The fork and its origin write independently.
	e.put("f", "edit.txt", "fork's")
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[3]) {
		t.Fatalf("write in the fork changed the origin: %v", got)
	}
	// The fork goes back to the checkpoint it was made from, which is not
	// its own; a checkpoint of the origin above that one is refused.
	if _, err := e.mgr.Rollback("f", "c2"); !errors.Is(err, ErrOtherSandbox) {
		t.Fatalf("fork's rollback to c2, above its fork point: got %v, want ErrOtherSandbox", err)
	}
	hits := 0
	restore := e.store.InjectFault(failOn("layers", "f", &hits))
	if _, err := e.mgr.Rollback("f", "c1"); !errors.Is(err, errInjected) || hits == 0 {
		t.Fatalf("fork's rollback when its stack cannot be read: got %v, want the injected fault", err)
	}
	restore()
	if _, err := e.mgr.Rollback("f", "c1"); err != nil {
		t.Fatalf("fork's rollback to the checkpoint it was made from: %v", err)
	}
	if got := e.liveTree("f"); !reflect.DeepEqual(got, h.trees[1]) {
		t.Fatalf("fork after its rollback to c1 shows\n%v\nwant\n%v", got, h.trees[1])
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[3]) {
		t.Fatalf("the fork's rollback changed the origin: %v", got)
	}
	if ars, err := e.mgr.Archives("f"); err != nil || len(ars) != 1 || ars[0].ToCheckpoint != h.cps[1].ID {
		t.Fatalf("fork's archives after its rollback: %+v, %v; want one, to c1", ars, err)
	}
	if _, err := e.mgr.Rollback("f", "c0"); err != nil {
		t.Fatalf("fork's rollback to c0, below its fork point: %v", err)
	}
	if got := e.liveTree("f"); !reflect.DeepEqual(got, h.trees[0]) {
		t.Fatalf("fork after its rollback to c0 shows\n%v\nwant\n%v", got, h.trees[0])
	}
	tests := []struct {
		name, fork, ref string
		err             error
	}{
		{"existing name", "f", "c1", layers.ErrExists},
		{"unknown checkpoint", "g", "nope", layers.ErrNotFound},
		{"bad name", "bad/name", "c1", layers.ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.mgr.Fork(tc.fork, tc.ref)
			wantErr(t, "fork", err, tc.err)
		})
	}
}

func TestRemoveSandbox(t *testing.T) {
	h := newHistory(t)
	e := h.e
	if _, err := e.mgr.Rollback("s", "c2"); err != nil {
		t.Fatal(err)
	}
	// A mounted sandbox stays, with all its records.
	if err := e.mgr.RemoveSandbox("s"); !errors.Is(err, layers.ErrMounted) {
		t.Fatalf("remove of a mounted sandbox: got %v, want ErrMounted", err)
	}
	if cps, _ := e.mgr.List("s"); len(cps) != 4 {
		t.Fatalf("refused remove dropped checkpoints: %v", ids(cps))
	}
	if ars, _ := e.mgr.Archives("s"); len(ars) != 1 {
		t.Fatalf("refused remove dropped archives: %v", ars)
	}
	e.close("s")
	ar, _ := e.mgr.Archives("s")
	if err := e.mgr.RemoveSandbox("s"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Sandbox("s"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("sandbox after remove: %v", err)
	}
	for _, ref := range []string{"c0", h.cps[3].ID} {
		if _, err := e.mgr.Resolve(ref); !errors.Is(err, layers.ErrNotFound) {
			t.Fatalf("checkpoint %s of a removed sandbox resolves: %v", ref, err)
		}
	}
	if _, err := e.mgr.ResolveArchive(ar[0].ID); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("archive of a removed sandbox resolves: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.store.Dir(), "data")); len(ents) != 0 {
		t.Fatalf("data files left after removing the only sandbox: %d", len(ents))
	}
	if err := e.mgr.RemoveSandbox("s"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
}

// TestPruneHolding: the checkpoints held names stay whatever the policy
// says, their states intact, and are reported as held.
func TestPruneHolding(t *testing.T) {
	e := newStoreEnv(t, nil)
	cps := makeCheckpoints(e, 5)
	want := e.snapTree("s", cps[1].Layer)
	res, err := e.mgr.PruneHolding("s", Policy{KeepLast: 1}, map[string]bool{cps[1].ID: true, "unknown": true})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.Removed, []string{cps[0].ID, cps[2].ID, cps[3].ID}) ||
		!reflect.DeepEqual(res.Kept, []string{cps[1].ID, cps[4].ID}) || !reflect.DeepEqual(res.Held, []string{cps[1].ID}) {
		t.Fatalf("prune: removed %v, kept %v, held %v", res.Removed, res.Kept, res.Held)
	}
	if got := e.snapTree("s", cps[1].Layer); !reflect.DeepEqual(got, want) {
		t.Fatalf("the held checkpoint reads otherwise after the collection")
	}
	if v, err := e.mgr.Verify(cps[1].ID); err != nil || !v.OK {
		t.Fatalf("verify the held checkpoint: %+v %v", v, err)
	}
	if _, err := e.mgr.Rollback("s", cps[1].ID); err != nil {
		t.Fatal(err)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, want) {
		t.Fatal("a rollback to the held checkpoint reads otherwise")
	}
}

// TestPruneLeavingHidden: a Manager that leaves the hidden-block pass to
// its caller prunes and drops layers, and the blocks go only when the
// caller runs the pass.
func TestPruneLeavingHidden(t *testing.T) {
	e := newStoreEnv(t, nil)
	cps := makeCheckpoints(e, 4)
	m := New(e.store, e.inval).LeaveHidden()
	res, err := m.Prune("s", Policy{KeepLast: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 3 || res.GC.HiddenBlocks != 0 {
		t.Fatalf("prune leaving the pass: removed %d, gc %+v", len(res.Removed), res.GC)
	}
	if _, err := m.Remove(cps[3].ID); err != nil {
		t.Fatal(err)
	}
	h, err := e.store.CollectHidden()
	if err != nil {
		t.Fatal(err)
	}
	if h.HiddenBlocks != 3 {
		t.Fatalf("the caller's pass dropped %d hidden blocks, want f.txt's 3 older copies", h.HiddenBlocks)
	}
	if got := e.liveTree("s")["f.txt"]; got != "version d0" {
		t.Fatalf("f.txt reads %q after the pass", got)
	}
}
