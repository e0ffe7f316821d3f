package correction

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// onTmpfs returns a fill function for newEnv that mounts a tmpfs with
// options opts on the base first, then runs fill; the tmpfs is unmounted
// when the test ends (after the sandbox's mount and store).
func onTmpfs(t *testing.T, opts string, fill func(base string)) func(base string) {
	t.Helper()
	return func(base string) {
		if err := unix.Mount("tmpfs", base, "tmpfs", 0, opts); err != nil {
			t.Fatalf("mount tmpfs on %s: %v", base, err)
		}
		t.Cleanup(func() {
			if err := unix.Unmount(base, unix.MNT_DETACH); err != nil {
				t.Errorf("unmount %s: %v", base, err)
			}
		})
		if err := os.Chmod(base, 0o755); err != nil {
			t.Fatal(err)
		}
		if fill != nil {
			fill(base)
		}
	}
}

// remount makes the tmpfs at dir read-only or read-write.
func remount(t *testing.T, dir string, readOnly bool) {
	t.Helper()
	flags := uintptr(unix.MS_REMOUNT)
	if readOnly {
		flags |= unix.MS_RDONLY
	}
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		t.Fatalf("remount %s read-only %v: %v", dir, readOnly, err)
	}
}

// TestApplyReadOnlyBase: a base on a read-only file system cannot even
// take the staging directory; nothing is applied and the plan stays open.
func TestApplyReadOnlyBase(t *testing.T) {
	e := newEnv(t, onTmpfs(t, "size=4m", applyBase))
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	changeAll(t, e)
	orig := tree(t, e.base)
	remount(t, e.base, true)
	_, err := e.plans.Apply("p")
	if !errors.Is(err, unix.EROFS) || !strings.Contains(err.Error(), "nothing applied") {
		t.Fatalf("apply onto a read-only base: got %v, want EROFS, nothing applied", err)
	}
	if p := e.plan("p"); p.Status != StatusOpen || p.Applied {
		t.Errorf("plan: status %q applied %v, want open", p.Status, p.Applied)
	}
	if d := diffTree(tree(t, e.base), orig); d != "" {
		t.Errorf("base:\n%s", d)
	}
	e.noStage()
	remount(t, e.base, false)
	must[ApplyResult](t)(e.plans.Apply("p"))
	if d := diffTree(tree(t, e.base), appliedTree); d != "" {
		t.Errorf("base after apply:\n%s", d)
	}
}

// TestApplyBaseTurnsReadOnly makes the base's file system read-only at
// every point of the apply in turn: the step there fails, and so does its
// undo; the plan stays applying and keeps its journal until the file system
// is writable again, when its next command finishes the undo (or, past the
// point of no return, the tidying up).
func TestApplyBaseTurnsReadOnly(t *testing.T) {
	e := newEnv(t, onTmpfs(t, "size=4m", applyBase))
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	changeAll(t, e)
	orig := tree(t, e.base)
	t.Cleanup(func() { applyFault = nil })
	for step := -1; ; step++ {
		applyFault = func(n int) error {
			if n == step {
				remount(t, e.base, true)
			}
			return nil
		}
		_, err := e.plans.Apply("p")
		applyFault = nil
		if err != nil && !errors.Is(err, unix.EROFS) {
			t.Fatalf("step %d: got %v, want EROFS", step, err)
		}
		if step > 0 && err != nil && !strings.Contains(err.Error(), "undo failed") {
			t.Errorf("step %d: got %v, want an undo failure", step, err)
		}
		if err != nil && !e.journalled() {
			t.Errorf("step %d: no journal kept", step)
		}
		remount(t, e.base, false)
		p := e.plan("p")
		e.noStage()
		if err == nil {
			if !p.Applied {
				t.Errorf("step %d: apply went through, plan %q", step, p.Status)
			}
			if d := diffTree(tree(t, e.base), appliedTree); d != "" {
				t.Errorf("step %d: base after apply:\n%s", step, d)
			}
			if step < 12 {
				t.Errorf("apply went through at step %d; want more steps", step)
			}
			return
		}
		if p.Applied || p.Status != StatusOpen {
			t.Fatalf("step %d: plan after the undo: status %q applied %v, want open", step, p.Status, p.Applied)
		}
		if d := diffTree(tree(t, e.base), orig); d != "" {
			t.Fatalf("step %d: base after the undo:\n%s", step, d)
		}
	}
}

// journalled reports whether the store holds an apply journal.
func (e *env) journalled() bool {
	e.t.Helper()
	n := 0
	err := e.store.View(func(tx *layers.Txn) error {
		return tx.Scan("x/plan/apply/", func(string, []byte) error { n++; return nil })
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return n > 0
}

// TestApplyNoSpace fills the base's file system (blocks or inodes) so that
// staging fails at each kind of file it writes: nothing is applied, nothing
// is left.
func TestApplyNoSpace(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   string
		free   uint64 // inodes left free after the base is made; 0: no padding
		change func(t *testing.T, e *env)
		want   string
	}{
		{"blocks", "size=1m", 0, func(t *testing.T, e *env) { e.write("big", strings.Repeat("x", 2<<20)) }, "stage big"},
		{"inodes for the staging directory", "nr_inodes=64", 1, func(t *testing.T, e *env) { e.write("f", "f") }, "staging directory"},
		{"inodes for a file", "nr_inodes=64", 2, func(t *testing.T, e *env) { e.write("f", "f") }, "stage f"},
		{"inodes for a symlink", "nr_inodes=64", 2, func(t *testing.T, e *env) {
			if err := os.Symlink("a", filepath.Join(e.mnt, "l")); err != nil {
				t.Fatal(err)
			}
		}, "stage l"},
		{"inodes for a fifo", "nr_inodes=64", 2, func(t *testing.T, e *env) {
			if err := unix.Mkfifo(filepath.Join(e.mnt, "p"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, "stage p"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, onTmpfs(t, tc.opts, func(base string) {
				if err := os.WriteFile(filepath.Join(base, "a"), []byte("a"), 0o644); err != nil {
					t.Fatal(err)
				}
				if tc.free > 0 {
					pad(t, base, tc.free-1) // one inode goes to the padding directory
				}
			}))
			must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
			tc.change(t, e)
			orig := tree(t, e.base)
			_, err := e.plans.Apply("p")
			if !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "nothing applied") {
				t.Fatalf("got %v, want ENOSPC at %q, nothing applied", err, tc.want)
			}
			if p := e.plan("p"); p.Status != StatusOpen || p.Applied {
				t.Errorf("plan: status %q applied %v, want open", p.Status, p.Applied)
			}
			if d := diffTree(tree(t, e.base), orig); d != "" {
				t.Errorf("base:\n%s", d)
			}
			e.noStage()
		})
	}
}

// pad fills the file system of dir with empty files in dir/pad until free
// inodes are left.
func pad(t *testing.T, dir string, free uint64) {
	t.Helper()
	p := filepath.Join(dir, "pad")
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		var st unix.Statfs_t
		if err := unix.Statfs(dir, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ffree <= free {
			if st.Ffree < free {
				t.Fatalf("%d inodes free, want %d", st.Ffree, free)
			}
			return
		}
		if err := os.WriteFile(filepath.Join(p, fmt.Sprint(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestApplySymlinkSwapped replaces, after the diff, a base path the apply
// changes (or its parent directory) by a symlink to a file outside the
// base: the apply must fail without touching what the symlink points to.
func TestApplySymlinkSwapped(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, e *env)
		swap   string // base path to replace by a symlink to a copy outside
		want   error
	}{
		{"parent of a new directory", func(t *testing.T, e *env) {
			if err := os.Mkdir(filepath.Join(e.mnt, "tree/c"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "tree", unix.ENOTDIR},
		{"file to chmod", func(t *testing.T, e *env) {
			if err := os.Chmod(filepath.Join(e.mnt, "mode.sh"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "mode.sh", layers.ErrInvalid},
		{"parent of a file to delete", func(t *testing.T, e *env) { e.remove("tree/b") }, "tree", unix.ENOTDIR},
		{"grandparent of a file to delete", func(t *testing.T, e *env) { e.remove("tree/a/x") }, "tree", unix.ELOOP},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, applyBase)
			must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
			tc.change(t, e)
			outside := filepath.Join(e.dir, "outside")
			t.Cleanup(func() { applyFault = nil })
			applyFault = func(n int) error {
				if n == 0 {
					from := filepath.Join(e.base, tc.swap)
					if err := os.Rename(from, outside); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink(outside, from); err != nil {
						t.Fatal(err)
					}
				}
				return nil
			}
			before := tree(t, e.base)
			_, err := e.plans.Apply("p")
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "nothing applied") {
				t.Fatalf("got %v, want %v, nothing applied", err, tc.want)
			}
			// What the symlink points to is as the base had it.
			fi, err := os.Lstat(outside)
			if err != nil {
				t.Fatal(err)
			}
			if fi.IsDir() {
				if got, want := tree(t, outside), subtree(before, tc.swap); diffTree(got, want) != "" {
					t.Errorf("outside:\n%s", diffTree(got, want))
				}
			} else if got, want := fi.Mode().String()+" "+string(must[[]byte](t)(os.ReadFile(outside))), before[tc.swap]; got != want {
				t.Errorf("outside: got %q, want %q", got, want)
			}
			if p := e.plan("p"); p.Status != StatusOpen {
				t.Errorf("plan: status %q, want open", p.Status)
			}
			e.noStage()
		})
	}
}

// subtree is the part of a tree below dir, relative to it.
func subtree(tr map[string]string, dir string) map[string]string {
	out := map[string]string{}
	for k, v := range tr {
		if rel, ok := strings.CutPrefix(k, dir+"/"); ok {
			out[rel] = v
		}
	}
	return out
}

// TestApplyPathGone removes, after the diff, a base path the apply only
// changes the mode of.
func TestApplyPathGone(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	if err := os.Chmod(filepath.Join(e.mnt, "mode.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { applyFault = nil })
	applyFault = func(n int) error {
		if n == 0 {
			os.Remove(filepath.Join(e.base, "mode.sh"))
		}
		return nil
	}
	if _, err := e.plans.Apply("p"); !errors.Is(err, unix.ENOENT) || !strings.Contains(err.Error(), "nothing applied") {
		t.Fatalf("got %v, want ENOENT, nothing applied", err)
	}
	e.noStage()
}

// TestApplyShortRead truncates a file in the sandbox while the apply
// stages it: the apply fails rather than write a short file.
func TestApplyShortRead(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	e.write("edit.txt", "new content")
	orig := tree(t, e.base)
	t.Cleanup(func() { applyFault = nil })
	applyFault = func(n int) error {
		if n == -1 {
			if err := os.Truncate(filepath.Join(e.mnt, "edit.txt"), 0); err != nil {
				t.Error(err)
			}
		}
		return nil
	}
	_, err := e.plans.Apply("p")
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "stage edit.txt") {
		t.Fatalf("got %v, want an unexpected EOF staging edit.txt", err)
	}
	if d := diffTree(tree(t, e.base), orig); d != "" {
		t.Errorf("base:\n%s", d)
	}
	e.noStage()
}

// TestApplyCorruptSandbox: a block of the sandbox that fails its checksum
// fails the apply while it stages, before the base is touched.
func TestApplyCorruptSandbox(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	e.write("sub/c.txt", strings.Repeat("c", 10000))
	cp := must[checkpoint.Checkpoint](t)(e.cps.Create("s", checkpoint.Options{}))
	e.unmount()
	data := filepath.Join(e.storeDir, "data", cp.Layer)
	b, err := os.ReadFile(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(data, b, 0o600); err != nil {
		t.Fatal(err)
	}
	orig := tree(t, e.base)
	_, err = e.plans.Apply("p")
	e.nothingApplied(err, layers.ErrCorrupt, orig, "stage sub/c.txt")
}

// TestApplyBaseGone: a base directory that is gone fails the apply, the
// sandbox mounted or not.
func TestApplyBaseGone(t *testing.T) {
	for _, mounted := range []bool{true, false} {
		t.Run(fmt.Sprint("mounted ", mounted), func(t *testing.T) {
			e := newEnv(t, applyBase)
			must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
			e.write("edit.txt", "x")
			if !mounted {
				e.unmount()
			}
			if err := os.Rename(e.base, e.base+".gone"); err != nil {
				t.Fatal(err)
			}
			if _, err := e.plans.Apply("p"); !errors.Is(err, layers.ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
			if p := e.plan("p"); p.Status != StatusOpen {
				t.Errorf("plan: status %q, want open", p.Status)
			}
		})
	}
}

// TestApplyRecordBroken breaks the plan's record in the middle of an
// apply: the apply undoes its moves but cannot record that nor give the
// plan its status back; it says so and keeps its journal; once the record is whole again, the plan's next
// command finishes the undo.
func TestApplyRecordBroken(t *testing.T) {
	e := newEnv(t, applyBase)
	p := must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	changeAll(t, e)
	orig := tree(t, e.base)
	var saved []byte
	t.Cleanup(func() { applyFault = nil })
	applyFault = func(n int) error {
		if n != 3 {
			return nil
		}
		err := e.store.Update(func(tx *layers.Txn) error {
			b, err := tx.Get(keyPlan(p.ID))
			saved = b
			if err != nil {
				return err
			}
			return tx.Set(keyPlan(p.ID), []byte("{"))
		})
		if err != nil {
			t.Fatal(err)
		}
		return errors.New("injected")
	}
	_, err := e.plans.Apply("p")
	if !errors.Is(err, layers.ErrCorrupt) || !strings.Contains(err.Error(), "stays applying") {
		t.Fatalf("got %v, want the plan left applying, corrupt", err)
	}
	applyFault = nil
	if !e.journalled() {
		t.Errorf("journal not kept")
	}
	if err := e.store.Update(func(tx *layers.Txn) error { return tx.Set(keyPlan(p.ID), saved) }); err != nil {
		t.Fatal(err)
	}
	if got := e.plan("p"); got.Status != StatusOpen {
		t.Errorf("plan after the record is mended: status %q, want open", got.Status)
	}
	if d := diffTree(tree(t, e.base), orig); d != "" {
		t.Errorf("base:\n%s", d)
	}
	e.noStage()
}

// TestApplyUndoBlockedBySymlink replaces a directory the apply made by a
// symlink before the apply fails: the undo does not follow it (what it
// points to keeps what the apply put there) and reports what it could not
// undo; once the directory is back, the plan's next command finishes.
func TestApplyUndoBlockedBySymlink(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	changeAll(t, e)
	orig := tree(t, e.base)
	made, outside := filepath.Join(e.base, "new"), filepath.Join(e.dir, "outside")
	t.Cleanup(func() { applyFault = nil })
	applyFault = func(n int) error {
		if _, err := os.Lstat(filepath.Join(made, "deep/file")); err != nil {
			return nil
		}
		if err := os.Rename(made, outside); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, made); err != nil {
			t.Fatal(err)
		}
		return errors.New("injected")
	}
	_, err := e.plans.Apply("p")
	applyFault = nil
	if !errors.Is(err, unix.ELOOP) || !strings.Contains(err.Error(), "undo failed") {
		t.Fatalf("got %v, want an undo failure on ELOOP", err)
	}
	want := map[string]string{"deep": "drwx------", "deep/file": "-rw-r--r-- created [user.f=1]"}
	if d := diffTree(tree(t, outside), want); d != "" {
		t.Errorf("the symlink's target:\n%s", d)
	}
	if err := os.Remove(made); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(outside, made); err != nil {
		t.Fatal(err)
	}
	if p := e.plan("p"); p.Status != StatusOpen {
		t.Errorf("plan after the undo: status %q, want open", p.Status)
	}
	if d := diffTree(tree(t, e.base), orig); d != "" {
		t.Errorf("base after the undo:\n%s", d)
	}
	e.noStage()
}
