package features

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cucumber/godog"
)

// initFileSteps are the steps that work on files through the mount, as any
// program would.
func initFileSteps(sc *godog.ScenarioContext) {
	sc.Step(`^I write "([^"]*)" to "([^"]*)" in the mount$`, writeFile)
	sc.Step(`^I append "([^"]*)" to "([^"]*)" in the mount$`, appendFile)
	sc.Step(`^I create the directory "([^"]*)" in the mount$`, makeDir)
	sc.Step(`^I rename "([^"]*)" to "([^"]*)" in the mount$`, rename)
	sc.Step(`^I delete "([^"]*)" in the mount$`, remove)
	sc.Step(`^I delete the directory "([^"]*)" in the mount$`, removeDir)
	sc.Step(`^I hard-link "([^"]*)" as "([^"]*)" in the mount$`, hardLink)
	sc.Step(`^"([^"]*)" in the mount contains "([^"]*)"$`, contains)
	sc.Step(`^"([^"]*)" does not exist in the mount$`, notExists)
	sc.Step(`^"([^"]*)" and "([^"]*)" in the mount are one inode with (\d+) links$`, oneInode)
	sc.Step(`^I note the inode numbers of every file in the mount$`, noteInodes)
	sc.Step(`^every file in the mount has the inode number I noted$`, sameInodes)
	sc.Step(`^I run setfacl (.+) on "([^"]*)" in the mount$`, setfacl)
	sc.Step(`^getfacl of "([^"]*)" in the mount shows "([^"]*)"$`, func(ctx context.Context, rel, want string) error {
		return getfaclShows(getWorld(ctx).path(rel), want)
	})
	sc.Step(`^getfacl of "([^"]*)" in the base shows "([^"]*)"$`, func(ctx context.Context, rel, want string) error {
		return getfaclShows(filepath.Join(getWorld(ctx).base, filepath.FromSlash(rel)), want)
	})
	sc.Step(`^I set the attribute "([^"]*)" of "([^"]*)" to "([^"]*)" in the mount$`, func(ctx context.Context, name, rel, val string) error {
		return syscall.Setxattr(getWorld(ctx).path(rel), name, []byte(val), 0)
	})
	sc.Step(`^"([^"]*)" in the base has the attribute "([^"]*)" set to "([^"]*)"$`, baseHasAttr)
	sc.Step(`^"([^"]*)" in the mount has the mode (\d+)$`, hasMode)
	sc.Step(`^I change the mode of "([^"]*)" in the mount to (\d+)$`, changeMode)
}

// setfacl runs the setfacl(1) of the acl package with args on rel. The
// scenario is skipped where the package is missing, but not under CI,
// whose .ci/run installs it.
func setfacl(ctx context.Context, args, rel string) error {
	if _, err := exec.LookPath("setfacl"); err != nil && os.Getenv("CI") != "true" {
		return fmt.Errorf("setfacl is not installed (Debian package acl): %w", godog.ErrSkip)
	}
	cmd := exec.Command("setfacl", append(strings.Fields(args), getWorld(ctx).path(rel))...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("setfacl %s %s: %v: %s", args, rel, err, out)
	}
	return nil
}

// getfaclShows checks that getfacl(1) of path lists the entry want.
func getfaclShows(path, want string) error {
	out, err := exec.Command("getfacl", "-n", "-p", path).CombinedOutput()
	if err != nil {
		return fmt.Errorf("getfacl %s: %v: %s", path, err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		// An entry the mask narrows carries "\t#effective:...".
		entry, _, _ := strings.Cut(line, "\t")
		if strings.TrimSpace(entry) == want {
			return nil
		}
	}
	return fmt.Errorf("getfacl %s shows no line %q:\n%s", path, want, out)
}

func baseHasAttr(ctx context.Context, rel, name, want string) error {
	buf := make([]byte, 64<<10)
	n, err := syscall.Getxattr(filepath.Join(getWorld(ctx).base, filepath.FromSlash(rel)), name, buf)
	if err != nil {
		return fmt.Errorf("%s in the base: getxattr %s: %w", rel, name, err)
	}
	if got := string(buf[:n]); got != want {
		return fmt.Errorf("%s in the base: %s is %q, want %q", rel, name, got, want)
	}
	return nil
}

func hasMode(ctx context.Context, rel, mode string) error {
	st, err := stat(getWorld(ctx).path(rel))
	if err != nil {
		return err
	}
	if got := fmt.Sprintf("%o", st.Mode&0o7777); got != mode {
		return fmt.Errorf("%s: mode %s, want %s", rel, got, mode)
	}
	return nil
}

func changeMode(ctx context.Context, rel, mode string) error {
	m, err := strconv.ParseUint(mode, 8, 32)
	if err != nil {
		return err
	}
	return os.Chmod(getWorld(ctx).path(rel), os.FileMode(m))
}

func writeFile(ctx context.Context, content, rel string) error {
	return os.WriteFile(getWorld(ctx).path(rel), []byte(content), 0o644)
}

func appendFile(ctx context.Context, content, rel string) error {
	f, err := os.OpenFile(getWorld(ctx).path(rel), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func makeDir(ctx context.Context, rel string) error {
	return os.MkdirAll(getWorld(ctx).path(rel), 0o755)
}

func rename(ctx context.Context, from, to string) error {
	w := getWorld(ctx)
	return os.Rename(w.path(from), w.path(to))
}

func remove(ctx context.Context, rel string) error {
	p := getWorld(ctx).path(rel)
	if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
		return fmt.Errorf("%s is a directory", rel)
	}
	return os.Remove(p)
}

func removeDir(ctx context.Context, rel string) error {
	return syscall.Rmdir(getWorld(ctx).path(rel))
}

func hardLink(ctx context.Context, from, to string) error {
	w := getWorld(ctx)
	return os.Link(w.path(from), w.path(to))
}

func contains(ctx context.Context, rel, want string) error {
	b, err := os.ReadFile(getWorld(ctx).path(rel))
	if err != nil {
		return err
	}
	if string(b) != want {
		return fmt.Errorf("%s: got %q, want %q", rel, b, want)
	}
	return nil
}

func notExists(ctx context.Context, rel string) error {
	_, err := os.Lstat(getWorld(ctx).path(rel))
	if !os.IsNotExist(err) {
		return fmt.Errorf("%s: got %v, want it not to exist", rel, err)
	}
	// Not in its directory's listing either.
	dir := filepath.Dir(getWorld(ctx).path(rel))
	entries, err := os.ReadDir(dir)
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		if e.Name() == filepath.Base(rel) {
			return fmt.Errorf("%s is still listed in %s", rel, dir)
		}
	}
	return nil
}

func stat(path string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", path, err)
	}
	return &st, nil
}

func oneInode(ctx context.Context, a, b string, links int) error {
	w := getWorld(ctx)
	sa, err := stat(w.path(a))
	if err != nil {
		return err
	}
	sb, err := stat(w.path(b))
	if err != nil {
		return err
	}
	if sa.Ino != sb.Ino {
		return fmt.Errorf("inode numbers: %s has %d, %s has %d; want one", a, sa.Ino, b, sb.Ino)
	}
	if int(sa.Nlink) != links || int(sb.Nlink) != links {
		return fmt.Errorf("links: got %d and %d, want %d", sa.Nlink, sb.Nlink, links)
	}
	return nil
}

// walkInodes maps every path in the mount to its inode number.
func walkInodes(root string) (map[string]uint64, error) {
	out := map[string]uint64{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := stat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = st.Ino
		return nil
	})
	return out, err
}

func noteInodes(ctx context.Context) error {
	w := getWorld(ctx)
	inodes, err := walkInodes(w.mnt)
	w.inodes = inodes
	return err
}

func sameInodes(ctx context.Context) error {
	w := getWorld(ctx)
	got, err := walkInodes(w.mnt)
	if err != nil {
		return err
	}
	if len(got) != len(w.inodes) {
		return fmt.Errorf("files: got %d, noted %d", len(got), len(w.inodes))
	}
	for p, ino := range w.inodes {
		if got[p] != ino {
			return fmt.Errorf("%s: inode %d, noted %d", p, got[p], ino)
		}
	}
	return nil
}
