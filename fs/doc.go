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
// restore): Mount.Invalidate then drops, from outside any FUSE request so it
// cannot deadlock, every entry, attribute and page the kernel may hold for
// the inodes it knows.
//
// # Untouched base files
//
// A read-only open of a regular file that no layer has changed is served by
// the kernel straight from the base file (FUSE passthrough) where the kernel
// and our privileges allow it; otherwise reads go to the base file with
// pread. While such a passthrough handle is open, other opens of the same
// inode are served without the page cache (FOPEN_DIRECT_IO), which the
// kernel requires; a passthrough handle keeps reading the base file even
// if the file is changed through another handle meanwhile, as kernel
// overlayfs did for lower files opened before a copy-up.
//
// # Open handles across a rollback
//
// Handles remember the view's epoch. After a rollback, I/O on a handle
// opened before it fails with ESTALE (as NFS does for a file replaced on the
// server), with one exception: a read the kernel answers from its page
// cache. The rollback drops the file's pages, so such a read can only see
// pages a newer open brought in, which hold the checkpoint's content;
// nothing of the rolled-back state is ever served. New opens see the
// checkpoint. A process whose working directory is inside the
// sandbox keeps it: the directory keeps its inode number, and paths resolve
// in the checkpoint's tree (or fail with ENOENT where it has no such name).
package fs
