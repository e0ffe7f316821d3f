package features

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/cucumber/godog"
)

// initMountSteps are the steps about sandboxes, mounts and the CLI's
// answers.
func initMountSteps(sc *godog.ScenarioContext) {
	sc.Step(`^a base directory with these files:$`, aBaseWith)
	sc.Step(`^a sandbox "([^"]*)" over the base$`, aSandbox)
	sc.Step(`^the sandbox "([^"]*)" is mounted$`, mountSandbox)
	sc.Step(`^I mount the sandbox "([^"]*)"$`, mountSandbox)
	sc.Step(`^I unmount the sandbox "([^"]*)"$`, unmountSandbox)
	sc.Step(`^I remount the sandbox "([^"]*)"$`, remountSandbox)
	sc.Step(`^the sandbox stands idle for (\d+) ms$`, standIdle)
	sc.Step(`^the server is killed with SIGKILL$`, killServer)
	sc.Step(`^I try to mount the sandbox "([^"]*)" at a second mountpoint$`, tryMountSecond)
	sc.Step(`^the command fails with exit code (\d+)$`, commandFails)
	sc.Step(`^the error says "([^"]*)"$`, errorSays)
	sc.Step(`^the hint says "([^"]*)"$`, hintSays)
	sc.Step(`^the sandbox "([^"]*)" is still mounted$`, stillMounted)
	sc.Step(`^the second mountpoint is not a mount point$`, secondNotMounted)
	sc.Step(`^the base is unchanged$`, baseUnchanged)
	sc.Step(`^I unmount the mountpoint with umount$`, umountMountpoint)
	sc.Step(`^the sandbox "([^"]*)" is not mounted$`, notMounted)
	sc.Step(`^I mount "([^"]*)" with mount\.fuse3 and options "([^"]*)"$`, mountFuse3)
	sc.Step(`^the mountpoint shows type "([^"]*)", source "([^"]*)" and options "([^"]*)"$`, mountShows)
}

func aBaseWith(ctx context.Context, files *godog.Table) error {
	w := getWorld(ctx)
	for i, row := range files.Rows {
		if i == 0 {
			continue // header
		}
		if len(row.Cells) != 2 {
			return fmt.Errorf("row %d: want path and content", i)
		}
		p := filepath.Join(w.base, filepath.FromSlash(row.Cells[0].Value))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(row.Cells[1].Value), 0o644); err != nil {
			return err
		}
	}
	d, err := digest(w.base)
	w.baseDigest = d
	return err
}

func aSandbox(ctx context.Context, name string) error {
	_, err := getWorld(ctx).ok("sandbox", "create", name, "--base", getWorld(ctx).base)
	return err
}

func mountSandbox(ctx context.Context, name string) error {
	w := getWorld(ctx)
	if _, err := w.ok("mount", name, w.mnt); err != nil {
		return err
	}
	ok, err := isMountpoint(w.mnt)
	if err == nil && !ok {
		err = fmt.Errorf("%s is not a mount point after mount returned", w.mnt)
	}
	return err
}

func unmountSandbox(ctx context.Context, name string) error {
	w := getWorld(ctx)
	if _, err := w.ok("unmount", name); err != nil {
		return err
	}
	ok, err := isMountpoint(w.mnt)
	if err == nil && ok {
		err = fmt.Errorf("%s is still a mount point after unmount returned", w.mnt)
	}
	return err
}

func remountSandbox(ctx context.Context, name string) error {
	if err := unmountSandbox(ctx, name); err != nil {
		return err
	}
	return mountSandbox(ctx, name)
}

func standIdle(ms int) error {
	time.Sleep(time.Duration(ms) * time.Millisecond)
	return nil
}

// killServer kills the process that serves the store's mounts, as a crash
// would, and waits until it is gone; its mounts are left dead.
func killServer(ctx context.Context) error {
	w := getWorld(ctx)
	out, err := w.ok("status", "--json")
	if err != nil {
		return err
	}
	var st struct {
		PID int `json:"pid"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.PID <= 0 {
		return fmt.Errorf("status --json: no server pid in %q (%v)", out, err)
	}
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		return err
	}
	stat := filepath.Join("/proc", fmt.Sprint(st.PID), "stat")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		b, err := os.ReadFile(stat)
		// Gone, or a zombie: state Z after the command name's ")".
		if i := strings.LastIndexByte(string(b), ')'); err != nil || i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
			return nil
		}
	}
	return fmt.Errorf("server %d still runs 10 s after SIGKILL", st.PID)
}

func tryMountSecond(ctx context.Context, name string) error {
	w := getWorld(ctx)
	r, err := w.run("mount", name, w.mnt2)
	w.last = r
	return err
}

func commandFails(ctx context.Context, code int) error {
	r := getWorld(ctx).last
	if r.code != code {
		return fmt.Errorf("exit code: got %d, want %d\n%v", r.code, code, r)
	}
	lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "strata: ") || len(lines) > 2 {
		return fmt.Errorf("stderr: got %q, want one 'strata: ...' line and maybe a hint", r.stderr)
	}
	return nil
}

func errorSays(ctx context.Context, text string) error {
	r := getWorld(ctx).last
	first, _, _ := strings.Cut(r.stderr, "\n")
	if !strings.Contains(first, text) {
		return fmt.Errorf("error: got %q, want it to say %q", first, text)
	}
	return nil
}

func hintSays(ctx context.Context, text string) error {
	r := getWorld(ctx).last
	_, rest, _ := strings.Cut(r.stderr, "\n")
	if !strings.HasPrefix(rest, "hint: ") || !strings.Contains(rest, text) {
		return fmt.Errorf("hint: got %q, want a hint that says %q", rest, text)
	}
	return nil
}

func stillMounted(ctx context.Context, name string) error {
	w := getWorld(ctx)
	st, err := w.status(name)
	if err != nil {
		return err
	}
	if st.Sandbox == nil || !st.Sandbox.Mounted || st.Sandbox.Mountpoint != w.mnt {
		return fmt.Errorf("status %s: got %+v, want it mounted at %s", name, st.Sandbox, w.mnt)
	}
	if _, err := os.ReadDir(w.mnt); err != nil {
		return fmt.Errorf("read the mount: %w", err)
	}
	return nil
}

func secondNotMounted(ctx context.Context) error {
	w := getWorld(ctx)
	ok, err := isMountpoint(w.mnt2)
	if err == nil && ok {
		err = fmt.Errorf("%s is a mount point", w.mnt2)
	}
	return err
}

func baseUnchanged(ctx context.Context) error {
	w := getWorld(ctx)
	d, err := digest(w.base)
	if err != nil {
		return err
	}
	if d != w.baseDigest {
		return fmt.Errorf("base changed:\ngot\n%s\nwant\n%s", d, w.baseDigest)
	}
	return nil
}

// umountMountpoint unmounts as umount(8) does for root: umount(2), behind
// strata's back.
func umountMountpoint(ctx context.Context) error {
	return syscall.Unmount(getWorld(ctx).mnt, 0)
}

// notMounted waits for the server to notice an unmount it did not do.
func notMounted(ctx context.Context, name string) error {
	w := getWorld(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := w.status(name)
		if err != nil {
			return err
		}
		ok, err := isMountpoint(w.mnt)
		if err != nil {
			return err
		}
		if st.Sandbox != nil && !st.Sandbox.Mounted && !ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("status %s: got %+v (mount point: %v), want it unmounted", name, st.Sandbox, ok)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mountFuse3 mounts as mount(8) does for type fuse.strata: mount.fuse3
// runs "strata SOURCE MOUNTPOINT -o OPTIONS" from the PATH.
func mountFuse3(ctx context.Context, source, opts string) error {
	w := getWorld(ctx)
	helper := ""
	for _, p := range []string{"/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"} {
		if _, err := os.Stat(p); err == nil {
			helper = p
		}
	}
	if helper == "" {
		return godog.ErrSkip
	}
	cmd := exec.Command(helper, source, w.mnt, "-t", "fuse.strata", "-o", "store="+w.store+","+opts)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(strataBin)+":"+os.Getenv("PATH"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("mount.fuse3 %s: %v: %s", source, err, out)
	}
	return nil
}

// mountShows checks the mount's line in /proc/self/mountinfo.
func mountShows(ctx context.Context, fstype, source, opts string) error {
	w := getWorld(ctx)
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 || f[4] != w.mnt {
			continue
		}
		sep := slices.Index(f, "-")
		if sep < 0 || sep+2 >= len(f) {
			return fmt.Errorf("mountinfo line %q: no type and source", line)
		}
		if f[sep+1] != fstype || f[sep+2] != source {
			return fmt.Errorf("mount %s: type %s source %s, want %s %s", w.mnt, f[sep+1], f[sep+2], fstype, source)
		}
		have := strings.Split(f[5], ",")
		for _, o := range strings.Split(opts, ",") {
			if !slices.Contains(have, o) {
				return fmt.Errorf("mount %s: options %s lack %s", w.mnt, f[5], o)
			}
		}
		return nil
	}
	return fmt.Errorf("%s is not in /proc/self/mountinfo", w.mnt)
}
