package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

func TestLayersReport(t *testing.T) {
	e := newStoreEnv(t, nil)
	bs := int64(layers.MinBlockSize)
	e.put("s", "one", strings.Repeat("1", 3*layers.MinBlockSize))
	e.put("s", "two", "2")
	c0 := e.checkpoint("s", "c0")
	e.put("s", "three", strings.Repeat("3", layers.MinBlockSize+1))
	c1 := e.checkpoint("s", "c1")
	e.put("s", "four", "4")
	// What a mount wrote is counted once sealed (a view seals on its own
	// every few seconds; Sync seals now).
	if err := e.view("s").Sync(); err != nil {
		t.Fatal(err)
	}
	rs, err := e.mgr.Layers("s", false)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := e.store.Sandbox("s")
	type row struct {
		id, state, cp string
		files         int
		blocks        int64
	}
	want := []row{
		{info.Head, layers.StateActive, "", 1, 1},
		{c1.Layer, layers.StateFrozen, c1.ID, 1, 2},
		{c0.Layer, layers.StateFrozen, c0.ID, 2, 4},
	}
	if len(rs) != len(want) {
		t.Fatalf("layers: got %d, want %d: %+v", len(rs), len(want), rs)
	}
	for i, w := range want {
		r := rs[i]
		got := row{r.ID, r.State, r.Checkpoint, r.Files, r.Blocks}
		if got != w || r.Bytes != r.Blocks*bs || r.Sandbox != "s" {
			t.Errorf("layer %d: got %+v (bytes %d), want %+v", i, got, r.Bytes, w)
		}
		one, err := e.mgr.Inspect(r.ID)
		if err != nil {
			t.Fatal(err)
		}
		if one != r {
			t.Errorf("inspect %s: %+v, listed %+v", r.ID, one, r)
		}
	}
	if c0.Bytes != rs[2].Bytes || c1.Bytes != rs[1].Bytes {
		t.Errorf("checkpoint bytes %d and %d, layers report %d and %d", c0.Bytes, c1.Bytes, rs[2].Bytes, rs[1].Bytes)
	}
	// After a rollback the layers above c0 are archived: listed only on
	// request.
	if _, err := e.mgr.Rollback("s", "c0"); err != nil {
		t.Fatal(err)
	}
	rs, err = e.mgr.Layers("s", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[1].ID != c0.Layer {
		t.Fatalf("layers after rollback: %+v", rs)
	}
	all, err := e.mgr.Layers("s", true)
	if err != nil {
		t.Fatal(err)
	}
	archived := map[string]bool{}
	for _, r := range all[len(rs):] {
		if r.State != layers.StateArchived {
			t.Errorf("listed archived layer %+v", r)
		}
		archived[r.ID] = true
	}
	if len(all) != len(rs)+2 || !archived[c1.Layer] || !archived[info.Head] {
		t.Fatalf("layers with archived: %+v", all)
	}
	if _, err := e.mgr.Layers("ghost", false); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("layers of a missing sandbox: %v", err)
	}
	if _, err := e.mgr.Inspect("NOSUCHLAYER"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("inspect of a missing layer: %v", err)
	}
}

// TestInspectSharedLayerAfterOriginRemoved removes a sandbox a fork stands
// on: the layers it shares with the fork stay, and inspecting them must
// keep working.
func TestInspectSharedLayerAfterOriginRemoved(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "a", strings.Repeat("a", 2*layers.MinBlockSize))
	c0 := e.checkpoint("s", "c0")
	if _, err := e.mgr.Fork("f", "c0"); err != nil {
		t.Fatal(err)
	}
	e.close("s")
	if err := e.mgr.RemoveSandbox("s"); err != nil {
		t.Fatal(err)
	}
	rs, err := e.mgr.Layers("f", false)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[1].ID != c0.Layer || rs[1].Blocks != 2 {
		t.Fatalf("layers of the fork: %+v", rs)
	}
	r, err := e.mgr.Inspect(c0.Layer)
	if err != nil {
		t.Fatalf("inspect of a layer the fork stands on: %v", err)
	}
	if r.Blocks != 2 || r.Bytes != 2*layers.MinBlockSize {
		t.Fatalf("inspect of a layer the fork stands on: %+v", r)
	}
}
