package checkpoint

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/layers"
)

func TestDiffCheckpoints(t *testing.T) {
	h := newHistory(t)
	e := h.e
	bigSize := int64(5*layers.MinBlockSize + 17)
	tests := []struct {
		name, from, to string
		want           Diff
	}{
		{"c0 to c1", "c0", "c1", Diff{
			Added:        []string{"link", "new", "new/deep", "new/deep/n.txt"},
			Modified:     []string{},
			Deleted:      []string{"dir/old.txt"},
			ChangedBytes: int64(len("new 1")),
		}},
		{"c1 to c2", "c1", "c2", Diff{
			Added:        []string{"big.bin"},
			Modified:     []string{"edit.txt"},
			Deleted:      []string{},
			ChangedBytes: bigSize + int64(len("edit 2, longer")),
		}},
		{"c2 to c3: a directory goes with its subtree", "c2", "c3", Diff{
			Added:        []string{"dir/again.txt"},
			Modified:     []string{},
			Deleted:      []string{"new", "new/deep", "new/deep/n.txt"},
			ChangedBytes: int64(len("again 3")),
		}},
		{"c3 back to c0", "c3", "c0", Diff{
			Added:        []string{"dir/old.txt"},
			Modified:     []string{"edit.txt"},
			Deleted:      []string{"big.bin", "dir/again.txt", "link"},
			ChangedBytes: int64(len("base old") + len("edit 0")),
		}},
		{"a checkpoint with itself", "c2", "c2", Diff{Added: []string{}, Modified: []string{}, Deleted: []string{}}},
		{"c3 to the live state, nothing written", "c3", "", Diff{Added: []string{}, Modified: []string{}, Deleted: []string{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := e.mgr.DiffCheckpoints(tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("diff %s %s:\n got %+v\nwant %+v", tc.from, tc.to, got, tc.want)
			}
			// The layer-delta diff agrees with a comparison of every path.
			if tc.to == "" {
				return
			}
			a, _ := e.mgr.Resolve(tc.from)
			b, _ := e.mgr.Resolve(tc.to)
			oracle, err := e.mgr.diffLayers("s", a.Layer, b.Layer)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, oracle) {
				t.Fatalf("diff %s %s:\n got %+v\nfull walk %+v", tc.from, tc.to, got, oracle)
			}
		})
	}
}

// TestDiffLiveState compares a checkpoint with what a mount wrote since,
// not yet committed, and with the head of an unmounted sandbox.
func TestDiffLiveState(t *testing.T) {
	h := newHistory(t)
	e := h.e
	e.put("s", "edit.txt", "live edit")
	e.put("s", "fresh.txt", "fresh")
	e.remove("s", "keep.txt")
	want := Diff{
		Added:        []string{"fresh.txt"},
		Modified:     []string{"edit.txt"},
		Deleted:      []string{"keep.txt"},
		ChangedBytes: int64(len("live edit") + len("fresh")),
	}
	got, err := e.mgr.DiffCheckpoints("c3", "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("diff with the live state:\n got %+v\nwant %+v", got, want)
	}
	e.close("s")
	got, err = e.mgr.DiffCheckpoints("c3", "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("diff with the head of the unmounted sandbox:\n got %+v\nwant %+v", got, want)
	}
}

func TestDiffCheckpointsErrors(t *testing.T) {
	h := newHistory(t)
	e := h.e
	if _, err := e.mgr.Fork("f", "c0"); err != nil {
		t.Fatal(err)
	}
	e.put("f", "x", "x")
	e.checkpoint("f", "fc")
	tests := []struct {
		name, from, to string
		err            error
	}{
		{"unknown from", "nope", "c1", layers.ErrNotFound},
		{"unknown to", "c0", "nope", layers.ErrNotFound},
		{"to of another sandbox", "c0", "fc", ErrOtherSandbox},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := e.mgr.DiffCheckpoints(tc.from, tc.to)
			wantErr(t, "diff "+tc.from+" "+tc.to, err, tc.err)
			if !reflect.DeepEqual(d, Diff{}) {
				t.Fatalf("diff with an error returned %+v", d)
			}
			if !strings.HasPrefix(err.Error(), "diff") {
				t.Fatalf("error %q does not say what failed", err)
			}
		})
	}
	// A checkpoint record naming a layer that does not exist.
	bad := h.cps[0]
	bad.ID, bad.Label, bad.Layer = layers.NewID(), "", "NOSUCHLAYER"
	b, _ := json.Marshal(bad)
	e.setRecord(keyCP(bad.ID), b)
	if _, err := e.mgr.DiffCheckpoints(bad.ID, "c1"); err == nil {
		t.Fatal("diff from a checkpoint of a missing layer: no error")
	}
	// A checkpoint record of a sandbox that does not exist.
	ghost := h.cps[0]
	ghost.ID, ghost.Label, ghost.Sandbox = layers.NewID(), "", "ghost"
	b, _ = json.Marshal(ghost)
	e.setRecord(keyCP(ghost.ID), b)
	if _, err := e.mgr.DiffCheckpoints(ghost.ID, ""); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("diff with the live state of a missing sandbox: %v", err)
	}
}

// TestDiffReplacedEntries replaces names by new files, a directory and a
// new symlink: each is modified, not added and deleted, and the layer-delta
// diff agrees with the full walk.
func TestDiffReplacedEntries(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "r", "old r")
	e.put("s", "t", "old t")
	e.symlink("s", "l", "r")
	before := e.checkpoint("s", "before")
	for _, p := range []string{"r", "t", "l"} {
		e.remove("s", p)
	}
	e.put("s", "r", "new r")
	e.put("s", "t/inner", "inner")
	e.symlink("s", "l", "t")
	after := e.checkpoint("s", "after")
	got, err := e.mgr.DiffCheckpoints("before", "after")
	if err != nil {
		t.Fatal(err)
	}
	want := Diff{
		Added:        []string{"t/inner"},
		Modified:     []string{"l", "r", "t"},
		Deleted:      []string{},
		ChangedBytes: int64(len("new r") + len("inner")),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("diff:\n got %+v\nwant %+v", got, want)
	}
	oracle, err := e.mgr.diffLayers("s", before.Layer, after.Layer)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, oracle) {
		t.Fatalf("diff:\n got %+v\nfull walk %+v", got, oracle)
	}
}

// TestDiffXattrChanges: a change of extended attributes alone (an ACL
// among them) is a modification, in a diff between checkpoints, against
// the live state and in what a rollback reports; the same attributes set
// and taken away again are not.
func TestDiffXattrChanges(t *testing.T) {
	l := newLive(t, func(base string) {
		os.WriteFile(filepath.Join(base, "base.txt"), []byte("base"), 0o644)
		os.WriteFile(filepath.Join(base, "quiet.txt"), []byte("quiet"), 0o644)
	})
	l.write("new.txt", "new")
	l.write("back.txt", "back")
	c0, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	set := func(rel, name, val string) {
		t.Helper()
		if err := unix.Setxattr(filepath.Join(l.mnt, rel), name, []byte(val), 0); err != nil {
			t.Fatal(err)
		}
	}
	set("base.txt", "user.a", "1")
	set("new.txt", "user.b", "2")
	set("back.txt", "user.c", "3")
	if err := unix.Removexattr(filepath.Join(l.mnt, "back.txt"), "user.c"); err != nil {
		t.Fatal(err)
	}
	want := Diff{
		Added:        []string{},
		Modified:     []string{"base.txt", "new.txt"},
		Deleted:      []string{},
		ChangedBytes: int64(len("base") + len("new")),
	}
	got, err := l.mgr.DiffCheckpoints(c0.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("diff with the live state:\n got %+v\nwant %+v", got, want)
	}
	c1, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err = l.mgr.DiffCheckpoints(c0.ID, c1.ID); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("diff between checkpoints:\n got %+v, %v\nwant %+v", got, err, want)
	}
	res, err := l.mgr.Rollback("s", c0.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(res.ChangedPaths, []string{"base.txt", "new.txt"}) {
		t.Errorf("rollback's changed paths: %v, want base.txt and new.txt", res.ChangedPaths)
	}
	if _, err := unix.Getxattr(filepath.Join(l.mnt, "base.txt"), "user.a", make([]byte, 8)); !errors.Is(err, unix.ENODATA) {
		t.Errorf("base.txt's user.a after the rollback: %v, want ENODATA", err)
	}
}

// TestStatesBeforeABaseChange: once something wrote onto the base (a plan
// apply notes it), the checkpoints and archives recorded before are
// refused with ErrBaseChanged by every operation that would show them over
// the changed base, and verify reports them stale; ResetTx starts the
// sandbox over on its base, archiving its layers, and what comes after
// works as usual.
func TestStatesBeforeABaseChange(t *testing.T) {
	l := newLive(t, func(base string) {
		os.WriteFile(filepath.Join(base, "a.txt"), []byte("base"), 0o644)
	})
	l.write("a.txt", "one")
	c1, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.write("a.txt", "two")
	c2, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := l.mgr.Rollback("s", c1.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The base changes, as an apply would write it.
	if err := os.WriteFile(filepath.Join(l.base, "a.txt"), []byte("applied"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = l.store.Update(func(tx *layers.Txn) error { return tx.NoteBaseChanged(l.base+"/", time.Now()) })
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		fn   func() error
	}{
		{"rollback", func() error { _, err := l.mgr.Rollback("s", c1.ID); return err }},
		{"diff from", func() error { _, err := l.mgr.DiffCheckpoints(c1.ID, ""); return err }},
		{"diff to", func() error { _, err := l.mgr.DiffCheckpoints(c1.ID, c2.ID); return err }},
		{"fork", func() error { _, err := l.mgr.Fork("f", c2.ID); return err }},
		{"restore", func() error { _, err := l.mgr.Restore(rb.Archive); return err }},
		{"export", func() error { _, err := l.mgr.Export(rb.Archive, filepath.Join(t.TempDir(), "x")); return err }},
	} {
		if err := tc.fn(); !errors.Is(err, ErrBaseChanged) {
			t.Errorf("%s: got %v, want ErrBaseChanged", tc.name, err)
		}
	}
	if vr, err := l.mgr.Verify(c2.ID); err != nil || vr.OK || !vr.BaseChanged {
		t.Errorf("verify: %+v, %v; want stale", vr, err)
	}
	res, err := l.mgr.ResetTx("s", nil)
	if err != nil || res.Archive == "" {
		t.Fatalf("reset: %+v, %v", res, err)
	}
	if got, _ := l.read("a.txt"); got != "applied" {
		t.Errorf("a.txt after the reset: %q, want the base's", got)
	}
	c3, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.write("a.txt", "three")
	if _, err := l.mgr.Rollback("s", c3.ID); err != nil {
		t.Errorf("rollback to a checkpoint made after the change: %v", err)
	}
	if vr, err := l.mgr.Verify(c3.ID); err != nil || !vr.OK {
		t.Errorf("verify of a checkpoint made after the change: %+v, %v", vr, err)
	}
}
