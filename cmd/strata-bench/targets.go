package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// allTargets lists the targets in report order; native is the baseline.
var allTargets = []string{"native", "overlayfs", "fuse-overlayfs", "loopback", "strata"}

// A driver prepares targets of one kind. check says why the kind cannot run
// here (a missing tool, not root); setup makes one instance whose root shows
// the base directory and may be written.
type driver struct {
	name  string
	about string
	check func(h *harness) error
	setup func(ctx context.Context, h *harness, base, dir string) (*instance, error)
}

func driverByName(name string) *driver {
	for _, d := range drivers {
		if d.name == name {
			return d
		}
	}
	return nil
}

var drivers = []*driver{
	{
		name:  "native",
		about: "plain directory holding a copy of the base",
		check: func(*harness) error { return nil },
		setup: setupNative,
	},
	{
		name:  "overlayfs",
		about: "kernel overlay: lowerdir=base, upperdir, workdir",
		check: func(*harness) error {
			if os.Geteuid() != 0 {
				return errors.New("needs root to mount overlay")
			}
			return nil
		},
		setup: setupOverlay,
	},
	{
		name:  "fuse-overlayfs",
		about: "fuse-overlayfs -f -o lowerdir=base,upperdir,workdir",
		check: func(*harness) error {
			if _, err := exec.LookPath("fuse-overlayfs"); err != nil {
				return errors.New("fuse-overlayfs not installed (apt-get install fuse-overlayfs)")
			}
			return checkDevFuse()
		},
		setup: setupFuseOverlay,
	},
	{
		name:  "loopback",
		about: "go-fuse loopback (1 s entry/attr timeouts, DirectMount; reads through FUSE passthrough) of a copy of the base",
		check: func(h *harness) error {
			if h.selfExe == "" {
				return errors.New("cannot find own executable to serve the loopback")
			}
			return checkDevFuse()
		},
		setup: setupLoopback,
	},
	{
		name:  "strata",
		about: "strata sandbox create --base base; strata mount",
		check: func(h *harness) error {
			bin, err := h.findStrata()
			if err != nil {
				return err
			}
			h.strataBin = bin
			return checkDevFuse()
		},
		setup: setupStrata,
	},
}

func checkDevFuse() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no /dev/fuse: %w", err)
	}
	return nil
}

// instance is one live target. teardown unmounts it exactly once, whoever
// calls first (the run, the watchdog or the signal handler).
type instance struct {
	name    string
	root    string // where workloads run
	storage string // directory whose growth counts as bytes stored; "" = none
	down    func(force bool) error

	once sync.Once
	err  error
	h    *harness
}

func (in *instance) teardown(force bool) error {
	in.once.Do(func() {
		if in.down != nil {
			in.err = in.down(force)
		}
		if in.h != nil {
			in.h.untrack(in)
		}
	})
	return in.err
}

// setup makes an instance and registers it for cleanup.
func (h *harness) setup(ctx context.Context, d *driver, base, dir string) (*instance, error) {
	in, err := d.setup(ctx, h, base, dir)
	if err != nil {
		return nil, err
	}
	in.name, in.h = d.name+" "+filepath.Base(dir), h
	h.track(in)
	return in, nil
}

// Target status in the report.
const (
	statusOK      = "ok"
	statusSkipped = "skipped"
	statusFailed  = "failed"
)

type targetStatus struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, skipped or failed
	Reason string `json:"reason,omitempty"`
	About  string `json:"about"`
}

func (s targetStatus) String() string {
	if s.Reason == "" {
		return s.Status
	}
	return s.Status + ": " + s.Reason
}

// checkTarget checks a driver's prerequisites (missing: skipped), then
// probes it: mount a tiny base, read a file through it, write one, tear it
// down (broken: failed).
func (h *harness) checkTarget(ctx context.Context, d *driver) targetStatus {
	st := targetStatus{Name: d.name, About: d.about}
	if err := d.check(h); err != nil {
		st.Status, st.Reason = statusSkipped, err.Error()
		return st
	}
	if err := h.probe(ctx, d); err != nil {
		st.Status, st.Reason = statusFailed, "probe: "+err.Error()
		return st
	}
	st.Status = statusOK
	return st
}

func (h *harness) probe(ctx context.Context, d *driver) (err error) {
	base, err := h.fixture(probeFixture())
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Join(h.work, "runs"), "probe-"+d.name+"-")
	if err != nil {
		return err
	}
	defer h.removeRun(dir)
	in, err := h.setup(ctx, d, base, dir)
	if err != nil {
		return err
	}
	defer func() {
		if terr := in.teardown(false); terr != nil && err == nil {
			err = fmt.Errorf("teardown: %w", terr)
		}
	}()
	got, err := os.ReadFile(filepath.Join(in.root, probeFile))
	if err != nil {
		return fmt.Errorf("read base file through target: %w", err)
	}
	if string(got) != probeContent {
		return fmt.Errorf("base file through target reads %q, want %q", got, probeContent)
	}
	if err := os.WriteFile(filepath.Join(in.root, "probe-write"), []byte("ok\n"), 0o644); err != nil {
		return fmt.Errorf("write through target: %w", err)
	}
	return nil
}

// --- native

func setupNative(_ context.Context, _ *harness, base, dir string) (*instance, error) {
	root := filepath.Join(dir, "base")
	if err := copyTree(base, root); err != nil {
		return nil, fmt.Errorf("copy base: %w", err)
	}
	return &instance{root: root, storage: root}, nil
}

// --- overlayfs

func overlayDirs(dir string) (upper, work, mnt string, err error) {
	upper, work, mnt = filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "mnt")
	for _, d := range []string{upper, work, mnt} {
		if err = os.Mkdir(d, 0o755); err != nil {
			return
		}
	}
	return
}

func setupOverlay(_ context.Context, _ *harness, base, dir string) (*instance, error) {
	upper, work, mnt, err := overlayDirs(dir)
	if err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", base, upper, work)
	if err := unix.Mount("overlay", mnt, "overlay", 0, opts); err != nil {
		return nil, fmt.Errorf("mount overlay: %w", err)
	}
	return &instance{root: mnt, storage: upper, down: func(force bool) error {
		return unmount(mnt, force)
	}}, nil
}

// --- fuse-overlayfs

func setupFuseOverlay(ctx context.Context, _ *harness, base, dir string) (*instance, error) {
	upper, work, mnt, err := overlayDirs(dir)
	if err != nil {
		return nil, err
	}
	// -f keeps it in the foreground: we own the process, so we can wait for
	// it, and it dies with us (Pdeathsig) instead of lingering as a daemon.
	cmd := exec.Command("fuse-overlayfs", "-f",
		"-o", fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", base, upper, work), mnt)
	srv, err := startServer(ctx, cmd, mnt, nil)
	if err != nil {
		return nil, err
	}
	return &instance{root: mnt, storage: upper, down: func(force bool) error {
		var err error
		if !force {
			if path, lerr := exec.LookPath("fusermount3"); lerr == nil {
				if out, ferr := exec.Command(path, "-u", mnt).CombinedOutput(); ferr != nil {
					err = fmt.Errorf("fusermount3 -u: %v: %s", ferr, bytes.TrimSpace(out))
				}
			}
		}
		if isMountPoint(mnt) {
			err = unmount(mnt, force)
		}
		return errors.Join(err, srv.stop())
	}}, nil
}

// --- go-fuse loopback

func setupLoopback(ctx context.Context, h *harness, base, dir string) (*instance, error) {
	upper, mnt := filepath.Join(dir, "upper"), filepath.Join(dir, "mnt")
	if err := copyTree(base, upper); err != nil {
		return nil, fmt.Errorf("copy base: %w", err)
	}
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return nil, err
	}
	cmd := exec.Command(h.selfExe, "-serve-loopback", upper, mnt)
	srv, err := startServer(ctx, cmd, mnt, func(line string) bool { return line == loopbackReady })
	if err != nil {
		return nil, err
	}
	return &instance{root: mnt, storage: upper, down: func(force bool) error {
		return errors.Join(unmount(mnt, force), srv.stop())
	}}, nil
}

// --- strata

const strataSandbox = "bench"

func setupStrata(ctx context.Context, h *harness, base, dir string) (*instance, error) {
	store, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return nil, err
	}
	strata := func(ctx context.Context, args ...string) error {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, h.strataBin, append([]string{"--store", store}, args...)...)
		// Output goes to a file, not a pipe: mount leaves a server running
		// that inherits it, and a pipe would keep Wait waiting for that.
		out, err := os.OpenFile(filepath.Join(dir, "strata.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer out.Close()
		_, _ = fmt.Fprintf(out, "$ strata %s\n", strings.Join(args, " "))
		from, _ := out.Seek(0, io.SeekCurrent)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			text, _ := os.ReadFile(out.Name())
			text = text[min(from, int64(len(text))):]
			return fmt.Errorf("strata %s: %v: %s", strings.Join(args, " "), err, lastLines(string(text), 5))
		}
		return nil
	}
	if err := strata(ctx, "sandbox", "create", strataSandbox, "--base", base); err != nil {
		return nil, err
	}
	if err := strata(ctx, "mount", strataSandbox, mnt); err != nil {
		return nil, err
	}
	down := func(force bool) error {
		var err error
		if !force {
			// Not ctx: teardown must run after a cancel too.
			err = strata(context.Background(), "unmount", strataSandbox)
		}
		if isMountPoint(mnt) {
			err = errors.Join(err, unmount(mnt, true))
		}
		return err
	}
	if err := waitMounted(mnt, 10*time.Second, nil); err != nil {
		return nil, errors.Join(fmt.Errorf("strata mount returned but %s is not mounted: %w", mnt, err), down(true))
	}
	return &instance{root: mnt, storage: store, down: down}, nil
}

// findStrata returns the strata binary: -strata, or one built from the
// enclosing module's ./cmd/strata.
func (h *harness) findStrata() (string, error) {
	if h.cfg.StrataBin != "" {
		abs, err := filepath.Abs(h.cfg.StrataBin)
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(abs)
		if err != nil {
			return "", fmt.Errorf("-strata %s: %w", h.cfg.StrataBin, err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("-strata %s is not an executable file", h.cfg.StrataBin)
		}
		return abs, nil
	}
	mod, err := moduleRoot()
	if err != nil {
		return "", fmt.Errorf("no -strata given and %v", err)
	}
	if _, err := os.Stat(filepath.Join(mod, "cmd", "strata")); err != nil {
		return "", fmt.Errorf("no -strata given and %s/cmd/strata does not exist", mod)
	}
	if h.goBin == "" {
		return "", errors.New("no -strata given and no go toolchain to build ./cmd/strata")
	}
	bin := filepath.Join(h.work, "bin", "strata")
	cmd := exec.Command(h.goBin, "build", "-o", bin, "./cmd/strata")
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("no -strata given and go build ./cmd/strata failed: %v: %s", err, lastLines(string(out), 3))
	}
	return bin, nil
}

// moduleRoot walks up from the working directory to the strata module.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(data), "module github.com/strata-sandbox/strata\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not inside the strata module")
		}
		dir = parent
	}
}

// --- FUSE server processes

// server is a FUSE server process we started.
type server struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has exited
	stderr *syncBuffer
}

// startServer starts cmd and waits until mnt is mounted (and, when ready is
// set, until the process prints a line ready accepts on stdout).
func startServer(ctx context.Context, cmd *exec.Cmd, mnt string, ready func(string) bool) (*server, error) {
	s := &server{cmd: cmd, done: make(chan struct{}), stderr: &syncBuffer{}}
	cmd.Stderr = s.stderr
	// Die with us, so no server outlives a killed harness.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	var stdout *bufio.Scanner
	readyc := make(chan struct{})
	if ready != nil {
		pipe, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		stdout = bufio.NewScanner(pipe)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	if stdout != nil {
		go func() {
			for stdout.Scan() {
				if ready(stdout.Text()) {
					close(readyc)
					break
				}
			}
			for stdout.Scan() { // drain
			}
		}()
	} else {
		close(readyc)
	}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	select {
	case <-readyc:
	case <-s.done:
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	if err := waitMounted(mnt, 30*time.Second, s.done); err != nil {
		_ = unmount(mnt, true)
		return nil, errors.Join(fmt.Errorf("%s did not mount %s: %w: %s", filepath.Base(cmd.Path), mnt, err,
			lastLines(s.stderr.String(), 5)), s.stop())
	}
	return s, nil
}

// stop waits for the server to exit after its unmount, then insists.
func (s *server) stop() error {
	for _, sig := range []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL} {
		if sig != 0 {
			_ = s.cmd.Process.Signal(sig)
		}
		select {
		case <-s.done:
			if sig != 0 {
				return fmt.Errorf("%s needed %v to exit", filepath.Base(s.cmd.Path), sig)
			}
			return nil
		case <-time.After(10 * time.Second):
		}
	}
	return fmt.Errorf("%s (pid %d) did not exit", filepath.Base(s.cmd.Path), s.cmd.Process.Pid)
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
