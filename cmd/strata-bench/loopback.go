package main

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// loopbackReady is the line serveLoopback prints once the mount is live.
const loopbackReady = "ready"

// serveLoopback serves go-fuse's loopback of dir at mnt until it is
// unmounted or the process gets SIGINT/SIGTERM. It runs in a process of its
// own (strata-bench -serve-loopback DIR MNT), like the other FUSE targets,
// so the harness's own I/O and GC do not share its CPU accounting.
//
// The options follow go-fuse's example/loopback: 1 s entry and attribute
// timeouts (libfuse's defaults) and a direct mount(2) as root.
func serveLoopback(dir, mnt string, ready io.Writer) error {
	root, err := fs.NewLoopbackRoot(dir)
	if err != nil {
		return err
	}
	sec := time.Second
	server, err := fs.Mount(mnt, root, &fs.Options{
		AttrTimeout:     &sec,
		EntryTimeout:    &sec,
		NullPermissions: true,
		MountOptions: fuse.MountOptions{
			DirectMount: true,
			FsName:      dir,
			Name:        "loopback",
		},
	})
	if err != nil {
		return err
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sigc
		if server.Unmount() != nil {
			// Busy: detach, so the mount never outlives this process.
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
	}()
	fmt.Fprintln(ready, loopbackReady)
	server.Wait()
	return nil
}
