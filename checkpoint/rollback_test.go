package checkpoint

import (
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// historyFixture is sandbox "s" over a base, taken through four
// checkpoints c0..c3 with the tree each one froze.
type historyFixture struct {
	e     *storeEnv
	cps   []Checkpoint
	trees []tree
}

func newHistory(t *testing.T) *historyFixture {
	t.Helper()
	e := newStoreEnv(t, func(base string) {
		writeBase(t, base, "keep.txt", "base keep")
		writeBase(t, base, "edit.txt", "base edit")
		writeBase(t, base, "dir/old.txt", "base old")
	})
	h := &historyFixture{e: e}
	steps := []func(){
		func() { e.put("s", "edit.txt", "edit 0") },
		func() {
			e.put("s", "new/deep/n.txt", "new 1")
			e.remove("s", "dir/old.txt")
			e.symlink("s", "link", "edit.txt")
		},
		func() {
			e.put("s", "edit.txt", "edit 2, longer")
			e.put("s", "big.bin", strings.Repeat("b", 5*layers.MinBlockSize+17))
		},
		func() {
			e.remove("s", "new")
			e.put("s", "dir/again.txt", "again 3")
		},
	}
	for i, step := range steps {
		step()
		h.cps = append(h.cps, e.checkpoint("s", "c"+string(rune('0'+i))))
		h.trees = append(h.trees, e.liveTree("s"))
	}
	return h
}

// TestRollbackToAnyCheckpoint rolls a live sandbox back to the middle, the
// first and the last checkpoint in turn, restores, and checks the tree,
// the result and the archive each time.
func TestRollbackToAnyCheckpoint(t *testing.T) {
	h := newHistory(t)
	e := h.e
	// Work after the last checkpoint is archived by the first rollback.
	e.put("s", "uncommitted.txt", "not checkpointed")
	before := e.liveTree("s")
	var archives []string
	for _, target := range []int{1, 0, 3, 2, 2} {
		cur := e.liveTree("s")
		inval := e.inval.count("s")
		res, err := e.mgr.Rollback("s", h.cps[target].Label)
		if err != nil {
			t.Fatalf("rollback to c%d: %v", target, err)
		}
		if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[target]) {
			t.Fatalf("after rollback to c%d the sandbox shows\n%v\nwant\n%v", target, got, h.trees[target])
		}
		if e.inval.count("s") != inval+1 {
			t.Errorf("rollback to c%d did not invalidate the mount", target)
		}
		want := diffTrees(cur, h.trees[target])
		if res.Sandbox != "s" || res.Checkpoint != h.cps[target].ID || res.Archive == "" ||
			!reflect.DeepEqual(res.ChangedPaths, want) || res.RestoredFiles != len(want) || res.Millis <= 0 {
			t.Errorf("rollback to c%d: result %+v, want changed paths %v", target, res, want)
		}
		archives = append(archives, res.Archive)
	}
	ars, err := e.mgr.Archives("s")
	if err != nil {
		t.Fatal(err)
	}
	if len(ars) != len(archives) {
		t.Fatalf("archives: got %d, want %d", len(ars), len(archives))
	}
	for i, ar := range ars {
		if ar.ID != archives[i] || ar.Sandbox != "s" || ar.Restored || len(ar.Layers) == 0 || ar.Top != ar.Layers[0] {
			t.Errorf("archive %d: %+v", i, ar)
		}
	}
	// The first archive holds the uncommitted work over c3, the second
	// came from c1 to c0.
	if ars[0].FromCheckpoint != h.cps[3].ID || ars[0].ToCheckpoint != h.cps[1].ID || ars[0].Bytes == 0 {
		t.Errorf("first archive %+v: want from c3 to c1 with bytes", ars[0])
	}
	if ars[1].FromCheckpoint != h.cps[1].ID || ars[1].ToCheckpoint != h.cps[0].ID {
		t.Errorf("second archive %+v: want from c1 to c0", ars[1])
	}
	if got := e.snapTree("s", ars[0].Top); !reflect.DeepEqual(got, before) {
		t.Errorf("first archive's top shows\n%v\nwant the state before the rollbacks\n%v", got, before)
	}
	// Roll forward to the state before the first rollback.
	res, err := e.mgr.Restore(strings.ToLower(ars[0].ID))
	if err != nil {
		t.Fatal(err)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, before) {
		t.Fatalf("after restore the sandbox shows\n%v\nwant\n%v", got, before)
	}
	if res.Checkpoint != h.cps[3].ID || !reflect.DeepEqual(res.ChangedPaths, diffTrees(h.trees[2], before)) {
		t.Errorf("restore result %+v", res)
	}
	ars, err = e.mgr.Archives("s")
	if err != nil {
		t.Fatal(err)
	}
	if !ars[0].Restored || len(ars) != len(archives)+1 || ars[len(ars)-1].ID != res.Archive {
		t.Errorf("archives after restore: %+v", ars)
	}
	if got := e.snapTree("s", ars[len(ars)-1].Top); !reflect.DeepEqual(got, h.trees[2]) {
		t.Errorf("the restore's archive shows\n%v\nwant c2\n%v", got, h.trees[2])
	}
	// Every checkpoint still verifies, archived or not.
	for i, cp := range h.cps {
		if vr, err := e.mgr.Verify(cp.ID); err != nil || !vr.OK {
			t.Errorf("verify c%d: %+v, %v", i, vr, err)
		}
	}
}

// TestRollbackUnmounted rolls back and restores a sandbox no view has
// open: the next view opened sees the new state.
func TestRollbackUnmounted(t *testing.T) {
	h := newHistory(t)
	e := h.e
	e.close("s")
	res, err := e.mgr.Rollback("s", h.cps[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[1]) {
		t.Fatalf("after rollback the sandbox shows\n%v\nwant\n%v", got, h.trees[1])
	}
	e.close("s")
	if _, err := e.mgr.Restore(res.Archive); err != nil {
		t.Fatal(err)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[3]) {
		t.Fatalf("after restore the sandbox shows\n%v\nwant\n%v", got, h.trees[3])
	}
	// Rolling back to where the sandbox stands changes nothing but still
	// archives the (empty) active layer.
	res, err = e.mgr.Rollback("s", "c3")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ChangedPaths) != 0 || res.RestoredFiles != 0 || res.Archive == "" {
		t.Fatalf("rollback to the current state: %+v", res)
	}
}

// TestRollbackTx checks that the extra function runs in the transaction
// that moves the head: its record names the archive, and its error leaves
// the sandbox where it was.
func TestRollbackTx(t *testing.T) {
	h := newHistory(t)
	e := h.e
	boom := errFixed("refused")
	head, _ := e.store.Sandbox("s")
	_, err := e.mgr.RollbackTx("s", "c0", func(tx *layers.Txn, archive string) error {
		if err := tx.Set("x/test/rb", []byte(archive)); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("rollback with failing extra: got %v, want %v", err, boom)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[3]) {
		t.Fatalf("failed rollback changed the sandbox to\n%v", got)
	}
	if info, _ := e.store.Sandbox("s"); info.Head != head.Head {
		t.Fatalf("failed rollback moved the head")
	}
	if ars, _ := e.mgr.Archives("s"); len(ars) != 0 {
		t.Fatalf("failed rollback left archives %+v", ars)
	}
	if _, err := e.getRecord("x/test/rb"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("failed rollback left extra's record: %v", err)
	}
	res, err := e.mgr.RollbackTx("s", "c0", func(tx *layers.Txn, archive string) error {
		return tx.Set("x/test/rb", []byte(archive))
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := e.getRecord("x/test/rb"); err != nil || string(b) != res.Archive {
		t.Fatalf("extra's record %q, %v; want archive %s", b, err, res.Archive)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[0]) {
		t.Fatalf("after rollback the sandbox shows\n%v\nwant\n%v", got, h.trees[0])
	}
	if _, err := e.mgr.RollbackTx("s", "nope", nil); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("rollback to an unknown checkpoint: %v", err)
	}
}

func TestRollbackRefusesOtherSandbox(t *testing.T) {
	h := newHistory(t)
	e := h.e
	if _, err := e.mgr.Fork("f", "c1"); err != nil {
		t.Fatal(err)
	}
	e.put("f", "f.txt", "fork")
	fcp := e.checkpoint("f", "fc")
	before := e.liveTree("s")
	if _, err := e.mgr.Rollback("s", fcp.ID); !errors.Is(err, ErrOtherSandbox) {
		t.Fatalf("rollback of s to a checkpoint of f: got %v, want ErrOtherSandbox", err)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, before) {
		t.Fatalf("refused rollback changed s")
	}
	// A fork rolls back to its own checkpoints, and to its origin's only
	// as far as it shares them: c1, which it was made from, and c0 below,
	// not c2.
	e.put("f", "f.txt", "later")
	if _, err := e.mgr.Rollback("f", "fc"); err != nil {
		t.Fatal(err)
	}
	if got := e.liveTree("f"); got["f.txt"] != "fork" || got["edit.txt"] != h.trees[1]["edit.txt"] {
		t.Fatalf("fork after rollback: %v", got)
	}
	if _, err := e.mgr.Rollback("f", "c2"); !errors.Is(err, ErrOtherSandbox) {
		t.Fatalf("rollback of f to c2 of s: got %v, want ErrOtherSandbox", err)
	}
	if _, err := e.mgr.Rollback("f", "c0"); err != nil {
		t.Fatalf("rollback of f to c0 of s, below its fork point: %v", err)
	}
	if got := e.liveTree("f"); !reflect.DeepEqual(got, h.trees[0]) {
		t.Fatalf("fork after rollback to c0: %v, want %v", got, h.trees[0])
	}
	if _, err := e.mgr.Rollback("ghost", "c0"); err == nil {
		t.Fatal("rollback of a missing sandbox: no error")
	}
}

func TestResolveArchive(t *testing.T) {
	h := newHistory(t)
	e := h.e
	var ars []string
	for _, c := range []string{"c2", "c1"} {
		res, err := e.mgr.Rollback("s", c)
		if err != nil {
			t.Fatal(err)
		}
		ars = append(ars, res.Archive)
	}
	shared := commonPrefix(ars[0], ars[1])
	if len(shared) < 6 {
		t.Skipf("archive ids %v share only %q", ars, shared)
	}
	unique := ars[1][:len(shared)+1]
	tests := []struct {
		name, ref, want string
		err             error
	}{
		{"full id", ars[0], ars[0], nil},
		{"full id in lower case", strings.ToLower(ars[1]), ars[1], nil},
		{"unique prefix", unique, ars[1], nil},
		{"unique prefix in lower case", strings.ToLower(unique), ars[1], nil},
		{"shared prefix", shared, "", ErrAmbiguous},
		{"prefix shorter than 6", ars[0][:5], "", layers.ErrNotFound},
		{"unknown", "ZZZZZZZZZZ", "", layers.ErrNotFound},
		{"checkpoint id", h.cps[0].ID, "", layers.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ar, err := e.mgr.ResolveArchive(tc.ref)
			if tc.err != nil {
				wantErr(t, "resolve archive "+tc.ref, err, tc.err)
				return
			}
			if err != nil || ar.ID != tc.want {
				t.Fatalf("resolve archive %s: got %s, %v; want %s", tc.ref, ar.ID, err, tc.want)
			}
		})
	}
	if _, err := e.mgr.Restore("ZZZZZZZZZZ"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("restore of an unknown archive: %v", err)
	}
	if _, err := e.mgr.Archives("ghost"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("archives of a missing sandbox: %v", err)
	}
}

// TestRollbackRunAgainCountsOnce: a rollback whose transaction meets a
// conflict (here a record it reads is rewritten while its data syncs) is
// run again; its archive records the layers' bytes once, and the
// checkpoint it left reads back.
func TestRollbackRunAgainCountsOnce(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "a", "first")
	c0 := e.checkpoint("s", "c0")
	e.put("s", "b", strings.Repeat("b", 3*layers.MinBlockSize))
	c1 := e.checkpoint("s", "c1")
	e.put("s", "c", "live")
	want := int64(0)
	for _, l := range []string{c1.Layer} {
		u, err := e.store.LayerUsage(l)
		if err != nil {
			t.Fatal(err)
		}
		want += u.Bytes
	}
	// The rollback reads c1's checkpoint record (the archive's from);
	// rewriting it unchanged after the rollback built its transaction
	// makes badger refuse the commit as a conflict.
	cpKey := keyLayerCP(c1.Layer)
	rewritten := make(chan error, 1)
	var fired atomic.Bool
	restore := e.store.InjectFault(func(op, key string) error {
		// The rollback's one device flush: its intent log record's, or
		// the data file's when it goes the full way.
		if op != "datasync" && op != "walsync" || fired.Swap(true) {
			return nil
		}
		go func() {
			time.Sleep(50 * time.Millisecond)
			rewritten <- e.store.Update(func(tx *layers.Txn) error {
				b, err := tx.Get(cpKey)
				if err != nil {
					return err
				}
				return tx.Set(cpKey, b)
			})
		}()
		time.Sleep(100 * time.Millisecond) // a slow disk: the rewrite lands meanwhile
		return nil
	})
	res, err := e.mgr.Rollback("s", c0.ID)
	restore()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-rewritten; err != nil {
		t.Fatal(err)
	}
	ar, err := e.mgr.ResolveArchive(res.Archive)
	if err != nil {
		t.Fatal(err)
	}
	u, err := e.store.LayerUsage(ar.Layers[0]) // the active layer, archived
	if err != nil {
		t.Fatal(err)
	}
	if ar.Bytes != want+u.Bytes || ar.FromCheckpoint != c1.ID || len(ar.Layers) != 2 {
		t.Fatalf("archive %+v: bytes %d, want %d (c1's %d and the live layer's %d)", ar, ar.Bytes, want+u.Bytes, want, u.Bytes)
	}
	if got := e.liveTree("s"); got["a"] != "first" || len(got) != 1 {
		t.Fatalf("after the rollback: %v", got)
	}
}
