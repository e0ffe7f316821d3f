package fs

import (
	"context"
	"encoding/binary"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// The file-attribute ioctls lsattr, chattr and xfs_io use, which the kernel
// forwards as FUSE_IOCTL. A sandbox keeps no inode flags (no immutable,
// append-only, no-dump ...), so it reports none, accepts a request that
// sets none (chattr -a of a file without it), and refuses any other with
// EOPNOTSUPP, as fuse-overlayfs does: a flag it took but did not enforce
// would lie.
const (
	fsIocGetFlags   = unix.FS_IOC_GETFLAGS
	fsIocSetFlags   = unix.FS_IOC_SETFLAGS
	fsIoc32GetFlags = 0x80046601 // _IOR('f', 1, int)
	fsIoc32SetFlags = 0x40046602 // _IOW('f', 2, int)
	fsIocFsGetXattr = 0x801c581f // _IOR('X', 31, struct fsxattr)
	fsIocFsSetXattr = 0x401c5820 // _IOW('X', 32, struct fsxattr)
)

var _ = (gofs.NodeIoctler)((*node)(nil))

// Ioctl answers the file-attribute ioctls (above); any other is not one
// this file system has (ENOTTY).
func (n *node) Ioctl(ctx context.Context, f gofs.FileHandle, cmd uint32, arg uint64, input []byte, output []byte) (int32, syscall.Errno) {
	if _, err := n.view().GetAttr(n.ino()); err != nil {
		return 0, toErrno(err)
	}
	switch cmd {
	case fsIocGetFlags, fsIoc32GetFlags, fsIocFsGetXattr:
		clear(output)
		return 0, 0
	case fsIocSetFlags, fsIoc32SetFlags:
		for _, b := range input {
			if b != 0 {
				return 0, syscall.EOPNOTSUPP
			}
		}
		return 0, 0
	case fsIocFsSetXattr:
		// struct fsxattr: xflags, extsize, nextents (ignored on set),
		// projid, cowextsize, then padding.
		if len(input) < 20 {
			return 0, syscall.EINVAL
		}
		for _, off := range []int{0, 4, 12, 16} {
			if binary.LittleEndian.Uint32(input[off:]) != 0 {
				return 0, syscall.EOPNOTSUPP
			}
		}
		return 0, 0
	}
	return 0, syscall.ENOTTY
}
