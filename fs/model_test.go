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
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestModel applies one seeded random sequence of operations to a mounted
// sandbox and to a plain directory that starts as a copy of the same base,
// and requires both to answer alike: the same errno for every operation,
// and the same tree (names, types, contents, permission bits, sizes, link
// counts, symlink targets) after every remount and at the end.
//
// STRATA_MODEL_SEED replays a seed; STRATA_MODEL_OPS sets the length;
// STRATA_MODEL_TRACE logs every operation and compares the trees after each.
func TestModel(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("STRATA_MODEL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("STRATA_MODEL_SEED: %v", err)
		}
	}
	nOps := 20000
	if s := os.Getenv("STRATA_MODEL_OPS"); s != "" {
		var err error
		if nOps, err = strconv.Atoi(s); err != nil {
			t.Fatalf("STRATA_MODEL_OPS: %v", err)
		}
	}
	const remountEvery = 200
	trace := os.Getenv("STRATA_MODEL_TRACE") != ""
	t.Logf("seed %d (replay with STRATA_MODEL_SEED=%d), %d operations", seed, seed, nOps)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d: replay with STRATA_MODEL_SEED=%d", seed, seed)
		}
	})
	rng := rand.New(rand.NewSource(seed))

	sb := newSandbox(t, func(base string) { fillModelBase(t, rng, base) })
	ref := filepath.Join(t.TempDir(), "ref")
	if out, err := exec.Command("cp", "-a", sb.base, ref).CombinedOutput(); err != nil {
		t.Fatalf("copy base: %v: %s", err, out)
	}
	compareTrees(t, sb.mnt, ref, "start")

	var history []string
	okOps := map[string]int{}
	for i := 0; i < nOps; i++ {
		desc, op := randomModelOp(rng)
		history = append(history, desc)
		gotErr := op(sb.mnt)
		wantErr := op(ref)
		if trace {
			t.Logf("op %d %s: %s", i, desc, errnoOf(gotErr))
			compareTrees(t, sb.mnt, ref, fmt.Sprintf("after op %d", i))
		}
		if errnoOf(gotErr) != errnoOf(wantErr) {
			t.Fatalf("op %d %s: mount got %v, reference got %v\nlast ops:\n%s",
				i, desc, gotErr, wantErr, strings.Join(history[max(0, len(history)-15):], "\n"))
		}
		if gotErr == nil {
			okOps[strings.Fields(desc)[0]]++
		}
		if (i+1)%remountEvery == 0 {
			compareTrees(t, sb.mnt, ref, fmt.Sprintf("after op %d", i))
			sb.remount()
			compareTrees(t, sb.mnt, ref, fmt.Sprintf("after op %d and a remount", i))
		}
	}
	compareTrees(t, sb.mnt, ref, "live at the end")
	sb.remount()
	compareTrees(t, sb.mnt, ref, "at the end after a remount")
	t.Logf("operations that succeeded, by kind: %v", okOps)
}

// Names are few on purpose, so operations collide: a name is a file in one
// place and a directory in another, renames hit existing names.
var (
	modelDirs   = []string{"", "a", "b", "a/a", "a/b", "b/a"}
	modelLeaves = []string{"a", "b", "f", "g", "h"}
	modelLinks  = []string{"f", "g", "a", "nowhere", "../f"}
)

func fillModelBase(t *testing.T, rng *rand.Rand, base string) {
	t.Helper()
	for _, d := range []string{"a", "b", "a/b"} {
		mustNil(t, "mkdir", os.MkdirAll(filepath.Join(base, d), 0o755))
	}
	for _, f := range []string{"f", "a/f", "a/g", "b/h", "a/b/f", "a/b/g"} {
		b := make([]byte, rng.Intn(200<<10))
		rng.Read(b)
		writeBytes(t, filepath.Join(base, f), b)
	}
	mustNil(t, "symlink", os.Symlink("h", filepath.Join(base, "b/g")))
	mustNil(t, "chmod", os.Chmod(filepath.Join(base, "a/g"), 0o600))
}

func randomPath(rng *rand.Rand) string {
	return filepath.Join(modelDirs[rng.Intn(len(modelDirs))], modelLeaves[rng.Intn(len(modelLeaves))])
}

func randomData(rng *rand.Rand) []byte {
	sizes := []int{1, 100, 4096, 65536, 70000, 140000}
	b := make([]byte, 1+rng.Intn(sizes[rng.Intn(len(sizes))]))
	rng.Read(b)
	return b
}

// randomModelOp draws one operation; the returned function applies it
// beneath a root directory.
func randomModelOp(rng *rand.Rand) (string, func(root string) error) {
	p := randomPath(rng)
	switch k := rng.Intn(13); k {
	case 0:
		mode := uint32(0o600 + rng.Intn(0o200))
		return fmt.Sprintf("create %s %o", p, mode), func(root string) error {
			fd, err := unix.Open(filepath.Join(root, p), unix.O_CREAT|unix.O_WRONLY, mode)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}
	case 1, 2:
		data := randomData(rng)
		off := rng.Int63n(300 << 10)
		return fmt.Sprintf("write %s %d bytes at %d", p, len(data), off), func(root string) error {
			fd, err := unix.Open(filepath.Join(root, p), unix.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			_, err = unix.Pwrite(fd, data, off)
			return err
		}
	case 3:
		size := rng.Int63n(300 << 10)
		if rng.Intn(3) == 0 {
			size = rng.Int63n(1000)
		}
		return fmt.Sprintf("truncate %s %d", p, size), func(root string) error {
			return unix.Truncate(filepath.Join(root, p), size)
		}
	case 4:
		data := randomData(rng)
		return fmt.Sprintf("append %s %d bytes", p, len(data)), func(root string) error {
			fd, err := unix.Open(filepath.Join(root, p), unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT, 0o644)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			_, err = unix.Write(fd, data)
			return err
		}
	case 5:
		return "mkdir " + p, func(root string) error { return unix.Mkdir(filepath.Join(root, p), 0o755) }
	case 6:
		return "rmdir " + p, func(root string) error { return unix.Rmdir(filepath.Join(root, p)) }
	case 7:
		return "unlink " + p, func(root string) error { return unix.Unlink(filepath.Join(root, p)) }
	case 8, 9:
		q := randomPath(rng)
		flags := []uint{0, 0, unix.RENAME_NOREPLACE, unix.RENAME_EXCHANGE}[rng.Intn(4)]
		return fmt.Sprintf("rename %s %s flags %d", p, q, flags), func(root string) error {
			return unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, p), unix.AT_FDCWD, filepath.Join(root, q), flags)
		}
	case 10:
		q := randomPath(rng)
		return fmt.Sprintf("link %s %s", p, q), func(root string) error {
			return unix.Link(filepath.Join(root, p), filepath.Join(root, q))
		}
	case 11:
		target := modelLinks[rng.Intn(len(modelLinks))]
		return fmt.Sprintf("symlink %s -> %s", p, target), func(root string) error {
			return unix.Symlink(target, filepath.Join(root, p))
		}
	default:
		mode := uint32(rng.Intn(0o1000))
		return fmt.Sprintf("chmod %s %o", p, mode), func(root string) error {
			return unix.Chmod(filepath.Join(root, p), mode)
		}
	}
}

func errnoOf(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e.Error()
	}
	return "other: " + err.Error()
}

// treeEntry is what the model compares about one name.
type treeEntry struct {
	Type   uint32
	Perm   uint32
	Size   int64 // files and symlinks
	Nlink  uint64
	Sum    [32]byte
	Target string
}

func snapshot(t *testing.T, root string) map[string]treeEntry {
	t.Helper()
	out := map[string]treeEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := treeEntry{Type: st.Mode & unix.S_IFMT, Perm: st.Mode & 0o7777, Nlink: uint64(st.Nlink)}
		switch e.Type {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if int64(len(b)) != st.Size {
				return fmt.Errorf("%s: read %d bytes, stat says %d", rel, len(b), st.Size)
			}
			e.Size, e.Sum = st.Size, sha256.Sum256(b)
		case unix.S_IFLNK:
			e.Size = st.Size
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
			e.Perm = 0 // symlink permission bits mean nothing
		case unix.S_IFDIR:
		}
		out[rel] = e
		return nil
	})
	mustNil(t, "walk "+root, err)
	return out
}

func compareTrees(t *testing.T, mnt, ref, when string) {
	t.Helper()
	got, want := snapshot(t, mnt), snapshot(t, ref)
	var diffs []string
	for name, w := range want {
		g, ok := got[name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: missing in the mount, want %+v", name, w))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%s: got %s, want %s", name, describe(g), describe(w)))
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: in the mount only: %s", name, describe(g)))
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%s: trees differ:\n%s", when, strings.Join(diffs, "\n"))
	}
}

func describe(e treeEntry) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "type %o perm %o nlink %d", e.Type, e.Perm, e.Nlink)
	switch e.Type {
	case unix.S_IFREG:
		fmt.Fprintf(&b, " size %d sum %x", e.Size, e.Sum[:4])
	case unix.S_IFLNK:
		fmt.Fprintf(&b, " -> %q", e.Target)
	}
	return b.String()
}
