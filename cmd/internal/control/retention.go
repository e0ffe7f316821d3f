package control

import (
	"errors"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// Retention: the process that serves a sandbox applies the retention
// policy to it, so that an agent checkpointing before every decision does
// not keep every checkpoint forever without anyone calling prune. The
// policy (Options.RetentionPolicy; checkpoint.DefaultPolicy, the last 100
// checkpoints and those of the last 7 days, unless set) is applied a
// minute after the server starts serving (or Options.Retention, if
// shorter) and then every Options.Retention, to each sandbox it serves,
// under Exclusive, as `strata checkpoint prune` does: archives, forks,
// the layers kept checkpoints stand on and the checkpoints of open plans
// stay.

// errShuttingDown stops a retention pass at a shutdown.
var errShuttingDown = errors.New("shutting down")

// retentionFirst bounds the wait before the first application.
const retentionFirst = time.Minute

// retentionLoop applies the retention policy until the server is done.
func (s *Server) retentionLoop() {
	t := time.NewTimer(min(s.opts.Retention, retentionFirst))
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		s.applyRetention()
		t.Reset(s.opts.Retention)
	}
}

// applyRetention prunes every sandbox the server serves by the policy; it
// stops at a shutdown.
func (s *Server) applyRetention() {
	defer func() {
		// The hidden blocks the prunes left, outside Exclusive (see
		// collectHidden), unless the server is going away.
		select {
		case <-s.done:
			return
		default:
		}
		var res layers.GCResult
		if err := s.collectHidden(&res); err != nil {
			s.log.Printf("retention: %v", err)
		} else if res.HiddenBlocks > 0 {
			s.log.Printf("retention: dropped %d hidden blocks, freed %d bytes", res.HiddenBlocks, res.BytesFreed)
		}
	}()
	for _, m := range s.Mounts() {
		var res checkpoint.PruneResult
		err := s.Exclusive(func() error {
			select {
			case <-s.done:
				return errShuttingDown
			default:
			}
			var err error
			res, err = s.prune(m.Sandbox, s.opts.RetentionPolicy)
			return err
		})
		if errors.Is(err, errShuttingDown) {
			return
		}
		switch {
		case err != nil:
			s.log.Printf("retention: %s: %v", m.Sandbox, err)
		case len(res.Removed) > 0:
			s.log.Printf("retention: %s: removed %d checkpoints, kept %d; gc removed %d layers, freed %d bytes", m.Sandbox, len(res.Removed), len(res.Kept), len(res.GC.Layers), res.GC.BytesFreed)
		}
	}
}
