// Package correction records what an agent does in a sandbox as a plan of
// decisions (steps), checkpoints the sandbox at the plan's milestones, and
// corrects a wrong decision: by reverting (a rollback to the decision's
// pre-decision checkpoint; the decision and every later one are marked for
// re-execution and what they wrote goes to the archive) or by appending a
// correction step that reverts nothing. Apply writes a plan's net changes
// onto the sandbox's base directory.
//
// Words:
//
//   - plan: a named record over one sandbox, with milestones (when to
//     checkpoint), its decisions in execution order, its corrections and
//     rollbacks. A subplan is a plan started under a decision of another.
//   - decision: one step, named by the agent (D), with a step index (1, 2, …
//     in the order steps begin), a label and a status: running, done,
//     failed, reverted or correction. Re-executing a reverted decision
//     appends a new entry with the same id; the newest entry of an id is
//     the one commands act on.
//   - pre-decision checkpoint: taken by `step begin` (milestone before-step,
//     on by default) before the decision does anything.
//
// Every change of a plan is one metadata transaction in the sandbox's store
// (keys under x/plan/). A change that takes a checkpoint or rolls back is
// written in the very transaction that freezes the layer or moves the head
// (checkpoint.Manager.CreateTx, RollbackTx), so a crash leaves the plan and
// the sandbox agreeing.
package correction

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// Sentinel errors of this package; layers' and checkpoint's pass through.
var (
	// ErrPlanApplied: the plan was applied to its base; it can no longer be
	// rolled back, corrected or stepped.
	ErrPlanApplied = errors.New("plan already applied")
	// ErrApplying: an apply of the plan is under way, or was interrupted
	// and could not be undone yet (see Apply); the plan takes no changes.
	ErrApplying = errors.New("plan is being applied")
	// ErrNoFailedDecision: a revert without a decision found no failed one.
	ErrNoFailedDecision = errors.New("no failed decision")
	// ErrStepNotBegun: step end of a decision that is not running.
	ErrStepNotBegun = errors.New("step not begun")
	// ErrConflict: the base changed under the sandbox since it was created
	// (a *ConflictError lists the paths).
	ErrConflict = errors.New("base changed since the sandbox was created")
	// ErrNothingToApply: the sandbox has no changes against its base.
	ErrNothingToApply = errors.New("nothing to apply")
	// ErrSandboxGone: the plan's sandbox was removed. It wraps
	// layers.ErrNotFound.
	ErrSandboxGone = fmt.Errorf("sandbox no longer exists: %w", layers.ErrNotFound)
)

// Milestones at which a plan checkpoints its sandbox.
const (
	BeforeStep   = "before-step"
	AfterStep    = "after-step"
	AfterSubplan = "after-subplan"
)

// Phases of the checkpoints a plan takes besides its milestones.
const (
	PhaseCorrection = "correction"
)

// Plan and decision statuses.
const (
	StatusOpen     = "open"
	StatusComplete = "complete"
	StatusApplying = "applying"
	StatusApplied  = "applied"

	StatusRunning    = "running"
	StatusDone       = "done"
	StatusFailed     = "failed"
	StatusReverted   = "reverted"
	StatusCorrection = "correction"
)

// Correction modes.
const (
	Revert = "revert"
	Append = "append"
)

// Plan is one plan with its whole record.
type Plan struct {
	ID             string           `json:"id"`
	Name           string           `json:"name"`
	Sandbox        string           `json:"sandbox"`
	SandboxCreated time.Time        `json:"sandbox_created"`
	Status         string           `json:"status"`
	Applied        bool             `json:"applied"`
	AppliedAt      time.Time        `json:"applied_at,omitzero"`
	CheckpointOn   []string         `json:"checkpoint_on"`
	Parent         string           `json:"parent,omitempty"`
	ParentDecision string           `json:"parent_decision,omitempty"`
	Subplans       []string         `json:"subplans"`
	Created        time.Time        `json:"created"`
	Decisions      []Decision       `json:"decisions"`
	Corrections    []Correction     `json:"corrections"`
	Rollbacks      []RollbackRecord `json:"rollbacks"`
}

// Decision is one step of a plan.
type Decision struct {
	ID               string    `json:"id"`
	Step             int       `json:"step"`
	Label            string    `json:"label"`
	Status           string    `json:"status"`
	NeedsReexecution bool      `json:"needs_reexecution"`
	Checkpoint       string    `json:"checkpoint"`
	AfterCheckpoint  string    `json:"after_checkpoint,omitempty"`
	Started          time.Time `json:"started"`
	Ended            time.Time `json:"ended,omitzero"`
}

// Correction records one correction of a plan.
type Correction struct {
	ID         string    `json:"id"`
	Mode       string    `json:"mode"`
	Reason     string    `json:"reason"`
	Decision   string    `json:"decision"`
	Step       string    `json:"step,omitempty"`
	Checkpoint string    `json:"checkpoint"`
	Archive    string    `json:"archive,omitempty"`
	Reverted   []string  `json:"reverted,omitempty"`
	Created    time.Time `json:"created"`
}

// RollbackRecord records a `plan rollback`.
type RollbackRecord struct {
	Checkpoint string    `json:"checkpoint"`
	Archive    string    `json:"archive"`
	Reverted   []string  `json:"reverted,omitempty"`
	Created    time.Time `json:"created"`
}

// Has reports whether the plan checkpoints at milestone m.
func (p Plan) Has(m string) bool {
	for _, x := range p.CheckpointOn {
		if x == m {
			return true
		}
	}
	return false
}

// NeedsReexecution lists the ids of the decisions marked for re-execution,
// in step order.
func (p Plan) NeedsReexecution() []string {
	out := []string{}
	for _, d := range p.Decisions {
		if d.NeedsReexecution {
			out = append(out, d.ID)
		}
	}
	return out
}

// latest returns the index of the newest entry of decision id, or -1.
func (p *Plan) latest(id string) int {
	for i := len(p.Decisions) - 1; i >= 0; i-- {
		if p.Decisions[i].ID == id {
			return i
		}
	}
	return -1
}

// Manager keeps the plans of one store.
type Manager struct {
	cp    *checkpoint.Manager
	store *layers.Store

	// mu serialises the changes of plans made through this manager, so
	// that an apply never reads a sandbox a rollback is moving.
	mu sync.Mutex
}

// New returns a Manager over the checkpoints of cp's store.
func New(cp *checkpoint.Manager) *Manager {
	return &Manager{cp: cp, store: cp.Store()}
}

func keyPlan(id string) string    { return "x/plan/p/" + id }
func keyPlanName(n string) string { return "x/plan/n/" + n }
func checkpointLabel(p *Plan, step int, phase string) string {
	return fmt.Sprintf("%s/%d/%s", p.Name, step, phase)
}

// CreateOptions configure a new plan.
type CreateOptions struct {
	// Sandbox the plan works in; a subplan takes its parent's.
	Sandbox string
	// CheckpointOn lists the milestones; nil means before-step only.
	CheckpointOn []string
	// Parent and ParentDecision start the plan as a subplan under a
	// decision of another plan.
	Parent, ParentDecision string
}

// Create records a new plan named name.
func (m *Manager) Create(name string, o CreateOptions) (Plan, error) {
	if !layers.ValidName(name) {
		return Plan{}, fmt.Errorf("plan name %q: want 1-64 letters, digits, '.', '_' or '-': %w", name, layers.ErrInvalid)
	}
	ms := o.CheckpointOn
	if ms == nil {
		ms = []string{BeforeStep}
	}
	seen := map[string]bool{}
	on := []string{}
	for _, x := range ms {
		x = strings.TrimSpace(x)
		switch x {
		case BeforeStep, AfterStep, AfterSubplan:
		case "", "none":
			continue
		default:
			return Plan{}, fmt.Errorf("plan %s: milestone %q: want before-step, after-step or after-subplan: %w", name, x, layers.ErrInvalid)
		}
		if !seen[x] {
			seen[x] = true
			on = append(on, x)
		}
	}
	p := Plan{
		ID: layers.NewID(), Name: name, Status: StatusOpen, CheckpointOn: on, Created: time.Now().UTC(),
		Subplans: []string{}, Decisions: []Decision{}, Corrections: []Correction{}, Rollbacks: []RollbackRecord{},
	}
	var parent *Plan
	if o.Parent != "" {
		pp, err := m.Get(o.Parent)
		if err != nil {
			return Plan{}, fmt.Errorf("plan %s: parent: %w", name, err)
		}
		if o.Sandbox != "" && o.Sandbox != pp.Sandbox {
			return Plan{}, fmt.Errorf("plan %s: sandbox %s differs from parent's %s: %w", name, o.Sandbox, pp.Sandbox, layers.ErrInvalid)
		}
		if pp.latest(o.ParentDecision) < 0 {
			return Plan{}, fmt.Errorf("plan %s: parent %s: decision %q: %w", name, pp.Name, o.ParentDecision, layers.ErrNotFound)
		}
		parent = &pp
		o.Sandbox = pp.Sandbox
		p.Parent, p.ParentDecision = pp.ID, o.ParentDecision
	} else if o.ParentDecision != "" {
		return Plan{}, fmt.Errorf("plan %s: a parent decision needs a parent plan: %w", name, layers.ErrInvalid)
	}
	if o.Sandbox == "" {
		return Plan{}, fmt.Errorf("plan %s: no sandbox: %w", name, layers.ErrInvalid)
	}
	info, err := m.store.Sandbox(o.Sandbox)
	if err != nil {
		return Plan{}, fmt.Errorf("plan %s: %w", name, err)
	}
	p.Sandbox, p.SandboxCreated = info.Name, info.Created
	err = m.store.Update(func(tx *layers.Txn) error {
		if _, err := tx.Get(keyPlanName(name)); err == nil {
			return fmt.Errorf("plan %s: %w", name, layers.ErrExists)
		}
		if parent != nil {
			pp, err := m.loadDoc(tx, parent.ID)
			if err != nil {
				return err
			}
			pp.p.Subplans = append(pp.p.Subplans, p.ID)
			if err := pp.write(tx); err != nil {
				return err
			}
		}
		if err := tx.Set(keyPlanName(name), []byte(p.ID)); err != nil {
			return err
		}
		return newPlanDoc(&p).write(tx)
	})
	if err != nil {
		return Plan{}, err
	}
	return p, nil
}

// List returns every plan of the store, oldest first. It first finishes
// the applies a crash interrupted (see Apply); one that cannot be finished
// is listed as applying, and Get says why.
func (m *Manager) List() ([]Plan, error) {
	out := []Plan{}
	if err := m.recoverApplies(); err != nil {
		return out, err
	}
	err := m.store.View(func(tx *layers.Txn) error {
		return tx.Scan("x/plan/p/", func(key string, _ []byte) error {
			p, err := getPlan(tx, strings.TrimPrefix(key, "x/plan/p/"))
			if err != nil {
				return err
			}
			out = append(out, *p)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// recoverApplies finishes the applies a crash interrupted (see Apply), as
// far as they can be finished.
func (m *Manager) recoverApplies() error {
	var pending []string
	err := m.store.View(func(tx *layers.Txn) error {
		return tx.Scan("x/plan/apply/", func(key string, _ []byte) error {
			pending = append(pending, strings.TrimPrefix(key, "x/plan/apply/"))
			return nil
		})
	})
	for _, id := range pending {
		_ = m.recoverApply(id)
	}
	return err
}

// resolve finds a plan's id by full id, unique id prefix of 6+ characters
// or name.
func resolve(tx *layers.Txn, ref string) (string, error) {
	if _, err := tx.Get(keyPlan(strings.ToUpper(ref))); err == nil {
		return strings.ToUpper(ref), nil
	}
	found := map[string]bool{}
	if id, err := tx.Get(keyPlanName(ref)); err == nil {
		found[string(id)] = true
	}
	if len(ref) >= 6 {
		err := tx.Scan("x/plan/p/"+strings.ToUpper(ref), func(key string, _ []byte) error {
			found[strings.TrimPrefix(key, "x/plan/p/")] = true
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("plan %s: %w", ref, layers.ErrNotFound)
	case 1:
		for id := range found {
			return id, nil
		}
	}
	return "", fmt.Errorf("plan %s matches %d plans: %w", ref, len(found), checkpoint.ErrAmbiguous)
}

// load reads plan id inside tx and checks that its sandbox still exists.
func (m *Manager) load(tx *layers.Txn, id string) (*Plan, error) {
	d, err := m.loadDoc(tx, id)
	if err != nil {
		return nil, err
	}
	return d.p, nil
}

// loadDoc is load, keeping what writing the plan back needs.
func (m *Manager) loadDoc(tx *layers.Txn, id string) (*planDoc, error) {
	d, err := readPlan(tx, id)
	if err != nil {
		return nil, err
	}
	if err := sandboxLives(tx, d.p); err != nil {
		return nil, err
	}
	return d, nil
}

// sandboxLives checks that plan p's sandbox still exists: the one it was
// made in, not another made since under its name.
func sandboxLives(tx *layers.Txn, p *Plan) error {
	info, err := tx.Sandbox(p.Sandbox)
	if err != nil || !info.Created.Equal(p.SandboxCreated) {
		return fmt.Errorf("plan %s: sandbox %s: %w", p.Name, p.Sandbox, ErrSandboxGone)
	}
	return nil
}

// Get returns the plan ref names (id, 6+ character id prefix or name). It
// fails with ErrSandboxGone when the plan's sandbox was removed. An apply
// of the plan that a crash interrupted is finished first (see Apply); if
// that fails, so does Get, saying why.
func (m *Manager) Get(ref string) (Plan, error) {
	p, pending, err := m.get(ref)
	if err == nil && pending {
		if err = m.recoverApply(p.ID); err == nil {
			p, _, err = m.get(p.ID)
		}
	}
	return p, err
}

// get reads plan ref and whether it has an apply journal.
func (m *Manager) get(ref string) (Plan, bool, error) {
	var p *Plan
	pending := false
	err := m.store.View(func(tx *layers.Txn) error {
		id, err := resolve(tx, ref)
		if err != nil {
			return err
		}
		_, jerr := tx.Get(keyApply(id))
		pending = jerr == nil
		p, err = m.load(tx, id)
		return err
	})
	if err != nil {
		return Plan{}, false, err
	}
	return *p, pending, nil
}

// final refuses a change of plan p when it is applied or being applied.
func final(p *Plan) error {
	switch {
	case p.Applied:
		return fmt.Errorf("plan %s: %w", p.Name, ErrPlanApplied)
	case p.Status == StatusApplying:
		return fmt.Errorf("plan %s: %w", p.Name, ErrApplying)
	}
	return nil
}

// mutate reads plan id in tx, refuses an applied plan, runs fn and writes
// the plan back.
func (m *Manager) mutate(tx *layers.Txn, id string, fn func(p *Plan) error) error {
	d, err := m.loadDoc(tx, id)
	if err != nil {
		return err
	}
	if err := final(d.p); err != nil {
		return err
	}
	if err := fn(d.p); err != nil {
		return err
	}
	return d.write(tx)
}

// prepare resolves ref and returns the plan as stored, refusing an applied
// one; the returned copy only serves for what is decided before the
// transaction (checkpoint labels, sandbox).
func (m *Manager) prepare(ref string) (Plan, error) {
	p, err := m.Get(ref)
	if err != nil {
		return Plan{}, err
	}
	return p, final(&p)
}

// errChanged: the plan changed between reading it and the transaction that
// takes its checkpoint (another command ran at the same time).
var errChanged = errors.New("plan changed concurrently; retry")

// Begin starts decision id of plan ref: with the before-step milestone, it
// takes the pre-decision checkpoint in the same transaction. A decision
// that was reverted may begin again (re-execution); one that is running,
// done or failed may not.
func (m *Manager) Begin(ref, id, label string) (Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == "" {
		return Decision{}, fmt.Errorf("step begin: no decision: %w", layers.ErrInvalid)
	}
	s, err := m.prepareStep(ref, id)
	if err != nil {
		return Decision{}, err
	}
	p := *s.p
	step := s.steps + 1
	var d Decision
	record := func(s *stepDoc, cpID string) error {
		if s.steps+1 != step {
			return fmt.Errorf("plan %s: %w", s.p.Name, errChanged)
		}
		if l := s.latest(); l != nil && l.Status != StatusReverted {
			return fmt.Errorf("plan %s: decision %s is %s: %w", s.p.Name, id, l.Status, layers.ErrExists)
		}
		for i := range s.ds {
			s.ds[i].NeedsReexecution = false
		}
		d = Decision{ID: id, Step: step, Label: label, Status: StatusRunning, Checkpoint: cpID, Started: time.Now().UTC()}
		s.add(d)
		return nil
	}
	// Check before freezing, so a refused step leaves no checkpoint.
	if err := record(s, ""); err != nil {
		return Decision{}, err
	}
	if !p.Has(BeforeStep) {
		err = m.store.Update(func(tx *layers.Txn) error { return m.stepTx(tx, p.ID, id, "", record) })
		if err != nil {
			return Decision{}, err
		}
		return d, nil
	}
	o := checkpoint.Options{Label: checkpointLabel(&p, step, BeforeStep), Reason: label, Plan: p.ID, Step: step, Decision: id, Phase: BeforeStep}
	_, err = m.cp.CreateTx(p.Sandbox, o, func(tx *layers.Txn, cp checkpoint.Checkpoint) error {
		return m.stepTx(tx, p.ID, id, cp.ID, record)
	})
	if err != nil {
		return Decision{}, err
	}
	return d, nil
}

// End ends the running decision id as done or failed; with the after-step
// milestone it checkpoints in the same transaction.
func (m *Manager) End(ref, id string, failed bool) (Decision, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.prepareStep(ref, id)
	if err != nil {
		return Decision{}, err
	}
	p := *s.p
	var d Decision
	record := func(s *stepDoc, cpID string) error {
		l := s.latest()
		if l == nil || l.Status != StatusRunning {
			return fmt.Errorf("plan %s: decision %q: %w", s.p.Name, id, ErrStepNotBegun)
		}
		l.Status = StatusDone
		if failed {
			l.Status = StatusFailed
		}
		l.Ended = time.Now().UTC()
		l.AfterCheckpoint = cpID
		d = *l
		return nil
	}
	if err := record(s, ""); err != nil {
		return Decision{}, err
	}
	if !p.Has(AfterStep) {
		err = m.store.Update(func(tx *layers.Txn) error { return m.stepTx(tx, p.ID, id, "", record) })
		if err != nil {
			return Decision{}, err
		}
		return d, nil
	}
	o := checkpoint.Options{Label: checkpointLabel(&p, d.Step, AfterStep), Reason: d.Label, Plan: p.ID, Step: d.Step, Decision: id, Phase: AfterStep}
	_, err = m.cp.CreateTx(p.Sandbox, o, func(tx *layers.Txn, cp checkpoint.Checkpoint) error {
		return m.stepTx(tx, p.ID, id, cp.ID, record)
	})
	if err != nil {
		return Decision{}, err
	}
	return d, nil
}

// errPending: the plan has an apply journal, which Get finishes first.
var errPending = errors.New("apply pending")

// prepareStep resolves ref and reads what a step of decision did needs of
// the plan as stored, refusing an applied plan; what it returns only
// serves for what is decided before the transaction (checkpoint labels,
// sandbox, the checks that refuse a step before it checkpoints).
func (m *Manager) prepareStep(ref, did string) (*stepDoc, error) {
	var s *stepDoc
	err := m.store.View(func(tx *layers.Txn) error {
		id, err := resolve(tx, ref)
		if err != nil {
			return err
		}
		if _, err := tx.Get(keyApply(id)); err == nil {
			return errPending
		}
		s, err = m.loadStep(tx, id, did)
		return err
	})
	if errors.Is(err, errPending) {
		// An apply a crash interrupted is finished first, as Get does.
		var p Plan
		if p, err = m.Get(ref); err == nil {
			err = m.store.View(func(tx *layers.Txn) error {
				s, err = m.loadStep(tx, p.ID, did)
				return err
			})
		}
	}
	if err != nil {
		return nil, err
	}
	return s, nil
}

// loadStep reads, inside tx, what a step of decision did needs of plan id
// (readStep), checking that its sandbox still exists and that it takes
// changes.
func (m *Manager) loadStep(tx *layers.Txn, id, did string) (*stepDoc, error) {
	s, err := readStep(tx, id, did)
	if err != nil {
		return nil, err
	}
	if err := sandboxLives(tx, s.p); err != nil {
		return nil, err
	}
	if err := final(s.p); err != nil {
		return nil, err
	}
	return s, nil
}

// stepTx reads plan id's step record of decision did in tx, has record
// change it and writes it back.
func (m *Manager) stepTx(tx *layers.Txn, id, did, cpID string, record func(s *stepDoc, cpID string) error) error {
	s, err := m.loadStep(tx, id, did)
	if err != nil {
		return err
	}
	if err := record(s, cpID); err != nil {
		return err
	}
	return s.write(tx)
}

// Complete marks a plan complete. When it is a subplan whose parent has the
// after-subplan milestone, the parent's sandbox is checkpointed (phase
// after-subplan, the parent's plan, step and decision) in the same
// transaction.
func (m *Manager) Complete(ref string) (Plan, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.prepare(ref)
	if err != nil {
		return Plan{}, err
	}
	if p.Status == StatusComplete {
		return Plan{}, fmt.Errorf("plan %s is already complete: %w", p.Name, layers.ErrInvalid)
	}
	var out Plan
	done := func(tx *layers.Txn) error {
		return m.mutate(tx, p.ID, func(q *Plan) error {
			if q.Status == StatusComplete {
				return fmt.Errorf("plan %s: %w", q.Name, errChanged)
			}
			q.Status = StatusComplete
			out = *q
			return nil
		})
	}
	var parent Plan
	if p.Parent != "" {
		if parent, err = m.Get(p.Parent); err != nil {
			return Plan{}, err
		}
	}
	if !parent.Has(AfterSubplan) {
		if err := m.store.Update(done); err != nil {
			return Plan{}, err
		}
		return out, nil
	}
	step := 0
	if i := parent.latest(p.ParentDecision); i >= 0 {
		step = parent.Decisions[i].Step
	}
	o := checkpoint.Options{
		Label: fmt.Sprintf("%s/%s", checkpointLabel(&parent, step, AfterSubplan), p.Name), Reason: p.Name,
		Plan: parent.ID, Step: step, Decision: p.ParentDecision, Phase: AfterSubplan,
	}
	_, err = m.cp.CreateTx(p.Sandbox, o, func(tx *layers.Txn, _ checkpoint.Checkpoint) error { return done(tx) })
	if err != nil {
		return Plan{}, err
	}
	return out, nil
}

// Checkpoints lists the checkpoints of a plan and of its subplans, oldest
// first (checkpoints tagged with the plan's name count too).
func (m *Manager) Checkpoints(ref string) ([]checkpoint.Checkpoint, error) {
	p, err := m.Get(ref)
	if err != nil {
		return nil, err
	}
	return m.checkpointsOf(p)
}

func (m *Manager) checkpointsOf(p Plan) ([]checkpoint.Checkpoint, error) {
	mine := map[string]bool{}
	p.tags(mine)
	return m.taggedCheckpoints(p.Sandbox, mine)
}

// tags adds to mine what the plan's checkpoints name as their plan: its
// id, its name and its subplans.
func (p Plan) tags(mine map[string]bool) {
	mine[p.ID], mine[p.Name] = true, true
	for _, s := range p.Subplans {
		mine[s] = true
	}
}

// taggedCheckpoints lists the checkpoints of sandbox whose plan mine
// holds, oldest first.
func (m *Manager) taggedCheckpoints(sandbox string, mine map[string]bool) ([]checkpoint.Checkpoint, error) {
	all, err := m.cp.List(sandbox)
	if err != nil {
		return nil, err
	}
	out := []checkpoint.Checkpoint{}
	for _, c := range all {
		if c.Plan != "" && mine[c.Plan] {
			out = append(out, c)
		}
	}
	return out, nil
}

// Held lists the checkpoints of sandbox that its open plans (not complete,
// not applied) and their subplans took: such a plan may still roll back
// or revert to any of them, so retention keeps them
// (checkpoint.Manager.PruneHolding). Completing or applying a plan lets
// them go.
//
// It reads the plans' records only, not their decisions, which it does not
// need (List would read every one).
func (m *Manager) Held(sandbox string) (map[string]bool, error) {
	mine := map[string]bool{}
	err := m.recoverApplies()
	if err == nil {
		err = m.store.View(func(tx *layers.Txn) error {
			return tx.Scan("x/plan/p/", func(key string, _ []byte) error {
				r, err := readRecord(tx, strings.TrimPrefix(key, "x/plan/p/"))
				if err != nil {
					return err
				}
				if r.Sandbox == sandbox && !r.Applied && r.Status == StatusOpen {
					r.tags(mine)
				}
				return nil
			})
		})
	}
	if err != nil {
		return nil, fmt.Errorf("plans of %s: %w", sandbox, err)
	}
	held := map[string]bool{}
	if len(mine) == 0 {
		return held, nil
	}
	cps, err := m.taggedCheckpoints(sandbox, mine)
	if err != nil {
		return nil, fmt.Errorf("checkpoints of %s: %w", sandbox, err)
	}
	for _, c := range cps {
		held[c.ID] = true
	}
	return held, nil
}

// RollbackResult is what a plan rollback or revert reports.
type RollbackResult struct {
	checkpoint.RollbackResult
	Plan     string   `json:"plan"`
	Reverted []string `json:"reverted"`
}

// undone reports whether decision d came after checkpoint cp was taken,
// so that rolling back to cp undoes it.
func undone(d Decision, cp checkpoint.Checkpoint) bool {
	return d.Step > cp.Step || (d.Step == cp.Step && cp.Phase == BeforeStep)
}

// markReverted marks the decisions from index i on as reverted and due for
// re-execution, and returns their ids. Entries already reverted stay as
// they are.
func markReverted(p *Plan, keep func(d Decision) bool) []string {
	out := []string{}
	for j := range p.Decisions {
		d := &p.Decisions[j]
		if keep(*d) || d.Status == StatusReverted {
			continue
		}
		d.Status = StatusReverted
		d.NeedsReexecution = true
		out = append(out, d.ID)
	}
	return out
}

// Rollback rolls the plan's sandbox back to cpRef, one of the plan's
// checkpoints. Decisions begun after that checkpoint are marked reverted
// and due for re-execution, in the transaction that moves the head.
func (m *Manager) Rollback(ref, cpRef string) (RollbackResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.prepare(ref)
	if err != nil {
		return RollbackResult{}, err
	}
	cp, err := m.cp.ResolveIn(p.Sandbox, cpRef)
	if err != nil {
		return RollbackResult{}, fmt.Errorf("plan %s: %w", p.Name, err)
	}
	cps, err := m.checkpointsOf(p)
	if err != nil {
		return RollbackResult{}, err
	}
	ok := false
	for _, c := range cps {
		ok = ok || c.ID == cp.ID
	}
	if !ok {
		return RollbackResult{}, fmt.Errorf("plan %s: checkpoint %s is not one of the plan's: %w", p.Name, cp.ID, layers.ErrNotFound)
	}
	var reverted []string
	res, err := m.cp.RollbackTx(p.Sandbox, cp.ID, func(tx *layers.Txn, archive string) error {
		return m.mutate(tx, p.ID, func(p *Plan) error {
			if cp.Plan == p.ID || cp.Plan == p.Name {
				reverted = markReverted(p, func(d Decision) bool { return !undone(d, cp) })
			} else {
				reverted = []string{} // a subplan's checkpoint: the parent's record stays
			}
			p.Rollbacks = append(p.Rollbacks, RollbackRecord{Checkpoint: cp.ID, Archive: archive, Reverted: reverted, Created: time.Now().UTC()})
			return nil
		})
	})
	if err != nil {
		return RollbackResult{}, err
	}
	return RollbackResult{RollbackResult: res, Plan: p.ID, Reverted: reverted}, nil
}

// CorrectOptions describe a correction.
type CorrectOptions struct {
	// Mode is Revert or Append.
	Mode string
	// Decision to revert to (Revert); "" means the first failed one.
	Decision string
	// Reason is required.
	Reason string
	// Step is the text of the appended correction step (Append).
	Step string
}

// CorrectResult is what a correction reports.
type CorrectResult struct {
	Correction
	Plan          string   `json:"plan"`
	ChangedPaths  []string `json:"changed_paths,omitempty"`
	RestoredFiles int      `json:"restored_files,omitempty"`
}

// Correct corrects a plan. Revert rolls the sandbox back to the
// pre-decision checkpoint of o.Decision (or of the first failed decision),
// marks it and every later decision reverted and due for re-execution and
// records the correction with the rollback's archive, all in the
// transaction that moves the head. Append records a correction decision
// after the current one and checkpoints (phase correction), reverting
// nothing.
func (m *Manager) Correct(ref string, o CorrectOptions) (CorrectResult, error) {
	if strings.TrimSpace(o.Reason) == "" {
		return CorrectResult{}, fmt.Errorf("correct: a reason is required: %w", layers.ErrInvalid)
	}
	switch o.Mode {
	case Revert:
		return m.revert(ref, o)
	case Append:
		if o.Decision != "" {
			return CorrectResult{}, fmt.Errorf("correct: --decision goes with --mode revert: %w", layers.ErrInvalid)
		}
		return m.appendStep(ref, o)
	}
	return CorrectResult{}, fmt.Errorf("correct: mode %q: want revert or append: %w", o.Mode, layers.ErrInvalid)
}

func (m *Manager) revert(ref string, o CorrectOptions) (CorrectResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.prepare(ref)
	if err != nil {
		return CorrectResult{}, err
	}
	target := -1
	if o.Decision != "" {
		if target = p.latest(o.Decision); target < 0 {
			return CorrectResult{}, fmt.Errorf("plan %s: decision %q: %w", p.Name, o.Decision, layers.ErrNotFound)
		}
	} else {
		for i, d := range p.Decisions {
			if d.Status == StatusFailed {
				target = i
				break
			}
		}
		if target < 0 {
			return CorrectResult{}, fmt.Errorf("plan %s: nothing to revert to without --decision: %w", p.Name, ErrNoFailedDecision)
		}
	}
	d := p.Decisions[target]
	if d.Checkpoint == "" {
		return CorrectResult{}, fmt.Errorf("plan %s: decision %s has no pre-decision checkpoint (milestone before-step is off): %w", p.Name, d.ID, layers.ErrNotFound)
	}
	c := Correction{ID: layers.NewID(), Mode: Revert, Reason: o.Reason, Decision: d.ID, Checkpoint: d.Checkpoint}
	res, err := m.cp.RollbackTx(p.Sandbox, d.Checkpoint, func(tx *layers.Txn, archive string) error {
		return m.mutate(tx, p.ID, func(p *Plan) error {
			c.Reverted = markReverted(p, func(x Decision) bool { return x.Step < d.Step })
			c.Archive = archive
			c.Created = time.Now().UTC()
			p.Corrections = append(p.Corrections, c)
			return nil
		})
	})
	if err != nil {
		return CorrectResult{}, err
	}
	return CorrectResult{Correction: c, Plan: p.ID, ChangedPaths: res.ChangedPaths, RestoredFiles: res.RestoredFiles}, nil
}

func (m *Manager) appendStep(ref string, o CorrectOptions) (CorrectResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, err := m.prepare(ref)
	if err != nil {
		return CorrectResult{}, err
	}
	step := len(p.Decisions) + 1
	n := 1
	for _, c := range p.Corrections {
		if c.Mode == Append {
			n++
		}
	}
	text := o.Step
	if text == "" {
		text = o.Reason
	}
	id := fmt.Sprintf("correction-%d", n)
	c := Correction{ID: layers.NewID(), Mode: Append, Reason: o.Reason, Decision: id, Step: o.Step}
	opts := checkpoint.Options{Label: checkpointLabel(&p, step, PhaseCorrection), Reason: o.Reason, Plan: p.ID, Step: step, Decision: id, Phase: PhaseCorrection}
	_, err = m.cp.CreateTx(p.Sandbox, opts, func(tx *layers.Txn, cp checkpoint.Checkpoint) error {
		return m.mutate(tx, p.ID, func(p *Plan) error {
			if len(p.Decisions)+1 != step {
				return fmt.Errorf("plan %s: %w", p.Name, errChanged)
			}
			now := time.Now().UTC()
			p.Decisions = append(p.Decisions, Decision{ID: id, Step: step, Label: text, Status: StatusCorrection, Checkpoint: cp.ID, Started: now, Ended: now})
			c.Checkpoint = cp.ID
			c.Created = now
			p.Corrections = append(p.Corrections, c)
			return nil
		})
	})
	if err != nil {
		return CorrectResult{}, err
	}
	return CorrectResult{Correction: c, Plan: p.ID}, nil
}
