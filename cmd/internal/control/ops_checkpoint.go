package control

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// Op names of the checkpoint, rollback, archive, layer and gc handlers.
const (
	OpCheckpointCreate = "checkpoint.create"
	OpCheckpointList   = "checkpoint.list"
	OpCheckpointShow   = "checkpoint.show"
	OpCheckpointDiff   = "checkpoint.diff"
	OpCheckpointRemove = "checkpoint.rm"
	OpCheckpointPrune  = "checkpoint.prune"
	OpRollback         = "rollback"
	OpVerify           = "verify"
	OpLayersList       = "layers.list"
	OpLayersInspect    = "layers.inspect"
	OpArchiveList      = "archive.list"
	OpArchiveExport    = "archive.export"
	OpArchiveRestore   = "archive.restore"
	OpGC               = "gc"
	OpSandboxFork      = "sandbox.fork"
)

// CheckpointCreateArgs are the arguments of checkpoint.create.
type CheckpointCreateArgs struct {
	Sandbox    string `json:"sandbox"`
	Label      string `json:"label,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Plan       string `json:"plan,omitempty"`
	Step       int    `json:"step,omitempty"`
	Decision   string `json:"decision,omitempty"`
	SourceTool string `json:"source_tool,omitempty"`
	Phase      string `json:"phase,omitempty"`
}

// CheckpointListArgs are the arguments of checkpoint.list; Plan, if set,
// keeps only that plan's checkpoints.
type CheckpointListArgs struct {
	Sandbox string `json:"sandbox"`
	Plan    string `json:"plan,omitempty"`
}

// IDArgs name one checkpoint, layer or archive by id, unique prefix of 6+
// characters, or (checkpoints) unique label.
type IDArgs struct {
	ID string `json:"id"`
}

// DiffArgs are the arguments of checkpoint.diff; an empty To is the live
// state of From's sandbox.
type DiffArgs struct {
	From string `json:"from"`
	To   string `json:"to,omitempty"`
	// Sandbox, when set, is where From is looked up (a label may repeat
	// across sandboxes).
	Sandbox string `json:"sandbox,omitempty"`
}

// PruneArgs are the arguments of checkpoint.prune. With neither KeepLast
// nor KeepWithin, checkpoint.DefaultPolicy applies. KeepWithin is a
// duration: "36h", "90m", "7d".
type PruneArgs struct {
	Sandbox    string `json:"sandbox"`
	KeepLast   *int   `json:"keep_last,omitempty"`
	KeepWithin string `json:"keep_within,omitempty"`
}

// PruneReport is checkpoint.prune's result: the policy applied and what
// it removed and kept.
type PruneReport struct {
	KeepLast   int    `json:"keep_last"`
	KeepWithin string `json:"keep_within"`
	checkpoint.PruneResult
}

// RollbackArgs are the arguments of rollback.
type RollbackArgs struct {
	Sandbox    string `json:"sandbox"`
	Checkpoint string `json:"checkpoint"`
}

// VerifyArgs name a sandbox (all its checkpoints) or one checkpoint.
type VerifyArgs struct {
	Ref string `json:"ref"`
}

// VerifyReport is one checkpoint's verification; Error says why it could
// not be recomputed at all (a corrupt block, say).
type VerifyReport struct {
	checkpoint.VerifyResult
	Label string `json:"label,omitempty"`
	Error string `json:"error,omitempty"`
}

// LayersArgs are the arguments of layers.list.
type LayersArgs struct {
	Sandbox  string `json:"sandbox"`
	Archived bool   `json:"archived,omitempty"`
}

// ExportArgs are the arguments of archive.export. Dir must be absolute,
// and empty or missing.
type ExportArgs struct {
	Archive string `json:"archive"`
	Dir     string `json:"dir"`
}

// ExportResult is archive.export's result.
type ExportResult struct {
	Archive string `json:"archive"`
	Dir     string `json:"dir"`
	Files   int    `json:"files"`
}

// ForkArgs are the arguments of sandbox.fork.
type ForkArgs struct {
	Name string `json:"name"`
	From string `json:"from"`
}

// invalidator tells a sandbox's live mount, if this server serves one,
// that its view was repointed.
type invalidator struct{ s *Server }

func (i invalidator) Invalidate(sandbox string) {
	if m, ok := i.s.Mount(sandbox); ok {
		m.Invalidate()
	}
}

func (i invalidator) InvalidateTouched(sandbox string, t layers.Touched) {
	if m, ok := i.s.Mount(sandbox); ok {
		m.InvalidateTouched(t)
	}
}

// checkpoints returns the checkpoint manager of the server's store, wired
// to the server's live mounts. A Manager keeps no state of its own. Its
// collections leave the hidden-block pass to the ops, which run it after
// Exclusive (collectHidden).
func (s *Server) checkpoints() *checkpoint.Manager {
	return checkpoint.New(s.store, invalidator{s}).LeaveHidden()
}

// collectHidden runs the hidden-block pass a collection under Exclusive
// left (layers.Store.CollectHidden) and adds what it did to res. It holds
// no lock of the server's: the pass needs none, and checkpoints and
// rollbacks go on meanwhile.
func (s *Server) collectHidden(res *layers.GCResult) error {
	h, err := s.store.CollectHidden()
	res.HiddenBlocks += h.HiddenBlocks
	res.BytesFreed += h.BytesFreed
	return err
}

// registerCheckpointOps registers the handlers of this file.
//
// Every op that changes a sandbox's head or reads its live view runs under
// Exclusive: no mount or unmount can start meanwhile, so the view it
// repoints is the one the mount serves, and Rollback's invalidation reaches
// that mount before the op answers.
func (s *Server) registerCheckpointOps() {
	s.Handle(OpCheckpointCreate, Typed(s.checkpointCreate))
	s.Handle(OpCheckpointList, Typed(s.checkpointList))
	s.Handle(OpCheckpointShow, Typed(s.checkpointShow))
	s.Handle(OpCheckpointDiff, Typed(s.checkpointDiff))
	s.Handle(OpCheckpointRemove, Typed(s.checkpointRemove))
	s.Handle(OpCheckpointPrune, Typed(s.checkpointPrune))
	s.Handle(OpRollback, Typed(s.rollback))
	s.Handle(OpVerify, Typed(s.verify))
	s.Handle(OpLayersList, Typed(s.layersList))
	s.Handle(OpLayersInspect, Typed(s.layersInspect))
	s.Handle(OpArchiveList, Typed(s.archiveList))
	s.Handle(OpArchiveExport, Typed(s.archiveExport))
	s.Handle(OpArchiveRestore, Typed(s.archiveRestore))
	s.Handle(OpGC, Typed(s.gc))
	s.Handle(OpSandboxFork, Typed(s.sandboxFork))
}

// exclusive runs fn under Exclusive and returns its result.
func exclusive[R any](s *Server, fn func() (R, error)) (R, error) {
	var r R
	err := s.Exclusive(func() error {
		var err error
		r, err = fn()
		return err
	})
	return r, err
}

func (s *Server) checkpointCreate(ctx context.Context, a CheckpointCreateArgs) (checkpoint.Checkpoint, error) {
	if _, err := s.store.Sandbox(a.Sandbox); err != nil {
		return checkpoint.Checkpoint{}, err
	}
	if a.Step < 0 {
		return checkpoint.Checkpoint{}, coded(layers.ErrInvalid, fmt.Sprintf("step %d is negative", a.Step))
	}
	return exclusive(s, func() (checkpoint.Checkpoint, error) {
		return s.checkpoints().Create(a.Sandbox, checkpoint.Options{
			Label: a.Label, Reason: a.Reason, Plan: a.Plan, Step: a.Step,
			Decision: a.Decision, SourceTool: a.SourceTool, Phase: a.Phase,
		})
	})
}

func (s *Server) checkpointList(ctx context.Context, a CheckpointListArgs) ([]checkpoint.Checkpoint, error) {
	cps, err := s.checkpoints().List(a.Sandbox)
	if err != nil {
		return nil, err
	}
	out := make([]checkpoint.Checkpoint, 0, len(cps))
	for _, cp := range cps {
		if a.Plan == "" || cp.Plan == a.Plan {
			out = append(out, cp)
		}
	}
	return out, nil
}

func (s *Server) checkpointShow(ctx context.Context, a IDArgs) (checkpoint.Checkpoint, error) {
	return s.checkpoints().Resolve(a.ID)
}

func (s *Server) checkpointDiff(ctx context.Context, a DiffArgs) (checkpoint.Diff, error) {
	// The live view is walked when To is empty: keep its mount in place.
	return exclusive(s, func() (checkpoint.Diff, error) {
		return s.checkpoints().DiffCheckpointsIn(a.Sandbox, a.From, a.To)
	})
}

func (s *Server) checkpointRemove(ctx context.Context, a IDArgs) (checkpoint.Checkpoint, error) {
	cp, err := exclusive(s, func() (checkpoint.Checkpoint, error) {
		return s.checkpoints().Remove(a.ID)
	})
	if err != nil {
		return cp, err
	}
	return cp, s.collectHidden(&layers.GCResult{})
}

// parseDuration reads a Go duration, or a whole number of days ("7d").
func parseDuration(v string) (time.Duration, error) {
	if d, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.ParseInt(d, 10, 64)
		if err != nil || n > 1<<20 || n < -(1<<20) {
			return 0, fmt.Errorf("invalid duration %q", v)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	return time.ParseDuration(v)
}

// ParsePolicy turns prune's arguments into a policy: DefaultPolicy when
// neither is given. Explicit zeros keep nothing: `--keep-last 0` alone
// removes every checkpoint record.
func ParsePolicy(keepLast *int, keepWithin string) (checkpoint.Policy, error) {
	if keepLast == nil && keepWithin == "" {
		return checkpoint.DefaultPolicy, nil
	}
	var p checkpoint.Policy
	if keepLast != nil {
		if *keepLast < 0 {
			return p, coded(layers.ErrInvalid, fmt.Sprintf("keep-last %d is negative", *keepLast))
		}
		p.KeepLast = *keepLast
	}
	if keepWithin != "" {
		d, err := parseDuration(keepWithin)
		if err != nil {
			return p, coded(layers.ErrInvalid, fmt.Sprintf("keep-within %q: want a duration such as 36h, 90m or 7d", keepWithin))
		}
		if d < 0 {
			return p, coded(layers.ErrInvalid, fmt.Sprintf("keep-within %s is negative", keepWithin))
		}
		p.KeepWithin = d
	}
	if p == (checkpoint.Policy{}) {
		// checkpoint.Prune reads a zero Policy as "the default"; nothing
		// is younger than a nanosecond, so this keeps nothing.
		p.KeepWithin = time.Nanosecond
	}
	return p, nil
}

// prune applies policy p to sandbox, keeping the checkpoints its open
// plans took; the caller holds Exclusive.
func (s *Server) prune(sandbox string, p checkpoint.Policy) (checkpoint.PruneResult, error) {
	held, err := s.plans().Held(sandbox)
	if err != nil {
		return checkpoint.PruneResult{}, fmt.Errorf("prune %s: %w", sandbox, err)
	}
	return s.checkpoints().PruneHolding(sandbox, p, held)
}

func (s *Server) checkpointPrune(ctx context.Context, a PruneArgs) (PruneReport, error) {
	p, err := ParsePolicy(a.KeepLast, a.KeepWithin)
	if err != nil {
		return PruneReport{}, err
	}
	if _, err := s.store.Sandbox(a.Sandbox); err != nil {
		return PruneReport{}, err
	}
	rep, err := exclusive(s, func() (PruneReport, error) {
		res, err := s.prune(a.Sandbox, p)
		if err != nil {
			return PruneReport{}, err
		}
		if res.GC.Layers == nil {
			res.GC.Layers = []string{}
		}
		within := p.KeepWithin
		if within == time.Nanosecond {
			within = 0
		}
		return PruneReport{KeepLast: p.KeepLast, KeepWithin: within.String(), PruneResult: res}, nil
	})
	if err != nil {
		return rep, err
	}
	return rep, s.collectHidden(&rep.GC)
}

func (s *Server) rollback(ctx context.Context, a RollbackArgs) (checkpoint.RollbackResult, error) {
	if _, err := s.store.Sandbox(a.Sandbox); err != nil {
		return checkpoint.RollbackResult{}, err
	}
	if a.Checkpoint == "" {
		return checkpoint.RollbackResult{}, coded(layers.ErrInvalid, "no checkpoint given")
	}
	return exclusive(s, func() (checkpoint.RollbackResult, error) {
		return s.checkpoints().Rollback(a.Sandbox, a.Checkpoint)
	})
}

// verify recomputes the state hash of one checkpoint, or of every
// checkpoint of a sandbox when Ref names one. A checkpoint whose tree
// cannot be read is reported as failed, with the reason.
func (s *Server) verify(ctx context.Context, a VerifyArgs) ([]VerifyReport, error) {
	mgr := s.checkpoints()
	var cps []checkpoint.Checkpoint
	if _, err := s.store.Sandbox(a.Ref); err == nil {
		if cps, err = mgr.List(a.Ref); err != nil {
			return nil, err
		}
	} else if !errors.Is(err, layers.ErrNotFound) && !errors.Is(err, layers.ErrInvalid) {
		return nil, err
	} else {
		cp, err := mgr.Resolve(a.Ref)
		if errors.Is(err, layers.ErrNotFound) {
			return nil, fmt.Errorf("%s is neither a sandbox nor a checkpoint: %w", a.Ref, layers.ErrNotFound)
		}
		if err != nil {
			return nil, err
		}
		cps = []checkpoint.Checkpoint{cp}
	}
	out := make([]VerifyReport, 0, len(cps))
	for _, cp := range cps {
		r, err := mgr.Verify(cp.ID)
		rep := VerifyReport{VerifyResult: r, Label: cp.Label}
		if err != nil {
			rep.VerifyResult = checkpoint.VerifyResult{Checkpoint: cp.ID, Sandbox: cp.Sandbox, Recorded: cp.StateHash}
			rep.Error = err.Error()
		}
		out = append(out, rep)
	}
	return out, nil
}

func (s *Server) layersList(ctx context.Context, a LayersArgs) ([]checkpoint.LayerReport, error) {
	return s.checkpoints().Layers(a.Sandbox, a.Archived)
}

// layersInspect reports a layer by id or unique prefix of 6+ characters.
func (s *Server) layersInspect(ctx context.Context, a IDArgs) (checkpoint.LayerReport, error) {
	mgr := s.checkpoints()
	r, err := mgr.Inspect(strings.ToUpper(a.ID))
	if err == nil || !errors.Is(err, layers.ErrNotFound) || len(a.ID) < 6 {
		return r, err
	}
	sbs, serr := s.store.Sandboxes()
	if serr != nil {
		return r, serr
	}
	prefix := strings.ToUpper(a.ID)
	hits := map[string]bool{}
	for _, sb := range sbs {
		ls, lerr := s.store.Layers(sb.Name, true)
		if lerr != nil {
			return r, lerr
		}
		for _, l := range ls {
			if strings.HasPrefix(l.ID, prefix) {
				hits[l.ID] = true
			}
		}
	}
	switch len(hits) {
	case 0:
		return r, err
	case 1:
		for id := range hits {
			return mgr.Inspect(id)
		}
	}
	return r, fmt.Errorf("layer %s matches %d layers: %w", a.ID, len(hits), checkpoint.ErrAmbiguous)
}

func (s *Server) archiveList(ctx context.Context, a NameArgs) ([]checkpoint.Archive, error) {
	ars, err := s.checkpoints().Archives(a.Name)
	if ars == nil && err == nil {
		ars = []checkpoint.Archive{}
	}
	return ars, err
}

func (s *Server) archiveExport(ctx context.Context, a ExportArgs) (ExportResult, error) {
	if !filepath.IsAbs(a.Dir) {
		return ExportResult{}, coded(layers.ErrInvalid, fmt.Sprintf("directory %q is not an absolute path", a.Dir))
	}
	mgr := s.checkpoints()
	ar, err := mgr.ResolveArchive(a.Archive)
	if err != nil {
		return ExportResult{}, err
	}
	n, err := mgr.Export(ar.ID, a.Dir)
	if err != nil {
		return ExportResult{}, err
	}
	return ExportResult{Archive: ar.ID, Dir: a.Dir, Files: n}, nil
}

func (s *Server) archiveRestore(ctx context.Context, a IDArgs) (checkpoint.RollbackResult, error) {
	return exclusive(s, func() (checkpoint.RollbackResult, error) {
		return s.checkpoints().Restore(a.ID)
	})
}

// gc collects the layers and data files nothing needs any more. Collection
// is store-wide; a Name only has to name a sandbox.
func (s *Server) gc(ctx context.Context, a GCArgs) (layers.GCResult, error) {
	if a.Name != "" {
		if _, err := s.store.Sandbox(a.Name); err != nil {
			return layers.GCResult{}, err
		}
	}
	res, err := exclusive(s, s.store.CollectLayers)
	if res.Layers == nil {
		res.Layers = []string{}
	}
	if err == nil {
		err = s.collectHidden(&res)
	}
	if err == nil && a.Dedup {
		var d layers.DedupResult
		d, err = exclusive(s, s.store.Dedup)
		res.Dedup = &d
	}
	return res, err
}

func (s *Server) sandboxFork(ctx context.Context, a ForkArgs) (Sandbox, error) {
	info, err := exclusive(s, func() (layers.SandboxInfo, error) { return s.checkpoints().Fork(a.Name, a.From) })
	if err != nil {
		return Sandbox{}, err
	}
	return s.withMount(info), nil
}
