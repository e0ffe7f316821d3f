package fs

import (
	"context"
	"errors"
	"io"
	"math"
	"os"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// handle is an open file. It remembers the epoch of the view it was
// opened in: after a rollback its I/O fails with ESTALE.
type handle struct {
	n           *node
	flags       uint32
	epoch       uint64
	passthrough bool
	base        *os.File // the base file, for passthrough handles
}

var (
	_ = (gofs.FileReader)((*handle)(nil))
	_ = (gofs.FileWriter)((*handle)(nil))
	_ = (gofs.FileFsyncer)((*handle)(nil))
	_ = (gofs.FileReleaser)((*handle)(nil))
	_ = (gofs.FileLseeker)((*handle)(nil))
	_ = (gofs.FileAllocater)((*handle)(nil))
	_ = (gofs.FileGetattrer)((*handle)(nil))
)

// ptHandle is a handle the kernel may serve from the base file directly.
type ptHandle struct{ *handle }

var _ = (gofs.FilePassthroughFder)((*ptHandle)(nil))

// PassthroughFd hands the kernel the base file to read from.
func (h *ptHandle) PassthroughFd() (int, bool) { return int(h.base.Fd()), true }

// Open opens a file of the sandbox.
func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return n.open(flags, true)
}

func (n *node) open(flags uint32, mayPassthrough bool) (gofs.FileHandle, uint32, syscall.Errno) {
	// Counted before the checks of staleness: a rollback that found no
	// handle moved the inode to a new generation before this open's view
	// call returns (it holds the view), and the check after it refuses.
	n.handles.Add(1)
	fh, fl, errno := n.openCounted(flags, mayPassthrough)
	if errno != 0 {
		n.handles.Add(-1)
	}
	return fh, fl, errno
}

func (n *node) openCounted(flags uint32, mayPassthrough bool) (gofs.FileHandle, uint32, syscall.Errno) {
	if n.stale() {
		// A dentry from before a rollback: the kernel looks the path up
		// again and opens the file's new inode (generation.go).
		return nil, 0, syscall.ESTALE
	}
	v := n.view()
	if v.ReadOnly() && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	if err := v.Open(n.ino()); err != nil {
		return nil, 0, toErrno(err)
	}
	if n.stale() {
		// A rollback moved the file while this open waited for the view:
		// the kernel may still hold the old inode's pages, which the
		// rollback left there, having seen no handle. The kernel opens
		// the new inode instead.
		v.Release(n.ino())
		return nil, 0, syscall.ESTALE
	}
	h := &handle{n: n, flags: flags, epoch: v.Epoch()}
	n.mu.Lock()
	defer n.mu.Unlock()
	if mayPassthrough && n.m.passthrough && n.cachedOpens == 0 && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		if f, err := v.BaseFile(n.ino()); err == nil && f != nil {
			h.base = f
			h.passthrough = true
			n.ptOpens++
			return &ptHandle{h}, 0, 0
		}
	}
	if n.ptOpens > 0 {
		// The kernel refuses cached opens of an inode in passthrough mode.
		return h, fuse.FOPEN_DIRECT_IO, 0
	}
	n.cachedOpens++
	return h, fuse.FOPEN_KEEP_CACHE, 0
}

func (h *handle) check() syscall.Errno {
	if h.epoch != h.n.view().Epoch() {
		return syscall.ESTALE
	}
	return 0
}

// Read reads from the merged file.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if errno := h.check(); errno != 0 {
		return nil, errno
	}
	if h.base != nil {
		// Passthrough was refused by the kernel; read the base file ourselves.
		n, err := h.base.ReadAt(dest, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, toErrno(err)
		}
		return fuse.ReadResultVector([][]byte{dest[:n]}), 0
	}
	n, err := h.n.view().ReadAt(h.n.ino(), dest, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, toErrno(err)
	}
	return fuse.ReadResultVector([][]byte{dest[:n]}), 0
}

// Write writes into the active layer.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if errno := h.check(); errno != 0 {
		return 0, errno
	}
	if h.n.m.raw.mustKill(ctx) {
		// Before the data, as the kernel's own file_remove_privs.
		if err := h.n.view().KillSuidgid(h.n.ino(), inGroup(ctx)); err != nil {
			return 0, toErrno(err)
		}
	}
	n, err := h.n.view().WriteAt(h.n.ino(), data, off, h.flags&syscall.O_APPEND != 0)
	if err != nil {
		return 0, toErrno(err)
	}
	return uint32(n), 0
}

// Fsync makes everything written durable.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return toErrno(h.n.view().Fsync())
}

// Release closes the handle.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	n := h.n
	n.mu.Lock()
	if h.passthrough {
		n.ptOpens--
	} else if n.cachedOpens > 0 {
		n.cachedOpens--
	}
	n.mu.Unlock()
	if h.base != nil {
		h.base.Close()
	}
	n.view().Release(n.ino())
	n.handles.Add(-1)
	return 0
}

// Getattr through a handle works after the last name is gone.
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.n.Getattr(ctx, nil, out)
}

// Lseek implements SEEK_DATA and SEEK_HOLE from the layers' block maps
// and the base file's own holes (layers.View.Seek), so cp and tar skip
// what was never written. The other whences the kernel answers itself.
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	if errno := h.check(); errno != 0 {
		return 0, errno
	}
	if whence != unix.SEEK_DATA && whence != unix.SEEK_HOLE {
		return 0, syscall.EINVAL
	}
	if off > math.MaxInt64 {
		return 0, syscall.ENXIO
	}
	at, err := h.n.view().Seek(h.n.ino(), int64(off), whence == unix.SEEK_DATA)
	if err != nil {
		return 0, toErrno(err)
	}
	return uint64(at), 0
}

// Allocate implements fallocate: reserving (mode 0, KEEP_SIZE), punching
// holes (PUNCH_HOLE|KEEP_SIZE) and zeroing ranges (ZERO_RANGE).
func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if errno := h.check(); errno != 0 {
		return errno
	}
	keep := mode&unix.FALLOC_FL_KEEP_SIZE != 0
	v, ino := h.n.view(), h.n.ino()
	if !allocModeOK(mode) {
		return syscall.EOPNOTSUPP
	}
	// The kernel drops privileges itself only where it writes (and leaves
	// even that to the server here, killpriv.go); for FALLOCATE it sends
	// no flag, where ext4's fallocate drops them as a write does. Root
	// stands for a caller with CAP_FSETID.
	if c, ok := fuse.FromContext(ctx); ok && c.Uid != 0 {
		if err := v.KillSuidgid(ino, inGroup(ctx)); err != nil {
			return toErrno(err)
		}
	}
	switch mode &^ unix.FALLOC_FL_KEEP_SIZE {
	case 0:
		return toErrno(v.Allocate(ino, int64(off), int64(size), keep))
	case unix.FALLOC_FL_PUNCH_HOLE: // only with KEEP_SIZE, as Linux
		return toErrno(v.Zero(ino, int64(off), int64(size), true))
	case unix.FALLOC_FL_ZERO_RANGE:
		return toErrno(v.ZeroRange(ino, int64(off), int64(size), keep))
	}
	return syscall.EOPNOTSUPP
}

// allocModeOK reports whether Allocate serves fallocate mode: plain
// allocation, a zeroed range (with or without KEEP_SIZE) or a punched
// hole (with it, as Linux asks); not COLLAPSE_RANGE, INSERT_RANGE and the
// rest.
func allocModeOK(mode uint32) bool {
	switch mode &^ unix.FALLOC_FL_KEEP_SIZE {
	case 0, unix.FALLOC_FL_ZERO_RANGE:
		return true
	case unix.FALLOC_FL_PUNCH_HOLE:
		return mode&unix.FALLOC_FL_KEEP_SIZE != 0
	}
	return false
}

var _ = (gofs.NodeCopyFileRanger)((*node)(nil))

// copyChunk is how much CopyFileRange moves per read and write.
const copyChunk = 1 << 20

// CopyFileRange copies within the mount without the data crossing into
// the caller and back: the kernel would otherwise fall back to reading
// and writing it through two round trips per chunk. It stops at the
// source's end, and copies at most 1 GiB per call (the reply counts in 32
// bits); copy_file_range's callers loop.
func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	if flags != 0 {
		return 0, syscall.EINVAL
	}
	in, inOK := handleOf(fhIn)
	dst, outOK := handleOf(fhOut)
	if !inOK || !outOK {
		return 0, syscall.EBADF
	}
	if errno := in.check(); errno != 0 {
		return 0, errno
	}
	if errno := dst.check(); errno != 0 {
		return 0, errno
	}
	if offIn > math.MaxInt64 || offOut > math.MaxInt64 {
		return 0, syscall.EINVAL
	}
	length = min(length, 1<<30)
	v := n.view()
	buf := make([]byte, min(length, copyChunk))
	var done uint64
	for done < length {
		chunk := buf[:min(uint64(len(buf)), length-done)]
		got, err := v.ReadAt(n.ino(), chunk, int64(offIn+done))
		if err != nil && !errors.Is(err, io.EOF) {
			return uint32(done), toErrno(err)
		}
		if got == 0 {
			break
		}
		wrote, err := v.WriteAt(dst.n.ino(), chunk[:got], int64(offOut+done), false)
		done += uint64(wrote)
		if err != nil {
			if done > 0 {
				return uint32(done), 0 // a short copy; the next call reports the error
			}
			return 0, toErrno(err)
		}
		if got < len(chunk) {
			break
		}
	}
	return uint32(done), 0
}

// handleOf is the handle behind a go-fuse file handle of this mount.
func handleOf(fh gofs.FileHandle) (*handle, bool) {
	switch h := fh.(type) {
	case *handle:
		return h, true
	case *ptHandle:
		return h.handle, true
	}
	return nil, false
}
