package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/fs"
	"github.com/strata-sandbox/strata/layers"
)

// mounts is the Invalidator of a test: the live mounts by sandbox.
type mounts map[string]*fs.Mount

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

type liveSandbox struct {
	t     *testing.T
	store *layers.Store
	mgr   *Manager
	base  string
	mnt   string
	ms    mounts
}

// newLive makes a store, a base filled by fill, a sandbox "s" and mounts it.
func newLive(t *testing.T, fill func(base string)) *liveSandbox {
	t.Helper()
	dir := t.TempDir()
	l := &liveSandbox{t: t, base: filepath.Join(dir, "base"), mnt: filepath.Join(dir, "mnt"), ms: mounts{}}
	for _, d := range []string{l.base, l.mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if fill != nil {
		fill(l.base)
	}
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	l.store = st
	l.mgr = New(st, l.ms)
	t.Cleanup(func() {
		l.unmount()
		st.Close()
	})
	if _, err := st.CreateSandbox("s", l.base, 0); err != nil {
		t.Fatal(err)
	}
	l.mount()
	return l
}

func (l *liveSandbox) mount() {
	l.t.Helper()
	v, err := l.store.OpenView("s", false)
	if err != nil {
		l.t.Fatal(err)
	}
	m, err := fs.New(l.mnt, v, fs.Options{})
	if err != nil {
		v.Close()
		l.t.Fatal(err)
	}
	l.ms["s"] = m
}

func (l *liveSandbox) unmount() {
	m, ok := l.ms["s"]
	if !ok {
		return
	}
	delete(l.ms, "s")
	if err := m.Unmount(); err != nil {
		l.t.Error(err)
	}
	if err := m.View().Close(); err != nil {
		l.t.Error(err)
	}
}

func (l *liveSandbox) write(rel, content string) {
	l.t.Helper()
	p := filepath.Join(l.mnt, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		l.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		l.t.Fatal(err)
	}
}

func (l *liveSandbox) read(rel string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(l.mnt, rel))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		l.t.Fatal(err)
	}
	return string(b), true
}

func TestRollbackLiveToMiddleCheckpoint(t *testing.T) {
	l := newLive(t, func(base string) {
		os.WriteFile(filepath.Join(base, "a.txt"), []byte("base"), 0o644)
	})
	l.write("a.txt", "one")
	cp1, err := l.mgr.Create("s", Options{Label: "first"})
	if err != nil {
		t.Fatal(err)
	}
	l.write("a.txt", "two")
	l.write("b.txt", "b")
	if _, err := l.mgr.Create("s", Options{Label: "second"}); err != nil {
		t.Fatal(err)
	}
	l.write("a.txt", "three")
	os.Remove(filepath.Join(l.mnt, "b.txt"))
	l.write("c/d.txt", "d")
	// Read everything once so the kernel caches it.
	l.read("a.txt")
	l.read("c/d.txt")

	res, err := l.mgr.Rollback("s", cp1.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := l.read("a.txt"); got != "one" {
		t.Errorf("a.txt after rollback: got %q, want %q", got, "one")
	}
	if _, ok := l.read("b.txt"); ok {
		t.Errorf("b.txt exists after rollback to first")
	}
	if _, ok := l.read("c/d.txt"); ok {
		t.Errorf("c/d.txt exists after rollback to first")
	}
	if len(res.ChangedPaths) == 0 || res.Archive == "" {
		t.Errorf("rollback result %+v: want changed paths and an archive", res)
	}
	// Roll forward again: the state before the rollback comes back.
	if _, err := l.mgr.Restore(res.Archive); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.read("a.txt"); got != "three" {
		t.Errorf("a.txt after restore: got %q, want %q", got, "three")
	}
	if got, _ := l.read("c/d.txt"); got != "d" {
		t.Errorf("c/d.txt after restore: got %q, want %q", got, "d")
	}
	vr, err := l.mgr.Verify("first")
	if err != nil || !vr.OK {
		t.Errorf("verify first: %+v, %v", vr, err)
	}
	// Everything survives a remount.
	l.unmount()
	l.mount()
	if got, _ := l.read("a.txt"); got != "three" {
		t.Errorf("a.txt after remount: got %q, want %q", got, "three")
	}
}

// TestFailedRollbackLive: a rollback that fails after it began dropping
// the kernel's caches (its function refuses) leaves the mount showing
// the state it had, names and content, with nothing stale cached.
func TestFailedRollbackLive(t *testing.T) {
	l := newLive(t, func(base string) {
		os.WriteFile(filepath.Join(base, "a.txt"), []byte("base"), 0o644)
		os.WriteFile(filepath.Join(base, "old.txt"), []byte("old"), 0o644)
	})
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.write("a.txt", "after")
	l.write("new.txt", "new")
	if err := os.Remove(filepath.Join(l.mnt, "old.txt")); err != nil {
		t.Fatal(err)
	}
	l.read("a.txt")
	l.read("new.txt")
	l.read("old.txt") // a miss the kernel may cache
	boom := errors.New("refused")
	_, err = l.mgr.RollbackTx("s", cp.ID, func(*layers.Txn, string) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("rollback: %v, want %v", err, boom)
	}
	for rel, want := range map[string]string{"a.txt": "after", "new.txt": "new"} {
		if got, ok := l.read(rel); !ok || got != want {
			t.Errorf("%s after a failed rollback: %q (found %v), want %q", rel, got, ok, want)
		}
	}
	if _, ok := l.read("old.txt"); ok {
		t.Error("old.txt came back after a failed rollback")
	}
	// The sandbox goes on: a rollback now works.
	if _, err := l.mgr.Rollback("s", cp.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := l.read("a.txt"); got != "base" {
		t.Errorf("a.txt after the rollback: %q, want \"base\"", got)
	}
	if _, ok := l.read("new.txt"); ok {
		t.Error("new.txt still there after the rollback")
	}
	if got, _ := l.read("old.txt"); got != "old" {
		t.Errorf("old.txt after the rollback: %q, want \"old\"", got)
	}
}

// TestRollbackRestoresNamesUnderLookups: lookups of a removed name run
// while a rollback brings it back; none may leave the kernel caching it
// as missing, so the name is there when the rollback returns, every time.
// (Where a lookup's miss and the rollback's cache drop meet, the kernel
// orders the drop of a name after the lookup, which holds the directory;
// the mount's count of drops begun covers the misses a drop finds by its
// index instead: TestMissingNamesIndex.)
func TestRollbackRestoresNamesUnderLookups(t *testing.T) {
	l := newLive(t, func(base string) {
		os.MkdirAll(filepath.Join(base, "d"), 0o755)
		os.WriteFile(filepath.Join(base, "d", "f"), []byte("f"), 0o644)
	})
	p := filepath.Join(l.mnt, "d", "f")
	for round := 0; round < 40; round++ {
		cp, err := l.mgr.Create("s", Options{})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
					os.Stat(p)
				}
			}
		}()
		_, err = l.mgr.Rollback("s", cp.ID)
		if _, serr := os.Stat(p); err == nil && serr != nil {
			close(stop)
			<-done
			t.Fatalf("round %d: d/f after the rollback: %v", round, serr)
		}
		close(stop)
		<-done
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRollbackLiveManyFiles: a rollback that touches enough files for
// the mount to drop their caches on two goroutines (files and
// directories apart) leaves every file, name and listing of the
// checkpoint, whatever the kernel had cached.
func TestRollbackLiveManyFiles(t *testing.T) {
	const dirs, per = 4, 12
	name := func(d, i int) string { return filepath.Join(fmt.Sprintf("d%d", d), fmt.Sprintf("f%02d", i)) }
	l := newLive(t, func(base string) {
		for d := 0; d < dirs; d++ {
			os.MkdirAll(filepath.Join(base, fmt.Sprintf("d%d", d)), 0o755)
			for i := 0; i < per; i++ {
				os.WriteFile(filepath.Join(base, name(d, i)), []byte("base "+name(d, i)), 0o644)
			}
		}
	})
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for d := 0; d < dirs; d++ {
		for i := 0; i < per; i++ {
			switch {
			case i%4 == 3:
				if err := os.Remove(filepath.Join(l.mnt, name(d, i))); err != nil {
					t.Fatal(err)
				}
				l.read(name(d, i)) // a miss the kernel may cache
			default:
				l.write(name(d, i), "changed")
				l.read(name(d, i))
				os.Stat(filepath.Join(l.mnt, name(d, i))) // attributes cached
			}
		}
		l.write(filepath.Join(fmt.Sprintf("d%d", d), "new"), "new")
		if _, err := os.ReadDir(filepath.Join(l.mnt, fmt.Sprintf("d%d", d))); err != nil {
			t.Fatal(err)
		}
	}
	// A handle held across the rollback, its pages cached: its reads
	// fail (what open handles see after a rollback, docs/design.md).
	old, err := os.Open(filepath.Join(l.mnt, name(0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := io.ReadAll(old); err != nil {
		t.Fatal(err)
	}
	res, err := l.mgr.Rollback("s", cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := old.ReadAt(make([]byte, 16), 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("a read through a handle from before the rollback: %d bytes, %v; want ESTALE", b, err)
	}
	if want := dirs * (per + 1); len(res.ChangedPaths) != want {
		t.Errorf("%d changed paths, want %d", len(res.ChangedPaths), want)
	}
	for d := 0; d < dirs; d++ {
		for i := 0; i < per; i++ {
			want := "base " + name(d, i)
			// stat first: the kernel may still hold the dentry of the
			// file's inode before the rollback, whose size was "changed".
			if st, err := os.Stat(filepath.Join(l.mnt, name(d, i))); err != nil || st.Size() != int64(len(want)) {
				t.Errorf("stat %s after the rollback: %v, %v; want size %d", name(d, i), st, err, len(want))
			}
			if got, ok := l.read(name(d, i)); !ok || got != want {
				t.Errorf("%s after the rollback: %q (found %v)", name(d, i), got, ok)
			}
		}
		ents, err := os.ReadDir(filepath.Join(l.mnt, fmt.Sprintf("d%d", d)))
		if err != nil || len(ents) != per {
			t.Errorf("d%d lists %d names (%v), want %d", d, len(ents), err, per)
		}
		if _, ok := l.read(filepath.Join(fmt.Sprintf("d%d", d), "new")); ok {
			t.Errorf("d%d/new is still there", d)
		}
	}
}

// TestOpenDuringRollbackGetsTheNewFile: a rollback drops only the
// attributes of files no handle holds and leaves their pages to the stale
// inodes (fs.pagesFrom). A file read while the rollback holds the view,
// once those drops are sent, reads the checkpoint's content, and so does
// every file after it. The edits keep the size and the time, so the
// kernel's own checks of them cannot drop the pages instead. (The open
// that passed its check before the rollback moved the file, a narrower
// race, is fs.TestOpenWaitingForARollbackIsRefused.)
func TestOpenDuringRollbackGetsTheNewFile(t *testing.T) {
	l := newLive(t, func(base string) {
		for i := 0; i < 20; i++ {
			os.WriteFile(filepath.Join(base, fmt.Sprintf("f%02d", i)), []byte("base"), 0o644)
		}
	})
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		rel := fmt.Sprintf("f%02d", i)
		p := filepath.Join(l.mnt, rel)
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		l.write(rel, "EDIT")
		// The base file's time too: the kernel drops the pages of a file
		// whose time changed when it reads its attributes (FUSE's
		// auto_inval_data), which would hide a stale open.
		if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
			t.Fatal(err)
		}
		if got, _ := l.read(rel); got != "EDIT" { // its pages in the kernel
			t.Fatalf("%s: %q before the rollback", rel, got)
		}
	}
	type result struct {
		content string
		err     error
	}
	got := make(chan result, 1)
	_, err = l.mgr.RollbackTx("s", cp.ID, func(*layers.Txn, string) error {
		// The caches' drop began before this function; let it finish,
		// then open while the rollback holds the view.
		time.Sleep(50 * time.Millisecond)
		go func() {
			b, err := os.ReadFile(filepath.Join(l.mnt, "f07"))
			got <- result{string(b), err}
		}()
		time.Sleep(100 * time.Millisecond)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil || r.content != "base" {
		t.Fatalf("a read opened during the rollback: %q, %v; want \"base\"", r.content, r.err)
	}
	for i := 0; i < 20; i++ {
		rel := fmt.Sprintf("f%02d", i)
		if got, _ := l.read(rel); got != "base" {
			t.Errorf("%s after the rollback: %q, want \"base\"", rel, got)
		}
	}
}
