package fs

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// nobody is the unprivileged user the permission tests act as.
const nobody = 65534

// openDir returns a new temporary directory that every user may traverse,
// so that what an unprivileged user is refused is refused by the mount.
func openDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// asNobody runs a shell script as user and group 65534 and returns its
// output and exit code.
func asNobody(t *testing.T, script string) (string, int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	case err != nil:
		t.Fatalf("run %q as nobody: %v", script, err)
	}
	return string(out), 0
}

// hostTree describes every path under dir without following a symlink:
// type, mode, owner, size, mtime, link target and content. Any change the
// host sees changes it.
func hostTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		b.WriteString(p)
		b.WriteString(strings.Join([]string{"", itoa(st.Mode), itoa(st.Uid), itoa(st.Gid), itoa(st.Size), itoa(st.Mtim.Nano())}, " "))
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			b.WriteString(" -> " + target)
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.WriteString(" " + string(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return b.String()
}

func itoa[T int64 | uint64 | uint32](n T) string { return strconv.FormatInt(int64(n), 10) }

// sameTarget says whether following the link at path reaches what the
// kernel reaches by resolving target from the link's directory on the
// host: both the same file, or both the same error.
func sameTarget(path, target string) (bool, string) {
	want := target
	if !filepath.IsAbs(target) {
		want = filepath.Join(filepath.Dir(path), target)
	}
	got, gerr := os.Stat(path)
	exp, werr := os.Stat(want)
	switch {
	case gerr != nil || werr != nil:
		var ge, we syscall.Errno
		errors.As(gerr, &ge)
		errors.As(werr, &we)
		return ge == we && gerr != nil && werr != nil, "following it: " + errString(gerr) + "; the host path " + want + ": " + errString(werr)
	case !os.SameFile(got, exp):
		return false, "following it reaches another file than " + want
	}
	return true, ""
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// Symlinks that point out of the sandbox, absolute or relative, from the
// base or made in the sandbox, moved with a renamed directory: the mount
// shows them as links with their targets, the kernel resolves them as it
// resolves any link, and nothing Strata does to a link reaches its target
// or the base.
func TestSymlinksPointingOutside(t *testing.T) {
	links := map[string]string{ // path in the sandbox -> target
		"rel":          "../outside/secret",
		"deep/rel":     "../../outside/secret",
		"deep/up":      strings.Repeat("../", 40) + "etc",
		"deep/dangles": "../../outside/none",
	}
	// outside is next to the base and the mountpoint: relative links from
	// either reach it.
	var outside string
	sb := newSandbox(t, func(base string) {
		outside = filepath.Join(filepath.Dir(base), "outside")
		writeFile(t, filepath.Join(outside, "secret"), "SECRET")
		writeFile(t, filepath.Join(outside, "sub", "f"), "outside sub")
		links["abs"] = filepath.Join(outside, "secret")
		links["absdir"] = outside
		for p, target := range links {
			mustNil(t, "mkdir in base", os.MkdirAll(filepath.Join(base, filepath.Dir(p)), 0o755))
			mustNil(t, "symlink in base", os.Symlink(target, filepath.Join(base, p)))
		}
	})
	if filepath.Dir(sb.mnt) != filepath.Dir(outside) {
		t.Fatalf("the mountpoint %s is not next to %s", sb.mnt, outside)
	}
	mgr := checkpoint.New(sb.store, sb)
	outsideBefore, baseBefore := hostTree(t, outside), hostTree(t, sb.base)

	// Made in the sandbox, one of them in a directory renamed afterwards.
	made := map[string]string{
		"new-abs":   filepath.Join(outside, "secret"),
		"new-rel":   "../outside/secret",
		"a/b/l":     "../../../outside/secret",
		"a/b/ldir":  "../../../outside",
		"deep/made": "../../outside/sub",
	}
	for p, target := range made {
		mustNil(t, "mkdir", os.MkdirAll(sb.path(filepath.Dir(p)), 0o755))
		mustNil(t, "symlink "+p, os.Symlink(target, sb.path(p)))
	}
	mustNil(t, "mkdir x/y", os.MkdirAll(sb.path("x/y"), 0o755))
	mustNil(t, "rename a", os.Rename(sb.path("a"), sb.path("x/y/a")))
	for p, target := range made {
		if strings.HasPrefix(p, "a/") {
			p = "x/y/" + p
		}
		links[p] = target
	}
	// Moves and metadata changes of links: the link changes, not its target.
	mustNil(t, "rename base link", os.Rename(sb.path("abs"), sb.path("moved-abs")))
	links["moved-abs"] = links["abs"]
	delete(links, "abs")
	mustNil(t, "lchown", os.Lchown(sb.path("rel"), 1234, 1234))
	mustNil(t, "utimes nofollow", unix.UtimesNanoAt(unix.AT_FDCWD, sb.path("deep/rel"), []unix.Timespec{{Sec: 1}, {Sec: 2}}, unix.AT_SYMLINK_NOFOLLOW))
	mustNil(t, "copy up the directory", os.WriteFile(sb.path("deep/new"), []byte("new"), 0o644))
	mustNil(t, "remove a link to a directory", os.Remove(sb.path("absdir")))
	delete(links, "absdir")
	// A directory of the base that holds links moves deeper: its links go
	// with it, unchanged, and now resolve from where they are.
	mustNil(t, "rename a base directory", os.Rename(sb.path("deep"), sb.path("x/y/deep")))
	for p, target := range links {
		if strings.HasPrefix(p, "deep/") {
			links["x/y/"+p] = target
			delete(links, p)
		}
	}

	check := func(when string) {
		t.Helper()
		for p, target := range links {
			var st unix.Stat_t
			if err := unix.Lstat(sb.path(p), &st); err != nil {
				t.Fatalf("%s: lstat %s: %v", when, p, err)
			}
			if st.Mode&unix.S_IFMT != unix.S_IFLNK {
				t.Fatalf("%s: %s has mode %o, want a symlink", when, p, st.Mode)
			}
			got, err := os.Readlink(sb.path(p))
			if err != nil || got != target {
				t.Fatalf("%s: readlink %s: got %q, %v; want %q", when, p, got, err, target)
			}
			if ok, why := sameTarget(sb.path(p), target); !ok {
				t.Fatalf("%s: %s -> %s: %s", when, p, target, why)
			}
		}
		if st := lstat(t, sb.path("rel")); st.Uid != 1234 || st.Gid != 1234 {
			t.Fatalf("%s: rel owned by %d:%d, want 1234:1234", when, st.Uid, st.Gid)
		}
		if st := lstat(t, sb.path("x/y/deep/rel")); st.Mtim.Sec != 2 {
			t.Fatalf("%s: x/y/deep/rel mtime %d, want 2", when, st.Mtim.Sec)
		}
		if got := hostTree(t, outside); got != outsideBefore {
			t.Fatalf("%s: the directory the links point at changed:\n%s\nwant\n%s", when, got, outsideBefore)
		}
		if got := hostTree(t, sb.base); got != baseBefore {
			t.Fatalf("%s: the base changed:\n%s\nwant\n%s", when, got, baseBefore)
		}
	}
	check("in the live sandbox")

	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	for p := range links {
		mustNil(t, "remove "+p, os.Remove(sb.path(p)))
	}
	_, err = mgr.Rollback(sb.name, cp.ID)
	mustNil(t, "rollback", err)
	check("after the rollback")
	sb.remount()
	check("after a remount")
}

// The base changes under a mounted sandbox: a directory becomes a link to
// a directory outside. Strata resolves base paths beneath the base without
// following links, so what it shows of that directory is never what is
// outside; if it shows a link, following it is the kernel's business.
func TestBaseDirectorySwappedForLink(t *testing.T) {
	tests := []struct {
		name string
		pre  func(sb *sandbox) // what the sandbox looked at before the swap
	}{
		{"nothing looked up", func(sb *sandbox) {}},
		{"directories looked up", func(sb *sandbox) {
			for _, p := range []string{"d", "d/e"} {
				if _, err := os.Stat(sb.path(p)); err != nil {
					sb.t.Fatal(err)
				}
			}
		}},
		{"directories listed", func(sb *sandbox) {
			for _, p := range []string{"d", "d/e"} {
				if _, err := os.ReadDir(sb.path(p)); err != nil {
					sb.t.Fatal(err)
				}
			}
		}},
		{"file read", func(sb *sandbox) { readFile(sb.t, sb.path("d/e/f")) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			outside := filepath.Join(dir, "outside")
			writeFile(t, filepath.Join(outside, "e", "f"), "SECRET")
			writeFile(t, filepath.Join(outside, "e", "only-outside"), "SECRET")
			sb := newSandbox(t, func(base string) {
				writeFile(t, filepath.Join(base, "d", "e", "f"), "base")
			})
			tt.pre(sb)
			mustNil(t, "move d away", os.Rename(filepath.Join(sb.base, "d"), filepath.Join(dir, "d.orig")))
			mustNil(t, "swap d for a link", os.Symlink(outside, filepath.Join(sb.base, "d")))

			var st unix.Stat_t
			if err := unix.Lstat(sb.path("d"), &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				if got, err := os.Readlink(sb.path("d")); err != nil || got != outside {
					t.Fatalf("d shows as a link to %q (%v), want %q", got, err, outside)
				}
				return
			}
			if names, err := listNames(sb.path("d/e")); err == nil && contains(names, "only-outside") {
				t.Fatalf("d/e through the mount lists %v: the directory outside the base", names)
			}
			if b, err := os.ReadFile(sb.path("d/e/f")); err == nil && string(b) == "SECRET" {
				t.Fatalf("d/e/f through the mount reads the file outside the base")
			} else {
				t.Logf("d/e/f after the swap: %q, %v", b, err)
			}
			writeFile(t, sb.path("new"), "still works")
		})
	}
}

func listNames(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names, err
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// A sandbox whose base directory, or a directory above it, became a link
// after the sandbox was created is not opened: it would serve whatever
// the link points at.
func TestBaseSwappedForLinkIsRefused(t *testing.T) {
	tests := []struct {
		name string
		swap string // relative to the test's directory: what becomes a link
	}{
		{"base", "p/base"},
		{"parent of base", "p"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "p", "base")
			writeFile(t, filepath.Join(base, "f"), "base")
			// What the link leads to looks like a base, with its own f.
			writeFile(t, filepath.Join(dir, "decoy", "base", "f"), "SECRET")
			writeFile(t, filepath.Join(dir, "decoy", "f"), "SECRET")
			st, err := layers.Open(filepath.Join(dir, "store"))
			mustNil(t, "open store", err)
			defer st.Close()
			_, err = st.CreateSandbox("s", base, 0)
			mustNil(t, "create sandbox", err)

			swapped := filepath.Join(dir, tt.swap)
			mustNil(t, "move away", os.Rename(swapped, swapped+".orig"))
			target := filepath.Join(dir, "decoy")
			if tt.swap == "p/base" {
				target = filepath.Join(dir, "decoy", "base")
			}
			mustNil(t, "link", os.Symlink(target, swapped))
			v, err := st.OpenView("s", true)
			if err == nil {
				defer v.Close()
				a, lerr := v.Lookup(layers.RootIno, "f")
				b := make([]byte, 16)
				n, _ := v.ReadAt(a.Ino, b, 0)
				t.Fatalf("opened the sandbox through a link in its base's path; f: %q, %v", b[:n], lerr)
			}
			if !errors.Is(err, unix.ELOOP) {
				t.Fatalf("open the sandbox: got %v, want %v", err, unix.ELOOP)
			}
		})
	}
}

// Names the kernel passes as they are — newlines, invalid UTF-8, 255
// bytes — go through create, readdir, rename, checkpoint, rollback,
// export and remount byte for byte; longer ones fail with ENAMETOOLONG.
func TestUnusualNames(t *testing.T) {
	names := []string{
		"new\nline",
		"\xff\xfe",
		"caf\xe9",
		"\x01\x7f",
		" lead and trail ",
		"-dash",
		"back\\slash",
		"*?[glob]",
		"\u00e9t\u00e9",
		strings.Repeat("n", 255),
		strings.Repeat("\xe9", 255),
	}
	sb := newSandbox(t, func(base string) {
		for i, n := range names {
			writeFile(t, filepath.Join(base, "fromBase", n), "base "+itoa(int64(i)))
		}
	})
	mgr := checkpoint.New(sb.store, sb)
	empty, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)

	want := map[string]string{} // path in the sandbox -> content
	for i, n := range names {
		want["fromBase/"+n] = "base " + itoa(int64(i))
		writeFile(t, sb.path(n), "made "+itoa(int64(i)))
		want[n] = "made " + itoa(int64(i))
		mustNil(t, "mkdir", os.Mkdir(sb.path("d-"+n[:min(len(n), 253)]), 0o755))
	}
	// Rename into unusual names and out of them, base files included.
	mustNil(t, "mkdir renamed", os.Mkdir(sb.path("renamed"), 0o755))
	for i, n := range names {
		to := filepath.Join("renamed", names[(i+1)%len(names)])
		mustNil(t, "rename", os.Rename(sb.path("fromBase/"+n), sb.path(to)))
		want[to] = want["fromBase/"+n]
		delete(want, "fromBase/"+n)
	}
	check := func(when string) {
		t.Helper()
		for p, content := range want {
			if got, err := os.ReadFile(sb.path(p)); err != nil || string(got) != content {
				t.Fatalf("%s: %q: got %q, %v; want %q", when, p, got, err, content)
			}
		}
		for _, d := range []string{".", "renamed"} {
			got, err := listNames(sb.path(d))
			mustNil(t, "readdir", err)
			for p := range want {
				if filepath.Dir(p) == d && !contains(got, filepath.Base(p)) {
					t.Fatalf("%s: readdir %s: got %q, want %q among them", when, d, got, filepath.Base(p))
				}
			}
		}
	}
	check("live")

	full, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	res, err := mgr.Rollback(sb.name, empty.ID)
	mustNil(t, "rollback to the empty checkpoint", err)
	if _, err := os.Lstat(sb.path(names[0])); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%q after the rollback: %v, want it gone", names[0], err)
	}
	// The archive holds the state with every name; exported, it is the same.
	exp := filepath.Join(t.TempDir(), "export")
	_, err = mgr.Export(res.Archive, exp)
	mustNil(t, "export", err)
	for p, content := range want {
		if got, err := os.ReadFile(filepath.Join(exp, p)); err != nil || string(got) != content {
			t.Fatalf("export: %q: got %q, %v; want %q", p, got, err, content)
		}
	}
	_, err = mgr.Rollback(sb.name, full.ID)
	mustNil(t, "rollback to the full checkpoint", err)
	check("after rollback")
	sb.remount()
	check("after remount")

	// Too long: 256 bytes, for every call that makes a name.
	long := strings.Repeat("x", 256)
	tooLong := []struct {
		name string
		op   func() error
	}{
		{"create", func() error { return os.WriteFile(sb.path(long), nil, 0o644) }},
		{"mkdir", func() error { return os.Mkdir(sb.path(long), 0o755) }},
		{"symlink", func() error { return os.Symlink("t", sb.path(long)) }},
		{"link", func() error { return os.Link(sb.path(names[0]), sb.path(long)) }},
		{"rename", func() error { return os.Rename(sb.path(names[0]), sb.path(long)) }},
		{"mknod", func() error { return unix.Mkfifo(sb.path(long), 0o644) }},
		{"lookup", func() error { _, err := os.Lstat(sb.path(long)); return err }},
	}
	for _, tt := range tooLong {
		wantErrno(t, tt.name+" of a 256-byte name", tt.op(), syscall.ENAMETOOLONG)
	}
	var sfs unix.Statfs_t
	mustNil(t, "statfs", unix.Statfs(sb.mnt, &sfs))
	if sfs.Namelen != 255 {
		t.Fatalf("statfs: name length %d, want 255", sfs.Namelen)
	}
}

// The kernel never passes ".", ".." or a name with "/" or NUL; the view
// refuses them anyway, for callers that are not the kernel.
func TestViewRefusesBadNames(t *testing.T) {
	sb := newSandbox(t, nil)
	v := sb.m.View()
	tests := []struct {
		name string
		want error
	}{
		{"", layers.ErrInvalid},
		{".", layers.ErrInvalid},
		{"..", layers.ErrInvalid},
		{"a/b", layers.ErrInvalid},
		{"/", layers.ErrInvalid},
		{"../etc", layers.ErrInvalid},
		{"a\x00b", layers.ErrInvalid},
		{strings.Repeat("x", 256), layers.ErrNameTooLong},
	}
	for _, tt := range tests {
		if _, err := v.Mkdir(layers.RootIno, tt.name, 0o755, layers.Caller{}); !errors.Is(err, tt.want) {
			t.Errorf("mkdir %q: got %v, want %v", tt.name, err, tt.want)
		}
		if _, err := v.Symlink(layers.RootIno, tt.name, "t", layers.Caller{}); !errors.Is(err, tt.want) {
			t.Errorf("symlink %q: got %v, want %v", tt.name, err, tt.want)
		}
	}
	if ents, err := os.ReadDir(sb.mnt); err != nil || len(ents) != 0 {
		t.Fatalf("root after refused names: %v, %v; want it empty", ents, err)
	}
}

// A store and a mountpoint whose paths are not valid UTF-8 work like any
// other. A base whose path is not valid UTF-8 is refused: the sandbox
// record is JSON, which would store another path.
func TestInvalidUTF8Paths(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "base-\xff")
	writeFile(t, filepath.Join(bad, "f"), "base")
	// The directory a lossy encoding of that name would lead to.
	writeFile(t, filepath.Join(dir, "base-\ufffd", "f"), "SECRET")
	base := filepath.Join(dir, "base")
	writeFile(t, filepath.Join(base, "f"), "base")
	storeDir := filepath.Join(dir, "store-\xfe")
	st, err := layers.Open(storeDir)
	mustNil(t, "open store", err)
	defer st.Close()
	if _, err := st.CreateSandbox("bad", bad, 0); !errors.Is(err, layers.ErrInvalid) {
		t.Fatalf("create a sandbox over %q: got %v, want %v", bad, err, layers.ErrInvalid)
	}
	if _, err := st.Sandbox("bad"); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("the refused sandbox: got %v, want %v", err, layers.ErrNotFound)
	}
	_, err = st.CreateSandbox("s", base, 0)
	mustNil(t, "create sandbox", err)
	st.Close()
	st, err = layers.Open(storeDir)
	mustNil(t, "reopen store", err)
	defer st.Close()
	mnt := filepath.Join(dir, "mnt-\xfd")
	mustNil(t, "mkdir", os.Mkdir(mnt, 0o755))
	v, err := st.OpenView("s", false)
	mustNil(t, "open view", err)
	m, err := New(mnt, v, Options{})
	if err != nil {
		v.Close()
		t.Fatal(err)
	}
	defer func() {
		if err := m.Unmount(); err != nil {
			t.Error(err)
		}
		v.Close()
	}()
	if got := readFile(t, filepath.Join(mnt, "f")); got != "base" {
		t.Fatalf("f through the mount: got %q, want %q", got, "base")
	}
	writeFile(t, filepath.Join(mnt, "g"), "written")
	if got := readFile(t, filepath.Join(mnt, "g")); got != "written" {
		t.Fatalf("g through the mount: got %q", got)
	}
}

// Everything in the store is its owner's alone: every directory is 0700,
// the files Strata makes are 0600, and another user can neither list nor
// read anything in it. (Badger makes its files in meta/ with mode 0666
// less the umask; the directory keeps them private.)
func TestStoreOwnerOnly(t *testing.T) {
	dir := openDir(t)
	sb := newSandboxOn(t, filepath.Join(dir, "store"), func(base string) { writeFile(t, filepath.Join(base, "f"), "base") })
	mgr := checkpoint.New(sb.store, sb)
	writeBytes(t, sb.path("big"), randBytes(1, 1<<20))
	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	writeFile(t, sb.path("f"), "changed")
	_, err = mgr.Rollback(sb.name, cp.ID)
	mustNil(t, "rollback", err)
	mustNil(t, "sync", sb.m.View().Sync())

	var paths []string
	err = filepath.WalkDir(sb.store.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		paths = append(paths, p)
		rel, _ := filepath.Rel(sb.store.Dir(), p)
		switch {
		case fi.IsDir() && fi.Mode().Perm() != 0o700:
			t.Errorf("directory %s has mode %v, want 0700", rel, fi.Mode())
		case !fi.IsDir() && !strings.HasPrefix(rel, "meta/") && fi.Mode().Perm()&0o077 != 0:
			t.Errorf("%s has mode %v: group or others may use it", rel, fi.Mode())
		}
		return nil
	})
	mustNil(t, "walk store", err)
	// One script for all paths: each line it prints is a path nobody reached.
	var script strings.Builder
	for _, p := range paths {
		script.WriteString("if cat '" + p + "' >/dev/null 2>&1 || ls '" + p + "' >/dev/null 2>&1; then echo \"$(printf %s '" + p + "')\"; fi\n")
	}
	out, code := asNobody(t, script.String())
	if code != 0 || out != "" {
		t.Fatalf("another user reached paths in the store (exit %d):\n%s", code, out)
	}
	t.Logf("%d paths in the store; another user reached none", len(paths))
}

// Another user reaches a mount only when it was made with AllowOther, and
// then the kernel checks permissions (default_permissions) as for any file.
func TestOtherUsers(t *testing.T) {
	tests := []struct {
		name       string
		allowOther bool
		script     string
		wantOut    string // in the output
		wantFail   bool
	}{
		{"list without allow_other", false, "ls $MNT", "Permission denied", true},
		{"stat without allow_other", false, "stat $MNT/public", "Permission denied", true},
		{"read without allow_other", false, "cat $MNT/public", "Permission denied", true},
		{"list", true, "ls $MNT", "public", false},
		{"read a 0644 file", true, "cat $MNT/public", "for everyone", false},
		{"read a 0600 file", true, "cat $MNT/private", "Permission denied", true},
		{"stat a 0600 file", true, "stat -c %a $MNT/private", "600", false},
		{"write a 0644 file", true, "echo x >> $MNT/public", "Permission denied", true},
		{"create in a 0755 directory", true, "touch $MNT/new", "Permission denied", true},
		{"list a 0700 directory", true, "ls $MNT/closed", "Permission denied", true},
		{"create in a 0777 directory", true, "echo mine > $MNT/open/mine && cat $MNT/open/mine", "mine", false},
		{"chmod another's file", true, "chmod 666 $MNT/public", "Operation not permitted", true},
		{"remove from a sticky directory", true, "rm -f $MNT/sticky/rootfile", "Operation not permitted", true},
	}
	for _, allowOther := range []bool{false, true} {
		dir := openDir(t)
		sb := &sandbox{t: t, base: filepath.Join(dir, "base"), mnt: filepath.Join(dir, "mnt"), name: "test"}
		st, err := layers.Open(filepath.Join(dir, "store"))
		mustNil(t, "open store", err)
		sb.store = st
		t.Cleanup(func() {
			if sb.m != nil {
				sb.unmount()
			}
			st.Close()
		})
		for _, d := range []string{sb.base, sb.mnt} {
			mustNil(t, "mkdir", os.Mkdir(d, 0o755))
		}
		writeFile(t, filepath.Join(sb.base, "public"), "for everyone")
		writeFile(t, filepath.Join(sb.base, "private"), "root only")
		mustNil(t, "chmod", os.Chmod(filepath.Join(sb.base, "private"), 0o600))
		for d, mode := range map[string]os.FileMode{"closed": 0o700, "open": 0o777, "sticky": 0o777 | os.ModeSticky} {
			mustNil(t, "mkdir", os.Mkdir(filepath.Join(sb.base, d), 0o700))
			mustNil(t, "chmod", os.Chmod(filepath.Join(sb.base, d), mode))
		}
		writeFile(t, filepath.Join(sb.base, "sticky", "rootfile"), "root's")
		if out, code := asNobody(t, "ls "+sb.mnt); code != 0 {
			t.Fatalf("nobody cannot list the empty mountpoint before the mount (%d: %s): the test's directories are not open to it", code, out)
		}
		_, err = st.CreateSandbox(sb.name, sb.base, 0)
		mustNil(t, "create sandbox", err)
		v, err := st.OpenView(sb.name, false)
		mustNil(t, "open view", err)
		sb.m, err = New(sb.mnt, v, Options{AllowOther: allowOther})
		if err != nil {
			v.Close()
			t.Fatal(err)
		}
		for _, tt := range tests {
			if tt.allowOther != allowOther {
				continue
			}
			t.Run(tt.name, func(t *testing.T) {
				out, code := asNobody(t, "MNT="+sb.mnt+"; "+tt.script)
				if (code != 0) != tt.wantFail || !strings.Contains(out, tt.wantOut) {
					t.Fatalf("as nobody: %s: exit %d, output %q; want failure %v and %q", tt.script, code, out, tt.wantFail, tt.wantOut)
				}
			})
		}
		if got := readFile(t, sb.path("public")); got != "for everyone" {
			t.Fatalf("public after the other user's attempts: %q", got)
		}
		if !allowOther {
			continue
		}
		if st := lstat(t, sb.path("open/mine")); st.Uid != nobody {
			t.Fatalf("open/mine owned by %d, want %d", st.Uid, nobody)
		}
		if !bytes.Equal(readBytes(t, sb.path("sticky/rootfile")), []byte("root's")) {
			t.Fatal("sticky/rootfile changed")
		}
	}
}
