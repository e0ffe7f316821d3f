package layers

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// testEnv is a store in a temporary directory with one sandbox over a base.
type testEnv struct {
	t     *testing.T
	dir   string
	base  string
	store *Store
	name  string
}

// newEnv opens a store and creates sandbox "sb" with block size bs over a
// base filled by fill. Everything is closed when the test ends.
func newEnv(t *testing.T, bs int, fill func(base string)) *testEnv {
	t.Helper()
	dir := t.TempDir()
	e := &testEnv{t: t, dir: dir, base: filepath.Join(dir, "base"), name: "sb"}
	if err := os.MkdirAll(e.base, 0o755); err != nil {
		t.Fatal(err)
	}
	if fill != nil {
		fill(e.base)
	}
	s, err := Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	e.store = s
	t.Cleanup(func() { e.store.Close() })
	if _, err := s.CreateSandbox(e.name, e.base, bs); err != nil {
		t.Fatal(err)
	}
	return e
}

// view opens the sandbox's live view.
func (e *testEnv) view() *View {
	e.t.Helper()
	v, err := e.store.OpenView(e.name, false)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// reopen closes v (and the store) and opens both again, as a restart does.
func (e *testEnv) reopen(v *View) *View {
	e.t.Helper()
	if err := v.Close(); err != nil {
		e.t.Fatalf("close view: %v", err)
	}
	if err := e.store.Close(); err != nil {
		e.t.Fatalf("close store: %v", err)
	}
	s, err := Open(filepath.Join(e.dir, "store"))
	if err != nil {
		e.t.Fatal(err)
	}
	e.store = s
	return e.view()
}

func put(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func ok(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

var root = Caller{UID: 0, GID: 0}

func lookup(t *testing.T, v *View, dir uint64, name string) Attr {
	t.Helper()
	a, err := v.Lookup(dir, name)
	ok(t, "lookup "+name, err)
	return a
}

func mkfile(t *testing.T, v *View, dir uint64, name, content string) Attr {
	t.Helper()
	a, err := v.Mknod(dir, name, 0o644, 0, root)
	ok(t, "mknod "+name, err)
	if content != "" {
		_, err = v.WriteAt(a.Ino, []byte(content), 0, false)
		ok(t, "write "+name, err)
	}
	return a
}

func mkdir(t *testing.T, v *View, dir uint64, name string) Attr {
	t.Helper()
	a, err := v.Mkdir(dir, name, 0o755, root)
	ok(t, "mkdir "+name, err)
	return a
}

// content reads the whole file.
func content(t *testing.T, v *View, ino uint64) string {
	t.Helper()
	a, err := v.GetAttr(ino)
	ok(t, "getattr", err)
	buf := make([]byte, a.Size)
	n, err := v.ReadAt(ino, buf, 0)
	if err != nil && a.Size > 0 {
		t.Fatalf("read inode %d: %v", ino, err)
	}
	return string(buf[:n])
}

func names(t *testing.T, v *View, dir uint64) []string {
	t.Helper()
	ents, err := v.ReadDir(dir)
	ok(t, "readdir", err)
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = e.Name
	}
	return out
}

func sameStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func isType(a Attr, typ uint32) bool { return a.Mode&syscall.S_IFMT == typ }
