package fs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/strata-sandbox/strata/layers"
	"golang.org/x/sys/unix"
)

// node is one inode of a mounted sandbox. It holds only its number; the
// view holds everything else.
type node struct {
	gofs.Inode
	m *Mount

	// mu protects the open counters, which keep the kernel's rule that an
	// inode is opened either with passthrough or with the page cache.
	mu          sync.Mutex
	ptOpens     int
	cachedOpens int

	// handles counts the kernel's handles of the inode and the opens
	// under way. A rollback that finds none may leave the inode's pages
	// in the kernel (InvalidateTouched): only a handle reaches them once
	// the inode is stale.
	handles atomic.Int32
}

var (
	_ = (gofs.NodeLookuper)((*node)(nil))
	_ = (gofs.NodeGetattrer)((*node)(nil))
	_ = (gofs.NodeSetattrer)((*node)(nil))
	_ = (gofs.NodeReaddirer)((*node)(nil))
	_ = (gofs.NodeMkdirer)((*node)(nil))
	_ = (gofs.NodeMknoder)((*node)(nil))
	_ = (gofs.NodeCreater)((*node)(nil))
	_ = (gofs.NodeSymlinker)((*node)(nil))
	_ = (gofs.NodeLinker)((*node)(nil))
	_ = (gofs.NodeUnlinker)((*node)(nil))
	_ = (gofs.NodeRmdirer)((*node)(nil))
	_ = (gofs.NodeRenamer)((*node)(nil))
	_ = (gofs.NodeReadlinker)((*node)(nil))
	_ = (gofs.NodeOpener)((*node)(nil))
	_ = (gofs.NodeStatxer)((*node)(nil))
	_ = (gofs.NodeGetxattrer)((*node)(nil))
	_ = (gofs.NodeSetxattrer)((*node)(nil))
	_ = (gofs.NodeRemovexattrer)((*node)(nil))
	_ = (gofs.NodeListxattrer)((*node)(nil))
	_ = (gofs.NodeStatfser)((*node)(nil))
	_ = (gofs.NodeFsyncer)((*node)(nil))
	_ = (gofs.NodeTmpfiler)((*node)(nil))
	_ = (gofs.NodeOnForgetter)((*node)(nil))
)

func (n *node) ino() uint64 { return n.StableAttr().Ino }

// stableAttr is the go-fuse identity of inode number ino of type mode:
// for a regular file or a directory, its current generation
// (generation.go).
func (m *Mount) stableAttr(ino uint64, mode uint32) gofs.StableAttr {
	id := gofs.StableAttr{Mode: mode & syscall.S_IFMT, Ino: ino}
	switch id.Mode {
	case syscall.S_IFREG:
		id.Gen = m.gens.file(ino)
	case syscall.S_IFDIR:
		id.Gen = m.gens.dir(ino)
	}
	return id
}

// stale reports whether n is a regular file's inode of a generation a
// rollback has moved on from: the kernel reaches it only through what it
// held from before.
func (n *node) stale() bool {
	id := n.StableAttr()
	return id.Mode == syscall.S_IFREG && id.Gen != n.m.gens.file(id.Ino)
}

func (n *node) view() *layers.View { return n.m.view }

func fillAttr(out *fuse.Attr, a layers.Attr, blksize uint32) {
	out.Ino = a.Ino
	out.Size = uint64(a.Size)
	out.Blocks = uint64(a.Blocks)
	out.Mode = a.Mode
	out.Nlink = a.Nlink
	out.Uid = a.UID
	out.Gid = a.GID
	out.Rdev = uint32(a.Rdev)
	out.Blksize = blksize
	out.Atime, out.Atimensec = splitNano(a.Atime)
	out.Mtime, out.Mtimensec = splitNano(a.Mtime)
	out.Ctime, out.Ctimensec = splitNano(a.Ctime)
}

// splitNano splits nanoseconds since the epoch into seconds (two's
// complement, as the kernel reads them signed) and nanoseconds in
// [0, 1e9): a time before 1970 keeps a valid nanosecond field.
func splitNano(ns int64) (uint64, uint32) {
	sec, nsec := ns/1e9, ns%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return uint64(sec), uint32(nsec)
}

// fillStatx is fillAttr for statx(2), with the birth time when known.
func fillStatx(out *fuse.Statx, a layers.Attr, blksize uint32) {
	out.Mask = unix.STATX_BASIC_STATS
	out.Blksize = blksize
	out.Nlink = a.Nlink
	out.Uid, out.Gid = a.UID, a.GID
	out.Mode = uint16(a.Mode)
	out.Ino = a.Ino
	out.Size = uint64(a.Size)
	out.Blocks = uint64(a.Blocks)
	out.RdevMajor, out.RdevMinor = unix.Major(a.Rdev), unix.Minor(a.Rdev)
	sx := func(ns int64) fuse.SxTime {
		sec, nsec := splitNano(ns)
		return fuse.SxTime{Sec: sec, Nsec: nsec}
	}
	out.Atime, out.Mtime, out.Ctime = sx(a.Atime), sx(a.Mtime), sx(a.Ctime)
	if a.Btime != 0 {
		out.Mask |= unix.STATX_BTIME
		out.Btime = sx(a.Btime)
	}
}

func (n *node) child(ctx context.Context, a layers.Attr, out *fuse.EntryOut) *gofs.Inode {
	fillAttr(&out.Attr, a, n.m.blksize)
	id := n.m.stableAttr(a.Ino, a.Mode)
	// An inode go-fuse has already (a name looked up again after a
	// rollback, another name of a file) is the one it would keep: a new
	// one would be discarded and stay in the index for good.
	if in := n.m.index.live(id); in != nil {
		n.m.revives.put(ctx, in) // a FORGET may take it out of the index meanwhile
		return in
	}
	ch := n.NewInode(ctx, &node{m: n.m}, id)
	n.m.index.add(a.Ino, ch)
	return ch
}

// caller is who asks in ctx: the owner of what it creates, and, for a
// request that creates, the umask the view applies (umask.go).
func (n *node) caller(ctx context.Context) layers.Caller {
	var lc layers.Caller
	if c, ok := fuse.FromContext(ctx); ok {
		lc.UID, lc.GID = c.Uid, c.Gid
	}
	if n.m.umasks != nil {
		lc.Umask, lc.HasUmask = n.m.umasks.masks.get(ctx)
	}
	return lc
}

// Lookup finds a child by name.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	// The kernel passes names of up to 1024 bytes; a name no entry can have
	// is too long, not missing, as local file systems answer.
	if len(name) > layers.MaxNameLen {
		return nil, syscall.ENAMETOOLONG
	}
	epoch, drops := n.view().Epoch(), n.m.negs.dropsNow()
	a, err := n.view().Lookup(n.ino(), name)
	if err != nil {
		errno := toErrno(err)
		if errno == syscall.ENOENT {
			n.cacheMissing(name, epoch, drops, out)
		}
		return nil, errno
	}
	return n.child(ctx, a, out), 0
}

// Getattr reports the inode's attributes.
func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	a, err := n.view().GetAttr(n.ino())
	if err != nil {
		return toErrno(err)
	}
	fillAttr(&out.Attr, a, n.m.blksize)
	return 0
}

// Statx is Getattr for statx(2): the same attributes and the birth time.
func (n *node) Statx(ctx context.Context, fh gofs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	a, err := n.view().GetAttr(n.ino())
	if err != nil {
		return toErrno(err)
	}
	fillStatx(&out.Statx, a, n.m.blksize)
	return 0
}

// Setattr changes mode, owner, size or times.
func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.stale() {
		// Only handles and dentries from before a rollback reach a stale
		// inode: fchmod, fchown and futimens of an old handle fail as
		// its I/O does; a path is looked up again by the kernel.
		return syscall.ESTALE
	}
	if h, ok := fh.(*handle); ok {
		if errno := h.check(); errno != 0 {
			return errno
		}
	}
	var set layers.SetAttrIn
	if m, ok := in.GetMode(); ok {
		set.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		set.UID = &u
	}
	if g, ok := in.GetGID(); ok {
		set.GID = &g
	}
	if s, ok := in.GetSize(); ok {
		sz := int64(s)
		set.Size = &sz
	}
	if t, ok := in.GetATime(); ok {
		ns := layers.NanoOf(t.Unix(), int64(t.Nanosecond()))
		set.Atime = &ns
	}
	if t, ok := in.GetMTime(); ok {
		ns := layers.NanoOf(t.Unix(), int64(t.Nanosecond()))
		set.Mtime = &ns
	}
	// A truncate by a caller without CAP_FSETID, or a chown (killpriv.go).
	set.KillSuidgid = in.Valid&fuse.FATTR_KILL_SUIDGID != 0
	if set.KillSuidgid {
		set.InGroup = inGroup(ctx)
	}
	a, err := n.view().SetAttr(n.ino(), set)
	if err != nil {
		return toErrno(err)
	}
	fillAttr(&out.Attr, a, n.m.blksize)
	return 0
}

// Readdir lists the merged directory.
func (n *node) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	ents, err := n.view().ReadDir(n.ino())
	if err != nil {
		return nil, toErrno(err)
	}
	// "." and "..", as every Linux file system lists them (getdents
	// users, rewinddir and d_type checks count on them). The root's
	// parent is the root itself.
	parent := n.ino()
	if _, p := n.Parent(); p != nil {
		parent = p.StableAttr().Ino
	}
	list := make([]fuse.DirEntry, 0, len(ents)+2)
	list = append(list,
		fuse.DirEntry{Name: ".", Ino: n.ino(), Mode: syscall.S_IFDIR},
		fuse.DirEntry{Name: "..", Ino: parent, Mode: syscall.S_IFDIR})
	for _, e := range ents {
		list = append(list, fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode})
	}
	return gofs.NewListDirStream(list), 0
}

// Mkdir creates a directory.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	a, err := n.view().Mkdir(n.ino(), name, mode, n.caller(ctx))
	if err != nil {
		return nil, toErrno(err)
	}
	n.m.negs.forget(n.ino(), name)
	return n.child(ctx, a, out), 0
}

// Mknod creates a fifo, socket, device or regular file.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	a, err := n.view().Mknod(n.ino(), name, mode, uint64(dev), n.caller(ctx))
	if err != nil {
		return nil, toErrno(err)
	}
	n.m.negs.forget(n.ino(), name)
	return n.child(ctx, a, out), 0
}

// Create creates and opens a regular file.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	a, err := n.view().Mknod(n.ino(), name, syscall.S_IFREG|mode&07777, 0, n.caller(ctx))
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	n.m.negs.forget(n.ino(), name)
	ch := n.child(ctx, a, out)
	cn := ch.Operations().(*node)
	fh, fl, errno := cn.open(flags, false)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, fh, fl, 0
}

// Tmpfile creates an open file with no name (O_TMPFILE).
func (n *node) Tmpfile(ctx context.Context, flags, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	a, err := n.view().Tmpfile(n.ino(), mode, n.caller(ctx))
	if err != nil {
		return nil, nil, 0, toErrno(err)
	}
	fillAttr(&out.Attr, a, n.m.blksize)
	ch := n.NewInode(ctx, &node{m: n.m}, n.m.stableAttr(a.Ino, syscall.S_IFREG))
	n.m.index.add(a.Ino, ch)
	cn := ch.Operations().(*node)
	// The view counted the file as open already; the handle's release ends it.
	cn.handles.Add(1)
	h := &handle{n: cn, flags: flags, epoch: n.view().Epoch()}
	cn.mu.Lock()
	cn.cachedOpens++
	cn.mu.Unlock()
	return ch, h, fuse.FOPEN_KEEP_CACHE, 0
}

// OnForget lets the view drop what it keeps of an inode the kernel let go,
// once the kernel holds no inode of its number (of any generation).
func (n *node) OnForget() {
	if !n.m.index.remove(n.ino(), &n.Inode) {
		n.m.gens.forget(n.ino())
		n.view().Forget(n.ino())
	}
}

// Symlink creates a symlink.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	a, err := n.view().Symlink(n.ino(), name, target, n.caller(ctx))
	if err != nil {
		return nil, toErrno(err)
	}
	n.m.negs.forget(n.ino(), name)
	return n.child(ctx, a, out), 0
}

// Link gives target another name in this directory.
func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	in := target.EmbeddedInode()
	a, err := n.view().Link(in.StableAttr().Ino, n.ino(), name)
	if err != nil {
		return nil, toErrno(err)
	}
	n.m.negs.forget(n.ino(), name)
	// The new name is of the inode go-fuse has: a new one would only be
	// discarded in favour of it.
	fillAttr(&out.Attr, a, n.m.blksize)
	return in, 0
}

// Unlink removes a name.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return toErrno(n.view().Unlink(n.ino(), name))
}

// Rmdir removes an empty directory.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	dead := n.GetChild(name)
	if err := n.view().Rmdir(n.ino(), name); err != nil {
		return toErrno(err)
	}
	n.m.buried(dead)
	return 0
}

// buried notes that the kernel made directory inode in (if not nil) dead:
// a directory removed, or replaced by a rename, is marked dead in the
// kernel (S_DEAD) for as long as anything holds it, and a dead directory
// lists nothing and finds no name. A rollback can bring the directory back
// under the same number, and the lookup must then give the kernel a new
// inode: the directory moves to a new generation (generation.go).
func (m *Mount) buried(in *gofs.Inode) {
	if in != nil && in.StableAttr().Mode == syscall.S_IFDIR {
		m.gens.bury(in.StableAttr().Ino)
	}
}

// Rename moves a name, directories included, wherever they come from.
func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	var lf uint32
	if flags&1 != 0 { // RENAME_NOREPLACE
		lf |= layers.RenameNoReplace
	}
	if flags&2 != 0 { // RENAME_EXCHANGE
		lf |= layers.RenameExchange
	}
	if flags&4 != 0 { // RENAME_WHITEOUT (the kernel checked CAP_MKNOD)
		lf |= layers.RenameWhiteout
	}
	if flags&^7 != 0 {
		return syscall.EINVAL
	}
	to := newParent.EmbeddedInode().StableAttr().Ino
	var replaced *gofs.Inode
	if lf&layers.RenameExchange == 0 {
		replaced = newParent.EmbeddedInode().GetChild(newName)
	}
	if err := n.view().RenameWhiteoutAs(n.ino(), name, to, newName, lf, n.caller(ctx)); err != nil {
		return toErrno(err)
	}
	n.m.buried(replaced)
	if lf&layers.RenameWhiteout != 0 {
		// The old name names the whiteout now, not nothing.
		n.m.negs.forget(n.ino(), name)
	}
	n.m.negs.forget(to, newName)
	return 0
}

// Readlink returns a symlink's target.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	t, err := n.view().Readlink(n.ino())
	if err != nil {
		return nil, toErrno(err)
	}
	return []byte(t), 0
}

// Getxattr reads an extended attribute.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	val, err := n.view().GetXattr(n.ino(), attr)
	if err != nil {
		return 0, toErrno(err)
	}
	if len(dest) == 0 {
		return uint32(len(val)), 0
	}
	if len(dest) < len(val) {
		return uint32(len(val)), syscall.ERANGE
	}
	return uint32(copy(dest, val)), 0
}

// Setxattr sets an extended attribute.
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if n.stale() {
		return syscall.ESTALE // as Setattr
	}
	if data == nil {
		data = []byte{}
	}
	flags &= layers.XattrCreate | layers.XattrReplace
	if attr == layers.XattrACLAccess && n.m.raw != nil && n.m.raw.mustKill(ctx) {
		flags |= layers.XattrKillSgid
	}
	return toErrno(n.view().SetXattr(n.ino(), attr, data, flags))
}

// Removexattr removes an extended attribute.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if n.stale() {
		return syscall.ESTALE // as Setattr
	}
	return toErrno(n.view().SetXattr(n.ino(), attr, nil, 0))
}

// Listxattr lists extended attribute names.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	names, err := n.view().ListXattr(n.ino())
	if err != nil {
		return 0, toErrno(err)
	}
	sz := 0
	for _, s := range names {
		sz += len(s) + 1
	}
	if len(dest) == 0 {
		return uint32(sz), 0
	}
	if len(dest) < sz {
		return uint32(sz), syscall.ERANGE
	}
	off := 0
	for _, s := range names {
		off += copy(dest[off:], s)
		dest[off] = 0
		off++
	}
	return uint32(sz), 0
}

// Statfs reports the space of the store's file system.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	st, err := n.view().StatFS()
	if err != nil {
		return toErrno(err)
	}
	out.Blocks = st.Blocks
	out.Bfree = st.Bfree
	out.Bavail = st.Bavail
	out.Files = st.Files
	out.Ffree = st.Ffree
	out.Bsize = uint32(st.Bsize)
	out.Frsize = uint32(st.Frsize)
	out.NameLen = layers.MaxNameLen
	return 0
}

// Fsync makes the sandbox's changes durable (directories included).
func (n *node) Fsync(ctx context.Context, f gofs.FileHandle, flags uint32) syscall.Errno {
	return toErrno(n.view().Fsync())
}
