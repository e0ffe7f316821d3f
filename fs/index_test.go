package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// TestIndexDoesNotGrowWithRollbacks: a name looked up again after a
// rollback gave it back to an inode go-fuse still has (held open here)
// keeps that inode: a new one would be discarded by go-fuse and stay in
// the index, one more per rollback.
func TestIndexDoesNotGrowWithRollbacks(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		for i := 0; i < 20; i++ {
			writeFile(t, filepath.Join(base, fmt.Sprintf("f%02d", i)), "base")
		}
	})
	mgr := checkpoint.New(sb.store, touchedInval{sb.m})
	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	// Open files keep their inodes in the kernel (and in go-fuse) across
	// the rollbacks, so each lookup after one finds the inode still known.
	for i := 0; i < 20; i++ {
		f, err := os.Open(sb.path(fmt.Sprintf("f%02d", i)))
		mustNil(t, "open", err)
		defer f.Close()
	}
	var most []int
	for round := 0; round < 5; round++ {
		for i := 0; i < 20; i++ {
			// A new file under the old name: the rollback gives the name
			// back to the base file's inode.
			p := sb.path(fmt.Sprintf("f%02d", i))
			mustNil(t, "remove", os.Remove(p))
			mustNil(t, "write", os.WriteFile(p, []byte(fmt.Sprintf("round %d", round)), 0o644))
			if _, err := os.Stat(p); err != nil {
				t.Fatal(err)
			}
		}
		_, err := mgr.Rollback(sb.name, cp.ID)
		mustNil(t, "rollback", err)
		for i := 0; i < 20; i++ {
			if got := readFile(t, sb.path(fmt.Sprintf("f%02d", i))); got != "base" {
				t.Fatalf("round %d: f%02d after rollback: %q", round, i, got)
			}
		}
		most = append(most, sb.m.index.mostPerNumber())
	}
	for _, m := range most {
		if m > 1 {
			t.Fatalf("most inodes indexed for one number after each round: %v; want 1", most)
		}
	}
}

// touchedInval is a checkpoint.TouchedInvalidator of one mount.
type touchedInval struct{ m *Mount }

func (i touchedInval) Invalidate(string) { i.m.Invalidate() }

func (i touchedInval) InvalidateTouched(_ string, t layers.Touched) { i.m.InvalidateTouched(t) }
