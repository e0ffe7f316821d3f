package correction

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/layers"
)

// applyBase is a base with something of every kind for apply to change.
func applyBase(base string) {
	w := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(base, rel)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), mode)
	}
	w("keep.txt", "keep", 0o644)
	w("edit.txt", "old", 0o644)
	w("del.txt", "gone", 0o644)
	w("mode.sh", "#!/bin/sh\n", 0o644)
	w("ren.txt", "moved", 0o644)
	w("tree/a/x", "x", 0o644)
	w("tree/b", "b", 0o644)
	w("kind", "a file that becomes a directory", 0o644)
	w("ro/f", "f", 0o644)
	w("xa.txt", "attributes", 0o644)
	unix.Setxattr(filepath.Join(base, "xa.txt"), "user.old", []byte("1"), 0)
	unix.Setxattr(filepath.Join(base, "xa.txt"), "user.keep", []byte("k"), 0)
	unix.Setxattr(filepath.Join(base, "xa.txt"), "user.same", []byte("s"), 0)
	os.Symlink("keep.txt", filepath.Join(base, "link"))
}

// userACL is the POSIX ACL user::rwx,user:65534:r--,group::r-x,mask::r-x,
// other::r-x as system.posix_acl_access holds it.
func userACL() []byte {
	acl := []byte{2, 0, 0, 0}
	for _, e := range []struct {
		tag, perm uint16
		id        uint32
	}{{1, 7, 0xffffffff}, {2, 4, 65534}, {4, 5, 0xffffffff}, {0x10, 5, 0xffffffff}, {0x20, 5, 0xffffffff}} {
		acl = binary.LittleEndian.AppendUint16(acl, e.tag)
		acl = binary.LittleEndian.AppendUint16(acl, e.perm)
		acl = binary.LittleEndian.AppendUint32(acl, e.id)
	}
	return acl
}

// changeAll makes one change of every kind through the mount.
func changeAll(t *testing.T, e *env) {
	t.Helper()
	m := func(rel string) string { return filepath.Join(e.mnt, rel) }
	e.write("edit.txt", "new content")
	e.remove("del.txt")
	if err := os.Chmod(m("mode.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(m("ren.txt"), m("renamed.txt")); err != nil {
		t.Fatal(err)
	}
	e.remove("tree")
	e.write("new/deep/file", "created")
	if err := os.Chmod(m("new/deep"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m("link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("edit.txt", m("link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", m("abs")); err != nil {
		t.Fatal(err)
	}
	e.remove("kind")
	e.write("kind/inside", "now a directory")
	if err := syscall.Mkfifo(m("pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m("ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	// Extended attributes: alone on an unchanged file, replacing and
	// removing a base file's, with a mode change (an ACL too), on a
	// directory, on created and replaced entries.
	for _, x := range []struct{ rel, name, val string }{
		{"keep.txt", "user.tag", "v1"},
		{"xa.txt", "user.keep", "K2"},
		{"xa.txt", "user.old", ""},
		{"mode.sh", "system.posix_acl_access", string(userACL())},
		{"ro", "user.dir", "1"},
		{"new/deep", "user.d", "1"},
		{"new/deep/file", "user.f", "1"},
		{"edit.txt", "user.e", "1"},
	} {
		var err error
		if x.val == "" {
			err = unix.Removexattr(m(x.rel), x.name)
		} else {
			err = unix.Setxattr(m(x.rel), x.name, []byte(x.val), 0)
		}
		if err != nil {
			t.Fatalf("xattr %s of %s: %v", x.name, x.rel, err)
		}
	}
}

var appliedTree = map[string]string{
	"keep.txt":      "-rw-r--r-- keep [user.tag=v1]",
	"edit.txt":      "-rw-r--r-- new content [user.e=1]",
	"mode.sh":       "-rwxr-xr-x #!/bin/sh\n [system.posix_acl_access=" + string(userACL()) + "]",
	"renamed.txt":   "-rw-r--r-- moved",
	"new":           "drwxr-xr-x",
	"new/deep":      "drwxr-x--- [user.d=1]",
	"new/deep/file": "-rw-r--r-- created [user.f=1]",
	"link":          "Lrwxrwxrwx -> edit.txt",
	"abs":           "Lrwxrwxrwx -> /etc/passwd",
	"kind":          "drwxr-xr-x",
	"kind/inside":   "-rw-r--r-- now a directory",
	"pipe":          "prw-------",
	"ro":            "dr-xr-xr-x [user.dir=1]",
	"ro/f":          "-rw-r--r-- f",
	"xa.txt":        "-rw-r--r-- attributes [user.keep=K2 user.same=s]",
}

func TestApplyWritesBase(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	must[Decision](t)(e.plans.Begin("p", "D1", "change everything"))
	changeAll(t, e)
	must[Decision](t)(e.plans.End("p", "D1", false))
	res, err := e.plans.Apply("p")
	if err != nil {
		t.Fatal(err)
	}
	if d := diffTree(tree(t, e.base), appliedTree); d != "" {
		t.Errorf("base after apply:\n%s", d)
	}
	if got := strings.Join(res.Deleted, " "); got != "del.txt ren.txt tree tree/a tree/a/x tree/b" {
		t.Errorf("deleted: got %q", got)
	}
	if got := strings.Join(res.Modes, " "); got != "mode.sh ro" {
		t.Errorf("modes: got %q", got)
	}
	if got := strings.Join(res.Modified, " "); got != "edit.txt kind link" {
		t.Errorf("modified: got %q", got)
	}
	if got := strings.Join(res.Xattrs, " "); got != "keep.txt mode.sh ro xa.txt" {
		t.Errorf("xattrs: got %q", got)
	}
	// Mtimes come along.
	st, _ := os.Stat(filepath.Join(e.base, "edit.txt"))
	sv, _ := os.Stat(filepath.Join(e.mnt, "edit.txt"))
	if !st.ModTime().Equal(sv.ModTime()) {
		t.Errorf("edit.txt mtime: got %v, want %v", st.ModTime(), sv.ModTime())
	}
	p := e.plan("p")
	if !p.Applied || p.Status != StatusApplied || p.AppliedAt.IsZero() {
		t.Errorf("plan after apply: applied %v status %q", p.Applied, p.Status)
	}
	// Nothing of the staging directory is left.
	ents, _ := os.ReadDir(e.base)
	for _, de := range ents {
		if strings.HasPrefix(de.Name(), ".strata-apply-") {
			t.Errorf("staging directory left: %s", de.Name())
		}
	}
	before := e.record()
	for _, tc := range []struct {
		name string
		fn   func() error
	}{
		{"rollback", func() error { _, err := e.plans.Rollback("p", "p/1/before-step"); return err }},
		{"revert", func() error {
			_, err := e.plans.Correct("p", CorrectOptions{Mode: Revert, Decision: "D1", Reason: "r"})
			return err
		}},
		{"append", func() error { _, err := e.plans.Correct("p", CorrectOptions{Mode: Append, Reason: "r"}); return err }},
		{"apply again", func() error { _, err := e.plans.Apply("p"); return err }},
		{"step begin", func() error { _, err := e.plans.Begin("p", "D2", ""); return err }},
		{"complete", func() error { _, err := e.plans.Complete("p"); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.fn(); !errors.Is(err, ErrPlanApplied) {
				t.Errorf("got %v, want ErrPlanApplied", err)
			}
		})
	}
	if after := e.record(); after != before {
		t.Errorf("refused commands changed the record")
	}
	if d := diffTree(tree(t, e.base), appliedTree); d != "" {
		t.Errorf("base after refused commands:\n%s", d)
	}
}

func TestApplyUnmounted(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	e.write("edit.txt", "offline")
	e.unmount()
	must[ApplyResult](t)(e.plans.Apply("p"))
	if b, _ := os.ReadFile(filepath.Join(e.base, "edit.txt")); string(b) != "offline" {
		t.Errorf("edit.txt: got %q, want %q", b, "offline")
	}
}

func TestApplyNothing(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	e.write("edit.txt", "old") // the same content written anew applies as an edit
	must[ApplyResult](t)(e.plans.Apply("p"))
	e2 := newEnv(t, applyBase)
	must[Plan](t)(e2.plans.Create("q", CreateOptions{Sandbox: "s"}))
	_, err := e2.plans.Apply("q")
	if !errors.Is(err, ErrNothingToApply) {
		t.Errorf("apply of an unchanged sandbox: got %v, want ErrNothingToApply", err)
	}
}

// TestApplyConflicts changes the base under the sandbox in each way apply
// must notice, and checks that nothing is written.
func TestApplyConflicts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sandbox func(e *env)
		host    func(base string)
		want    string
	}{
		{"edited file touched in base", func(e *env) { e.write("edit.txt", "mine") },
			func(b string) { os.WriteFile(filepath.Join(b, "edit.txt"), []byte("theirs"), 0o644) }, "edit.txt (changed in base)"},
		{"deleted file touched in base", func(e *env) { e.remove("del.txt") },
			func(b string) { os.WriteFile(filepath.Join(b, "del.txt"), []byte("theirs"), 0o644) }, "del.txt (changed in base)"},
		{"created file appeared in base", func(e *env) { e.write("fresh.txt", "mine") },
			func(b string) { os.WriteFile(filepath.Join(b, "fresh.txt"), []byte("theirs"), 0o644) }, "fresh.txt (changed in base)"},
		{"renamed file removed from base", func(e *env) {
			os.Rename(filepath.Join(e.mnt, "ren.txt"), filepath.Join(e.mnt, "renamed.txt"))
			e.write("edit.txt", "mine")
		}, func(b string) { os.Remove(filepath.Join(b, "ren.txt")) }, "renamed.txt"},
		{"deleted tree changed in base", func(e *env) { e.remove("tree") },
			func(b string) { os.WriteFile(filepath.Join(b, "tree/a/new"), []byte("theirs"), 0o644) }, "tree/a"},
		{"directory replaced by a symlink in base", func(e *env) { e.write("tree/a/y", "mine") },
			func(b string) {
				os.RemoveAll(filepath.Join(b, "tree"))
				os.Symlink("/tmp", filepath.Join(b, "tree"))
			}, "tree/a ("},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, applyBase)
			must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
			tc.sandbox(e)
			time.Sleep(20 * time.Millisecond) // past the sandbox's creation on the coarse clock
			tc.host(e.base)
			before, base := e.record(), tree(t, e.base)
			_, err := e.plans.Apply("p")
			var ce *ConflictError
			if !errors.Is(err, ErrConflict) || !errors.As(err, &ce) {
				t.Fatalf("got %v, want a ConflictError", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("conflict %q does not name %q", err, tc.want)
			}
			if after := e.record(); after != before {
				t.Errorf("a refused apply changed the record")
			}
			if d := diffTree(tree(t, e.base), base); d != "" {
				t.Errorf("a refused apply changed the base:\n%s", d)
			}
		})
	}
}

// noStage fails the test when the base holds a staging directory or the
// store an apply journal.
// nothingApplied checks a failed apply: err is (or wraps) is, when is is
// not nil, and says "nothing applied" and each of mentions; the base is
// as orig described it; no staging directory or journal is left.
func (e *env) nothingApplied(err, is error, orig map[string]string, mentions ...string) {
	e.t.Helper()
	ok := err != nil && (is == nil || errors.Is(err, is)) && strings.Contains(err.Error(), "nothing applied")
	for _, m := range mentions {
		ok = ok && strings.Contains(err.Error(), m)
	}
	if !ok {
		e.t.Fatalf("got %v, want %v naming %q, nothing applied", err, is, mentions)
	}
	if d := diffTree(tree(e.t, e.base), orig); d != "" {
		e.t.Errorf("base after the failed apply:\n%s", d)
	}
	e.noStage()
}

func (e *env) noStage() {
	e.t.Helper()
	ents, _ := os.ReadDir(e.base)
	for _, de := range ents {
		if strings.HasPrefix(de.Name(), ".strata-apply-") {
			e.t.Errorf("staging directory left: %s", de.Name())
		}
	}
	err := e.store.View(func(tx *layers.Txn) error {
		return tx.Scan("x/plan/apply/", func(key string, _ []byte) error {
			e.t.Errorf("apply journal left: %s", key)
			return nil
		})
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// TestApplyUndo fails the apply at every point of its staging and move
// phases in turn and checks that the base and the plan are left exactly as
// they were; then it lets it through.
func TestApplyUndo(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	changeAll(t, e)
	orig := tree(t, e.base)
	steps := applyFailingEachStep(t, e, "p", func(step int) {
		if d := diffTree(tree(t, e.base), orig); d != "" {
			t.Fatalf("step %d: base after a failed apply:\n%s", step, d)
		}
		if p := e.plan("p"); p.Applied || p.Status != StatusOpen {
			t.Fatalf("step %d: plan after a failed apply: applied %v status %q, want open", step, p.Applied, p.Status)
		}
	})
	if steps < 12 {
		t.Errorf("the apply succeeded with a fault at step %d; want more steps", steps)
	}
	if d := diffTree(tree(t, e.base), appliedTree); d != "" {
		t.Errorf("base after apply:\n%s", d)
	}
	e.noStage()
}

// applyFailingEachStep applies plan with a failure injected at each point
// of its staging and move phases in turn, calling check after each failed
// apply, until an apply gets past the last point that can fail; it returns
// that point.
func applyFailingEachStep(t *testing.T, e *env, plan string, check func(step int)) int {
	t.Helper()
	t.Cleanup(func() { applyFault = nil })
	defer func() { applyFault = nil }()
	step := -1
	for ; ; step++ {
		reached := false
		applyFault = func(n int) error {
			if n == step {
				reached = true
				return fmt.Errorf("injected failure at step %d", n)
			}
			return nil
		}
		_, err := e.plans.Apply(plan)
		if err == nil {
			return step
		}
		if !reached || !strings.Contains(err.Error(), "nothing applied") || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("step %d: got %v, want the injected failure, nothing applied", step, err)
		}
		check(step)
		e.noStage()
	}
}

// TestApplyUndoFails makes the undo itself fail: the staging directory and
// the journal are kept, the plan stays applying and refuses changes until
// the obstacle is gone; then its next command finishes the undo.
func TestApplyUndoFails(t *testing.T) {
	e := newEnv(t, applyBase)
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	e.remove("del.txt")
	e.write("new.txt", "n")
	orig := tree(t, e.base)
	intruder := filepath.Join(e.base, "del.txt")
	t.Cleanup(func() { applyFault = nil })
	applyFault = func(n int) error {
		if n == 1 {
			// Someone puts a file where the deleted one must come back.
			os.WriteFile(intruder, []byte("intruder"), 0o644)
			return errors.New("injected")
		}
		return nil
	}
	_, err := e.plans.Apply("p")
	if err == nil || !strings.Contains(err.Error(), "undo failed") {
		t.Fatalf("got %v, want an undo failure", err)
	}
	applyFault = nil
	ents, _ := os.ReadDir(e.base)
	kept := false
	for _, de := range ents {
		kept = kept || strings.HasPrefix(de.Name(), ".strata-apply-")
	}
	if !kept {
		t.Errorf("staging directory removed although it holds del.txt")
	}
	for _, tc := range []struct {
		name string
		fn   func() error
	}{
		{"show", func() error { _, err := e.plans.Get("p"); return err }},
		{"step begin", func() error { _, err := e.plans.Begin("p", "D1", ""); return err }},
		{"apply", func() error { _, err := e.plans.Apply("p"); return err }},
	} {
		if err := tc.fn(); err == nil || !strings.Contains(err.Error(), "interrupted apply") || !strings.Contains(err.Error(), "file exists") {
			t.Errorf("%s while the undo cannot finish: got %v, want the undo's failure", tc.name, err)
		}
	}
	ps := must[[]Plan](t)(e.plans.List())
	if len(ps) != 1 || ps[0].Status != StatusApplying {
		t.Errorf("list while the undo cannot finish: got %+v, want p applying", ps)
	}
	if err := os.Remove(intruder); err != nil {
		t.Fatal(err)
	}
	if p := e.plan("p"); p.Status != StatusOpen || p.Applied {
		t.Errorf("plan after the undo: status %q applied %v, want open", p.Status, p.Applied)
	}
	if d := diffTree(tree(t, e.base), orig); d != "" {
		t.Errorf("base after the undo:\n%s", d)
	}
	e.noStage()
	must[ApplyResult](t)(e.plans.Apply("p"))
	if _, err := os.Lstat(intruder); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("del.txt after apply: got %v, want it gone", err)
	}
}

func TestBaseOriginsAndSnapshot(t *testing.T) {
	e := newEnv(t, applyBase)
	e.write("edit.txt", "x")
	os.Rename(filepath.Join(e.mnt, "ren.txt"), filepath.Join(e.mnt, "r2"))
	e.unmount()
	got, err := e.store.BaseOrigins("s")
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(got, " "); !strings.Contains(s, "edit.txt") || !strings.Contains(s, "ren.txt") {
		t.Errorf("origins: got %q, want edit.txt and ren.txt", s)
	}
	if _, err := e.store.BaseOrigins("nope"); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("origins of a missing sandbox: got %v, want ErrNotFound", err)
	}
}
