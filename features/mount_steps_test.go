package features

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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
	sc.Step(`^I try to mount the sandbox "([^"]*)" at a second mountpoint$`, tryMountSecond)
	sc.Step(`^the command fails with exit code (\d+)$`, commandFails)
	sc.Step(`^the error says "([^"]*)"$`, errorSays)
	sc.Step(`^the hint says "([^"]*)"$`, hintSays)
	sc.Step(`^the sandbox "([^"]*)" is still mounted$`, stillMounted)
	sc.Step(`^the second mountpoint is not a mount point$`, secondNotMounted)
	sc.Step(`^the base is unchanged$`, baseUnchanged)
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
