package correction

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// TestBadInput runs every refused command against the seed plan and checks
// the sentinel, and that neither the record nor the sandbox changed.
func TestBadInput(t *testing.T) {
	e := newEnv(t, fillBase)
	threeDecisions(t, e, func() {})
	must[Plan](t)(e.plans.Create("clean", CreateOptions{Sandbox: "s"}))
	must[Decision](t)(e.plans.Begin("clean", "C1", ""))
	must[Decision](t)(e.plans.End("clean", "C1", false))
	// A checkpoint of no plan, and a second sandbox with a plan.
	other := must[checkpoint.Checkpoint](t)(e.cps.Create("s", checkpoint.Options{Label: "manual"}))
	base2 := filepath.Join(e.dir, "base2")
	os.MkdirAll(base2, 0o755)
	must[layers.SandboxInfo](t)(e.store.CreateSandbox("s2", base2, 0))
	must[Plan](t)(e.plans.Create("gone", CreateOptions{Sandbox: "s2"}))
	if err := e.cps.RemoveSandbox("s2"); err != nil {
		t.Fatal(err)
	}
	must[layers.SandboxInfo](t)(e.store.CreateSandbox("s2", base2, 0)) // same name, another sandbox
	// Two plans whose ids share a 6-character prefix cannot be told apart
	// by it; plans made in one millisecond usually do.
	p := e.plan("p")

	for _, tc := range []struct {
		name string
		fn   func() error
		want error
	}{
		{"show unknown plan", func() error { _, err := e.plans.Get("nope"); return err }, layers.ErrNotFound},
		{"short prefix", func() error { _, err := e.plans.Get(p.ID[:5]); return err }, layers.ErrNotFound},
		{"begin unknown plan", func() error { _, err := e.plans.Begin("nope", "D", ""); return err }, layers.ErrNotFound},
		{"begin without decision", func() error { _, err := e.plans.Begin("p", "", ""); return err }, layers.ErrInvalid},
		{"begin a done decision", func() error { _, err := e.plans.Begin("p", "D1", ""); return err }, layers.ErrExists},
		{"end unknown plan", func() error { _, err := e.plans.End("nope", "D1", false); return err }, layers.ErrNotFound},
		{"end without begin", func() error { _, err := e.plans.End("p", "D9", false); return err }, ErrStepNotBegun},
		{"end twice", func() error { _, err := e.plans.End("p", "D3", false); return err }, ErrStepNotBegun},
		{"checkpoints of unknown plan", func() error { _, err := e.plans.Checkpoints("nope"); return err }, layers.ErrNotFound},
		{"rollback unknown plan", func() error { _, err := e.plans.Rollback("nope", other.ID); return err }, layers.ErrNotFound},
		{"rollback unknown checkpoint", func() error { _, err := e.plans.Rollback("p", "ZZZZZZZZ"); return err }, layers.ErrNotFound},
		{"rollback to another's checkpoint", func() error { _, err := e.plans.Rollback("p", other.ID); return err }, layers.ErrNotFound},
		{"correct unknown plan", func() error {
			_, err := e.plans.Correct("nope", CorrectOptions{Mode: Revert, Reason: "r"})
			return err
		}, layers.ErrNotFound},
		{"revert unknown decision", func() error {
			_, err := e.plans.Correct("p", CorrectOptions{Mode: Revert, Decision: "D9", Reason: "r"})
			return err
		}, layers.ErrNotFound},
		{"revert without failed decision", func() error {
			_, err := e.plans.Correct("clean", CorrectOptions{Mode: Revert, Reason: "r"})
			return err
		}, ErrNoFailedDecision},
		{"correct without reason", func() error {
			_, err := e.plans.Correct("p", CorrectOptions{Mode: Revert, Reason: " "})
			return err
		}, layers.ErrInvalid},
		{"correct bad mode", func() error { _, err := e.plans.Correct("p", CorrectOptions{Mode: "undo", Reason: "r"}); return err }, layers.ErrInvalid},
		{"append with decision", func() error {
			_, err := e.plans.Correct("p", CorrectOptions{Mode: Append, Decision: "D1", Reason: "r"})
			return err
		}, layers.ErrInvalid},
		{"append unknown plan", func() error { _, err := e.plans.Correct("nope", CorrectOptions{Mode: Append, Reason: "r"}); return err }, layers.ErrNotFound},
		{"apply unknown plan", func() error { _, err := e.plans.Apply("nope"); return err }, layers.ErrNotFound},
		{"complete unknown plan", func() error { _, err := e.plans.Complete("nope"); return err }, layers.ErrNotFound},
		{"create duplicate name", func() error { _, err := e.plans.Create("p", CreateOptions{Sandbox: "s"}); return err }, layers.ErrExists},
		{"create bad name", func() error { _, err := e.plans.Create("a b", CreateOptions{Sandbox: "s"}); return err }, layers.ErrInvalid},
		{"create bad milestone", func() error {
			_, err := e.plans.Create("x", CreateOptions{Sandbox: "s", CheckpointOn: []string{"sometimes"}})
			return err
		}, layers.ErrInvalid},
		{"create without sandbox", func() error { _, err := e.plans.Create("x", CreateOptions{}); return err }, layers.ErrInvalid},
		{"create on unknown sandbox", func() error { _, err := e.plans.Create("x", CreateOptions{Sandbox: "nope"}); return err }, layers.ErrNotFound},
		{"subplan of unknown plan", func() error {
			_, err := e.plans.Create("x", CreateOptions{Parent: "nope", ParentDecision: "D1"})
			return err
		}, layers.ErrNotFound},
		{"subplan of unknown decision", func() error {
			_, err := e.plans.Create("x", CreateOptions{Parent: "p", ParentDecision: "D9"})
			return err
		}, layers.ErrNotFound},
		{"subplan in another sandbox", func() error {
			_, err := e.plans.Create("x", CreateOptions{Sandbox: "s2", Parent: "p", ParentDecision: "D1"})
			return err
		}, layers.ErrInvalid},
		{"parent decision without parent", func() error {
			_, err := e.plans.Create("x", CreateOptions{Sandbox: "s", ParentDecision: "D1"})
			return err
		}, layers.ErrInvalid},
		{"show plan of removed sandbox", func() error { _, err := e.plans.Get("gone"); return err }, ErrSandboxGone},
		{"begin on removed sandbox", func() error { _, err := e.plans.Begin("gone", "D1", ""); return err }, ErrSandboxGone},
		{"apply on removed sandbox", func() error { _, err := e.plans.Apply("gone"); return err }, ErrSandboxGone},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, files := e.record(), tree(t, e.mnt)
			err := tc.fn()
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if after := e.record(); after != before {
				t.Errorf("record changed:\n got %s\nwant %s", after, before)
			}
			if d := diffTree(tree(t, e.mnt), files); d != "" {
				t.Errorf("files changed:\n%s", d)
			}
		})
	}
	if !errors.Is(ErrSandboxGone, layers.ErrNotFound) {
		t.Errorf("ErrSandboxGone does not wrap ErrNotFound")
	}
}

// TestAmbiguousPrefix makes plans until two share an id prefix, which then
// resolves to neither.
func TestAmbiguousPrefix(t *testing.T) {
	e := newEnv(t, fillBase)
	a := must[Plan](t)(e.plans.Create("a", CreateOptions{Sandbox: "s"}))
	// Ids made within one millisecond share all but their last characters;
	// a later millisecond keeps the 20-character prefix below unique.
	time.Sleep(2 * time.Millisecond)
	b := must[Plan](t)(e.plans.Create("b", CreateOptions{Sandbox: "s"}))
	n := 0
	for a.ID[:6] != b.ID[:6] {
		time.Sleep(time.Millisecond)
		a = b
		n++
		b = must[Plan](t)(e.plans.Create("p"+string(rune('a'+n%26))+time.Now().Format("150405.000000"), CreateOptions{Sandbox: "s"}))
	}
	if _, err := e.plans.Get(a.ID[:6]); !errors.Is(err, checkpoint.ErrAmbiguous) {
		t.Errorf("shared prefix: got %v, want ErrAmbiguous", err)
	}
	if got := e.plan(b.ID[:20]); got.ID != b.ID {
		t.Errorf("long prefix: got %s, want %s", got.ID, b.ID)
	}
	if got := e.plan(b.Name); got.ID != b.ID {
		t.Errorf("by name: got %s, want %s", got.ID, b.ID)
	}
}

// TestCorruptRecord: a plan record that no longer decodes is reported as
// corrupt, not as missing.
func TestCorruptRecord(t *testing.T) {
	e := newEnv(t, fillBase)
	p := must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	if err := e.store.Update(func(tx *layers.Txn) error { return tx.Set(keyPlan(p.ID), []byte("{")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.plans.Get("p"); !errors.Is(err, layers.ErrCorrupt) {
		t.Errorf("get: got %v, want ErrCorrupt", err)
	}
	if _, err := e.plans.List(); !errors.Is(err, layers.ErrCorrupt) {
		t.Errorf("list: got %v, want ErrCorrupt", err)
	}
}
