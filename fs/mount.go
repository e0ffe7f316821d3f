package fs

import (
	"fmt"
	"os"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/strata-sandbox/strata/layers"
	"golang.org/x/sys/unix"
)

// Options say how a sandbox is mounted.
type Options struct {
	// AllowOther lets users other than the mounting one in (the kernel
	// still checks permissions: the mount uses default_permissions).
	AllowOther bool
	// Debug logs every FUSE request.
	Debug bool
	// NoPassthrough turns off passthrough reads of untouched base files
	// on read-only mounts. Writable mounts never use passthrough: while an
	// inode has a passthrough handle the kernel requires every other open
	// of it to be passthrough too (else the open fails with EIO), and a
	// write must not reach the base file, so a reader would lock writers
	// out of the file.
	NoPassthrough bool
	// NoExec refuses to execute programs from the sandbox (mount's
	// noexec), for platforms that let an agent write files but run only
	// what they installed.
	NoExec bool
}

// Mount is a live FUSE mount of one sandbox's view.
type Mount struct {
	view        *layers.View
	dir         string
	server      *fuse.Server
	served      chan struct{} // closed once the server is done and its Ps are given back
	root        *node
	blksize     uint32
	passthrough bool
	index       inodeIndex  // the inodes the kernel may hold, by number
	negs        negatives   // the missing names the kernel may hold
	gens        generations // of the kernel inodes of files and directories
	raw         *killprivFS
	umasks      *umaskFS
	revives     byRequest[*gofs.Inode] // live inodes lookups and links handed back (reviveFS)
}

// repointed moves the regular files a repoint touched, among those the
// kernel holds, to a new generation (generation.go); t nil: every file.
// Directories keep their inodes, so a working directory stays where it
// is, unless one died (Mount.buried).
func (m *Mount) repointed(t *layers.Touched) {
	if t == nil {
		m.gens.touchAll()
		return
	}
	m.gens.repoint(m.index.holds, m.index.heldFiles(t.Inodes))
}

// Timeouts of the kernel's caches. Only this process changes the tree, and
// a repoint invalidates what the kernel holds, so they can be long. Missing
// names are cached as long (negative.go), since the mount keeps the list a
// repoint needs.
var (
	entryTimeout = time.Hour
	attrTimeout  = time.Hour
)

// New mounts v at dir and returns once the mount is live. As root it
// mounts directly; otherwise through fusermount3. While the mount is
// served, the process's GOMAXPROCS is raised by the readers one server
// may block (once for all mounts), unless the GOMAXPROCS environment
// variable is set (sched.go).
func New(dir string, v *layers.View, o Options) (*Mount, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("mountpoint %s: %w", dir, layers.ErrNotDir)
	}
	m := &Mount{view: v, dir: dir, blksize: uint32(min(v.BlockSize(), 1<<20)), passthrough: !o.NoPassthrough && v.ReadOnly()}
	m.root = &node{m: m}
	v.OnRepoint(m.repointed)
	mopts := []string{"default_permissions"}
	if v.ReadOnly() {
		mopts = append(mopts, "ro")
	}
	if os.Geteuid() != 0 {
		// Users other than root mount through fusermount3, which takes
		// mount flags as options (DirectMountFlags serve direct mounts
		// only, and a direct mount refuses "noatime" among its options).
		mopts = append(mopts, "noatime")
		if o.NoExec {
			mopts = append(mopts, "noexec")
		}
	}
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOATIME)
	if o.NoExec {
		flags |= unix.MS_NOEXEC
	}
	if v.ReadOnly() {
		// The mount too, not only the superblock: findmnt and mount(8)
		// show a read-only sandbox as ro.
		flags |= unix.MS_RDONLY
	}
	opts := &gofs.Options{
		MountOptions: fuse.MountOptions{
			FsName:      "strata:" + v.Info().Name,
			Name:        "strata",
			DirectMount: true,
			// No set-id programs or device nodes take effect through a
			// sandbox (the defaults, which setting flags replaces), and
			// noatime says what the mount does: reads never change a
			// file's atime, which would make every file read a change of
			// the layer.
			DirectMountFlags: flags,
			AllowOther:       o.AllowOther,
			Options:          mopts,
			MaxWrite:         1 << 20,
			MaxReadAhead:     1 << 20,
			Debug:            o.Debug,
			// See killpriv.go and umask.go.
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_DONT_MASK | fuse.CAP_SETXATTR_EXT,
			// POSIX ACLs: the kernel checks access against them; the
			// view keeps them in step with the mode (layers/acl.go).
			EnableAcl: true,
		},
		EntryTimeout:    &entryTimeout,
		AttrTimeout:     &attrTimeout,
		NegativeTimeout: &negativeTimeout,
		RootStableAttr:  &gofs.StableAttr{Ino: layers.RootIno},
		// Mode 0 is a real mode (chmod 0); without this go-fuse shows it as 0644.
		NullPermissions: true,
	}
	// gofs.Mount, with the raw file system wrapped (killpriv.go, noflush.go,
	// umask.go, index.go).
	m.umasks = &umaskFS{RawFileSystem: &reviveFS{RawFileSystem: noFlushFS{gofs.NewNodeFS(m.root, opts)}, m: m}}
	m.raw = &killprivFS{RawFileSystem: m.umasks}
	// sched.go: yieldFS outermost, and Ps for the server's readers.
	server, giveBack, err := withReaderProcs(func() (*fuse.Server, error) {
		return fuse.NewServer(yieldFS{m.raw}, dir, &opts.MountOptions)
	})
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	m.served = make(chan struct{})
	go func() {
		defer close(m.served)
		server.Serve()
		giveBack()
	}()
	if err := server.WaitMount(); err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	m.server = server
	raiseReadahead(dir)
	return m, nil
}

// readaheadKB is the kernel's readahead window for the mount. The default
// of 128 KiB makes a cold sequential read of a base file cost a FUSE round
// trip per 128 KiB; 1 MiB (our MaxReadAhead) doubled its throughput
// (dd of a 1 GiB base file: 371 MB/s -> 810 MB/s).
const readaheadKB = 1024

// raiseReadahead sets the mount's readahead window. Only root may; for
// other users the kernel default stays, which is slower but correct.
func raiseReadahead(dir string) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return
	}
	bdi := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	_ = os.WriteFile(bdi, []byte(fmt.Sprintf("%d\n", readaheadKB)), 0)
}

// Dir is the mountpoint.
func (m *Mount) Dir() string { return m.dir }

// View is the sandbox view the mount serves.
func (m *Mount) View() *layers.View { return m.view }

// Wait blocks until the mount is gone (unmounted by anyone).
func (m *Mount) Wait() {
	m.server.Wait()
	<-m.served
}

// Unmount detaches the mount; it retries while the kernel reports it busy
// for a moment after the last file closed.
func (m *Mount) Unmount() error {
	var err error
	for i := 0; i < 20; i++ {
		if err = m.server.Unmount(); err == nil {
			<-m.served
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("unmount %s: %w", m.dir, err)
}
