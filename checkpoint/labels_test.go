package checkpoint

import (
	"errors"
	"fmt"
	"strings"
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

// TestResolveByKeysAgreesWithTheScan: resolving through the label keys
// (and the records under an id prefix) answers every reference as the scan
// of every record does, for a store with the keys and one without: the
// same checkpoint, or the same error (not found, ambiguous, with the same
// matches named). A label key left naming a checkpoint that is gone
// matches nothing.
func TestResolveByKeysAgreesWithTheScan(t *testing.T) {
	r := newResolveFixture(t)
	e := r.e
	e.setRecord(keyCPLabel("s", "gone"), []byte(r.plain.ID+"X"))
	// A label that is also a prefix of its own checkpoint's id (ids begin
	// with their time) names it once, not twice.
	e.put("s", "a", "4")
	own := e.checkpoint("s", layers.NewID()[:6])
	refs := []string{own.Label,
		"first", "second", "only-f", "gone", "nothing", "",
		r.first.ID, r.plain.ID, strings.ToLower(r.plain.ID), r.sharedPrefix, r.plain.ID[:len(r.sharedPrefix)+3],
		r.first.ID[:5], r.onlyF.ID[:12],
	}
	resolve := func(ref string) string {
		cp, err := e.mgr.Resolve(ref)
		if err != nil {
			return "error: " + err.Error()
		}
		return cp.ID
	}
	byKeys := map[string]string{}
	for _, ref := range refs {
		byKeys[ref] = resolve(ref)
	}
	err := e.store.Update(func(tx *layers.Txn) error { return tx.Delete(keyCPLabelsIndexed) })
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if scanned := resolve(ref); scanned != byKeys[ref] {
			t.Errorf("resolve %q: %s by the keys, %s by the scan", ref, byKeys[ref], scanned)
		}
	}
	if byKeys["first"] == r.first.ID || !strings.Contains(byKeys["first"], "ambiguous") {
		t.Errorf("a label two sandboxes use resolved to %s", byKeys["first"])
	}
	if byKeys["only-f"] != r.onlyF.ID || !strings.Contains(byKeys["gone"], "not found") {
		t.Errorf("only-f: %s, gone: %s", byKeys["only-f"], byKeys["gone"])
	}
}

// TestResolveByKeysFaults: a failed read of the records under an id
// prefix, or of the label keys, fails the resolve with that error.
func TestResolveByKeysFaults(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "f", "1")
	a := e.checkpoint("s", "a")
	for _, tc := range []struct{ ref, prefix string }{
		{a.ID[:20], "x/cp/"},
		{"a", "x/cpl/"},
	} {
		hits := 0
		restore := e.store.InjectFault(failOn("scan", tc.prefix, &hits))
		_, err := e.mgr.Resolve(tc.ref)
		restore()
		if !errors.Is(err, errInjected) || hits == 0 {
			t.Errorf("resolve %q with the scan of %s failing: %v", tc.ref, tc.prefix, err)
		}
		if cp, err := e.mgr.Resolve(tc.ref); err != nil || cp.ID != a.ID {
			t.Errorf("resolve %q: %v, %v", tc.ref, cp.ID, err)
		}
	}
}
