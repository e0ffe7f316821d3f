package checkpoint

import (
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// invalLog is the Invalidator of a storeEnv: it records which sandboxes a
// head move asked to invalidate.
type invalLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *invalLog) Invalidate(sandbox string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, sandbox)
}

func (l *invalLog) count(sandbox string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.seen {
		if s == sandbox {
			n++
		}
	}
	return n
}

// storeEnv is a real store on a temporary directory with sandbox "s" over
// a base filled by fill. Writes go through writable views opened on the
// store: a view registers as the sandbox's live view exactly as a mount's
// does, so checkpoints and rollbacks take the mounted code paths without
// the cost of FUSE.
type storeEnv struct {
	t     *testing.T
	dir   string
	base  string
	store *layers.Store
	mgr   *Manager
	inval *invalLog
	views map[string]*layers.View
}

func newStoreEnv(t *testing.T, fill func(base string)) *storeEnv {
	t.Helper()
	dir := t.TempDir()
	e := &storeEnv{t: t, dir: dir, base: filepath.Join(dir, "base"), inval: &invalLog{}, views: map[string]*layers.View{}}
	if err := os.MkdirAll(e.base, 0o755); err != nil {
		t.Fatal(err)
	}
	if fill != nil {
		fill(e.base)
	}
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	e.store = st
	e.mgr = New(st, e.inval)
	t.Cleanup(func() {
		for name := range e.views {
			e.close(name)
		}
		st.Close()
	})
	if _, err := st.CreateSandbox("s", e.base, layers.MinBlockSize); err != nil {
		t.Fatal(err)
	}
	return e
}

// writeBase writes a file of the base directory (before the sandbox reads it).
func writeBase(t *testing.T, base, rel, content string) {
	t.Helper()
	p := filepath.Join(base, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// view returns the writable live view of sandbox, opening it if needed.
func (e *storeEnv) view(sandbox string) *layers.View {
	e.t.Helper()
	if v, ok := e.views[sandbox]; ok {
		return v
	}
	v, err := e.store.OpenView(sandbox, false)
	if err != nil {
		e.t.Fatalf("open view of %s: %v", sandbox, err)
	}
	e.views[sandbox] = v
	return v
}

// close closes sandbox's live view, as an unmount does.
func (e *storeEnv) close(sandbox string) {
	e.t.Helper()
	v, ok := e.views[sandbox]
	if !ok {
		return
	}
	delete(e.views, sandbox)
	if err := v.Close(); err != nil {
		e.t.Errorf("close view of %s: %v", sandbox, err)
	}
}

// mkdirAll makes the directories of rel in sandbox and returns the inode
// of the last one.
func (e *storeEnv) mkdirAll(sandbox, rel string) uint64 {
	e.t.Helper()
	v := e.view(sandbox)
	dir := uint64(layers.RootIno)
	if rel == "." || rel == "" {
		return dir
	}
	for _, name := range strings.Split(rel, "/") {
		a, err := v.Lookup(dir, name)
		if errors.Is(err, layers.ErrNotFound) {
			a, err = v.Mkdir(dir, name, 0o755, layers.Caller{})
		}
		if err != nil {
			e.t.Fatalf("mkdir %s in %s: %v", rel, sandbox, err)
		}
		dir = a.Ino
	}
	return dir
}

// lookup resolves rel in v.
func lookupPath(t *testing.T, v *layers.View, rel string) layers.Attr {
	t.Helper()
	a, err := v.GetAttr(layers.RootIno)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Split(rel, "/") {
		if a, err = v.Lookup(a.Ino, name); err != nil {
			t.Fatalf("lookup %s: %v", rel, err)
		}
	}
	return a
}

// put makes rel in sandbox a regular file holding content.
func (e *storeEnv) put(sandbox, rel, content string) {
	e.t.Helper()
	e.putAt(sandbox, rel, content, 0, 0o644)
}

// putAt makes rel a regular file of mode perm holding content at offset
// off (zeros before it).
func (e *storeEnv) putAt(sandbox, rel, content string, off int64, perm uint32) layers.Attr {
	e.t.Helper()
	v := e.view(sandbox)
	dir := e.mkdirAll(sandbox, path.Dir(rel))
	name := path.Base(rel)
	a, err := v.Lookup(dir, name)
	if errors.Is(err, layers.ErrNotFound) {
		a, err = v.Mknod(dir, name, syscall.S_IFREG|perm, 0, layers.Caller{})
	}
	if err != nil {
		e.t.Fatalf("create %s: %v", rel, err)
	}
	zero := int64(0)
	if _, err := v.SetAttr(a.Ino, layers.SetAttrIn{Size: &zero, Mode: &perm}); err != nil {
		e.t.Fatalf("truncate %s: %v", rel, err)
	}
	if _, err := v.WriteAt(a.Ino, []byte(content), off, false); err != nil {
		e.t.Fatalf("write %s: %v", rel, err)
	}
	return a
}

// symlink makes rel in sandbox a symlink to target.
func (e *storeEnv) symlink(sandbox, rel, target string) {
	e.t.Helper()
	v := e.view(sandbox)
	dir := e.mkdirAll(sandbox, path.Dir(rel))
	if _, err := v.Symlink(dir, path.Base(rel), target, layers.Caller{}); err != nil {
		e.t.Fatalf("symlink %s: %v", rel, err)
	}
}

// remove unlinks the file rel of sandbox, or removes the directory tree rel.
func (e *storeEnv) remove(sandbox, rel string) {
	e.t.Helper()
	v := e.view(sandbox)
	dir := e.mkdirAll(sandbox, path.Dir(rel))
	name := path.Base(rel)
	a, err := v.Lookup(dir, name)
	if err != nil {
		e.t.Fatalf("remove %s: %v", rel, err)
	}
	if !a.IsDir() {
		if err := v.Unlink(dir, name); err != nil {
			e.t.Fatalf("unlink %s: %v", rel, err)
		}
		return
	}
	ents, err := v.ReadDir(a.Ino)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, ent := range ents {
		e.remove(sandbox, rel+"/"+ent.Name)
	}
	if err := v.Rmdir(dir, name); err != nil {
		e.t.Fatalf("rmdir %s: %v", rel, err)
	}
}

// checkpoint creates a checkpoint of sandbox labelled label.
func (e *storeEnv) checkpoint(sandbox, label string) Checkpoint {
	e.t.Helper()
	cp, err := e.mgr.Create(sandbox, Options{Label: label})
	if err != nil {
		e.t.Fatalf("checkpoint %s of %s: %v", label, sandbox, err)
	}
	return cp
}

// tree is what a view shows: every path below the root with "dir" for a
// directory, "-> target" for a symlink, and the content of a file.
type tree map[string]string

func readTree(t *testing.T, v *layers.View) tree {
	t.Helper()
	out := tree{}
	err := walk(v, func(p string, a layers.Attr) error {
		switch a.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			out[p] = "dir"
		case syscall.S_IFLNK:
			target, err := v.Readlink(a.Ino)
			if err != nil {
				return err
			}
			out[p] = "-> " + target
		case syscall.S_IFREG:
			buf := make([]byte, a.Size)
			if a.Size > 0 {
				n, err := v.ReadAt(a.Ino, buf, 0)
				if err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				buf = buf[:n]
			}
			out[p] = string(buf)
		default:
			out[p] = "special"
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read tree: %v", err)
	}
	return out
}

// liveTree is the tree of sandbox's live view.
func (e *storeEnv) liveTree(sandbox string) tree {
	e.t.Helper()
	return readTree(e.t, e.view(sandbox))
}

// snapTree is the tree of the stack of sandbox topped by layer.
func (e *storeEnv) snapTree(sandbox, layer string) tree {
	e.t.Helper()
	v, err := e.store.OpenSnapshot(sandbox, layer)
	if err != nil {
		e.t.Fatalf("snapshot %s of %s: %v", layer, sandbox, err)
	}
	defer v.Close()
	return readTree(e.t, v)
}

// setRecord overwrites one record of this package's tables through the
// store, as a damaged or foreign writer would.
func (e *storeEnv) setRecord(key string, val []byte) {
	e.t.Helper()
	if err := e.store.Update(func(tx *layers.Txn) error { return tx.Set(key, val) }); err != nil {
		e.t.Fatalf("set %s: %v", key, err)
	}
}

// getRecord reads one record of this package's tables.
func (e *storeEnv) getRecord(key string) ([]byte, error) {
	var out []byte
	err := e.store.View(func(tx *layers.Txn) error {
		b, err := tx.Get(key)
		out = b
		return err
	})
	return out, err
}

// diffTrees lists the paths whose kind or content differ between a and b.
func diffTrees(a, b tree) []string {
	out := []string{}
	for p, vb := range b {
		if va, ok := a[p]; !ok || va != vb {
			out = append(out, p)
		}
	}
	for p := range a {
		if _, ok := b[p]; !ok {
			out = append(out, p)
		}
	}
	sortStrings(out)
	return out
}

// wantErr fails unless err wraps want.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

// commonPrefix is the longest common prefix of a and b.
func commonPrefix(a, b string) string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n]
}
