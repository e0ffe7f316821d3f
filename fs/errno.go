package fs

import (
	"errors"
	"log"
	"syscall"

	"github.com/strata-sandbox/strata/layers"
)

// errnoTable maps the store's sentinels to what a system call returns.
// go-fuse's own ToErrno turns wrapped errors into ENOSYS, so every error
// of this package goes through toErrno instead.
var errnoTable = []struct {
	err   error
	errno syscall.Errno
}{
	{layers.ErrNotFound, syscall.ENOENT},
	{layers.ErrExists, syscall.EEXIST},
	{layers.ErrNotEmpty, syscall.ENOTEMPTY},
	{layers.ErrNotDir, syscall.ENOTDIR},
	{layers.ErrIsDir, syscall.EISDIR},
	{layers.ErrInvalid, syscall.EINVAL},
	{layers.ErrReadOnly, syscall.EROFS},
	{layers.ErrNoSpace, syscall.ENOSPC},
	{layers.ErrNoAttr, syscall.ENODATA},
	{layers.ErrNotSupported, syscall.EOPNOTSUPP},
	{layers.ErrStale, syscall.ESTALE},
	{layers.ErrNameTooLong, syscall.ENAMETOOLONG},
	{layers.ErrTooLarge, syscall.EFBIG},
	{layers.ErrClosed, syscall.EIO},
	{layers.ErrCorrupt, syscall.EIO},
	{layers.ErrDataSync, syscall.EIO},
	{layers.ErrPastEnd, syscall.ENXIO},
}

func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	for _, e := range errnoTable {
		if errors.Is(err, e.err) {
			if e.errno == syscall.EIO {
				log.Printf("strata: %v", err)
			}
			return e.errno
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	log.Printf("strata: unexpected error: %v", err)
	return syscall.EIO
}
