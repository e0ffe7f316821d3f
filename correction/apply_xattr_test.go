package correction

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/checkpoint"
)

// An attribute the base's file system refuses (a value too large for
// ext4's inode and block) fails the apply, which puts everything back.
func TestApplyXattrRefused(t *testing.T) {
	e := newEnv(t, applyBase)
	big := make([]byte, 60<<10)
	probe := filepath.Join(e.dir, "probe")
	if err := os.WriteFile(probe, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(probe, "user.big", big, 0); err == nil {
		t.Skip("this file system takes 60 KiB attributes (ext4 with ea_inode, tmpfs, btrfs...)")
	}
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	changeAll(t, e)
	if err := unix.Setxattr(filepath.Join(e.mnt, "keep.txt"), "user.big", big, 0); err != nil {
		t.Fatal(err)
	}
	orig := tree(t, e.base)
	_, err := e.plans.Apply("p")
	e.nothingApplied(err, nil, orig, "keep.txt: xattr user.big")
	if p := e.plan("p"); p.Applied || p.Status != StatusOpen {
		t.Errorf("plan: applied %v status %q, want open", p.Applied, p.Status)
	}
}

// A base file whose attributes the apply changes in place vanishes during
// the apply: the attribute step fails, the undo passes over the missing
// file and puts the rest back.
func TestApplyXattrTargetVanishes(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	changeAll(t, e)
	orig := tree(t, e.base)
	delete(orig, "keep.txt")
	t.Cleanup(func() { applyFault = nil })
	applyFault = func(n int) error {
		if n == -1 { // staged nothing yet; the base is checked
			return os.Remove(filepath.Join(e.base, "keep.txt"))
		}
		return nil
	}
	_, err := e.plans.Apply("p")
	applyFault = nil
	e.nothingApplied(err, unix.ENOENT, orig, "keep.txt")
}

// TestApplyRetiresEarlierStates: after an apply wrote onto the base, the
// states recorded before it (checkpoints and archives of every sandbox
// over that base) lay over base content that is gone. Rolling back to
// them, restoring, comparing, forking and exporting them is refused with
// ErrBaseChanged instead of showing the applied base under old layers,
// and verify reports them as stale, not as damaged. A checkpoint made
// after the apply works, and a second plan applies without its own base
// writes counting as conflicts.
func TestApplyRetiresEarlierStates(t *testing.T) {
	e := newEnv(t, applyBase)
	if _, err := e.store.CreateSandbox("other", e.base, 0); err != nil {
		t.Fatal(err)
	}
	otherCp := must[checkpoint.Checkpoint](t)(e.cps.Create("other", checkpoint.Options{}))
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	before := must[checkpoint.Checkpoint](t)(e.cps.Create("s", checkpoint.Options{Label: "before"}))
	e.write("edit.txt", "rolled back")
	rb := must[checkpoint.RollbackResult](t)(e.cps.Rollback("s", before.ID)) // an archive from before the apply
	if err := os.Rename(filepath.Join(e.mnt, "ren.txt"), filepath.Join(e.mnt, "renamed.txt")); err != nil {
		t.Fatal(err)
	}
	e.write("edit.txt", "applied")
	must[ApplyResult](t)(e.plans.Apply("p"))
	// The sandbox shows the base it was applied to, renamed file included
	// (its layers named the base file the apply moved).
	for rel, want := range map[string]string{"renamed.txt": "moved", "edit.txt": "applied", "keep.txt": "keep"} {
		if b, err := os.ReadFile(filepath.Join(e.mnt, rel)); string(b) != want {
			t.Errorf("%s in the mount after the apply: %q, %v; want %q", rel, b, err, want)
		}
	}

	refused := []struct {
		name string
		fn   func() error
	}{
		{"rollback", func() error { _, err := e.cps.Rollback("s", before.ID); return err }},
		{"diff from", func() error { _, err := e.cps.DiffCheckpoints(before.ID, ""); return err }},
		{"fork", func() error { _, err := e.cps.Fork("f", before.ID); return err }},
		{"restore", func() error { _, err := e.cps.Restore(rb.Archive); return err }},
		{"export", func() error { _, err := e.cps.Export(rb.Archive, filepath.Join(e.dir, "export")); return err }},
		{"another sandbox over the base", func() error { _, err := e.cps.Rollback("other", otherCp.ID); return err }},
	}
	for _, tc := range refused {
		if err := tc.fn(); !errors.Is(err, checkpoint.ErrBaseChanged) || !strings.Contains(err.Error(), "recorded before a plan apply") {
			t.Errorf("%s of a state from before the apply: got %v, want ErrBaseChanged", tc.name, err)
		}
	}
	if vr := must[checkpoint.VerifyResult](t)(e.cps.Verify(before.ID)); vr.OK || !vr.BaseChanged {
		t.Errorf("verify of a checkpoint from before the apply: %+v, want it stale", vr)
	}
	// After the apply all is as usual.
	after := must[checkpoint.Checkpoint](t)(e.cps.Create("s", checkpoint.Options{Label: "after"}))
	if vr := must[checkpoint.VerifyResult](t)(e.cps.Verify(after.ID)); !vr.OK {
		t.Errorf("verify of a checkpoint from after the apply: %+v", vr)
	}
	e.write("keep.txt", "second plan")
	if d := must[checkpoint.Diff](t)(e.cps.DiffCheckpoints(after.ID, "")); strings.Join(d.Modified, " ") != "keep.txt" {
		t.Errorf("diff from the checkpoint after the apply: %+v", d)
	}
	must[checkpoint.RollbackResult](t)(e.cps.Rollback("s", after.ID))
	e.write("keep.txt", "second plan")
	must[Plan](t)(e.plans.Create("p2", CreateOptions{Sandbox: "s"}))
	if _, err := e.plans.Apply("p2"); err != nil {
		t.Fatalf("a second plan after an apply: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.base, "keep.txt")); string(b) != "second plan" {
		t.Errorf("keep.txt in the base after the second apply: %q", b)
	}
}

// A sparse file the sandbox wrote stays sparse in the base: apply stages
// runs of zeros as holes.
func TestApplyKeepsHoles(t *testing.T) {
	e := newEnv(t, nil)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	f, err := os.Create(filepath.Join(e.mnt, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 20 << 20} {
		if _, err := f.WriteAt([]byte("data"), off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	must[ApplyResult](t)(e.plans.Apply("p"))
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(e.base, "sparse"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != 20<<20+4 || st.Blocks*512 > 1<<20 {
		t.Errorf("sparse in the base: size %d, %d bytes allocated; want %d and far less than that", st.Size, st.Blocks*512, 20<<20+4)
	}
	b, _ := os.ReadFile(filepath.Join(e.base, "sparse"))
	if string(b[:4]) != "data" || string(b[20<<20:]) != "data" || strings.Count(string(b), "\x00") != len(b)-8 {
		t.Errorf("sparse in the base holds other bytes than the sandbox wrote")
	}
}

// Hard links stay hard links: names of one file in the sandbox are
// staged as links of one file, whether the base had them or the sandbox
// made them.
func TestApplyKeepsHardLinks(t *testing.T) {
	e := newEnv(t, func(base string) {
		os.WriteFile(filepath.Join(base, "hl1"), []byte("old"), 0o644)
		os.Link(filepath.Join(base, "hl1"), filepath.Join(base, "hl2"))
	})
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	e.write("hl1", "new")
	e.write("made/a", "made")
	if err := os.Link(filepath.Join(e.mnt, "made/a"), filepath.Join(e.mnt, "made/b")); err != nil {
		t.Fatal(err)
	}
	must[ApplyResult](t)(e.plans.Apply("p"))
	for _, pair := range [][2]string{{"hl1", "hl2"}, {"made/a", "made/b"}} {
		var a, b unix.Stat_t
		if err := unix.Stat(filepath.Join(e.base, pair[0]), &a); err != nil {
			t.Fatal(err)
		}
		if err := unix.Stat(filepath.Join(e.base, pair[1]), &b); err != nil {
			t.Fatal(err)
		}
		if a.Ino != b.Ino || a.Nlink != 2 {
			t.Errorf("%s and %s in the base: inodes %d and %d, %d links; want one inode with 2", pair[0], pair[1], a.Ino, b.Ino, a.Nlink)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(e.base, "hl2")); string(got) != "new" {
		t.Errorf("hl2 in the base: %q, want %q", got, "new")
	}
}
