package checkpoint

import (
	"fmt"
	"sort"
	"syscall"

	"github.com/strata-sandbox/strata/layers"
)

// The full-walk diff below is the oracle the layer-delta diff is tested
// against: it compares every path of the two trees.

// fileState is what a walk records about one path.
type fileState struct {
	Ino    uint64
	Mode   uint32
	Size   int64
	FP     string
	Target string
}

// snapshot lists every path of a view with what identifies its content.
func snapshot(v *layers.View) (map[string]fileState, error) {
	out := map[string]fileState{}
	err := walk(v, func(p string, a layers.Attr) error {
		fs := fileState{Ino: a.Ino, Mode: a.Mode, Size: a.Size}
		if a.Mode&syscall.S_IFMT == syscall.S_IFREG {
			fp, err := v.Fingerprint(a.Ino)
			if err != nil {
				return err
			}
			fs.FP = fp
		}
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

// diffLayers compares the trees of two frozen or archived stacks.
func (m *Manager) diffLayers(sandbox, from, to string) (Diff, error) {
	a, err := m.snapshotOf(sandbox, from)
	if err != nil {
		return Diff{}, err
	}
	b, err := m.snapshotOf(sandbox, to)
	if err != nil {
		return Diff{}, err
	}
	return diffStates(a, b), nil
}

func (m *Manager) snapshotOf(sandbox, layer string) (map[string]fileState, error) {
	v, err := m.store.OpenSnapshot(sandbox, layer)
	if err != nil {
		return nil, err
	}
	defer v.Close()
	return snapshot(v)
}

func sortStrings(ls ...[]string) {
	for _, l := range ls {
		sort.Strings(l)
	}
}
