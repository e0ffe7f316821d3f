package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// op is one Manager call of an error-path table.
type op struct {
	name string
	call func(m *Manager) error
}

// runOps runs every op and checks that each fails with want.
func runOps(t *testing.T, m *Manager, want error, ops []op) {
	t.Helper()
	for _, o := range ops {
		t.Run(o.name, func(t *testing.T) {
			err := o.call(m)
			if err == nil {
				t.Fatalf("%s: no error", o.name)
			}
			if !errors.Is(err, want) {
				t.Fatalf("%s: got %v, want %v", o.name, err, want)
			}
		})
	}
}

func TestMissingSandbox(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "a", "a")
	e.checkpoint("s", "c0")
	runOps(t, e.mgr, layers.ErrNotFound, []op{
		{"create", func(m *Manager) error { _, err := m.Create("ghost", Options{}); return err }},
		{"create with label", func(m *Manager) error { _, err := m.Create("ghost", Options{Label: "x"}); return err }},
		{"list", func(m *Manager) error { _, err := m.List("ghost"); return err }},
		{"archives", func(m *Manager) error { _, err := m.Archives("ghost"); return err }},
		{"layers", func(m *Manager) error { _, err := m.Layers("ghost", true); return err }},
		{"prune", func(m *Manager) error { _, err := m.Prune("ghost", Policy{KeepLast: 1}); return err }},
		{"remove sandbox", func(m *Manager) error { return m.RemoveSandbox("ghost") }},
		{"state hash", func(m *Manager) error { _, err := m.StateHash("ghost", ""); return err }},
	})
	// A checkpoint that exists, asked for in a sandbox that does not: the
	// sandbox is what is missing.
	if _, err := e.mgr.Rollback("ghost", "c0"); !errors.Is(err, layers.ErrNotFound) || !strings.Contains(err.Error(), "sandbox ghost") {
		t.Fatalf("rollback of a missing sandbox: %v", err)
	}
	if cps, err := e.mgr.List("s"); err != nil || len(cps) != 1 {
		t.Fatalf("the existing sandbox after the failures: %v, %v", ids(cps), err)
	}
}

// TestClosedStore checks that every call on a closed store fails with
// layers.ErrClosed, which callers (the CLI, the control server) test for.
func TestClosedStore(t *testing.T) {
	h := newHistory(t)
	e := h.e
	res, err := e.mgr.Rollback("s", "c1")
	if err != nil {
		t.Fatal(err)
	}
	e.close("s")
	if err := e.store.Close(); err != nil {
		t.Fatal(err)
	}
	layer := h.cps[0].Layer
	var notClosed []string
	for _, o := range []op{
		{"create", func(m *Manager) error { _, err := m.Create("s", Options{}); return err }},
		{"list", func(m *Manager) error { _, err := m.List("s"); return err }},
		{"resolve", func(m *Manager) error { _, err := m.Resolve("c0"); return err }},
		{"rollback", func(m *Manager) error { _, err := m.Rollback("s", "c0"); return err }},
		{"archives", func(m *Manager) error { _, err := m.Archives("s"); return err }},
		{"resolve archive", func(m *Manager) error { _, err := m.ResolveArchive(res.Archive); return err }},
		{"restore", func(m *Manager) error { _, err := m.Restore(res.Archive); return err }},
		{"export", func(m *Manager) error { _, err := m.Export(res.Archive, filepath.Join(e.dir, "out")); return err }},
		{"diff", func(m *Manager) error { _, err := m.DiffCheckpoints("c0", ""); return err }},
		{"verify", func(m *Manager) error { _, err := m.Verify("c0"); return err }},
		{"state hash", func(m *Manager) error { _, err := m.StateHash("s", layer); return err }},
		{"prune", func(m *Manager) error { _, err := m.Prune("s", Policy{KeepLast: 1}); return err }},
		{"remove", func(m *Manager) error { _, err := m.Remove("c0"); return err }},
		{"fork", func(m *Manager) error { _, err := m.Fork("f", "c0"); return err }},
		{"layers", func(m *Manager) error { _, err := m.Layers("s", true); return err }},
		{"inspect", func(m *Manager) error { _, err := m.Inspect(layer); return err }},
		{"remove sandbox", func(m *Manager) error { return m.RemoveSandbox("s") }},
	} {
		err := o.call(e.mgr)
		if err == nil {
			t.Fatalf("%s on a closed store: no error", o.name)
		}
		if !errors.Is(err, layers.ErrClosed) {
			notClosed = append(notClosed, o.name+": "+err.Error())
		}
	}
	if len(notClosed) > 0 {
		t.Errorf("on a closed store these fail without ErrClosed:\n%s", strings.Join(notClosed, "\n"))
	}
}

// TestCorruptCheckpointRecord damages one checkpoint record: every call
// that reads it fails with ErrCorrupt instead of acting on half a record,
// and what does not read it keeps working.
func TestCorruptCheckpointRecord(t *testing.T) {
	h := newHistory(t)
	e := h.e
	e.setRecord(keyCP(h.cps[1].ID), []byte(`{"id": "`))
	runOps(t, e.mgr, layers.ErrCorrupt, []op{
		{"list", func(m *Manager) error { _, err := m.List("s"); return err }},
		{"resolve by label", func(m *Manager) error { _, err := m.Resolve("c1"); return err }},
		{"resolve by id", func(m *Manager) error { _, err := m.Resolve(h.cps[1].ID); return err }},
		{"resolve by id prefix", func(m *Manager) error { _, err := m.Resolve(h.cps[1].ID[:20]); return err }},
		{"resolve in", func(m *Manager) error { _, err := m.ResolveIn("s", "c1"); return err }},
		{"create with its label", func(m *Manager) error { _, err := m.Create("s", Options{Label: "c1"}); return err }},
		{"rollback", func(m *Manager) error { _, err := m.Rollback("s", "c1"); return err }},
		{"prune", func(m *Manager) error { _, err := m.Prune("s", Policy{KeepLast: 1}); return err }},
		{"remove", func(m *Manager) error { _, err := m.Remove("c1"); return err }},
		{"remove sandbox", func(m *Manager) error { e.close("s"); return m.RemoveSandbox("s") }},
	})
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[3]) {
		t.Fatalf("failed calls changed the sandbox:\n%v", got)
	}
	if _, err := e.store.Sandbox("s"); err != nil {
		t.Fatalf("failed remove dropped the sandbox: %v", err)
	}
	// Resolving another checkpoint reads no other record (label keys),
	// nor does a checkpoint without a label, or with another.
	if cp, err := e.mgr.ResolveIn("s", "c2"); err != nil || cp.ID != h.cps[2].ID {
		t.Fatalf("resolve c2 beside the damaged c1: %v, %v", cp.ID, err)
	}
	if cp, err := e.mgr.Resolve(h.cps[0].ID[:20]); err != nil || cp.ID != h.cps[0].ID {
		t.Fatalf("resolve c0 by id prefix beside the damaged c1: %v, %v", cp.ID, err)
	}
	// A store made before label keys resolves by reading every record.
	if err := e.store.Update(func(tx *layers.Txn) error { return tx.Delete(keyCPLabelsIndexed) }); err != nil {
		t.Fatal(err)
	}
	if _, err := e.mgr.Resolve("c2"); !errors.Is(err, layers.ErrCorrupt) {
		t.Fatalf("resolve c2 by the scan of every record: %v, want ErrCorrupt", err)
	}
	if _, err := e.mgr.Create("s", Options{}); err != nil {
		t.Fatalf("checkpoint without a label: %v", err)
	}
	if _, err := e.mgr.Create("s", Options{Label: "new"}); err != nil {
		t.Fatalf("checkpoint with another label: %v", err)
	}
	if _, err := e.mgr.Layers("s", true); err != nil {
		t.Fatalf("layers: %v", err)
	}
}

func TestDanglingCheckpointIndex(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "a", "a")
	e.checkpoint("s", "c0")
	e.setRecord(keyCPIndex("s", layers.NewID()), nil)
	if _, err := e.mgr.List("s"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("list with an index entry of no checkpoint: %v", err)
	}
}

func TestCorruptArchiveRecord(t *testing.T) {
	h := newHistory(t)
	e := h.e
	res, err := e.mgr.Rollback("s", "c1")
	if err != nil {
		t.Fatal(err)
	}
	e.setRecord(keyArchive(res.Archive), []byte("{]"))
	runOps(t, e.mgr, layers.ErrCorrupt, []op{
		{"archives", func(m *Manager) error { _, err := m.Archives("s"); return err }},
		{"resolve archive by id", func(m *Manager) error { _, err := m.ResolveArchive(res.Archive); return err }},
		{"resolve archive by prefix", func(m *Manager) error { _, err := m.ResolveArchive(res.Archive[:12]); return err }},
		{"restore", func(m *Manager) error { _, err := m.Restore(res.Archive); return err }},
		{"export", func(m *Manager) error { _, err := m.Export(res.Archive, filepath.Join(e.dir, "out")); return err }},
		{"remove sandbox", func(m *Manager) error { e.close("s"); return m.RemoveSandbox("s") }},
	})
	if _, err := os.Stat(filepath.Join(e.dir, "out")); !os.IsNotExist(err) {
		t.Fatalf("failed export made its directory: %v", err)
	}
	if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[1]) {
		t.Fatalf("failed calls changed the sandbox:\n%v", got)
	}
}

// TestRecordsOfMissingObjects writes well-formed records that name a
// layer or a sandbox that does not exist: calls on them fail and change
// nothing.
func TestRecordsOfMissingObjects(t *testing.T) {
	h := newHistory(t)
	e := h.e
	noLayer := h.cps[0]
	noLayer.ID, noLayer.Label, noLayer.Layer = layers.NewID(), "no-layer", "NOSUCHLAYER"
	noSandbox := Archive{ID: layers.NewID(), Sandbox: "ghost", Top: h.cps[0].Layer, Layers: []string{h.cps[0].Layer}}
	for key, v := range map[string]any{
		keyCP(noLayer.ID):               noLayer,
		keyCPIndex("s", noLayer.ID):     nil,
		keyArchive(noSandbox.ID):        noSandbox,
		keyArchiveIndex("s", "IGNORED"): nil,
	} {
		var b []byte
		if v != nil {
			b, _ = json.Marshal(v)
		}
		e.setRecord(key, b)
	}
	head, _ := e.store.Sandbox("s")
	runOps(t, e.mgr, layers.ErrNotFound, []op{
		{"rollback to a missing layer", func(m *Manager) error { _, err := m.Rollback("s", "no-layer"); return err }},
		{"fork of a missing layer", func(m *Manager) error { _, err := m.Fork("f", "no-layer"); return err }},
		{"verify of a missing layer", func(m *Manager) error { _, err := m.Verify("no-layer"); return err }},
		{"diff from a missing layer", func(m *Manager) error { _, err := m.DiffCheckpoints("no-layer", "c1"); return err }},
		{"restore into a missing sandbox", func(m *Manager) error { _, err := m.Restore(noSandbox.ID); return err }},
	})
	if info, _ := e.store.Sandbox("s"); info.Head != head.Head {
		t.Fatal("a failed call moved the head")
	}
	if _, err := e.store.Sandbox("f"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("failed fork made the sandbox: %v", err)
	}
}

// TestBaseDirectoryBecomesSymlink replaces a base directory the
// checkpoint stands on by a symlink to another tree (the base is meant to
// stay as it was; this is damage): verify reports the mismatch, and export
// writes the symlink as a symlink, never anything of the tree it names.
func TestBaseDirectoryBecomesSymlink(t *testing.T) {
	e := newStoreEnv(t, func(base string) {
		writeBase(t, base, "d/x", "x")
		writeBase(t, base, "d/e/z", "z")
	})
	e.put("s", "d/y", "y")
	cp := e.checkpoint("s", "c")
	e.put("s", "q", "q")
	res, err := e.mgr.Rollback("s", "c")
	if err != nil {
		t.Fatal(err)
	}
	e.close("s")
	elsewhere := filepath.Join(e.dir, "elsewhere")
	writeBase(t, elsewhere, "e/secret", "not the sandbox's")
	// The symlink is made before d goes, so it cannot reuse d's inode
	// number (the base's inode numbers are the sandbox's).
	d := filepath.Join(e.base, "d")
	if err := os.Symlink(elsewhere, d+".new"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(d); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(d+".new", d); err != nil {
		t.Fatal(err)
	}
	vr, err := e.mgr.Verify(cp.ID)
	if err != nil {
		t.Fatal(err)
	}
	if vr.OK || vr.Recorded != cp.StateHash || vr.Computed == cp.StateHash {
		t.Fatalf("verify after the base changed: %+v", vr)
	}
	out := filepath.Join(e.dir, "out")
	if _, err := e.mgr.Export(res.Archive, out); err != nil {
		t.Fatal(err)
	}
	got, modes := dirTree(t, out)
	if modes["d"]&os.ModeSymlink == 0 {
		t.Errorf("exported d is %v, want the symlink the base now holds", modes["d"])
	}
	for p, v := range got {
		if strings.Contains(v, "not the sandbox's") {
			t.Errorf("export wrote %s from outside the sandbox", p)
		}
	}
	if got["q"] != "q" {
		t.Errorf("export lost q: %v", got)
	}
}

// symlinkBase replaces the base entries names by symlinks to a tree
// outside the sandbox holding secret files. The symlinks are made before
// anything is removed, so none reuses the inode number of what it
// replaces (the base's inode numbers are the sandbox's).
func symlinkBase(t *testing.T, e *storeEnv, names ...string) {
	t.Helper()
	elsewhere := filepath.Join(e.dir, "elsewhere")
	writeBase(t, elsewhere, "d/x", "not the sandbox's")
	writeBase(t, elsewhere, "g", "not the sandbox's")
	for _, n := range names {
		if err := os.Symlink(elsewhere, filepath.Join(e.base, n+".new")); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range names {
		p := filepath.Join(e.base, n)
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			t.Fatal(err)
		}
	}
}

// movedOutOfBase is sandbox "s" over a base holding p/d/x and f/g, in
// which d and g were renamed to the root: their records keep naming
// their base paths p/d and f/g. It returns the checkpoint of that state
// and the archive of it a rollback made.
func movedOutOfBase(t *testing.T) (*storeEnv, Checkpoint, string) {
	t.Helper()
	e := newStoreEnv(t, func(base string) {
		writeBase(t, base, "p/d/x", "x")
		writeBase(t, base, "f/g", "g")
	})
	v := e.view("s")
	for _, mv := range []struct{ dir, name, to string }{{"p", "d", "d2"}, {"f", "g", "g2"}} {
		if err := v.Rename(lookupPath(t, v, mv.dir).Ino, mv.name, layers.RootIno, mv.to, 0); err != nil {
			t.Fatal(err)
		}
	}
	cp := e.checkpoint("s", "c")
	e.put("s", "q", "q")
	res, err := e.mgr.Rollback("s", "c")
	if err != nil {
		t.Fatal(err)
	}
	e.close("s")
	return e, cp, res.Archive
}

// TestBaseReachedThroughSymlink replaces a base directory on the way to
// a directory or a file the checkpoint shows by a symlink: verify, hash
// and export fail with ELOOP rather than read what the symlink names.
func TestBaseReachedThroughSymlink(t *testing.T) {
	for _, tc := range []struct{ name, replace string }{
		{"directory below it", "p"},
		{"file below it", "f"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, cp, archive := movedOutOfBase(t)
			symlinkBase(t, e, tc.replace)
			if _, err := e.mgr.Verify(cp.ID); !errors.Is(err, syscall.ELOOP) {
				t.Errorf("verify: got %v, want ELOOP", err)
			}
			if _, err := e.mgr.StateHash("s", cp.Layer); !errors.Is(err, syscall.ELOOP) {
				t.Errorf("state hash: got %v, want ELOOP", err)
			}
			if tc.replace != "p" {
				return // export of the file: TestExportFailsOnUnreadableData
			}
			out := filepath.Join(e.dir, "out")
			if _, err := e.mgr.Export(archive, out); !errors.Is(err, syscall.ELOOP) {
				t.Errorf("export: got %v, want ELOOP", err)
			}
			got, _ := dirTree(t, out)
			for p, v := range got {
				if strings.Contains(v, "not the sandbox's") {
					t.Errorf("export wrote %s from outside the sandbox", p)
				}
			}
		})
	}
}

// TestBaseGone removes the base directory: calls that must read it fail
// with ErrNotFound and record nothing.
func TestBaseGone(t *testing.T) {
	t.Run("first checkpoint", func(t *testing.T) {
		e := newStoreEnv(t, func(base string) { writeBase(t, base, "a", "a") })
		e.view("s")
		if err := os.RemoveAll(e.base); err != nil {
			t.Fatal(err)
		}
		if _, err := e.mgr.Create("s", Options{Label: "c"}); !errors.Is(err, layers.ErrNotFound) {
			t.Fatalf("first checkpoint without a base: %v", err)
		}
		if cps, _ := e.mgr.List("s"); len(cps) != 0 {
			t.Fatalf("failed checkpoint recorded: %v", ids(cps))
		}
	})
	t.Run("checkpoint over a layer without a hash", func(t *testing.T) {
		e := newStoreEnv(t, func(base string) { writeBase(t, base, "a", "a") })
		e.put("s", "b", "b")
		if _, _, err := e.store.Freeze("s", func(*layers.Txn, string, string) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(e.base); err != nil {
			t.Fatal(err)
		}
		if _, err := e.mgr.Create("s", Options{}); !errors.Is(err, layers.ErrNotFound) {
			t.Fatalf("checkpoint without a base: %v", err)
		}
	})
	t.Run("verify", func(t *testing.T) {
		e := newStoreEnv(t, func(base string) { writeBase(t, base, "a", "a") })
		e.put("s", "b", "b")
		cp := e.checkpoint("s", "c")
		e.close("s")
		if err := os.RemoveAll(e.base); err != nil {
			t.Fatal(err)
		}
		if _, err := e.mgr.Verify(cp.ID); !errors.Is(err, layers.ErrNotFound) {
			t.Fatalf("verify without a base: %v", err)
		}
	})
}

// TestManyCheckpoints prunes and removes a sandbox holding more
// checkpoints than one metadata transaction can delete (an agent that
// checkpoints every step reaches that in days). The records are written
// directly, all on one real layer, which is what many checkpoints with
// no change in between look like.
func TestManyCheckpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 16000 checkpoint records")
	}
	e := newStoreEnv(t, nil)
	e.put("s", "a", "a")
	c0 := e.checkpoint("s", "c0")
	const n, batch = 16000, 2000
	for i := 0; i < n; i += batch {
		err := e.store.Update(func(tx *layers.Txn) error {
			for j := 0; j < batch; j++ {
				cp := c0
				cp.ID, cp.Label = layers.NewID(), ""
				if err := putCheckpoint(tx, cp); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	res, err := e.mgr.Prune("s", Policy{KeepLast: 10})
	if err != nil {
		t.Errorf("prune of %d checkpoints: %v", n, err)
	} else if len(res.Removed) != n+1-10 {
		t.Errorf("prune removed %d, want %d", len(res.Removed), n+1-10)
	}
	e.close("s")
	if err := e.mgr.RemoveSandbox("s"); err != nil {
		t.Fatalf("remove of a sandbox with many checkpoints: %v", err)
	}
	if _, err := e.store.Sandbox("s"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("sandbox after remove: %v", err)
	}
}

// TestRestoreDamagedArchiveRecord restores archives whose record names
// another archive's id inside (a record damaged into valid JSON): restore
// reads that one in the transaction that moves the head, fails, and the
// sandbox stays where it was.
func TestRestoreDamagedArchiveRecord(t *testing.T) {
	h := newHistory(t)
	e := h.e
	res, err := e.mgr.Rollback("s", "c1")
	if err != nil {
		t.Fatal(err)
	}
	good, err := e.mgr.ResolveArchive(res.Archive)
	if err != nil {
		t.Fatal(err)
	}
	missingID, garbageID, badTopID := layers.NewID(), layers.NewID(), layers.NewID()
	e.setRecord(keyArchive(garbageID), []byte("garbage"))
	badTop := good
	badTop.ID, badTop.Top = badTopID, "NOSUCHLAYER"
	b, _ := json.Marshal(badTop)
	e.setRecord(keyArchive(badTopID), b)
	tests := []struct {
		name, inner string
		err         error
	}{
		{"names a missing archive", missingID, layers.ErrNotFound},
		{"names a garbage record", garbageID, layers.ErrCorrupt},
		{"names an archive of a missing layer", badTopID, layers.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			damaged := good
			damaged.ID = tc.inner
			b, _ := json.Marshal(damaged)
			key := layers.NewID()
			e.setRecord(keyArchive(key), b)
			head, _ := e.store.Sandbox("s")
			_, err := e.mgr.Restore(key)
			wantErr(t, "restore", err, tc.err)
			if info, _ := e.store.Sandbox("s"); info.Head != head.Head {
				t.Fatal("failed restore moved the head")
			}
			if got := e.liveTree("s"); !reflect.DeepEqual(got, h.trees[1]) {
				t.Fatalf("failed restore changed the sandbox:\n%v", got)
			}
		})
	}
	if ars, _ := e.mgr.Archives("s"); len(ars) != 1 || ars[0].Restored {
		t.Fatalf("archives after failed restores: %+v", ars)
	}
}

// TestRemoveReportsFailedCollection removes a checkpoint of a store whose
// data directory is gone: the record goes, and the failed collection
// after it is reported.
func TestRemoveReportsFailedCollection(t *testing.T) {
	h := newHistory(t)
	e := h.e
	e.close("s")
	if err := os.RemoveAll(filepath.Join(e.store.Dir(), "data")); err != nil {
		t.Fatal(err)
	}
	cp, err := e.mgr.Remove("c1")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("remove with the data directory gone: %v", err)
	}
	if cp.ID != h.cps[1].ID {
		t.Fatalf("remove returned %q, want the removed checkpoint %s", cp.ID, h.cps[1].ID)
	}
	if _, err := e.mgr.Resolve("c1"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("removed checkpoint still resolves: %v", err)
	}
	if _, err := e.mgr.Prune("s", Policy{KeepLast: 1}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("prune with the data directory gone: %v", err)
	}
}
