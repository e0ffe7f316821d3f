package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

// checkpoints lists a sandbox's checkpoints through the CLI.
func (e *env) checkpoints(name string) []checkpoint.Checkpoint {
	e.t.Helper()
	var cps []checkpoint.Checkpoint
	e.okJSON(&cps, "checkpoint", "list", name)
	return cps
}

// checkpoint creates a checkpoint through the CLI.
func (e *env) checkpoint(name string, flags ...string) checkpoint.Checkpoint {
	e.t.Helper()
	var cp checkpoint.Checkpoint
	e.okJSON(&cp, append([]string{"checkpoint", "create", name}, flags...)...)
	return cp
}

func ids(cps []checkpoint.Checkpoint) []string {
	out := make([]string, 0, len(cps))
	for _, cp := range cps {
		out = append(out, cp.ID)
	}
	return out
}

// mustNotExist fails unless path is missing.
func mustNotExist(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: got err %v, want it not to exist", path, err)
	}
}

func TestCheckpointCreateListShowDiffRemovePrune(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)

	writeFile(t, filepath.Join(e.mnt, "new.txt"), "one")
	first := e.checkpoint("demo", "--label", "first", "--reason", "start", "--plan", "p1", "--step", "2",
		"--decision", "d1", "--source-tool", "edit", "--phase", "before-step")
	if len(first.ID) != 26 || first.Sandbox != "demo" || first.Layer == "" || first.Label != "first" ||
		first.Created.IsZero() || len(first.StateHash) != 64 {
		t.Fatalf("create: got %+v, want a 26-character id, sandbox demo, a layer, label first, a time and a state hash", first)
	}
	if first.Reason != "start" || first.Plan != "p1" || first.Step != 2 || first.Decision != "d1" || first.SourceTool != "edit" || first.Phase != "before-step" {
		t.Fatalf("create: metadata: got %+v", first)
	}
	writeFile(t, filepath.Join(e.mnt, "a.txt"), "hello again")
	if err := os.Remove(filepath.Join(e.mnt, "dir", "b.txt")); err != nil {
		t.Fatal(err)
	}
	second := e.checkpoint("demo", "--label", "second")
	writeFile(t, filepath.Join(e.mnt, "c.txt"), "three")
	if out := e.ok("checkpoint", "create", "demo"); !strings.HasPrefix(out, "created checkpoint ") {
		t.Fatalf("create: got %q, want 'created checkpoint ...'", out)
	}

	cps := e.checkpoints("demo")
	if len(cps) != 3 || cps[0].ID != first.ID || cps[1].ID != second.ID {
		t.Fatalf("list: got %v, want first, second and a third, oldest first", ids(cps))
	}
	third := cps[2]
	if !reflect.DeepEqual(cps[0].Created.UTC(), first.Created.UTC()) || cps[0].Plan != "p1" || cps[0].Step != 2 || cps[0].Bytes <= 0 {
		t.Fatalf("list: first: got %+v, want it as created, with bytes > 0", cps[0])
	}
	var planned []checkpoint.Checkpoint
	e.okJSON(&planned, "checkpoint", "list", "demo", "--plan", "p1")
	if len(planned) != 1 || planned[0].ID != first.ID {
		t.Fatalf("list --plan p1: got %v, want only %s", ids(planned), first.ID)
	}
	out := e.ok("checkpoint", "list", "demo")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "CHECKPOINT") || !strings.Contains(lines[1], "first") {
		t.Fatalf("list: got\n%s\nwant a header and three rows, the first labelled first", out)
	}

	// show by label, by lower-case id, by a unique prefix.
	for _, ref := range []string{"second", strings.ToLower(second.ID), second.ID[:len(second.ID)-1]} {
		var got checkpoint.Checkpoint
		e.okJSON(&got, "checkpoint", "show", ref)
		if got.ID != second.ID || got.StateHash != second.StateHash {
			t.Errorf("show %s: got %s, want %s", ref, got.ID, second.ID)
		}
	}
	if out := e.ok("checkpoint", "show", "first"); !strings.Contains(out, first.StateHash) || !strings.Contains(out, "before-step") {
		t.Errorf("show first: got\n%s\nwant its state hash and phase", out)
	}

	tests := []struct {
		name string
		args []string
		want checkpoint.Diff
	}{
		{name: "first to second", args: []string{"first", "second"},
			want: checkpoint.Diff{Added: []string{}, Modified: []string{"a.txt"}, Deleted: []string{"dir/b.txt"}, ChangedBytes: int64(len("hello again"))}},
		{name: "second to first", args: []string{"second", "first"},
			want: checkpoint.Diff{Added: []string{"dir/b.txt"}, Modified: []string{"a.txt"}, Deleted: []string{}, ChangedBytes: int64(len("world") + len("hello"))}},
		{name: "second to live", args: []string{"second"},
			want: checkpoint.Diff{Added: []string{"c.txt"}, Modified: []string{}, Deleted: []string{}, ChangedBytes: int64(len("three"))}},
		{name: "third to live", args: []string{third.ID},
			want: checkpoint.Diff{Added: []string{}, Modified: []string{}, Deleted: []string{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got checkpoint.Diff
			e.okJSON(&got, append([]string{"checkpoint", "diff"}, tt.args...)...)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("diff %v: got %+v, want %+v", tt.args, got, tt.want)
			}
		})
	}
	if out := e.ok("checkpoint", "diff", "first", "second"); !strings.Contains(out, "M  a.txt") || !strings.Contains(out, "D  dir/b.txt") {
		t.Errorf("diff: got\n%s\nwant M a.txt and D dir/b.txt", out)
	}
	// A label another sandbox uses too: the error names both, and
	// --sandbox picks one.
	e.ok("sandbox", "fork", "twin", "--from", "second")
	var twinFirst checkpoint.Checkpoint
	e.okJSON(&twinFirst, "checkpoint", "create", "twin", "--label", "first")
	r := e.run("checkpoint", "diff", "first")
	if r.code != 1 || !strings.Contains(r.stderr, first.ID+" of demo") || !strings.Contains(r.stderr, "name the sandbox") {
		t.Errorf("diff of a label two sandboxes use: exit %d, stderr %q; want 1, the matches and a hint", r.code, r.stderr)
	}
	var in checkpoint.Diff
	e.okJSON(&in, "checkpoint", "diff", "first", "second", "--sandbox", "demo")
	if !reflect.DeepEqual(in, tests[0].want) {
		t.Errorf("diff first second --sandbox demo: got %+v, want %+v", in, tests[0].want)
	}
	e.okJSON(&in, "checkpoint", "diff", "first", "--sandbox", "twin")
	if len(in.Added)+len(in.Modified)+len(in.Deleted) != 0 {
		t.Errorf("diff first --sandbox twin (its live state is that checkpoint): got %+v, want no change", in)
	}
	e.ok("checkpoint", "rm", twinFirst.ID)

	var removed checkpoint.Checkpoint
	e.okJSON(&removed, "checkpoint", "rm", "second")
	if removed.ID != second.ID {
		t.Fatalf("rm: got %s, want %s", removed.ID, second.ID)
	}
	if got := ids(e.checkpoints("demo")); !reflect.DeepEqual(got, []string{first.ID, third.ID}) {
		t.Fatalf("list after rm: got %v, want %v", got, []string{first.ID, third.ID})
	}
	if r := e.run("checkpoint", "show", second.ID); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("show removed: got exit %d, %q; want 1 and not found", r.code, r.stderr)
	}
	// The removed checkpoint's layer is still part of the stack: first
	// still diffs against the live state as before.
	var d checkpoint.Diff
	e.okJSON(&d, "checkpoint", "diff", "first")
	if !reflect.DeepEqual(d.Modified, []string{"a.txt"}) || !reflect.DeepEqual(d.Added, []string{"c.txt"}) {
		t.Fatalf("diff first after rm: got %+v", d)
	}

	// Default policy: all of them are recent, nothing goes.
	var pr control.PruneReport
	e.okJSON(&pr, "checkpoint", "prune", "demo")
	if len(pr.Removed) != 0 || len(pr.Kept) != 2 || pr.KeepLast != checkpoint.DefaultPolicy.KeepLast {
		t.Fatalf("prune with the default policy: got %+v, want nothing removed under keep-last %d", pr, checkpoint.DefaultPolicy.KeepLast)
	}
	e.okJSON(&pr, "checkpoint", "prune", "demo", "--keep-last", "1")
	if !reflect.DeepEqual(pr.Removed, []string{first.ID}) || !reflect.DeepEqual(pr.Kept, []string{third.ID}) {
		t.Fatalf("prune --keep-last 1: got %+v, want %s removed and %s kept", pr, first.ID, third.ID)
	}
	if got := ids(e.checkpoints("demo")); !reflect.DeepEqual(got, []string{third.ID}) {
		t.Fatalf("list after prune: got %v, want %v", got, []string{third.ID})
	}
	e.okJSON(&pr, "checkpoint", "prune", "demo", "--keep-within", "1h")
	if len(pr.Removed) != 0 {
		t.Fatalf("prune --keep-within 1h: got %v removed, want none", pr.Removed)
	}
	// Nothing the live sandbox needs went: its files are all there.
	for p, want := range map[string]string{"new.txt": "one", "a.txt": "hello again", "c.txt": "three"} {
		if got := readFile(t, filepath.Join(e.mnt, p)); got != want {
			t.Errorf("%s after prune: got %q, want %q", p, got, want)
		}
	}
	e.ok("verify", "demo")
	e.ok("checkpoint", "prune", "demo", "--keep-last", "0")
	if got := e.checkpoints("demo"); len(got) != 0 {
		t.Fatalf("list after prune --keep-last 0: got %v, want none", ids(got))
	}
	if got := readFile(t, filepath.Join(e.mnt, "a.txt")); got != "hello again" {
		t.Errorf("a.txt after pruning everything: got %q, want %q", got, "hello again")
	}
}

// TestRollbackWhileMounted rolls a live mount back to a middle checkpoint:
// what the mount shows changes before the command returns, although the
// kernel had it cached, and a handle held open across the rollback gets
// ESTALE.
func TestRollbackWhileMounted(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	f := func(p string) string { return filepath.Join(e.mnt, p) }

	writeFile(t, f("v.txt"), "v1")
	c1 := e.checkpoint("demo", "--label", "c1")
	writeFile(t, f("v.txt"), "v2 longer")
	writeFile(t, f("two.txt"), "added in 2")
	c2 := e.checkpoint("demo", "--label", "c2")
	writeFile(t, f("v.txt"), "v3")
	writeFile(t, f("three.txt"), "added in 3")
	if err := os.Remove(f("dir/b.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(f("two.txt")); err != nil {
		t.Fatal(err)
	}
	c3 := e.checkpoint("demo", "--label", "c3")
	writeFile(t, f("a.txt"), "live edit")

	// Warm the kernel's caches, and keep a reader's handle open.
	for _, p := range []string{"v.txt", "a.txt", "three.txt"} {
		readFile(t, f(p))
	}
	reader, err := os.Open(f("v.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	buf := make([]byte, 16)
	if n, err := reader.ReadAt(buf, 0); string(buf[:n]) != "v3" {
		t.Fatalf("read before rollback: got %q (%v), want v3", buf[:n], err)
	}

	var r checkpoint.RollbackResult
	e.okJSON(&r, "rollback", "demo", "--to-checkpoint", "c2")
	// First thing after the rollback (a new open would refill the inode's
	// page cache, which old handles share): the reader's next read.
	if _, err := reader.ReadAt(buf, 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("read on a handle open across the rollback: got %v, want ESTALE", err)
	}
	wantChanged := []string{"a.txt", "dir/b.txt", "three.txt", "two.txt", "v.txt"}
	if r.Sandbox != "demo" || r.Checkpoint != c2.ID || len(r.Archive) != 26 || r.Millis <= 0 ||
		!reflect.DeepEqual(r.ChangedPaths, wantChanged) || r.RestoredFiles != len(wantChanged) {
		t.Fatalf("rollback: got %+v, want demo at %s, an archive, millis and changed paths %v", r, c2.ID, wantChanged)
	}
	for p, want := range map[string]string{"v.txt": "v2 longer", "two.txt": "added in 2", "a.txt": "hello", "dir/b.txt": "world"} {
		if got := readFile(t, f(p)); got != want {
			t.Errorf("%s after rollback: got %q, want %q", p, got, want)
		}
	}
	mustNotExist(t, f("three.txt"))

	// The mount is now exactly c2, the checkpoints are all still there, and
	// c1 is as good a target as c3 was.
	var d checkpoint.Diff
	e.okJSON(&d, "checkpoint", "diff", "c2")
	if len(d.Added)+len(d.Modified)+len(d.Deleted) != 0 {
		t.Errorf("diff c2 against the live state after the rollback: got %+v, want nothing", d)
	}
	if got := ids(e.checkpoints("demo")); !reflect.DeepEqual(got, []string{c1.ID, c2.ID, c3.ID}) {
		t.Errorf("checkpoints after rollback: got %v, want %v", got, []string{c1.ID, c2.ID, c3.ID})
	}
	out := e.ok("rollback", "demo", "--to-checkpoint", c1.ID[:20])
	if !strings.Contains(out, "rolled demo back to checkpoint "+c1.ID) || !strings.Contains(out, "strata archive restore") {
		t.Errorf("rollback: got\n%s\nwant it to name the checkpoint and how to undo", out)
	}
	if got := readFile(t, f("v.txt")); got != "v1" {
		t.Errorf("v.txt after rollback to c1: got %q, want v1", got)
	}
	mustNotExist(t, f("two.txt"))
	e.ok("verify", "demo")
}

func TestRollbackUnmountedThenMount(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	writeFile(t, filepath.Join(e.mnt, "keep.txt"), "kept")
	e.checkpoint("demo", "--label", "before")
	writeFile(t, filepath.Join(e.mnt, "keep.txt"), "overwritten")
	writeFile(t, filepath.Join(e.mnt, "later.txt"), "later")
	e.ok("unmount", "demo")

	var r checkpoint.RollbackResult
	e.okJSON(&r, "rollback", "demo", "--to-checkpoint", "before")
	if !reflect.DeepEqual(r.ChangedPaths, []string{"keep.txt", "later.txt"}) {
		t.Fatalf("rollback: changed paths: got %v, want keep.txt and later.txt", r.ChangedPaths)
	}
	e.ok("mount", "demo", e.mnt)
	if got := readFile(t, filepath.Join(e.mnt, "keep.txt")); got != "kept" {
		t.Errorf("keep.txt: got %q, want kept", got)
	}
	mustNotExist(t, filepath.Join(e.mnt, "later.txt"))
	if got := readFile(t, filepath.Join(e.base, "a.txt")); got != "hello" {
		t.Errorf("base a.txt: got %q, want hello", got)
	}
}

func TestArchiveListExportRestore(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	if out := e.ok("archive", "list", "demo"); !strings.HasPrefix(out, "no archives") {
		t.Fatalf("archive list before any rollback: got %q", out)
	}
	var none []checkpoint.Archive
	e.okJSON(&none, "archive", "list", "demo")
	if none == nil || len(none) != 0 {
		t.Fatalf("archive list --json before any rollback: got %v, want []", none)
	}
	c1 := e.checkpoint("demo", "--label", "c1")
	writeFile(t, filepath.Join(e.mnt, "work.txt"), "agent work")
	if err := os.Symlink("work.txt", filepath.Join(e.mnt, "link")); err != nil {
		t.Fatal(err)
	}
	c2 := e.checkpoint("demo", "--label", "c2")
	writeFile(t, filepath.Join(e.mnt, "a.txt"), "unsaved edit")
	var r checkpoint.RollbackResult
	e.okJSON(&r, "rollback", "demo", "--to-checkpoint", "c1")

	var ars []checkpoint.Archive
	e.okJSON(&ars, "archive", "list", "demo")
	if len(ars) != 1 {
		t.Fatalf("archive list: got %d archives, want 1", len(ars))
	}
	ar := ars[0]
	if ar.ID != r.Archive || ar.Sandbox != "demo" || ar.Created.IsZero() || ar.FromCheckpoint != c2.ID ||
		ar.ToCheckpoint != c1.ID || len(ar.Layers) != 2 || ar.Bytes <= 0 {
		t.Fatalf("archive list: got %+v, want archive %s of demo from %s to %s with 2 layers and bytes", ar, r.Archive, c2.ID, c1.ID)
	}
	if out := e.ok("archive", "list", "demo"); !strings.Contains(out, ar.ID) || !strings.HasPrefix(out, "ARCHIVE") {
		t.Errorf("archive list: got\n%s\nwant a table with %s", out, ar.ID)
	}

	// The export is the state the rollback left, unsaved edit included.
	out := filepath.Join(e.dir, "export")
	var ex control.ExportResult
	e.okJSON(&ex, "archive", "export", ar.ID[:20], out)
	if ex.Archive != ar.ID || ex.Dir != out || ex.Files != 4 {
		t.Errorf("export: got %+v, want archive %s into %s, 4 files", ex, ar.ID, out)
	}
	for p, want := range map[string]string{"a.txt": "unsaved edit", "work.txt": "agent work", "dir/b.txt": "world"} {
		if got := readFile(t, filepath.Join(out, p)); got != want {
			t.Errorf("exported %s: got %q, want %q", p, got, want)
		}
	}
	if target, err := os.Readlink(filepath.Join(out, "link")); err != nil || target != "work.txt" {
		t.Errorf("exported link: got %q, %v; want a symlink to work.txt", target, err)
	}
	// An empty, existing directory is fine too.
	empty := filepath.Join(e.dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	e.ok("archive", "export", ar.ID, empty)
	if got, want := contentDigest(t, empty), contentDigest(t, out); got != want {
		t.Errorf("export into an empty directory: got\n%s\nwant\n%s", got, want)
	}

	// Restore: the mount is back where it was before the rollback.
	var rr checkpoint.RollbackResult
	e.okJSON(&rr, "archive", "restore", ar.ID)
	if rr.Sandbox != "demo" || rr.Archive == "" || rr.Archive == ar.ID {
		t.Fatalf("restore: got %+v, want demo and a new archive", rr)
	}
	for p, want := range map[string]string{"a.txt": "unsaved edit", "work.txt": "agent work"} {
		if got := readFile(t, filepath.Join(e.mnt, p)); got != want {
			t.Errorf("%s after restore: got %q, want %q", p, got, want)
		}
	}
	e.okJSON(&ars, "archive", "list", "demo")
	if len(ars) != 2 || !ars[0].Restored || ars[1].ID != rr.Archive {
		t.Fatalf("archive list after restore: got %+v, want the first restored and the restore's own archive", ars)
	}
	// The restore can be undone in turn.
	e.ok("archive", "restore", rr.Archive)
	if got := readFile(t, filepath.Join(e.mnt, "a.txt")); got != "hello" {
		t.Errorf("a.txt after undoing the restore: got %q, want hello", got)
	}
	mustNotExist(t, filepath.Join(e.mnt, "work.txt"))
}

// TestBytesAreWhatTheStoreHolds: with the default 64 KiB blocks, a small
// file's block takes only the pages it needs, and checkpoint list, layers
// list and archive list say so (they used to count blocks x block size).
func TestBytesAreWhatTheStoreHolds(t *testing.T) {
	e := newEnv(t)
	for i := range 10 {
		writeFile(t, filepath.Join(e.base, fmt.Sprintf("f%d.go", i)), "package f // a short base file\n")
	}
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	c0 := e.checkpoint("demo", "--label", "c0")
	// Ten small edits in place (one page each), one new file of 5000
	// bytes (two pages) and one of three whole blocks.
	for i := range 10 {
		f, err := os.OpenFile(filepath.Join(e.mnt, fmt.Sprintf("f%d.go", i)), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt([]byte("PACKAGE"), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(e.mnt, "new.txt"), strings.Repeat("n", 5000))
	writeFile(t, filepath.Join(e.mnt, "big.bin"), strings.Repeat("b", 3*64<<10))
	c1 := e.checkpoint("demo", "--label", "c1")
	const want = (10+2)*4096 + 3*64<<10
	if c1.Bytes != want {
		t.Errorf("checkpoint create: bytes %d, want %d (12 pages and 3 blocks)", c1.Bytes, want)
	}
	var cps []checkpoint.Checkpoint
	e.okJSON(&cps, "checkpoint", "list", "demo")
	if len(cps) != 2 || cps[1].ID != c1.ID || cps[1].Bytes != want {
		t.Errorf("checkpoint list: got %+v, want c1 with %d bytes", cps, want)
	}
	var ls []checkpoint.LayerReport
	e.okJSON(&ls, "layers", "list", "demo")
	if len(ls) != 3 || ls[1].ID != c1.Layer || ls[1].Files != 12 || ls[1].Blocks != 14 || ls[1].Bytes != want {
		t.Errorf("layers list: got %+v, want c1's layer with 12 files in 14 blocks, %d bytes", ls, want)
	}
	e.ok("rollback", "demo", "--to-checkpoint", c0.ID)
	var ars []checkpoint.Archive
	e.okJSON(&ars, "archive", "list", "demo")
	if len(ars) != 1 || ars[0].Bytes != want {
		t.Errorf("archive list: got %+v, want one archive of %d bytes", ars, want)
	}
}

func TestLayersListInspect(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base, "--block-size", "4K")
	e.ok("mount", "demo", e.mnt)
	writeFile(t, filepath.Join(e.mnt, "big.bin"), strings.Repeat("x", 3*4096+1))
	writeFile(t, filepath.Join(e.mnt, "small.txt"), "s")
	c1 := e.checkpoint("demo", "--label", "c1")
	writeFile(t, filepath.Join(e.mnt, "later.txt"), "l")
	c2 := e.checkpoint("demo", "--label", "c2")

	var ls []checkpoint.LayerReport
	e.okJSON(&ls, "layers", "list", "demo")
	if len(ls) != 3 {
		t.Fatalf("layers list: got %d layers, want 3 (active, c2's, c1's)", len(ls))
	}
	if ls[0].State != layers.StateActive || ls[0].Files != 0 || ls[0].Bytes != 0 {
		t.Errorf("top layer: got %+v, want an empty active layer", ls[0])
	}
	if ls[1].ID != c2.Layer || ls[1].Checkpoint != c2.ID || ls[1].State != layers.StateFrozen || ls[1].Files != 1 || ls[1].Blocks != 1 {
		t.Errorf("c2's layer: got %+v, want frozen with 1 file in 1 block", ls[1])
	}
	if ls[2].ID != c1.Layer || ls[2].Checkpoint != c1.ID || ls[2].Files != 2 || ls[2].Blocks != 5 || ls[2].Bytes != 5*4096 {
		t.Errorf("c1's layer: got %+v, want 2 files in 5 blocks of 4 KiB", ls[2])
	}
	if ls[0].Parent != c2.Layer || ls[1].Parent != c1.Layer || ls[2].Parent != "" {
		t.Errorf("parents: got %s %s %s, want the stack linked down to the base", ls[0].Parent, ls[1].Parent, ls[2].Parent)
	}
	out := e.ok("layers", "list", "demo")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 4 || !strings.HasPrefix(lines[0], "LAYER") || !strings.Contains(out, "20 KiB") {
		t.Errorf("layers list: got\n%s\nwant a header, three rows and c1's 20 KiB", out)
	}

	for _, ref := range []string{c1.Layer, strings.ToLower(c1.Layer), c1.Layer[:len(c1.Layer)-1]} {
		var l checkpoint.LayerReport
		e.okJSON(&l, "layers", "inspect", ref)
		if !reflect.DeepEqual(l, ls[2]) {
			t.Errorf("inspect %s: got %+v, want %+v", ref, l, ls[2])
		}
	}
	if out := e.ok("layers", "inspect", c1.Layer); !strings.Contains(out, c1.ID) || !strings.Contains(out, "20 KiB") {
		t.Errorf("inspect: got\n%s\nwant c1's id and 20 KiB", out)
	}

	// After a rollback the layers left are archived: listed with --archived.
	e.ok("rollback", "demo", "--to-checkpoint", "c1")
	e.okJSON(&ls, "layers", "list", "demo")
	if len(ls) != 2 || ls[1].ID != c1.Layer {
		t.Fatalf("layers list after rollback: got %d layers, want the new active one over c1's", len(ls))
	}
	e.okJSON(&ls, "layers", "list", "demo", "--archived")
	archived := 0
	for _, l := range ls {
		if l.State == layers.StateArchived {
			archived++
		}
	}
	if archived != 2 {
		t.Errorf("layers list --archived: got %d archived layers, want 2 (c2's and the active one left)", archived)
	}
}

func TestForkThenMount(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	writeFile(t, filepath.Join(e.mnt, "shared.txt"), "from demo")
	cp := e.checkpoint("demo", "--label", "fork-here")
	writeFile(t, filepath.Join(e.mnt, "shared.txt"), "demo went on")

	var sb control.Sandbox
	e.okJSON(&sb, "sandbox", "fork", "copy", "--from", "fork-here")
	if sb.Name != "copy" || sb.Base != e.base {
		t.Fatalf("fork: got %+v, want copy over %s", sb, e.base)
	}
	var ls []checkpoint.LayerReport
	e.okJSON(&ls, "layers", "list", "copy")
	if len(ls) != 2 || ls[1].ID != cp.Layer {
		t.Fatalf("fork's layers: got %+v, want a new active layer over %s (shared, not copied)", ls, cp.Layer)
	}
	e.ok("mount", "copy", e.mnt2)
	if got := readFile(t, filepath.Join(e.mnt2, "shared.txt")); got != "from demo" {
		t.Errorf("fork shared.txt: got %q, want %q", got, "from demo")
	}
	writeFile(t, filepath.Join(e.mnt2, "shared.txt"), "fork's own")
	if got := readFile(t, filepath.Join(e.mnt, "shared.txt")); got != "demo went on" {
		t.Errorf("demo shared.txt after the fork wrote: got %q, want %q", got, "demo went on")
	}
	// The fork outlives its origin: removing demo keeps the shared layer.
	e.ok("unmount", "demo")
	e.ok("sandbox", "rm", "demo")
	if r := e.run("checkpoint", "show", cp.ID); r.code != 1 {
		t.Errorf("show a removed sandbox's checkpoint: got exit %d, want 1", r.code)
	}
	e.ok("unmount", "copy")
	e.ok("mount", "copy", e.mnt2)
	if got := readFile(t, filepath.Join(e.mnt2, "shared.txt")); got != "fork's own" {
		t.Errorf("fork shared.txt after demo's removal: got %q, want %q", got, "fork's own")
	}
	fork := e.checkpoint("copy")
	e.okJSON(&ls, "layers", "list", "copy")
	if len(ls) != 3 || ls[2].ID != cp.Layer {
		t.Errorf("fork's layers after demo's removal: got %d, want 3 ending in %s", len(ls), cp.Layer)
	}
	e.ok("verify", fork.ID)
}

func TestGC(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	writeFile(t, filepath.Join(e.mnt, "f.txt"), "data")
	e.checkpoint("demo", "--label", "c1")
	e.ok("unmount", "demo")

	// A data file whose layer record is gone, as a crash between the two
	// steps of a collection leaves.
	orphan := filepath.Join(e.store, "data", layers.NewID())
	if err := os.WriteFile(orphan, make([]byte, 8192), 0o600); err != nil {
		t.Fatal(err)
	}
	var r layers.GCResult
	e.okJSON(&r, "gc", "demo")
	if r.DataFiles != 1 || r.BytesFreed < 8192 || len(r.Layers) != 0 {
		t.Fatalf("gc: got %+v, want the orphan data file (8 KiB) and no layer", r)
	}
	mustNotExist(t, orphan)
	if out := e.ok("gc"); !strings.Contains(out, "removed 0 layers, 0 data files and 0 hidden blocks") {
		t.Errorf("second gc: got %q, want nothing removed", out)
	}
	e.ok("verify", "demo")
	e.ok("mount", "demo", e.mnt)
	if got := readFile(t, filepath.Join(e.mnt, "f.txt")); got != "data" {
		t.Errorf("f.txt after gc: got %q, want data", got)
	}
}

func TestVerify(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	if out := e.ok("verify", "demo"); !strings.Contains(out, "no checkpoints") {
		t.Errorf("verify without checkpoints: got %q", out)
	}
	e.ok("mount", "demo", e.mnt)
	writeFile(t, filepath.Join(e.mnt, "f.txt"), "data")
	c1 := e.checkpoint("demo", "--label", "c1")
	writeFile(t, filepath.Join(e.mnt, "g.txt"), "more")
	e.checkpoint("demo", "--label", "c2")

	var rs []control.VerifyReport
	e.okJSON(&rs, "verify", "demo")
	if len(rs) != 2 || !rs[0].OK || !rs[1].OK || rs[0].Computed != c1.StateHash || rs[0].Label != "c1" {
		t.Fatalf("verify demo: got %+v, want both ok, c1's hash recomputed", rs)
	}
	e.okJSON(&rs, "verify", "c1")
	if len(rs) != 1 || rs[0].Checkpoint != c1.ID || !rs[0].OK {
		t.Fatalf("verify c1: got %+v, want c1 ok", rs)
	}
	e.ok("unmount", "demo")

	// Corrupt c1's block on disk: verify reads every block and fails.
	data := filepath.Join(e.store, "data", c1.Layer)
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if err := os.WriteFile(data, b, 0o600); err != nil {
		t.Fatal(err)
	}
	r := e.run("verify", "demo")
	if r.code != 1 || !strings.Contains(r.stderr, "failed") || !strings.Contains(r.stdout, "FAIL  "+c1.ID) {
		t.Fatalf("verify of a corrupt store: got exit %d, stdout %q, stderr %q; want exit 1 and c1 failing", r.code, r.stdout, r.stderr)
	}
}

// contentDigest lists the paths under dir with their type and content (a
// symlink's target), leaving out times.
func contentDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s -> %s\n", rel, target)
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s %q\n", rel, data)
		default:
			fmt.Fprintf(&b, "%s %v\n", rel, d.Type())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestGCDedup: `gc --dedup` on a live mount keeps each content of the
// frozen layers once (a file copied in a later step, and twice in one
// step), gives their slots back, and every file, checkpoint and fsck stay
// right; readers of the mount go on meanwhile.
func TestGCDedup(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	data := make([]byte, 1<<20)
	rand.New(rand.NewSource(4)).Read(data)
	writeFile(t, filepath.Join(e.mnt, "a.bin"), string(data))
	first := e.checkpoint("demo", "--label", "c1")
	writeFile(t, filepath.Join(e.mnt, "b.bin"), string(data))
	writeFile(t, filepath.Join(e.mnt, "c.bin"), string(data))
	e.checkpoint("demo", "--label", "c2")
	stop := make(chan struct{})
	readErr := make(chan error, 1)
	go func() {
		defer close(readErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			for _, n := range []string{"a.bin", "b.bin", "c.bin"} {
				got, err := os.ReadFile(filepath.Join(e.mnt, n))
				if err != nil || !bytes.Equal(got, data) {
					readErr <- fmt.Errorf("%s read during gc --dedup: %d bytes, %v", n, len(got), err)
					return
				}
			}
		}
	}()
	var r layers.GCResult
	e.okJSON(&r, "gc", "--dedup")
	close(stop)
	if err := <-readErr; err != nil {
		t.Error(err)
	}
	// 1 MiB in 64 KiB blocks: b and c, 16 blocks each.
	if r.Dedup == nil || r.Dedup.Blocks != 32 || r.Dedup.BytesFreed != 2<<20 {
		t.Fatalf("gc --dedup: got %+v (dedup %+v), want 32 blocks and 2 MiB", r, r.Dedup)
	}
	if out := e.ok("gc", "--dedup"); !strings.Contains(out, "dedup: 0 blocks kept once") {
		t.Errorf("second gc --dedup: %q", out)
	}
	var ls []checkpoint.LayerReport
	e.okJSON(&ls, "layers", "list", "demo")
	if len(ls) < 2 || ls[1].Shared != 32 || ls[1].Bytes != 0 {
		t.Errorf("layers list after gc --dedup: %+v, want the second checkpoint's layer with 32 shared blocks and no bytes", ls)
	}
	if out := e.ok("layers", "inspect", ls[1].ID); !strings.Contains(out, "32 (kept by a layer below)") {
		t.Errorf("layers inspect after gc --dedup: %q", out)
	}
	for _, n := range []string{"a.bin", "b.bin", "c.bin"} {
		if got := readFile(t, filepath.Join(e.mnt, n)); got != string(data) {
			t.Errorf("%s after gc --dedup differs", n)
		}
	}
	e.ok("verify", "demo")
	e.ok("rollback", "demo", "--to-checkpoint", first.ID)
	if got := readFile(t, filepath.Join(e.mnt, "a.bin")); got != string(data) {
		t.Errorf("a.bin after a rollback differs")
	}
	var ars []checkpoint.Archive
	e.okJSON(&ars, "archive", "list", "demo")
	if len(ars) == 0 {
		t.Fatal("no archive after the rollback")
	}
	e.ok("archive", "restore", ars[len(ars)-1].ID)
	e.ok("unmount", "demo")
	e.ok("mount", "demo", e.mnt)
	for _, n := range []string{"a.bin", "b.bin", "c.bin"} {
		if got := readFile(t, filepath.Join(e.mnt, n)); got != string(data) {
			t.Errorf("%s after a remount differs", n)
		}
	}
	e.ok("fsck")
}
