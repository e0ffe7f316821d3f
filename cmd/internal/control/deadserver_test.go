package control

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/fs"
	"github.com/strata-sandbox/strata/layers"
)

// dyingEnv, when set, makes the test binary the dying server of
// TestKilledStuckServerIsAborted: "store|mountpoint|sandbox".
const dyingEnv = "STRATA_TEST_DYING_SERVER"

// TestKilledStuckServerIsAborted: a server killed while a thread of it is
// stuck in the kernel (its main thread a zombie, another still running)
// keeps the store locked, its socket taking connections nobody answers
// and its mount alive. Dial aborts the mount's FUSE connection, which lets
// the process end, and reports no server; the store then opens and the
// dead mount is detached. The child stands in for such a server: it
// holds the store, serves a real mount, listens without answering, and
// ends its main thread; it exits once its mount's connection is aborted.
func TestKilledStuckServerIsAborted(t *testing.T) {
	dir := t.TempDir()
	storeDir, base, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "base"), filepath.Join(dir, "mnt")
	for _, d := range []string{base, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "f"), []byte("base"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := layers.Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSandbox("s", base, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestKilledStuckServerIsAborted$")
	cmd.Env = append(os.Environ(), dyingEnv+"="+storeDir+"|"+mnt+"|s")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	waited := false
	t.Cleanup(func() {
		// Whatever happened: no process, no mount left behind.
		if !waited {
			if ms, err := Mounts(); err == nil {
				for _, m := range ms {
					if m.Mountpoint == mnt {
						abortConnection(m.Dev)
					}
				}
			}
			cmd.Process.Kill()
			cmd.Wait()
		}
		syscall.Unmount(mnt, syscall.MNT_DETACH)
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	for deadline := time.Now().Add(5 * time.Second); !killedStuck(pid); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			state, threads := procState(pid)
			t.Fatalf("the child is not a zombie with threads: state %q, %d threads", state, threads)
		}
	}
	if _, err := layers.Open(storeDir); !errors.Is(err, layers.ErrLocked) {
		t.Fatalf("open while the stuck server holds the store: %v, want ErrLocked", err)
	}

	old := PingTimeout
	PingTimeout = 300 * time.Millisecond
	defer func() { PingTimeout = old }()
	_, err = Dial(storeDir)
	if !errors.Is(err, ErrNoServer) || !strings.Contains(err.Error(), "1 FUSE connections aborted") {
		t.Fatalf("Dial of a killed, stuck server: %v; want ErrNoServer after aborting its connection", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		waited = true
	case <-time.After(5 * time.Second):
		t.Fatalf("the child did not end after its connection was aborted")
	}

	st, err = layers.Open(storeDir)
	if err != nil {
		t.Fatalf("open after the stuck server ended: %v", err)
	}
	defer st.Close()
	cleaned, err := CleanStaleMounts(storeDir)
	if err != nil || len(cleaned) != 1 || cleaned[0].Mountpoint != mnt {
		t.Fatalf("clean stale mounts: %+v, %v; want the child's mount", cleaned, err)
	}
	if on, err := IsMountpoint(mnt); err != nil || on {
		t.Fatalf("%s is still a mount point (%v)", mnt, err)
	}
}

// The child runs from init, which Go runs on the process's main thread,
// the one it has to end.
func init() {
	if spec := os.Getenv(dyingEnv); spec != "" {
		runDyingServer(spec)
	}
}

// runDyingServer is the child of TestKilledStuckServerIsAborted.
func runDyingServer(spec string) {
	parts := strings.Split(spec, "|")
	storeDir, mnt, name := parts[0], parts[1], parts[2]
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "dying server:", err)
		os.Exit(2)
	}
	st, err := layers.Open(storeDir)
	if err != nil {
		fail(err)
	}
	v, err := st.OpenView(name, false)
	if err != nil {
		fail(err)
	}
	m, err := fs.New(mnt, v, fs.Options{})
	if err != nil {
		fail(err)
	}
	if _, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(storeDir), Net: "unix"}); err != nil {
		fail(err)
	}
	if err := writeRecord(storeDir, []MountInfo{{Sandbox: name, Mountpoint: mnt, PID: os.Getpid()}}); err != nil {
		fail(err)
	}
	go func() {
		m.Wait() // until the connection is aborted
		os.Exit(0)
	}()
	fmt.Println("ready")
	// The main thread ends and the process lives on in its other threads,
	// as a killed process with a thread stuck in the kernel does. No
	// garbage collection: it would wait for the ended thread.
	debug.SetGCPercent(-1)
	runtime.LockOSThread()
	syscall.Syscall(syscall.SYS_EXIT, 0, 0, 0)
}

// TestAbortConnectionRefusesOddDevices: only a device "major:minor" names
// a connection; nothing else reaches a path under fusectl.
func TestAbortConnectionRefusesOddDevices(t *testing.T) {
	for _, dev := range []string{"", "52", "0:", "0:../52", "0:5/2", "0:.."} {
		if err := abortConnection(dev); !errors.Is(err, os.ErrInvalid) {
			t.Errorf("abortConnection(%q): %v, want ErrInvalid", dev, err)
		}
	}
	if state, threads := procState(1 << 30); state != 0 || threads != 0 {
		t.Errorf("procState of no process: %q, %d", state, threads)
	}
	if killedStuck(os.Getpid()) {
		t.Errorf("this running test is taken for a killed, stuck server")
	}
}
