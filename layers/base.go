package layers

import (
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"syscall"

	"golang.org/x/sys/unix"
)

// baseDir reads the host directory a sandbox starts from. Every path is
// resolved with openat2 beneath the base root and without following any
// symlink, so a link inside the sandbox never leads the host side out of it.
type baseDir struct {
	path string
	root int // O_PATH descriptor of the base directory
	dev  uint64
}

const resolveSafe = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openBase opens the base directory. Its path was resolved when the
// sandbox was created, so a link anywhere in it now means the host moved
// things around since: following it would serve another directory.
func openBase(path string) (*baseDir, error) {
	how := &unix.OpenHow{
		// No O_NOFOLLOW: a link as the last component fails with ELOOP too,
		// which says what is wrong better than ENOTDIR.
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, how)
	for err == unix.EINTR || err == unix.EAGAIN {
		fd, err = unix.Openat2(unix.AT_FDCWD, path, how)
	}
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", path, mapOSErr(err))
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("base %s: %w", path, err)
	}
	return &baseDir{path: path, root: fd, dev: st.Dev}, nil
}

func (b *baseDir) close() { unix.Close(b.root) }

func relOrDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

// open opens rel (relative to the base) with flags, never following links.
func (b *baseDir) open(rel string, flags int) (int, error) {
	for {
		fd, err := unix.Openat2(b.root, relOrDot(rel), &unix.OpenHow{
			Flags:   uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW),
			Resolve: resolveSafe,
		})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, fmt.Errorf("base %s: %w", rel, err)
		}
		return fd, nil
	}
}

// lstat stats rel without following a final symlink.
func (b *baseDir) lstat(rel string) (unix.Stat_t, error) {
	st, _, err := b.lstatx(rel)
	return st, err
}

// lstatx is lstat that also tells rel's birth time in nanoseconds (0
// where the base's file system does not record it): one statx(2).
func (b *baseDir) lstatx(rel string) (unix.Stat_t, int64, error) {
	fd, err := b.open(rel, unix.O_PATH)
	if err != nil {
		return unix.Stat_t{}, 0, err
	}
	defer unix.Close(fd)
	var sx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &sx); err != nil {
		return unix.Stat_t{}, 0, fmt.Errorf("base %s: %w", rel, err)
	}
	var btime int64
	if sx.Mask&unix.STATX_BTIME != 0 {
		btime = sxNano(sx.Btime)
	}
	return statOfStatx(&sx), btime, nil
}

func sxNano(t unix.StatxTimestamp) int64 { return NanoOf(t.Sec, int64(t.Nsec)) }

// statOfStatx is the stat(2) form of sx's basic fields.
func statOfStatx(sx *unix.Statx_t) unix.Stat_t {
	ts := func(t unix.StatxTimestamp) unix.Timespec { return unix.Timespec{Sec: t.Sec, Nsec: int64(t.Nsec)} }
	return unix.Stat_t{
		Dev:     unix.Mkdev(sx.Dev_major, sx.Dev_minor),
		Ino:     sx.Ino,
		Nlink:   uint64(sx.Nlink),
		Mode:    uint32(sx.Mode),
		Uid:     sx.Uid,
		Gid:     sx.Gid,
		Rdev:    unix.Mkdev(sx.Rdev_major, sx.Rdev_minor),
		Size:    int64(sx.Size),
		Blksize: int64(sx.Blksize),
		Blocks:  int64(sx.Blocks),
		Atim:    ts(sx.Atime),
		Mtim:    ts(sx.Mtime),
		Ctim:    ts(sx.Ctime),
	}
}

// readlink reads the target of the symlink rel.
func (b *baseDir) readlink(rel string) (string, error) {
	fd, err := b.open(rel, unix.O_PATH)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", fmt.Errorf("base %s: readlink: %w", rel, err)
	}
	return string(buf[:n]), nil
}

// baseEntry is one name in a base directory.
type baseEntry struct {
	name string
	ino  uint64
	typ  uint32
}

// readDir lists the base directory rel.
func (b *baseDir) readDir(rel string) ([]baseEntry, error) {
	fd, err := b.open(rel, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	var out []baseEntry
	buf := make([]byte, 32<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("base %s: readdir: %w", rel, err)
		}
		if n <= 0 {
			return out, nil
		}
		data := buf[:n]
		for len(data) > 0 {
			d := (*unix.Dirent)(pointer(data))
			reclen := int(d.Reclen)
			if reclen == 0 || reclen > len(data) {
				return nil, fmt.Errorf("base %s: bad dirent: %w", rel, ErrCorrupt)
			}
			name := direntName(data[:reclen])
			data = data[reclen:]
			if name == "." || name == ".." || d.Ino == 0 {
				continue
			}
			out = append(out, baseEntry{name: name, ino: d.Ino, typ: dtToMode(d.Type)})
		}
	}
}

// namesOf finds every path of the base that names inode ino (a file's hard
// links), in lexical order, by walking the whole base: only a file whose
// names in the layers and whose origin name all went needs it.
func (b *baseDir) namesOf(ino uint64) ([]string, error) {
	var out []string
	var walk func(rel string) error
	walk = func(rel string) error {
		ents, err := b.readDir(rel)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := path.Join(rel, e.name)
			if e.typ == syscall.S_IFDIR {
				if err := walk(p); err != nil {
					return err
				}
			} else if e.ino == ino {
				out = append(out, p)
			}
		}
		return nil
	}
	if err := walk(""); err != nil {
		return nil, err
	}
	sort.Strings(out)
	return out, nil
}

func dtToMode(t uint8) uint32 {
	switch t {
	case unix.DT_DIR:
		return syscall.S_IFDIR
	case unix.DT_LNK:
		return syscall.S_IFLNK
	case unix.DT_FIFO:
		return syscall.S_IFIFO
	case unix.DT_SOCK:
		return syscall.S_IFSOCK
	case unix.DT_CHR:
		return syscall.S_IFCHR
	case unix.DT_BLK:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

// xattrs reads the extended attributes of rel (files and directories only).
func (b *baseDir) xattrs(rel string, mode uint32) (map[string][]byte, error) {
	if mode&syscall.S_IFMT != syscall.S_IFREG && mode&syscall.S_IFMT != syscall.S_IFDIR {
		return map[string][]byte{}, nil
	}
	fd, err := b.open(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return nil, mapOSErr(err)
	}
	defer unix.Close(fd)
	out := map[string][]byte{}
	sz, err := unix.Flistxattr(fd, nil)
	if err != nil || sz == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return out, err
	}
	names := make([]byte, sz)
	sz, err = unix.Flistxattr(fd, names)
	if err != nil {
		return nil, err
	}
	for _, name := range splitNul(names[:sz]) {
		if !xattrAllowed(name) {
			continue
		}
		vs, err := unix.Fgetxattr(fd, name, nil)
		if err != nil {
			continue
		}
		v := make([]byte, vs)
		vs, err = unix.Fgetxattr(fd, name, v)
		if err != nil {
			continue
		}
		out[name] = v[:vs]
	}
	return out, nil
}

func splitNul(b []byte) []string {
	var out []string
	start := 0
	for i, c := range b {
		if c == 0 {
			if i > start {
				out = append(out, string(b[start:i]))
			}
			start = i + 1
		}
	}
	return out
}
