package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/layers"
)

// exportFixture is sandbox "s" rolled back from a state holding every
// kind of file to its first checkpoint: the archive holds that state.
type exportFixture struct {
	e       *storeEnv
	archive Archive
	outside string // a directory outside the sandbox its symlinks name
}

const sparseSize = 4 << 20

func newExportFixture(t *testing.T) *exportFixture {
	t.Helper()
	e := newStoreEnv(t, func(base string) {
		writeBase(t, base, "base.txt", "from the base")
		writeBase(t, base, "docs/old.txt", "old doc")
	})
	f := &exportFixture{e: e, outside: filepath.Join(e.dir, "outside")}
	writeBase(t, f.outside, "target.txt", "outside content")
	e.put("s", "docs/readme.txt", "readme")
	e.checkpoint("s", "start")
	e.put("s", "docs/readme.txt", "readme, edited")
	e.putAt("s", "bin/run.sh", "#!/bin/sh\n", 0, 0o755)
	e.putAt("s", "secret", "s3cret", 0, 0o600)
	e.putAt("s", "group.txt", "g", 0, 0o640)
	e.putAt("s", "empty", "", 0, 0o644)
	e.putAt("s", "sparse.bin", "end", sparseSize-3, 0o644)
	e.put("s", "private/p.txt", "p")
	mode := uint32(0o750)
	v := e.view("s")
	if _, err := v.SetAttr(lookupPath(t, v, "private").Ino, layers.SetAttrIn{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	e.symlink("s", "abs", filepath.Join(f.outside, "target.txt"))
	e.symlink("s", "outdir", f.outside)
	e.symlink("s", "docs/up", "../../escape.txt")
	h1 := e.putAt("s", "h1", "linked", 0, 0o644)
	if _, err := v.Link(h1.Ino, layers.RootIno, "h2"); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Mknod(layers.RootIno, "pipe", syscall.S_IFIFO|0o644, 0, layers.Caller{}); err != nil {
		t.Fatal(err)
	}
	e.checkpoint("s", "full")
	e.put("s", "after.txt", "written after the last checkpoint")
	res, err := e.mgr.Rollback("s", "start")
	if err != nil {
		t.Fatal(err)
	}
	if f.archive, err = e.mgr.ResolveArchive(res.Archive); err != nil {
		t.Fatal(err)
	}
	return f
}

// dirTree reads a real directory in the form of tree, never following a
// symlink, with each path's permission bits.
func dirTree(t *testing.T, dir string) (tree, map[string]fs.FileMode) {
	t.Helper()
	out, modes := tree{}, map[string]fs.FileMode{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		modes[rel] = fi.Mode()
		switch {
		case fi.IsDir():
			out[rel] = "dir"
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "-> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		default:
			out[rel] = "special"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out, modes
}

// withUmask runs the test under umask mask, so exported modes are known.
func withUmask(t *testing.T, mask int) {
	t.Helper()
	old := syscall.Umask(mask)
	t.Cleanup(func() { syscall.Umask(old) })
}

func TestExport(t *testing.T) {
	withUmask(t, 0o022)
	f := newExportFixture(t)
	e := f.e
	want := e.snapTree("s", f.archive.Top)
	if want["after.txt"] == "" || want["sparse.bin"] == "" || want["base.txt"] != "from the base" {
		t.Fatalf("the archive does not hold the state before the rollback: %v", want)
	}
	empty := filepath.Join(e.dir, "empty-dir")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dst := range []string{filepath.Join(e.dir, "new", "sub"), empty} {
		n, err := e.mgr.Export(f.archive.ID, dst)
		if err != nil {
			t.Fatalf("export into %s: %v", dst, err)
		}
		got, modes := dirTree(t, dst)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("export into %s wrote\n%v\nwant\n%v", dst, got, want)
		}
		files := 0
		for _, v := range want {
			if v != "dir" {
				files++
			}
		}
		if n != files {
			t.Errorf("export counted %d files, want %d", n, files)
		}
		for p, m := range map[string]fs.FileMode{
			"bin/run.sh": 0o755, "secret": 0o600, "group.txt": 0o640, "docs/readme.txt": 0o644,
			"private": fs.ModeDir | 0o750, "docs": fs.ModeDir | 0o755,
		} {
			if modes[p] != m {
				t.Errorf("exported %s has mode %v, want %v", p, modes[p], m)
			}
		}
		for _, p := range []string{"abs", "outdir", "docs/up"} {
			if modes[p]&fs.ModeSymlink == 0 {
				t.Errorf("exported %s is %v, want a symlink", p, modes[p])
			}
		}
		// Symlinks were written, not followed: what they name is as it was.
		if b, err := os.ReadFile(filepath.Join(f.outside, "target.txt")); err != nil || string(b) != "outside content" {
			t.Fatalf("file outside the export: %q, %v", b, err)
		}
		if ents, _ := os.ReadDir(f.outside); len(ents) != 1 {
			t.Fatalf("export wrote into the directory a symlink names: %v", ents)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(dst), "escape.txt")); !os.IsNotExist(err) {
			t.Fatalf("export wrote through a dangling symlink: %v", err)
		}
		// Hard-linked names hold the same bytes.
		if got["h1"] != "linked" || got["h2"] != "linked" {
			t.Errorf("hard links exported as %q and %q", got["h1"], got["h2"])
		}
		fi, err := os.Stat(filepath.Join(dst, "sparse.bin"))
		if err != nil || fi.Size() != sparseSize {
			t.Fatalf("sparse file: %v, %v; want size %d", fi, err, sparseSize)
		}
	}
	// The archive is intact: a restore brings the same state back.
	if _, err := e.mgr.Restore(f.archive.ID); err != nil {
		t.Fatal(err)
	}
	live := e.liveTree("s")
	if !reflect.DeepEqual(live, want) {
		t.Fatalf("restore after export shows\n%v\nwant\n%v", live, want)
	}
}

func TestExportRefuses(t *testing.T) {
	f := newExportFixture(t)
	e := f.e
	nonEmpty := filepath.Join(e.dir, "non-empty")
	writeBase(t, nonEmpty, "mine.txt", "keep me")
	regular := filepath.Join(e.dir, "regular")
	writeBase(t, e.dir, "regular", "a file")
	dangling := filepath.Join(e.dir, "dangling")
	if err := os.Symlink(filepath.Join(e.dir, "nowhere"), dangling); err != nil {
		t.Fatal(err)
	}
	noTop := Archive{ID: layers.NewID(), Sandbox: "s"}
	badTop := Archive{ID: layers.NewID(), Sandbox: "s", Top: "NOSUCHLAYER", Layers: []string{"NOSUCHLAYER"}}
	for _, ar := range []Archive{noTop, badTop} {
		b, _ := json.Marshal(ar)
		e.setRecord(keyArchive(ar.ID), b)
	}
	tests := []struct {
		name, archive, dir string
		err                error // nil: any error
	}{
		{"non-empty directory", f.archive.ID, nonEmpty, layers.ErrExists},
		{"a regular file", f.archive.ID, regular, syscall.ENOTDIR},
		{"below a regular file", f.archive.ID, filepath.Join(regular, "sub"), syscall.ENOTDIR},
		{"a dangling symlink", f.archive.ID, dangling, nil},
		{"unknown archive", "ZZZZZZZZZZ", filepath.Join(e.dir, "x1"), layers.ErrNotFound},
		{"archive without layers", noTop.ID, filepath.Join(e.dir, "x2"), layers.ErrInvalid},
		{"archive of a missing layer", badTop.ID, filepath.Join(e.dir, "x3"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := e.mgr.Export(tc.archive, tc.dir)
			if err == nil {
				t.Fatalf("export into %s: no error", tc.dir)
			}
			if tc.err != nil {
				wantErr(t, "export", err, tc.err)
			}
			if n != 0 {
				t.Fatalf("refused export counted %d files", n)
			}
			if !strings.HasPrefix(err.Error(), "export") && tc.err != nil {
				t.Fatalf("error %q does not say what failed", err)
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(nonEmpty, "mine.txt")); err != nil || string(b) != "keep me" {
		t.Fatalf("refused export touched the directory: %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(nonEmpty); len(ents) != 1 {
		t.Fatalf("refused export wrote into a non-empty directory: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "nowhere")); !os.IsNotExist(err) {
		t.Fatalf("export through a dangling symlink created its target: %v", err)
	}
	if _, err := e.mgr.Restore(noTop.ID); !errors.Is(err, layers.ErrInvalid) {
		t.Fatalf("restore of an archive without layers: %v", err)
	}
	if _, err := e.mgr.Restore(badTop.ID); !errors.Is(err, layers.ErrNotFound) {
		t.Fatalf("restore of an archive of a missing layer: %v", err)
	}
}

// TestExportFailsOnUnreadableData makes the data of an archived file
// unreadable, by damage to the layer's data file or to the base: the export
// must fail rather than write a file of zeros in its place.
func TestExportFailsOnUnreadableData(t *testing.T) {
	t.Run("damaged layer data", func(t *testing.T) {
		f := newExportFixture(t)
		e := f.e
		e.close("s")
		p := filepath.Join(e.store.Dir(), "data", f.archive.Layers[1])
		fi, err := os.Stat(p)
		if err != nil || fi.Size() == 0 {
			t.Fatalf("archived layer's data: %v, %v", fi, err)
		}
		if err := os.WriteFile(p, bytes.Repeat([]byte{0xa5}, int(fi.Size())), 0o644); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(e.dir, "out")
		n, err := e.mgr.Export(f.archive.ID, dst)
		if !errors.Is(err, layers.ErrCorrupt) {
			got, _ := dirTree(t, dst)
			t.Fatalf("export of damaged data: %d files, error %v; wrote readme %q, secret %q", n, err, got["docs/readme.txt"], got["secret"])
		}
	})
	t.Run("base reached through a symlink", func(t *testing.T) {
		e, _, archive := movedOutOfBase(t)
		symlinkBase(t, e, "f")
		dst := filepath.Join(e.dir, "out")
		n, err := e.mgr.Export(archive, dst)
		if !errors.Is(err, syscall.ELOOP) {
			got, _ := dirTree(t, dst)
			t.Fatalf("export of an unreadable base file: %d files, error %v; wrote g2 %q", n, err, got["g2"])
		}
	})
}

// TestExportKeepsHolesAndLinks exports a sparse file and a file with two
// names: the copy should take no more disk than the archived state does
// (a sparse file of gigabytes would otherwise fill the target disk) and
// keep the two names one file.
func TestExportKeepsHolesAndLinks(t *testing.T) {
	f := newExportFixture(t)
	dst := filepath.Join(f.e.dir, "out")
	if _, err := f.e.mgr.Export(f.archive.ID, dst); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dst, "sparse.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; used > sparseSize/2 {
		t.Errorf("exported sparse file of %d bytes with one block of data takes %d bytes on disk", fi.Size(), used)
	}
	h1, err1 := os.Stat(filepath.Join(dst, "h1"))
	h2, err2 := os.Stat(filepath.Join(dst, "h2"))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if !os.SameFile(h1, h2) {
		t.Errorf("hard links h1 and h2 were exported as two separate files")
	}
}

// TestExportOutOfSpace exports into a small tmpfs: running out of inodes
// or of space fails the export with ENOSPC instead of leaving a partial
// tree reported as complete.
func TestExportOutOfSpace(t *testing.T) {
	for _, tc := range []struct{ name, opts string }{
		{"out of inodes", "size=4m,nr_inodes=6"},
		{"out of space", "size=64k,nr_inodes=1000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mnt := t.TempDir()
			if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, tc.opts); err != nil {
				t.Skipf("cannot mount a tmpfs here: %v", err)
			}
			t.Cleanup(func() {
				if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
					t.Errorf("unmount %s: %v", mnt, err)
				}
			})
			f := newExportFixture(t)
			n, err := f.e.mgr.Export(f.archive.ID, filepath.Join(mnt, "out"))
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("export into a full file system: %d files, %v; want ENOSPC", n, err)
			}
		})
	}
}

// TestExportKeepsMetadata checks that an export gives every path the mode
// (whatever the umask), times, extended attributes and, as root, owner it
// has in the archive, directories included, as cp -a keeps them.
func TestExportKeepsMetadata(t *testing.T) {
	withUmask(t, 0o077) // strips every group and other bit it can
	e := newStoreEnv(t, func(base string) {
		writeBase(t, base, "base.txt", "from the base")
	})
	e.checkpoint("s", "start")
	v := e.view("s")
	set := func(rel string, in layers.SetAttrIn) {
		t.Helper()
		if _, err := v.SetAttr(lookupPath(t, v, rel).Ino, in); err != nil {
			t.Fatalf("setattr %s: %v", rel, err)
		}
	}
	u32 := func(x uint32) *uint32 { return &x }
	i64 := func(x int64) *int64 { return &x }
	mtime := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC).UnixNano()
	atime := time.Date(2002, 3, 4, 5, 6, 7, 8, time.UTC).UnixNano()
	e.putAt("s", "shared.txt", "group-writable", 0, 0o664)
	e.putAt("s", "tool", "#!/bin/sh\n", 0, 0o755)
	set("tool", layers.SetAttrIn{Mode: u32(0o4755)})
	e.put("s", "ro/inside.txt", "in a read-only directory")
	set("ro", layers.SetAttrIn{Mode: u32(0o555), Mtime: i64(mtime), Atime: i64(atime)})
	e.put("s", "team/notes.txt", "n")
	set("team", layers.SetAttrIn{Mode: u32(0o2775)})
	set("shared.txt", layers.SetAttrIn{Mtime: i64(mtime), Atime: i64(atime), UID: u32(1234), GID: u32(5678)})
	set("base.txt", layers.SetAttrIn{Mode: u32(0o640), Mtime: i64(mtime), Atime: i64(atime)})
	for _, x := range []struct{ rel, name, val string }{
		{"shared.txt", "user.origin", "agent"},
		{"team", "user.dir", "d"},
	} {
		if err := v.SetXattr(lookupPath(t, v, x.rel).Ino, x.name, []byte(x.val), 0); err != nil {
			t.Fatal(err)
		}
	}
	e.symlink("s", "link", "shared.txt")
	// Linux refuses user attributes on a symlink, so the export leaves
	// them out; the others go with it.
	for _, name := range []string{"user.skipped", "trusted.kept"} {
		if err := v.SetXattr(lookupPath(t, v, "link").Ino, name, []byte("l"), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := v.Mknod(layers.RootIno, "fifo", syscall.S_IFIFO|0o620, 0, layers.Caller{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Mknod(layers.RootIno, "null", syscall.S_IFCHR|0o666, 0x103, layers.Caller{}); err != nil {
		t.Fatal(err)
	}
	res, err := e.mgr.Rollback("s", "start")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(e.dir, "out")
	n, err := e.mgr.Export(res.Archive, dst)
	if err != nil {
		t.Fatal(err)
	}
	// Every regular file, the symlink and the fifo; not the device.
	if n != 7 {
		t.Errorf("export counted %d paths, want 7", n)
	}
	if _, err := os.Lstat(filepath.Join(dst, "null")); !os.IsNotExist(err) {
		t.Errorf("a device was exported: %v", err)
	}
	root := os.Geteuid() == 0
	tests := []struct {
		rel          string
		mode         uint32 // S_IFMT and permission bits
		mtime, atime int64  // 0: not checked
		uid, gid     int    // -1: not checked
		xattr, val   string
	}{
		{"shared.txt", syscall.S_IFREG | 0o664, mtime, atime, 1234, 5678, "user.origin", "agent"},
		{"tool", syscall.S_IFREG | 0o4755, 0, 0, -1, -1, "", ""},
		{"ro", syscall.S_IFDIR | 0o555, mtime, atime, -1, -1, "", ""},
		{"ro/inside.txt", syscall.S_IFREG | 0o644, 0, 0, -1, -1, "", ""},
		{"team", syscall.S_IFDIR | 0o2775, 0, 0, -1, -1, "user.dir", "d"},
		{"base.txt", syscall.S_IFREG | 0o640, mtime, atime, -1, -1, "", ""},
		{"fifo", syscall.S_IFIFO | 0o620, 0, 0, -1, -1, "", ""},
		{"link", syscall.S_IFLNK | 0o777, 0, 0, -1, -1, "trusted.kept", "l"},
	}
	for _, tc := range tests {
		t.Run(tc.rel, func(t *testing.T) {
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(dst, tc.rel), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode != tc.mode {
				t.Errorf("mode %#o, want %#o", st.Mode, tc.mode)
			}
			if tc.mtime != 0 && st.Mtim.Nano() != tc.mtime {
				t.Errorf("mtime %d, want %d", st.Mtim.Nano(), tc.mtime)
			}
			if tc.atime != 0 && st.Atim.Nano() != tc.atime {
				t.Errorf("atime %d, want %d", st.Atim.Nano(), tc.atime)
			}
			if root && tc.uid >= 0 && (int(st.Uid) != tc.uid || int(st.Gid) != tc.gid) {
				t.Errorf("owner %d:%d, want %d:%d", st.Uid, st.Gid, tc.uid, tc.gid)
			}
			if tc.xattr != "" && (root || !strings.HasPrefix(tc.xattr, "trusted.")) {
				buf := make([]byte, 64)
				n, err := unix.Lgetxattr(filepath.Join(dst, tc.rel), tc.xattr, buf)
				if errors.Is(err, unix.EOPNOTSUPP) {
					t.Skipf("the test directory's file system keeps no xattrs")
				}
				if err != nil || string(buf[:n]) != tc.val {
					t.Errorf("xattr %s: %q, %v; want %q", tc.xattr, buf[:max(n, 0)], err, tc.val)
				}
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(dst, "ro", "inside.txt")); err != nil || string(b) != "in a read-only directory" {
		t.Errorf("file in a read-only directory: %q, %v", b, err)
	}
}
