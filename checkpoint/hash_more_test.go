package checkpoint

import (
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// TestHashOfRenamedBack: a layer that renames a file away and back
// records the entry with the same state on both sides; the checkpoint's
// hash from the delta must still be the hash of its whole tree.
func TestHashOfRenamedBack(t *testing.T) {
	e := newStoreEnv(t, func(base string) { writeBase(t, base, "d/b", "base") })
	e.put("s", "x", "1")
	e.checkpoint("s", "c0")
	v := e.view("s")
	d := lookupPath(t, v, "d")
	if err := v.Rename(d.Ino, "b", layers.RootIno, "moved", 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Rename(layers.RootIno, "moved", d.Ino, "b", 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Rename(layers.RootIno, "x", layers.RootIno, "y", 0); err != nil {
		t.Fatal(err)
	}
	if err := v.Rename(layers.RootIno, "y", layers.RootIno, "x", 0); err != nil {
		t.Fatal(err)
	}
	cp := e.checkpoint("s", "c1")
	want, err := e.mgr.StateHash("s", cp.Layer)
	if err != nil {
		t.Fatal(err)
	}
	if cp.StateHash != want {
		t.Fatalf("checkpoint hash %s, the tree hashes to %s", cp.StateHash, want)
	}
	c0, err := e.mgr.Resolve("c0")
	if err != nil {
		t.Fatal(err)
	}
	if cp.StateHash != c0.StateHash {
		t.Fatalf("renamed back, the state hash moved: %s, was %s", cp.StateHash, c0.StateHash)
	}
}
