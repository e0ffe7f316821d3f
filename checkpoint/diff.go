package checkpoint

import (
	"sort"
	"syscall"

	"github.com/strata-sandbox/strata/layers"
)

// compare lists the paths that differ between the stacks topped by from
// and to, reading only the layers the two do not share. A directory that
// appeared or went away is listed with everything below it.
func (m *Manager) compare(sandbox, from, to string) (Diff, error) {
	ch, err := m.store.Compare(sandbox, from, to, true)
	if err != nil {
		return Diff{}, err
	}
	return diffOf(ch), nil
}

// diffOf turns the changes between two states into paths.
func diffOf(ch layers.Changes) Diff {
	added, modified, deleted := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var bytes int64
	newSize := map[string]int64{}
	for _, c := range ch.Entries {
		switch {
		case c.Old == nil:
			added[c.NewPath] = true
		case c.New == nil:
			deleted[c.OldPath] = true
		default:
			modified[c.NewPath] = true
		}
		// A directory that came or went takes its whole subtree along.
		for _, pa := range c.OldTree {
			deleted[pa.Path] = true
		}
		for _, pa := range c.NewTree {
			added[pa.Path] = true
			if pa.Mode&syscall.S_IFMT == syscall.S_IFREG {
				newSize[pa.Path] = pa.Size
			}
		}
	}
	for _, c := range ch.Inodes {
		if c.Old != nil && c.New != nil && c.Path != "" {
			modified[c.Path] = true
		}
		if c.New != nil && c.New.Mode&syscall.S_IFMT == syscall.S_IFREG && c.Path != "" {
			newSize[c.Path] = c.New.Size
		}
	}
	d := Diff{Added: keys(added), Modified: []string{}, Deleted: keys(deleted)}
	for p := range modified {
		if !added[p] {
			d.Modified = append(d.Modified, p)
		}
	}
	sort.Strings(d.Modified)
	for _, p := range d.Added {
		bytes += newSize[p]
	}
	for _, p := range d.Modified {
		bytes += newSize[p]
	}
	d.ChangedBytes = bytes
	return d
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
