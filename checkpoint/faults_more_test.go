package checkpoint

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// TestInjectedLayerReadFaults makes the reads of layer records that a
// checkpoint or a rollback makes inside its transaction fail (the layer
// record the state hash starts from, the block count of the layers frozen
// or left): the operation must fail with that error and leave head,
// checkpoints, archives and files as they were, mounted or not. Once the
// fault is gone the same operation succeeds.
func TestInjectedLayerReadFaults(t *testing.T) {
	type call func(e *storeEnv, ar Archive) error
	create := func(e *storeEnv, _ Archive) error { _, err := e.mgr.Create("s", Options{Label: "new"}); return err }
	rollback := func(e *storeEnv, _ Archive) error { _, err := e.mgr.Rollback("s", "c0"); return err }
	restore := func(e *storeEnv, ar Archive) error { _, err := e.mgr.Restore(ar.ID); return err }
	cases := []struct {
		name, op string
		call     call
	}{
		{"create: layer record", "layer", create},
		{"create: layer blocks", "blocks", create},
		{"rollback: blocks left", "blocks", rollback},
		{"restore: blocks left", "blocks", restore},
	}
	for _, mounted := range []bool{true, false} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s mounted=%v", c.name, mounted), func(t *testing.T) {
				e := newStoreEnv(t, func(base string) { writeBase(t, base, "b", "base") })
				e.put("s", "x", "1")
				e.checkpoint("s", "c0")
				e.put("s", "x", "2")
				e.checkpoint("s", "c1")
				if _, err := e.mgr.Rollback("s", "c0"); err != nil {
					t.Fatal(err)
				}
				ars, err := e.mgr.Archives("s")
				if err != nil || len(ars) != 1 {
					t.Fatalf("archives: %v %v", ars, err)
				}
				e.put("s", "x", "3")
				if !mounted {
					e.close("s")
				}
				before := e.faultState(mounted)
				hits := 0
				restore := e.store.InjectFault(failOn(c.op, "", &hits))
				err = c.call(e, ars[0])
				restore()
				if !errors.Is(err, errInjected) {
					t.Fatalf("got %v, want the injected fault", err)
				}
				if hits == 0 {
					t.Fatal("the fault was never asked")
				}
				if after := e.faultState(mounted); !reflect.DeepEqual(before, after) {
					t.Fatalf("a failed operation changed the state\nbefore %+v\nafter  %+v", before, after)
				}
				if err := c.call(e, ars[0]); err != nil {
					t.Fatalf("without the fault: %v", err)
				}
				if after := e.faultState(mounted); reflect.DeepEqual(before, after) {
					t.Fatalf("the operation without the fault changed nothing: %+v", after)
				}
			})
		}
	}
}

// TestLayerReportFaults: when the layer list or a layer's block usage
// cannot be read, `layers list` and `layers inspect` fail with that error
// instead of reporting a partial or zero figure; once the fault is gone
// they report what they reported before.
func TestLayerReportFaults(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "a", strings.Repeat("a", 2*layers.MinBlockSize))
	c0 := e.checkpoint("s", "c0")
	e.put("s", "b", "b")
	e.checkpoint("s", "c1")
	if _, err := e.mgr.Rollback("s", "c0"); err != nil {
		t.Fatal(err)
	}
	e.close("s")
	list := func(m *Manager) (any, error) { return m.Layers("s", true) }
	inspect := func(m *Manager) (any, error) { return m.Inspect(c0.Layer) }
	cases := []struct {
		name, op, key string
		call          func(m *Manager) (any, error)
	}{
		{"list: layers", "layers", "s", list},
		{"list: usage of the checkpoint's layer", "usage", c0.Layer, list},
		{"list: usage of any layer", "usage", "", list},
		{"inspect: usage", "usage", c0.Layer, inspect},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want, err := c.call(e.mgr)
			if err != nil {
				t.Fatal(err)
			}
			hits := 0
			restore := e.store.InjectFault(failOn(c.op, c.key, &hits))
			got, err := c.call(e.mgr)
			restore()
			if !errors.Is(err, errInjected) || hits == 0 {
				t.Fatalf("got %+v, %v (fault asked %d times), want the injected fault", got, err, hits)
			}
			if again, err := c.call(e.mgr); err != nil || !reflect.DeepEqual(again, want) {
				t.Fatalf("without the fault: %+v %v, want %+v", again, err, want)
			}
		})
	}
	// The report the faults were compared against is a real one.
	r, err := e.mgr.Inspect(c0.Layer)
	if err != nil || r.Blocks != 2 || r.Checkpoint != c0.ID {
		t.Fatalf("inspect: %+v %v", r, err)
	}
}

// TestInspectOrphanLayer: a layer whose sandbox was removed while a fork
// stands on it is reported as it is (its bytes are its slots', so no
// sandbox's block size is needed); when its block records cannot be read,
// inspect fails with that error.
func TestInspectOrphanLayer(t *testing.T) {
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
	r, err := e.mgr.Inspect(c0.Layer)
	if err != nil || r.Blocks != 2 || r.Files != 1 || r.Bytes != 2*layers.MinBlockSize {
		t.Fatalf("inspect: %+v %v, want 1 file in 2 blocks of %d bytes", r, err, layers.MinBlockSize)
	}
	hits := 0
	restore := e.store.InjectFault(failOn("usage", c0.Layer, &hits))
	r, err = e.mgr.Inspect(c0.Layer)
	restore()
	if !errors.Is(err, errInjected) || hits == 0 {
		t.Fatalf("got %+v, %v (fault asked %d times), want the injected fault", r, err, hits)
	}
}
