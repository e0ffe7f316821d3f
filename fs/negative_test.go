package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// fullInval is a checkpoint.Invalidator that always drops everything.
type fullInval struct{ m *Mount }

func (i fullInval) Invalidate(string) { i.m.Invalidate() }

// underBothInvalidations runs test on a sandbox whose base holds
// d/base.txt, with a checkpoint manager that drops the kernel's caches
// after a repoint by what it touched, then with one that drops everything:
// what a test checks must hold under both.
func underBothInvalidations(t *testing.T, test func(t *testing.T, sb *sandbox, mgr *checkpoint.Manager)) {
	t.Helper()
	for _, c := range []struct {
		name  string
		inval func(m *Mount) checkpoint.Invalidator
	}{
		{"touched", func(m *Mount) checkpoint.Invalidator { return touchedInval{m} }},
		{"full", func(m *Mount) checkpoint.Invalidator { return fullInval{m} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			sb := newSandbox(t, func(base string) {
				writeFile(t, filepath.Join(base, "d", "base.txt"), "base")
			})
			test(t, sb, checkpoint.New(sb.store, c.inval(sb.m)))
		})
	}
}

// TestMissingNamesAfterRollback: names looked up while missing are cached
// by the kernel (a second lookup is not asked of the view), and a rollback
// that brings them back shows them at once, whether it drops only what it
// touched or everything.
func TestMissingNamesAfterRollback(t *testing.T) {
	underBothInvalidations(t, func(t *testing.T, sb *sandbox, mgr *checkpoint.Manager) {
		writeFile(t, sb.path("d/new.txt"), "new")
		mustNil(t, "mkdir", os.MkdirAll(sb.path("dir/sub"), 0o755))
		cp, err := mgr.Create(sb.name, checkpoint.Options{})
		mustNil(t, "checkpoint", err)
		gone := []string{"d/base.txt", "d/new.txt", "dir", "dir/sub"}
		mustNil(t, "remove", os.Remove(sb.path("d/base.txt")))
		mustNil(t, "remove", os.Remove(sb.path("d/new.txt")))
		mustNil(t, "remove", os.RemoveAll(sb.path("dir")))
		for _, p := range append(gone, "d/never") {
			for i := 0; i < 2; i++ {
				if _, err := os.Lstat(sb.path(p)); !os.IsNotExist(err) {
					t.Fatalf("%s after remove: got %v, want not found", p, err)
				}
			}
		}
		n := sb.m.negs.len()
		if n < 3 {
			t.Fatalf("the mount lets the kernel cache %d missing names, want the ones looked up", n)
		}
		// A name made through the mount is no longer missing: the
		// kernel knows, and the list forgets it.
		if _, err := os.Lstat(sb.path("d/later")); !os.IsNotExist(err) {
			t.Fatalf("d/later: got %v, want not found", err)
		}
		writeFile(t, sb.path("d/later"), "later")
		if got := sb.m.negs.len(); got != n {
			t.Fatalf("after creating a name looked up as missing: %d names listed, want %d", got, n)
		}
		_, err = mgr.Rollback(sb.name, cp.ID)
		mustNil(t, "rollback", err)
		for _, p := range gone {
			if _, err := os.Lstat(sb.path(p)); err != nil {
				t.Fatalf("%s after rollback: %v", p, err)
			}
		}
		if got := readFile(t, sb.path("d/base.txt")); got != "base" {
			t.Fatalf("d/base.txt after rollback: %q", got)
		}
		if _, err := os.Lstat(sb.path("d/never")); !os.IsNotExist(err) {
			t.Fatalf("d/never after rollback: got %v, want not found", err)
		}
	})
}

// TestMissingNamesIndex checks the index's rules: a name is recorded once,
// a repoint or a drop since the lookup began keeps it out, the bound keeps new ones
// out, forget and take drop what they name.
func TestMissingNamesIndex(t *testing.T) {
	var ng negatives
	yes := func() bool { return true }
	no := func() bool { return false }
	steps := []struct {
		what  string
		do    func() bool
		want  bool
		count int
	}{
		{"add", func() bool { return ng.add(1, "a", 0, yes) }, true, 1},
		{"add again", func() bool { return ng.add(1, "a", 0, yes) }, true, 1},
		{"add after a repoint", func() bool { return ng.add(1, "b", 0, no) }, false, 1},
		{"add in another directory", func() bool { return ng.add(2, "a", 0, yes) }, true, 2},
		{"forget", func() bool { ng.forget(1, "a"); return true }, true, 1},
		{"forget what is not there", func() bool { ng.forget(1, "zz"); ng.forget(9, "a"); return true }, true, 1},
		{"take one directory", func() bool { return len(ng.take([]uint64{2, 3}, false)[2]) == 1 }, true, 0},
		{"add after a drop began", func() bool { since := ng.dropsNow(); ng.drop(); return ng.add(1, "c", since, yes) }, false, 0},
		{"add that began after the drop", func() bool { return ng.add(1, "c", ng.dropsNow(), yes) }, true, 1},
		{"take it", func() bool { return len(ng.take([]uint64{1}, false)[1]) == 1 }, true, 0},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want || ng.count != s.count {
			t.Fatalf("%s: got %v with %d names, want %v with %d", s.what, got, ng.count, s.want, s.count)
		}
	}
	for i := 0; i < maxNegatives; i++ {
		ng.add(uint64(i%7), fmt.Sprint(i), ng.dropsNow(), yes)
	}
	if ng.add(1, "over", ng.dropsNow(), yes) || ng.count != maxNegatives {
		t.Fatalf("past the bound: count %d, want %d and the name refused", ng.count, maxNegatives)
	}
	if all := ng.take(nil, true); len(all) != 7 || ng.count != 0 || ng.dirs != nil {
		t.Fatalf("take all: %d directories, %d left", len(all), ng.count)
	}
	if !ng.add(layers.RootIno, "again", ng.dropsNow(), yes) {
		t.Fatal("after take, names are recorded again")
	}
}
