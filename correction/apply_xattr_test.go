package correction

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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
	if err == nil || !strings.Contains(err.Error(), "nothing applied") || !strings.Contains(err.Error(), "keep.txt: xattr user.big") {
		t.Fatalf("got %v, want a failure naming keep.txt's user.big, nothing applied", err)
	}
	if d := diffTree(tree(t, e.base), orig); d != "" {
		t.Errorf("base after the failed apply:\n%s", d)
	}
	if p := e.plan("p"); p.Applied || p.Status != StatusOpen {
		t.Errorf("plan: applied %v status %q, want open", p.Applied, p.Status)
	}
	e.noStage()
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
	if !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "nothing applied") || !strings.Contains(err.Error(), "keep.txt") {
		t.Fatalf("got %v, want ENOENT on keep.txt, nothing applied", err)
	}
	if d := diffTree(tree(t, e.base), orig); d != "" {
		t.Errorf("base after the failed apply:\n%s", d)
	}
	e.noStage()
}
