package checkpoint

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// TestLabelTakenOnce: checkpoints made at once with one label, with the
// sandbox live or not, leave exactly one holding it; the others fail with
// ErrExists and leave no checkpoint.
func TestLabelTakenOnce(t *testing.T) {
	for _, live := range []bool{true, false} {
		t.Run(fmt.Sprintf("live %v", live), func(t *testing.T) {
			e := newStoreEnv(t, nil)
			e.put("s", "f", "x")
			if !live {
				e.close("s")
			}
			const n = 6
			var wg sync.WaitGroup
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = e.mgr.Create("s", Options{Label: "same"})
				}()
			}
			wg.Wait()
			ok := 0
			for _, err := range errs {
				switch {
				case err == nil:
					ok++
				case !errors.Is(err, layers.ErrExists):
					t.Fatalf("create: %v, want success or ErrExists", err)
				}
			}
			cps, err := e.mgr.List("s")
			if err != nil {
				t.Fatal(err)
			}
			if ok != 1 || len(cps) != 1 || cps[0].Label != "same" {
				t.Fatalf("%d creates succeeded, %d checkpoints listed; want one of each", ok, len(cps))
			}
		})
	}
}

// TestLabelKeys: a label is free again once its checkpoint is removed or
// pruned; a store made before label keys gets them on the first labelled
// checkpoint, so labels of older checkpoints stay taken; a key left naming
// a checkpoint that is gone takes nothing.
func TestLabelKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		// after checkpoints "a" and "b" exist: what happens to the store
		before func(t *testing.T, e *storeEnv, a, b Checkpoint)
		label  string
		want   error
	}{
		{"a label in use", func(*testing.T, *storeEnv, Checkpoint, Checkpoint) {}, "a", layers.ErrExists},
		{"a new label", func(*testing.T, *storeEnv, Checkpoint, Checkpoint) {}, "c", nil},
		{"the checkpoint removed", func(t *testing.T, e *storeEnv, a, _ Checkpoint) {
			if _, err := e.mgr.Remove(a.ID); err != nil {
				t.Fatal(err)
			}
		}, "a", nil},
		{"the checkpoint pruned", func(t *testing.T, e *storeEnv, _, _ Checkpoint) {
			if _, err := e.mgr.Prune("s", Policy{KeepLast: 1}); err != nil {
				t.Fatal(err)
			}
		}, "a", nil},
		{"a store made before label keys", func(t *testing.T, e *storeEnv, a, b Checkpoint) {
			dropLabelKeys(t, e, a, b)
		}, "b", layers.ErrExists},
		{"a key naming a checkpoint that is gone", func(t *testing.T, e *storeEnv, a, _ Checkpoint) {
			e.setRecord(keyCPLabel("s", "z"), []byte(a.ID+"X"))
		}, "z", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStoreEnv(t, nil)
			e.put("s", "f", "1")
			a := e.checkpoint("s", "a")
			e.put("s", "f", "2")
			b := e.checkpoint("s", "b")
			tc.before(t, e, a, b)
			// A manager of a new process: it knows nothing of the store.
			mgr := New(e.store, e.inval)
			e.put("s", "f", "3")
			_, err := mgr.Create("s", Options{Label: tc.label})
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("create labelled %q: %v, want %v", tc.label, err, tc.want)
			}
			if _, err := e.getRecord(keyCPLabelsIndexed); err != nil {
				t.Fatalf("the store is not marked as holding every label key: %v", err)
			}
		})
	}
}

// TestLabelKeysOfADamagedStore: a store made before label keys whose
// checkpoint records do not parse gets no keys and no mark; the labelled
// checkpoint fails with ErrCorrupt, and nothing is recorded.
func TestLabelKeysOfADamagedStore(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "f", "1")
	a := e.checkpoint("s", "a")
	dropLabelKeys(t, e, a)
	e.setRecord(keyCP(a.ID), []byte("{not json"))
	mgr := New(e.store, e.inval)
	_, err := mgr.Create("s", Options{Label: "b"})
	wantErr(t, "create", err, layers.ErrCorrupt)
	if _, err := e.getRecord(keyCPLabelsIndexed); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("mark: %v, want none", err)
	}
}

// dropLabelKeys makes the store one made before label keys.
func dropLabelKeys(t *testing.T, e *storeEnv, cps ...Checkpoint) {
	t.Helper()
	err := e.store.Update(func(tx *layers.Txn) error {
		for _, cp := range cps {
			if err := tx.Delete(keyCPLabel(cp.Sandbox, cp.Label)); err != nil {
				return err
			}
		}
		return tx.Delete(keyCPLabelsIndexed)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLabelKeysFaults: a failure while an older store's checkpoints get
// their label keys fails the labelled checkpoint and records nothing of
// it; the next one gives the keys and checks the label against them.
func TestLabelKeysFaults(t *testing.T) {
	for _, tc := range []struct{ op, prefix string }{
		{"get", keyCPLabelsIndexed},
		{"scan", "x/cp/"},
		{"set", "x/cpl/"},
		{"set", keyCPLabelsIndexed},
	} {
		t.Run(tc.op+" "+tc.prefix, func(t *testing.T) {
			e := newStoreEnv(t, nil)
			e.put("s", "f", "1")
			a := e.checkpoint("s", "a")
			dropLabelKeys(t, e, a)
			mgr := New(e.store, e.inval)
			hits := 0
			restore := e.store.InjectFault(failOn(tc.op, tc.prefix, &hits))
			_, err := mgr.Create("s", Options{Label: "b"})
			restore()
			if !errors.Is(err, errInjected) || hits == 0 {
				t.Fatalf("create: %v (%d faults asked), want the injected fault", err, hits)
			}
			if cps, err := mgr.List("s"); err != nil || len(cps) != 1 {
				t.Fatalf("checkpoints after the failure: %d, %v; want the first alone", len(cps), err)
			}
			_, err = mgr.Create("s", Options{Label: "a"})
			wantErr(t, "the older checkpoint's label", err, layers.ErrExists)
			if _, err := mgr.Create("s", Options{Label: "b"}); err != nil {
				t.Fatalf("create after the failure: %v", err)
			}
		})
	}
}
