package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const (
	kib = 1 << 10
	mib = 1 << 20
	gib = 1 << 30

	sector = 4 * kib // every 4 KiB of generated data carries a stamp
)

// sizes are the workload sizes at one scale.
type sizes struct {
	SeqWrite      int64 // seq-write-1g: bytes written
	BigFile       int64 // seq-read-1g, small-write-1g-base: base file size
	RandFile      int64 // rand-4k: base file size
	RandOps       int   // rand-4k: reads, and as many writes
	SmallFiles    int   // small-files: files created, stat'ed, unlinked
	SmallFileSize int
	TarFiles      int // untar: files in the tarball
	GoPkgs        int // go-build: packages
	GoFiles       int // go-build: files per package
	FsyncOps      int // fsync-loop: write+fsync rounds
	RepoFiles     int // tree-walk: files in the base's git repository
}

func scaledSizes(scale float64) sizes {
	bytesAt := func(full int64) int64 {
		n := (int64(float64(full)*scale) + mib - 1) / mib * mib // whole MiB
		return max(n, mib)
	}
	countAt := func(full, least int) int {
		return max(int(float64(full)*scale+0.5), least)
	}
	return sizes{
		SeqWrite:      bytesAt(gib),
		BigFile:       bytesAt(gib),
		RandFile:      bytesAt(256 * mib),
		RandOps:       countAt(20000, 100),
		SmallFiles:    countAt(20000, 100),
		SmallFileSize: 1 * kib,
		TarFiles:      countAt(5000, 50),
		GoPkgs:        countAt(200, 4),
		GoFiles:       3,
		FsyncOps:      countAt(2000, 100),
		RepoFiles:     countAt(15000, 100),
	}
}

// --- generated data
//
// Bulk data is a fixed 1 MiB random pattern with a stamp (file id and
// offset) at the start of every 4 KiB sector. Byte x of file id therefore
// has one known value, reads can be checked cheaply, and no two sectors are
// alike: a store that deduplicates or compresses blocks gets no free ride.

var pattern = func() []byte {
	b := make([]byte, mib)
	r := rand.NewChaCha8([32]byte{'s', 't', 'r', 'a', 't', 'a'})
	_, _ = r.Read(b)
	return b
}()

// fillData fills buf with the content of file id at offset off.
func fillData(buf []byte, id uint64, off int64) {
	for i := 0; i < len(buf); {
		p := int((off + int64(i)) % mib)
		i += copy(buf[i:], pattern[p:])
	}
	// Stamp every sector that starts inside buf.
	first := (off + sector - 1) / sector * sector
	for s := first; s+16 <= off+int64(len(buf)); s += sector {
		stamp(buf[s-off:], id, s)
	}
}

func stamp(b []byte, id uint64, off int64) {
	binary.LittleEndian.PutUint64(b, id)
	binary.LittleEndian.PutUint64(b[8:], uint64(off))
}

// checkData checks the stamps of buf, read from file id at offset off.
func checkData(buf []byte, id uint64, off int64) error {
	first := (off + sector - 1) / sector * sector
	for s := first; s+16 <= off+int64(len(buf)); s += sector {
		b := buf[s-off:]
		gotID, gotOff := binary.LittleEndian.Uint64(b), int64(binary.LittleEndian.Uint64(b[8:]))
		if gotID != id || gotOff != s {
			return fmt.Errorf("wrong data at offset %d: stamp (file %d, offset %d), want (file %d, offset %d)",
				s, gotID, gotOff, id, s)
		}
	}
	return nil
}

// File ids of generated data.
const (
	idBig      = 1 // big.bin, the 1 GiB base file
	idRand     = 2 // rand.bin, the 256 MiB base file
	idSeqWrite = 3 // seq-write-1g's new file
	idSmall    = 4 // small-write-1g-base's 4 KiB
	idRandW    = 5 // rand-4k's writes (plus the op number << 32)
	idFiles    = 6 // small-files' content (plus the file number << 32)
	idFsync    = 7 // fsync-loop's file
)

// writeDataFile writes size bytes of file id to path.
func writeDataFile(path string, id uint64, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, mib)
	for off := int64(0); off < size; off += mib {
		b := buf[:min(mib, size-off)]
		fillData(b, id, off)
		if _, err := f.Write(b); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// --- fixtures

// A fixture is a generated base directory, built once per work dir and
// shared (read-only) by every target and repetition.
type fixture struct {
	name  string // unique per content, sizes included
	build func(dir string) error
}

// fixture returns the base directory of f, building it on first use. A
// finished fixture has a sibling NAME.done, so a reused -work dir skips it.
func (h *harness) fixture(f fixture) (string, error) {
	dir := filepath.Join(h.work, "fixtures", f.name)
	done := dir + ".done"
	if _, err := os.Stat(done); err == nil {
		return dir, nil
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	start := time.Now()
	if err := f.build(tmp); err != nil {
		return "", fmt.Errorf("build fixture %s: %w", f.name, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", err
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return "", err
	}
	h.logf("fixture %s built in %v", f.name, time.Since(start).Round(time.Millisecond))
	return dir, nil
}

const (
	probeFile    = "hello.txt"
	probeContent = "hello from the base\n"
)

func probeFixture() fixture {
	return fixture{name: "probe", build: func(dir string) error {
		return os.WriteFile(filepath.Join(dir, probeFile), []byte(probeContent), 0o644)
	}}
}

// emptyFixture is a base with next to nothing in it.
func emptyFixture() fixture {
	return fixture{name: "empty", build: func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "README"), []byte("strata-bench base\n"), 0o644)
	}}
}

func dataFixture(file string, id uint64, size int64) fixture {
	return fixture{name: fmt.Sprintf("%s-%d", strings.TrimSuffix(file, ".bin"), size), build: func(dir string) error {
		return writeDataFile(filepath.Join(dir, file), id, size)
	}}
}

// tarFixture holds src.tar: n generated source files across directories of
// 50, sizes from a few hundred bytes to 64 KiB.
func tarFixture(n int) fixture {
	return fixture{name: fmt.Sprintf("tar-%d", n), build: func(dir string) error {
		f, err := os.Create(filepath.Join(dir, "src.tar"))
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(f, mib)
		tw := tar.NewWriter(bw)
		mtime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
		r := rand.New(rand.NewPCG(7, 7))
		var content bytes.Buffer
		lastDir := ""
		for i := 0; i < n; i++ {
			d := fmt.Sprintf("src/d%02d/s%02d", i/500, i/50%10)
			for _, p := range tarDirs(lastDir, d) {
				if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: p + "/", Mode: 0o755, ModTime: mtime}); err != nil {
					return err
				}
			}
			lastDir = d
			size := 256 + r.IntN(8*kib)
			if i%50 == 49 {
				size = 64 * kib
			}
			genSource(&content, i, size, r)
			if err := tw.WriteHeader(&tar.Header{
				Typeflag: tar.TypeReg, Name: fmt.Sprintf("%s/f%04d.go", d, i),
				Mode: 0o644, Size: int64(content.Len()), ModTime: mtime,
			}); err != nil {
				return err
			}
			if _, err := tw.Write(content.Bytes()); err != nil {
				return err
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		return f.Close()
	}}
}

// repoFixture holds repo/: a git repository of n committed source files
// (as tarFixture's, across directories of 50 under src/), every file and
// directory dated 2024 so that no index entry is racily clean. The
// repository checks sizes and whole-second mtimes only
// (core.checkStat=minimal, core.trustctime=false): a copy of the base
// (the native target) has other inode numbers and ctimes, and would
// otherwise rehash every file at its first status, which no overlay does.
func repoFixture(n int) fixture {
	return fixture{name: fmt.Sprintf("repo-%d", n), build: func(dir string) error {
		git, err := exec.LookPath("git")
		if err != nil {
			return errors.New("no git command found")
		}
		repo := filepath.Join(dir, "repo")
		mtime := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
		r := rand.New(rand.NewPCG(7, 13))
		var content bytes.Buffer
		dirs := map[string]bool{}
		for i := 0; i < n; i++ {
			d := filepath.Join(repo, fmt.Sprintf("src/d%02d/s%02d", i/500, i/50%10))
			if !dirs[d] {
				if err := os.MkdirAll(d, 0o755); err != nil {
					return err
				}
				dirs[d] = true
			}
			size := 256 + r.IntN(8*kib)
			genSource(&content, i, size, r)
			p := filepath.Join(d, fmt.Sprintf("f%05d.go", i))
			if err := os.WriteFile(p, content.Bytes(), 0o644); err != nil {
				return err
			}
			if err := os.Chtimes(p, mtime, mtime); err != nil {
				return err
			}
		}
		if err := filepath.WalkDir(filepath.Join(repo, "src"), func(p string, de fs.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				err = os.Chtimes(p, mtime, mtime)
			}
			return err
		}); err != nil {
			return err
		}
		for _, args := range [][]string{
			{"init", "-q"},
			{"config", "core.checkStat", "minimal"},
			{"config", "core.trustctime", "false"},
			{"config", "gc.auto", "0"},
			{"add", "-A"},
			{"-c", "user.name=strata-bench", "-c", "user.email=bench@strata.invalid", "commit", "-q", "--no-gpg-sign", "-m", "fixture"},
		} {
			cmd := exec.Command(git, args...)
			cmd.Dir = repo
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("git %s: %v: %s", args[0], err, out)
			}
		}
		return nil
	}}
}

// genSource fills b with generated Go-like lines of file i, at least size
// bytes: the source files of the tar and repository fixtures.
func genSource(b *bytes.Buffer, i, size int, r *rand.Rand) {
	b.Reset()
	for line := 0; b.Len() < size; line++ {
		fmt.Fprintf(b, "func f%d_%d(x int) int { return x*%d + %d } // %x\n", i, line, r.IntN(1000), line, r.Uint64())
	}
}

// tarDirs lists the directories of to (outermost first) not shared with from.
func tarDirs(from, to string) []string {
	var out []string
	parts := strings.Split(to, "/")
	for i := range parts {
		p := strings.Join(parts[:i+1], "/")
		if from != p && !strings.HasPrefix(from, p+"/") {
			out = append(out, p)
		}
	}
	return out
}

// goModFixture holds gomod/: a module of n packages, files .go files each,
// no dependencies outside the module and none on the standard library, so
// it builds offline and the time goes to compiling it. Package i imports
// packages i/2 and i/3, which gives a shallow graph that builds in parallel.
func goModFixture(n, files int) fixture {
	return fixture{name: fmt.Sprintf("gomod-%dx%d", n, files), build: func(dir string) error {
		mod := filepath.Join(dir, "gomod")
		if err := os.MkdirAll(mod, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module benchmod\n\ngo 1.22\n"), 0o644); err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			pkg := fmt.Sprintf("p%03d", i)
			if err := os.Mkdir(filepath.Join(mod, pkg), 0o755); err != nil {
				return err
			}
			var deps []int
			if i >= 2 {
				deps = append(deps, i/2)
			}
			if i >= 3 && i/3 != i/2 {
				deps = append(deps, i/3)
			}
			for k := 0; k < files; k++ {
				src := goSource(pkg, k, deps)
				if err := os.WriteFile(filepath.Join(mod, pkg, fmt.Sprintf("f%d.go", k)), src, 0o644); err != nil {
					return err
				}
			}
		}
		return nil
	}}
}

func goSource(pkg string, k int, deps []int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by strata-bench. DO NOT EDIT.\n\npackage %s\n\n", pkg)
	if k == 0 {
		if len(deps) > 0 {
			b.WriteString("import (\n")
			for j, d := range deps {
				fmt.Fprintf(&b, "\td%d \"benchmod/p%03d\"\n", j, d)
			}
			b.WriteString(")\n\n")
		}
		b.WriteString("// Dep mixes in the dependencies.\nfunc Dep(x int) int {\n\ts := x\n")
		for j := range deps {
			fmt.Fprintf(&b, "\ts += d%d.F0_0(x + %d)\n", j, j)
		}
		b.WriteString("\treturn s\n}\n\n")
	}
	fmt.Fprintf(&b, `// T%[1]d is a generated type.
type T%[1]d struct {
	A, B int
	C    [4]int
	Name string
}

// Mix combines the fields.
func (t *T%[1]d) Mix(x int) int {
	s := t.A*x + t.B
	for i := range t.C {
		s += t.C[i] * (i + x)
	}
	return s + len(t.Name)
}

// Map%[1]d applies f to every element.
func Map%[1]d[E, R any](s []E, f func(E) R) []R {
	out := make([]R, 0, len(s))
	for _, e := range s {
		out = append(out, f(e))
	}
	return out
}
`, k)
	for j := 0; j < 20; j++ {
		fmt.Fprintf(&b, `
// F%[1]d_%[2]d is generated function %[2]d.
func F%[1]d_%[2]d(x int) int {
	t := T%[1]d{A: x, B: %[2]d, C: [4]int{%[2]d, %[3]d, %[4]d, x}, Name: "%[5]s.f%[1]d.%[2]d"}
	y := t.Mix(x + %[2]d)
	switch y %% 7 {
	case 0:
		y += %[3]d
	case 1:
		y ^= %[4]d
	case 2:
		y = y*3 - %[2]d
	default:
		y--
	}
	for i := 0; i < %[2]d%%5+1; i++ {
		y = y*31 + i
	}
	ys := Map%[1]d([]int{y, x, %[2]d}, func(v int) int { return v & 0xffff })
	return ys[0] + ys[1] - ys[2]
}
`, k, j, j*7+k, j*13+k, pkg)
	}
	return b.Bytes()
}
