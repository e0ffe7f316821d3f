package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/strata-sandbox/strata/layers"
	"golang.org/x/sys/unix"
)

// FuseDevice is the FUSE device the mount checks for: /dev/fuse, or
// $STRATA_FUSE_DEVICE (tests use it to play a host without FUSE).
func FuseDevice() string {
	if d := os.Getenv("STRATA_FUSE_DEVICE"); d != "" {
		return d
	}
	return "/dev/fuse"
}

// CheckFuseDevice fails with ErrNoFuse when the FUSE device is missing,
// and with ErrFuseDenied when this user cannot mount through it: the
// device does not open for reading and writing, or (for a user other than
// root, who mounts through the set-user-ID helper) no fusermount3 or
// fusermount is installed, or allowOther is asked for and /etc/fuse.conf
// does not allow it. Checked here, each is one clear line; left to the
// helper, it is an exit status and the helper's own message on the
// server's stderr, which a backgrounded mount does not show.
func CheckFuseDevice(allowOther bool) error {
	dev := FuseDevice()
	if _, err := os.Stat(dev); err != nil {
		return coded(ErrNoFuse, fmt.Sprintf("fuse device %s not found", dev))
	}
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = syscall.EIO
		}
		return coded(ErrFuseDenied, fmt.Sprintf("fuse device %s: %v", dev, errno))
	}
	f.Close()
	if os.Geteuid() == 0 {
		return nil // mounts directly
	}
	if _, err := fusermount(); err != nil {
		return coded(ErrFuseDenied, "no fusermount3 or fusermount helper installed: a user other than root mounts through it")
	}
	if allowOther && !userAllowOther(fuseConf) {
		return coded(ErrFuseDenied, fmt.Sprintf("--allow-other needs user_allow_other in %s for a user other than root", fuseConf))
	}
	return nil
}

// fuseConf is the FUSE helper's configuration file.
const fuseConf = "/etc/fuse.conf"

// fusermount finds the helper go-fuse mounts through when it cannot mount
// directly, where go-fuse looks for it.
func fusermount() (string, error) {
	var err error
	for _, bin := range []string{"fusermount3", "fusermount"} {
		var p string
		if p, err = exec.LookPath(bin); err == nil {
			return p, nil
		}
		if p, err = exec.LookPath("/bin/" + bin); err == nil {
			return p, nil
		}
	}
	return "", err
}

// userAllowOther reports whether the FUSE configuration at path lets users
// other than root mount with allow_other: a line "user_allow_other",
// comments after '#'.
func userAllowOther(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		if strings.TrimSpace(line) == "user_allow_other" {
			return true
		}
	}
	return false
}

// MountEntry is one line of /proc/self/mountinfo.
type MountEntry struct {
	Mountpoint string
	FSType     string
	Source     string
	// Dev is the mount's device, "major:minor"; a FUSE mount's minor
	// names its connection under /sys/fs/fuse/connections.
	Dev string
	// Options are the mount's own options ("ro,nosuid,nodev,..."), as a
	// remount left them.
	Options string
}

// Mounts lists the mounts this process sees.
func Mounts() ([]MountEntry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []MountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if e, ok := parseMountinfo(sc.Text()); ok {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}

// parseMountinfo parses "36 35 98:0 /root /mnt opts [tags] - fstype source superopts".
func parseMountinfo(line string) (MountEntry, bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return MountEntry{}, false
	}
	f, g := strings.Fields(pre), strings.Fields(post)
	if len(f) < 6 || len(g) < 2 {
		return MountEntry{}, false
	}
	return MountEntry{Mountpoint: unescapeMountinfo(f[4]), FSType: g[0], Source: unescapeMountinfo(g[1]), Dev: f[2], Options: f[5]}, true
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
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

// IsMountpoint reports whether the absolute, symlink-free path dir is a
// mount point.
func IsMountpoint(dir string) (bool, error) {
	ms, err := Mounts()
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.Mountpoint == dir {
			return true, nil
		}
	}
	return false, nil
}

// CheckMountpoint checks that dir can take a mount: it exists, is a
// directory and is not already a mount point. It returns the directory's
// absolute, symlink-free path.
func CheckMountpoint(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, syscall.ENOTCONN) || err == nil && isDead(abs):
		return "", coded(ErrBusy, fmt.Sprintf("mountpoint %s is a dead mount whose server is gone", abs))
	case errors.Is(err, os.ErrNotExist):
		return "", coded(layers.ErrNotFound, fmt.Sprintf("mountpoint %s does not exist", abs))
	case err != nil:
		return "", fmt.Errorf("mountpoint %s: %w", abs, err)
	case !st.IsDir():
		return "", coded(layers.ErrNotDir, fmt.Sprintf("mountpoint %s is not a directory", abs))
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("mountpoint %s: %w", abs, err)
	}
	mounted, err := IsMountpoint(real)
	if err != nil {
		return "", fmt.Errorf("mountpoint %s: %w", abs, err)
	}
	if mounted {
		return "", coded(ErrBusy, fmt.Sprintf("mountpoint %s is already a mount point", abs))
	}
	return real, nil
}

// recordName is the file in the run directory that lists the mounts a
// server serves, so that after a crash the next process can find and
// detach the dead ones.
const recordName = "mounts.json"

func recordPath(storeDir string) string { return filepath.Join(storeDir, "run", recordName) }

func writeRecord(storeDir string, ms []MountInfo) error {
	if ms == nil {
		ms = []MountInfo{}
	}
	b, err := json.Marshal(ms)
	if err != nil {
		return err
	}
	tmp := recordPath(storeDir) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, recordPath(storeDir))
}

func readRecord(storeDir string) ([]MountInfo, error) {
	b, err := os.ReadFile(recordPath(storeDir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ms []MountInfo
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, fmt.Errorf("%s: %w", recordPath(storeDir), err)
	}
	return ms, nil
}

// CleanStaleMounts detaches the mounts that a dead server of the store left
// behind (the kernel answers ENOTCONN on them) and returns them. Call it
// only while holding the store, so that no live server owns the record.
func CleanStaleMounts(storeDir string) ([]MountInfo, error) {
	ms, err := readRecord(storeDir)
	if err != nil || len(ms) == 0 {
		return nil, err
	}
	live, err := Mounts()
	if err != nil {
		return nil, err
	}
	var cleaned []MountInfo
	var first error
	for _, m := range ms {
		if !isStrataMount(live, m) {
			continue
		}
		if !isDead(m.Mountpoint) {
			continue // alive (served by someone) or not ours any more
		}
		if err := detach(m.Mountpoint); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		m.Stale = true
		cleaned = append(cleaned, m)
	}
	if first == nil {
		first = os.Remove(recordPath(storeDir))
		if errors.Is(first, os.ErrNotExist) {
			first = nil
		}
	}
	return cleaned, first
}

// isDead reports whether dir is a FUSE mount whose server is gone. It asks
// statfs, which the kernel always forwards to the server, where a stat
// could be answered from the attribute cache.
func isDead(dir string) bool {
	var st unix.Statfs_t
	return errors.Is(unix.Statfs(dir, &st), syscall.ENOTCONN)
}

func isStrataMount(live []MountEntry, m MountInfo) bool {
	for _, e := range live {
		if e.is(m) {
			return true
		}
	}
	return false
}

// is reports whether kernel mount e is Strata mount m.
func (e MountEntry) is(m MountInfo) bool {
	return e.Mountpoint == m.Mountpoint && e.FSType == "fuse.strata" && e.Source == "strata:"+m.Sandbox
}

// detach lazily unmounts dir: directly as root, else through fusermount3.
func detach(dir string) error {
	err := unix.Unmount(dir, unix.MNT_DETACH)
	if err == nil {
		return nil
	}
	if path, lerr := fusermount(); lerr == nil {
		if out, cerr := exec.Command(path, "-uz", dir).CombinedOutput(); cerr != nil {
			return fmt.Errorf("detach %s: %v: %s", dir, cerr, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return fmt.Errorf("detach %s: %w", dir, err)
}

// withKernelFlags sets, in ms, what the kernel's mount table says of each
// mount's flags: a remount (mount -o remount,ro|noexec DIR) changes them
// behind the server. A mount is read-only if it was mounted so or the
// kernel's mount is; the view refuses writes in the first case, the
// kernel in the second.
func withKernelFlags(ms []MountInfo) {
	live, err := Mounts()
	if err != nil {
		return
	}
	for i := range ms {
		for _, e := range live {
			if !e.is(ms[i]) {
				continue
			}
			opts := strings.Split(e.Options, ",")
			ms[i].ReadOnly = ms[i].ReadOnly || slices.Contains(opts, "ro")
			ms[i].NoExec = slices.Contains(opts, "noexec")
		}
	}
}
