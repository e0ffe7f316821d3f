package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

// strataBin is the strata binary under test, built once by TestMain.
var strataBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	strataBin = filepath.Join(dir, "strata")
	if out, err := exec.Command("go", "build", "-o", strataBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build strata: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is one test's store, a base directory with a few files, and two
// empty mountpoints.
type env struct {
	t     *testing.T
	dir   string
	store string
	base  string
	mnt   string
	mnt2  string
	extra []string // environment of every command, on top of the test's
	cwd   string   // working directory of every command; "" for the test's
}

func newEnv(t *testing.T) *env {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("these tests mount sandboxes and need /dev/fuse: %v", err)
	}
	dir := t.TempDir()
	e := &env{t: t, dir: dir, store: filepath.Join(dir, "store"), base: filepath.Join(dir, "base"),
		mnt: filepath.Join(dir, "mnt"), mnt2: filepath.Join(dir, "mnt2")}
	for _, d := range []string{e.base, e.mnt, e.mnt2, filepath.Join(e.base, "dir")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(e.base, "a.txt"), "hello")
	writeFile(t, filepath.Join(e.base, "dir", "b.txt"), "world")
	t.Cleanup(e.teardown)
	return e
}

// teardown stops the store's server, which unmounts everything, and
// detaches whatever mount under the test's directory is left.
func (e *env) teardown() {
	if c, err := control.Dial(e.store); err == nil {
		if err := c.Call(control.OpShutdown, nil, nil); err != nil {
			e.t.Errorf("shutdown server: %v", err)
		}
		c.Close()
	}
	// A server that exits on its own (idle) may still be closing the
	// store; removing the directory under it would wedge its last flush.
	waitFor(e.t, 15*time.Second, "the server to release the store", func() bool {
		st, err := layers.Open(e.store)
		if err != nil {
			return !errors.Is(err, layers.ErrLocked)
		}
		st.Close()
		return true
	})
	ms, err := control.Mounts()
	if err != nil {
		e.t.Error(err)
		return
	}
	for _, m := range ms {
		if strings.HasPrefix(m.Mountpoint, e.dir+"/") {
			e.t.Errorf("mount left behind at %s; detaching it", m.Mountpoint)
			syscall.Unmount(m.Mountpoint, syscall.MNT_DETACH)
		}
	}
}

// result is what one strata command did.
type result struct {
	stdout, stderr string
	code           int
}

// run runs strata with args; the store comes from STRATA_STORE.
func (e *env) run(args ...string) result {
	e.t.Helper()
	cmd := exec.Command(strataBin, args...)
	cmd.Env = append(append(os.Environ(), "STRATA_STORE="+e.store), e.extra...)
	cmd.Dir = e.cwd
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("run strata %v: %v", args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// ok runs strata and fails the test unless it succeeds.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	r := e.run(args...)
	if r.code != 0 {
		e.t.Fatalf("strata %s: exit %d, want 0; stderr:\n%s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// okJSON runs strata --json and decodes its output into v.
func (e *env) okJSON(v any, args ...string) {
	e.t.Helper()
	out := e.ok(append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		e.t.Fatalf("strata --json %s: %v; output:\n%s", strings.Join(args, " "), err, out)
	}
}

func (e *env) isMounted(dir string) bool {
	e.t.Helper()
	ok, err := control.IsMountpoint(dir)
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}

// treeDigest describes every file under dir: path, mode, size, mtime and
// content hash, so that any change to the tree changes it.
func treeDigest(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(&b, "%s %v %d %d", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			b.WriteString(" " + hex.EncodeToString(sum[:]))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
