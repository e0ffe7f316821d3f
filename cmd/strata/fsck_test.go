package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
	"golang.org/x/sys/unix"
)

// TestFsck checks a healthy store, then flips one bit of a block a
// checkpoint's layer holds: fsck must name the file it belongs to and exit
// 1, change nothing, and a read of that file through a mount must fail with
// EIO. It runs against a mounted sandbox (fsck runs in the server, which
// holds the store) and an unmounted one (the command opens the store).
func TestFsck(t *testing.T) {
	for _, served := range []bool{true, false} {
		name := "unserved"
		if served {
			name = "served"
		}
		t.Run(name, func(t *testing.T) { testFsck(t, served) })
	}
}

func testFsck(t *testing.T, served bool) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	data := make([]byte, 200<<10) // several blocks, all in one layer
	rand.New(rand.NewSource(1)).Read(data)
	if err := os.WriteFile(filepath.Join(e.mnt, "big.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cp := e.checkpoint("demo", "--label", "c1")
	// Mount afresh (or not at all), so that no page of big.bin is left in
	// the kernel's cache: reads must reach the store.
	e.ok("unmount", "demo")
	if served {
		e.ok("mount", "demo", e.mnt)
	}
	checkServed := func(t *testing.T) {
		t.Helper()
		var st control.Status
		e.okJSON(&st, "status")
		if st.Server != served {
			t.Fatalf("status: server %v, want %v", st.Server, served)
		}
	}
	checkServed(t)

	// Healthy.
	r := e.run("fsck")
	if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "no problems found") {
		t.Fatalf("fsck of a healthy store: exit %d, stdout %q, stderr %q; want 0, 'no problems found', nothing on stderr", r.code, r.stdout, r.stderr)
	}
	var rep control.FsckResult
	e.okJSON(&rep, "fsck")
	if !rep.OK || rep.Sandboxes != 1 || rep.Layers != 2 || rep.Blocks != (len(data)+layers.DefaultBlockSize-1)/layers.DefaultBlockSize || len(rep.Problems) != 0 {
		t.Fatalf("fsck --json of a healthy store: got %+v, want ok, 1 sandbox, 2 layers, %d blocks", rep, (len(data)+layers.DefaultBlockSize-1)/layers.DefaultBlockSize)
	}

	// One bit flipped in the data file of the checkpoint's layer.
	dataFile := filepath.Join(e.store, "data", cp.Layer)
	flipBit(t, dataFile, 5000)
	damaged := readFileBytes(t, dataFile)
	state := func() string {
		return e.ok("--json", "checkpoint", "list", "demo") + e.ok("--json", "layers", "list", "demo", "--archived")
	}
	before := state()

	r = e.run("fsck")
	if r.code != 1 {
		t.Fatalf("fsck of a damaged store: exit %d, want 1; stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n"); lines[0] != "strata: fsck: 1 problems found" || len(lines) > 2 {
		t.Errorf("stderr: got %q, want 'strata: fsck: 1 problems found' and at most a hint", r.stderr)
	}
	if !strings.Contains(r.stdout, "checksum  sandbox demo, path big.bin, layer "+cp.Layer) {
		t.Errorf("stdout: got %q, want the checksum problem of big.bin in layer %s", r.stdout, cp.Layer)
	}
	r = e.run("--json", "fsck")
	rep = control.FsckResult{}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil || r.code != 1 {
		t.Fatalf("fsck --json of a damaged store: exit %d, %v; output %q", r.code, err, r.stdout)
	}
	if rep.OK || len(rep.Problems) != 1 {
		t.Fatalf("fsck --json: got %+v, want one problem", rep)
	}
	if p := rep.Problems[0]; p.Kind != "checksum" || p.Sandbox != "demo" || p.Path != "big.bin" || p.Layer != cp.Layer {
		t.Errorf("problem: got %+v, want a checksum problem of demo's big.bin in layer %s", p, cp.Layer)
	}
	// Nothing was repaired or dropped.
	if got := readFileBytes(t, dataFile); !bytes.Equal(got, damaged) {
		t.Errorf("fsck changed the data file %s", dataFile)
	}
	if got := state(); got != before {
		t.Errorf("fsck changed the store:\ngot  %s\nwant %s", got, before)
	}
	checkServed(t)

	// A read through the mount fails instead of returning wrong bytes.
	if !served {
		e.ok("mount", "demo", e.mnt)
	}
	_, err := os.ReadFile(filepath.Join(e.mnt, "big.bin"))
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("read big.bin through the mount: got %v, want EIO", err)
	}
	if got := readFile(t, filepath.Join(e.mnt, "a.txt")); got != "hello" {
		t.Errorf("a.txt through the mount: got %q, want %q", got, "hello")
	}
	e.ok("unmount", "demo")
}

// flipBit flips the lowest bit of the byte at off in file path.
func flipBit(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatalf("read byte %d of %s: %v", off, path, err)
	}
	b[0] ^= 1
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readFileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestProgress: on a terminal the long commands of the CLI contract
// (fsck, gc, archive export, plan apply) show a progress line on stderr
// and erase it before their summary; in a pipe (every other test) stderr
// stays empty.
func TestProgress(t *testing.T) {
	cases := []struct {
		name     string
		setup    func(e *env) []string // the command to run
		progress string
		summary  string
	}{
		{"fsck", func(e *env) []string { return []string{"fsck"} }, "fsck: checking ", "checked 1 sandboxes"},
		{"gc", func(e *env) []string { return []string{"gc"} }, "gc: collecting ", "removed 0 layers"},
		{"archive export", func(e *env) []string {
			cp := e.checkpoint("demo")
			e.ok("checkpoint", "create", "demo")
			var r checkpoint.RollbackResult
			e.okJSON(&r, "rollback", "demo", "--to-checkpoint", cp.ID)
			return []string{"archive", "export", r.Archive, filepath.Join(e.dir, "export")}
		}, "export: writing archive ", "exported "},
		{"plan apply", func(e *env) []string {
			e.ok("plan", "create", "p", "--sandbox", "demo")
			e.ok("mount", "demo", e.mnt)
			writeFile(e.t, filepath.Join(e.mnt, "new.txt"), "new")
			return []string{"plan", "apply", "p"}
		}, "plan apply: writing p onto its base", "applied plan onto "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.ok("sandbox", "create", "demo", "--base", e.base)
			args := tc.setup(e)
			ptm, pts := openPTY(t)
			cmd := exec.Command(strataBin, args...)
			cmd.Env = append(os.Environ(), "STRATA_STORE="+e.store)
			cmd.Stdout, cmd.Stderr = pts, pts
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			pts.Close() // the child has its own copy; EOF comes when it exits
			out := make(chan string, 1)
			go func() {
				b, _ := io.ReadAll(ptm) // ends with EIO once the child is gone
				out <- string(b)
			}()
			werr := cmd.Wait()
			var got string
			select {
			case got = <-out:
			case <-time.After(10 * time.Second):
				t.Fatal("the terminal's output did not end")
			}
			if werr != nil {
				t.Fatalf("%v on a terminal: %v\n%s", args, werr, got)
			}
			i := strings.Index(got, tc.progress)
			j := strings.Index(got, "\r\033[K"+tc.summary)
			if i < 0 || j < i {
				t.Fatalf("terminal output: got %q, want the progress line %q, erased before the summary", got, tc.progress)
			}
		})
	}
}

// openPTY opens a pseudo-terminal pair.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open /dev/ptmx: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open pty %d: %v", n, err)
	}
	t.Cleanup(func() { pts.Close() })
	return ptm, pts
}

// TestUnmountReleasesTheStore: when unmount returns, a server that exited
// with its last mount has let go of the store, so a command that opens the
// store at once never finds it locked.
func TestUnmountReleasesTheStore(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "keep", "--base", e.base)
	const rounds = 10
	for i := range rounds {
		name := fmt.Sprintf("s%d", i)
		e.ok("sandbox", "create", name, "--base", e.base)
		var info control.MountInfo
		e.okJSON(&info, "mount", name, e.mnt)
		writeFile(t, filepath.Join(e.mnt, "f.txt"), name)
		var res control.UnmountResult
		e.okJSON(&res, "unmount", name)
		if !res.ServerExits || res.Sandbox != name {
			t.Fatalf("round %d: unmount: got %+v, want %s unmounted and its server exiting", i, res, name)
		}
		if !processExited(info.PID) {
			t.Fatalf("round %d: the server %d still runs after unmount returned", i, info.PID)
		}
		// No retry: the store must be free now.
		st, err := layers.Open(e.store)
		if err != nil {
			t.Fatalf("round %d: open the store right after unmount: %v", i, err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		if r := e.run("fsck"); r.code != 0 {
			t.Fatalf("round %d: fsck right after unmount: exit %d, stderr %q", i, r.code, r.stderr)
		}
		if r := e.run("sandbox", "rm", name); r.code != 0 {
			t.Fatalf("round %d: sandbox rm right after unmount: exit %d, stderr %q", i, r.code, r.stderr)
		}
	}

	// A server that still serves another mount stays, and unmount returns
	// without waiting for it.
	e.ok("sandbox", "create", "other", "--base", e.base)
	var info control.MountInfo
	e.okJSON(&info, "mount", "keep", e.mnt)
	e.ok("mount", "other", e.mnt2)
	var res control.UnmountResult
	e.okJSON(&res, "unmount", "other")
	if res.ServerExits {
		t.Fatalf("unmount of one of two mounts: got %+v, want the server to stay", res)
	}
	var st control.Status
	e.okJSON(&st, "status")
	if !st.Server || st.PID != info.PID || len(st.Mounts) != 1 || st.Mounts[0].Sandbox != "keep" {
		t.Fatalf("status: got %+v, want server %d serving keep", st, info.PID)
	}
	e.ok("unmount", "keep")
	if !processExited(info.PID) {
		t.Fatalf("the server %d still runs after its last unmount returned", info.PID)
	}
}
