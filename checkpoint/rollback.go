package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// Archive records the layers one rollback (or restore) took off a sandbox's
// stack. Top is the state the sandbox had just before: restoring the
// archive puts it back.
type Archive struct {
	ID             string    `json:"id"`
	Sandbox        string    `json:"sandbox"`
	Created        time.Time `json:"created"`
	FromCheckpoint string    `json:"from_checkpoint"`
	ToCheckpoint   string    `json:"to_checkpoint"`
	Layers         []string  `json:"layers"`
	Bytes          int64     `json:"bytes"`
	Top            string    `json:"top"`
	Restored       bool      `json:"restored"`
}

func keyArchive(id string) string               { return "x/ar/" + id }
func keyArchiveIndex(sandbox, id string) string { return "x/ars/" + sandbox + "/" + id }

// RollbackResult is what a rollback reports.
type RollbackResult struct {
	Sandbox       string   `json:"sandbox"`
	Checkpoint    string   `json:"checkpoint"`
	Archive       string   `json:"archive"`
	RestoredFiles int      `json:"restored_files"`
	ChangedPaths  []string `json:"changed_paths"`
	Millis        float64  `json:"millis"`
}

// Rollback points sandbox at checkpoint ref (any of its checkpoints, not
// only the last), archiving the layers above it. A mounted sandbox switches
// at once; the kernel's caches are dropped before Rollback returns.
func (m *Manager) Rollback(sandbox, ref string) (RollbackResult, error) {
	return m.RollbackTx(sandbox, ref, nil)
}

// RollbackTx is Rollback that also runs extra, when not nil, in the
// transaction that moves the head, with the id of the archive the rollback
// records: callers (plans) keep their records atomic with the rollback. An
// error from extra aborts the rollback.
func (m *Manager) RollbackTx(sandbox, ref string, extra func(tx *layers.Txn, archive string) error) (RollbackResult, error) {
	cp, ok := m.byFullID(sandbox, ref)
	if !ok {
		var err error
		cp, err = m.ResolveIn(sandbox, ref)
		if errors.Is(err, ErrOtherSandbox) {
			cp, err = m.inherited(sandbox, cp, err)
		}
		if err == nil {
			err = m.sameBase("checkpoint "+cp.ID, sandbox, cp.Created)
		}
		if err != nil {
			return RollbackResult{}, fmt.Errorf("rollback %s: %w", sandbox, err)
		}
	}
	return m.repointTx(sandbox, cp.Layer, cp.ID, "", extra)
}

// byFullID finds the checkpoint of sandbox whose full id is ref (what
// agents and plans pass) and checks that it lies over the sandbox's base
// as it is, in one read transaction: ResolveIn and sameBase take two, and
// after an agent's turn (a pause) a read transaction cost a rollback
// 0.05-0.2 ms on these VMs, most of it the first one (a trace of 30
// rollbacks, 2026-11-28). It reports false for anything else (a prefix, a
// label, another sandbox's checkpoint, a base that changed), which the
// general way resolves or refuses with its own error.
func (m *Manager) byFullID(sandbox, ref string) (Checkpoint, bool) {
	var cp Checkpoint
	ok := false
	_ = m.store.View(func(tx *layers.Txn) error {
		c, err := getCheckpoint(tx, strings.ToUpper(ref))
		if err != nil || c.Sandbox != sandbox {
			return nil
		}
		info, err := tx.Sandbox(sandbox)
		if err != nil || baseChanged("", info, c.Created) != nil {
			return nil
		}
		cp, ok = c, true
		return nil
	})
	return cp, ok
}

// inherited returns cp, a checkpoint of another sandbox, when its layer is
// in sandbox's stack: the checkpoint a fork was made from (or one below
// it), which the fork shows as it was and can go back to. Else it
// returns err.
func (m *Manager) inherited(sandbox string, cp Checkpoint, err error) (Checkpoint, error) {
	stack, lerr := m.store.Layers(sandbox, false)
	if lerr != nil {
		return Checkpoint{}, lerr
	}
	for _, l := range stack {
		if l.ID == cp.Layer {
			return cp, nil
		}
	}
	return Checkpoint{}, err
}

// ResetTx moves the sandbox onto its base alone: every layer goes to an
// archive, as in a rollback, and the sandbox shows its base directory as
// it is now. extra runs as in RollbackTx. A plan apply does it once it
// wrote the sandbox's changes onto the base: the layers' base files may
// have moved, and their content is the base's now.
func (m *Manager) ResetTx(sandbox string, extra func(tx *layers.Txn, archive string) error) (RollbackResult, error) {
	return m.repointTx(sandbox, "", "", "", extra)
}

// repoint moves sandbox onto parent and records the archive; restoring
// names the archive it restores.
func (m *Manager) repoint(sandbox, parent, toCheckpoint, restoring string) (RollbackResult, error) {
	return m.repointTx(sandbox, parent, toCheckpoint, restoring, nil)
}

func (m *Manager) repointTx(sandbox, parent, toCheckpoint, restoring string, extra func(tx *layers.Txn, archive string) error) (RollbackResult, error) {
	start := time.Now()
	ar := Archive{ID: layers.NewID(), Sandbox: sandbox, Created: start.UTC(), ToCheckpoint: toCheckpoint}
	if err := m.sandboxExists(sandbox); err != nil {
		return RollbackResult{}, err
	}
	// A mounted sandbox tells what changed from its layers' deltas as it
	// moves (ch); otherwise the two states are compared afterwards.
	// The kernel's caches of what the move touches are dropped as soon as
	// that is known, while the view is held for the move and the move
	// commits and syncs (moved).
	invalidated := false
	var moved layers.MovedFunc
	if m.inval != nil {
		moved = func(t *layers.Touched) {
			invalidated = true
			m.invalidateTouched(sandbox, t)
		}
	}
	// Without caches to drop, no goroutine for it: one started with
	// nothing to do starts 0.1-1 ms late on an idle CPU of these VMs,
	// and the rollback, no longer waiting for badger's log, waits for it.
	_, ch, err := m.store.RepointDiffMoved(sandbox, parent, func(tx *layers.Txn, left, joined []string, next string) error {
		ar.Layers = left
		if len(left) > 0 {
			ar.Top = left[0]
		}
		// The newest checkpoint among the layers left behind is where the
		// sandbox came from.
		for _, l := range left {
			if id, err := tx.Get(keyLayerCP(l)); err == nil {
				ar.FromCheckpoint = string(id)
				break
			}
		}
		// Summed apart: the function may run again (a conflict).
		var bytes int64
		for _, l := range left {
			u, err := tx.LayerUsage(l)
			if err != nil {
				return err
			}
			bytes += u.Bytes
		}
		ar.Bytes = bytes
		if restoring != "" {
			b, err := tx.Get(keyArchive(restoring))
			if err != nil {
				return err
			}
			var old Archive
			if err := json.Unmarshal(b, &old); err != nil {
				return fmt.Errorf("archive %s: %v: %w", restoring, err, layers.ErrCorrupt)
			}
			old.Restored = true
			if err := putArchive(tx, old); err != nil {
				return err
			}
		}
		if err := putArchive(tx, ar); err != nil {
			return err
		}
		if extra != nil {
			return extra(tx, ar.ID)
		}
		return nil
	}, moved)
	if !invalidated || err != nil {
		// No live view here: a mount this process serves, if any, still
		// caches the old state (and so does one that failed to switch,
		// which may have dropped only what the move was to touch).
		var t *layers.Touched
		if ch != nil {
			t = ch.Touched
		}
		m.invalidateTouched(sandbox, t)
	}
	if err != nil {
		return RollbackResult{}, fmt.Errorf("rollback %s: %w", sandbox, err)
	}
	millis := float64(time.Since(start).Microseconds()) / 1000
	res := RollbackResult{Sandbox: sandbox, Checkpoint: toCheckpoint, Archive: ar.ID, Millis: millis, ChangedPaths: []string{}}
	if ar.Top == "" {
		return res, nil
	}
	var d Diff
	if ch != nil {
		d = diffOf(*ch)
	} else if d, err = m.compare(sandbox, ar.Top, parent); err != nil {
		// The rollback happened; only its report is short.
		return res, nil
	}
	res.ChangedPaths = append(append(append(res.ChangedPaths, d.Added...), d.Modified...), d.Deleted...)
	sort.Strings(res.ChangedPaths)
	res.RestoredFiles = len(res.ChangedPaths)
	return res, nil
}

// invalidateTouched drops the kernel's caches of sandbox's live mount
// after a move that told what it touched (t; nil: everything).
func (m *Manager) invalidateTouched(sandbox string, t *layers.Touched) {
	if m.inval == nil {
		return
	}
	if ti, ok := m.inval.(TouchedInvalidator); ok && t != nil {
		ti.InvalidateTouched(sandbox, *t)
		return
	}
	m.inval.Invalidate(sandbox)
}

func putArchive(tx *layers.Txn, ar Archive) error {
	b, err := json.Marshal(ar)
	if err != nil {
		return err
	}
	if err := tx.Set(keyArchive(ar.ID), b); err != nil {
		return err
	}
	if ar.Top != "" {
		if err := tx.Pin(ar.Top, pinOwner(ar.Sandbox, "ar", ar.ID)); err != nil {
			return err
		}
	}
	return tx.Set(keyArchiveIndex(ar.Sandbox, ar.ID), nil)
}

// Archives lists a sandbox's archives, oldest first.
func (m *Manager) Archives(sandbox string) ([]Archive, error) {
	if _, err := m.store.Sandbox(sandbox); err != nil {
		return nil, err
	}
	var out []Archive
	err := m.store.View(func(tx *layers.Txn) error {
		prefix := "x/ars/" + sandbox + "/"
		return tx.Scan(prefix, func(key string, _ []byte) error {
			ar, err := getArchive(tx, strings.TrimPrefix(key, prefix))
			if err != nil {
				return err
			}
			out = append(out, ar)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

func getArchive(tx *layers.Txn, id string) (Archive, error) {
	var ar Archive
	b, err := tx.Get(keyArchive(id))
	if err != nil {
		return ar, fmt.Errorf("archive %s: %w", id, layers.ErrNotFound)
	}
	if err := json.Unmarshal(b, &ar); err != nil {
		return ar, fmt.Errorf("archive %s: %v: %w", id, err, layers.ErrCorrupt)
	}
	return ar, nil
}

// ResolveArchive finds an archive by id or unique prefix of 6+ characters.
func (m *Manager) ResolveArchive(ref string) (Archive, error) {
	var found []Archive
	err := m.store.View(func(tx *layers.Txn) error {
		if ar, err := getArchive(tx, strings.ToUpper(ref)); err == nil {
			found = []Archive{ar}
			return nil
		}
		if len(ref) < 6 {
			return nil
		}
		return tx.Scan("x/ar/"+strings.ToUpper(ref), func(key string, val []byte) error {
			var ar Archive
			if err := json.Unmarshal(val, &ar); err != nil {
				return fmt.Errorf("%s: %v: %w", key, err, layers.ErrCorrupt)
			}
			found = append(found, ar)
			return nil
		})
	})
	if err != nil {
		return Archive{}, err
	}
	switch len(found) {
	case 0:
		return Archive{}, fmt.Errorf("archive %s: %w", ref, layers.ErrNotFound)
	case 1:
		return found[0], nil
	}
	return Archive{}, fmt.Errorf("archive %s matches %d archives: %w", ref, len(found), ErrAmbiguous)
}

// Restore rolls the sandbox forward to the state the archive's rollback
// left; the state it leaves is archived in turn.
func (m *Manager) Restore(ref string) (RollbackResult, error) {
	ar, err := m.ResolveArchive(ref)
	if err != nil {
		return RollbackResult{}, fmt.Errorf("restore: %w", err)
	}
	if ar.Top == "" {
		return RollbackResult{}, fmt.Errorf("restore %s: archive holds no layers: %w", ar.ID, layers.ErrInvalid)
	}
	if err := m.sameBase("archive "+ar.ID, ar.Sandbox, ar.Created); err != nil {
		return RollbackResult{}, fmt.Errorf("restore: %w", err)
	}
	return m.repoint(ar.Sandbox, ar.Top, ar.FromCheckpoint, ar.ID)
}

// DiffCheckpoints compares checkpoint from with checkpoint to, or with the
// sandbox's live state when to is "".
func (m *Manager) DiffCheckpoints(from, to string) (Diff, error) {
	return m.DiffCheckpointsIn("", from, to)
}

// DiffCheckpointsIn is DiffCheckpoints with from looked up in sandbox
// (when not ""), where a label that several sandboxes use is unique.
func (m *Manager) DiffCheckpointsIn(sandbox, from, to string) (Diff, error) {
	var a Checkpoint
	var err error
	if sandbox == "" {
		a, err = m.Resolve(from)
	} else {
		a, err = m.ResolveIn(sandbox, from)
	}
	if err == nil {
		err = m.sameBase("checkpoint "+a.ID, a.Sandbox, a.Created)
	}
	if err != nil {
		return Diff{}, fmt.Errorf("diff: %w", err)
	}
	if to != "" {
		b, err := m.ResolveIn(a.Sandbox, to)
		if err == nil {
			err = m.sameBase("checkpoint "+b.ID, b.Sandbox, b.Created)
		}
		if err != nil {
			return Diff{}, fmt.Errorf("diff: %w", err)
		}
		d, err := m.compare(a.Sandbox, a.Layer, b.Layer)
		if err != nil {
			return Diff{}, fmt.Errorf("diff %s: %w", a.ID, err)
		}
		return d, nil
	}
	// The live state: what a mount wrote is committed first. The
	// comparison reads the active layer piece by piece while the mount
	// may go on writing, so a file renamed and then removed meanwhile can
	// show as a file with no name; such a read is tried again.
	var d Diff
	for try := 1; ; try++ {
		if live := m.store.LiveView(a.Sandbox); live != nil {
			if err := live.Sync(); err != nil {
				return Diff{}, fmt.Errorf("diff: %w", err)
			}
		}
		info, err := m.store.Sandbox(a.Sandbox)
		if err != nil {
			return Diff{}, err
		}
		d, err = m.compare(a.Sandbox, a.Layer, info.Head)
		if err == nil {
			return d, nil
		}
		if try == liveDiffTries || m.store.LiveView(a.Sandbox) == nil || !(errors.Is(err, layers.ErrNotFound) || errors.Is(err, layers.ErrNotDir)) {
			return Diff{}, fmt.Errorf("diff %s: %w", a.ID, err)
		}
	}
}

// liveDiffTries bounds the reads of a live state that is being written.
const liveDiffTries = 5
