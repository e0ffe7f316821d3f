package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// sentInval is touchedInval that keeps how many notifications each
// targeted invalidation sent.
type sentInval struct {
	m    *Mount
	sent *[]int
}

func (i sentInval) Invalidate(string) { i.m.Invalidate() }

func (i sentInval) InvalidateTouched(_ string, t layers.Touched) {
	*i.sent = append(*i.sent, i.m.InvalidateTouched(t))
}

// TestRollbackNotifiesOnlyChangedNames: in a directory whose entries a
// rollback changed, the kernel is told about the changed names only, not
// about every name it knows there, and what it then shows is the
// checkpoint's state, the unchanged names included.
func TestRollbackNotifiesOnlyChangedNames(t *testing.T) {
	const files = 200
	sb := newSandbox(t, func(base string) {
		for i := 0; i < files; i++ {
			writeFile(t, filepath.Join(base, "d", fmt.Sprintf("f%03d", i)), fmt.Sprintf("base %d", i))
		}
	})
	var sent []int
	mgr := checkpoint.New(sb.store, sentInval{sb.m, &sent})
	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	// The kernel learns every name of d.
	for i := 0; i < files; i++ {
		if _, err := os.Lstat(sb.path(fmt.Sprintf("d/f%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, sb.path("d/new"), "new")
	mustNil(t, "remove", os.Remove(sb.path("d/f000")))
	writeFile(t, sb.path("d/f001"), "changed")
	mustNil(t, "rename", os.Rename(sb.path("d/f002"), sb.path("d/f002.moved")))
	if _, err := os.Lstat(sb.path("d/missing")); !os.IsNotExist(err) {
		t.Fatalf("d/missing: got %v, want not found", err)
	}
	_, err = mgr.Rollback(sb.name, cp.ID)
	mustNil(t, "rollback", err)
	if len(sent) != 1 {
		t.Fatalf("the rollback used %d targeted invalidations, want 1", len(sent))
	}
	// d's attributes and listing, f001's and new's contents, and the
	// names new, f000, f002 and f002.moved; f000 and f002 are not known
	// as inodes any more, so less may be sent, never a name per file.
	if sent[0] > 10 {
		t.Fatalf("the rollback sent %d notifications for 4 changed names of %d", sent[0], files)
	}
	want := map[string]string{"d/f000": "base 0", "d/f001": "base 1", "d/f002": "base 2", "d/f100": "base 100", "d/f199": "base 199"}
	for p, w := range want {
		if got := readFile(t, sb.path(p)); got != w {
			t.Errorf("%s after the rollback: %q, want %q", p, got, w)
		}
	}
	for _, p := range []string{"d/new", "d/f002.moved", "d/missing"} {
		if _, err := os.Lstat(sb.path(p)); !os.IsNotExist(err) {
			t.Errorf("%s after the rollback: got %v, want not found", p, err)
		}
	}
	ents, err := os.ReadDir(sb.path("d"))
	mustNil(t, "readdir", err)
	if len(ents) != files {
		t.Errorf("d lists %d entries after the rollback, want %d", len(ents), files)
	}
}
