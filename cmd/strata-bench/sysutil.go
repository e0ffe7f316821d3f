package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	dev    string // major:minor
	point  string
	fstype string
}

func readMounts() []mountEntry {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var ms []mountEntry
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		e := mountEntry{dev: f[2], point: unescapeMount(f[4])}
		for i := 6; i < len(f)-1; i++ {
			if f[i] == "-" {
				e.fstype = f[i+1]
				break
			}
		}
		ms = append(ms, e)
	}
	return ms
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space, ...).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func findMount(path string) (mountEntry, bool) {
	ms := readMounts()
	for i := len(ms) - 1; i >= 0; i-- { // the last one is on top
		if ms[i].point == path {
			return ms[i], true
		}
	}
	return mountEntry{}, false
}

func isMountPoint(path string) bool {
	_, ok := findMount(path)
	return ok
}

// mountsUnder lists mount points at or below dir.
func mountsUnder(dir string) []string {
	var out []string
	for _, m := range readMounts() {
		if m.point == dir || strings.HasPrefix(m.point, dir+"/") {
			out = append(out, m.point)
		}
	}
	return out
}

// waitMounted polls until path is a mount point, the timeout passes or done
// (the server process) is closed.
func waitMounted(path string, timeout time.Duration, done <-chan struct{}) error {
	deadline := time.Now().Add(timeout)
	for !isMountPoint(path) {
		if time.Now().After(deadline) {
			return fmt.Errorf("not mounted after %v", timeout)
		}
		select {
		case <-done:
			if isMountPoint(path) {
				return nil
			}
			return errors.New("server exited")
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// unmount takes mnt down. Politely it retries a busy mount for a second
// before detaching it lazily; force aborts a FUSE connection first (which
// fails requests that a wedged server would never answer) and detaches.
// Unmounting something not mounted is not an error.
func unmount(mnt string, force bool) error {
	if !isMountPoint(mnt) {
		return nil
	}
	var polite error
	if !force {
		for i := 0; i < 20; i++ {
			polite = unix.Unmount(mnt, 0)
			if polite == nil || !isMountPoint(mnt) {
				return nil
			}
			if !errors.Is(polite, unix.EBUSY) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	} else {
		abortFuse(mnt)
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil && isMountPoint(mnt) {
		return fmt.Errorf("unmount %s: %w", mnt, err)
	}
	if polite != nil {
		return fmt.Errorf("unmount %s: %w; detached it lazily", mnt, polite)
	}
	return nil
}

// abortFuse aborts the FUSE connection mounted at mnt, if it is one,
// mounting fusectl if need be. It never touches the mount itself, which
// could block.
func abortFuse(mnt string) {
	m, ok := findMount(mnt)
	if !ok || !(m.fstype == "fuse" || strings.HasPrefix(m.fstype, "fuse.")) {
		return
	}
	_, minor, ok := strings.Cut(m.dev, ":")
	if !ok {
		return
	}
	const fusectl = "/sys/fs/fuse/connections"
	if !isMountPoint(fusectl) {
		// Usually mounted by systemd; not on minimal machines.
		_ = unix.Mount("fusectl", fusectl, "fusectl", 0, "")
	}
	_ = os.WriteFile(filepath.Join(fusectl, minor, "abort"), []byte("1"), 0)
}

// fsType names the file system holding path.
func fsType(path string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return "unknown"
	}
	switch int64(st.Type) {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.FUSE_SUPER_MAGIC:
		return "fuse"
	}
	return fmt.Sprintf("0x%x", st.Type)
}

// duBytes is the space allocated below dir (like du -s --bytes of blocks),
// counting a hard-linked inode once.
func duBytes(dir string) int64 {
	type key struct{ dev, ino uint64 }
	seen := map[key]bool{}
	var total int64
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // vanished or unreadable: skip
		}
		var st unix.Stat_t
		if unix.Lstat(path, &st) != nil {
			return nil
		}
		if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			k := key{st.Dev, st.Ino}
			if seen[k] {
				return nil
			}
			seen[k] = true
		}
		total += st.Blocks * 512
		return nil
	})
	return total
}

// copyTree copies the directories, regular files and symlinks below src to
// dst, keeping permission bits and the files' modification times (as cp -a:
// git tells a changed file by its mtime).
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, info.Mode().Perm())
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			if err := copyFile(path, to, info.Mode().Perm()); err != nil {
				return err
			}
			return os.Chtimes(to, info.ModTime(), info.ModTime())
		}
		return fmt.Errorf("copy %s: unsupported file type %v", path, d.Type())
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil { // copy_file_range where it can
		out.Close()
		return err
	}
	return out.Close()
}

// dropCaches writes back dirty data and drops the page, dentry and inode
// caches, so the next read comes from the disk (or the FUSE server).
func dropCaches() error {
	unix.Sync()
	return os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}

// findGo returns the go command, or "" if there is none.
func findGo() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/local/go/bin/go", "/usr/lib/go/bin/go"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
