package correction

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/checkpoint"
	sfs "github.com/strata-sandbox/strata/fs"
	"github.com/strata-sandbox/strata/layers"
)

// mounts is the Invalidator of a test: the live mounts by sandbox.
type mounts map[string]*sfs.Mount

func (ms mounts) Invalidate(sandbox string) {
	if m, ok := ms[sandbox]; ok {
		m.Invalidate()
	}
}

// InvalidateTouched makes every live test of a rollback run the targeted
// invalidation a served mount uses.
func (ms mounts) InvalidateTouched(sandbox string, t layers.Touched) {
	if m, ok := ms[sandbox]; ok {
		m.InvalidateTouched(t)
	}
}

// env is a store with one sandbox "s" over a base, mounted at mnt, and
// the managers over it.
type env struct {
	t        testing.TB
	dir      string
	storeDir string
	store    *layers.Store
	cps      *checkpoint.Manager
	plans    *Manager
	base     string
	mnt      string
	ms       mounts
}

// newEnv makes a store, a base filled by fill, a sandbox "s" and mounts it;
// everything is unmounted and closed when the test ends.
func newEnv(t testing.TB, fill func(base string)) *env {
	t.Helper()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, base: filepath.Join(dir, "base"), mnt: filepath.Join(dir, "mnt"), storeDir: filepath.Join(dir, "store"), ms: mounts{}}
	for _, d := range []string{e.base, e.mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if fill != nil {
		fill(e.base)
	}
	e.open()
	t.Cleanup(e.close)
	if _, err := e.store.CreateSandbox("s", e.base, 0); err != nil {
		t.Fatal(err)
	}
	e.mount()
	return e
}

func (e *env) open() {
	e.t.Helper()
	st, err := layers.Open(e.storeDir)
	if err != nil {
		e.t.Fatal(err)
	}
	e.store = st
	e.cps = checkpoint.New(st, e.ms)
	e.plans = New(e.cps)
}

func (e *env) close() {
	e.unmount()
	if e.store != nil {
		e.store.Close()
		e.store = nil
	}
}

func (e *env) mount() {
	e.t.Helper()
	v, err := e.store.OpenView("s", false)
	if err != nil {
		e.t.Fatal(err)
	}
	m, err := sfs.New(e.mnt, v, sfs.Options{})
	if err != nil {
		v.Close()
		e.t.Fatal(err)
	}
	e.ms["s"] = m
}

func (e *env) unmount() {
	m, ok := e.ms["s"]
	if !ok {
		return
	}
	delete(e.ms, "s")
	if err := m.Unmount(); err != nil {
		e.t.Error(err)
	}
	if err := m.View().Close(); err != nil {
		e.t.Error(err)
	}
}

// restart unmounts, closes the store, reopens it and mounts again: what a
// restart of the serving process does.
func (e *env) restart() {
	e.t.Helper()
	e.close()
	e.open()
	e.mount()
}

func (e *env) write(rel, content string) {
	e.t.Helper()
	p := filepath.Join(e.mnt, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) remove(rel string) {
	e.t.Helper()
	if err := os.RemoveAll(filepath.Join(e.mnt, rel)); err != nil {
		e.t.Fatal(err)
	}
}

// tree describes every path below dir: type, permissions and content or
// link target.
func tree(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			tgt, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + tgt
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		if xs := xattrDesc(t, p); xs != "" {
			desc += " [" + xs + "]"
		}
		out[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// xattrDesc lists the extended attributes of p, not following a symlink:
// "name=value ..." by name.
func xattrDesc(t testing.TB, p string) string {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		t.Fatalf("listxattr %s: %v", p, err)
	}
	var names []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name != "" && !strings.HasPrefix(name, "security.") { // SELinux labels and the like are the host's
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for i, name := range names {
		m, err := unix.Lgetxattr(p, name, buf)
		if err != nil {
			t.Fatalf("getxattr %s %s: %v", p, name, err)
		}
		names[i] = name + "=" + string(buf[:m])
	}
	return strings.Join(names, " ")
}

func diffTree(got, want map[string]string) string {
	var keys []string
	seen := map[string]bool{}
	for k := range got {
		seen[k] = true
		keys = append(keys, k)
	}
	for k := range want {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		if g != w || gok != wok {
			b.WriteString("  " + k + ": got " + quoteOr(g, gok) + ", want " + quoteOr(w, wok) + "\n")
		}
	}
	return b.String()
}

func quoteOr(s string, ok bool) string {
	if !ok {
		return "(missing)"
	}
	return "\"" + s + "\""
}

// record is everything the plans and checkpoints of the store say, as
// JSON: bad input must leave it unchanged.
func (e *env) record() string {
	e.t.Helper()
	ps, err := e.plans.List()
	if err != nil {
		e.t.Fatal(err)
	}
	cps, err := e.cps.List("s")
	if err != nil && !errors.Is(err, layers.ErrNotFound) {
		e.t.Fatal(err)
	}
	b, err := json.Marshal(struct {
		P []Plan
		C []checkpoint.Checkpoint
	}{ps, cps})
	if err != nil {
		e.t.Fatal(err)
	}
	return string(b)
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func (e *env) plan(ref string) Plan {
	e.t.Helper()
	return must[Plan](e.t)(e.plans.Get(ref))
}

// statuses renders a plan's decisions as "id:status[!]" (! = needs
// re-execution).
func statuses(p Plan) string {
	var parts []string
	for _, d := range p.Decisions {
		s := d.ID + ":" + d.Status
		if d.NeedsReexecution {
			s += "!"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}
