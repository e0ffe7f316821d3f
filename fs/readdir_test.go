package fs

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"golang.org/x/sys/unix"
)

// dirent is one entry getdents64 returned.
type dirent struct {
	ino  uint64
	typ  uint8
	name string
}

// getdents reads the whole listing of the open directory fd from where it
// stands, as getdents64 gives it (with "." and "..").
func getdents(t *testing.T, fd int) []dirent {
	t.Helper()
	var out []dirent
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents: %v", err)
		}
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := binary.LittleEndian.Uint16(b[16:18])
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			out = append(out, dirent{ino: binary.LittleEndian.Uint64(b[0:8]), typ: b[18], name: string(name)})
			b = b[reclen:]
		}
	}
}

func inoOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestReaddirListsDots: every directory lists "." and ".." first, as
// directories, with their inode numbers (the root's ".." is the root).
func TestReaddirListsDots(t *testing.T) {
	sb := newSandbox(t, func(base string) { writeFile(t, base+"/b/sub/f", "f") })
	mustNil(t, "mkdir", os.Mkdir(sb.path("new"), 0o755))
	tests := []struct{ dir, parent string }{
		{".", "."},
		{"b", "."},
		{"b/sub", "b"},
		{"new", "."},
	}
	for _, tc := range tests {
		t.Run(tc.dir, func(t *testing.T) {
			fd, err := unix.Open(sb.path(tc.dir), unix.O_RDONLY|unix.O_DIRECTORY, 0)
			mustNil(t, "open", err)
			defer unix.Close(fd)
			ents := getdents(t, fd)
			if len(ents) < 2 || ents[0].name != "." || ents[1].name != ".." {
				t.Fatalf("listing begins %v, want . and ..", ents[:min(2, len(ents))])
			}
			if ents[0].ino != inoOf(t, sb.path(tc.dir)) || ents[1].ino != inoOf(t, sb.path(tc.parent)) {
				t.Errorf(". is %d and .. %d, want %d and %d", ents[0].ino, ents[1].ino, inoOf(t, sb.path(tc.dir)), inoOf(t, sb.path(tc.parent)))
			}
			for _, e := range ents[:2] {
				if e.typ != unix.DT_DIR {
					t.Errorf("%s has type %d, want a directory", e.name, e.typ)
				}
			}
			for _, e := range ents[2:] {
				if e.name == "." || e.name == ".." {
					t.Errorf("%s listed twice", e.name)
				}
			}
		})
	}
}

// TestRewinddirSeesChanges: a directory read to its end, changed, and
// rewound lists the change, and so does every later open (the kernel
// keeps listings it read: it must not keep the stale one).
func TestRewinddirSeesChanges(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		writeFile(t, base+"/old/a", "a")
		writeFile(t, base+"/old/b", "b")
	})
	mustNil(t, "mkdir", os.Mkdir(sb.path("fresh"), 0o755))
	writeFile(t, sb.path("fresh/a"), "a")
	writeFile(t, sb.path("fresh/b"), "b")
	tests := []struct {
		name, dir string
		change    func(dir string) error
		want      []string
	}{
		{"create in a base directory", "old", func(d string) error { return os.WriteFile(filepath.Join(d, "c"), nil, 0o644) }, []string{".", "..", "a", "b", "c"}},
		{"unlink in a base directory", "old", func(d string) error { return os.Remove(filepath.Join(d, "a")) }, []string{".", "..", "b", "c"}},
		{"create in a new directory", "fresh", func(d string) error { return os.Mkdir(filepath.Join(d, "c"), 0o755) }, []string{".", "..", "a", "b", "c"}},
		{"unlink in a new directory", "fresh", func(d string) error { return os.Remove(filepath.Join(d, "b")) }, []string{".", "..", "a", "c"}},
	}
	names := func(ents []dirent) []string {
		var out []string
		for _, e := range ents {
			out = append(out, e.name)
		}
		sort.Strings(out)
		return out
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := sb.path(tc.dir)
			fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			mustNil(t, "open", err)
			defer unix.Close(fd)
			getdents(t, fd)
			mustNil(t, "change", tc.change(dir))
			_, err = unix.Seek(fd, 0, 0)
			mustNil(t, "rewind", err)
			if got := names(getdents(t, fd)); !equalStrings(got, tc.want) {
				t.Errorf("after the rewind: %v, want %v", got, tc.want)
			}
			fd2, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			mustNil(t, "open again", err)
			defer unix.Close(fd2)
			if got := names(getdents(t, fd2)); !equalStrings(got, tc.want) {
				t.Errorf("a later open: %v, want %v", got, tc.want)
			}
		})
	}
}
