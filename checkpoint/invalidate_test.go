package checkpoint

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// countingInval is the test mounts' invalidator, counting which of the
// two invalidations a move used.
type countingInval struct {
	ms            mounts
	full, touched int
}

func (c *countingInval) Invalidate(sandbox string) { c.full++; c.ms.Invalidate(sandbox) }
func (c *countingInval) InvalidateTouched(sandbox string, t layers.Touched) {
	c.touched++
	c.ms.InvalidateTouched(sandbox, t)
}

// pathState is what lstat and read tell of dir/rel through the mount,
// which answers from the kernel's caches where it can ("" when missing).
// Listing a directory would refresh them (READDIRPLUS), so paths are
// looked at one by one.
func pathState(t *testing.T, dir, rel string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	fi, err := os.Lstat(p)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	s := fmt.Sprintf("mode %o uid %d gid %d nlink %d size %d mtime %d", st.Mode, st.Uid, st.Gid, st.Nlink, st.Size, fi.ModTime().UnixNano())
	switch {
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		s += " content " + string(b)
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(p)
		if err != nil {
			t.Fatal(err)
		}
		s += " target " + target
	}
	return s
}

// statePaths is pathState of every path in paths.
func statePaths(t *testing.T, dir string, paths []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range paths {
		out[p] = pathState(t, dir, p)
	}
	return out
}

// TestRollbackDropsWhatTheKernelCachedOfTouchedInodes: a live rollback
// tells the kernel only about the inodes and directories it touched, and
// every change the kernel had cached — attributes a diff does not report
// (owner, mode, times, link count) as well as content, names and
// directories — is gone after it.
func TestRollbackDropsWhatTheKernelCachedOfTouchedInodes(t *testing.T) {
	l := newLive(t, func(base string) {
		for i := 0; i < 8; i++ {
			p := filepath.Join(base, "d", fmt.Sprintf("f%d", i))
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte(fmt.Sprintf("base %d", i)), 0o644)
		}
		os.MkdirAll(filepath.Join(base, "tree", "sub"), 0o755)
		os.WriteFile(filepath.Join(base, "tree", "sub", "x.txt"), []byte("x"), 0o644)
	})
	inval := &countingInval{ms: l.ms}
	l.mgr = New(l.store, inval)
	l.write("up.txt", "upper")
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	paths := []string{".", "up.txt", "d", "d/f3.link", "tree", "tree/sub", "tree/sub/x.txt", "tree2", "tree2/sub", "tree2/sub/x.txt", "new", "new/ln"}
	for i := 0; i < 8; i++ {
		paths = append(paths, fmt.Sprintf("d/f%d", i))
	}
	want := statePaths(t, l.mnt, paths)

	mnt := func(rel string) string { return filepath.Join(l.mnt, rel) }
	steps := []struct {
		name string
		do   func() error
	}{
		{"chmod", func() error { return os.Chmod(mnt("d/f0"), 0o600) }},
		{"chown", func() error { return os.Lchown(mnt("d/f1"), 1234, 4321) }},
		{"utimes", func() error {
			return os.Chtimes(mnt("d/f2"), time.Unix(1e9, 0), time.Unix(1e9, 0))
		}},
		{"link", func() error { return os.Link(mnt("d/f3"), mnt("d/f3.link")) }},
		{"write", func() error { return os.WriteFile(mnt("d/f4"), []byte("changed"), 0o644) }},
		{"truncate", func() error { return os.Truncate(mnt("d/f5"), 2) }},
		{"remove", func() error { return os.Remove(mnt("d/f6")) }},
		{"rename dir", func() error { return os.Rename(mnt("tree"), mnt("tree2")) }},
		{"mkdir", func() error { return os.Mkdir(mnt("new"), 0o755) }},
		{"symlink", func() error { return os.Symlink("d/f7", mnt("new/ln")) }},
		{"chmod upper", func() error { return os.Chmod(mnt("up.txt"), 0o640) }},
		{"chmod root", func() error { return os.Chmod(l.mnt, 0o700) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
	}
	// The kernel now caches the changed state.
	changed := statePaths(t, l.mnt, paths)
	for _, p := range paths {
		if changed[p] == want[p] && p != "d/f7" && p != "tree/sub/x.txt" && p != "tree/sub" {
			t.Fatalf("%s did not change: %s", p, want[p])
		}
	}
	if _, err := l.mgr.Rollback("s", cp.ID); err != nil {
		t.Fatal(err)
	}
	if inval.touched != 1 || inval.full != 0 {
		t.Errorf("rollback invalidated %d times by what it touched and %d times wholly, want 1 and 0", inval.touched, inval.full)
	}
	for _, p := range paths {
		if got := pathState(t, l.mnt, p); got != want[p] {
			t.Errorf("%s after rollback: %q, want %q", p, got, want[p])
		}
	}
}
