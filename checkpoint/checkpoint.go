// Package checkpoint freezes sandboxes into checkpoints, lists and compares
// them, and rolls a sandbox — mounted or not — back to any of them. The
// layers a rollback leaves behind go to an archive, from which they can be
// exported or restored (rolled forward).
//
// Every change of a sandbox's head happens in one metadata transaction
// (layers.Store.Freeze, layers.Store.Repoint) together with the records of
// this package, so a crash leaves the old state or the new one.
package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// Sentinel errors of this package; layers' sentinels pass through too.
var (
	// ErrAmbiguous: an id prefix or label matches more than one object.
	ErrAmbiguous = errors.New("ambiguous id")
	// ErrOtherSandbox: the checkpoint belongs to another sandbox.
	ErrOtherSandbox = errors.New("checkpoint belongs to another sandbox")
	// ErrBaseChanged: the checkpoint or archive was recorded before a plan
	// apply wrote onto its sandbox's base, so the base content it lay over
	// is gone: it can be rolled back to, restored, compared, forked,
	// exported and verified no more.
	ErrBaseChanged = errors.New("the base changed since (plan apply)")
)

// sameBase fails with ErrBaseChanged when what, a state of sandbox
// recorded at created, predates the last apply onto the sandbox's base.
func (m *Manager) sameBase(what, sandbox string, created time.Time) error {
	info, err := m.store.Sandbox(sandbox)
	if err != nil {
		return err
	}
	return baseChanged(what, info, created)
}

// baseChanged is sameBase with the sandbox's record read.
func baseChanged(what string, info layers.SandboxInfo, created time.Time) error {
	if !info.BaseChanged.IsZero() && created.Before(info.BaseChanged) {
		return fmt.Errorf("%s was recorded before a plan apply wrote onto %s at %s: %w",
			what, info.Base, info.BaseChanged.Local().Format("2006-01-02 15:04:05"), ErrBaseChanged)
	}
	return nil
}

// Checkpoint is a named, frozen state of a sandbox.
type Checkpoint struct {
	ID         string    `json:"id"`
	Sandbox    string    `json:"sandbox"`
	Layer      string    `json:"layer"`
	Label      string    `json:"label"`
	Created    time.Time `json:"created"`
	StateHash  string    `json:"state_hash"`
	Plan       string    `json:"plan"`
	Step       int       `json:"step"`
	Decision   string    `json:"decision"`
	Reason     string    `json:"reason"`
	SourceTool string    `json:"source_tool"`
	Phase      string    `json:"phase"`
	Bytes      int64     `json:"bytes"`
}

// Options are the metadata a checkpoint carries.
type Options struct {
	Label, Reason, Plan, Decision, SourceTool, Phase string
	Step                                             int
}

// Invalidator drops the kernel's caches of a sandbox's live mount after its
// head moved. The fs package implements it; checkpoint does not import fs.
type Invalidator interface {
	Invalidate(sandbox string)
}

// TouchedInvalidator is an Invalidator that can also drop only what a
// move touched, when the move could tell it (layers.Changes.Touched);
// rollbacks and restores then cost what changed, not what the kernel
// caches.
type TouchedInvalidator interface {
	Invalidator
	InvalidateTouched(sandbox string, t layers.Touched)
}

// Manager creates checkpoints and rolls sandboxes back in one store.
type Manager struct {
	store *layers.Store
	inval Invalidator
	// labelsIndexed: every labelled checkpoint of the store has its label
	// key (ensureLabelIndex ran, here or in an earlier process).
	labelsIndexed atomic.Bool
	// leaveHidden: the collections after rm and prune drop layers only;
	// the caller runs the hidden-block pass (LeaveHidden).
	leaveHidden bool
}

// LeaveHidden makes the collections m runs after rm and prune drop the
// layers nothing needs and leave the hidden-block pass
// (layers.Store.CollectHidden) to the caller, who runs it after letting go
// of the lock it holds around m: the pass needs none, and a long one
// would hold up checkpoints and rollbacks. It returns m.
func (m *Manager) LeaveHidden() *Manager {
	m.leaveHidden = true
	return m
}

// collect runs the collection after rm and prune.
func (m *Manager) collect() (layers.GCResult, error) {
	if m.leaveHidden {
		return m.store.CollectLayers()
	}
	return m.store.CollectGarbage()
}

// New returns a Manager for store; inval may be nil when nothing is mounted
// in this process.
func New(store *layers.Store, inval Invalidator) *Manager {
	return &Manager{store: store, inval: inval}
}

// Store is the store the manager works on.
func (m *Manager) Store() *layers.Store { return m.store }

func keyCP(id string) string               { return "x/cp/" + id }
func keyCPIndex(sandbox, id string) string { return "x/cps/" + sandbox + "/" + id }
func keyLayerCP(layer string) string       { return "x/lcp/" + layer }

// keyCPLabel names the checkpoint that holds label in sandbox (sandbox
// names hold no "/"): a new checkpoint finds a label taken with one read,
// in the transaction that records it, not with a list of the sandbox's
// checkpoints before it.
func keyCPLabel(sandbox, label string) string { return "x/cpl/" + sandbox + "/" + label }

// keyCPLabelsIndexed marks a store whose labelled checkpoints all have
// their label key: stores made before label keys get them once
// (ensureLabelIndex).
const keyCPLabelsIndexed = "x/cpl-indexed"

// Create freezes the sandbox's active layer as a new checkpoint.
func (m *Manager) Create(sandbox string, o Options) (Checkpoint, error) {
	return m.CreateTx(sandbox, o, nil)
}

// CreateTx is Create that also runs extra, when not nil, in the transaction
// that freezes the layer and records the checkpoint: callers (plans) keep
// their records atomic with the checkpoint. An error from extra aborts the
// checkpoint.
func (m *Manager) CreateTx(sandbox string, o Options, extra func(tx *layers.Txn, cp Checkpoint) error) (Checkpoint, error) {
	// Labels stand in for ids, so they stay unique within a sandbox: the
	// label's key is read in the transaction that records the checkpoint,
	// so two checkpoints made at once cannot both take it.
	taken := fmt.Errorf("checkpoint label %q: %w", o.Label, layers.ErrExists)
	if o.Label != "" {
		if err := m.ensureLabelIndex(); err != nil {
			return Checkpoint{}, err
		}
	}
	cp := Checkpoint{
		ID: layers.NewID(), Sandbox: sandbox, Label: o.Label, Reason: o.Reason, Plan: o.Plan,
		Step: o.Step, Decision: o.Decision, SourceTool: o.SourceTool, Phase: o.Phase,
		Created: time.Now().UTC(),
	}
	if err := m.sandboxExists(sandbox); err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", sandbox, err)
	}
	// Everything goes into the transaction that freezes the layer: the
	// writers are stopped meanwhile, and a crash keeps all of it or none.
	_, _, err := m.store.Freeze(sandbox, func(tx *layers.Txn, frozen, next string) error {
		if o.Label != "" {
			if used, err := labelHolder(tx, sandbox, o.Label); err != nil {
				return err
			} else if used {
				return taken
			}
		}
		cp.Layer = frozen
		hash, err := m.layerHash(tx, sandbox, frozen)
		if err != nil {
			return fmt.Errorf("state hash: %w", err)
		}
		cp.StateHash = hash
		u, err := tx.LayerUsage(frozen)
		if err != nil {
			return err
		}
		cp.Bytes = u.Bytes
		if err := tx.Set(keyLayerHash(frozen), []byte(hash)); err != nil {
			return err
		}
		if err := putCheckpoint(tx, cp); err != nil {
			return err
		}
		if extra != nil {
			return extra(tx, cp)
		}
		return nil
	})
	if errors.Is(err, taken) {
		return Checkpoint{}, taken
	}
	if err != nil {
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", sandbox, err)
	}
	return cp, nil
}

// sandboxExists fails when sandbox is not in the store. A live view is a
// sandbox that exists (a mounted one cannot be removed), and asking it
// saves a read transaction, which on these VMs costs a checkpoint or a
// rollback up to 0.1 ms (a thread wake for badger's watermark).
func (m *Manager) sandboxExists(sandbox string) error {
	if m.store.LiveView(sandbox) != nil {
		return nil
	}
	_, err := m.store.Sandbox(sandbox)
	return err
}

// labelHolder reports whether a checkpoint of sandbox holds label. A key
// left naming a checkpoint that is gone (one removed while the keys were
// being given to an older store's checkpoints) holds nothing.
func labelHolder(tx *layers.Txn, sandbox, label string) (bool, error) {
	id, err := tx.Get(keyCPLabel(sandbox, label))
	if errors.Is(err, layers.ErrNotFound) {
		return false, nil
	}
	if err == nil {
		_, err = getCheckpoint(tx, string(id))
	}
	if errors.Is(err, layers.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// ensureLabelIndex gives the labelled checkpoints of a store made before
// label keys existed their keys, once per store.
func (m *Manager) ensureLabelIndex() error {
	if m.labelsIndexed.Load() {
		return nil
	}
	var cps []Checkpoint
	indexed := false
	err := m.store.View(func(tx *layers.Txn) error {
		if _, err := tx.Get(keyCPLabelsIndexed); err == nil || !errors.Is(err, layers.ErrNotFound) {
			indexed = err == nil
			return err
		}
		return tx.Scan("x/cp/", func(key string, val []byte) error {
			var cp Checkpoint
			if err := json.Unmarshal(val, &cp); err != nil {
				return fmt.Errorf("%s: %v: %w", key, err, layers.ErrCorrupt)
			}
			if cp.Label != "" {
				cps = append(cps, cp)
			}
			return nil
		})
	})
	if err == nil && !indexed {
		err = inBatches(m.store, len(cps), func(tx *layers.Txn, i int) error {
			return tx.Set(keyCPLabel(cps[i].Sandbox, cps[i].Label), []byte(cps[i].ID))
		})
	}
	if err == nil && !indexed {
		err = m.store.Update(func(tx *layers.Txn) error { return tx.Set(keyCPLabelsIndexed, nil) })
	}
	if err != nil {
		return fmt.Errorf("checkpoint labels: %w", err)
	}
	m.labelsIndexed.Store(true)
	return nil
}

// pinOwner names the owner of a layer pin; layers drops a sandbox's pins
// (those starting with its name) with the sandbox.
func pinOwner(sandbox, kind, id string) string { return sandbox + "/" + kind + "/" + id }

func putCheckpoint(tx *layers.Txn, cp Checkpoint) error {
	b, err := json.Marshal(cp)
	if err != nil {
		return err
	}
	if err := tx.Set(keyCP(cp.ID), b); err != nil {
		return err
	}
	if err := tx.Set(keyCPIndex(cp.Sandbox, cp.ID), nil); err != nil {
		return err
	}
	if cp.Label != "" {
		if err := tx.Set(keyCPLabel(cp.Sandbox, cp.Label), []byte(cp.ID)); err != nil {
			return err
		}
	}
	if err := tx.Pin(cp.Layer, pinOwner(cp.Sandbox, "cp", cp.ID)); err != nil {
		return err
	}
	return tx.Set(keyLayerCP(cp.Layer), []byte(cp.ID))
}

func getCheckpoint(tx *layers.Txn, id string) (Checkpoint, error) {
	var cp Checkpoint
	b, err := tx.Get(keyCP(id))
	if err != nil {
		return cp, fmt.Errorf("checkpoint %s: %w", id, layers.ErrNotFound)
	}
	if err := json.Unmarshal(b, &cp); err != nil {
		return cp, fmt.Errorf("checkpoint %s: %v: %w", id, err, layers.ErrCorrupt)
	}
	return cp, nil
}

// List returns a sandbox's checkpoints, oldest first.
func (m *Manager) List(sandbox string) ([]Checkpoint, error) {
	if _, err := m.store.Sandbox(sandbox); err != nil {
		return nil, err
	}
	var out []Checkpoint
	err := m.store.View(func(tx *layers.Txn) error {
		prefix := "x/cps/" + sandbox + "/"
		return tx.Scan(prefix, func(key string, _ []byte) error {
			cp, err := getCheckpoint(tx, strings.TrimPrefix(key, prefix))
			if err != nil {
				return err
			}
			out = append(out, cp)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}

// Resolve finds a checkpoint by full id, unique id prefix of 6 or more
// characters, or unique label.
func (m *Manager) Resolve(ref string) (Checkpoint, error) {
	var found []Checkpoint
	err := m.store.View(func(tx *layers.Txn) error {
		if cp, err := getCheckpoint(tx, strings.ToUpper(ref)); err == nil {
			found = []Checkpoint{cp}
			return nil
		}
		if _, err := tx.Get(keyCPLabelsIndexed); err == nil {
			var err error
			found, err = resolveByKeys(tx, ref)
			return err
		}
		return tx.Scan("x/cp/", func(key string, val []byte) error {
			var cp Checkpoint
			if err := json.Unmarshal(val, &cp); err != nil {
				return fmt.Errorf("%s: %v: %w", key, err, layers.ErrCorrupt)
			}
			if (len(ref) >= 6 && strings.HasPrefix(cp.ID, strings.ToUpper(ref))) || (cp.Label != "" && cp.Label == ref) {
				found = append(found, cp)
			}
			return nil
		})
	})
	if err != nil {
		return Checkpoint{}, err
	}
	switch len(found) {
	case 0:
		return Checkpoint{}, fmt.Errorf("checkpoint %s: %w", ref, layers.ErrNotFound)
	case 1:
		return found[0], nil
	}
	return Checkpoint{}, fmt.Errorf("checkpoint %s matches %d checkpoints (%s): %w", ref, len(found), describeMatches(found), ErrAmbiguous)
}

// resolveByKeys finds the checkpoints ref names, as an id prefix of 6 or
// more characters or as a label, from the keys alone: the records under
// the prefix, and the label keys of every sandbox (no record decoded
// but those that match). The store must hold every label key
// (keyCPLabelsIndexed).
func resolveByKeys(tx *layers.Txn, ref string) ([]Checkpoint, error) {
	var found []Checkpoint
	seen := map[string]bool{}
	add := func(id string) error {
		if seen[id] {
			return nil
		}
		cp, err := getCheckpoint(tx, id)
		if errors.Is(err, layers.ErrNotFound) {
			return nil // a label key left naming a checkpoint that is gone
		}
		if err == nil {
			seen[id] = true
			found = append(found, cp)
		}
		return err
	}
	if len(ref) >= 6 {
		err := tx.Scan("x/cp/"+strings.ToUpper(ref), func(key string, _ []byte) error {
			return add(strings.TrimPrefix(key, "x/cp/"))
		})
		if err != nil {
			return nil, err
		}
	}
	var ids []string
	err := tx.Scan("x/cpl/", func(key string, val []byte) error {
		// x/cpl/SANDBOX/LABEL: sandbox names hold no "/", labels may.
		if _, label, ok := strings.Cut(strings.TrimPrefix(key, "x/cpl/"), "/"); ok && label == ref {
			ids = append(ids, string(val))
		}
		return nil
	})
	for _, id := range ids {
		if err == nil {
			err = add(id)
		}
	}
	// In id order, as a scan of the records finds them.
	sort.Slice(found, func(i, j int) bool { return found[i].ID < found[j].ID })
	return found, err
}

// describeMatches names the first few of the checkpoints an ambiguous
// reference matched, with their sandboxes: a label is unique only within
// a sandbox.
func describeMatches(cps []Checkpoint) string {
	const most = 3
	var parts []string
	for i, cp := range cps {
		if i == most {
			parts = append(parts, fmt.Sprintf("and %d more", len(cps)-most))
			break
		}
		parts = append(parts, cp.ID+" of "+cp.Sandbox)
	}
	return strings.Join(parts, ", ")
}

// ResolveIn is Resolve restricted to one sandbox (a label may repeat across
// sandboxes).
func (m *Manager) ResolveIn(sandbox, ref string) (Checkpoint, error) {
	cp, err := m.Resolve(ref)
	if errors.Is(err, ErrAmbiguous) {
		cps, lerr := m.List(sandbox)
		if lerr != nil {
			return Checkpoint{}, lerr
		}
		var hits []Checkpoint
		for _, c := range cps {
			if c.Label == ref || (len(ref) >= 6 && strings.HasPrefix(c.ID, strings.ToUpper(ref))) {
				hits = append(hits, c)
			}
		}
		if len(hits) == 1 {
			return hits[0], nil
		}
		return Checkpoint{}, err
	}
	if err != nil {
		return Checkpoint{}, err
	}
	if cp.Sandbox != sandbox {
		// cp goes with the error: a fork may still go back to it.
		return cp, fmt.Errorf("checkpoint %s is of sandbox %s, not %s: %w", cp.ID, cp.Sandbox, sandbox, ErrOtherSandbox)
	}
	return cp, nil
}
