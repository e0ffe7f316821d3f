package checkpoint

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/layers"
)

// Export writes the files of the state an archive holds (the sandbox as it
// was just before the rollback) into dir, which must be empty or missing.
// Every path keeps its mode (set-id and sticky bits included, whatever the
// umask), times, extended attributes (ACLs included) and, when run as
// root, its owner, as cp -a would keep them. Symlinks are written as
// symlinks and fifos as fifos; nothing is followed. Devices and sockets
// are left out: a device node written onto the host would give access to
// the device itself. An attribute the destination's file system does not
// take (no xattr support, or trusted.* without privilege) is left out too.
func (m *Manager) Export(ref, dir string) (int, error) {
	ar, err := m.ResolveArchive(ref)
	if err != nil {
		return 0, fmt.Errorf("export: %w", err)
	}
	if ar.Top == "" {
		return 0, fmt.Errorf("export %s: archive holds no layers: %w", ar.ID, layers.ErrInvalid)
	}
	if err := m.sameBase("archive "+ar.ID, ar.Sandbox, ar.Created); err != nil {
		return 0, fmt.Errorf("export: %w", err)
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return 0, fmt.Errorf("export %s: %s is not empty: %w", ar.ID, dir, layers.ErrExists)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("export %s: %w", ar.ID, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("export %s: %w", ar.ID, err)
	}
	v, err := m.store.OpenSnapshot(ar.Sandbox, ar.Top)
	if err != nil {
		return 0, err
	}
	defer v.Close()
	n := 0
	// A file with several names is written once and linked after.
	linked := map[uint64]string{}
	type dirMeta struct {
		a   layers.Attr
		dst string
	}
	// Directories get their mode and times once their entries are
	// written: a read-only one could not take them, and every entry
	// written moves the times.
	var dirs []dirMeta
	err = walk(v, func(p string, a layers.Attr) error {
		dst := filepath.Join(dir, filepath.FromSlash(p))
		var err error
		switch a.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			dirs = append(dirs, dirMeta{a, dst})
			return os.Mkdir(dst, 0o700)
		case syscall.S_IFLNK:
			err = exportSymlink(v, a.Ino, dst)
		case syscall.S_IFREG:
			if first, ok := linked[a.Ino]; ok {
				n++
				return os.Link(first, dst)
			}
			if a.Nlink > 1 {
				linked[a.Ino] = dst
			}
			err = exportFile(v, a, dst)
		case syscall.S_IFIFO:
			err = unix.Mkfifo(dst, 0o600)
		default: // devices and sockets
			return nil
		}
		if err == nil {
			err = exportMeta(v, a, dst)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		n++
		return nil
	})
	// Children before their parents, so no directory is closed to its
	// entries or has its times moved by them.
	for i := len(dirs) - 1; i >= 0 && err == nil; i-- {
		err = exportMeta(v, dirs[i].a, dirs[i].dst)
	}
	if err != nil {
		return n, fmt.Errorf("export %s: %w", ar.ID, err)
	}
	return n, nil
}

func exportSymlink(v *layers.View, ino uint64, dst string) error {
	t, err := v.Readlink(ino)
	if err != nil {
		return err
	}
	return os.Symlink(t, dst)
}

// exportMeta gives dst the owner (when run as root), extended attributes,
// mode and times the archive's inode a has. It sets all it can and
// reports every failure.
func exportMeta(v *layers.View, a layers.Attr, dst string) error {
	var errs []error
	if os.Geteuid() == 0 {
		errs = append(errs, os.Lchown(dst, int(a.UID), int(a.GID)))
	}
	errs = append(errs, exportXattrs(v, a, dst))
	if a.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		// After the chown and the ACL, which both change mode bits.
		errs = append(errs, unix.Fchmodat(unix.AT_FDCWD, dst, a.Mode&0o7777, 0))
	}
	ts := []unix.Timespec{unix.NsecToTimespec(a.Atime), unix.NsecToTimespec(a.Mtime)}
	errs = append(errs, unix.UtimesNanoAt(unix.AT_FDCWD, dst, ts, unix.AT_SYMLINK_NOFOLLOW))
	return errors.Join(errs...)
}

// exportXattrs copies the extended attributes of a onto dst, but those
// the destination does not take.
func exportXattrs(v *layers.View, a layers.Attr, dst string) error {
	names, err := v.ListXattr(a.Ino)
	isLink := a.Mode&syscall.S_IFMT == syscall.S_IFLNK
	for _, name := range names {
		if isLink && strings.HasPrefix(name, "user.") {
			continue // Linux keeps no user attributes on symlinks
		}
		val, gerr := v.GetXattr(a.Ino, name)
		if gerr == nil {
			gerr = unix.Lsetxattr(dst, name, val, 0)
		}
		if errors.Is(gerr, unix.EOPNOTSUPP) || errors.Is(gerr, unix.EPERM) {
			continue // no xattrs there, or trusted.* without privilege
		}
		if gerr != nil {
			err = errors.Join(err, fmt.Errorf("set %s: %w", name, gerr))
		}
	}
	return err
}

func exportFile(v *layers.View, a layers.Attr, dst string) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < a.Size; {
		n, err := v.ReadAt(a.Ino, buf, off)
		if err != nil && !errors.Is(err, io.EOF) {
			// Never zeros where the data could not be read.
			f.Close()
			return err
		}
		if n == 0 {
			break
		}
		// Runs of zeros stay holes: the final truncate gives the size.
		for o := 0; o < n; o += exportChunk {
			c := buf[o:min(o+exportChunk, n)]
			if isZero(c) {
				continue
			}
			if _, werr := f.WriteAt(c, off+int64(o)); werr != nil {
				f.Close()
				return werr
			}
		}
		off += int64(n)
	}
	if err := f.Truncate(a.Size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// exportChunk is the granularity at which export leaves holes.
const exportChunk = 64 << 10

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
