package fs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// sandbox is a store, a base directory and a live mount of them for one test.
type sandbox struct {
	t     *testing.T
	store *layers.Store
	base  string
	mnt   string
	name  string
	opts  Options // of every mount
	m     *Mount
}

// newSandbox creates a store and a base filled by fill, and mounts it.
// The mount is undone when the test ends, even if it fails.
func newSandbox(t *testing.T, fill func(base string)) *sandbox {
	t.Helper()
	return newSandboxIn(t, t.TempDir(), Options{}, fill)
}

// newSandboxIn is newSandbox in directory dir, mounted with opts.
func newSandboxIn(t *testing.T, dir string, opts Options, fill func(base string)) *sandbox {
	t.Helper()
	sb := &sandbox{t: t, base: filepath.Join(dir, "base"), mnt: filepath.Join(dir, "mnt"), name: "test", opts: opts}
	for _, d := range []string{sb.base, sb.mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if fill != nil {
		fill(sb.base)
	}
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	sb.store = st
	t.Cleanup(func() {
		if sb.m != nil {
			sb.unmount()
		}
		st.Close()
	})
	if _, err := st.CreateSandbox(sb.name, sb.base, 0); err != nil {
		t.Fatal(err)
	}
	sb.mount()
	return sb
}

func (sb *sandbox) mount() {
	sb.t.Helper()
	v, err := sb.store.OpenView(sb.name, false)
	if err != nil {
		sb.t.Fatal(err)
	}
	m, err := New(sb.mnt, v, sb.opts)
	if err != nil {
		v.Close()
		sb.t.Fatal(err)
	}
	sb.m = m
}

func (sb *sandbox) unmount() {
	sb.t.Helper()
	if err := sb.m.Unmount(); err != nil {
		sb.t.Error(err)
	}
	if err := sb.m.View().Close(); err != nil {
		sb.t.Error(err)
	}
	sb.m = nil
}

// remount unmounts and mounts again, to prove state is in the store.
func (sb *sandbox) remount() {
	sb.t.Helper()
	sb.unmount()
	sb.mount()
}

func (sb *sandbox) path(rel string) string { return filepath.Join(sb.mnt, rel) }

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
