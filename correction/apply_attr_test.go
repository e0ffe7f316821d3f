package correction

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/layers"
)

// Times the owner-and-times tests set, far from the test's own clock.
var (
	tBase    = time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
	tTouched = time.Date(2021, 6, 7, 8, 9, 10, 11000, time.UTC)
	tDir     = time.Date(2022, 3, 4, 5, 6, 7, 8000, time.UTC)
	tLink    = time.Date(2023, 9, 8, 7, 6, 5, 4000, time.UTC)
)

func lutimes(t *testing.T, p string, at time.Time) {
	t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(at.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}

// netRawCapability is the file capability cap_net_raw+ep, as
// security.capability holds it (VFS_CAP_REVISION_2).
func netRawCapability() []byte {
	return []byte{1, 0, 0, 2, 1 << 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
}

// ownerTimesBase holds files whose owner or times a sandbox changes, all
// with the same old modification time.
func ownerTimesBase(t *testing.T) func(base string) {
	return func(base string) {
		for _, f := range []struct {
			rel  string
			mode os.FileMode
		}{{"own.txt", 0o644}, {"suid", 0o755 | os.ModeSetuid}, {"touched.txt", 0o644}, {"dir/in.txt", 0o644}, {"both.txt", 0o644}} {
			p := filepath.Join(base, f.rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(f.rel), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, f.mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("own.txt", filepath.Join(base, "lnk")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(base, "cap"), []byte("cap"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(filepath.Join(base, "cap"), xattrCapability, netRawCapability(), 0); err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{"own.txt", "suid", "touched.txt", "dir/in.txt", "both.txt", "lnk", "dir", "cap"} {
			lutimes(t, filepath.Join(base, rel), tBase)
		}
	}
}

// ownerTimes describes every path below dir by type and mode, owner,
// content or target, and (but for directories, whose times the moves of
// an undone apply change) modification time.
func ownerTimes(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		d := fmt.Sprintf("%v %d:%d", fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			d += " -> " + target
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			d += " " + string(b)
		}
		if !fi.IsDir() {
			d += " " + time.Unix(0, st.Mtim.Nano()).UTC().Format(time.RFC3339Nano)
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			buf := make([]byte, 64)
			if n, err := unix.Lgetxattr(p, xattrCapability, buf); err == nil {
				d += fmt.Sprintf(" cap=%x", buf[:n])
			}
		}
		out[rel] = d
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Apply carries what changed in place without a change of content: an
// owner (chown, which keeps a set-user-ID bit the sandbox kept), a
// modification time (touch), a directory's times, a symlink's owner and
// times; and a failure at any step of it puts every owner, mode and time
// back.
func TestApplyOwnersAndTimes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners are carried only by root")
	}
	e := newEnv(t, ownerTimesBase(t))
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	m := func(rel string) string { return filepath.Join(e.mnt, rel) }
	for _, c := range []struct {
		rel      string
		uid, gid int
	}{{"own.txt", 1000, 1001}, {"suid", 1000, 1000}, {"lnk", 1002, 1003}, {"both.txt", 1004, 1004}, {"cap", 1005, 1005}} {
		if err := os.Lchown(m(c.rel), c.uid, c.gid); err != nil {
			t.Fatal(err)
		}
	}
	// The chown dropped the file capability; give it back: the base's
	// stays as it was, so only the owner changes.
	if err := unix.Setxattr(m("cap"), xattrCapability, netRawCapability(), 0); err != nil {
		t.Fatal(err)
	}
	// The chown cleared set-user-ID, as on any file system; set it again.
	if err := os.Chmod(m("suid"), 0o755|os.ModeSetuid); err != nil {
		t.Fatal(err)
	}
	lutimes(t, m("touched.txt"), tTouched)
	e.write("dir/new.txt", "new")
	lutimes(t, m("dir/new.txt"), tTouched)
	lutimes(t, m("dir"), tDir)
	lutimes(t, m("lnk"), tLink)
	if err := os.WriteFile(m("both.txt"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	lutimes(t, m("both.txt"), tTouched)
	want := ownerTimes(t, e.mnt)
	var dirStat unix.Stat_t
	if err := unix.Lstat(m("dir"), &dirStat); err != nil {
		t.Fatal(err)
	}
	orig := ownerTimes(t, e.base)

	applyFailingEachStep(t, e, "p", func(step int) {
		if d := diffTree(ownerTimes(t, e.base), orig); d != "" {
			t.Fatalf("step %d: base after a failed apply:\n%s", step, d)
		}
	})
	if d := diffTree(ownerTimes(t, e.base), want); d != "" {
		t.Errorf("base after apply, against the sandbox before it:\n%s", d)
	}
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(e.base, "dir"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mtim != dirStat.Mtim || st.Mtim.Nano() != tDir.UnixNano() {
		t.Errorf("dir's mtime in the base: got %v, want the sandbox's %v", time.Unix(0, st.Mtim.Nano()), tDir)
	}
	if fi, err := os.Stat(filepath.Join(e.base, "suid")); err != nil || fi.Mode() != 0o755|os.ModeSetuid {
		t.Errorf("suid in the base: %v %v, want -rwsr-xr-x", fi.Mode(), err)
	}
	if !strings.Contains(want["cap"], "cap=") || !strings.Contains(orig["cap"], "cap=") {
		t.Errorf("cap: sandbox %q, base before %q; want the capability in both", want["cap"], orig["cap"])
	}
	e.noStage()
}

// The result names what changed in place, and a second apply of an
// unchanged sandbox finds nothing to do.
func TestApplyOwnersAndTimesResult(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners are carried only by root")
	}
	e := newEnv(t, ownerTimesBase(t))
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	m := func(rel string) string { return filepath.Join(e.mnt, rel) }
	if err := os.Lchown(m("own.txt"), 7, 8); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(m("lnk"), 7, 8); err != nil {
		t.Fatal(err)
	}
	lutimes(t, m("touched.txt"), tTouched)
	lutimes(t, m("lnk"), tLink)
	e.write("both.txt", "edited")
	r := must[ApplyResult](t)(e.plans.Apply("p"))
	sort.Strings(r.Owners)
	sort.Strings(r.Times)
	if !slices.Equal(r.Owners, []string{"lnk", "own.txt"}) || !slices.Equal(r.Times, []string{"lnk", "touched.txt"}) ||
		!slices.Equal(r.Modified, []string{"both.txt"}) {
		t.Errorf("result: owners %q times %q modified %q; want [lnk own.txt] [lnk touched.txt] [both.txt]", r.Owners, r.Times, r.Modified)
	}
	must[Plan](t)(e.plans.Create("q", CreateOptions{Sandbox: "s"}))
	if _, err := e.plans.Apply("q"); err == nil {
		t.Errorf("a second apply with nothing changed since: got no error, want ErrNothingToApply")
	}
}

// The base turns read-only at each point of an apply that changes owners
// and times in turn: the chown or utimes fails with EROFS, and once the
// base is writable again the plan's next command finishes the undo and
// the base is as it was; the last time the apply goes through.
func TestApplyOwnersAndTimesBaseTurnsReadOnly(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners are carried only by root")
	}
	e := newEnv(t, onTmpfs(t, "size=4m", ownerTimesBase(t)))
	must[Plan](t)(e.plans.Create("p", CreateOptions{Sandbox: "s"}))
	m := func(rel string) string { return filepath.Join(e.mnt, rel) }
	if err := os.Lchown(m("own.txt"), 1000, 1001); err != nil {
		t.Fatal(err)
	}
	lutimes(t, m("touched.txt"), tTouched)
	lutimes(t, m("dir"), tDir)
	want := ownerTimes(t, e.mnt)
	orig := ownerTimes(t, e.base)
	t.Cleanup(func() { applyFault = nil })
	for step := 0; ; step++ {
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
		remount(t, e.base, false)
		p := e.plan("p") // finishes an undo the read-only base stopped
		e.noStage()
		if err == nil {
			if d := diffTree(ownerTimes(t, e.base), want); d != "" || !p.Applied {
				t.Errorf("step %d: applied %v; base after apply:\n%s", step, p.Applied, d)
			}
			if step < 3 {
				t.Errorf("apply went through at step %d; want a step per change", step)
			}
			return
		}
		if p.Applied || p.Status != StatusOpen {
			t.Fatalf("step %d: plan after the undo: status %q applied %v, want open", step, p.Status, p.Applied)
		}
		if d := diffTree(ownerTimes(t, e.base), orig); d != "" {
			t.Fatalf("step %d: base after the undo:\n%s", step, d)
		}
	}
}

// The host calls behind owner and times steps fail cleanly on what they
// cannot do.
func TestHostOwnerAndTimesErrors(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("f"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := openHost(dir, ".stage")
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	now := time.Now().UnixNano()
	tests := []struct {
		name string
		err  error
		want error
	}{
		{"utimes of a missing path", h.utimes("missing", []int64{now, now}), unix.ENOENT},
		{"utimes below a missing directory", h.utimes("no/f", []int64{now, now}), unix.ENOENT},
		{"utimes with one time", h.utimes("f", []int64{now}), layers.ErrInvalid},
		{"chown of a missing path", h.chown("missing", 0, 0, 0o644, nil), unix.ENOENT},
		{"a capability the kernel refuses", h.chown("f", 0, 0, 0o644, []xattr{{Name: xattrCapability, Value: []byte{1, 2, 3}}}), unix.EINVAL},
	}
	for _, tt := range tests {
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, tt.err, tt.want)
		}
	}
}
