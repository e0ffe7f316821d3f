package fs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fsxattr is struct fsxattr of linux/fs.h.
type fsxattr struct {
	Xflags, Extsize, Nextents, Projid, Cowextsize uint32
	Pad                                           [8]byte
}

func ioctlPtr(fd int, cmd uintptr, p unsafe.Pointer) syscall.Errno {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), cmd, uintptr(p))
	return errno
}

// TestFileAttributeIoctls: lsattr and chattr work as on a file system
// that keeps no inode flags: every file and directory, base or new,
// reports none, clearing them succeeds, setting one is refused with
// EOPNOTSUPP (nothing would enforce it), and other ioctls are not there.
func TestFileAttributeIoctls(t *testing.T) {
	sb := newSandbox(t, func(base string) { writeFile(t, filepath.Join(base, "base.txt"), "b") })
	writeFile(t, sb.path("new.txt"), "n")
	for _, p := range []string{"base.txt", "new.txt", "."} {
		f, err := os.Open(sb.path(p))
		mustNil(t, "open", err)
		fd := int(f.Fd())
		flags := uint32(0xffffffff)
		if errno := ioctlPtr(fd, unix.FS_IOC_GETFLAGS, unsafe.Pointer(&flags)); errno != 0 || flags != 0 {
			t.Errorf("%s: FS_IOC_GETFLAGS: flags %#x, %v; want 0", p, flags, errno)
		}
		var none uint32
		if errno := ioctlPtr(fd, unix.FS_IOC_SETFLAGS, unsafe.Pointer(&none)); errno != 0 {
			t.Errorf("%s: FS_IOC_SETFLAGS of no flags: %v", p, errno)
		}
		appendOnly := uint32(0x20) // FS_APPEND_FL
		if errno := ioctlPtr(fd, unix.FS_IOC_SETFLAGS, unsafe.Pointer(&appendOnly)); errno != syscall.EOPNOTSUPP {
			t.Errorf("%s: FS_IOC_SETFLAGS append-only: %v, want EOPNOTSUPP", p, errno)
		}
		x := fsxattr{Xflags: 0xffff, Extsize: 7}
		if errno := ioctlPtr(fd, fsIocFsGetXattr, unsafe.Pointer(&x)); errno != 0 || x != (fsxattr{}) {
			t.Errorf("%s: FS_IOC_FSGETXATTR: %+v, %v; want all zero", p, x, errno)
		}
		if errno := ioctlPtr(fd, fsIocFsSetXattr, unsafe.Pointer(&x)); errno != 0 {
			t.Errorf("%s: FS_IOC_FSSETXATTR of nothing: %v", p, errno)
		}
		x.Projid = 5
		if errno := ioctlPtr(fd, fsIocFsSetXattr, unsafe.Pointer(&x)); errno != syscall.EOPNOTSUPP {
			t.Errorf("%s: FS_IOC_FSSETXATTR of a project id: %v, want EOPNOTSUPP", p, errno)
		}
		var version uint64
		const fsIocGetVersion = 0x80087601 // _IOR('v', 1, long)
		if errno := ioctlPtr(fd, fsIocGetVersion, unsafe.Pointer(&version)); errno != syscall.ENOTTY {
			t.Errorf("%s: FS_IOC_GETVERSION: %v, want ENOTTY", p, errno)
		}
		f.Close()
	}
}
