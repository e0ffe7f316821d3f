package fs

import "github.com/hanwen/go-fuse/v2/fuse"

// The mount negotiates FUSE_DONT_MASK along with POSIX ACLs: a file system
// with ACLs must not have the creator's umask applied when the directory
// has a default ACL (POSIX: the default ACL stands in for it), so the
// kernel sends the mode as asked with the umask beside it, and the view
// applies one or the other (layers.Caller.Umask). Without DONT_MASK the
// kernel would apply both.

// umaskFS passes the umask of a request that creates an inode, which
// go-fuse's node API does not hand on, to the node that serves it
// (byRequest).
type umaskFS struct {
	fuse.RawFileSystem
	masks byRequest[uint32]
}

func (u *umaskFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer u.masks.set(cancel, in.Umask)()
	return u.RawFileSystem.Create(cancel, in, name, out)
}

func (u *umaskFS) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer u.masks.set(cancel, in.Umask)()
	return u.RawFileSystem.Tmpfile(cancel, in, out)
}

func (u *umaskFS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer u.masks.set(cancel, in.Umask)()
	return u.RawFileSystem.Mknod(cancel, in, name, out)
}

func (u *umaskFS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer u.masks.set(cancel, in.Umask)()
	return u.RawFileSystem.Mkdir(cancel, in, name, out)
}
