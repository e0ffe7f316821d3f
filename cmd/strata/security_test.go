package main

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

// nobody is the unprivileged user the permission tests act as.
const nobody = 65534

// newOpenEnv is newEnv in directories every user may traverse, so that
// what an unprivileged user is refused is refused by the store or the
// mount, not by the test's temporary directory.
func newOpenEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	for _, d := range []string{filepath.Dir(e.dir), e.dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// asNobody runs a shell script as user and group 65534, with env added to
// its environment, and returns its output and exit code.
func asNobody(t *testing.T, script string, env ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = "/"
	cmd.Env = append([]string{"PATH=/usr/bin:/bin"}, env...)
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

// publicBinary copies the strata binary where every user may run it.
func publicBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin", "strata")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(strataBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// hostTree describes every path under dir without following a symlink:
// type and mode, owner, size, link target and content.
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
		b.WriteString(p + " " + strconv.FormatUint(uint64(st.Mode), 8) + " " + strconv.Itoa(int(st.Uid)) + " " + strconv.FormatInt(st.Size, 10))
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

// wantLink fails unless path is a symlink to target.
func wantLink(t *testing.T, path, target string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("%s: got %v, %v; want a symlink", path, fi, err)
	}
	if got, err := os.Readlink(path); err != nil || got != target {
		t.Fatalf("readlink %s: got %q, %v; want %q", path, got, err, target)
	}
}

// The store and its control socket are the owner's alone: another user
// can neither reach the server nor open the store.
func TestStoreAndSocketOwnerOnly(t *testing.T) {
	e := newOpenEnv(t)
	e.ok("sandbox", "create", "s", "--base", e.base)
	e.ok("mount", "s", e.mnt)
	writeFile(t, filepath.Join(e.mnt, "new.txt"), "new")
	e.ok("checkpoint", "create", "s", "--label", "one")

	sock := control.SocketPath(e.store)
	fi, err := os.Lstat(sock)
	if err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("control socket %s: %v, %v; want a socket with mode 0600", sock, fi.Mode(), err)
	}
	n := 0
	err = filepath.WalkDir(e.store, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		n++
		rel, _ := filepath.Rel(e.store, p)
		switch {
		case fi.IsDir() && fi.Mode().Perm() != 0o700:
			t.Errorf("store directory %s has mode %v, want 0700", rel, fi.Mode())
		// Badger makes its files with mode 0666 less the umask; meta/ is 0700.
		case !fi.IsDir() && !strings.HasPrefix(rel, "meta/") && fi.Mode().Perm()&0o077 != 0:
			t.Errorf("store file %s has mode %v: group or others may use it", rel, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	bin := publicBinary(t, e.dir)
	tries := []struct {
		name string
		args string
	}{
		{"status", "status"},
		{"checkpoint create", "checkpoint create s --label theirs"},
		{"rollback", "rollback s --to-checkpoint one"},
		{"unmount", "unmount s"},
	}
	for _, tt := range tries {
		out, code := asNobody(t, bin+" "+tt.args, "STRATA_STORE="+e.store, "HOME=/nonexistent")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 1 || !strings.HasPrefix(lines[0], "strata: ") || !strings.Contains(out, "permission denied") {
			t.Errorf("strata %s as another user: exit %d, output %q; want exit 1 and a line saying permission denied", tt.args, code, out)
		}
	}
	var cps []checkpoint.Checkpoint
	e.okJSON(&cps, "checkpoint", "list", "s")
	if len(cps) != 1 || !e.isMounted(e.mnt) || readFile(t, filepath.Join(e.mnt, "new.txt")) != "new" {
		t.Fatalf("after another user's attempts: %d checkpoints, mounted %v; want 1 and the sandbox served as before", len(cps), e.isMounted(e.mnt))
	}
	t.Logf("%d paths in the store checked; %d commands of another user refused", n, len(tries))
	e.ok("unmount", "s")
}

// Another user reaches a mount only with --allow-other, and then the
// kernel checks each file's permissions.
func TestAllowOther(t *testing.T) {
	e := newOpenEnv(t)
	writeFile(t, filepath.Join(e.base, "private"), "root only")
	if err := os.Chmod(filepath.Join(e.base, "private"), 0o600); err != nil {
		t.Fatal(err)
	}
	e.ok("sandbox", "create", "s", "--base", e.base)
	tests := []struct {
		name     string
		flags    []string
		script   string
		want     string
		wantFail bool
	}{
		{"list, mounted without --allow-other", nil, "ls $MNT", "Permission denied", true},
		{"read, mounted without --allow-other", nil, "cat $MNT/a.txt", "Permission denied", true},
		{"list", []string{"--allow-other"}, "ls $MNT", "a.txt", false},
		{"read a 0644 file", []string{"--allow-other"}, "cat $MNT/a.txt", "hello", false},
		{"read a 0600 file", []string{"--allow-other"}, "cat $MNT/private", "Permission denied", true},
		{"write a 0644 file", []string{"--allow-other"}, "echo x >> $MNT/a.txt", "Permission denied", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e.ok(append([]string{"mount", "s", e.mnt}, tt.flags...)...)
			out, code := asNobody(t, tt.script, "MNT="+e.mnt)
			e.ok("unmount", "s")
			if (code != 0) != tt.wantFail || !strings.Contains(out, tt.want) {
				t.Fatalf("as another user: %s: exit %d, output %q; want failure %v and %q", tt.script, code, out, tt.wantFail, tt.want)
			}
		})
	}
	if got := readFile(t, filepath.Join(e.base, "a.txt")); got != "hello" {
		t.Fatalf("a.txt in the base: %q", got)
	}
}

// archive export writes symlinks as symlinks, whatever they point at, and
// never writes through one: a directory that became a link to the
// outside is exported as that link, with nothing written where it points.
func TestArchiveExportWritesLinksAsLinks(t *testing.T) {
	e := newEnv(t)
	outside := filepath.Join(e.dir, "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(outside, "secret"), "SECRET")
	e.ok("sandbox", "create", "s", "--base", e.base)
	e.ok("mount", "s", e.mnt)
	m := func(p string) string { return filepath.Join(e.mnt, p) }
	if err := os.MkdirAll(m("d/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, m("d/f"), "inside")
	writeFile(t, m("d/sub/g"), "inside too")
	e.ok("checkpoint", "create", "s", "--label", "dir")

	// The directory becomes links out of the sandbox.
	if err := os.RemoveAll(m("d")); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"d":        outside,
		"rel":      "../../outside/secret",
		"deep/up":  strings.Repeat("../", 30) + "etc/passwd",
		"deep/abs": filepath.Join(outside, "secret"),
	}
	for p, target := range links {
		if err := os.MkdirAll(filepath.Dir(m(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, m(p)); err != nil {
			t.Fatal(err)
		}
	}
	outsideBefore := hostTree(t, outside)

	// Rolling back archives the state with the links; restoring that
	// archive archives the state with the directory.
	var rb checkpoint.RollbackResult
	e.okJSON(&rb, "rollback", "s", "--to-checkpoint", "dir")
	var rs checkpoint.RollbackResult
	e.okJSON(&rs, "archive", "restore", rb.Archive)

	withLinks := filepath.Join(e.dir, "export-links")
	e.ok("archive", "export", rb.Archive, withLinks)
	for p, target := range links {
		wantLink(t, filepath.Join(withLinks, p), target)
	}
	withDir := filepath.Join(e.dir, "export-dir")
	e.ok("archive", "export", rs.Archive, withDir)
	if got := readFile(t, filepath.Join(withDir, "d", "sub", "g")); got != "inside too" {
		t.Fatalf("exported d/sub/g: %q", got)
	}
	if fi, err := os.Lstat(filepath.Join(withDir, "d")); err != nil || !fi.IsDir() {
		t.Fatalf("exported d: %v, %v; want a directory", fi, err)
	}

	// An export directory that holds anything, a link included, is refused.
	full := filepath.Join(e.dir, "export-full")
	if err := os.Mkdir(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(full, "d")); err != nil {
		t.Fatal(err)
	}
	if r := e.run("archive", "export", rs.Archive, full); r.code != 1 || !strings.Contains(r.stderr, "not empty") {
		t.Fatalf("export into a directory holding a link: exit %d, %q; want exit 1, not empty", r.code, r.stderr)
	}
	if got := hostTree(t, outside); got != outsideBefore {
		t.Fatalf("what the links point at changed:\n%s\nwant\n%s", got, outsideBefore)
	}
	e.ok("unmount", "s")
}

// plan apply writes symlinks as symlinks and never follows one in the
// base: not one the base had, not one that appeared there since.
func TestPlanApplyNeverFollowsLinks(t *testing.T) {
	tests := []struct {
		name    string
		base    func(e *env, outside string) // the base before the sandbox is made
		sandbox func(e *env, outside string) // changes through the mount
		host    func(e *env, outside string) // changes to the base before apply
		fails   bool                         // apply refuses (a conflict)
		check   func(t *testing.T, e *env, outside string)
	}{
		{
			name: "links made in the sandbox",
			sandbox: func(e *env, outside string) {
				mustSymlink(e.t, filepath.Join(outside, "secret"), filepath.Join(e.mnt, "abs"))
				mustSymlink(e.t, "../outside/secret", filepath.Join(e.mnt, "rel"))
				mustSymlink(e.t, outside, filepath.Join(e.mnt, "dir", "todir"))
			},
			check: func(t *testing.T, e *env, outside string) {
				wantLink(t, filepath.Join(e.base, "abs"), filepath.Join(outside, "secret"))
				wantLink(t, filepath.Join(e.base, "rel"), "../outside/secret")
				wantLink(t, filepath.Join(e.base, "dir", "todir"), outside)
			},
		},
		{
			name: "a link in the base replaced by a directory",
			base: func(e *env, outside string) { mustSymlink(e.t, outside, filepath.Join(e.base, "d")) },
			sandbox: func(e *env, outside string) {
				if err := os.Remove(filepath.Join(e.mnt, "d")); err != nil {
					e.t.Fatal(err)
				}
				if err := os.Mkdir(filepath.Join(e.mnt, "d"), 0o755); err != nil {
					e.t.Fatal(err)
				}
				writeFile(e.t, filepath.Join(e.mnt, "d", "secret"), "mine")
			},
			check: func(t *testing.T, e *env, outside string) {
				if got := readFile(t, filepath.Join(e.base, "d", "secret")); got != "mine" {
					t.Fatalf("d/secret in the base: %q", got)
				}
				if fi, err := os.Lstat(filepath.Join(e.base, "d")); err != nil || !fi.IsDir() {
					t.Fatalf("d in the base: %v, %v; want a directory", fi, err)
				}
			},
		},
		{
			name: "a link in the base to a file replaced by a file",
			base: func(e *env, outside string) {
				mustSymlink(e.t, filepath.Join(outside, "secret"), filepath.Join(e.base, "l"))
			},
			sandbox: func(e *env, outside string) {
				if err := os.Remove(filepath.Join(e.mnt, "l")); err != nil {
					e.t.Fatal(err)
				}
				writeFile(e.t, filepath.Join(e.mnt, "l"), "mine")
			},
			check: func(t *testing.T, e *env, outside string) {
				if fi, err := os.Lstat(filepath.Join(e.base, "l")); err != nil || !fi.Mode().IsRegular() {
					t.Fatalf("l in the base: %v, %v; want a regular file", fi, err)
				}
			},
		},
		{
			name:    "a directory of the base swapped for a link before apply",
			sandbox: func(e *env, outside string) { writeFile(e.t, filepath.Join(e.mnt, "dir", "secret"), "mine") },
			host: func(e *env, outside string) {
				if err := os.Rename(filepath.Join(e.base, "dir"), filepath.Join(e.dir, "dir.orig")); err != nil {
					e.t.Fatal(err)
				}
				mustSymlink(e.t, outside, filepath.Join(e.base, "dir"))
			},
			fails: true,
			check: func(t *testing.T, e *env, outside string) {
				wantLink(t, filepath.Join(e.base, "dir"), outside)
			},
		},
		{
			name: "a file of the base swapped for a link before apply",
			sandbox: func(e *env, outside string) {
				writeFile(e.t, filepath.Join(e.mnt, "dir", "b.txt"), "mine")
			},
			host: func(e *env, outside string) {
				if err := os.Remove(filepath.Join(e.base, "dir", "b.txt")); err != nil {
					e.t.Fatal(err)
				}
				mustSymlink(e.t, filepath.Join(outside, "secret"), filepath.Join(e.base, "dir", "b.txt"))
			},
			fails: true,
			check: func(t *testing.T, e *env, outside string) {
				wantLink(t, filepath.Join(e.base, "dir", "b.txt"), filepath.Join(outside, "secret"))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			outside := filepath.Join(e.dir, "outside")
			if err := os.MkdirAll(outside, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(outside, "secret"), "SECRET")
			if tt.base != nil {
				tt.base(e, outside)
			}
			outsideBefore := hostTree(t, outside)
			e.ok("sandbox", "create", "s", "--base", e.base)
			e.ok("mount", "s", e.mnt)
			e.ok("plan", "create", "p", "--sandbox", "s")
			tt.sandbox(e, outside)
			if tt.host != nil {
				tt.host(e, outside)
			}
			r := e.run("plan", "apply", "p")
			switch {
			case tt.fails && (r.code != 1 || !strings.Contains(r.stderr, "base changed")):
				t.Fatalf("plan apply: exit %d, stderr %q; want exit 1: the base changed", r.code, r.stderr)
			case !tt.fails && r.code != 0:
				t.Fatalf("plan apply: exit %d, stderr %q; want success", r.code, r.stderr)
			}
			if got := hostTree(t, outside); got != outsideBefore {
				t.Fatalf("plan apply changed what links point at:\n%s\nwant\n%s", got, outsideBefore)
			}
			tt.check(t, e, outside)
			if left, _ := filepath.Glob(filepath.Join(e.base, ".strata-apply*")); len(left) != 0 {
				t.Fatalf("plan apply left %v in the base", left)
			}
			e.ok("unmount", "s")
		})
	}
}

func mustSymlink(t *testing.T, target, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
}

// Names with newlines, invalid UTF-8 and 255 bytes go through checkpoint,
// rollback, archive export and plan apply byte for byte. Host paths that
// are not valid UTF-8 cannot travel in the control protocol's JSON: they
// are refused, never replaced by another path.
func TestUnusualNamesThroughCommands(t *testing.T) {
	e := newEnv(t)
	names := []string{"new\nline", "\xff\xfe", "caf\xe9", strings.Repeat("n", 255), strings.Repeat("\xe9", 255)}
	e.ok("sandbox", "create", "s", "--base", e.base)
	e.ok("mount", "s", e.mnt)
	e.ok("plan", "create", "p", "--sandbox", "s")
	e.ok("checkpoint", "create", "s", "--label", "empty")
	for i, n := range names {
		writeFile(t, filepath.Join(e.mnt, n), "content "+strconv.Itoa(i))
		if err := os.Mkdir(filepath.Join(e.mnt, "d"+strconv.Itoa(i)+"-"+n[:min(len(n), 250)]), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	check := func(dir, what string) {
		t.Helper()
		for i, n := range names {
			if got, err := os.ReadFile(filepath.Join(dir, n)); err != nil || string(got) != "content "+strconv.Itoa(i) {
				t.Fatalf("%s: %q: got %q, %v", what, n, got, err)
			}
			if fi, err := os.Stat(filepath.Join(dir, "d"+strconv.Itoa(i)+"-"+n[:min(len(n), 250)])); err != nil || !fi.IsDir() {
				t.Fatalf("%s: directory %d: %v", what, i, err)
			}
		}
	}
	e.ok("checkpoint", "create", "s", "--label", "names")
	var rb checkpoint.RollbackResult
	e.okJSON(&rb, "rollback", "s", "--to-checkpoint", "empty")
	if _, err := os.Lstat(filepath.Join(e.mnt, names[0])); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%q after the rollback: %v, want it gone", names[0], err)
	}
	exp := filepath.Join(e.dir, "export")
	e.ok("archive", "export", rb.Archive, exp)
	check(exp, "export")
	e.ok("rollback", "s", "--to-checkpoint", "names")
	check(e.mnt, "after rolling forward")
	e.ok("plan", "apply", "p")
	check(e.base, "the base after plan apply")

	// Host paths that are not valid UTF-8, next to the directory a lossy
	// encoding would name instead.
	for _, suffix := range []string{"\xff", "\ufffd"} {
		if err := os.Mkdir(filepath.Join(e.dir, "bad-"+suffix), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bad, decoy := filepath.Join(e.dir, "bad-\xff"), filepath.Join(e.dir, "bad-\ufffd")
	e.ok("sandbox", "create", "t", "--base", e.base)
	refused := []struct {
		name string
		args []string
	}{
		{"mount", []string{"mount", "t", bad}},
		{"archive export", []string{"archive", "export", rb.Archive, filepath.Join(bad, "x")}},
		{"sandbox create", []string{"sandbox", "create", "u", "--base", bad}},
	}
	for _, tt := range refused {
		r := e.run(tt.args...)
		if r.code == 0 || !strings.HasPrefix(r.stderr, "strata: ") || !strings.Contains(r.stderr, "UTF-8") {
			t.Errorf("%s with a path that is not UTF-8: exit %d, stderr %q; want a failure that says so", tt.name, r.code, r.stderr)
		}
	}
	if e.isMounted(decoy) || e.isMounted(bad) {
		t.Fatalf("a path that is not UTF-8 was mounted (at it: %v, at %q: %v)", e.isMounted(bad), decoy, e.isMounted(decoy))
	}
	if ents, err := os.ReadDir(decoy); err != nil || len(ents) != 0 {
		t.Fatalf("%q: %v, %v; want it empty", decoy, ents, err)
	}
	e.ok("unmount", "s")
}
