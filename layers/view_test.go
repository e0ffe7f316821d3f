package layers

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

func baseTree(t *testing.T) func(string) {
	return func(base string) {
		put(t, base+"/file", "base file")
		put(t, base+"/dir/a", "a")
		put(t, base+"/dir/sub/b", "b")
		if err := os.Mkdir(base+"/empty", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("file", base+"/link"); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(base+"/fifo", 0o600); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(base+"/file", "user.k", []byte("v"), 0); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(base+"/dir", "user.d", []byte("dv"), 0); err != nil {
			t.Fatal(err)
		}
	}
}

func TestViewBasics(t *testing.T) {
	e := newEnv(t, MinBlockSize, baseTree(t))
	v := e.view()
	defer func() { v.Close() }()
	if v.Info().Name != "sb" || v.BlockSize() != MinBlockSize || v.ReadOnly() || v.Epoch() != 0 {
		t.Fatalf("view info: got %+v bs %d ro %v epoch %d", v.Info(), v.BlockSize(), v.ReadOnly(), v.Epoch())
	}
	if got, want := names(t, v, RootIno), []string{"dir", "empty", "fifo", "file", "link"}; !sameStrings(got, want) {
		t.Fatalf("root: got %v, want %v", got, want)
	}
	ents, _ := v.ReadDir(RootIno)
	types := map[string]uint32{}
	for _, d := range ents {
		types[d.Name] = d.Mode
	}
	if types["dir"] != syscall.S_IFDIR || types["link"] != syscall.S_IFLNK || types["fifo"] != syscall.S_IFIFO || types["file"] != syscall.S_IFREG {
		t.Fatalf("entry types: got %v", types)
	}
	f := lookup(t, v, RootIno, "file")
	var host unix.Stat_t
	ok(t, "host stat", unix.Lstat(e.base+"/file", &host))
	if f.Ino != host.Ino || f.Size != int64(len("base file")) || f.Mode != host.Mode || f.Blocks != host.Blocks {
		t.Fatalf("file attr: got %+v, want the host's ino %d mode %o blocks %d", f, host.Ino, host.Mode, host.Blocks)
	}
	if got := content(t, v, f.Ino); got != "base file" {
		t.Fatalf("file: got %q", got)
	}
	root, err := v.GetAttr(RootIno)
	ok(t, "getattr root", err)
	if !root.IsDir() || f.IsDir() {
		t.Fatalf("IsDir: root %v file %v", root.IsDir(), f.IsDir())
	}
	l := lookup(t, v, RootIno, "link")
	target, err := v.Readlink(l.Ino)
	if err != nil || target != "file" {
		t.Fatalf("readlink: got %q, %v", target, err)
	}
	_, err = v.Readlink(f.Ino)
	wantErr(t, "readlink of a file", err, ErrInvalid)
	_, err = v.Readlink(1 << 40)
	wantErr(t, "readlink of a missing inode", err, ErrNotFound)
	_, err = v.Lookup(RootIno, "nope")
	wantErr(t, "lookup missing", err, ErrNotFound)
	_, err = v.Lookup(f.Ino, "x")
	wantErr(t, "lookup in a file", err, ErrNotDir)
	_, err = v.Lookup(l.Ino, "x")
	wantErr(t, "lookup in a symlink is not followed", err, ErrNotDir)
	_, err = v.ReadDir(l.Ino)
	wantErr(t, "readdir of a symlink", err, ErrNotDir)
	_, err = v.GetAttr(12345)
	wantErr(t, "getattr of an unknown inode", err, ErrNotFound)
	d := lookup(t, v, RootIno, "dir")
	buf := make([]byte, 4)
	_, err = v.ReadAt(d.Ino, buf, 0)
	wantErr(t, "read a dir", err, ErrIsDir)
	_, err = v.ReadAt(f.Ino, buf, -1)
	wantErr(t, "read at a negative offset", err, ErrInvalid)
	if n, err := v.ReadAt(f.Ino, buf, 100); n != 0 || err != io.EOF {
		t.Fatalf("read past the end: got %d, %v; want 0, EOF", n, err)
	}
	_, err = v.ReadAt(99999, buf, 0)
	wantErr(t, "read of an unknown inode", err, ErrNotFound)
	sfs, err := v.StatFS()
	if err != nil || sfs.Blocks == 0 {
		t.Fatalf("statfs: got %+v, %v", sfs, err)
	}
}

func TestViewNamespace(t *testing.T) {
	e := newEnv(t, MinBlockSize, baseTree(t))
	v := e.view()
	defer func() { v.Close() }()
	dir := lookup(t, v, RootIno, "dir")
	file := lookup(t, v, RootIno, "file")
	fifo := lookup(t, v, RootIno, "fifo")

	// Creation and its errors.
	n := mkfile(t, v, RootIno, "new", "new data")
	if n.Ino < upperInoBase || n.Nlink != 1 || n.Mode != syscall.S_IFREG|0o644 {
		t.Fatalf("new file: got %+v", n)
	}
	sub := mkdir(t, v, RootIno, "newdir")
	if sub.Nlink != 2 || !sub.IsDir() {
		t.Fatalf("new dir: got %+v", sub)
	}
	if r, _ := v.GetAttr(RootIno); r.Nlink < 3 {
		t.Fatalf("root nlink after mkdir: got %d", r.Nlink)
	}
	sl, err := v.Symlink(RootIno, "sl", "../outside/x", Caller{UID: 7, GID: 8})
	ok(t, "symlink", err)
	if sl.UID != 7 || sl.GID != 8 || sl.Size != int64(len("../outside/x")) {
		t.Fatalf("symlink attr: got %+v", sl)
	}
	dev, err := v.Mknod(RootIno, "dev", syscall.S_IFCHR|0o600, 0x0501, root)
	ok(t, "mknod chr", err)
	if dev.Rdev != 0x0501 || !isType(dev, syscall.S_IFCHR) {
		t.Fatalf("device: got %+v", dev)
	}
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"create existing base name", func() error { _, err := v.Mknod(RootIno, "file", 0o644, 0, root); return err }(), ErrExists},
		{"mkdir existing upper name", func() error { _, err := v.Mkdir(RootIno, "new", 0o755, root); return err }(), ErrExists},
		{"create in a file", func() error { _, err := v.Mknod(file.Ino, "x", 0o644, 0, root); return err }(), ErrNotDir},
		{"create in an unknown dir", func() error { _, err := v.Mknod(1<<50, "x", 0o644, 0, root); return err }(), ErrNotFound},
		{"mknod of a dir", func() error { _, err := v.Mknod(RootIno, "x", syscall.S_IFDIR|0o755, 0, root); return err }(), ErrInvalid},
		{"mknod of a symlink", func() error { _, err := v.Mknod(RootIno, "x", syscall.S_IFLNK|0o755, 0, root); return err }(), ErrInvalid},
		{"empty symlink target", func() error { _, err := v.Symlink(RootIno, "x", "", root); return err }(), ErrInvalid},
		{"long symlink target", func() error { _, err := v.Symlink(RootIno, "x", strings.Repeat("a", 4096), root); return err }(), ErrNameTooLong},
		{"name with slash", func() error { _, err := v.Mknod(RootIno, "a/b", 0o644, 0, root); return err }(), ErrInvalid},
		{"dot", func() error { _, err := v.Mkdir(RootIno, ".", 0o755, root); return err }(), ErrInvalid},
		{"dotdot", func() error { _, err := v.Mkdir(RootIno, "..", 0o755, root); return err }(), ErrInvalid},
		{"empty name", func() error { _, err := v.Mkdir(RootIno, "", 0o755, root); return err }(), ErrInvalid},
		{"NUL in name", func() error { _, err := v.Mkdir(RootIno, "a\x00", 0o755, root); return err }(), ErrInvalid},
		{"long name", func() error { _, err := v.Mkdir(RootIno, strings.Repeat("n", 256), 0o755, root); return err }(), ErrNameTooLong},
	} {
		wantErr(t, c.name, c.err, c.want)
	}
	// A set-group-ID directory hands its group down.
	sg := mkdir(t, v, RootIno, "sgid")
	mode, gid := uint32(0o2775), uint32(55)
	_, err = v.SetAttr(sg.Ino, SetAttrIn{Mode: &mode, GID: &gid})
	ok(t, "chmod g+s", err)
	inner, err := v.Mkdir(sg.Ino, "inner", 0o755, Caller{UID: 1, GID: 2})
	ok(t, "mkdir in sgid", err)
	if inner.GID != 55 || inner.Mode&syscall.S_ISGID == 0 {
		t.Fatalf("dir in a sgid dir: got gid %d mode %o, want gid 55 and S_ISGID", inner.GID, inner.Mode)
	}
	innerf, err := v.Mknod(sg.Ino, "f", 0o644, 0, Caller{UID: 1, GID: 2})
	ok(t, "create in sgid", err)
	if innerf.GID != 55 || innerf.Mode&syscall.S_ISGID != 0 {
		t.Fatalf("file in a sgid dir: got gid %d mode %o", innerf.GID, innerf.Mode)
	}

	// Hard links.
	_, err = v.Link(dir.Ino, RootIno, "dirlink")
	wantErr(t, "link a dir", err, ErrIsDir)
	_, err = v.Link(file.Ino, RootIno, "new")
	wantErr(t, "link onto a name", err, ErrExists)
	_, err = v.Link(file.Ino, RootIno, "")
	wantErr(t, "link with an empty name", err, ErrInvalid)
	_, err = v.Link(1<<51, RootIno, "x")
	wantErr(t, "link an unknown inode", err, ErrNotFound)
	_, err = v.Link(file.Ino, file.Ino, "x")
	wantErr(t, "link into a file", err, ErrNotDir)
	la, err := v.Link(file.Ino, dir.Ino, "filelink")
	ok(t, "link", err)
	if la.Nlink != 2 || la.Ino != file.Ino {
		t.Fatalf("link: got %+v, want nlink 2 and ino %d", la, file.Ino)
	}

	// Removal and its errors.
	wantErr(t, "unlink a dir", v.Unlink(RootIno, "dir"), ErrIsDir)
	wantErr(t, "rmdir a file", v.Rmdir(RootIno, "file"), ErrNotDir)
	wantErr(t, "rmdir non-empty", v.Rmdir(RootIno, "dir"), ErrNotEmpty)
	wantErr(t, "unlink missing", v.Unlink(RootIno, "nope"), ErrNotFound)
	wantErr(t, "unlink in a file", v.Unlink(file.Ino, "x"), ErrNotDir)
	ok(t, "unlink fifo", v.Unlink(RootIno, "fifo"))
	ok(t, "rmdir empty", v.Rmdir(RootIno, "empty"))
	ok(t, "unlink base file name", v.Unlink(RootIno, "file"))
	if a, _ := v.GetAttr(file.Ino); a.Nlink != 1 {
		t.Fatalf("nlink after unlinking one of two names: got %d, want 1", a.Nlink)
	}
	ok(t, "rmdir upper dir", v.Rmdir(RootIno, "newdir"))
	_, err = v.Mknod(sub.Ino, "x", 0o644, 0, root)
	wantErr(t, "create in a removed dir", err, ErrNotFound)
	// A removed inode answers with no links until the kernel forgets it.
	if a, err := v.GetAttr(fifo.Ino); err != nil || a.Nlink != 0 {
		t.Fatalf("removed fifo: got nlink %d, %v; want 0 links", a.Nlink, err)
	}
	v.Forget(fifo.Ino)
	_, err = v.GetAttr(fifo.Ino)
	wantErr(t, "removed and forgotten fifo", err, ErrNotFound)

	v = e.reopen(v)
	if got, want := names(t, v, RootIno), []string{"dev", "dir", "link", "new", "sgid", "sl"}; !sameStrings(got, want) {
		t.Fatalf("root after reopen: got %v, want %v", got, want)
	}
	fl := lookup(t, v, dir.Ino, "filelink")
	if fl.Nlink != 1 || content(t, v, fl.Ino) != "base file" {
		t.Fatalf("filelink after reopen: got %+v", fl)
	}
	_, err = v.Link(sub.Ino, RootIno, "x")
	wantErr(t, "link a purged inode", err, ErrNotFound)
}

func TestViewUnlinkedOpenFile(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer func() { v.Close() }()
	f := mkfile(t, v, RootIno, "f", "keep me")
	ok(t, "open", v.Open(f.Ino))
	ok(t, "open again", v.Open(f.Ino))
	wantErr(t, "open unknown", v.Open(1<<55), ErrNotFound)
	ok(t, "unlink", v.Unlink(RootIno, "f"))
	if got := content(t, v, f.Ino); got != "keep me" {
		t.Fatalf("unlinked open file: got %q", got)
	}
	_, err := v.WriteAt(f.Ino, []byte("!"), 7, false)
	ok(t, "write to unlinked", err)
	_, err = v.Link(f.Ino, RootIno, "again")
	wantErr(t, "link an unlinked inode", err, ErrNotFound)
	v.Release(f.Ino)
	if got := content(t, v, f.Ino); got != "keep me!" {
		t.Fatalf("after one release: got %q", got)
	}
	v.Release(f.Ino)
	if a, err := v.GetAttr(f.Ino); err != nil || a.Nlink != 0 {
		t.Fatalf("after the last release: got nlink %d, %v; want 0 links", a.Nlink, err)
	}
	v.Forget(f.Ino)
	_, err = v.GetAttr(f.Ino)
	wantErr(t, "after the last release and forget", err, ErrNotFound)
	v.Release(f.Ino) // releasing a forgotten inode is harmless
	v = e.reopen(v)
	_, err = v.GetAttr(f.Ino)
	wantErr(t, "after reopen", err, ErrNotFound)
}

func TestViewRename(t *testing.T) {
	type step func(t *testing.T, v *View) error
	ino := func(t *testing.T, v *View, path string) uint64 {
		t.Helper()
		cur := uint64(RootIno)
		for _, p := range strings.Split(path, "/") {
			cur = lookup(t, v, cur, p).Ino
		}
		return cur
	}
	rename := func(from, to string, flags uint32) step {
		return func(t *testing.T, v *View) error {
			fd, fn := filepath.Split(from)
			td, tn := filepath.Split(to)
			var fdi, tdi uint64 = RootIno, RootIno
			if fd != "" {
				fdi = ino(t, v, strings.TrimSuffix(fd, "/"))
			}
			if td != "" {
				tdi = ino(t, v, strings.TrimSuffix(td, "/"))
			}
			return v.Rename(fdi, fn, tdi, tn, flags)
		}
	}
	cases := []struct {
		name  string
		do    step
		want  error
		files map[string]string // path -> content ("-": absent, "/": a dir)
	}{
		{"file in place", rename("file", "moved", 0), nil, map[string]string{"moved": "base file", "file": "-"}},
		{"file into a dir", rename("file", "dir/sub/moved", 0), nil, map[string]string{"dir/sub/moved": "base file", "file": "-"}},
		{"base dir with contents", rename("dir", "empty/d", 0), nil, map[string]string{"empty/d/a": "a", "empty/d/sub/b": "b", "dir": "-"}},
		{"over a file", rename("file", "dir/a", 0), nil, map[string]string{"dir/a": "base file", "file": "-"}},
		{"onto itself", rename("file", "file", 0), nil, map[string]string{"file": "base file"}},
		{"dir over an empty dir", rename("dir", "empty", 0), nil, map[string]string{"empty/a": "a", "dir": "-"}},
		{"dir over a non-empty dir", rename("empty", "dir", 0), ErrNotEmpty, map[string]string{"dir/a": "a", "empty": "/"}},
		{"dir over a file", rename("dir", "file", 0), ErrNotDir, map[string]string{"file": "base file"}},
		{"file over a dir", rename("file", "empty", 0), ErrIsDir, map[string]string{"file": "base file"}},
		{"dir below itself", rename("dir", "dir/sub/x", 0), ErrInvalid, map[string]string{"dir/sub/b": "b"}},
		{"missing source", rename("nope", "x", 0), ErrNotFound, nil},
		{"bad new name", rename("file", "a\x00", 0), ErrInvalid, nil},
		{"bad flags", rename("file", "x", 8), ErrInvalid, nil},
		{"both flags", rename("file", "x", RenameNoReplace|RenameExchange), ErrInvalid, nil},
		{"noreplace onto a name", rename("file", "dir/a", RenameNoReplace), ErrExists, map[string]string{"dir/a": "a"}},
		{"noreplace onto a new name", rename("file", "x", RenameNoReplace), nil, map[string]string{"x": "base file"}},
		{"exchange files", rename("file", "dir/a", RenameExchange), nil, map[string]string{"file": "a", "dir/a": "base file"}},
		{"exchange a file and a dir", rename("file", "dir/sub", RenameExchange), nil, map[string]string{"file/b": "b", "dir/sub": "base file"}},
		{"exchange a dir and a file", rename("dir/sub", "file", RenameExchange), nil, map[string]string{"file/b": "b", "dir/sub": "base file"}},
		{"exchange dirs in one dir", rename("dir", "empty", RenameExchange), nil, map[string]string{"empty/a": "a", "dir": "/"}},
		{"exchange with a missing name", rename("file", "nope", RenameExchange), ErrNotFound, nil},
		{"exchange a dir with its own child", rename("dir/sub", "dir", RenameExchange), ErrInvalid, nil},
		{"exchange a dir into its own subtree", rename("dir", "dir/sub/b", RenameExchange), ErrInvalid, nil},
		{"upper dir", func(t *testing.T, v *View) error {
			d := mkdir(t, v, RootIno, "up")
			mkfile(t, v, d.Ino, "f", "up f")
			return rename("up", "dir/sub/up2", 0)(t, v)
		}, nil, map[string]string{"dir/sub/up2/f": "up f", "up": "-"}},
		{"two names of one inode", func(t *testing.T, v *View) error {
			_, err := v.Link(ino(t, v, "file"), RootIno, "twin")
			ok(t, "link", err)
			return rename("file", "twin", 0)(t, v)
		}, nil, map[string]string{"file": "base file", "twin": "base file"}},
		{"over the last name of an upper file", func(t *testing.T, v *View) error {
			mkfile(t, v, RootIno, "victim", "victim")
			return rename("file", "victim", 0)(t, v)
		}, nil, map[string]string{"victim": "base file"}},
		{"into an unknown dir", func(t *testing.T, v *View) error { return v.Rename(RootIno, "file", 1<<53, "x", 0) }, ErrNotFound, nil},
		{"from a file", func(t *testing.T, v *View) error { return v.Rename(ino(t, v, "file"), "x", RootIno, "y", 0) }, ErrNotDir, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, baseTree(t))
			v := e.view()
			defer func() { v.Close() }()
			wantErr(t, "rename", c.do(t, v), c.want)
			for pass := 0; pass < 2; pass++ {
				for p, want := range c.files {
					parts := strings.Split(p, "/")
					cur := uint64(RootIno)
					var err error
					var a Attr
					for _, part := range parts {
						if a, err = v.Lookup(cur, part); err != nil {
							break
						}
						cur = a.Ino
					}
					switch want {
					case "-":
						wantErr(t, p, err, ErrNotFound)
					case "/":
						if err != nil || !a.IsDir() {
							t.Fatalf("%s: got %+v, %v; want a directory", p, a, err)
						}
					default:
						ok(t, p, err)
						if got := content(t, v, cur); got != want {
							t.Fatalf("pass %d: %s: got %q, want %q", pass, p, got, want)
						}
					}
				}
				checkDirLinks(t, v, RootIno)
				v = e.reopen(v)
			}
		})
	}
}

// checkDirLinks walks the tree and checks every directory's link count is
// 2 plus its subdirectories, as on a native file system.
func checkDirLinks(t *testing.T, v *View, dir uint64) {
	t.Helper()
	ents, err := v.ReadDir(dir)
	ok(t, "readdir", err)
	subdirs := uint32(0)
	for _, d := range ents {
		if d.Mode == syscall.S_IFDIR {
			subdirs++
			checkDirLinks(t, v, d.Ino)
		}
	}
	a, err := v.GetAttr(dir)
	ok(t, "getattr", err)
	if a.Nlink != 2+subdirs {
		t.Fatalf("dir %d: got nlink %d, want %d", dir, a.Nlink, 2+subdirs)
	}
}

func TestViewSetAttrAndXattrs(t *testing.T) {
	e := newEnv(t, MinBlockSize, baseTree(t))
	v := e.view()
	defer func() { v.Close() }()
	f := lookup(t, v, RootIno, "file")
	d := lookup(t, v, RootIno, "dir")
	l := lookup(t, v, RootIno, "link")
	mode, uid, gid := uint32(0o4751), uint32(10), uint32(20)
	at, mt := int64(1e18), int64(2e18)
	a, err := v.SetAttr(f.Ino, SetAttrIn{Mode: &mode, UID: &uid, GID: &gid, Atime: &at, Mtime: &mt})
	ok(t, "setattr", err)
	check := func(a Attr) {
		t.Helper()
		if a.Mode != syscall.S_IFREG|0o4751 || a.UID != 10 || a.GID != 20 || a.Atime != at || a.Mtime != mt {
			t.Fatalf("attr: got %+v", a)
		}
	}
	check(a)
	size := int64(3)
	_, err = v.SetAttr(d.Ino, SetAttrIn{Size: &size})
	wantErr(t, "truncate a dir", err, ErrIsDir)
	_, err = v.SetAttr(l.Ino, SetAttrIn{Size: &size})
	wantErr(t, "truncate a symlink", err, ErrInvalid)
	neg := int64(-1)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Size: &neg})
	wantErr(t, "negative size", err, ErrTooLarge)
	huge := int64(MaxFileSize + 1)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Size: &huge})
	wantErr(t, "size over the limit", err, ErrTooLarge)
	_, err = v.SetAttr(1<<57, SetAttrIn{Mode: &mode})
	wantErr(t, "setattr unknown", err, ErrNotFound)

	// Extended attributes: base values show until changed.
	got, err := v.GetXattr(f.Ino, "user.k")
	if err != nil || string(got) != "v" {
		t.Fatalf("base xattr: got %q, %v", got, err)
	}
	if ls, _ := v.ListXattr(d.Ino); !sameStrings(ls, []string{"user.d"}) {
		t.Fatalf("base dir xattrs: got %v", ls)
	}
	if ls, err := v.ListXattr(l.Ino); err != nil || len(ls) != 0 {
		t.Fatalf("symlink xattrs: got %v, %v; want none", ls, err)
	}
	n := mkfile(t, v, RootIno, "n", "")
	if ls, err := v.ListXattr(n.Ino); err != nil || len(ls) != 0 {
		t.Fatalf("new file xattrs: got %v, %v", ls, err)
	}
	_, err = v.GetXattr(n.Ino, "user.none")
	wantErr(t, "get missing on new file", err, ErrNoAttr)
	cases := []struct {
		name  string
		attr  string
		val   []byte
		flags uint32
		want  error
	}{
		{"set", "user.a", []byte("1"), 0, nil},
		{"set empty value", "user.empty", []byte{}, 0, nil},
		{"create existing", "user.k", []byte("x"), XattrCreate, ErrExists},
		{"replace missing", "user.zz", []byte("x"), XattrReplace, ErrNoAttr},
		{"replace existing", "user.k", []byte("v2"), XattrReplace, nil},
		{"remove", "user.a", nil, 0, nil},
		{"remove missing", "user.a", nil, 0, ErrNoAttr},
		{"namespace not allowed", "system.other", []byte("x"), 0, ErrNotSupported},
		{"malformed ACL", XattrACLAccess, []byte("x"), 0, ErrInvalid},
		{"name too long", "user." + strings.Repeat("n", 260), []byte("x"), 0, ErrTooLarge},
		{"value too large", "user.big", make([]byte, MaxXattrValue+1), 0, ErrTooLarge},
		{"trusted", "trusted.t", []byte("t"), 0, nil},
	}
	for _, c := range cases {
		wantErr(t, c.name, v.SetXattr(f.Ino, c.attr, c.val, c.flags), c.want)
	}
	wantErr(t, "set on unknown inode", v.SetXattr(1<<58, "user.a", []byte("1"), 0), ErrNotFound)
	_, err = v.GetXattr(f.Ino, "system.x")
	wantErr(t, "get outside the namespaces", err, ErrNoAttr)
	_, err = v.GetXattr(1<<58, "user.a")
	wantErr(t, "get on unknown inode", err, ErrNotFound)
	_, err = v.ListXattr(1 << 58)
	wantErr(t, "list on unknown inode", err, ErrNotFound)
	ok(t, "dir xattr", v.SetXattr(d.Ino, "user.d2", []byte("x"), 0))

	v = e.reopen(v)
	a, err = v.GetAttr(f.Ino)
	ok(t, "getattr", err)
	check(a)
	ls, err := v.ListXattr(f.Ino)
	ok(t, "list", err)
	if want := []string{"trusted.t", "user.empty", "user.k"}; !sameStrings(ls, want) {
		t.Fatalf("xattrs after reopen: got %v, want %v", ls, want)
	}
	if got, _ := v.GetXattr(f.Ino, "user.k"); string(got) != "v2" {
		t.Fatalf("user.k: got %q, want v2", got)
	}
	if ls, _ := v.ListXattr(d.Ino); !sameStrings(ls, []string{"user.d", "user.d2"}) {
		t.Fatalf("dir xattrs after reopen: got %v", ls)
	}
	var host unix.Stat_t
	ok(t, "host stat", unix.Lstat(e.base+"/file", &host))
	if host.Mode&0o7777 != 0o644 {
		t.Fatalf("base file mode changed: %o", host.Mode)
	}
	buf := make([]byte, 64)
	nb, _ := unix.Listxattr(e.base+"/file", buf)
	if string(buf[:nb]) != "user.k\x00" {
		t.Fatalf("base xattrs changed: %q", buf[:nb])
	}
}

// model is a plain byte slice file that the view must agree with.
type model []byte

func (m *model) write(p []byte, off int64) {
	if end := off + int64(len(p)); end > int64(len(*m)) {
		*m = append(*m, make([]byte, end-int64(len(*m)))...)
	}
	copy((*m)[off:], p)
}

func (m *model) truncate(n int64) {
	if n <= int64(len(*m)) {
		*m = (*m)[:n]
		return
	}
	*m = append(*m, make([]byte, n-int64(len(*m)))...)
}

func checkModel(t *testing.T, v *View, ino uint64, m model, when string) {
	t.Helper()
	a, err := v.GetAttr(ino)
	ok(t, "getattr", err)
	if a.Size != int64(len(m)) {
		t.Fatalf("%s: size got %d, want %d", when, a.Size, len(m))
	}
	got := make([]byte, len(m)+10)
	n, err := v.ReadAt(ino, got, 0)
	if err != nil && !(err == io.EOF && len(m) == 0) {
		t.Fatalf("%s: read: %v", when, err)
	}
	if !bytes.Equal(got[:n], m) {
		for i := range m {
			if i >= n || got[i] != m[i] {
				t.Fatalf("%s: byte %d differs (read %d bytes, want %d)", when, i, n, len(m))
			}
		}
		t.Fatalf("%s: read %d bytes, want %d", when, n, len(m))
	}
}

func TestViewDataOps(t *testing.T) {
	const bs = MinBlockSize
	orig := bytes.Repeat([]byte("0123456789abcdef"), 3*bs/16+7)
	e := newEnv(t, bs, func(base string) { put(t, base+"/f", string(orig)) })
	v := e.view()
	defer func() { v.Close() }()
	f := lookup(t, v, RootIno, "f")
	m := model(append([]byte(nil), orig...))
	steps := []struct {
		name string
		do   func() error
		mod  func()
	}{
		{"write in block 0", func() error { _, err := v.WriteAt(f.Ino, []byte("XY"), 5, false); return err }, func() { m.write([]byte("XY"), 5) }},
		{"write across blocks", func() error { _, err := v.WriteAt(f.Ino, bytes.Repeat([]byte("Z"), bs), bs/2, false); return err }, func() { m.write(bytes.Repeat([]byte("Z"), bs), bs/2) }},
		{"append", func() error { _, err := v.WriteAt(f.Ino, []byte("tail"), 0, true); return err }, func() { m.write([]byte("tail"), int64(len(m))) }},
		{"truncate mid-block", func() error { s := int64(bs + 100); _, err := v.SetAttr(f.Ino, SetAttrIn{Size: &s}); return err }, func() { m.truncate(bs + 100) }},
		{"truncate up", func() error { s := int64(5 * bs); _, err := v.SetAttr(f.Ino, SetAttrIn{Size: &s}); return err }, func() { m.truncate(5 * bs) }},
		{"sync", func() error { return v.Sync() }, func() {}},
		{"write into sealed block", func() error { _, err := v.WriteAt(f.Ino, []byte("S"), 3, false); return err }, func() { m.write([]byte("S"), 3) }},
		{"write far", func() error { _, err := v.WriteAt(f.Ino, []byte("far"), 20*bs+1, false); return err }, func() { m.write([]byte("far"), 20*bs+1) }},
		{"truncate aligned", func() error { s := int64(2 * bs); _, err := v.SetAttr(f.Ino, SetAttrIn{Size: &s}); return err }, func() { m.truncate(2 * bs) }},
		{"allocate", func() error { return v.Allocate(f.Ino, 0, 3*bs, false) }, func() { m.truncate(3 * bs) }},
		{"allocate keep size", func() error { return v.Allocate(f.Ino, 0, 9*bs, true) }, func() {}},
		{"allocate inside", func() error { return v.Allocate(f.Ino, 0, 10, false) }, func() {}},
		{"zero-length write", func() error { _, err := v.WriteAt(f.Ino, nil, 0, false); return err }, func() {}},
	}
	for i, s := range steps {
		ok(t, s.name, s.do())
		s.mod()
		checkModel(t, v, f.Ino, m, s.name)
		if i%4 == 3 {
			v = e.reopen(v)
			checkModel(t, v, f.Ino, m, s.name+" after reopen")
		}
	}
	d := lookup(t, v, RootIno, "f")
	_, err := v.WriteAt(d.Ino, []byte("x"), -1, false)
	wantErr(t, "negative offset", err, ErrInvalid)
	_, err = v.WriteAt(d.Ino, []byte("x"), MaxFileSize, false)
	wantErr(t, "write past the limit", err, ErrTooLarge)
	_, err = v.WriteAt(RootIno, []byte("x"), 0, false)
	wantErr(t, "write to a dir", err, ErrInvalid)
	_, err = v.WriteAt(1<<59, []byte("x"), 0, false)
	wantErr(t, "write to unknown", err, ErrNotFound)
	wantErr(t, "allocate bad range", v.Allocate(d.Ino, -1, 5, false), ErrInvalid)
	wantErr(t, "allocate zero length", v.Allocate(d.Ino, 0, 0, false), ErrInvalid)
	wantErr(t, "allocate a dir", v.Allocate(RootIno, 0, 5, false), ErrInvalid)
	wantErr(t, "allocate unknown", v.Allocate(1<<59, 0, 5, false), ErrNotFound)
	wantErr(t, "allocate past the limit", v.Allocate(d.Ino, MaxFileSize, 5, false), ErrTooLarge)
	checkModel(t, v, f.Ino, m, "end")
	data, err := os.ReadFile(e.base + "/f")
	ok(t, "read base", err)
	if !bytes.Equal(data, orig) {
		t.Fatalf("base file changed")
	}
}

func TestViewBaseFile(t *testing.T) {
	e := newEnv(t, MinBlockSize, baseTree(t))
	v := e.view()
	defer func() { v.Close() }()
	f := lookup(t, v, RootIno, "file")
	bf, err := v.BaseFile(f.Ino)
	ok(t, "basefile", err)
	if bf == nil {
		t.Fatalf("untouched base file: got nil, want the base file")
	}
	b := make([]byte, 9)
	bf.ReadAt(b, 0)
	bf.Close()
	if string(b) != "base file" {
		t.Fatalf("base file content: got %q", b)
	}
	for _, name := range []string{"dir", "link"} {
		a := lookup(t, v, RootIno, name)
		if bf, err := v.BaseFile(a.Ino); err != nil || bf != nil {
			t.Fatalf("BaseFile(%s): got %v, %v; want nil, nil", name, bf, err)
		}
	}
	n := mkfile(t, v, RootIno, "n", "x")
	if bf, err := v.BaseFile(n.Ino); err != nil || bf != nil {
		t.Fatalf("BaseFile(new): got %v, %v; want nil, nil", bf, err)
	}
	_, err = v.BaseFile(1 << 60)
	wantErr(t, "BaseFile unknown", err, ErrNotFound)
	mode := uint32(0o600)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Mode: &mode})
	ok(t, "chmod", err)
	if bf, err := v.BaseFile(f.Ino); err != nil || bf != nil {
		t.Fatalf("BaseFile after chmod: got %v, %v; want nil, nil", bf, err)
	}
	// A record in a frozen layer also disqualifies the file, even with no
	// blocks changed.
	v = e.reopen(v)
	_, _, err = e.store.Freeze("sb", func(*Txn, string, string) error { return nil })
	ok(t, "freeze", err)
	v = e.reopen(v)
	if bf, err := v.BaseFile(f.Ino); err != nil || bf != nil {
		t.Fatalf("BaseFile with a frozen record: got %v, %v; want nil, nil", bf, err)
	}
	// Nor is a base file with blocks in a frozen layer.
	w := lookup(t, v, lookup(t, v, RootIno, "dir").Ino, "a")
	_, err = v.WriteAt(w.Ino, []byte("W"), 0, false)
	ok(t, "write", err)
	put(t, e.base+"/g", "gggg")
	freeze(t, e.store, "sb")
	v = e.reopen(v)
	lookup(t, v, lookup(t, v, RootIno, "dir").Ino, "a")
	if bf, err := v.BaseFile(w.Ino); err != nil || bf != nil {
		t.Fatalf("BaseFile with frozen blocks: got %v, %v; want nil, nil", bf, err)
	}
	// A base file below a truncation in a frozen layer is not the base file.
	g := lookup(t, v, RootIno, "g")
	sz := int64(2)
	_, err = v.SetAttr(g.Ino, SetAttrIn{Size: &sz})
	ok(t, "truncate", err)
	if bf, err := v.BaseFile(g.Ino); err != nil || bf != nil {
		t.Fatalf("BaseFile of a truncated file: got %v, %v; want nil, nil", bf, err)
	}
}

func TestViewReadOnly(t *testing.T) {
	e := newEnv(t, MinBlockSize, baseTree(t))
	v, err := e.store.OpenView("sb", true)
	ok(t, "open read-only", err)
	f := lookup(t, v, RootIno, "file")
	if !v.ReadOnly() || content(t, v, f.Ino) != "base file" {
		t.Fatalf("read-only view: ro %v", v.ReadOnly())
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"mknod", func() error { _, err := v.Mknod(RootIno, "x", 0o644, 0, root); return err }()},
		{"link", func() error { _, err := v.Link(f.Ino, RootIno, "x"); return err }()},
		{"unlink", v.Unlink(RootIno, "file")},
		{"rename", v.Rename(RootIno, "file", RootIno, "x", 0)},
		{"setattr", func() error { m := uint32(0); _, err := v.SetAttr(f.Ino, SetAttrIn{Mode: &m}); return err }()},
		{"setxattr", v.SetXattr(f.Ino, "user.x", []byte("1"), 0)},
		{"write", func() error { _, err := v.WriteAt(f.Ino, []byte("x"), 0, false); return err }()},
		{"allocate", v.Allocate(f.Ino, 0, 100, false)},
	} {
		wantErr(t, c.name, c.err, ErrReadOnly)
	}
	ok(t, "sync of a read-only view", v.Sync())
	ok(t, "open", v.Open(f.Ino))
	v.Release(f.Ino)
	ok(t, "close", v.Close())
	ok(t, "second close", v.Close())
	info, _ := e.store.Sandbox("sb")
	if _, err := os.Stat(e.store.dataPath(info.Head)); !os.IsNotExist(err) {
		t.Fatalf("read-only view created a data file: %v", err)
	}
}

func TestViewClosed(t *testing.T) {
	e := newEnv(t, MinBlockSize, baseTree(t))
	v := e.view()
	f := lookup(t, v, RootIno, "file")
	ok(t, "close", v.Close())
	wantErr(t, "sync after close", v.Sync(), ErrClosed)
	_, err := v.GetAttr(f.Ino)
	wantErr(t, "getattr after close", err, ErrClosed)
	_, err = v.Mknod(RootIno, "x", 0o644, 0, root)
	wantErr(t, "mknod after close", err, ErrClosed)
	v.Release(f.Ino)
	// The store closes views it still has open.
	v2 := e.view()
	mkfile(t, v2, RootIno, "late", "late")
	ok(t, "store close", e.store.Close())
	s, err := Open(filepath.Join(e.dir, "store"))
	ok(t, "reopen store", err)
	e.store = s
	v3 := e.view()
	defer v3.Close()
	if got := content(t, v3, lookup(t, v3, RootIno, "late").Ino); got != "late" {
		t.Fatalf("late: got %q", got)
	}
}

func TestViewOpenErrors(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	_, err := e.store.OpenView("nope", false)
	wantErr(t, "missing sandbox", err, ErrNotFound)
	ok(t, "remove base", os.Remove(e.base))
	_, err = e.store.OpenView("sb", false)
	wantErr(t, "missing base", err, ErrNotFound)
	ok(t, "mkdir base", os.Mkdir(e.base, 0o755))
	info, _ := e.store.Sandbox("sb")
	ok(t, "mkdir in place of the data file", os.Mkdir(e.store.dataPath(info.Head), 0o700))
	_, err = e.store.OpenView("sb", false)
	if err == nil {
		t.Fatalf("OpenView with a directory as data file: got no error")
	}
}

func TestChecksumCatchesCorruption(t *testing.T) {
	const bs = MinBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "")
	data := bytes.Repeat([]byte("good data "), 3*bs/10)
	_, err := v.WriteAt(f.Ino, data, 0, false)
	ok(t, "write", err)
	ok(t, "sync", v.Sync())
	ok(t, "close", v.Close())
	info, _ := e.store.Sandbox("sb")
	path := e.store.dataPath(info.Head)
	raw, err := os.ReadFile(path)
	ok(t, "read data file", err)
	// Flip one byte in the second page of the first slot.
	i := bytes.Index(raw, []byte("good data"))
	if i < 0 {
		t.Fatalf("data file holds no written bytes")
	}
	raw[i+pageSize+3] ^= 0x40
	ok(t, "write data file", os.WriteFile(path, raw, 0o600))
	v = e.view()
	defer v.Close()
	buf := make([]byte, len(data))
	_, err = v.ReadAt(f.Ino, buf, 0)
	wantErr(t, "read of a corrupt block", err, ErrCorrupt)
	// A read of another page of the same block is still fine.
	n, err := v.ReadAt(f.Ino, buf[:100], 0)
	if err != nil || !bytes.Equal(buf[:n], data[:100]) {
		t.Fatalf("read of an intact page: got %d, %v", n, err)
	}
	_, err = v.ReadAt(f.Ino, buf[:10], pageSize+1)
	wantErr(t, "small read of the corrupt page", err, ErrCorrupt)
	// A partial write into the corrupt block must not copy bad data up.
	_, err = v.WriteAt(f.Ino, []byte("x"), pageSize+1, false)
	wantErr(t, "write into a corrupt block", err, ErrCorrupt)
	wantErr(t, "verify", v.VerifyData(f.Ino), ErrCorrupt)
}

// corrupt stores val under key directly, as a damaged store would hold it.
func corrupt(t *testing.T, s *Store, key, val []byte) {
	t.Helper()
	ok(t, "corrupt", s.update(func(txn *badger.Txn) error { return txn.Set(key, val) }))
}

func TestViewCorruptMetadata(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	d := mkdir(t, v, RootIno, "d")
	f := mkfile(t, v, RootIno, "f", "x")
	ok(t, "close", v.Close())
	info, _ := e.store.Sandbox("sb")
	act := info.Head
	cases := []struct {
		name string
		key  []byte
		val  []byte
		do   func(v *View) error
	}{
		{"inode record", keyInode(act, f.Ino), []byte{9, 9}, func(v *View) error { _, err := v.GetAttr(f.Ino); return err }},
		{"entry", keyEntry(act, d.Ino, "bad"), []byte{0xff}, func(v *View) error { _, err := v.ReadDir(d.Ino); return err }},
		{"block ref", keyBlock(act, f.Ino, 0), []byte{1}, func(v *View) error { _, err := v.ReadAt(f.Ino, make([]byte, 1), 0); return err }},
		{"block ref checksum count", keyBlock(act, f.Ino, 0), encodeBlockRef(blockRef{Slot: 0, CRCs: []uint32{1, 2}}), func(v *View) error { _, err := v.ReadAt(f.Ino, make([]byte, 1), 0); return err }},
		{"block key", append(prefixBlocks(act, f.Ino), 1, 2, 3), encodeBlockRef(blockRef{CRCs: []uint32{1}}), func(v *View) error { _, err := v.ReadAt(f.Ino, make([]byte, 1), 0); return err }},
		{"block ref under fallocate", keyBlock(act, f.Ino, 0), []byte{1}, func(v *View) error { return v.Allocate(f.Ino, 0, 10, true) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var old []byte
			_ = e.store.view(func(txn *badger.Txn) error {
				if item, err := txn.Get(c.key); err == nil {
					old, _ = item.ValueCopy(nil)
				}
				return nil
			})
			corrupt(t, e.store, c.key, c.val)
			v := e.view()
			err := c.do(v)
			v.Close()
			wantErr(t, c.name, err, ErrCorrupt)
			ok(t, "restore", e.store.update(func(txn *badger.Txn) error {
				if old == nil {
					return txn.Delete(c.key)
				}
				return txn.Set(c.key, old)
			}))
		})
	}
}

func TestViewBaseChangesBehindTheView(t *testing.T) {
	e := newEnv(t, MinBlockSize, baseTree(t))
	v := e.view()
	defer func() { v.Close() }()
	names(t, v, RootIno)
	// The base loses a file after the listing was read: its lookup fails
	// cleanly instead of showing stale data.
	ok(t, "remove from base", os.Remove(e.base+"/file"))
	_, err := v.Lookup(RootIno, "file")
	wantErr(t, "lookup of a vanished base file", err, ErrNotFound)
	// A base directory that vanished lists as empty.
	d := lookup(t, v, RootIno, "dir")
	ok(t, "remove base dir", os.RemoveAll(e.base+"/dir"))
	if got := names(t, v, d.Ino); len(got) != 0 {
		t.Fatalf("vanished base dir: got %v, want empty", got)
	}
}

func TestViewJournalTooBig(t *testing.T) {
	// The journal loop's own syncs would race the test's: one that took
	// the oversized operation before the test dropped it puts it back
	// after (seen under -race, where the commits are slow).
	noLoopSyncs(t)
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer func() { v.Close() }()
	// Many operations whose sum is over badger's transaction limit commit
	// in several transactions, none split.
	big := func(tag string, n int) []kv {
		op := make([]kv, n)
		for i := range op {
			op[i] = kv{key: []byte("x/big/" + tag + "/" + strings.Repeat("k", 40) + string(rune('a'+i%26)) + itoa(i)), val: []byte("v")}
		}
		return op
	}
	for i := 0; i < 8; i++ {
		v.queue(big(itoa(i), 20000))
	}
	ok(t, "sync", v.Sync())
	count := 0
	ok(t, "scan", e.store.View(func(tx *Txn) error {
		return tx.Scan("x/big/", func(string, []byte) error { count++; return nil })
	}))
	if count != 8*20000 {
		t.Fatalf("committed keys: got %d, want %d", count, 8*20000)
	}
	// One operation over the limit on its own cannot commit: the error
	// sticks to Sync, and nothing of it is stored.
	v.queue(big("huge", 400000))
	err := v.Sync()
	wantErr(t, "sync of an oversized operation", err, badger.ErrTxnTooBig)
	v.jmu.Lock()
	v.pending = nil
	v.jmu.Unlock()
	ok(t, "sync after dropping it", v.Sync())
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{digits[i%10]}, b...)
	}
	return string(b)
}

func TestViewBackgroundSeal(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 5 s seal timer")
	}
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "sealed in the background")
	info, _ := e.store.Sandbox("sb")
	deadline := 7 * 1000
	for i := 0; i < deadline/100; i++ {
		found := false
		_ = e.store.view(func(txn *badger.Txn) error {
			_, err := txn.Get(keyBlock(info.Head, f.Ino, 0))
			found = err == nil
			return nil
		})
		if found {
			v.Close()
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	v.Close()
	t.Fatalf("block map not committed within 7 s of the write")
}

func TestDirentName(t *testing.T) {
	if got := direntName([]byte{1, 2}); got != "" {
		t.Fatalf("short record: got %q, want \"\"", got)
	}
	if got := splitNul([]byte("a\x00\x00b\x00")); !sameStrings(got, []string{"a", "b"}) {
		t.Fatalf("splitNul: got %v", got)
	}
	for typ, want := range map[uint8]uint32{
		unix.DT_DIR: syscall.S_IFDIR, unix.DT_LNK: syscall.S_IFLNK, unix.DT_FIFO: syscall.S_IFIFO,
		unix.DT_SOCK: syscall.S_IFSOCK, unix.DT_CHR: syscall.S_IFCHR, unix.DT_BLK: syscall.S_IFBLK,
		unix.DT_REG: syscall.S_IFREG, unix.DT_UNKNOWN: syscall.S_IFREG,
	} {
		if got := dtToMode(typ); got != want {
			t.Fatalf("dtToMode(%d): got %o, want %o", typ, got, want)
		}
	}
	if !errors.Is(mapOSErr(unix.ENOENT), ErrNotFound) {
		t.Fatal("ENOENT does not map to ErrNotFound")
	}
}

// TestManyBaseFilesConcurrently reads more base files than the view keeps
// open, from several goroutines at once: descriptors are recycled under
// concurrent reads, and every read still returns the file's own bytes.
func TestManyBaseFilesConcurrently(t *testing.T) {
	const n = 2*maxBaseFiles + 50
	e := newEnv(t, MinBlockSize, func(base string) {
		for i := 0; i < n; i++ {
			put(t, filepath.Join(base, "f"+itoa(i)), strings.Repeat(itoa(i)+",", 1000))
		}
	})
	v := e.view()
	defer v.Close()
	inos := make([]uint64, n)
	for i := range inos {
		inos[i] = lookup(t, v, RootIno, "f"+itoa(i)).Ino
	}
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			buf := make([]byte, 64)
			for round := 0; round < 3; round++ {
				for k := 0; k < n; k++ {
					i := (k*7 + g*31 + round*13) % n
					want := strings.Repeat(itoa(i)+",", 1000)
					off := int64((k * 17) % (len(want) - 64))
					m, err := v.ReadAt(inos[i], buf, off)
					if err != nil {
						errs <- err
						return
					}
					if string(buf[:m]) != want[off:off+int64(m)] {
						errs <- errors.New("f" + itoa(i) + ": wrong bytes")
						return
					}
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	v.mu.Lock()
	open := v.baseLRU.Len()
	v.mu.Unlock()
	if open > maxBaseFiles {
		t.Fatalf("open base files: got %d, want at most %d", open, maxBaseFiles)
	}
}

// TestXattrSpace checks the bound on what one inode's attributes take:
// a set may fill it exactly, the next byte fails with ErrNoSpace and
// changes nothing, and shrinking or removing makes room again.
func TestXattrSpace(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	f := mkfile(t, v, RootIno, "f", "")
	full := make([]byte, MaxXattrSpace-len("user.big")-1)
	steps := []struct {
		name string
		attr string
		val  []byte
		want error
	}{
		{"fill exactly", "user.big", full, nil},
		{"one more", "user.x", []byte{}, ErrNoSpace},
		{"grow the value", "user.big", append(full, 'x'), ErrNoSpace},
		{"shrink the value", "user.big", full[:len(full)-20], nil},
		{"fits again", "user.x", []byte("123456789012"), nil},
		{"no longer fits", "user.y", []byte{}, ErrNoSpace},
		{"remove", "user.big", nil, nil},
		{"room again", "user.y", []byte("1"), nil},
	}
	for _, s := range steps {
		wantErr(t, s.name, v.SetXattr(f.Ino, s.attr, s.val, 0), s.want)
	}
	ls, err := v.ListXattr(f.Ino)
	ok(t, "list", err)
	if !sameStrings(ls, []string{"user.x", "user.y"}) {
		t.Fatalf("after the steps: got %v, want user.x and user.y", ls)
	}
	if got, _ := v.GetXattr(f.Ino, "user.x"); string(got) != "123456789012" {
		t.Fatalf("user.x: got %q, want 123456789012 (a failed set must change nothing)", got)
	}

	// A set over the bound already (as a base on another file system may
	// bring) may shrink, and may not grow.
	g := mkfile(t, v, RootIno, "g", "")
	ok(t, "close", v.Close())
	info, _ := e.store.Sandbox("sb")
	b, found, err := e.store.record(keyInode(info.Head, g.Ino))
	if err != nil || !found {
		t.Fatalf("record of g: found %v, %v", found, err)
	}
	rec, err := decodeInode(b)
	ok(t, "decode", err)
	rec.XattrsSet = true
	rec.Xattrs = map[string][]byte{"user.a": make([]byte, MaxXattrSpace), "user.b": []byte("b")}
	corrupt(t, e.store, keyInode(info.Head, g.Ino), encodeInode(rec))
	v = e.view()
	wantErr(t, "grow an oversize set", v.SetXattr(g.Ino, "user.c", []byte("c"), 0), ErrNoSpace)
	ok(t, "shrink an oversize set, still over", v.SetXattr(g.Ino, "user.a", make([]byte, MaxXattrSpace-1), 0))
	ok(t, "shrink it under the bound", v.SetXattr(g.Ino, "user.a", make([]byte, 10), 0))
	ok(t, "then grow within the bound", v.SetXattr(g.Ino, "user.c", []byte("c"), 0))
}

// TestAllocateReserves: fallocate's mode 0 gives every block of the range
// a slot of its own, allocated on disk, content kept; a range larger than
// the free space is refused with ErrNoSpace and changes nothing; with
// keepSize nothing past the end is reserved.
func TestAllocateReserves(t *testing.T) {
	const bs = MinBlockSize
	orig := bytes.Repeat([]byte("0123456789abcdef"), 4*bs/16)
	e := newEnv(t, bs, func(base string) {
		put(t, base+"/f", string(orig))
		put(t, base+"/g", string(orig))
	})
	v := e.view()
	defer func() { v.Close() }()
	f := lookup(t, v, RootIno, "f")
	m := model(append([]byte(nil), orig...))
	dataBlocks := func() int64 {
		var st syscall.Stat_t
		ok(t, "stat data file", syscall.Stat(e.store.dataPath(v.activeLayer()), &st))
		return st.Blocks * 512
	}
	var fs syscall.Statfs_t
	ok(t, "statfs", syscall.Statfs(e.store.Dir(), &fs))
	free := int64(fs.Bavail) * fs.Bsize
	wantErr(t, "allocate twice the free space", v.Allocate(f.Ino, 0, 2*free, false), ErrNoSpace)
	checkModel(t, v, f.Ino, m, "after a refused allocate")
	before := dataBlocks()
	ok(t, "allocate inside", v.Allocate(f.Ino, bs/2, 2*bs, true))
	checkModel(t, v, f.Ino, m, "after allocate inside")
	if got := dataBlocks() - before; got < 3*bs {
		t.Errorf("allocate of blocks 0-2 took %d bytes of the data file, want %d", got, 3*bs)
	}
	ok(t, "allocate past the end, keeping the size", v.Allocate(f.Ino, int64(len(m)), 8*bs, true))
	checkModel(t, v, f.Ino, m, "after allocate past the end with keepSize")
	ok(t, "allocate growing", v.Allocate(f.Ino, int64(len(m))+10, 2*bs, false))
	m.truncate(int64(len(m)) + 10 + 2*bs)
	checkModel(t, v, f.Ino, m, "after allocate growing")
	st, err := v.getInode(f.Ino)
	ok(t, "inode", err)
	for _, r := range []struct {
		off, n int64
		want   bool
	}{{0, 3 * bs, true}, {3 * bs, 10, false}, {4 * bs, 2*bs + 10, true}, {0, 0, false}} {
		if got := v.reservedLocked(st, r.off, r.n); got != r.want {
			t.Errorf("reservedLocked(%d, %d) = %v, want %v", r.off, r.n, got, r.want)
		}
	}
	// A base file gone from under the view: its blocks cannot be copied
	// up, and the allocate fails.
	g := lookup(t, v, RootIno, "g")
	ok(t, "remove g from the base", os.Remove(filepath.Join(e.base, "g")))
	if err := v.Allocate(g.Ino, 0, bs, true); err == nil {
		t.Errorf("allocate over a base file that is gone: no error")
	}
	n, err := v.WriteAt(f.Ino, []byte("written"), bs, false)
	ok(t, "write into a reserved block", err)
	m.write([]byte("written"), bs)
	if n != 7 {
		t.Fatalf("write: %d bytes", n)
	}
	ok(t, "sync", v.Sync())
	v = e.reopen(v)
	checkModel(t, v, f.Ino, m, "after a restart")
}

// TestPreparedWithJournal: a freeze or repoint builds one transaction with
// the journal in it while the data syncs, and commits it after (one
// commit). A journal too big to share it, a read of the layer's committed
// state (errNeedsJournal) or a conflict commit the journal on its own and
// run fn again after it; fn failing on its own still commits the journal
// and returns fn's error; an abandoned transaction leaves the journal
// pending.
func TestPreparedWithJournal(t *testing.T) {
	errFn := errors.New("fn failed")
	big := func(tag string, ops, keys int) [][]kv {
		var out [][]kv
		for o := range ops {
			op := make([]kv, keys)
			for i := range op {
				op[i] = kv{key: []byte("x/j/" + tag + "/" + itoa(o) + "/" + strings.Repeat("k", 40) + itoa(i)), val: []byte("v")}
			}
			out = append(out, op)
		}
		return out
	}
	cases := []struct {
		name    string
		journal [][]kv
		// fn's answer, given whether it shares the journal's transaction.
		fn func(txn dbTxn, journal bool) error
		// between prepare and commit
		meanwhile func(t *testing.T, s *Store)
		abandon   bool
		wantErr   error
		commits   uint64 // at most
		calls     []bool // fn's journal argument, call by call
	}{
		{name: "small journal", journal: big("s", 3, 10), commits: 1, calls: []bool{true}},
		{name: "empty journal", commits: 1, calls: []bool{false}},
		{name: "journal too big to share", journal: big("b", 8, 20000), commits: 1 + 8, calls: []bool{false}},
		{name: "fn fails", journal: big("f", 3, 10), fn: func(dbTxn, bool) error { return errFn }, wantErr: errFn, commits: 1, calls: []bool{true}},
		{name: "fn needs the journal committed", journal: big("n", 3, 10), fn: func(_ dbTxn, journal bool) error {
			if journal {
				return fmt.Errorf("reading it: %w", errNeedsJournal)
			}
			return nil
		}, commits: 2, calls: []bool{true, false}},
		{name: "conflict", journal: big("c", 3, 10), fn: func(txn dbTxn, _ bool) error {
			_, err := txn.Get([]byte("x/c"))
			if errors.Is(err, badger.ErrKeyNotFound) {
				err = nil
			}
			return err
		}, meanwhile: func(t *testing.T, s *Store) {
			ok(t, "write x/c", s.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("x/c"), []byte("1")) }))
		}, commits: 3, calls: []bool{true, false}},
		{name: "abandoned", journal: big("a", 3, 10), abandon: true, calls: []bool{true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			defer v.Close()
			// cmu keeps the journal loop out, as quiesce does.
			v.cmu.Lock()
			for _, op := range c.journal {
				v.queue(op)
			}
			var calls []bool
			before := e.store.commits.Load()
			p := v.prepareWithJournalLocked(func(txn dbTxn, journal bool) error {
				calls = append(calls, journal)
				if err := txn.Set([]byte("x/fn"), []byte("done")); err != nil {
					return err
				}
				if c.fn != nil {
					return c.fn(txn, journal)
				}
				return nil
			}, false, false)
			if c.meanwhile != nil {
				c.meanwhile(t, e.store)
			}
			var err error
			if c.abandon {
				p.abandon()
			} else {
				err = p.commit()
			}
			commits := e.store.commits.Load() - before
			v.jmu.Lock()
			pending, jdone, jqueued, jerr := len(v.pending), v.jdone, v.jqueued, v.jerr
			v.jmu.Unlock()
			v.cmu.Unlock()
			if c.wantErr != nil {
				wantErr(t, "commit", err, c.wantErr)
			} else {
				ok(t, "commit", err)
			}
			if commits > c.commits || !c.abandon && commits == 0 {
				t.Errorf("%d commits, want 1 to %d", commits, c.commits)
			}
			if !slices.Equal(calls, c.calls) {
				t.Errorf("fn called with journal %v, want %v", calls, c.calls)
			}
			n := 0
			fnDone := false
			ok(t, "scan", e.store.View(func(tx *Txn) error {
				if err := tx.Scan("x/j/", func(string, []byte) error { n++; return nil }); err != nil {
					return err
				}
				_, err := tx.Get("x/fn")
				fnDone = err == nil
				return nil
			}))
			want := 0
			for _, op := range c.journal {
				want += len(op)
			}
			if c.abandon {
				if n != 0 || fnDone || pending != len(c.journal) {
					t.Errorf("abandoned: stored %d journal keys and fn's write %v, %d operations pending; want none stored, %d pending", n, fnDone, pending, len(c.journal))
				}
				return
			}
			if n != want || fnDone != (c.wantErr == nil) {
				t.Errorf("stored %d journal keys (want %d), fn's write stored %v", n, want, fnDone)
			}
			if pending != 0 || jdone != jqueued || jerr != nil {
				t.Errorf("journal after: %d pending, done %d of %d, error %v", pending, jdone, jqueued, jerr)
			}
		})
	}
}

// TestFreezeThatFailsKeepsTheJournal: a checkpoint whose own records fail
// (FreezeFunc) freezes nothing, and what the mount wrote before it is
// committed all the same and reads back after a reopen.
func TestFreezeThatFailsKeepsTheJournal(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer func() { v.Close() }()
	mkfile(t, v, RootIno, "f", "written before the failed checkpoint")
	before, err := e.store.Sandbox(e.name)
	ok(t, "sandbox", err)
	errFn := errors.New("checkpoint record failed")
	_, _, err = e.store.Freeze(e.name, func(*Txn, string, string) error { return errFn })
	wantErr(t, "freeze", err, errFn)
	after, err := e.store.Sandbox(e.name)
	ok(t, "sandbox", err)
	if after.Head != before.Head {
		t.Fatalf("head moved from %s to %s on a failed freeze", before.Head, after.Head)
	}
	v.jmu.Lock()
	pending := len(v.pending)
	v.jmu.Unlock()
	if pending != 0 {
		t.Fatalf("%d journal operations left pending", pending)
	}
	v = e.reopen(v)
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != "written before the failed checkpoint" {
		t.Fatalf("after a reopen: %q", got)
	}
}

// TestDataSyncFailureStopsTheView: when a data sync fails (a disk error)
// in a checkpoint, a rollback or an fsync, the data the sealed records
// name may not be on disk, and a later sync would not say so. Nothing
// moves, no record is committed from then on: every later sync,
// checkpoint and rollback fails with ErrDataSync, also once the disk works
// again, and so does the view's close. A new view shows what the store
// held before, clean under fsck.
func TestDataSyncFailureStopsTheView(t *testing.T) {
	boom := errors.New("disk failed")
	cases := []struct {
		name string
		fail func(e *testEnv, v *View, target string) error
	}{
		{"freeze", func(e *testEnv, _ *View, _ string) error {
			_, _, err := e.store.Freeze(e.name, noFreezeFn)
			return err
		}},
		{"repoint", func(e *testEnv, _ *View, target string) error {
			_, err := e.store.Repoint(e.name, target, noRepointFn)
			return err
		}},
		{"sync", func(_ *testEnv, v *View, _ string) error { return v.sync(false, false) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			closed := false
			defer func() {
				if !closed {
					v.Close()
				}
			}()
			mkfile(t, v, RootIno, "kept", "before")
			target := freeze(t, e.store, e.name)
			f := mkfile(t, v, RootIno, "f", "written before the failed sync")
			before, err := e.store.Sandbox(e.name)
			ok(t, "sandbox", err)
			var asked int
			restore := e.store.InjectFault(func(op, key string) error {
				if op == "datasync" && key == e.name {
					asked++
					return boom
				}
				if op == "walsync" { // a failing disk fails the log too
					return boom
				}
				return nil
			})
			err = c.fail(e, v, target)
			restore()
			wantErr(t, c.name, err, boom)
			wantErr(t, c.name, err, ErrDataSync)
			if asked != 1 {
				t.Fatalf("the data sync was asked %d times, want 1", asked)
			}
			// The disk works again; the view still stores nothing.
			_, err = v.WriteAt(f.Ino, []byte("later"), 0, false)
			ok(t, "write", err)
			wantErr(t, "sync after the failure", v.Sync(), ErrDataSync)
			_, _, err = e.store.Freeze(e.name, noFreezeFn)
			wantErr(t, "checkpoint after the failure", err, ErrDataSync)
			_, err = e.store.Repoint(e.name, target, noRepointFn)
			wantErr(t, "rollback after the failure", err, ErrDataSync)
			after, err := e.store.Sandbox(e.name)
			ok(t, "sandbox", err)
			if after.Head != before.Head {
				t.Fatalf("head moved from %s to %s", before.Head, after.Head)
			}
			closed = true
			wantErr(t, "close", v.Close(), ErrDataSync)
			v = e.view()
			closed = false
			if got := content(t, v, lookup(t, v, RootIno, "kept").Ino); got != "before" {
				t.Fatalf("kept after a new view: %q", got)
			}
			if a, err := v.Lookup(RootIno, "f"); err == nil {
				// Whatever of f the store held before the failure reads
				// without a checksum error: no record names lost data.
				if got := content(t, v, a.Ino); strings.Contains(got, "later") {
					t.Fatalf("f after a new view holds a write made after the failure: %q", got)
				}
			}
			rep, err := e.store.Fsck()
			ok(t, "fsck", err)
			if len(rep.Problems) != 0 {
				t.Fatalf("fsck: %+v", rep.Problems)
			}
		})
	}
}

// TestOpenSnapshotInFreeze: a freeze's function that opens a snapshot of
// the layer it freezes (a state hash with no parent hash to start from)
// is told the layer's journal is not committed yet, and runs again once
// it is: the snapshot then shows what the view wrote.
func TestOpenSnapshotInFreeze(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	mkfile(t, v, RootIno, "f", "in the journal")
	var errs []error
	var got string
	_, _, err := e.store.Freeze(e.name, func(tx *Txn, frozen, _ string) error {
		snap, err := tx.OpenSnapshot(e.name, frozen)
		errs = append(errs, err)
		if err != nil {
			return err
		}
		defer snap.Close()
		a, err := snap.Lookup(RootIno, "f")
		if err != nil {
			return err
		}
		got = content(t, snap, a.Ino)
		return nil
	})
	ok(t, "freeze", err)
	if len(errs) != 2 || !errors.Is(errs[0], errNeedsJournal) || errs[1] != nil {
		t.Fatalf("snapshot opens: %v, want errNeedsJournal, then success", errs)
	}
	if got != "in the journal" {
		t.Fatalf("the snapshot reads %q", got)
	}
}
