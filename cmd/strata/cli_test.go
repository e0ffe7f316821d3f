package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

func TestSandboxCreateListShowRemove(t *testing.T) {
	e := newEnv(t)
	var created control.Sandbox
	e.okJSON(&created, "sandbox", "create", "demo", "--base", e.base, "--block-size", "128K")
	if created.Name != "demo" || created.Base != e.base || created.BlockSize != 128<<10 || created.Mounted {
		t.Fatalf("create: got %+v, want demo over %s with 128 KiB blocks, not mounted", created, e.base)
	}
	if out := e.ok("sandbox", "create", "other", "--base", e.base); !strings.Contains(out, "created sandbox other") {
		t.Fatalf("create: got %q, want it to say 'created sandbox other'", out)
	}

	var list []control.Sandbox
	e.okJSON(&list, "sandbox", "list")
	if len(list) != 2 || list[0].Name != "demo" || list[1].Name != "other" {
		t.Fatalf("list: got %+v, want demo and other", list)
	}
	if list[1].BlockSize != layers.DefaultBlockSize {
		t.Fatalf("list: other's block size: got %d, want %d", list[1].BlockSize, layers.DefaultBlockSize)
	}
	out := e.ok("sandbox", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[1], "128 KiB") {
		t.Fatalf("list: got\n%s\nwant a header and two rows, demo's with 128 KiB", out)
	}

	var d control.SandboxDetail
	e.okJSON(&d, "sandbox", "show", "demo")
	if d.Name != "demo" || len(d.Layers) != 1 || d.Layers[0].ID != d.Head || d.Layers[0].State != layers.StateActive {
		t.Fatalf("show: got %+v, want demo with its one active layer as head", d)
	}

	e.ok("sandbox", "rm", "other")
	e.okJSON(&list, "sandbox", "list")
	if len(list) != 1 || list[0].Name != "demo" {
		t.Fatalf("list after rm: got %+v, want only demo", list)
	}
	if r := e.run("sandbox", "show", "other"); r.code != 1 {
		t.Fatalf("show removed sandbox: got exit %d, want 1", r.code)
	}
}

func TestSizes(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
		bad  bool
	}{
		{name: "bytes", in: "65536", want: 65536},
		{name: "K", in: "64K", want: 64 << 10},
		{name: "lower k", in: "64k", want: 64 << 10},
		{name: "KiB", in: "64KiB", want: 64 << 10},
		{name: "M", in: "1M", want: 1 << 20},
		{name: "MB", in: "4MB", want: 4 << 20},
		{name: "G", in: "1G", want: 1 << 30},
		{name: "word", in: "big", bad: true},
		{name: "negative", in: "-4K", bad: true},
		{name: "empty", in: "", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseSize(tt.in)
			if tt.bad {
				if err == nil {
					t.Fatalf("parseSize(%q) = %d, want an error", tt.in, got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseSize(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
			}
			if back, err := parseSize(strings.ReplaceAll(humanSize(got), " ", "")); err != nil || back != got {
				t.Fatalf("humanSize(%d) = %q does not parse back: %d, %v", got, humanSize(got), back, err)
			}
		})
	}
}

func TestMountWriteUnmountMountAgain(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	var info control.MountInfo
	e.okJSON(&info, "mount", "demo", e.mnt)
	if info.Sandbox != "demo" || info.Mountpoint != e.mnt || info.PID == 0 {
		t.Fatalf("mount: got %+v, want demo at %s served by some pid", info, e.mnt)
	}
	if !e.isMounted(e.mnt) {
		t.Fatalf("%s is not a mount point after mount returned", e.mnt)
	}
	if got := readFile(t, filepath.Join(e.mnt, "a.txt")); got != "hello" {
		t.Fatalf("a.txt through the mount: got %q, want %q", got, "hello")
	}
	writeFile(t, filepath.Join(e.mnt, "new.txt"), "written through the mount")
	writeFile(t, filepath.Join(e.mnt, "a.txt"), "changed")

	var st control.Status
	e.okJSON(&st, "status")
	if !st.Server || st.PID != info.PID || len(st.Mounts) != 1 || st.Mounts[0].Mountpoint != e.mnt {
		t.Fatalf("status: got %+v, want the server %d serving %s", st, info.PID, e.mnt)
	}

	// Unmount by mountpoint; the server exits with its last mount.
	if out := e.ok("unmount", e.mnt); !strings.Contains(out, "unmounted demo") {
		t.Fatalf("unmount: got %q, want it to say 'unmounted demo'", out)
	}
	if e.isMounted(e.mnt) {
		t.Fatalf("%s is still a mount point after unmount returned", e.mnt)
	}
	waitFor(t, 10*time.Second, "the server to exit", func() bool {
		var st control.Status
		e.okJSON(&st, "status")
		return !st.Server
	})
	if got := readFile(t, filepath.Join(e.base, "a.txt")); got != "hello" {
		t.Fatalf("base a.txt: got %q, want it untouched (%q)", got, "hello")
	}
	if _, err := os.Stat(filepath.Join(e.base, "new.txt")); !os.IsNotExist(err) {
		t.Fatalf("new.txt reached the base: %v", err)
	}

	// Mount again, read-only this time, and unmount by name.
	e.ok("mount", "demo", e.mnt, "--read-only")
	for name, want := range map[string]string{"new.txt": "written through the mount", "a.txt": "changed", "dir/b.txt": "world"} {
		if got := readFile(t, filepath.Join(e.mnt, name)); got != want {
			t.Errorf("%s after mounting again: got %q, want %q", name, got, want)
		}
	}
	if err := os.WriteFile(filepath.Join(e.mnt, "ro.txt"), []byte("x"), 0o644); err == nil {
		t.Errorf("write to a read-only mount: got no error, want EROFS")
	}
	e.ok("unmount", "demo")
	if e.isMounted(e.mnt) {
		t.Fatalf("%s is still a mount point after unmount returned", e.mnt)
	}
}

func TestMountForegroundUntilSIGTERM(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	cmd := exec.Command(strataBin, "mount", "demo", e.mnt, "--foreground")
	cmd.Env = append(os.Environ(), "STRATA_STORE="+e.store)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() {
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "mounted demo at "+e.mnt) {
		t.Fatalf("foreground mount: first line %q, want 'mounted demo at %s'; stderr: %s", lines.Text(), e.mnt, stderr.String())
	}
	if !e.isMounted(e.mnt) {
		t.Fatalf("%s is not a mount point", e.mnt)
	}
	writeFile(t, filepath.Join(e.mnt, "fg.txt"), "foreground")

	// Other commands reach the foreground process over the socket.
	var st control.Status
	e.okJSON(&st, "status", "demo")
	if !st.Server || st.PID != cmd.Process.Pid || st.Sandbox == nil || !st.Sandbox.Mounted {
		t.Fatalf("status demo: got %+v, want demo mounted by pid %d", st, cmd.Process.Pid)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() {
		for lines.Scan() {
		}
	}()
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("foreground mount after SIGTERM: %v, want exit 0; stderr: %s", err, stderr.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatal("foreground mount did not exit within 15s of SIGTERM")
	}
	if e.isMounted(e.mnt) {
		t.Fatalf("%s is still a mount point after SIGTERM", e.mnt)
	}
	e.ok("mount", "demo", e.mnt)
	if got := readFile(t, filepath.Join(e.mnt, "fg.txt")); got != "foreground" {
		t.Fatalf("fg.txt after mounting again: got %q, want %q", got, "foreground")
	}
	e.ok("unmount", "demo")
}

func TestMountForegroundUntilUnmount(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	cmd := exec.Command(strataBin, "mount", "demo", e.mnt, "--foreground")
	cmd.Env = append(os.Environ(), "STRATA_STORE="+e.store)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			cmd.Process.Kill()
			<-exited
		}
	})
	waitFor(t, 10*time.Second, "the foreground mount", func() bool { return e.isMounted(e.mnt) })
	e.ok("unmount", "demo")
	select {
	case err := <-exited:
		exited <- err
		if err != nil {
			t.Fatalf("foreground mount after unmount: %v, want exit 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("foreground mount did not exit within 15s of unmount")
	}
}

func TestKill9KeepsWhatWasSynced(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	var info control.MountInfo
	e.okJSON(&info, "mount", "demo", e.mnt)
	f, err := os.Create(filepath.Join(e.mnt, "synced.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("durable"); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync through the mount: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.mnt, "dir", "b.txt")); err != nil {
		t.Fatal(err)
	}
	d, err := os.Open(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync the root through the mount: %v", err)
	}
	d.Close()

	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the killed server to be gone", func() bool { return processGone(info.PID) })

	// The dead mount is detached on the next mount, which finds the store
	// as the fsync left it.
	e.ok("mount", "demo", e.mnt)
	if got := readFile(t, filepath.Join(e.mnt, "synced.txt")); got != "durable" {
		t.Fatalf("synced.txt after kill -9: got %q, want %q", got, "durable")
	}
	if _, err := os.Stat(filepath.Join(e.mnt, "dir", "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("dir/b.txt after kill -9: got %v, want it deleted", err)
	}
	e.ok("unmount", "demo")
	var list []control.Sandbox
	e.okJSON(&list, "sandbox", "list")
	if len(list) != 1 || list[0].Name != "demo" {
		t.Fatalf("sandbox list after kill -9: got %+v, want demo", list)
	}
}

// TestKill9KeepsWhatWasLeftIdle: what was written through the mount, not
// fsync'ed, is kept by a kill -9 once the sandbox was left idle for a
// moment (the view's idle sync, 100 ms after the last change).
func TestKill9KeepsWhatWasLeftIdle(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	var info control.MountInfo
	e.okJSON(&info, "mount", "demo", e.mnt)
	writeFile(t, filepath.Join(e.mnt, "idle.txt"), "written, never fsync'ed")
	if err := os.Mkdir(filepath.Join(e.mnt, "newdir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(e.mnt, "dir", "b.txt")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the killed server to be gone", func() bool { return processGone(info.PID) })
	e.ok("mount", "demo", e.mnt)
	if got := readFile(t, filepath.Join(e.mnt, "idle.txt")); got != "written, never fsync'ed" {
		t.Fatalf("idle.txt after kill -9: got %q", got)
	}
	if fi, err := os.Stat(filepath.Join(e.mnt, "newdir")); err != nil || !fi.IsDir() {
		t.Fatalf("newdir after kill -9: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.mnt, "dir", "b.txt")); !os.IsNotExist(err) {
		t.Fatalf("dir/b.txt after kill -9: got %v, want it deleted", err)
	}
	e.ok("unmount", "demo")
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestSIGTERMToBackgroundServerUnmountsEverything(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "one", "--base", e.base)
	e.ok("sandbox", "create", "two", "--base", e.base)
	var info control.MountInfo
	e.okJSON(&info, "mount", "one", e.mnt)
	e.ok("mount", "two", e.mnt2)
	writeFile(t, filepath.Join(e.mnt, "one.txt"), "one")
	writeFile(t, filepath.Join(e.mnt2, "two.txt"), "two")
	if err := syscall.Kill(info.PID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the server to exit", func() bool { return processGone(info.PID) })
	for _, d := range []string{e.mnt, e.mnt2} {
		if e.isMounted(d) {
			t.Errorf("%s is still a mount point after SIGTERM", d)
		}
	}
	if log := readFile(t, filepath.Join(e.store, "run", "server.log")); !strings.Contains(log, "terminated: unmounting everything") {
		t.Errorf("server log: got\n%s\nwant it to record the SIGTERM", log)
	}
	// Unwritten data was flushed on the way out.
	e.ok("mount", "two", e.mnt)
	if got := readFile(t, filepath.Join(e.mnt, "two.txt")); got != "two" {
		t.Errorf("two.txt: got %q, want %q", got, "two")
	}
	e.ok("unmount", "two")
}

func TestConcurrentMountsShareOneServer(t *testing.T) {
	e := newEnv(t)
	names := []string{"a", "b", "c"}
	for _, n := range names {
		e.ok("sandbox", "create", n, "--base", e.base)
		if err := os.Mkdir(filepath.Join(e.dir, "mnt-"+n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	results := make(chan result, len(names))
	for _, n := range names {
		go func() { results <- e.run("mount", n, filepath.Join(e.dir, "mnt-"+n)) }()
	}
	for range names {
		if r := <-results; r.code != 0 {
			t.Errorf("concurrent mount: exit %d, want 0; stderr %q", r.code, r.stderr)
		}
	}
	var st control.Status
	e.okJSON(&st, "status")
	if len(st.Mounts) != len(names) {
		t.Fatalf("status: got %d mounts, want %d: %+v", len(st.Mounts), len(names), st.Mounts)
	}
	for _, m := range st.Mounts {
		if m.PID != st.PID {
			t.Errorf("%s is served by pid %d, want the one server %d", m.Sandbox, m.PID, st.PID)
		}
	}
	for _, n := range names {
		e.ok("unmount", n)
	}
}

// TestStoppedServer: while the store's server is stopped (SIGSTOP, or
// stuck), commands fail after the ping timeout with one line naming its
// pid and a hint, instead of waiting for ever; once it runs again they
// work, and the mount is intact.
func TestStoppedServer(t *testing.T) {
	e := newEnv(t)
	st := e.mountedServer("s")
	if err := syscall.Kill(st.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := syscall.Kill(st.PID, syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	defer resume()
	start := time.Now()
	r := e.run("status")
	took := time.Since(start)
	if r.code != 1 {
		t.Fatalf("status of a stopped server: exit %d, want 1; stderr %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	want := fmt.Sprintf("server does not answer: the server (pid %d) did not answer within", st.PID)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "strata: ") || !strings.Contains(lines[0], want) || !strings.HasPrefix(lines[1], "hint: ") {
		t.Fatalf("stderr: got %q, want 'strata: ...%s...' and a hint", r.stderr, want)
	}
	if took > control.PingTimeout+10*time.Second {
		t.Fatalf("status took %v", took)
	}
	resume()
	e.okJSON(&st, "status")
	if len(st.Mounts) != 1 || st.Mounts[0].Sandbox != "s" {
		t.Fatalf("status after SIGCONT: %+v", st)
	}
	if got := readFile(t, filepath.Join(e.mnt, "a.txt")); got != "hello" {
		t.Fatalf("a.txt through the mount: %q", got)
	}
	e.ok("unmount", "s")
}

// TestStatusDetachesDeadMounts: after the server is killed, status (the
// store opened directly) detaches the mount it left, so that status and
// the kernel's table agree, and the sandbox mounts again.
func TestStatusDetachesDeadMounts(t *testing.T) {
	e := newEnv(t)
	st := e.mountedServer("s")
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the killed server to end", func() bool {
		return syscall.Kill(st.PID, 0) != nil
	})
	e.okJSON(&st, "status")
	if st.Server || len(st.Mounts) != 0 {
		t.Fatalf("status after kill -9: %+v, want no server and no mounts", st)
	}
	if e.isMounted(e.mnt) {
		t.Fatalf("%s is still in the kernel's table after status", e.mnt)
	}
	e.ok("mount", "s", e.mnt)
	if got := readFile(t, filepath.Join(e.mnt, "a.txt")); got != "hello" {
		t.Fatalf("a.txt after mounting again: %q", got)
	}
	e.ok("unmount", "s")
}

// mountedServer creates sandbox name over the base, mounts it at e.mnt
// and returns the status of the server that serves it.
func (e *env) mountedServer(name string) control.Status {
	e.t.Helper()
	e.ok("sandbox", "create", name, "--base", e.base)
	e.ok("mount", name, e.mnt)
	var st control.Status
	e.okJSON(&st, "status")
	if st.PID <= 0 {
		e.t.Fatalf("status: no server pid: %+v", st)
	}
	return st
}

// TestRetentionEnv: a bad STRATA_RETENTION_EVERY fails the mount with one
// line naming it, and mounts nothing; off and a duration are taken.
func TestRetentionEnv(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	t.Setenv("STRATA_RETENTION_EVERY", "soon")
	r := e.run("mount", "demo", e.mnt)
	if r.code != 2 || !strings.Contains(r.stderr, "STRATA_RETENTION_EVERY") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 1 {
		t.Errorf("mount with a bad retention: exit %d, stderr %q; want exit 2 and a line naming the variable", r.code, r.stderr)
	}
	if e.isMounted(e.mnt) {
		t.Fatal("mounted despite the bad value")
	}
	for _, v := range []string{"off", "24h"} {
		t.Setenv("STRATA_RETENTION_EVERY", v)
		e.ok("mount", "demo", e.mnt)
		e.ok("unmount", "demo")
	}
}
