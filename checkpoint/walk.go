package checkpoint

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"syscall"

	"github.com/strata-sandbox/strata/layers"
)

// fileState is what a walk records about one path.
type fileState struct {
	Ino    uint64
	Mode   uint32
	Size   int64
	Mtime  int64
	Target string
}

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

// snapshot lists every path of a view with what identifies its content.
func snapshot(v *layers.View) (map[string]fileState, error) {
	out := map[string]fileState{}
	err := walk(v, func(p string, a layers.Attr) error {
		fs := fileState{Ino: a.Ino, Mode: a.Mode, Size: a.Size, Mtime: a.Mtime}
		if a.Mode&syscall.S_IFMT == syscall.S_IFLNK {
			t, err := v.Readlink(a.Ino)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			fs.Target = t
		}
		out[p] = fs
		return nil
	})
	return out, err
}

// hashView hashes names, modes, symlink targets and content fingerprints
// of every path, in a fixed order.
func hashView(v *layers.View, readData bool) (string, error) {
	h := sha256.New()
	root, err := v.GetAttr(layers.RootIno)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "/\x00%o\n", root.Mode)
	err = walk(v, func(p string, a layers.Attr) error {
		fp := ""
		switch a.Mode & syscall.S_IFMT {
		case syscall.S_IFREG, syscall.S_IFLNK:
			if readData {
				if err := v.VerifyData(a.Ino); err != nil {
					return fmt.Errorf("%s: %w", p, err)
				}
			}
			var err error
			fp, err = v.Fingerprint(a.Ino)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		fmt.Fprintf(h, "%q\x00%o\x00%s\n", p, a.Mode, fp)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// StateHash hashes the tree of sandbox as of frozen layer top.
func (m *Manager) StateHash(sandbox, top string) (string, error) {
	v, err := m.store.OpenSnapshot(sandbox, top)
	if err != nil {
		return "", err
	}
	defer v.Close()
	return hashView(v, false)
}

// VerifyResult says whether a checkpoint's tree still hashes as recorded.
type VerifyResult struct {
	Checkpoint string `json:"checkpoint"`
	Sandbox    string `json:"sandbox"`
	Recorded   string `json:"recorded"`
	Computed   string `json:"computed"`
	OK         bool   `json:"ok"`
}

// Verify recomputes a checkpoint's state hash from the store, reading every
// block of every file and checking its checksums on the way.
func (m *Manager) Verify(ref string) (VerifyResult, error) {
	cp, err := m.Resolve(ref)
	if err != nil {
		return VerifyResult{}, err
	}
	v, err := m.store.OpenSnapshot(cp.Sandbox, cp.Layer)
	if err != nil {
		return VerifyResult{}, err
	}
	defer v.Close()
	got, err := hashView(v, true)
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

func diffStates(a, b map[string]fileState) Diff {
	d := Diff{Added: []string{}, Modified: []string{}, Deleted: []string{}}
	for p, fb := range b {
		fa, ok := a[p]
		switch {
		case !ok:
			d.Added = append(d.Added, p)
			if fb.Mode&syscall.S_IFMT == syscall.S_IFREG {
				d.ChangedBytes += fb.Size
			}
		case fa != fb && !(fa.Mode&syscall.S_IFMT == syscall.S_IFDIR && fb.Mode&syscall.S_IFMT == syscall.S_IFDIR && fa.Ino == fb.Ino && fa.Mode == fb.Mode):
			d.Modified = append(d.Modified, p)
			if fb.Mode&syscall.S_IFMT == syscall.S_IFREG {
				d.ChangedBytes += fb.Size
			}
		}
	}
	for p := range a {
		if _, ok := b[p]; !ok {
			d.Deleted = append(d.Deleted, p)
		}
	}
	sortStrings(d.Added, d.Modified, d.Deleted)
	return d
}
