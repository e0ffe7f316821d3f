package control

import (
	"context"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/correction"
)

// Op names of the plan handlers.
const (
	OpPlanCreate      = "plan.create"
	OpPlanList        = "plan.list"
	OpPlanShow        = "plan.show"
	OpPlanStepBegin   = "plan.step.begin"
	OpPlanStepEnd     = "plan.step.end"
	OpPlanComplete    = "plan.complete"
	OpPlanCheckpoints = "plan.checkpoints"
	OpPlanRollback    = "plan.rollback"
	OpPlanCorrect     = "plan.correct"
	OpPlanApply       = "plan.apply"
)

// PlanCreateArgs are the arguments of plan.create. A nil CheckpointOn
// means the default milestones (before-step); "none" turns them all off.
type PlanCreateArgs struct {
	Name           string   `json:"name"`
	Sandbox        string   `json:"sandbox,omitempty"`
	CheckpointOn   []string `json:"checkpoint_on,omitempty"`
	Parent         string   `json:"parent,omitempty"`
	ParentDecision string   `json:"parent_decision,omitempty"`
}

// PlanArgs name one plan by id, unique id prefix of 6+ characters, or name.
type PlanArgs struct {
	Plan string `json:"plan"`
}

// PlanStepArgs are the arguments of plan.step.begin and plan.step.end.
type PlanStepArgs struct {
	Plan     string `json:"plan"`
	Decision string `json:"decision"`
	Label    string `json:"label,omitempty"`
	Failed   bool   `json:"failed,omitempty"`
}

// PlanRollbackArgs are the arguments of plan.rollback.
type PlanRollbackArgs struct {
	Plan       string `json:"plan"`
	Checkpoint string `json:"checkpoint"`
}

// PlanCorrectArgs are the arguments of plan.correct.
type PlanCorrectArgs struct {
	Plan     string `json:"plan"`
	Mode     string `json:"mode"`
	Decision string `json:"decision,omitempty"`
	Reason   string `json:"reason"`
	Step     string `json:"step,omitempty"`
}

// PlanReport is what plan.show and plan.list print of a plan: its record,
// what needs re-execution and (show) its checkpoints.
type PlanReport struct {
	correction.Plan
	NeedsReexecution []string                `json:"needs_reexecution"`
	Checkpoints      []checkpoint.Checkpoint `json:"checkpoints,omitempty"`
}

// plans returns a plan manager over the server's checkpoints. Plan ops run
// under Exclusive, which also serialises them with each other.
func (s *Server) plans() *correction.Manager { return correction.New(s.checkpoints()) }

// registerPlanOps registers the handlers of this file.
func (s *Server) registerPlanOps() {
	s.Handle(OpPlanCreate, Typed(s.planCreate))
	s.Handle(OpPlanList, Typed(s.planList))
	s.Handle(OpPlanShow, Typed(s.planShow))
	s.Handle(OpPlanStepBegin, Typed(s.planStepBegin))
	s.Handle(OpPlanStepEnd, Typed(s.planStepEnd))
	s.Handle(OpPlanComplete, Typed(s.planComplete))
	s.Handle(OpPlanCheckpoints, Typed(s.planCheckpoints))
	s.Handle(OpPlanRollback, Typed(s.planRollback))
	s.Handle(OpPlanCorrect, Typed(s.planCorrect))
	s.Handle(OpPlanApply, Typed(s.planApply))
}

func (s *Server) planCreate(ctx context.Context, a PlanCreateArgs) (PlanReport, error) {
	return exclusive(s, func() (PlanReport, error) {
		p, err := s.plans().Create(a.Name, correction.CreateOptions{
			Sandbox: a.Sandbox, CheckpointOn: a.CheckpointOn, Parent: a.Parent, ParentDecision: a.ParentDecision,
		})
		return PlanReport{Plan: p, NeedsReexecution: p.NeedsReexecution()}, err
	})
}

func (s *Server) planList(ctx context.Context, _ empty) ([]PlanReport, error) {
	ps, err := s.plans().List()
	if err != nil {
		return nil, err
	}
	out := make([]PlanReport, 0, len(ps))
	for _, p := range ps {
		out = append(out, PlanReport{Plan: p, NeedsReexecution: p.NeedsReexecution()})
	}
	return out, nil
}

func (s *Server) planShow(ctx context.Context, a PlanArgs) (PlanReport, error) {
	m := s.plans()
	p, err := m.Get(a.Plan)
	if err != nil {
		return PlanReport{}, err
	}
	cps, err := m.Checkpoints(p.ID)
	if err != nil {
		return PlanReport{}, err
	}
	return PlanReport{Plan: p, NeedsReexecution: p.NeedsReexecution(), Checkpoints: cps}, nil
}

func (s *Server) planStepBegin(ctx context.Context, a PlanStepArgs) (correction.Decision, error) {
	return exclusive(s, func() (correction.Decision, error) { return s.plans().Begin(a.Plan, a.Decision, a.Label) })
}

func (s *Server) planStepEnd(ctx context.Context, a PlanStepArgs) (correction.Decision, error) {
	return exclusive(s, func() (correction.Decision, error) { return s.plans().End(a.Plan, a.Decision, a.Failed) })
}

func (s *Server) planComplete(ctx context.Context, a PlanArgs) (correction.Plan, error) {
	return exclusive(s, func() (correction.Plan, error) { return s.plans().Complete(a.Plan) })
}

func (s *Server) planCheckpoints(ctx context.Context, a PlanArgs) ([]checkpoint.Checkpoint, error) {
	return s.plans().Checkpoints(a.Plan)
}

func (s *Server) planRollback(ctx context.Context, a PlanRollbackArgs) (correction.RollbackResult, error) {
	return exclusive(s, func() (correction.RollbackResult, error) { return s.plans().Rollback(a.Plan, a.Checkpoint) })
}

func (s *Server) planCorrect(ctx context.Context, a PlanCorrectArgs) (correction.CorrectResult, error) {
	return exclusive(s, func() (correction.CorrectResult, error) {
		return s.plans().Correct(a.Plan, correction.CorrectOptions{Mode: a.Mode, Decision: a.Decision, Reason: a.Reason, Step: a.Step})
	})
}

func (s *Server) planApply(ctx context.Context, a PlanArgs) (correction.ApplyResult, error) {
	return exclusive(s, func() (correction.ApplyResult, error) { return s.plans().Apply(a.Plan) })
}
