// Package fs serves a sandbox's merged view (package layers) as a FUSE file
// system with go-fuse's fs package.
//
// # Nodes
//
// A node is nothing but an inode number: every fact about it (attributes,
// entries, blocks) lives in the layers.View, which is the one authority
// while the sandbox is mounted. Inode numbers are stable: base files keep
// their host inode numbers, files created in a layer get numbers from the
// store's sequence, and the root is 1. They survive remounts and rollbacks.
//
// # Caching
//
// Only this process changes a mounted sandbox, so the kernel may cache
// entries and attributes (EntryTimeout, AttrTimeout) and file pages
// (FOPEN_KEEP_CACHE) without asking again. The one event that changes the
// tree behind the kernel's back is a repoint of the view (rollback, archive
// restore): Mount.InvalidateTouched then drops, from outside any FUSE
// request so it cannot deadlock, every attribute and page the kernel may
// hold for the inodes the move touched (only the attributes of a regular
// file no handle holds: its old inode's pages are out of reach, below)
// and the entries of the names it changed, or
// Mount.Invalidate for every inode the kernel knows when the move could not
// tell what it touched.
//
// # Untouched base files
//
// Reads of a regular file that no layer has changed go to the base file
// with pread, in requests of up to 1 MiB, and stay in the kernel's page
// cache across opens. On a read-only mount such opens are served by the
// kernel straight from the base file (FUSE passthrough) where the kernel
// and our privileges allow it. Writable mounts do not use passthrough: once
// an inode has a passthrough handle the kernel fails every open of it that
// is not passthrough with EIO, so a process reading a file would lock
// writers out of it (found by TestConcurrentIOAndCommands). The price is
// the kernel's: without passthrough Linux 6.18 caches a FUSE file in
// single 4 KiB pages where ext4 uses folios of up to 2 MiB, and a warm
// read from that cache costs ~1.2-1.7x native (docs/bench.md).
//
// # The Go runtime
//
// go-fuse's readers spend their lives in system calls, which the Go
// runtime's sysmon answers by taking their Ps away and polling every
// 20 us; on two CPUs that cost a cold random read a third more context
// switches than fuse-overlayfs pays. While mounts are served, GOMAXPROCS
// is therefore raised by the readers one server may block (once, however
// many mounts; given back after the last unmount; a
// GOMAXPROCS set in the environment stays as it is), and requests pass
// through the scheduler every 2 ms (sched.go).
//
// # Writes and privileges
//
// The mount negotiates FUSE_HANDLE_KILLPRIV_V2 (killpriv.go). Without it
// the kernel asks for security.capability before every write, one more
// round trip per write. With it the kernel asks once per inode and removes
// capabilities itself, and the server drops set-user-ID and set-group-ID:
// on a write or truncate by a caller without CAP_FSETID, and on every chown.
// go-fuse's node API does not hand on a write's flags, so a thin wrapper of
// the raw file system passes WRITE_KILL_SUIDGID to the handle by the
// request's cancel channel. Reads answer with a vector (one writev to
// /dev/fuse). A ReadResultData made go-fuse try a splice first and drain
// the pipe when it found no file descriptor.
//
// # Open handles across a rollback
//
// Handles remember the view's epoch. After a rollback, I/O on a handle
// opened before it fails with ESTALE (as NFS does for a file replaced on the
// server), with one exception: a read the kernel answers from its page
// cache, which for a file the rollback left as it was holds the same
// content. A file the rollback touched gets a new kernel inode, and its
// old one loses its pages if a handle holds it (generation.go): a shared
// mapping made before the rollback stays on the old one, where a page-in
// fails (SIGBUS) and nothing it stores reaches the checkpoint's file, and
// reads of old handles find no page a new open brought in. New opens see the checkpoint; one that
// comes through a dentry the kernel kept is answered ESTALE, and the
// kernel looks the path up again and opens the new inode; metadata changes
// there are answered so too. A directory removed while held is dead in the
// kernel, and one a rollback brings back gets a new inode as well. A
// process whose working directory is inside the
// sandbox keeps it: the directory keeps its inode number, and paths resolve
// in the checkpoint's tree (or fail with ENOENT where it has no such name).
package fs
