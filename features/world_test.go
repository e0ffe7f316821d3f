package features

import (
	"bytes"
	"context"
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
	"time"

	"github.com/cucumber/godog"
	"github.com/strata-sandbox/strata/layers"
)

// world is one scenario's state: a store, a base, two mountpoints and what
// the last command did.
type world struct {
	dir, store, base, mnt, mnt2 string

	storeFS    bool              // the store is on a file system of its own, mounted at store
	baseDigest string            // of the base as the scenario made it
	last       result            // of the last command that was allowed to fail
	inodes     map[string]uint64 // noted inode numbers, by path in the mount
}

type worldKey struct{}

func getWorld(ctx context.Context) *world { return ctx.Value(worldKey{}).(*world) }

// result is what one strata command did.
type result struct {
	args           []string
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("strata %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// run runs strata against the scenario's store.
func (w *world) run(args ...string) (result, error) { return w.runEnv(nil, args...) }

// runEnv runs strata against the scenario's store with env added to its
// environment.
func (w *world) runEnv(env []string, args ...string) (result, error) {
	cmd := exec.Command(strataBin, args...)
	cmd.Env = append(append(os.Environ(), "STRATA_STORE="+w.store), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{args: args, stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		return r, err
	}
	return r, nil
}

// ok runs strata and fails unless it succeeds.
func (w *world) ok(args ...string) (string, error) {
	r, err := w.run(args...)
	if err != nil {
		return "", err
	}
	if r.code != 0 {
		return "", fmt.Errorf("want success, got %v", r)
	}
	return r.stdout, nil
}

func (w *world) path(rel string) string { return filepath.Join(w.mnt, filepath.FromSlash(rel)) }

// initWorld gives every scenario a fresh world and takes it down after,
// whether or not the scenario passed: the server is shut down (which
// unmounts everything) and any mount left under the world is detached.
func initWorld(sc *godog.ScenarioContext) {
	sc.Before(func(ctx context.Context, _ *godog.Scenario) (context.Context, error) {
		dir, err := os.MkdirTemp("", "strata-feature-")
		if err != nil {
			return ctx, err
		}
		w := &world{dir: dir, store: filepath.Join(dir, "store"), base: filepath.Join(dir, "base"),
			mnt: filepath.Join(dir, "mnt"), mnt2: filepath.Join(dir, "mnt2"), inodes: map[string]uint64{}}
		for _, d := range []string{w.base, w.mnt, w.mnt2} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return ctx, err
			}
		}
		return context.WithValue(ctx, worldKey{}, w), nil
	})
	sc.After(func(ctx context.Context, _ *godog.Scenario, _ error) (context.Context, error) {
		w, ok := ctx.Value(worldKey{}).(*world)
		if !ok {
			return ctx, nil
		}
		return ctx, w.teardown()
	})
}

func (w *world) teardown() error {
	var errs []error
	if st, err := w.status(""); err != nil {
		errs = append(errs, err)
	} else {
		for _, m := range st.Mounts {
			if _, err := w.ok("unmount", m.Sandbox); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Wait until the server that exits with its last mount has released
	// the store: removing the directory under it would wedge its last flush.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st, err := layers.Open(w.store)
		if err == nil {
			st.Close()
			break
		}
		if !errors.Is(err, layers.ErrLocked) {
			errs = append(errs, err)
			break
		}
		if time.Now().After(deadline) {
			errs = append(errs, fmt.Errorf("store still locked 15s after the last unmount"))
			break
		}
	}
	if w.storeFS {
		if err := syscall.Unmount(w.store, 0); err != nil {
			errs = append(errs, fmt.Errorf("unmount the store's file system: %w", err))
		}
	}
	mps, err := mountpoints()
	if err != nil {
		errs = append(errs, err)
	}
	for _, mp := range mps {
		if strings.HasPrefix(mp, w.dir+"/") {
			errs = append(errs, fmt.Errorf("mount left behind at %s", mp))
			syscall.Unmount(mp, syscall.MNT_DETACH)
		}
	}
	if err := os.RemoveAll(w.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// status is what `strata status --json` says.
type status struct {
	Server bool `json:"server"`
	Mounts []struct {
		Sandbox    string `json:"sandbox"`
		Mountpoint string `json:"mountpoint"`
	} `json:"mounts"`
	Sandbox *struct {
		Mounted    bool   `json:"mounted"`
		Mountpoint string `json:"mountpoint"`
	} `json:"sandbox"`
}

func (w *world) status(name string) (status, error) {
	args := []string{"--json", "status"}
	if name != "" {
		args = append(args, name)
	}
	var st status
	out, err := w.ok(args...)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return st, fmt.Errorf("status: %w: %s", err, out)
	}
	return st, nil
}

// mountpoints lists the mount points this process sees.
func mountpoints() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 {
			out = append(out, strings.ReplaceAll(f[4], `\040`, " "))
		}
	}
	return out, nil
}

func isMountpoint(dir string) (bool, error) {
	mps, err := mountpoints()
	for _, mp := range mps {
		if mp == dir {
			return true, err
		}
	}
	return false, err
}

// digest describes every file under dir (path, mode, size, mtime, content
// hash), so that any change to the tree changes it.
func digest(dir string) (string, error) {
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
	return b.String(), err
}
