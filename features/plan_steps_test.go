package features

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cucumber/godog"
	"github.com/strata-sandbox/strata/layers"
)

// planJSON is what `plan show --json` prints (the fields the steps read).
type planJSON struct {
	ID        string `json:"id"`
	Status    string `json:"status"`
	Applied   bool   `json:"applied"`
	Decisions []struct {
		ID               string `json:"id"`
		Step             int    `json:"step"`
		Status           string `json:"status"`
		NeedsReexecution bool   `json:"needs_reexecution"`
		Checkpoint       string `json:"checkpoint"`
	} `json:"decisions"`
	Corrections []struct {
		Mode    string `json:"mode"`
		Reason  string `json:"reason"`
		Archive string `json:"archive"`
	} `json:"corrections"`
}

// initPlanSteps are the steps about plans, decisions and corrections.
func initPlanSteps(sc *godog.ScenarioContext) {
	sc.Step(`^I create the plan "([^"]*)" in "([^"]*)"$`, createPlan)
	sc.Step(`^I begin the decision "([^"]*)" of "([^"]*)"$`, beginDecision)
	sc.Step(`^I end the decision "([^"]*)" of "([^"]*)"$`, func(ctx context.Context, d, p string) error { return endDecision(ctx, d, p, false) })
	sc.Step(`^I end the decision "([^"]*)" of "([^"]*)" as failed$`, func(ctx context.Context, d, p string) error { return endDecision(ctx, d, p, true) })
	sc.Step(`^I try to end the decision "([^"]*)" of "([^"]*)"$`, tryEndDecision)
	sc.Step(`^I revert "([^"]*)" to the last clean checkpoint because "([^"]*)"$`, revertPlan)
	sc.Step(`^I try to revert "([^"]*)" to the last clean checkpoint because "([^"]*)"$`, tryRevertPlan)
	sc.Step(`^I append a correction to "([^"]*)" because "([^"]*)" with the step "([^"]*)"$`, appendCorrection)
	sc.Step(`^the decisions of "([^"]*)" are:$`, decisionsAre)
	sc.Step(`^"([^"]*)" has (\d+) checkpoints?$`, planCheckpointCount)
	sc.Step(`^I export the archive of the last correction of "([^"]*)"$`, exportCorrection)
	sc.Step(`^I roll the plan "([^"]*)" back to the checkpoint of step (\d+)$`, rollPlanBack)
	sc.Step(`^I try to roll the plan "([^"]*)" back to the checkpoint of step (\d+)$`, tryRollPlanBack)
	sc.Step(`^I apply the plan "([^"]*)"$`, applyPlan)
	sc.Step(`^I complete the plan "([^"]*)"$`, completePlan)
	sc.Step(`^I try to apply the plan "([^"]*)"$`, tryApplyPlan)
	sc.Step(`^the plan "([^"]*)" is applied$`, planApplied)
	sc.Step(`^"([^"]*)" in the base contains "([^"]*)"$`, baseContains)
	sc.Step(`^"([^"]*)" does not exist in the base$`, baseNotExists)
	sc.Step(`^someone writes "([^"]*)" to "([^"]*)" in the base$`, hostWrites)
	sc.Step(`^I restart strata serving "([^"]*)" and nothing of "([^"]*)" changes$`, restart)
}

func createPlan(ctx context.Context, plan, sandbox string) error {
	_, err := getWorld(ctx).ok("plan", "create", plan, "--sandbox", sandbox)
	return err
}

func beginDecision(ctx context.Context, d, plan string) error {
	_, err := getWorld(ctx).ok("plan", "step", "begin", plan, "--decision", d, "--label", "decision "+d)
	return err
}

func endDecision(ctx context.Context, d, plan string, failed bool) error {
	args := []string{"plan", "step", "end", plan, "--decision", d}
	if failed {
		args = append(args, "--failed")
	}
	_, err := getWorld(ctx).ok(args...)
	return err
}

// try runs a command that may fail and keeps its result for the Then steps.
func try(ctx context.Context, args ...string) error {
	w := getWorld(ctx)
	r, err := w.run(args...)
	w.last = r
	return err
}

func tryEndDecision(ctx context.Context, d, plan string) error {
	return try(ctx, "plan", "step", "end", plan, "--decision", d)
}

func revertPlan(ctx context.Context, plan, reason string) error {
	_, err := getWorld(ctx).ok("plan", "correct", plan, "--mode", "revert", "--reason", reason)
	return err
}

func tryRevertPlan(ctx context.Context, plan, reason string) error {
	return try(ctx, "plan", "correct", plan, "--mode", "revert", "--reason", reason)
}

func appendCorrection(ctx context.Context, plan, reason, step string) error {
	_, err := getWorld(ctx).ok("plan", "correct", plan, "--mode", "append", "--reason", reason, "--step", step)
	return err
}

func showPlan(ctx context.Context, plan string) (planJSON, string, error) {
	var p planJSON
	out, err := getWorld(ctx).ok("--json", "plan", "show", plan)
	if err != nil {
		return p, "", err
	}
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		return p, "", fmt.Errorf("plan show: %w: %s", err, out)
	}
	return p, out, nil
}

func decisionsAre(ctx context.Context, plan string, table *godog.Table) error {
	p, out, err := showPlan(ctx, plan)
	if err != nil {
		return err
	}
	var got, want []string
	for _, d := range p.Decisions {
		got = append(got, fmt.Sprintf("%s %s %v", d.ID, d.Status, d.NeedsReexecution))
	}
	for i, row := range table.Rows {
		if i == 0 {
			continue
		}
		want = append(want, fmt.Sprintf("%s %s %v", row.Cells[0].Value, row.Cells[1].Value, row.Cells[2].Value == "yes"))
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		return fmt.Errorf("decisions: got\n%s\nwant\n%s\n(plan %s)", strings.Join(got, "\n"), strings.Join(want, "\n"), out)
	}
	return nil
}

type planCheckpoint struct {
	ID    string `json:"id"`
	Step  int    `json:"step"`
	Phase string `json:"phase"`
}

func planCheckpoints(ctx context.Context, plan string) ([]planCheckpoint, error) {
	out, err := getWorld(ctx).ok("--json", "plan", "rollback", plan)
	if err != nil {
		return nil, err
	}
	var cps []planCheckpoint
	if err := json.Unmarshal([]byte(out), &cps); err != nil {
		return nil, fmt.Errorf("plan rollback: %w: %s", err, out)
	}
	return cps, nil
}

func planCheckpointCount(ctx context.Context, plan string, n int) error {
	cps, err := planCheckpoints(ctx, plan)
	if err == nil && len(cps) != n {
		err = fmt.Errorf("checkpoints of %s: got %d, want %d: %+v", plan, len(cps), n, cps)
	}
	return err
}

func exportCorrection(ctx context.Context, plan string) error {
	p, _, err := showPlan(ctx, plan)
	if err != nil {
		return err
	}
	if len(p.Corrections) == 0 || p.Corrections[len(p.Corrections)-1].Archive == "" {
		return fmt.Errorf("plan %s has no revert correction with an archive", plan)
	}
	dir := filepath.Join(getWorld(ctx).dir, "export")
	getCheckpoints(ctx).exportDir = dir
	_, err = getWorld(ctx).ok("archive", "export", p.Corrections[len(p.Corrections)-1].Archive, dir)
	return err
}

func stepCheckpoint(ctx context.Context, plan string, step int) (string, error) {
	cps, err := planCheckpoints(ctx, plan)
	if err != nil {
		return "", err
	}
	for _, c := range cps {
		if c.Step == step && c.Phase == "before-step" {
			return c.ID, nil
		}
	}
	return "", fmt.Errorf("plan %s has no checkpoint before step %d: %+v", plan, step, cps)
}

func rollPlanBack(ctx context.Context, plan string, step int) error {
	id, err := stepCheckpoint(ctx, plan, step)
	if err != nil {
		return err
	}
	_, err = getWorld(ctx).ok("plan", "rollback", plan, "--to-checkpoint", id)
	return err
}

func tryRollPlanBack(ctx context.Context, plan string, step int) error {
	id, err := stepCheckpoint(ctx, plan, step)
	if err != nil {
		return err
	}
	return try(ctx, "plan", "rollback", plan, "--to-checkpoint", id)
}

func applyPlan(ctx context.Context, plan string) error {
	_, err := getWorld(ctx).ok("plan", "apply", plan)
	return err
}

func tryApplyPlan(ctx context.Context, plan string) error { return try(ctx, "plan", "apply", plan) }

func completePlan(ctx context.Context, plan string) error {
	_, err := getWorld(ctx).ok("plan", "complete", plan)
	return err
}

func planApplied(ctx context.Context, plan string) error {
	p, out, err := showPlan(ctx, plan)
	if err == nil && (!p.Applied || p.Status != "applied") {
		err = fmt.Errorf("plan %s is not applied: %s", plan, out)
	}
	return err
}

func baseContains(ctx context.Context, rel, want string) error {
	b, err := os.ReadFile(filepath.Join(getWorld(ctx).base, filepath.FromSlash(rel)))
	if err != nil {
		return err
	}
	if string(b) != want {
		return fmt.Errorf("%s in the base: got %q, want %q", rel, b, want)
	}
	return nil
}

func baseNotExists(ctx context.Context, rel string) error {
	if _, err := os.Lstat(filepath.Join(getWorld(ctx).base, filepath.FromSlash(rel))); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s in the base: got %v, want it missing", rel, err)
	}
	return nil
}

func hostWrites(ctx context.Context, content, rel string) error {
	// Past the sandbox's creation on the kernel's coarse clock.
	time.Sleep(20 * time.Millisecond)
	w := getWorld(ctx)
	if err := os.WriteFile(filepath.Join(w.base, filepath.FromSlash(rel)), []byte(content), 0o644); err != nil {
		return err
	}
	d, err := digest(w.base)
	w.baseDigest = d
	return err
}

// restart unmounts the sandbox (the serving process exits with its last
// mount), waits until the store is free, mounts again and checks that the
// plan's record and the files read the same.
func restart(ctx context.Context, sandbox, plan string) error {
	w := getWorld(ctx)
	_, before, err := showPlan(ctx, plan)
	if err != nil {
		return err
	}
	files, err := digest(w.mnt)
	if err != nil {
		return err
	}
	if err := unmountSandbox(ctx, sandbox); err != nil {
		return err
	}
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := layers.Open(w.store)
		if err == nil {
			st.Close()
			break
		}
		if !errors.Is(err, layers.ErrLocked) || time.Now().After(deadline) {
			return fmt.Errorf("store not released after unmount: %w", err)
		}
	}
	if err := mountSandbox(ctx, sandbox); err != nil {
		return err
	}
	_, after, err := showPlan(ctx, plan)
	if err != nil {
		return err
	}
	if after != before {
		return fmt.Errorf("plan %s changed across a restart:\nbefore %s\nafter %s", plan, before, after)
	}
	files2, err := digest(w.mnt)
	if err != nil {
		return err
	}
	if files2 != files {
		return fmt.Errorf("files changed across a restart:\nbefore %s\nafter %s", files, files2)
	}
	return nil
}
