package fs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/layers"
)

// ---- helpers ----------------------------------------------------------------

func lstat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatalf("lstat %s: %v", path, err)
	}
	return st
}

// wantErrno fails unless err carries errno.
func wantErrno(t *testing.T, what string, err error, errno syscall.Errno) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Fatalf("%s: got error %v, want %v", what, err, errno)
	}
}

func mustNil(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func randBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func writeBytes(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkBytes compares a file's content with want and reports the first
// differing offset.
func checkBytes(t *testing.T, path string, want []byte) {
	t.Helper()
	got := readBytes(t, path)
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Fatalf("%s: got %d bytes, want %d", path, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: byte %d: got %#x, want %#x", path, i, got[i], want[i])
		}
	}
}

func pwrite(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644)
	mustNil(t, "open "+path, err)
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatalf("pwrite %s at %d: %v", path, off, err)
	}
	mustNil(t, "close", f.Close())
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	mustNil(t, "readdir "+dir, err)
	out := make([]string, len(ents))
	for i, e := range ents {
		out[i] = e.Name()
	}
	return out
}

// diskUsage sums st_blocks*512 of every file below dir.
func diskUsage(t *testing.T, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			total += st.Blocks * 512
		}
		return nil
	})
	mustNil(t, "du "+dir, err)
	return total
}

func sha(t *testing.T, path string) [32]byte {
	t.Helper()
	return sha256.Sum256(readBytes(t, path))
}

// ---- create and open flags --------------------------------------------------

func TestCreateAndOpenFlags(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		writeFile(t, base+"/base.txt", "hello world")
	})
	writeFile(t, sb.path("upper.txt"), "upper content")

	t.Run("create", func(t *testing.T) {
		f, err := os.OpenFile(sb.path("new.txt"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
		mustNil(t, "create", err)
		if _, err := f.WriteString("fresh"); err != nil {
			t.Fatal(err)
		}
		f.Close()
		st := lstat(t, sb.path("new.txt"))
		if st.Mode&0o7777 != 0o640 || st.Mode&unix.S_IFMT != unix.S_IFREG {
			t.Fatalf("mode: got %o, want regular 0640", st.Mode)
		}
		if st.Uid != uint32(os.Getuid()) {
			t.Fatalf("uid: got %d, want %d", st.Uid, os.Getuid())
		}
		if got := readFile(t, sb.path("new.txt")); got != "fresh" {
			t.Fatalf("got %q, want %q", got, "fresh")
		}
	})
	for _, name := range []string{"base.txt", "upper.txt"} {
		t.Run("excl/"+name, func(t *testing.T) {
			_, err := os.OpenFile(sb.path(name), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
			wantErrno(t, "O_EXCL", err, syscall.EEXIST)
		})
		t.Run("trunc/"+name, func(t *testing.T) {
			f, err := os.OpenFile(sb.path(name), os.O_WRONLY|os.O_TRUNC, 0)
			mustNil(t, "open", err)
			if _, err := f.WriteString("hi"); err != nil {
				t.Fatal(err)
			}
			f.Close()
			if got := readFile(t, sb.path(name)); got != "hi" {
				t.Fatalf("got %q, want %q", got, "hi")
			}
		})
	}
	t.Run("append", func(t *testing.T) {
		p := sb.path("base.txt")
		f1, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		mustNil(t, "open 1", err)
		defer f1.Close()
		f2, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		mustNil(t, "open 2", err)
		defer f2.Close()
		want := "hi"
		for i := 0; i < 100; i++ {
			f, s := f1, fmt.Sprintf("a%03d\n", i)
			if i%2 == 1 {
				f, s = f2, fmt.Sprintf("b%03d\n", i)
			}
			if _, err := f.WriteString(s); err != nil {
				t.Fatal(err)
			}
			want += s
		}
		if got := readFile(t, p); got != want {
			t.Fatalf("two appenders: got %q, want %q", got, want)
		}
	})
	sb.remount()
	for name, want := range map[string]string{"new.txt": "fresh", "upper.txt": "hi"} {
		if got := readFile(t, sb.path(name)); got != want {
			t.Fatalf("%s after remount: got %q, want %q", name, got, want)
		}
	}
	if got := readFile(t, sb.path("base.txt")); !strings.HasPrefix(got, "hia000\nb001\n") || len(got) != 2+500 {
		t.Fatalf("base.txt after remount: got %q", got)
	}
	if got := readFile(t, sb.base+"/base.txt"); got != "hello world" {
		t.Fatalf("base changed: got %q, want %q", got, "hello world")
	}
}

// ---- data at offsets -----------------------------------------------------------

func TestReadWriteAtOffsets(t *testing.T) {
	const bs = 64 << 10
	orig := randBytes(1, 3*bs+123)
	sb := newSandbox(t, func(base string) { writeBytes(t, base+"/f", orig) })
	writes := []struct {
		name string
		off  int64
		n    int
	}{
		{"start", 0, 10},
		{"inside first block", 100, 1000},
		{"across a block boundary", bs - 7, 20},
		{"whole block", 2 * bs, bs},
		{"across two boundaries", bs/2 + bs, bs + 100},
		{"at the end", int64(len(orig)), 50},
		{"past the end", int64(len(orig)) + 3*bs + 5, 77},
		{"one byte", 5, 1},
	}
	for _, file := range []string{"f", "g"} {
		t.Run(file, func(t *testing.T) {
			model := []byte{}
			if file == "f" {
				model = append(model, orig...)
			} else {
				writeBytes(t, sb.path(file), nil)
			}
			for i, w := range writes {
				data := randBytes(int64(100+i), w.n)
				pwrite(t, sb.path(file), data, w.off)
				if end := int(w.off) + w.n; end > len(model) {
					model = append(model, make([]byte, end-len(model))...)
				}
				copy(model[w.off:], data)
				checkBytes(t, sb.path(file), model)
				// pread of a window around the write.
				f, err := os.Open(sb.path(file))
				mustNil(t, "open", err)
				lo := max(0, w.off-10)
				buf := make([]byte, w.n+20)
				n, _ := f.ReadAt(buf, lo)
				f.Close()
				wantN := min(len(buf), len(model)-int(lo))
				if n != wantN || !bytes.Equal(buf[:n], model[lo:int(lo)+n]) {
					t.Fatalf("%s: pread at %d: got %d bytes, want %d matching", w.name, lo, n, wantN)
				}
			}
			sb.remount()
			checkBytes(t, sb.path(file), model)
		})
	}
	checkBytes(t, sb.base+"/f", orig)
}

func TestSparseFile(t *testing.T) {
	sb := newSandbox(t, nil)
	p := sb.path("sparse")
	writeBytes(t, p, nil)
	const off = 10 << 20
	pwrite(t, p, []byte("tail"), off)
	check := func() {
		t.Helper()
		st := lstat(t, p)
		if st.Size != off+4 {
			t.Fatalf("size: got %d, want %d", st.Size, off+4)
		}
		// stat (and du) see the hole: one page holds data.
		if st.Blocks != 8 {
			t.Errorf("st_blocks: got %d, want 8 (one 4 KiB page)", st.Blocks)
		}
		want := make([]byte, off+4)
		copy(want[off:], "tail")
		checkBytes(t, p, want)
		// lseek sees it too, so cp and tar skip it.
		f, err := os.Open(p)
		mustNil(t, "open", err)
		defer f.Close()
		const bs = 64 << 10 // the sandbox's block size
		seeks := []struct {
			name   string
			off    int64
			whence int
			want   int64
			errno  syscall.Errno
		}{
			{"hole from the start", 0, unix.SEEK_HOLE, 0, 0},
			{"data from the start", 0, unix.SEEK_DATA, off / bs * bs, 0},
			{"hole after the data", off, unix.SEEK_HOLE, off + 4, 0},
			{"data past the end", off + 4, unix.SEEK_DATA, 0, syscall.ENXIO},
			{"hole past the end", off + 4, unix.SEEK_HOLE, 0, syscall.ENXIO},
		}
		for _, sk := range seeks {
			got, err := unix.Seek(int(f.Fd()), sk.off, sk.whence)
			if sk.errno != 0 {
				wantErrno(t, sk.name, err, sk.errno)
				continue
			}
			if err != nil || got != sk.want {
				t.Errorf("%s: got %d, %v; want %d", sk.name, got, err, sk.want)
			}
		}
	}
	check()
	if du := diskUsage(t, filepath.Join(sb.store.Dir(), "data")); du > 1<<20 {
		t.Fatalf("store data after a 4-byte write at 10 MiB: got %d bytes, want at most 1 MiB", du)
	}
	sb.remount()
	check()
}

func TestTruncate(t *testing.T) {
	const bs = 64 << 10
	orig := randBytes(2, 2*bs+500)
	cases := []struct {
		name  string
		upper bool
		down  int64
		up    int64
	}{
		{"base file, mid-block", false, 1000, 2*bs + 500},
		{"base file, block-aligned", false, bs, 3 * bs},
		{"base file, to zero", false, 0, 5000},
		{"upper file, mid-block", true, bs + 17, 2*bs + 500},
		{"upper file, to zero", true, 0, bs},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb := newSandbox(t, func(base string) { writeBytes(t, base+"/f", orig) })
			p := sb.path("f")
			if c.upper {
				mustNil(t, "remove", os.Remove(p))
				writeBytes(t, p, orig)
			}
			mustNil(t, "truncate down", os.Truncate(p, c.down))
			if got := lstat(t, p).Size; got != c.down {
				t.Fatalf("size after truncate down: got %d, want %d", got, c.down)
			}
			checkBytes(t, p, orig[:c.down])
			mustNil(t, "truncate up", os.Truncate(p, c.up))
			want := make([]byte, c.up)
			copy(want, orig[:c.down])
			checkBytes(t, p, want)
			sb.remount()
			checkBytes(t, p, want)
			// Truncating again after a remount hides the old bytes as well.
			mustNil(t, "truncate down", os.Truncate(p, c.down/2))
			mustNil(t, "truncate up", os.Truncate(p, c.up))
			want2 := make([]byte, c.up)
			copy(want2, orig[:c.down/2])
			checkBytes(t, p, want2)
			sb.remount()
			checkBytes(t, p, want2)
			checkBytes(t, sb.base+"/f", orig)
		})
	}
}

func TestFileOver4GiB(t *testing.T) {
	sb := newSandbox(t, nil)
	p := sb.path("big")
	const off = 5 << 30
	pwrite(t, p, []byte("far away"), off)
	check := func() {
		t.Helper()
		if got := lstat(t, p).Size; got != off+8 {
			t.Fatalf("size: got %d, want %d", got, int64(off+8))
		}
		f, err := os.Open(p)
		mustNil(t, "open", err)
		defer f.Close()
		buf := make([]byte, 16)
		n, _ := f.ReadAt(buf, off-8)
		want := append(make([]byte, 8), "far away"...)
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("read at 5 GiB-8: got %q, want %q", buf[:n], want)
		}
	}
	check()
	sb.remount()
	check()
}

// ---- namespace ---------------------------------------------------------------

func TestWhiteoutsSurviveRemount(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		writeFile(t, base+"/a", "a")
		writeFile(t, base+"/dir/b", "b")
		writeFile(t, base+"/dir/c", "c")
		mustNil(t, "mkdir", os.Mkdir(base+"/empty", 0o755))
	})
	mustNil(t, "unlink a", os.Remove(sb.path("a")))
	mustNil(t, "rmdir empty", os.Remove(sb.path("empty")))
	mustNil(t, "unlink dir/b", os.Remove(sb.path("dir/b")))
	wantErrno(t, "rmdir non-empty dir", unix.Rmdir(sb.path("dir")), syscall.ENOTEMPTY)
	wantErrno(t, "unlink of a dir", unix.Unlink(sb.path("dir")), syscall.EISDIR)
	wantErrno(t, "rmdir of a file", unix.Rmdir(sb.path("dir/c")), syscall.ENOTDIR)
	wantErrno(t, "unlink missing", unix.Unlink(sb.path("missing")), syscall.ENOENT)
	check := func() {
		t.Helper()
		for _, name := range []string{"a", "empty", "dir/b"} {
			if _, err := os.Lstat(sb.path(name)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("%s: got %v, want ENOENT", name, err)
			}
		}
		if got, want := listDir(t, sb.mnt), []string{"dir"}; !equalStrings(got, want) {
			t.Fatalf("root: got %v, want %v", got, want)
		}
		if got, want := listDir(t, sb.path("dir")), []string{"c"}; !equalStrings(got, want) {
			t.Fatalf("dir: got %v, want %v", got, want)
		}
	}
	check()
	sb.remount()
	check()
	// A name made anew over a whiteout shows only the new content.
	mustNil(t, "mkdir", os.Mkdir(sb.path("empty"), 0o700))
	writeFile(t, sb.path("a"), "new a")
	mustNil(t, "unlink dir/c", os.Remove(sb.path("dir/c")))
	mustNil(t, "rmdir dir", os.Remove(sb.path("dir")))
	sb.remount()
	if got := readFile(t, sb.path("a")); got != "new a" {
		t.Fatalf("a: got %q, want %q", got, "new a")
	}
	if got := listDir(t, sb.path("empty")); len(got) != 0 {
		t.Fatalf("recreated dir: got %v, want empty", got)
	}
	if got, want := listDir(t, sb.mnt), []string{"a", "empty"}; !equalStrings(got, want) {
		t.Fatalf("root: got %v, want %v", got, want)
	}
	for _, name := range []string{"a", "dir/b", "dir/c", "empty"} {
		if _, err := os.Lstat(filepath.Join(sb.base, name)); err != nil {
			t.Fatalf("base %s: %v", name, err)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMkdir(t *testing.T) {
	sb := newSandbox(t, func(base string) { mustNil(t, "mkdir", os.Mkdir(base+"/d", 0o755)) })
	before := lstat(t, sb.path("d")).Nlink
	mustNil(t, "mkdir", os.Mkdir(sb.path("d/sub"), 0o750))
	mustNil(t, "mkdirall", os.MkdirAll(sb.path("d/sub/x/y/z"), 0o755))
	wantErrno(t, "mkdir existing", unix.Mkdir(sb.path("d/sub"), 0o755), syscall.EEXIST)
	wantErrno(t, "mkdir in missing", unix.Mkdir(sb.path("nope/sub"), 0o755), syscall.ENOENT)
	check := func() {
		t.Helper()
		st := lstat(t, sb.path("d/sub"))
		if st.Mode != unix.S_IFDIR|0o750 {
			t.Fatalf("mode: got %o, want %o", st.Mode, unix.S_IFDIR|0o750)
		}
		if got := lstat(t, sb.path("d")).Nlink; got != before+1 {
			t.Fatalf("parent nlink: got %d, want %d", got, before+1)
		}
		if fi, err := os.Stat(sb.path("d/sub/x/y/z")); err != nil || !fi.IsDir() {
			t.Fatalf("d/sub/x/y/z: got %v, %v; want a directory", fi, err)
		}
	}
	check()
	sb.remount()
	check()
}

func TestReaddirManyCreatesAndDeletes(t *testing.T) {
	const nBase, nNew = 100, 2000
	sb := newSandbox(t, func(base string) {
		for i := 0; i < nBase; i++ {
			writeFile(t, fmt.Sprintf("%s/d/base%04d", base, i), "b")
		}
	})
	want := map[string]bool{}
	for i := 0; i < nBase; i++ {
		want[fmt.Sprintf("base%04d", i)] = true
	}
	for i := 0; i < nNew; i++ {
		name := fmt.Sprintf("new%05d", i)
		f, err := os.Create(sb.path("d/" + name))
		mustNil(t, "create", err)
		f.Close()
		want[name] = true
	}
	for i := 0; i < nNew; i += 2 {
		name := fmt.Sprintf("new%05d", i)
		mustNil(t, "remove", os.Remove(sb.path("d/"+name)))
		delete(want, name)
	}
	for i := 0; i < nBase; i += 2 {
		name := fmt.Sprintf("base%04d", i)
		mustNil(t, "remove", os.Remove(sb.path("d/"+name)))
		delete(want, name)
	}
	wantList := make([]string, 0, len(want))
	for n := range want {
		wantList = append(wantList, n)
	}
	sort.Strings(wantList)
	check := func(when string) {
		t.Helper()
		got := listDir(t, sb.path("d"))
		if !equalStrings(got, wantList) {
			t.Fatalf("%s: got %d names, want %d (first got %v)", when, len(got), len(wantList), got[:min(5, len(got))])
		}
	}
	check("live")
	sb.remount()
	check("after remount")
}

// ---- rename ------------------------------------------------------------------

func TestRename(t *testing.T) {
	fill := func(base string) {
		writeFile(t, base+"/file", "file")
		writeFile(t, base+"/other", "other")
		writeFile(t, base+"/dir/a", "a")
		writeFile(t, base+"/dir/sub/b", "b")
		writeFile(t, base+"/full/x", "x")
		mustNil(t, "mkdir", os.Mkdir(base+"/empty", 0o755))
	}
	type check struct {
		path, content string // content "" with dir: a directory; "-": absent
	}
	cases := []struct {
		name  string
		setup func(t *testing.T, sb *sandbox)
		do    func(sb *sandbox) error
		errno syscall.Errno
		after []check
	}{
		{
			name:  "base file",
			do:    func(sb *sandbox) error { return unix.Rename(sb.path("file"), sb.path("dir/moved")) },
			after: []check{{"dir/moved", "file"}, {"file", "-"}},
		},
		{
			name: "base dir with contents",
			do:   func(sb *sandbox) error { return unix.Rename(sb.path("dir"), sb.path("empty/moved")) },
			after: []check{
				{"empty/moved/a", "a"}, {"empty/moved/sub/b", "b"}, {"dir", "-"},
			},
		},
		{
			name: "upper dir",
			setup: func(t *testing.T, sb *sandbox) {
				writeFile(t, sb.path("up/deep/f"), "deep")
			},
			do:    func(sb *sandbox) error { return unix.Rename(sb.path("up"), sb.path("dir/sub/up2")) },
			after: []check{{"dir/sub/up2/deep/f", "deep"}, {"up", "-"}},
		},
		{
			name:  "over an existing file",
			do:    func(sb *sandbox) error { return unix.Rename(sb.path("file"), sb.path("other")) },
			after: []check{{"other", "file"}, {"file", "-"}},
		},
		{
			name:  "dir over an empty dir",
			do:    func(sb *sandbox) error { return unix.Rename(sb.path("dir"), sb.path("empty")) },
			after: []check{{"empty/a", "a"}, {"empty/sub/b", "b"}, {"dir", "-"}},
		},
		{
			name:  "dir onto a non-empty dir",
			do:    func(sb *sandbox) error { return unix.Rename(sb.path("dir"), sb.path("full")) },
			errno: syscall.ENOTEMPTY,
			after: []check{{"dir/a", "a"}, {"full/x", "x"}},
		},
		{
			name:  "file over a dir",
			do:    func(sb *sandbox) error { return unix.Rename(sb.path("file"), sb.path("empty")) },
			errno: syscall.EISDIR,
			after: []check{{"file", "file"}},
		},
		{
			name:  "dir over a file",
			do:    func(sb *sandbox) error { return unix.Rename(sb.path("empty"), sb.path("file")) },
			errno: syscall.ENOTDIR,
			after: []check{{"file", "file"}},
		},
		{
			name:  "dir below itself",
			do:    func(sb *sandbox) error { return unix.Rename(sb.path("dir"), sb.path("dir/sub/in")) },
			errno: syscall.EINVAL,
			after: []check{{"dir/sub/b", "b"}},
		},
		{
			name:  "missing source",
			do:    func(sb *sandbox) error { return unix.Rename(sb.path("nope"), sb.path("x")) },
			errno: syscall.ENOENT,
		},
		{
			name: "noreplace onto an existing name",
			do: func(sb *sandbox) error {
				return unix.Renameat2(unix.AT_FDCWD, sb.path("file"), unix.AT_FDCWD, sb.path("other"), unix.RENAME_NOREPLACE)
			},
			errno: syscall.EEXIST,
			after: []check{{"file", "file"}, {"other", "other"}},
		},
		{
			name: "noreplace onto a new name",
			do: func(sb *sandbox) error {
				return unix.Renameat2(unix.AT_FDCWD, sb.path("file"), unix.AT_FDCWD, sb.path("fresh"), unix.RENAME_NOREPLACE)
			},
			after: []check{{"fresh", "file"}, {"file", "-"}},
		},
		{
			name: "exchange two files",
			do: func(sb *sandbox) error {
				return unix.Renameat2(unix.AT_FDCWD, sb.path("file"), unix.AT_FDCWD, sb.path("other"), unix.RENAME_EXCHANGE)
			},
			after: []check{{"file", "other"}, {"other", "file"}},
		},
		{
			name: "exchange a file and a dir across directories",
			do: func(sb *sandbox) error {
				return unix.Renameat2(unix.AT_FDCWD, sb.path("file"), unix.AT_FDCWD, sb.path("dir/sub"), unix.RENAME_EXCHANGE)
			},
			after: []check{{"file/b", "b"}, {"dir/sub", "file"}},
		},
		{
			name: "exchange with a missing name",
			do: func(sb *sandbox) error {
				return unix.Renameat2(unix.AT_FDCWD, sb.path("file"), unix.AT_FDCWD, sb.path("nope"), unix.RENAME_EXCHANGE)
			},
			errno: syscall.ENOENT,
			after: []check{{"file", "file"}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sb := newSandbox(t, fill)
			if c.setup != nil {
				c.setup(t, sb)
			}
			err := c.do(sb)
			if c.errno != 0 {
				wantErrno(t, "rename", err, c.errno)
			} else {
				mustNil(t, "rename", err)
			}
			verify := func(when string) {
				t.Helper()
				for _, ck := range c.after {
					got, err := os.ReadFile(sb.path(ck.path))
					switch {
					case ck.content == "-":
						if !errors.Is(err, os.ErrNotExist) {
							t.Fatalf("%s: %s: got %v, want ENOENT", when, ck.path, err)
						}
					case err != nil:
						t.Fatalf("%s: %s: %v", when, ck.path, err)
					case string(got) != ck.content:
						t.Fatalf("%s: %s: got %q, want %q", when, ck.path, got, ck.content)
					}
				}
			}
			verify("live")
			sb.remount()
			verify("after remount")
			// The base is never written.
			for p, want := range map[string]string{"file": "file", "other": "other", "dir/a": "a", "dir/sub/b": "b"} {
				if got := readFile(t, filepath.Join(sb.base, p)); got != want {
					t.Fatalf("base %s: got %q, want %q", p, got, want)
				}
			}
		})
	}
}

// ---- symlinks and hard links -----------------------------------------------

func TestSymlinks(t *testing.T) {
	outside := t.TempDir()
	writeFile(t, outside+"/secret", "host secret")
	sb := newSandbox(t, func(base string) {
		writeFile(t, base+"/target", "target")
		mustNil(t, "symlink", os.Symlink("target", base+"/rel"))
		mustNil(t, "symlink", os.Symlink(outside, base+"/out"))
		mustNil(t, "symlink", os.Symlink("nowhere", base+"/dangling"))
	})
	mustNil(t, "mkdir", os.Mkdir(sb.path("upperlink-dir"), 0o755))
	mustNil(t, "symlink", os.Symlink("../target", sb.path("upperlink-dir/l")))
	check := func() {
		t.Helper()
		for _, c := range []struct{ name, target string }{
			{"rel", "target"}, {"out", outside}, {"dangling", "nowhere"}, {"upperlink-dir/l", "../target"},
		} {
			got, err := os.Readlink(sb.path(c.name))
			if err != nil || got != c.target {
				t.Fatalf("readlink %s: got %q, %v; want %q", c.name, got, err, c.target)
			}
			st := lstat(t, sb.path(c.name))
			if st.Mode&unix.S_IFMT != unix.S_IFLNK || st.Size != int64(len(c.target)) {
				t.Fatalf("lstat %s: got mode %o size %d, want a symlink of size %d", c.name, st.Mode, st.Size, len(c.target))
			}
		}
		if got := readFile(t, sb.path("rel")); got != "target" {
			t.Fatalf("through rel: got %q, want %q", got, "target")
		}
		if got := readFile(t, sb.path("upperlink-dir/l")); got != "target" {
			t.Fatalf("through upper link: got %q, want %q", got, "target")
		}
		if _, err := os.Stat(sb.path("dangling")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("stat dangling: got %v, want ENOENT", err)
		}
		// The link is shown, not followed: opening it without following
		// fails with ELOOP, and its listing type is a symlink.
		_, err := unix.Open(sb.path("out"), unix.O_RDONLY|unix.O_NOFOLLOW, 0)
		wantErrno(t, "open O_NOFOLLOW", err, syscall.ELOOP)
		ents, err := os.ReadDir(sb.mnt)
		mustNil(t, "readdir", err)
		for _, e := range ents {
			if (e.Name() == "out" || e.Name() == "dangling") && e.Type() != fs.ModeSymlink {
				t.Fatalf("%s: got type %v, want symlink", e.Name(), e.Type())
			}
		}
	}
	mustNil(t, "symlink", os.Symlink("../target", sb.path("l2")))
	check()
	sb.remount()
	check()
	wantErrno(t, "symlink over a name", unix.Symlink("x", sb.path("rel")), syscall.EEXIST)
	// Writing through a link pointing out of the sandbox is the caller's
	// own path resolution; the store never writes there itself.
	if got := readFile(t, outside+"/secret"); got != "host secret" {
		t.Fatalf("outside file: got %q", got)
	}
}

func TestHardLinks(t *testing.T) {
	sb := newSandbox(t, func(base string) { writeFile(t, base+"/base", "base content") })
	writeFile(t, sb.path("up"), "upper")
	mustNil(t, "link up", os.Link(sb.path("up"), sb.path("up2")))
	mustNil(t, "link base", os.Link(sb.path("base"), sb.path("dir-base2")))
	wantErrno(t, "link onto existing", unix.Link(sb.path("up"), sb.path("base")), syscall.EEXIST)
	mustNil(t, "mkdir", os.Mkdir(sb.path("d"), 0o755))
	wantErrno(t, "link a directory", unix.Link(sb.path("d"), sb.path("d2")), syscall.EPERM)

	nlinks := func(want uint64, names ...string) {
		t.Helper()
		ino := lstat(t, sb.path(names[0])).Ino
		for _, n := range names {
			st := lstat(t, sb.path(n))
			if uint64(st.Nlink) != want {
				t.Fatalf("%s: got nlink %d, want %d", n, st.Nlink, want)
			}
			if st.Ino != ino {
				t.Fatalf("%s: got ino %d, want %d", n, st.Ino, ino)
			}
		}
	}
	nlinks(2, "up", "up2")
	nlinks(2, "base", "dir-base2")
	pwrite(t, sb.path("up2"), []byte("UP"), 0)
	pwrite(t, sb.path("dir-base2"), []byte("BASE"), 0)
	check := func() {
		t.Helper()
		if got := readFile(t, sb.path("up")); got != "UPper" {
			t.Fatalf("up: got %q, want %q", got, "UPper")
		}
		if got := readFile(t, sb.path("base")); got != "BASE content" {
			t.Fatalf("base via old name: got %q, want %q", got, "BASE content")
		}
		nlinks(2, "up", "up2")
		nlinks(2, "base", "dir-base2")
	}
	check()
	sb.remount()
	check()
	pwrite(t, sb.path("base"), []byte("b"), 0)
	if got := readFile(t, sb.path("dir-base2")); got != "bASE content" {
		t.Fatalf("new name after write via old: got %q", got)
	}
	mustNil(t, "unlink up", os.Remove(sb.path("up")))
	mustNil(t, "unlink base", os.Remove(sb.path("base")))
	nlinks(1, "up2")
	nlinks(1, "dir-base2")
	sb.remount()
	nlinks(1, "up2")
	nlinks(1, "dir-base2")
	if got := readFile(t, sb.path("up2")); got != "UPper" {
		t.Fatalf("up2: got %q", got)
	}
	if got := readFile(t, sb.path("dir-base2")); got != "bASE content" {
		t.Fatalf("dir-base2: got %q", got)
	}
	if got := readFile(t, sb.base+"/base"); got != "base content" {
		t.Fatalf("base file on the host: got %q", got)
	}
}

// ---- attributes -------------------------------------------------------------

func TestAttributesPersist(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		writeFile(t, base+"/base", "b")
		mustNil(t, "mkdir", os.Mkdir(base+"/bdir", 0o755))
	})
	writeFile(t, sb.path("upper"), "u")
	atime := time.Date(2001, 2, 3, 4, 5, 6, 123456789, time.UTC)
	mtime := time.Date(2002, 3, 4, 5, 6, 7, 987654321, time.UTC)
	for i, name := range []string{"base", "bdir", "upper"} {
		p := sb.path(name)
		mustNil(t, "chmod", os.Chmod(p, os.FileMode(0o600+i)|os.ModeSetgid))
		mustNil(t, "chown", os.Lchown(p, 1000+i, 2000+i))
		ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
		mustNil(t, "utimens", unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	check := func() {
		t.Helper()
		for i, name := range []string{"base", "bdir", "upper"} {
			st := lstat(t, sb.path(name))
			if st.Mode&0o7777 != uint32(0o2600+i) {
				t.Fatalf("%s mode: got %o, want %o", name, st.Mode&0o7777, 0o2600+i)
			}
			if st.Uid != uint32(1000+i) || st.Gid != uint32(2000+i) {
				t.Fatalf("%s owner: got %d:%d, want %d:%d", name, st.Uid, st.Gid, 1000+i, 2000+i)
			}
			if got := time.Unix(st.Atim.Unix()); !got.Equal(atime) {
				t.Fatalf("%s atime: got %v, want %v", name, got, atime)
			}
			if got := time.Unix(st.Mtim.Unix()); !got.Equal(mtime) {
				t.Fatalf("%s mtime: got %v, want %v", name, got, mtime)
			}
		}
	}
	check()
	sb.remount()
	check()
	if st := lstat(t, sb.base+"/base"); st.Mode&0o7777 != 0o644 || st.Uid != uint32(os.Getuid()) {
		t.Fatalf("base file changed on the host: mode %o uid %d", st.Mode, st.Uid)
	}
}

func TestXattrs(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		writeFile(t, base+"/base", "b")
		mustNil(t, "setxattr on host", unix.Setxattr(base+"/base", "user.host", []byte("from host"), 0))
	})
	writeFile(t, sb.path("upper"), "u")
	get := func(p, name string) (string, error) {
		buf := make([]byte, 256)
		n, err := unix.Getxattr(p, name, buf)
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	list := func(p string) []string {
		t.Helper()
		buf := make([]byte, 1024)
		n, err := unix.Listxattr(p, buf)
		mustNil(t, "listxattr", err)
		var out []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if strings.HasPrefix(s, "user.") {
				out = append(out, s)
			}
		}
		sort.Strings(out)
		return out
	}
	if got, err := get(sb.path("base"), "user.host"); err != nil || got != "from host" {
		t.Fatalf("base xattr: got %q, %v; want %q", got, err, "from host")
	}
	for _, name := range []string{"base", "upper"} {
		p := sb.path(name)
		mustNil(t, "setxattr", unix.Setxattr(p, "user.one", []byte("1"), 0))
		mustNil(t, "setxattr", unix.Setxattr(p, "user.two", []byte("22"), 0))
		mustNil(t, "setxattr", unix.Setxattr(p, "user.gone", []byte("x"), 0))
		wantErrno(t, "XATTR_CREATE on existing", unix.Setxattr(p, "user.one", []byte("x"), unix.XATTR_CREATE), syscall.EEXIST)
		wantErrno(t, "XATTR_REPLACE on missing", unix.Setxattr(p, "user.nope", []byte("x"), unix.XATTR_REPLACE), syscall.ENODATA)
		mustNil(t, "removexattr", unix.Removexattr(p, "user.gone"))
		wantErrno(t, "removexattr missing", unix.Removexattr(p, "user.gone"), syscall.ENODATA)
		_, err := get(p, "user.nope")
		wantErrno(t, "getxattr missing", err, syscall.ENODATA)
		buf := make([]byte, 1)
		_, err = unix.Getxattr(p, "user.two", buf)
		wantErrno(t, "getxattr small buffer", err, syscall.ERANGE)
		// An inode's attributes are bounded, as on ext4: past the bound
		// setxattr fails with ENOSPC and the set stays as it was.
		wantErrno(t, "setxattr past the bound", unix.Setxattr(p, "user.big", make([]byte, layers.MaxXattrSpace), 0), syscall.ENOSPC)
	}
	check := func() {
		t.Helper()
		want := map[string][]string{
			"base":  {"user.host", "user.one", "user.two"},
			"upper": {"user.one", "user.two"},
		}
		for name, names := range want {
			if got := list(sb.path(name)); !equalStrings(got, names) {
				t.Fatalf("%s: listxattr got %v, want %v", name, got, names)
			}
			if got, err := get(sb.path(name), "user.two"); err != nil || got != "22" {
				t.Fatalf("%s: user.two got %q, %v; want %q", name, got, err, "22")
			}
		}
	}
	check()
	sb.remount()
	check()
	buf := make([]byte, 64)
	n, err := unix.Listxattr(sb.base+"/base", buf)
	mustNil(t, "host listxattr", err)
	if got := string(buf[:n]); got != "user.host\x00" {
		t.Fatalf("host xattrs changed: got %q", got)
	}
}

func TestMkfifoStatfsFsync(t *testing.T) {
	sb := newSandbox(t, nil)
	mustNil(t, "mkfifo", unix.Mkfifo(sb.path("fifo"), 0o640))
	wantErrno(t, "mkfifo existing", unix.Mkfifo(sb.path("fifo"), 0o640), syscall.EEXIST)
	var sfs unix.Statfs_t
	mustNil(t, "statfs", unix.Statfs(sb.mnt, &sfs))
	if sfs.Blocks == 0 || sfs.Bsize == 0 || sfs.Namelen != 255 {
		t.Fatalf("statfs: got blocks %d bsize %d namelen %d, want non-zero sizes and namelen 255", sfs.Blocks, sfs.Bsize, sfs.Namelen)
	}
	f, err := os.Create(sb.path("f"))
	mustNil(t, "create", err)
	_, err = f.WriteString("durable")
	mustNil(t, "write", err)
	mustNil(t, "fsync", f.Sync())
	mustNil(t, "fdatasync", unix.Fdatasync(int(f.Fd())))
	f.Close()
	d, err := os.Open(sb.mnt)
	mustNil(t, "open dir", err)
	mustNil(t, "fsync dir", d.Sync())
	d.Close()
	sb.remount()
	st := lstat(t, sb.path("fifo"))
	if st.Mode != unix.S_IFIFO|0o640 {
		t.Fatalf("fifo mode: got %o, want %o", st.Mode, unix.S_IFIFO|0o640)
	}
	if got := readFile(t, sb.path("f")); got != "durable" {
		t.Fatalf("f: got %q", got)
	}
}

func TestSharedMmap(t *testing.T) {
	sb := newSandbox(t, func(base string) { writeBytes(t, base+"/base", randBytes(3, 100000)) })
	for _, name := range []string{"new", "base"} {
		t.Run(name, func(t *testing.T) {
			p := sb.path(name)
			f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
			mustNil(t, "open", err)
			defer f.Close()
			var want []byte
			if name == "base" {
				want = randBytes(3, 100000)
			} else {
				want = make([]byte, 100000)
				mustNil(t, "ftruncate", f.Truncate(int64(len(want))))
			}
			m, err := unix.Mmap(int(f.Fd()), 0, len(want), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			mustNil(t, "mmap", err)
			for _, off := range []int{0, 4095, 65536, 99999} {
				m[off] = byte(off%251) + 1
				want[off] = byte(off%251) + 1
			}
			mustNil(t, "msync", unix.Msync(m, unix.MS_SYNC))
			mustNil(t, "munmap", unix.Munmap(m))
			mustNil(t, "close", f.Close())
			got := make([]byte, len(want))
			g, err := os.Open(p)
			mustNil(t, "open", err)
			_, err = g.ReadAt(got, 0)
			g.Close()
			mustNil(t, "read", err)
			if !bytes.Equal(got, want) {
				t.Fatalf("read(2) after munmap: content differs")
			}
			sb.remount()
			checkBytes(t, p, want)
		})
	}
}

// ---- concurrency -------------------------------------------------------------

const childEnv = "STRATA_FS_TEST_CHILD"

// TestConcurrentChild is not a test of its own: TestConcurrentAccess runs
// the test binary again with childEnv set, and this writes from there.
func TestConcurrentChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("helper process for TestConcurrentAccess")
	}
	parts := strings.Split(spec, ",")
	dir := parts[0]
	id, _ := strconv.Atoi(parts[1])
	if err := concurrentWriter(dir, 100+id); err != nil {
		t.Fatal(err)
	}
}

const concurrentChunk = 4096

// concurrentWriter writes its own file and its own chunks of the shared file.
func concurrentWriter(dir string, id int) error {
	own := bytes.Repeat([]byte{byte(id)}, 10000+id)
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("own-%d", id)), own, 0o644); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(dir, "shared"), os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte{byte(id)}, concurrentChunk)
	for round := 0; round < 8; round++ {
		off := int64(round*200+id) * concurrentChunk
		if _, err := f.WriteAt(chunk, off); err != nil {
			return err
		}
	}
	return f.Close()
}

func TestConcurrentAccess(t *testing.T) {
	sb := newSandbox(t, nil)
	writeBytes(t, sb.path("shared"), nil)
	const goroutines, procs = 16, 4
	var wg sync.WaitGroup
	errs := make(chan error, goroutines+procs)
	for i := 0; i < goroutines; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- concurrentWriter(sb.mnt, i)
		}()
	}
	for i := 0; i < procs; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrentChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%d", childEnv, sb.mnt, i))
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Errorf("child %d: %v: %s", i, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ids := []int{}
	for i := 0; i < goroutines; i++ {
		ids = append(ids, i)
	}
	for i := 0; i < procs; i++ {
		ids = append(ids, 100+i)
	}
	check := func() {
		t.Helper()
		shared := readBytes(t, sb.path("shared"))
		for _, id := range ids {
			own := readBytes(t, sb.path(fmt.Sprintf("own-%d", id)))
			if want := bytes.Repeat([]byte{byte(id)}, 10000+id); !bytes.Equal(own, want) {
				t.Fatalf("own-%d: got %d bytes, want %d of %#x", id, len(own), len(want), id)
			}
			for round := 0; round < 8; round++ {
				off := (round*200 + id) * concurrentChunk
				if off+concurrentChunk > len(shared) {
					t.Fatalf("shared: size %d, want past %d", len(shared), off+concurrentChunk)
				}
				if c := shared[off : off+concurrentChunk]; !bytes.Equal(c, bytes.Repeat([]byte{byte(id)}, concurrentChunk)) {
					t.Fatalf("shared chunk of writer %d round %d: wrong bytes", id, round)
				}
			}
		}
	}
	check()
	sb.remount()
	check()
}

// ---- identity and cost -------------------------------------------------------

func TestInodeNumbersStable(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		writeFile(t, base+"/base", "b")
		writeFile(t, base+"/dir/inner", "i")
	})
	writeFile(t, sb.path("upper"), "u")
	mustNil(t, "mkdir", os.Mkdir(sb.path("updir"), 0o755))
	mustNil(t, "rename", os.Rename(sb.path("dir"), sb.path("moved")))
	names := []string{".", "base", "moved", "moved/inner", "upper", "updir"}
	before := map[string]uint64{}
	for _, n := range names {
		before[n] = lstat(t, sb.path(n)).Ino
	}
	if before["."] != 1 {
		t.Fatalf("root ino: got %d, want 1", before["."])
	}
	if host := lstat(t, sb.base+"/base").Ino; before["base"] != host {
		t.Fatalf("base file ino: got %d, want the host's %d", before["base"], host)
	}
	sb.remount()
	for _, n := range names {
		if got := lstat(t, sb.path(n)).Ino; got != before[n] {
			t.Fatalf("%s: ino got %d, want %d", n, got, before[n])
		}
	}
}

func TestSmallWriteIntoLargeBaseFile(t *testing.T) {
	const size = 64 << 20
	sb := newSandbox(t, func(base string) {
		f, err := os.Create(base + "/large")
		mustNil(t, "create", err)
		chunk := randBytes(4, 1<<20)
		for i := 0; i < size/len(chunk); i++ {
			chunk[0] = byte(i)
			if _, err := f.Write(chunk); err != nil {
				t.Fatal(err)
			}
		}
		mustNil(t, "close", f.Close())
	})
	baseSum := sha(t, sb.base+"/large")
	data := filepath.Join(sb.store.Dir(), "data")
	before := diskUsage(t, data)
	f, err := os.OpenFile(sb.path("large"), os.O_RDWR, 0)
	mustNil(t, "open", err)
	patch := bytes.Repeat([]byte{0xAB}, 4096)
	const off = size/2 + 1000
	_, err = f.WriteAt(patch, off)
	mustNil(t, "write", err)
	mustNil(t, "fsync", f.Sync())
	f.Close()
	after := diskUsage(t, data)
	if grew := after - before; grew > 64<<10+8<<10 {
		t.Fatalf("store data grew by %d bytes for a 4 KiB write, want at most 64 KiB + 8 KiB", grew)
	}
	if sha(t, sb.base+"/large") != baseSum {
		t.Fatalf("base file changed")
	}
	got := make([]byte, 3*4096)
	g, err := os.Open(sb.path("large"))
	mustNil(t, "open", err)
	_, err = g.ReadAt(got, off-4096)
	g.Close()
	mustNil(t, "read", err)
	if !bytes.Equal(got[4096:8192], patch) {
		t.Fatalf("patched range reads back wrong")
	}
	orig := readBytes(t, sb.base+"/large")
	if !bytes.Equal(got[:4096], orig[off-4096:off]) || !bytes.Equal(got[8192:], orig[off+4096:off+8192]) {
		t.Fatalf("bytes around the patch changed")
	}
}

// TestChmodZero: mode 0 is a mode like any other (go-fuse shows it as 0644
// unless told not to).
func TestChmodZero(t *testing.T) {
	sb := newSandbox(t, func(base string) { writeFile(t, base+"/base", "b") })
	writeFile(t, sb.path("upper"), "u")
	mustNil(t, "mkdir", os.Mkdir(sb.path("dir"), 0o755))
	for _, name := range []string{"base", "upper", "dir"} {
		mustNil(t, "chmod", unix.Chmod(sb.path(name), 0))
	}
	check := func() {
		t.Helper()
		for _, name := range []string{"base", "upper", "dir"} {
			if got := lstat(t, sb.path(name)).Mode & 0o7777; got != 0 {
				t.Fatalf("%s: got mode %o, want 0", name, got)
			}
		}
	}
	check()
	sb.remount()
	check()
}
