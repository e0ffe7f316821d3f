package correction

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// TestApplyInProgress: while an apply runs, another manager over the store
// sees the plan applying, leaves its journal alone and has its changes
// refused.
func TestApplyInProgress(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	e.write("edit.txt", "new")
	other := New(e.cps)
	t.Cleanup(func() { applyFault = nil })
	checked := false
	applyFault = func(n int) error {
		if n != 0 {
			return nil
		}
		checked = true
		if _, err := other.Begin("p", "D1", ""); !errors.Is(err, ErrApplying) {
			t.Errorf("step begin during apply: got %v, want ErrApplying", err)
		}
		if _, err := other.Correct("p", CorrectOptions{Mode: Append, Reason: "r"}); !errors.Is(err, ErrApplying) {
			t.Errorf("append during apply: got %v, want ErrApplying", err)
		}
		if p := must[Plan](t)(other.Get("p")); p.Status != StatusApplying {
			t.Errorf("show during apply: status %q, want applying", p.Status)
		}
		if ps := must[[]Plan](t)(other.List()); len(ps) != 1 || ps[0].Status != StatusApplying {
			t.Errorf("list during apply: got %+v, want p applying", ps)
		}
		return nil
	}
	must[ApplyResult](t)(e.plans.Apply("p"))
	if !checked {
		t.Fatal("fault hook not called")
	}
	if p := e.plan("p"); p.Status != StatusApplied {
		t.Errorf("after apply: status %q", p.Status)
	}
	if b, _ := os.ReadFile(filepath.Join(e.base, "edit.txt")); string(b) != "new" {
		t.Errorf("edit.txt: got %q, want new", b)
	}
}

// TestBadJournal: an apply journal that does not decode, or names a base
// that is gone, makes the plan's commands fail with the reason (and List
// still list it), until it is dealt with.
func TestBadJournal(t *testing.T) {
	for _, tc := range []struct {
		name    string
		journal string
		want    error
	}{
		{"garbage", "{", layers.ErrCorrupt},
		{"base gone", `{"plan":"P","base":"/nonexistent/base","stage":".strata-apply-x","phase":"moving","status":"open"}`, os.ErrNotExist},
		{"unknown plan", `{"plan":"01AAAAAAAAAAAAAAAAAAAAAAAA","base":"B","stage":".strata-apply-x","phase":"staging","status":"open"}`, layers.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, fillBase)
			p := must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
			set := func(val []byte) {
				t.Helper()
				err := e.store.Update(func(tx *layers.Txn) error {
					if val == nil {
						return tx.Delete(keyApply(p.ID))
					}
					return tx.Set(keyApply(p.ID), val)
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			set([]byte(strings.NewReplacer(`"P"`, `"`+p.ID+`"`, `"B"`, `"`+e.base+`"`).Replace(tc.journal)))
			before := e.record()
			if _, err := e.plans.Get("p"); !errors.Is(err, tc.want) {
				t.Errorf("show: got %v, want %v", err, tc.want)
			}
			if _, err := e.plans.Begin("p", "D1", ""); !errors.Is(err, tc.want) {
				t.Errorf("step begin: got %v, want %v", err, tc.want)
			}
			if _, err := e.plans.Apply("p"); !errors.Is(err, tc.want) {
				t.Errorf("apply: got %v, want %v", err, tc.want)
			}
			if ps := must[[]Plan](t)(e.plans.List()); len(ps) != 1 || ps[0].Status != StatusOpen {
				t.Errorf("list: got %+v, want p open", ps)
			}
			if after := e.record(); after != before {
				t.Errorf("record changed:\n got %s\nwant %s", after, before)
			}
			set(nil)
			must[Decision](t)(e.plans.Begin("p", "D1", ""))
		})
	}
}

// TestConcurrentChanges runs the same change of one plan from several
// managers at once, round after round: the transaction that records it
// checks the plan did not change since it was read, so every success has
// its own step and the losers fail cleanly (errChanged, or the label or
// status the winner just took, or the decision it just ended).
func TestConcurrentChanges(t *testing.T) {
	e := newEnv(t, fillBase)
	const workers, rounds = 3, 15
	ms := make([]*Manager, workers)
	for i := range ms {
		ms[i] = New(e.cps)
	}
	var mu sync.Mutex
	race := func(fn func(m *Manager, i int) error) (ok int, errs []error) {
		var wg sync.WaitGroup
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := fn(m, i)
				mu.Lock()
				defer mu.Unlock()
				if err == nil {
					ok++
				} else {
					errs = append(errs, err)
				}
			}()
		}
		wg.Wait()
		return ok, errs
	}
	changed := 0
	check := func(what string, ok int, errs []error, wantOK int) {
		t.Helper()
		if wantOK > 0 && ok != wantOK || ok == 0 {
			t.Fatalf("%s: %d succeeded, want %d", what, ok, max(wantOK, 1))
		}
		for _, err := range errs {
			switch {
			case errors.Is(err, errChanged):
				changed++
			case errors.Is(err, layers.ErrExists), errors.Is(err, layers.ErrInvalid), errors.Is(err, ErrStepNotBegun):
			default:
				t.Fatalf("%s: got %v, want errChanged, ErrExists, ErrInvalid or ErrStepNotBegun", what, err)
			}
		}
	}
	for _, on := range [][]string{{"none"}, {BeforeStep, AfterStep, AfterSubplan}} {
		name := "bare"
		if len(on) > 1 {
			name = "milestones"
		}
		must[Plan](t)(e.plans.Create(name, CreateOptions{Sandbox: "s", CheckpointOn: on}))
		for r := range rounds {
			var began []string
			ok, errs := race(func(m *Manager, i int) error {
				id := "D" + string(rune('a'+r)) + string(rune('0'+i))
				_, err := m.Begin(name, id, "")
				if err == nil {
					mu.Lock()
					began = append(began, id)
					mu.Unlock()
				}
				return err
			})
			check("begin", ok, errs, 0)
			for _, id := range began {
				ok, errs = race(func(m *Manager, i int) error { _, err := m.End(name, id, i == 0); return err })
				check("end", ok, errs, 1)
			}
			ok, errs = race(func(m *Manager, i int) error {
				_, err := m.Correct(name, CorrectOptions{Mode: Append, Reason: "r"})
				return err
			})
			check("append", ok, errs, 0)
			sub := name + "-sub" + string(rune('a'+r))
			must[Plan](t)(e.plans.Create(sub, CreateOptions{Parent: name, ParentDecision: began[0]}))
			ok, errs = race(func(m *Manager, i int) error { _, err := m.Complete(sub); return err })
			check("complete", ok, errs, 1)
		}
		p := e.plan(name)
		for i, d := range p.Decisions {
			if d.Step != i+1 {
				t.Fatalf("%s: decision %d (%s) has step %d", name, i, d.ID, d.Step)
			}
		}
		if name == "milestones" {
			// Every decision has its own pre-decision checkpoint.
			seen := map[string]bool{}
			for _, d := range p.Decisions {
				if d.Checkpoint == "" || seen[d.Checkpoint] {
					t.Fatalf("%s: decision %s: checkpoint %q missing or shared", name, d.ID, d.Checkpoint)
				}
				seen[d.Checkpoint] = true
			}
		}
	}
	t.Logf("%d changes lost a race to errChanged", changed)
}

// TestRollbackToSubplanCheckpoint: rolling a plan back to a checkpoint of
// one of its subplans keeps the plan's own decisions as they are.
func TestRollbackToSubplanCheckpoint(t *testing.T) {
	e := newEnv(t, fillBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	must[Decision](t)(e.plans.Begin("p", "D1", ""))
	sub := must[Plan](t)(e.plans.Create("sub", CreateOptions{Parent: "p", ParentDecision: "D1"}))
	s1 := must[Decision](t)(e.plans.Begin("sub", "S1", ""))
	e.write("s.txt", "sub")
	must[Decision](t)(e.plans.End("sub", "S1", false))
	must[Decision](t)(e.plans.End("p", "D1", false))
	cps := must[[]checkpoint.Checkpoint](t)(e.plans.Checkpoints("p"))
	found := false
	for _, c := range cps {
		found = found || (c.ID == s1.Checkpoint && c.Plan == sub.ID)
	}
	if len(cps) != 2 || !found {
		t.Fatalf("checkpoints of p: got %+v, want p's and sub's", cps)
	}
	res := must[RollbackResult](t)(e.plans.Rollback("p", s1.Checkpoint))
	if !reflect.DeepEqual(res.Reverted, []string{}) {
		t.Errorf("reverted: got %v, want none", res.Reverted)
	}
	if got := statuses(e.plan("p")); got != "D1:done" {
		t.Errorf("p after rollback: got %q, want D1:done", got)
	}
	if _, err := os.Stat(filepath.Join(e.mnt, "s.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("s.txt after rollback: got %v, want it gone", err)
	}
}

// TestCheckpointRefused: a plan change whose checkpoint cannot be taken
// (its label is taken by another checkpoint) or rolled back to (it was
// removed) fails and changes nothing.
func TestCheckpointRefused(t *testing.T) {
	e := newEnv(t, fillBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s", CheckpointOn: []string{BeforeStep, AfterStep, AfterSubplan}}))
	d1 := must[Decision](t)(e.plans.Begin("p", "D1", ""))
	must[Plan](t)(e.plans.Create("sub", CreateOptions{Parent: "p", ParentDecision: "D1"}))
	for _, label := range []string{"p/1/after-step", "p/1/after-subplan/sub", "p/2/correction"} {
		must[checkpoint.Checkpoint](t)(e.cps.Create("s", checkpoint.Options{Label: label}))
	}
	for _, tc := range []struct {
		name string
		fn   func() error
		want error
	}{
		{"step end", func() error { _, err := e.plans.End("p", "D1", false); return err }, layers.ErrExists},
		{"complete subplan", func() error { _, err := e.plans.Complete("sub"); return err }, layers.ErrExists},
		{"append", func() error { _, err := e.plans.Correct("p", CorrectOptions{Mode: Append, Reason: "r"}); return err }, layers.ErrExists},
		{"revert to a removed checkpoint", func() error {
			if _, err := e.cps.Remove(d1.Checkpoint); err != nil {
				return err
			}
			_, err := e.plans.Correct("p", CorrectOptions{Mode: Revert, Decision: "D1", Reason: "r"})
			return err
		}, layers.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.plan("p")
			if err := tc.fn(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if after := e.plan("p"); !reflect.DeepEqual(after, before) {
				t.Errorf("plan changed:\n got %+v\nwant %+v", after, before)
			}
		})
	}
}

// TestCorruptRecords: a plan change that needs a record of another plan
// or of a checkpoint that no longer decodes fails with ErrCorrupt.
func TestCorruptRecords(t *testing.T) {
	e := newEnv(t, fillBase)
	p := must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s", CheckpointOn: []string{BeforeStep, AfterSubplan}}))
	d1 := must[Decision](t)(e.plans.Begin("p", "D1", ""))
	must[Plan](t)(e.plans.Create("sub", CreateOptions{Parent: "p", ParentDecision: "D1"}))
	d2 := must[Decision](t)(e.plans.Begin("sub", "S1", ""))
	set := func(key string, val []byte) {
		t.Helper()
		if err := e.store.Update(func(tx *layers.Txn) error { return tx.Set(key, val) }); err != nil {
			t.Fatal(err)
		}
	}
	var saved []byte
	if err := e.store.View(func(tx *layers.Txn) error { var err error; saved, err = tx.Get("x/cp/" + d2.Checkpoint); return err }); err != nil {
		t.Fatal(err)
	}
	set("x/cp/"+d2.Checkpoint, []byte("{"))
	if _, err := e.plans.Checkpoints("p"); !errors.Is(err, layers.ErrCorrupt) {
		t.Errorf("checkpoints with a corrupt one: got %v, want ErrCorrupt", err)
	}
	if _, err := e.plans.Rollback("p", d1.Checkpoint); !errors.Is(err, layers.ErrCorrupt) {
		t.Errorf("rollback with a corrupt checkpoint among the plan's: got %v, want ErrCorrupt", err)
	}
	set("x/cp/"+d2.Checkpoint, saved)
	set(keyPlan(p.ID), []byte("{"))
	if _, err := e.plans.Complete("sub"); !errors.Is(err, layers.ErrCorrupt) {
		t.Errorf("complete with a corrupt parent: got %v, want ErrCorrupt", err)
	}
	if got := e.plan("sub"); got.Status != StatusOpen {
		t.Errorf("subplan after a refused complete: status %q, want open", got.Status)
	}
}

// TestApplyRace applies one plan from two managers at once: one applies
// it, the other is refused (the plan is being, or was, applied, or the base
// changes under it).
func TestApplyRace(t *testing.T) {
	for r := range 6 {
		e := newEnv(t, applyBase)
		must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
		changeAll(t, e)
		ms := []*Manager{New(e.cps), New(e.cps)}
		errs := make([]error, len(ms))
		var wg sync.WaitGroup
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = m.Apply("p")
			}()
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, ErrApplying), errors.Is(err, ErrPlanApplied), errors.Is(err, ErrConflict):
				// ErrConflict: the loser's scan saw the winner's staging
				// directory appear in the base.
			default:
				t.Fatalf("round %d: got %v, want ErrApplying, ErrPlanApplied or ErrConflict", r, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d applies went through, want 1", r, ok)
		}
		if d := diffTree(tree(t, e.base), appliedTree); d != "" {
			t.Errorf("round %d: base:\n%s", r, d)
		}
		e.noStage()
	}
}
