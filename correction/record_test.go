package correction

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// rawGet reads a key of the store as stored.
func (e *env) rawGet(key string) []byte {
	e.t.Helper()
	var b []byte
	if err := e.store.View(func(tx *layers.Txn) error { var err error; b, err = tx.Get(key); return err }); err != nil {
		e.t.Fatalf("get %s: %v", key, err)
	}
	return b
}

// rawSet stores val under key, or removes key when val is nil.
func (e *env) rawSet(key string, val []byte) {
	e.t.Helper()
	err := e.store.Update(func(tx *layers.Txn) error {
		if val == nil {
			return tx.Delete(key)
		}
		return tx.Set(key, val)
	})
	if err != nil {
		e.t.Fatalf("set %s: %v", key, err)
	}
}

// keysUnder lists the keys under prefix.
func (e *env) keysUnder(prefix string) []string {
	e.t.Helper()
	keys := []string{}
	if err := e.store.View(func(tx *layers.Txn) error {
		return tx.Scan(prefix, func(key string, _ []byte) error { keys = append(keys, key); return nil })
	}); err != nil {
		e.t.Fatal(err)
	}
	return keys
}

// toOldRecord stores plan ref as a record made before decision keys: the
// decisions in the plan's record, no keys of their own.
func (e *env) toOldRecord(ref string) Plan {
	e.t.Helper()
	p := e.plan(ref)
	for _, prefix := range []string{prefixDecisions(p.ID), "x/plan/i/" + p.ID + "/"} {
		for _, k := range e.keysUnder(prefix) {
			e.rawSet(k, nil)
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		e.t.Fatal(err)
	}
	e.rawSet(keyPlan(p.ID), b)
	if !strings.Contains(string(e.rawGet(keyPlan(p.ID))), `"decisions":[{`) {
		e.t.Fatal("the old record holds no decisions")
	}
	return p
}

// checkNewRecord checks that plan p is stored with its decisions under
// keys of their own, and equals want.
func (e *env) checkNewRecord(id string, want Plan) {
	e.t.Helper()
	var r map[string]any
	if err := json.Unmarshal(e.rawGet(keyPlan(id)), &r); err != nil {
		e.t.Fatal(err)
	}
	if r["decisions"] != nil || r["steps"] != float64(len(want.Decisions)) {
		e.t.Errorf("record: decisions %v, steps %v; want none and %d", r["decisions"], r["steps"], len(want.Decisions))
	}
	if n := len(e.keysUnder(prefixDecisions(id))); n != len(want.Decisions) {
		e.t.Errorf("%d decision keys, want %d", n, len(want.Decisions))
	}
	if got := e.plan(id); !reflect.DeepEqual(got, want) {
		e.t.Errorf("plan read back:\n got %+v\nwant %+v", got, want)
	}
}

// TestDecisionKeys: a plan's record holds no decisions and keeps its size
// as steps are added; each entry has a key, each decision id an index of
// its entries; a step reads the entries of its own decision, never the
// others'; and the plan reads back whole, also after a restart.
func TestDecisionKeys(t *testing.T) {
	e := newEnv(t, fillBase)
	p := must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s", CheckpointOn: []string{"none"}}))
	var sizes []int
	for i := range 30 {
		id := fmt.Sprintf("D%d", i%10)
		if i >= 10 {
			// Re-execution: a reverted decision begins again.
			if err := e.store.Update(func(tx *layers.Txn) error {
				return m0(e).mutate(tx, p.ID, func(p *Plan) error {
					p.Decisions[p.latest(id)].Status = StatusReverted
					p.Decisions[p.latest(id)].NeedsReexecution = true
					return nil
				})
			}); err != nil {
				t.Fatal(err)
			}
		}
		must[Decision](t)(e.plans.Begin("p", id, "step"))
		must[Decision](t)(e.plans.End("p", id, i%3 == 0))
		sizes = append(sizes, len(e.rawGet(keyPlan(p.ID))))
	}
	// From step 10 to step 30 only the count changes, by no digit.
	if sizes[9] != sizes[29] {
		t.Errorf("the plan's record grew with its steps: %d bytes at step 10, %d at step 30", sizes[9], sizes[29])
	}
	got := e.plan("p")
	if len(got.Decisions) != 30 {
		t.Fatalf("%d decisions, want 30", len(got.Decisions))
	}
	for i, d := range got.Decisions {
		if d.Step != i+1 || d.ID != fmt.Sprintf("D%d", i%10) {
			t.Errorf("entry %d: step %d of %s", i, d.Step, d.ID)
		}
		if want := i < 20; (d.Status == StatusReverted) != want || d.NeedsReexecution {
			t.Errorf("entry %d: status %s, needs re-execution %v", i, d.Status, d.NeedsReexecution)
		}
	}
	var idx []int
	if err := json.Unmarshal(e.rawGet(keyDecisionIndex(p.ID, "D4")), &idx); err != nil || !reflect.DeepEqual(idx, []int{4, 14, 24}) {
		t.Errorf("index of D4: %v (%v), want [4 14 24]", idx, err)
	}
	e.checkNewRecord(p.ID, got)

	// What a step reads of the plan.
	var mu sync.Mutex
	var read []string
	restore := e.store.InjectFault(func(op, key string) error {
		if strings.HasPrefix(key, "x/plan/") {
			mu.Lock()
			read = append(read, op+" "+strings.TrimPrefix(strings.TrimPrefix(key, "x/plan/"), "d/"+p.ID+"/"))
			mu.Unlock()
		}
		return nil
	})
	must[Decision](t)(e.plans.Begin("p", "NEW", ""))
	must[Decision](t)(e.plans.End("p", "NEW", false))
	restore()
	for _, r := range read {
		if strings.HasPrefix(r, "scan") || (strings.HasPrefix(r, "get 000") && r != "get 00000030") {
			t.Errorf("a step of a new decision read %q", r)
		}
	}

	e.restart()
	e.checkNewRecord(p.ID, e.plan("p"))
	if n := len(e.plan("p").Decisions); n != 31 {
		t.Errorf("after a restart: %d decisions, want 31", n)
	}
}

// m0 is the manager of e, for tests that change a plan directly.
func m0(e *env) *Manager { return e.plans }

// TestOldRecords: a plan stored before decision keys (its decisions in its
// record) reads back as it was, and its first change, whichever it is,
// stores it in the new form without losing or changing an entry.
func TestOldRecords(t *testing.T) {
	cases := []struct {
		name   string
		change func(e *env, p Plan) error
		want   func(p *Plan)
	}{
		{"read only", nil, func(*Plan) {}},
		{"begin a new decision", func(e *env, p Plan) error { _, err := e.plans.Begin("p", "D4", "fourth"); return err },
			func(p *Plan) {
				p.Decisions = append(p.Decisions, Decision{ID: "D4", Step: 4, Label: "fourth", Status: StatusRunning})
			}},
		{"begin a reverted decision again", func(e *env, p Plan) error { _, err := e.plans.Begin("p", "D2", "again"); return err },
			func(p *Plan) {
				p.Decisions[1].NeedsReexecution = false
				p.Decisions = append(p.Decisions, Decision{ID: "D2", Step: 4, Label: "again", Status: StatusRunning})
			}},
		{"end", func(e *env, p Plan) error { _, err := e.plans.End("p", "D3", false); return err },
			func(p *Plan) { p.Decisions[2].Status = StatusDone }},
		{"complete", func(e *env, p Plan) error { _, err := e.plans.Complete("p"); return err },
			func(p *Plan) { p.Status = StatusComplete }},
		{"correct by appending", func(e *env, p Plan) error {
			_, err := e.plans.Correct("p", CorrectOptions{Mode: Append, Reason: "fix"})
			return err
		}, func(p *Plan) {
			p.Decisions = append(p.Decisions, Decision{ID: "correction-1", Step: 4, Label: "fix", Status: StatusCorrection})
			p.Corrections = append(p.Corrections, Correction{Mode: Append, Reason: "fix", Decision: "correction-1"})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, fillBase)
			p := must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
			must[Decision](t)(e.plans.Begin("p", "D1", "first"))
			must[Decision](t)(e.plans.End("p", "D1", false))
			must[Decision](t)(e.plans.Begin("p", "D2", "second"))
			must[Decision](t)(e.plans.End("p", "D2", true))
			must[CorrectResult](t)(e.plans.Correct("p", CorrectOptions{Mode: Revert, Reason: "undo"}))
			must[Decision](t)(e.plans.Begin("p", "D3", "third"))
			old := e.toOldRecord("p")
			if got := e.plan("p"); !reflect.DeepEqual(got, old) {
				t.Fatalf("the old record reads back as\n %+v\nwant %+v", got, old)
			}
			if c.change == nil {
				return
			}
			if err := c.change(e, p); err != nil {
				t.Fatal(err)
			}
			got := e.plan("p")
			want := old
			want.Decisions = append([]Decision(nil), old.Decisions...)
			want.Corrections = append([]Correction(nil), old.Corrections...)
			c.want(&want)
			// Times, ids and checkpoints a change makes are its own.
			for i := range want.Decisions {
				if i < len(got.Decisions) && want.Decisions[i].Checkpoint == "" && want.Decisions[i].Started.IsZero() {
					want.Decisions[i].Checkpoint, want.Decisions[i].Started = got.Decisions[i].Checkpoint, got.Decisions[i].Started
				}
				if i < len(got.Decisions) && want.Decisions[i].Ended.IsZero() {
					want.Decisions[i].Ended, want.Decisions[i].AfterCheckpoint = got.Decisions[i].Ended, got.Decisions[i].AfterCheckpoint
				}
			}
			for i := len(old.Corrections); i < len(want.Corrections) && i < len(got.Corrections); i++ {
				want.Corrections[i].ID, want.Corrections[i].Checkpoint, want.Corrections[i].Created = got.Corrections[i].ID, got.Corrections[i].Checkpoint, got.Corrections[i].Created
			}
			e.checkNewRecord(p.ID, want)
			// And it goes on in the new form.
			must[Decision](t)(e.plans.Begin("p", "D9", ""))
			must[Decision](t)(e.plans.End("p", "D9", false))
			if got := e.plan("p"); len(got.Decisions) != len(want.Decisions)+1 {
				t.Errorf("after another step: %d decisions, want %d", len(got.Decisions), len(want.Decisions)+1)
			}
		})
	}
}

// TestBrokenDecisionRecords: a plan whose decision keys are damaged is
// reported corrupt (not missing) by every command that reads them, and a
// refused step takes no checkpoint.
func TestBrokenDecisionRecords(t *testing.T) {
	cases := []struct {
		name    string
		damage  func(e *env, p Plan)
		whole   bool   // reading the whole plan meets the damage
		stepErr string // a step of this decision meets the damage
	}{
		{"entry missing", func(e *env, p Plan) { e.rawSet(keyDecision(p.ID, 1), nil) }, true, "D2"},
		{"last entry missing", func(e *env, p Plan) { e.rawSet(keyDecision(p.ID, 2), nil) }, true, "D3"},
		{"entry garbled", func(e *env, p Plan) { e.rawSet(keyDecision(p.ID, 1), []byte("{")) }, true, "D2"},
		{"entry of another step", func(e *env, p Plan) {
			e.rawSet(keyDecision(p.ID, 1), e.rawGet(keyDecision(p.ID, 0)))
		}, true, "D2"},
		{"stray entry", func(e *env, p Plan) { e.rawSet(keyDecision(p.ID, 7), e.rawGet(keyDecision(p.ID, 1))) }, true, ""},
		{"index garbled", func(e *env, p Plan) { e.rawSet(keyDecisionIndex(p.ID, "D2"), []byte("x")) }, false, "D2"},
		{"index names another decision's entry", func(e *env, p Plan) { e.rawSet(keyDecisionIndex(p.ID, "D2"), []byte("[0]")) }, false, "D2"},
		{"index past the steps", func(e *env, p Plan) {
			e.rawSet(keyDecision(p.ID, 7), e.rawGet(keyDecision(p.ID, 1)))
			e.rawSet(keyDecisionIndex(p.ID, "D2"), []byte("[1,7]"))
		}, true, "D2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, fillBase)
			p := threeDecisions(t, e, func() {})
			c.damage(e, p)
			if c.whole {
				if _, err := e.plans.Get("p"); !errors.Is(err, layers.ErrCorrupt) || errors.Is(err, layers.ErrNotFound) {
					t.Errorf("get: got %v, want ErrCorrupt", err)
				}
				if _, err := e.plans.List(); !errors.Is(err, layers.ErrCorrupt) {
					t.Errorf("list: got %v, want ErrCorrupt", err)
				}
				if _, err := e.plans.Rollback("p", p.Decisions[0].Checkpoint); !errors.Is(err, layers.ErrCorrupt) {
					t.Errorf("rollback: got %v, want ErrCorrupt", err)
				}
			}
			if c.stepErr == "" {
				return
			}
			before := len(must[[]checkpoint.Checkpoint](t)(e.cps.List("s")))
			if _, err := e.plans.Begin("p", c.stepErr, ""); !errors.Is(err, layers.ErrCorrupt) || errors.Is(err, layers.ErrNotFound) {
				t.Errorf("begin: got %v, want ErrCorrupt", err)
			}
			if _, err := e.plans.End("p", c.stepErr, false); !errors.Is(err, layers.ErrCorrupt) {
				t.Errorf("end: got %v, want ErrCorrupt", err)
			}
			if after := len(must[[]checkpoint.Checkpoint](t)(e.cps.List("s"))); after != before {
				t.Errorf("a refused step took a checkpoint: %d, then %d", before, after)
			}
		})
	}
}

// TestStepStoreFaults: a step whose reads or writes of the plan fail
// returns the store's error and changes nothing; so does a change of the
// whole plan.
func TestStepStoreFaults(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		op, key string // the failing operation and the start of its key ({id}: the plan's id)
		nth     int    // the first of those operations that fails (0: the first)
		do      func(e *env) error
	}{
		{"get", "x/plan/i/", 0, func(e *env) error { _, err := e.plans.Begin("p", "D2", ""); return err }},
		{"get", "x/plan/d/", 0, func(e *env) error { _, err := e.plans.End("p", "D4", false); return err }},
		{"set", "x/plan/d/", 0, func(e *env) error { _, err := e.plans.Begin("p", "D5", ""); return err }},
		{"set", "x/plan/i/", 0, func(e *env) error { _, err := e.plans.Begin("p", "D5", ""); return err }},
		{"set", "x/plan/p/", 0, func(e *env) error { _, err := e.plans.Begin("p", "D5", ""); return err }},
		{"set", "x/plan/d/", 0, func(e *env) error {
			_, err := e.plans.Correct("p", CorrectOptions{Mode: Revert, Decision: "D2", Reason: "r"})
			return err
		}},
		{"get", "x/plan/i/", 0, func(e *env) error {
			_, err := e.plans.Correct("p", CorrectOptions{Mode: Append, Reason: "r"})
			return err
		}},
		{"scan", "x/plan/d/", 0, func(e *env) error { _, err := e.plans.Get("p"); return err }},
		{"get", "x/plan/p/", 0, func(e *env) error { _, err := e.plans.Begin("p", "D5", ""); return err }},
		{"set", "x/plan/i/", 0, func(e *env) error {
			_, err := e.plans.Correct("p", CorrectOptions{Mode: Append, Reason: "r"})
			return err
		}},
		{"set", "x/plan/p/", 0, func(e *env) error { _, err := e.plans.Complete("p"); return err }},
		// The reads inside the transaction, after those that decided.
		{"get", "x/plan/p/{id}", 2, func(e *env) error { _, err := e.plans.Begin("p", "D5", ""); return err }},
		{"get", "x/plan/p/{id}", 2, func(e *env) error { _, err := e.plans.Complete("p"); return err }},
		{"set", "x/plan/p/{id}", 0, func(e *env) error {
			_, err := e.plans.Create("sub", CreateOptions{Parent: "p", ParentDecision: "D4"})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.op+" "+c.key, func(t *testing.T) {
			e := newEnv(t, fillBase)
			p := threeDecisions(t, e, func() {})
			must[Decision](t)(e.plans.Begin("p", "D4", "fourth"))
			before := e.plan("p")
			prefix := strings.ReplaceAll(c.key, "{id}", p.ID)
			var mu sync.Mutex
			seen := 0
			restore := e.store.InjectFault(func(op, key string) error {
				mu.Lock()
				defer mu.Unlock()
				if op == c.op && strings.HasPrefix(key, prefix) {
					if seen++; seen >= c.nth {
						return boom
					}
				}
				return nil
			})
			err := c.do(e)
			restore()
			if !errors.Is(err, boom) {
				t.Fatalf("got %v, want the store's error", err)
			}
			if got := e.plan("p"); !reflect.DeepEqual(got, before) {
				t.Errorf("the plan changed:\n got %+v\nwant %+v", got, before)
			}
		})
	}
}

// TestPlanDocNeverDrops: writing back a plan with fewer decisions than it
// was read with is refused; entries are only ever added.
func TestPlanDocNeverDrops(t *testing.T) {
	e := newEnv(t, fillBase)
	p := threeDecisions(t, e, func() {})
	err := e.store.Update(func(tx *layers.Txn) error {
		d, err := readPlan(tx, p.ID)
		if err != nil {
			return err
		}
		d.p.Decisions = d.p.Decisions[:1]
		return d.write(tx)
	})
	if !errors.Is(err, layers.ErrInvalid) {
		t.Errorf("got %v, want ErrInvalid", err)
	}
	if got := e.plan("p"); !reflect.DeepEqual(got, p) {
		t.Errorf("the plan changed: %+v", got)
	}
}
