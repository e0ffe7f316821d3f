package correction

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// Environment of a child process that applies a plan and dies at a fault
// point: see crashChild.
const (
	envCrashStore = "STRATA_TEST_CRASH_STORE"
	envCrashPlan  = "STRATA_TEST_CRASH_PLAN"
	envCrashStep  = "STRATA_TEST_CRASH_STEP"
	exitCrashed   = 3
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(envCrashStore); dir != "" {
		os.Exit(crashChild(dir, os.Getenv(envCrashPlan), os.Getenv(envCrashStep)))
	}
	os.Exit(m.Run())
}

// crashChild opens the store in dir and applies plan; at fault point step
// it exits on the spot, as a killed process would: no deferred cleanup, no
// store close. It returns 0 when the apply went through without reaching
// step.
func crashChild(dir, plan, step string) int {
	n, err := strconv.Atoi(step)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	st, err := layers.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	applyFault = func(i int) error {
		if i == n {
			os.Exit(exitCrashed)
		}
		return nil
	}
	if _, err := New(checkpoint.New(st, nil)).Apply(plan); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// crashApply runs crashChild for plan p of e's store (which must be
// closed) and returns its exit code.
func crashApply(t *testing.T, e *env, step int) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envCrashStore+"="+e.storeDir, envCrashPlan+"=p", envCrashStep+"="+strconv.Itoa(step))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee) && ee.ExitCode() == exitCrashed:
		return exitCrashed
	}
	t.Fatalf("step %d: child: %v\n%s", step, err, out)
	return -1
}

// TestApplyCrash kills a process applying a plan at every fault point of
// the apply in turn, then opens the store again: the plan's next command
// must leave the base either exactly as before (and the plan open) or
// fully applied (and the plan applied), with nothing of the apply left.
func TestApplyCrash(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	changeAll(t, e)
	orig := tree(t, e.base)
	e.close()
	halfway := 0
	for step := -1; ; step++ {
		code := crashApply(t, e, step)
		if d1, d2 := diffTree(tree(t, e.base), orig), diffTree(tree(t, e.base), appliedTree); d1 != "" && d2 != "" {
			halfway++ // the crash left the base half applied
		}
		e.open()
		p := e.plan("p")
		switch {
		case p.Applied:
			if p.Status != StatusApplied {
				t.Errorf("step %d: applied plan has status %q", step, p.Status)
			}
			if d := diffTree(tree(t, e.base), appliedTree); d != "" {
				t.Errorf("step %d: base of an applied plan:\n%s", step, d)
			}
		case code == 0:
			t.Fatalf("step %d: the apply went through but the plan is %q", step, p.Status)
		default:
			if p.Status != StatusOpen {
				t.Errorf("step %d: plan rolled back has status %q, want open", step, p.Status)
			}
			if d := diffTree(tree(t, e.base), orig); d != "" {
				t.Errorf("step %d: base rolled back:\n%s", step, d)
			}
		}
		e.noStage()
		if p.Applied {
			if step < 12 || code != exitCrashed {
				t.Errorf("applied at step %d (exit %d); want a crash past a dozen steps", step, code)
			}
			break
		}
		if t.Failed() {
			return
		}
		e.store.Close()
		e.store = nil
	}
	if halfway < 10 {
		t.Errorf("%d crashes left the base half applied; want one for every move", halfway)
	}
	// The applied plan refuses what an applied plan refuses.
	if _, err := e.plans.Begin("p", "D9", ""); !errors.Is(err, ErrPlanApplied) {
		t.Errorf("step begin after a recovered apply: got %v, want ErrPlanApplied", err)
	}
}
