package checkpoint

import (
	"errors"
	"fmt"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// Remove deletes a checkpoint's record. Its layer stays as long as a stack
// (the sandbox's, an archive's, a fork's, a later checkpoint's) contains it.
func (m *Manager) Remove(ref string) (Checkpoint, error) {
	cp, err := m.Resolve(ref)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint rm: %w", err)
	}
	err = m.store.Update(func(tx *layers.Txn) error { return deleteCheckpoint(tx, cp) })
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint rm %s: %w", cp.ID, err)
	}
	if _, err := m.collect(); err != nil {
		return cp, err
	}
	return cp, nil
}

func deleteCheckpoint(tx *layers.Txn, cp Checkpoint) error {
	for _, k := range []string{keyCP(cp.ID), keyCPIndex(cp.Sandbox, cp.ID), keyLayerCP(cp.Layer)} {
		if err := tx.Delete(k); err != nil {
			return err
		}
	}
	if cp.Label != "" {
		// The key may name another checkpoint of an older store that
		// shared the label: that one keeps it.
		id, err := tx.Get(keyCPLabel(cp.Sandbox, cp.Label))
		if err == nil && string(id) == cp.ID {
			err = tx.Delete(keyCPLabel(cp.Sandbox, cp.Label))
		}
		if err != nil && !errors.Is(err, layers.ErrNotFound) {
			return err
		}
	}
	return tx.Unpin(cp.Layer, pinOwner(cp.Sandbox, "cp", cp.ID))
}

// deleteBatch bounds the records one transaction deletes: a metadata
// transaction has a size limit, and a sandbox may have tens of thousands
// of checkpoints. Deleting a record is idempotent, so a crash between
// batches leaves a part deleted, which the next prune or rm finishes.
const deleteBatch = 1000

// inBatches runs fn for 0..n-1, deleteBatch calls per transaction.
func inBatches(s *layers.Store, n int, fn func(tx *layers.Txn, i int) error) error {
	for lo := 0; lo < n; lo += deleteBatch {
		err := s.Update(func(tx *layers.Txn) error {
			for i := lo; i < min(lo+deleteBatch, n); i++ {
				if err := fn(tx, i); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

func (m *Manager) deleteCheckpoints(cps []Checkpoint) error {
	return inBatches(m.store, len(cps), func(tx *layers.Txn, i int) error { return deleteCheckpoint(tx, cps[i]) })
}

// Policy is a retention policy: a checkpoint is kept if it is among the
// last KeepLast or younger than KeepWithin. Zero values keep nothing by
// that rule; a zero Policy is replaced by DefaultPolicy.
type Policy struct {
	KeepLast   int
	KeepWithin time.Duration
}

// DefaultPolicy keeps the last 100 checkpoints and every checkpoint of the
// last 7 days: an agent session's decisions stay undoable for a week.
var DefaultPolicy = Policy{KeepLast: 100, KeepWithin: 7 * 24 * time.Hour}

// PruneResult lists the checkpoints a prune removed and kept.
type PruneResult struct {
	Removed []string `json:"removed"`
	Kept    []string `json:"kept"`
	// Held lists the checkpoints of Kept that the policy alone would
	// have removed, kept because something above still needs them (an
	// open plan's, PruneHolding).
	Held []string        `json:"held"`
	GC   layers.GCResult `json:"gc"`
}

// Prune removes the checkpoints of sandbox that the policy does not keep,
// then collects the layers nothing needs any more. Layers that a kept
// checkpoint, an archive or a fork stands on are never removed: prune only
// drops checkpoint records, and GC only layers no stack contains and, of
// the layers no pin names, the blocks every stack above them hides (what
// no kept state shows).
func (m *Manager) Prune(sandbox string, p Policy) (PruneResult, error) {
	return m.PruneHolding(sandbox, p, nil)
}

// PruneHolding is Prune that also keeps the checkpoints held names: the
// ones a caller above still needs (the checkpoints of open plans, which
// may still roll back or revert to any of them).
func (m *Manager) PruneHolding(sandbox string, p Policy, held map[string]bool) (PruneResult, error) {
	if p == (Policy{}) {
		p = DefaultPolicy
	}
	if p.KeepLast < 0 || p.KeepWithin < 0 {
		return PruneResult{}, fmt.Errorf("prune %s: negative policy: %w", sandbox, layers.ErrInvalid)
	}
	cps, err := m.List(sandbox)
	if err != nil {
		return PruneResult{}, fmt.Errorf("prune %s: %w", sandbox, err)
	}
	res := PruneResult{Removed: []string{}, Kept: []string{}, Held: []string{}}
	now := time.Now()
	var doomed []Checkpoint
	for i, cp := range cps {
		keep := len(cps)-i <= p.KeepLast || (p.KeepWithin > 0 && now.Sub(cp.Created) <= p.KeepWithin)
		if !keep && held[cp.ID] {
			keep = true
			res.Held = append(res.Held, cp.ID)
		}
		if keep {
			res.Kept = append(res.Kept, cp.ID)
		} else {
			doomed = append(doomed, cp)
			res.Removed = append(res.Removed, cp.ID)
		}
	}
	if err := m.deleteCheckpoints(doomed); err != nil {
		return PruneResult{}, fmt.Errorf("prune %s: %w", sandbox, err)
	}
	res.GC, err = m.collect()
	return res, err
}

// Fork creates sandbox name from checkpoint ref, sharing its layers.
func (m *Manager) Fork(name, ref string) (layers.SandboxInfo, error) {
	cp, err := m.Resolve(ref)
	if err == nil {
		err = m.sameBase("checkpoint "+cp.ID, cp.Sandbox, cp.Created)
	}
	if err != nil {
		return layers.SandboxInfo{}, fmt.Errorf("fork %s: %w", name, err)
	}
	info, err := m.store.Fork(name, cp.Layer)
	if err != nil {
		return layers.SandboxInfo{}, fmt.Errorf("fork %s: %w", name, err)
	}
	return info, nil
}

// LayerReport is what `layers list` and `layers inspect` show of a layer.
type LayerReport struct {
	layers.LayerInfo
	Checkpoint string `json:"checkpoint,omitempty"`
	Files      int    `json:"files"`
	Blocks     int64  `json:"blocks"`
	Bytes      int64  `json:"bytes"`
	// Shared counts the blocks whose content a layer below keeps (gc
	// --dedup); Bytes leaves them out.
	Shared int64 `json:"shared_blocks"`
}

// Layers reports the layers of a sandbox (with archived ones on request).
func (m *Manager) Layers(sandbox string, archived bool) ([]LayerReport, error) {
	if _, err := m.store.Sandbox(sandbox); err != nil {
		return nil, err
	}
	ls, err := m.store.Layers(sandbox, archived)
	if err != nil {
		return nil, err
	}
	out := make([]LayerReport, 0, len(ls))
	for _, l := range ls {
		r, err := m.report(l)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// Inspect reports one layer by id.
func (m *Manager) Inspect(id string) (LayerReport, error) {
	l, err := m.store.Layer(id)
	if err != nil {
		return LayerReport{}, err
	}
	return m.report(l)
}

func (m *Manager) report(l layers.LayerInfo) (LayerReport, error) {
	u, err := m.store.LayerUsage(l.ID)
	if err != nil {
		return LayerReport{}, err
	}
	r := LayerReport{LayerInfo: l, Files: u.Files, Blocks: u.Blocks, Bytes: u.Bytes, Shared: u.Shared}
	_ = m.store.View(func(tx *layers.Txn) error {
		if id, err := tx.Get(keyLayerCP(l.ID)); err == nil {
			r.Checkpoint = string(id)
		}
		return nil
	})
	return r, nil
}

// RemoveSandbox deletes a sandbox with its checkpoint and archive records;
// layers a fork still stands on stay.
func (m *Manager) RemoveSandbox(name string) error {
	cps, err := m.List(name)
	if err != nil {
		return err
	}
	ars, err := m.Archives(name)
	if err != nil {
		return err
	}
	if m.store.LiveView(name) != nil {
		return fmt.Errorf("sandbox %s: %w", name, layers.ErrMounted)
	}
	if err := m.deleteCheckpoints(cps); err != nil {
		return fmt.Errorf("sandbox rm %s: %w", name, err)
	}
	err = inBatches(m.store, len(ars), func(tx *layers.Txn, i int) error {
		if err := tx.Delete(keyArchive(ars[i].ID)); err != nil {
			return err
		}
		return tx.Delete(keyArchiveIndex(name, ars[i].ID))
	})
	if err != nil {
		return fmt.Errorf("sandbox rm %s: %w", name, err)
	}
	return m.store.RemoveSandbox(name)
}
