package checkpoint

import (
	"errors"
	"fmt"
	"path"

	"github.com/strata-sandbox/strata/layers"
)

// walk visits every path of a view below the root, parents before children,
// in name order.
func walk(v *layers.View, fn func(p string, a layers.Attr) error) error {
	var rec func(dir uint64, prefix string) error
	rec = func(dir uint64, prefix string) error {
		ents, err := v.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("%s: %w", relOrRoot(prefix), err)
		}
		for _, e := range ents {
			p := path.Join(prefix, e.Name)
			a, err := v.GetAttr(e.Ino)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if err := fn(p, a); err != nil {
				return err
			}
			if a.IsDir() {
				if err := rec(e.Ino, p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return rec(layers.RootIno, "")
}

func relOrRoot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// StateHash recomputes the state hash of sandbox as of layer top from the
// whole tree.
func (m *Manager) StateHash(sandbox, top string) (string, error) {
	v, err := m.store.OpenSnapshot(sandbox, top)
	if err != nil {
		return "", err
	}
	defer v.Close()
	return fullHash(v, false)
}

// VerifyResult says whether a checkpoint's tree still hashes as recorded.
type VerifyResult struct {
	Checkpoint string `json:"checkpoint"`
	Sandbox    string `json:"sandbox"`
	Recorded   string `json:"recorded"`
	Computed   string `json:"computed"`
	OK         bool   `json:"ok"`
	// BaseChanged: the checkpoint predates a plan apply onto the base
	// (ErrBaseChanged), so there is nothing to recompute: not OK, but
	// not damage either.
	BaseChanged bool `json:"base_changed,omitempty"`
}

// Verify recomputes a checkpoint's state hash from the store, reading every
// block of every file and checking its checksums on the way.
func (m *Manager) Verify(ref string) (VerifyResult, error) {
	cp, err := m.Resolve(ref)
	if err != nil {
		return VerifyResult{}, err
	}
	if err := m.sameBase("checkpoint "+cp.ID, cp.Sandbox, cp.Created); errors.Is(err, ErrBaseChanged) {
		return VerifyResult{Checkpoint: cp.ID, Sandbox: cp.Sandbox, Recorded: cp.StateHash, BaseChanged: true}, nil
	}
	v, err := m.store.OpenSnapshot(cp.Sandbox, cp.Layer)
	if err != nil {
		return VerifyResult{}, err
	}
	defer v.Close()
	got, err := fullHash(v, true)
	if err != nil {
		return VerifyResult{}, fmt.Errorf("verify %s: %w", cp.ID, err)
	}
	return VerifyResult{Checkpoint: cp.ID, Sandbox: cp.Sandbox, Recorded: cp.StateHash, Computed: got, OK: got == cp.StateHash}, nil
}

// Diff lists what changed between two states of one sandbox.
type Diff struct {
	Added        []string `json:"added"`
	Modified     []string `json:"modified"`
	Deleted      []string `json:"deleted"`
	ChangedBytes int64    `json:"changed_bytes"`
}
