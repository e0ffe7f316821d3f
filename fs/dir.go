package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var _ = (gofs.NodeOpendirHandler)((*node)(nil))

// OpendirHandle opens a directory and lets the kernel keep its listing
// (FOPEN_CACHE_DIR, FOPEN_KEEP_CACHE): a listing read again (ls, a build
// walking its tree) is served from the kernel's cache instead of a
// READDIRPLUS round trip per page, each of which looks up every entry.
// The kernel drops the cache itself when it changes the directory, and a
// repoint drops it (fs.Mount.Invalidate and InvalidateTouched notify
// every directory whose entries changed).
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{n: n}, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

// dirHandle is an open directory. Its listing is read from the view at
// the first readdir and kept until the handle is released or rewound, so
// a reader sees one state of the directory and the offsets it was given
// stay good for seekdir; a rewind (rewinddir, a seek to 0) reads the
// directory anew, as POSIX asks. The kernel's cached listing is rebuilt
// from offset 0 after it changed the directory, so a stale one would
// otherwise be kept for every later open.
type dirHandle struct {
	n  *node
	ds gofs.DirStream
}

var (
	_ = (gofs.FileReaddirenter)((*dirHandle)(nil))
	_ = (gofs.FileSeekdirer)((*dirHandle)(nil))
	_ = (gofs.FileReleasedirer)((*dirHandle)(nil))
)

func (d *dirHandle) stream(ctx context.Context) syscall.Errno {
	if d.ds != nil {
		return 0
	}
	ds, errno := d.n.Readdir(ctx)
	if errno != 0 {
		return errno
	}
	d.ds = ds
	return 0
}

// Readdirent returns the next entry, or nil at the end.
func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if errno := d.stream(ctx); errno != 0 {
		return nil, errno
	}
	if !d.ds.HasNext() {
		return nil, 0
	}
	e, errno := d.ds.Next()
	return &e, errno
}

// Seekdir moves to the entry at off (rewinddir, seekdir).
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off == 0 {
		if d.ds != nil {
			d.ds.Close()
			d.ds = nil
		}
		return 0
	}
	if errno := d.stream(ctx); errno != 0 {
		return errno
	}
	if sd, ok := d.ds.(gofs.FileSeekdirer); ok {
		return sd.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

// Releasedir lets go of the listing.
func (d *dirHandle) Releasedir(ctx context.Context, releaseFlags uint32) {
	if d.ds != nil {
		d.ds.Close()
	}
}
