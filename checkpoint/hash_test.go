package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// TestStateHashIdentifiesState checks that the hash kept by layer deltas
// equals the one recomputed from the whole tree, that different states
// hash differently, and that coming back to a state gives its hash again.
func TestStateHashIdentifiesState(t *testing.T) {
	e := newStoreEnv(t, func(base string) { writeBase(t, base, "b.txt", "base") })
	baseHash, err := e.mgr.StateHash("s", "")
	if err != nil {
		t.Fatal(err)
	}
	// A first checkpoint of an untouched sandbox is the base's state.
	c0 := e.checkpoint("s", "c0")
	if c0.StateHash != baseHash {
		t.Fatalf("first checkpoint of an untouched sandbox hashes %s, base %s", c0.StateHash, baseHash)
	}
	h := []Checkpoint{c0}
	e.put("s", "a.txt", "1")
	h = append(h, e.checkpoint("s", "c1"))
	e.put("s", "a.txt", "2")
	h = append(h, e.checkpoint("s", "c2"))
	mode := uint32(0o600)
	if _, err := e.view("s").SetAttr(lookupPath(t, e.view("s"), "a.txt").Ino, layers.SetAttrIn{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	h = append(h, e.checkpoint("s", "c3"))
	seen := map[string]string{}
	for _, cp := range h {
		full, err := e.mgr.StateHash("s", cp.Layer)
		if err != nil {
			t.Fatal(err)
		}
		if full != cp.StateHash {
			t.Errorf("%s: recorded hash %s, full walk %s", cp.Label, cp.StateHash, full)
		}
		if other, ok := seen[cp.StateHash]; ok {
			t.Errorf("%s and %s have different trees but the same hash", other, cp.Label)
		}
		seen[cp.StateHash] = cp.Label
	}
	// Back at c1, a checkpoint with no change is c1's state.
	if _, err := e.mgr.Rollback("s", "c1"); err != nil {
		t.Fatal(err)
	}
	again := e.checkpoint("s", "again")
	if again.StateHash != h[1].StateHash {
		t.Fatalf("checkpoint after rollback to c1 hashes %s, c1 %s", again.StateHash, h[1].StateHash)
	}
	// A fork starts in the state it was forked from.
	if _, err := e.mgr.Fork("f", "c2"); err != nil {
		t.Fatal(err)
	}
	if fc := e.checkpoint("f", "fc"); fc.StateHash != h[2].StateHash {
		t.Fatalf("first checkpoint of a fork of c2 hashes %s, c2 %s", fc.StateHash, h[2].StateHash)
	}
	if _, err := e.mgr.StateHash("ghost", ""); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("state hash of a missing sandbox: %v", err)
	}
}

// TestHashWithoutParentHash freezes a layer without a checkpoint (so
// without a stored hash): the next checkpoint hashes the whole tree.
func TestHashWithoutParentHash(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "a", "1")
	e.checkpoint("s", "c0")
	e.put("s", "a", "2")
	if _, _, err := e.store.Freeze("s", func(*layers.Txn, string, string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	e.put("s", "b", "3")
	cp := e.checkpoint("s", "c1")
	full, err := e.mgr.StateHash("s", cp.Layer)
	if err != nil {
		t.Fatal(err)
	}
	if cp.StateHash != full {
		t.Fatalf("recorded hash %s, full walk %s", cp.StateHash, full)
	}
	// A damaged parent hash fails the checkpoint rather than chaining a
	// wrong sum into every later one.
	e.setRecord(keyLayerHash(cp.Layer), []byte("not a hash"))
	e.put("s", "b", "4")
	head, _ := e.store.Sandbox("s")
	if _, err := e.mgr.Create("s", Options{Label: "c2"}); !errors.Is(err, layers.ErrCorrupt) {
		t.Fatalf("checkpoint over a damaged hash: got %v, want ErrCorrupt", err)
	}
	if info, _ := e.store.Sandbox("s"); info.Head != head.Head {
		t.Fatal("failed checkpoint moved the head")
	}
	if _, err := e.mgr.Resolve("c2"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("failed checkpoint was recorded: %v", err)
	}
}

func TestVerify(t *testing.T) {
	h := newHistory(t)
	e := h.e
	for _, cp := range h.cps {
		vr, err := e.mgr.Verify(cp.Label)
		if err != nil {
			t.Fatal(err)
		}
		want := VerifyResult{Checkpoint: cp.ID, Sandbox: "s", Recorded: cp.StateHash, Computed: cp.StateHash, OK: true}
		if vr != want {
			t.Fatalf("verify %s: got %+v, want %+v", cp.Label, vr, want)
		}
	}
	if _, err := e.mgr.Verify("nope"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("verify of an unknown checkpoint: %v", err)
	}
}

// TestVerifyDetectsTamperedHash rewrites the hash a checkpoint record
// holds: Verify reports the mismatch with both values.
func TestVerifyDetectsTamperedHash(t *testing.T) {
	h := newHistory(t)
	e := h.e
	cp := h.cps[1]
	tampered := cp
	tampered.StateHash = "00000000000000000000000000000000000000000000000000000000000000ff"
	b, err := json.Marshal(tampered)
	if err != nil {
		t.Fatal(err)
	}
	e.setRecord(keyCP(cp.ID), b)
	vr, err := e.mgr.Verify(cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if vr.OK || vr.Recorded != tampered.StateHash || vr.Computed != cp.StateHash {
		t.Fatalf("verify of a tampered record: %+v; want a mismatch, computed %s", vr, cp.StateHash)
	}
	// The other checkpoints are unaffected.
	if vr, err := e.mgr.Verify(h.cps[2].ID); err != nil || !vr.OK {
		t.Fatalf("verify c2: %+v, %v", vr, err)
	}
}

// TestVerifyDetectsCorruptData damages the data file of the layer c2
// wrote: Verify of every checkpoint standing on it fails with ErrCorrupt,
// the ones below it still verify.
func TestVerifyDetectsCorruptData(t *testing.T) {
	h := newHistory(t)
	e := h.e
	e.close("s")
	p := filepath.Join(e.store.Dir(), "data", h.cps[2].Layer)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() == 0 {
		t.Fatal("c2's layer holds no data")
	}
	if err := os.WriteFile(p, bytes.Repeat([]byte{0xa5}, int(fi.Size())), 0o644); err != nil {
		t.Fatal(err)
	}
	for i, cp := range h.cps {
		vr, err := e.mgr.Verify(cp.ID)
		if i >= 2 {
			if !errors.Is(err, layers.ErrCorrupt) {
				t.Errorf("verify c%d over damaged data: %+v, %v; want ErrCorrupt", i, vr, err)
			}
			continue
		}
		if err != nil || !vr.OK {
			t.Errorf("verify c%d: %+v, %v", i, vr, err)
		}
	}
}
