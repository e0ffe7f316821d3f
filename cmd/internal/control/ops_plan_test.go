package control

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/correction"
	"github.com/strata-sandbox/strata/layers"
)

// TestPlanErrorsSurviveTheSocket: the correction package's sentinels have
// wire codes, so a client's errors.Is works on a plan op's error as it
// does in the server's process.
func TestPlanErrorsSurviveTheSocket(t *testing.T) {
	srv, base := newServer(t)
	c, err := Dial(srv.Store().Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	base2 := filepath.Join(filepath.Dir(base), "base2")
	if err := os.Mkdir(base2, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sb := range []CreateArgs{{Name: "demo", Base: base}, {Name: "gone", Base: base2}} {
		if err := c.Call(OpSandboxCreate, sb, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []PlanCreateArgs{{Name: "p", Sandbox: "demo"}, {Name: "g", Sandbox: "gone"}} {
		if err := c.Call(OpPlanCreate, p, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Call(OpSandboxRemove, NameArgs{Name: "gone"}, nil); err != nil {
		t.Fatal(err)
	}
	// A file in the sandbox, and the same name made in the base after it.
	v, err := srv.Store().OpenView("demo", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Mknod(layers.RootIno, "new.txt", syscall.S_IFREG|0o644, 0, layers.Caller{}); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // past the sandbox's creation on the coarse clock
	theirs := filepath.Join(base, "new.txt")
	if err := os.WriteFile(theirs, []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name   string
		op     string
		args   any
		before func()
		want   error
		code   string
	}{
		{name: "step not begun", op: OpPlanStepEnd, args: PlanStepArgs{Plan: "p", Decision: "D1"}, want: correction.ErrStepNotBegun, code: "step_not_begun"},
		{name: "no failed decision", op: OpPlanCorrect, args: PlanCorrectArgs{Plan: "p", Mode: correction.Revert, Reason: "r"}, want: correction.ErrNoFailedDecision, code: "no_failed_decision"},
		{name: "sandbox gone", op: OpPlanShow, args: PlanArgs{Plan: "g"}, want: correction.ErrSandboxGone, code: "sandbox_gone"},
		{name: "conflict", op: OpPlanApply, args: PlanArgs{Plan: "p"}, want: correction.ErrConflict, code: "conflict"},
		{name: "applied", op: OpPlanStepBegin, args: PlanStepArgs{Plan: "p", Decision: "D1"}, before: func() {
			if err := os.Remove(theirs); err != nil {
				t.Fatal(err)
			}
			if err := c.Call(OpPlanApply, PlanArgs{Plan: "p"}, nil); err != nil {
				t.Fatal(err)
			}
		}, want: correction.ErrPlanApplied, code: "plan_applied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before()
			}
			err := c.Call(tt.op, tt.args, nil)
			var re *RemoteError
			if !errors.Is(err, tt.want) || !errors.As(err, &re) || re.Code != tt.code {
				t.Fatalf("got %#v, want a RemoteError with code %q that Is %v", err, tt.code, tt.want)
			}
			if err := srv.Call(tt.op, tt.args, nil); !errors.Is(err, tt.want) {
				t.Fatalf("in process: got %v, want an error that Is %v", err, tt.want)
			}
		})
	}
	// A sandbox of its own with nothing changed has nothing to apply.
	if err := c.Call(OpSandboxCreate, CreateArgs{Name: "quiet", Base: base2}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(OpPlanCreate, PlanCreateArgs{Name: "q", Sandbox: "quiet"}, nil); err != nil {
		t.Fatal(err)
	}
	err = c.Call(OpPlanApply, PlanArgs{Plan: "q"}, nil)
	if !errors.Is(err, correction.ErrNothingToApply) || ErrorCode(err) != "nothing_to_apply" {
		t.Errorf("apply of an unchanged sandbox: got %#v, want nothing_to_apply", err)
	}
	// ErrSandboxGone still is a not-found error on the client.
	if err := c.Call(OpPlanShow, PlanArgs{Plan: "g"}, nil); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("sandbox gone: got %v, want an error that Is ErrNotFound too", err)
	}
	// Every sentinel of correction has a code of its own that maps back.
	for _, sentinel := range []error{correction.ErrPlanApplied, correction.ErrApplying, correction.ErrNoFailedDecision,
		correction.ErrStepNotBegun, correction.ErrConflict, correction.ErrNothingToApply, correction.ErrSandboxGone} {
		code := ErrorCode(sentinel)
		if code == CodeInternal || code == "not_found" {
			t.Errorf("%v: code %q", sentinel, code)
		}
		if re := (&RemoteError{Code: code, Msg: sentinel.Error()}); !errors.Is(re, sentinel) {
			t.Errorf("%v: code %q does not map back", sentinel, code)
		}
	}
}
