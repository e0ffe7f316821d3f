package correction

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

func fillBase(base string) {
	os.WriteFile(filepath.Join(base, "a.txt"), []byte("base"), 0o644)
}

// threeDecisions runs the seed plan: D1 writes a.txt=one and b.txt, D2
// (which fails) writes a.txt=two and c.txt, D3 writes d.txt. between runs
// between any two steps.
func threeDecisions(t *testing.T, e *env, between func()) Plan {
	t.Helper()
	p := must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	steps := []func(){
		func() { must[Decision](t)(e.plans.Begin("p", "D1", "first")) },
		func() { e.write("a.txt", "one"); e.write("b.txt", "b") },
		func() { must[Decision](t)(e.plans.End("p", "D1", false)) },
		func() { must[Decision](t)(e.plans.Begin(p.ID, "D2", "second")) },
		func() { e.write("a.txt", "two"); e.write("c.txt", "c") },
		func() { must[Decision](t)(e.plans.End(p.ID[:8], "D2", true)) },
		func() { must[Decision](t)(e.plans.Begin("p", "D3", "third")) },
		func() { e.write("d.txt", "d") },
		func() { must[Decision](t)(e.plans.End("p", "D3", false)) },
	}
	for _, s := range steps {
		s()
		between()
	}
	return e.plan("p")
}

func TestRevertToLastCleanCheckpoint(t *testing.T) {
	e := newEnv(t, fillBase)
	p := threeDecisions(t, e, func() {})
	if got, want := statuses(p), "D1:done D2:failed D3:done"; got != want {
		t.Fatalf("statuses: got %q, want %q", got, want)
	}
	res, err := e.plans.Correct("p", CorrectOptions{Mode: Revert, Reason: "D2 broke the build"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Decision != "D2" || res.Archive == "" || !reflect.DeepEqual(res.Reverted, []string{"D2", "D3"}) {
		t.Errorf("correction: got %+v, want decision D2, an archive, reverted D2 D3", res.Correction)
	}
	want := map[string]string{"a.txt": "-rw-r--r-- one", "b.txt": "-rw-r--r-- b"}
	if d := diffTree(tree(t, e.mnt), want); d != "" {
		t.Errorf("sandbox after revert:\n%s", d)
	}
	p = e.plan("p")
	if got, want := statuses(p), "D1:done D2:reverted! D3:reverted!"; got != want {
		t.Errorf("statuses: got %q, want %q", got, want)
	}
	if got := p.NeedsReexecution(); !reflect.DeepEqual(got, []string{"D2", "D3"}) {
		t.Errorf("needs re-execution: got %v, want [D2 D3]", got)
	}
	if len(p.Corrections) != 1 || p.Corrections[0].Reason != "D2 broke the build" {
		t.Errorf("corrections: got %+v", p.Corrections)
	}
	// What D2 and D3 wrote is in the archive and exports physically.
	out := filepath.Join(e.dir, "export")
	if _, err := e.cps.Export(res.Archive, out); err != nil {
		t.Fatal(err)
	}
	want = map[string]string{"a.txt": "-rw-r--r-- two", "b.txt": "-rw-r--r-- b", "c.txt": "-rw-r--r-- c", "d.txt": "-rw-r--r-- d"}
	if d := diffTree(tree(t, out), want); d != "" {
		t.Errorf("exported archive:\n%s", d)
	}
	// Re-executing D2 is a new entry; the old ones no longer need it.
	must[Decision](t)(e.plans.Begin("p", "D2", "second, again"))
	e.write("c.txt", "c2")
	must[Decision](t)(e.plans.End("p", "D2", false))
	if got, want := statuses(e.plan("p")), "D1:done D2:reverted D3:reverted! D2:done"; got != want {
		t.Errorf("after re-execution: got %q, want %q", got, want)
	}
	// A revert to a named decision.
	res, err = e.plans.Correct("p", CorrectOptions{Mode: Revert, Decision: "D1", Reason: "start over"})
	if err != nil {
		t.Fatal(err)
	}
	if d := diffTree(tree(t, e.mnt), map[string]string{"a.txt": "-rw-r--r-- base"}); d != "" {
		t.Errorf("sandbox after revert to D1:\n%s", d)
	}
	if got, want := statuses(e.plan("p")), "D1:reverted! D2:reverted D3:reverted! D2:reverted!"; got != want {
		t.Errorf("after revert to D1: got %q, want %q", got, want)
	}
}

func TestAppendCorrection(t *testing.T) {
	e := newEnv(t, fillBase)
	threeDecisions(t, e, func() {})
	before := tree(t, e.mnt)
	res, err := e.plans.Correct("p", CorrectOptions{Mode: Append, Reason: "D2 left c.txt wrong", Step: "fix c.txt"})
	if err != nil {
		t.Fatal(err)
	}
	if d := diffTree(tree(t, e.mnt), before); d != "" {
		t.Errorf("append changed the sandbox:\n%s", d)
	}
	p := e.plan("p")
	if got, want := statuses(p), "D1:done D2:failed D3:done correction-1:correction"; got != want {
		t.Errorf("statuses: got %q, want %q", got, want)
	}
	last := p.Decisions[3]
	if last.Step != 4 || last.Label != "fix c.txt" || last.Checkpoint != res.Checkpoint {
		t.Errorf("correction decision: got %+v, want step 4, label, checkpoint %s", last, res.Checkpoint)
	}
	cp := must[checkpoint.Checkpoint](t)(e.cps.Resolve(res.Checkpoint))
	if cp.Phase != PhaseCorrection || cp.Plan != p.ID || cp.Step != 4 || cp.Decision != "correction-1" {
		t.Errorf("correction checkpoint: got %+v", cp)
	}
	// Without --step the reason labels the step; numbering continues.
	must[CorrectResult](t)(e.plans.Correct("p", CorrectOptions{Mode: Append, Reason: "again"}))
	p = e.plan("p")
	if d := p.Decisions[4]; d.ID != "correction-2" || d.Label != "again" {
		t.Errorf("second correction: got %+v", d)
	}
	// The correction's checkpoint is a revert target like any other.
	must[CorrectResult](t)(e.plans.Correct("p", CorrectOptions{Mode: Revert, Decision: "correction-1", Reason: "undo the last"}))
	if got, want := statuses(e.plan("p")), "D1:done D2:failed D3:done correction-1:reverted! correction-2:reverted!"; got != want {
		t.Errorf("statuses: got %q, want %q", got, want)
	}
}

func TestRollbackToMiddleCheckpoint(t *testing.T) {
	e := newEnv(t, fillBase)
	threeDecisions(t, e, func() {})
	cps := must[[]checkpoint.Checkpoint](t)(e.plans.Checkpoints("p"))
	if len(cps) != 3 {
		t.Fatalf("plan checkpoints: got %d, want 3", len(cps))
	}
	for i, c := range cps {
		if c.Step != i+1 || c.Phase != BeforeStep || c.Decision != []string{"D1", "D2", "D3"}[i] {
			t.Errorf("checkpoint %d: got step %d phase %q decision %q", i, c.Step, c.Phase, c.Decision)
		}
	}
	res, err := e.plans.Rollback("p", cps[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Archive == "" || !reflect.DeepEqual(res.Reverted, []string{"D2", "D3"}) {
		t.Errorf("rollback: got %+v", res)
	}
	want := map[string]string{"a.txt": "-rw-r--r-- one", "b.txt": "-rw-r--r-- b"}
	if d := diffTree(tree(t, e.mnt), want); d != "" {
		t.Errorf("sandbox after rollback:\n%s", d)
	}
	p := e.plan("p")
	if got, want := statuses(p), "D1:done D2:reverted! D3:reverted!"; got != want {
		t.Errorf("statuses: got %q, want %q", got, want)
	}
	if len(p.Rollbacks) != 1 || p.Rollbacks[0].Checkpoint != cps[1].ID {
		t.Errorf("rollbacks: got %+v", p.Rollbacks)
	}
	// By a prefix of the id, to the first one.
	must[RollbackResult](t)(e.plans.Rollback("p", cps[0].ID[:10]))
	if d := diffTree(tree(t, e.mnt), map[string]string{"a.txt": "-rw-r--r-- base"}); d != "" {
		t.Errorf("sandbox after rollback to the first:\n%s", d)
	}
	if got, want := statuses(e.plan("p")), "D1:reverted! D2:reverted! D3:reverted!"; got != want {
		t.Errorf("statuses: got %q, want %q", got, want)
	}
}

// TestRestartBetweenSteps reopens the store between any two steps of the
// seed scenario and checks that nothing changes across the reopen.
func TestRestartBetweenSteps(t *testing.T) {
	e := newEnv(t, fillBase)
	between := func() {
		t.Helper()
		before, files := e.record(), tree(t, e.mnt)
		e.restart()
		if after := e.record(); after != before {
			t.Fatalf("record changed across a restart:\n got %s\nwant %s", after, before)
		}
		if d := diffTree(tree(t, e.mnt), files); d != "" {
			t.Fatalf("files changed across a restart:\n%s", d)
		}
	}
	threeDecisions(t, e, between)
	must[CorrectResult](t)(e.plans.Correct("p", CorrectOptions{Mode: Revert, Reason: "r"}))
	between()
	if got, want := statuses(e.plan("p")), "D1:done D2:reverted! D3:reverted!"; got != want {
		t.Errorf("statuses: got %q, want %q", got, want)
	}
	must[CorrectResult](t)(e.plans.Correct("p", CorrectOptions{Mode: Append, Reason: "r2"}))
	between()
	must[RollbackResult](t)(e.plans.Rollback("p", "p/1/before-step"))
	between()
	e.write("z.txt", "z")
	between()
	must[ApplyResult](t)(e.plans.Apply("p"))
	between()
	if p := e.plan("p"); !p.Applied || p.Status != StatusApplied {
		t.Errorf("after apply and restart: applied %v status %q", p.Applied, p.Status)
	}
}

func TestMilestones(t *testing.T) {
	e := newEnv(t, fillBase)
	p := must[Plan](t)(e.plans.Create("all", CreateOptions{Sandbox: "s", CheckpointOn: []string{BeforeStep, AfterStep, AfterSubplan, AfterStep, ""}}))
	if !reflect.DeepEqual(p.CheckpointOn, []string{BeforeStep, AfterStep, AfterSubplan}) {
		t.Errorf("milestones: got %v", p.CheckpointOn)
	}
	must[Decision](t)(e.plans.Begin("all", "D1", "one"))
	e.write("x", "1")
	d := must[Decision](t)(e.plans.End("all", "D1", false))
	if d.AfterCheckpoint == "" {
		t.Errorf("after-step checkpoint missing: %+v", d)
	}
	must[Decision](t)(e.plans.Begin("all", "D2", "with a subplan"))
	sub := must[Plan](t)(e.plans.Create("sub", CreateOptions{Parent: "all", ParentDecision: "D2", CheckpointOn: []string{"none"}}))
	if sub.Sandbox != "s" || sub.Parent != p.ID || len(sub.CheckpointOn) != 0 {
		t.Errorf("subplan: got %+v", sub)
	}
	if got := e.plan("all").Subplans; !reflect.DeepEqual(got, []string{sub.ID}) {
		t.Errorf("parent's subplans: got %v", got)
	}
	d = must[Decision](t)(e.plans.Begin("sub", "S1", ""))
	if d.Checkpoint != "" {
		t.Errorf("subplan without milestones took a checkpoint: %+v", d)
	}
	e.write("y", "2")
	must[Decision](t)(e.plans.End("sub", "S1", false))
	done := must[Plan](t)(e.plans.Complete("sub"))
	if done.Status != StatusComplete {
		t.Errorf("subplan status: got %q", done.Status)
	}
	if _, err := e.plans.Complete("sub"); !errors.Is(err, layers.ErrInvalid) {
		t.Errorf("complete twice: got %v, want ErrInvalid", err)
	}
	cps := must[[]checkpoint.Checkpoint](t)(e.plans.Checkpoints("all"))
	var phases []string
	for _, c := range cps {
		phases = append(phases, c.Phase)
	}
	if want := []string{BeforeStep, AfterStep, BeforeStep, AfterSubplan}; !reflect.DeepEqual(phases, want) {
		t.Fatalf("phases: got %v, want %v", phases, want)
	}
	if c := cps[3]; c.Plan != p.ID || c.Decision != "D2" || c.Step != 2 {
		t.Errorf("after-subplan checkpoint: got %+v", c)
	}
	// Rolling back to the subplan's checkpoint keeps the parent's record.
	res := must[RollbackResult](t)(e.plans.Rollback("all", cps[1].ID))
	if !reflect.DeepEqual(res.Reverted, []string{"D2"}) {
		t.Errorf("rollback to after-step of D1 reverted %v, want [D2]", res.Reverted)
	}
	// A subplan's own decision without a checkpoint cannot be reverted.
	if _, err := e.plans.Correct("sub", CorrectOptions{Mode: Revert, Decision: "S1", Reason: "r"}); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("revert without a pre-decision checkpoint: got %v, want ErrNotFound", err)
	}
	// Complete of a top-level plan.
	must[Plan](t)(e.plans.Complete("all"))
	// A plain subplan completes without a checkpoint when the parent has no
	// after-subplan milestone.
	must[Plan](t)(e.plans.Create("plain", CreateOptions{Sandbox: "s"}))
	must[Decision](t)(e.plans.Begin("plain", "P1", ""))
	must[Plan](t)(e.plans.Create("plainsub", CreateOptions{Sandbox: "s", Parent: "plain", ParentDecision: "P1"}))
	n := len(must[[]checkpoint.Checkpoint](t)(e.cps.List("s")))
	must[Plan](t)(e.plans.Complete("plainsub"))
	if got := len(must[[]checkpoint.Checkpoint](t)(e.cps.List("s"))); got != n {
		t.Errorf("completing a subplan without the milestone: %d checkpoints, want %d", got, n)
	}
	ps := must[[]Plan](t)(e.plans.List())
	if len(ps) != 4 || ps[0].Name != "all" || ps[3].Name != "plainsub" {
		t.Errorf("list: got %d plans", len(ps))
	}
}

func TestPlanJSON(t *testing.T) {
	e := newEnv(t, fillBase)
	threeDecisions(t, e, func() {})
	b, err := json.Marshal(e.plan("p"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "sandbox", "status", "applied", "decisions", "corrections"} {
		if _, ok := m[k]; !ok {
			t.Errorf("plan JSON lacks %q: %s", k, b)
		}
	}
	d := m["decisions"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "step", "label", "status", "needs_reexecution", "checkpoint"} {
		if _, ok := d[k]; !ok {
			t.Errorf("decision JSON lacks %q: %v", k, d)
		}
	}
}

// TestHeld: the checkpoints an open plan took (its subplans' too) are
// held; a complete or applied plan, and another sandbox's, hold none.
func TestHeld(t *testing.T) {
	e := newEnv(t, nil)
	p := must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	must[Decision](t)(e.plans.Begin("p", "D1", "first"))
	must[Decision](t)(e.plans.End("p", "D1", false))
	sub := must[Plan](t)(e.plans.Create("sub", CreateOptions{Sandbox: "s", Parent: "p", ParentDecision: "D1"}))
	must[Decision](t)(e.plans.Begin("sub", "S1", "sub step"))
	must[Decision](t)(e.plans.End("sub", "S1", false))
	cps := must[[]checkpoint.Checkpoint](t)(e.plans.Checkpoints("p"))
	if len(cps) < 2 {
		t.Fatalf("the plan and its subplan took %d checkpoints, want at least 2", len(cps))
	}
	held := must[map[string]bool](t)(e.plans.Held("s"))
	for _, cp := range cps {
		if !held[cp.ID] {
			t.Errorf("checkpoint %s (plan %s) is not held", cp.Label, cp.Plan)
		}
	}
	if len(held) != len(cps) {
		t.Errorf("%d checkpoints held, want the plans' %d", len(held), len(cps))
	}
	if other := must[map[string]bool](t)(e.plans.Held("other")); len(other) != 0 {
		t.Errorf("another sandbox holds %d checkpoints", len(other))
	}
	// A store that fails to list the plans or their checkpoints fails it.
	boom := errors.New("boom")
	for _, prefix := range []string{"x/plan/", "x/cps/"} {
		restore := e.store.InjectFault(func(op, key string) error {
			if op == "scan" && strings.HasPrefix(key, prefix) {
				return boom
			}
			return nil
		})
		_, err := e.plans.Held("s")
		restore()
		if !errors.Is(err, boom) {
			t.Errorf("held with a failing scan of %s: %v", prefix, err)
		}
	}
	must[Plan](t)(e.plans.Complete(sub.ID))
	must[Plan](t)(e.plans.Complete(p.ID))
	if held := must[map[string]bool](t)(e.plans.Held("s")); len(held) != 0 {
		t.Errorf("after completing the plans %d checkpoints are held", len(held))
	}
}
