package fs

import (
	"context"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The mount negotiates FUSE_DONT_MASK along with POSIX ACLs: a file system
// with ACLs must not have the creator's umask applied when the directory
// has a default ACL (POSIX: the default ACL stands in for it), so the
// kernel sends the mode as asked with the umask beside it, and the view
// applies one or the other (layers.Caller.Umask). Without DONT_MASK the
// kernel would apply both.

// umaskFS passes the umask of a request that creates an inode, which
// go-fuse's node API does not hand on, to the node that serves it: by the
// request's cancel channel, as killprivFS does.
type umaskFS struct {
	fuse.RawFileSystem
	masks sync.Map // cancel channel of a creating request -> its umask
}

func (u *umaskFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	u.masks.Store(cancel, in.Umask)
	defer u.masks.Delete(cancel)
	return u.RawFileSystem.Create(cancel, in, name, out)
}

func (u *umaskFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	u.masks.Store(cancel, in.Umask)
	defer u.masks.Delete(cancel)
	return u.RawFileSystem.Tmpfile(cancel, in, out)
}

func (u *umaskFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	u.masks.Store(cancel, in.Umask)
	defer u.masks.Delete(cancel)
	return u.RawFileSystem.Mknod(cancel, in, name, out)
}

func (u *umaskFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	u.masks.Store(cancel, in.Umask)
	defer u.masks.Delete(cancel)
	return u.RawFileSystem.Mkdir(cancel, in, name, out)
}

// umask is the umask of the creating request of ctx, if it is one.
func (u *umaskFS) umask(ctx context.Context) (uint32, bool) {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return 0, false
	}
	m, ok := u.masks.Load(fc.Cancel)
	if !ok {
		return 0, false
	}
	return m.(uint32), true
}
