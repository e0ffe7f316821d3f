package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// A workload runs once on a fresh target and reports one sample per phase.
// Its names say the full sizes; -size and -quick scale them.
type workload struct {
	name    string
	phases  []string // "" for a single unnamed phase
	about   func(sizes) string
	fixture func(sizes) fixture
	run     func(ctx context.Context, e *env) ([]sample, error)
}

// env is what a workload gets: the target's root and the sizes.
type env struct {
	root  string
	sz    sizes
	goBin string
	h     *harness
}

// dropCaches drops the page cache where it can; the report says when not.
func (e *env) dropCaches() {
	if err := dropCaches(); err != nil {
		e.h.note("Caches could not be dropped (%v): \"cold\" figures are not cold.", err)
	}
}

// sample is one timed phase. amount/dur is its throughput in unit; unit ""
// means time is the only figure that reads naturally.
type sample struct {
	phase  string
	dur    time.Duration
	amount float64
	unit   string
}

var workloads = []*workload{
	{
		name: "seq-write-1g",
		about: func(s sizes) string {
			return fmt.Sprintf("write a new %s file in 1 MiB chunks, then fsync", fmtBytes(s.SeqWrite))
		},
		fixture: func(sizes) fixture { return emptyFixture() },
		run:     runSeqWrite,
	},
	{
		name:   "seq-read-1g",
		phases: []string{"cold", "warm"},
		about: func(s sizes) string {
			return fmt.Sprintf("read a %s base file in 1 MiB chunks, after dropping caches (cold), then again (warm)", fmtBytes(s.BigFile))
		},
		fixture: func(s sizes) fixture { return dataFixture("big.bin", idBig, s.BigFile) },
		run:     runSeqRead,
	},
	{
		name:   "rand-4k",
		phases: []string{"read cold", "read warm", "write"},
		about: func(s sizes) string {
			return fmt.Sprintf("%d random 4 KiB preads of a %s base file after dropping caches (read cold); "+
				"the whole file read through the same descriptor (untimed), then %d more (read warm); "+
				"then open it O_RDWR (overlays copy it up here), %d random 4 KiB pwrites, fsync", s.RandOps, fmtBytes(s.RandFile), s.RandOps, s.RandOps)
		},
		fixture: func(s sizes) fixture { return dataFixture("rand.bin", idRand, s.RandFile) },
		run:     runRand4K,
	},
	{
		name:   "small-files",
		phases: []string{"create", "stat", "unlink"},
		about: func(s sizes) string {
			return fmt.Sprintf("create %d files of %s in directories of 1000, stat each, unlink each", s.SmallFiles, fmtBytes(int64(s.SmallFileSize)))
		},
		fixture: func(sizes) fixture { return emptyFixture() },
		run:     runSmallFiles,
	},
	{
		name: "untar",
		about: func(s sizes) string {
			return fmt.Sprintf("tar -xf of a base tarball of %d generated source files (no sync)", s.TarFiles)
		},
		fixture: func(s sizes) fixture { return tarFixture(s.TarFiles) },
		run:     runUntar,
	},
	{
		name: "go-build",
		about: func(s sizes) string {
			return fmt.Sprintf("go build ./... of a generated module of %d packages x %d files, GOCACHE fresh inside the target", s.GoPkgs, s.GoFiles)
		},
		fixture: func(s sizes) fixture { return goModFixture(s.GoPkgs, s.GoFiles) },
		run:     runGoBuild,
	},
	{
		name: "fsync-loop",
		about: func(s sizes) string {
			return fmt.Sprintf("%d rounds of a 100-byte pwrite at a random 4 KiB page of a new 256 KiB file and fsync (a database's or an editor's pattern)", s.FsyncOps)
		},
		fixture: func(sizes) fixture { return emptyFixture() },
		run:     runFsyncLoop,
	},
	{
		name:   "tree-walk",
		phases: []string{"git-status cold", "git-status warm", "find cold"},
		about: func(s sizes) string {
			return fmt.Sprintf("in a base git repository of %d files: git status after dropping caches (the target's first walk), "+
				"git status again, find -type f after dropping caches", s.RepoFiles)
		},
		fixture: func(s sizes) fixture { return repoFixture(s.RepoFiles) },
		run:     runTreeWalk,
	},
	{
		name: "small-write-1g-base",
		about: func(s sizes) string {
			return fmt.Sprintf("open a %s base file O_WRONLY, write 4 KiB in its middle, fsync", fmtBytes(s.BigFile))
		},
		fixture: func(s sizes) fixture { return dataFixture("big.bin", idBig, s.BigFile) },
		run:     runSmallWrite,
	},
}

func workloadByName(name string) *workload {
	for _, w := range workloads {
		if w.name == name {
			return w
		}
	}
	return nil
}

func workloadNames() []string {
	var names []string
	for _, w := range workloads {
		names = append(names, w.name)
	}
	return names
}

func phasesOf(w *workload) []string {
	if len(w.phases) == 0 {
		return []string{""}
	}
	return w.phases
}

func rowName(workload, phase string) string {
	if phase == "" {
		return workload
	}
	return workload + " " + phase
}

func runSeqWrite(ctx context.Context, e *env) ([]sample, error) {
	buf := make([]byte, mib)
	start := time.Now()
	f, err := os.OpenFile(filepath.Join(e.root, "seqwrite.bin"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for off := int64(0); off < e.sz.SeqWrite; off += mib {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		fillData(buf, idSeqWrite, off)
		if _, err := f.Write(buf); err != nil {
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("fsync: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return []sample{{dur: time.Since(start), amount: float64(e.sz.SeqWrite) / mib, unit: "MiB/s"}}, nil
}

func runSeqRead(ctx context.Context, e *env) ([]sample, error) {
	path := filepath.Join(e.root, "big.bin")
	var out []sample
	for _, phase := range []string{"cold", "warm"} {
		if phase == "cold" {
			e.dropCaches()
		}
		start := time.Now()
		if err := readChecked(ctx, path, idBig, e.sz.BigFile); err != nil {
			return nil, fmt.Errorf("%s read: %w", phase, err)
		}
		out = append(out, sample{phase: phase, dur: time.Since(start), amount: float64(e.sz.BigFile) / mib, unit: "MiB/s"})
	}
	return out, nil
}

// readChecked reads path front to back in 1 MiB chunks and checks that it
// holds size bytes of file id.
func readChecked(ctx context.Context, path string, id uint64, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return readAllChecked(ctx, f, id, size)
}

// readAllChecked is readChecked on an open file whose offset is 0.
func readAllChecked(ctx context.Context, f *os.File, id uint64, size int64) error {
	buf := make([]byte, mib)
	var off int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(f, buf)
		if err := checkData(buf[:n], id, off); err != nil {
			return err
		}
		off += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if off != size {
		return fmt.Errorf("read %d bytes, want %d", off, size)
	}
	return nil
}

func runRand4K(ctx context.Context, e *env) ([]sample, error) {
	path := filepath.Join(e.root, "rand.bin")
	blocks := e.sz.RandFile / sector
	buf := make([]byte, sector)
	ops := float64(e.sz.RandOps)
	var out []sample

	// Read phases on one descriptor: cold from a dropped cache, then warm
	// after reading the whole file through it (untimed).
	e.dropCaches()
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	for seq, phase := range []string{"read cold", "read warm"} {
		if phase == "read warm" {
			if err := readAllChecked(ctx, f, idRand, e.sz.RandFile); err != nil {
				return nil, fmt.Errorf("warm-up: %w", err)
			}
		}
		r := rand.New(rand.NewPCG(42, uint64(seq)))
		start := time.Now()
		for i := 0; i < e.sz.RandOps; i++ {
			off := r.Int64N(blocks) * sector
			if _, err := f.ReadAt(buf, off); err != nil {
				return nil, fmt.Errorf("pread at %d: %w", off, err)
			}
			if err := checkData(buf, idRand, off); err != nil {
				return nil, err
			}
		}
		out = append(out, sample{phase: phase, dur: time.Since(start), amount: ops, unit: "IOPS"})
	}
	f.Close()

	// Write phase, from the open(O_RDWR) that makes overlays copy up.
	r := rand.New(rand.NewPCG(42, 2))
	start := time.Now()
	w, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	defer w.Close()
	for i := 0; i < e.sz.RandOps; i++ {
		if i%1024 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		off := r.Int64N(blocks) * sector
		fillData(buf, idRandW|uint64(i)<<32, off)
		if _, err := w.WriteAt(buf, off); err != nil {
			return nil, fmt.Errorf("pwrite at %d: %w", off, err)
		}
	}
	if err := w.Sync(); err != nil {
		return nil, fmt.Errorf("fsync: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return append(out, sample{phase: "write", dur: time.Since(start), amount: ops, unit: "IOPS"}), nil
}

func runSmallFiles(ctx context.Context, e *env) ([]sample, error) {
	const perDir = 1000
	n := e.sz.SmallFiles
	top := filepath.Join(e.root, "small")
	var dirs, files []string
	for i := 0; i < n; i++ {
		if i%perDir == 0 {
			dirs = append(dirs, filepath.Join(top, fmt.Sprintf("d%03d", i/perDir)))
		}
		files = append(files, filepath.Join(dirs[len(dirs)-1], fmt.Sprintf("f%05d", i)))
	}
	buf := make([]byte, e.sz.SmallFileSize)

	start := time.Now()
	if err := os.Mkdir(top, 0o755); err != nil {
		return nil, err
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	for i, p := range files {
		if i%1000 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, err
		}
		fillData(buf, idFiles|uint64(i)<<32, 0)
		_, werr := f.Write(buf)
		if err := errors.Join(werr, f.Close()); err != nil {
			return nil, err
		}
	}
	create := time.Since(start)

	start = time.Now()
	for _, p := range files {
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		if fi.Size() != int64(len(buf)) {
			return nil, fmt.Errorf("stat %s: size %d, want %d", p, fi.Size(), len(buf))
		}
	}
	stat := time.Since(start)

	start = time.Now()
	for _, p := range files {
		if err := os.Remove(p); err != nil {
			return nil, err
		}
	}
	for _, d := range append(dirs, top) {
		if err := os.Remove(d); err != nil {
			return nil, err
		}
	}
	unlink := time.Since(start)
	fn := float64(n)
	return []sample{
		{phase: "create", dur: create, amount: fn, unit: "files/s"},
		{phase: "stat", dur: stat, amount: fn, unit: "files/s"},
		{phase: "unlink", dur: unlink, amount: fn, unit: "files/s"},
	}, nil
}

func runUntar(ctx context.Context, e *env) ([]sample, error) {
	if err := os.Mkdir(filepath.Join(e.root, "out"), 0o755); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "tar", "-xf", "src.tar", "-C", "out")
	cmd.Dir = e.root
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("tar -xf: %v: %s", err, lastLines(string(out), 3))
	}
	n, err := countFiles(filepath.Join(e.root, "out"))
	if err != nil {
		return nil, err
	}
	if n != e.sz.TarFiles {
		return nil, fmt.Errorf("tar extracted %d files, want %d", n, e.sz.TarFiles)
	}
	return []sample{{dur: d, amount: float64(n), unit: "files/s"}}, nil
}

func countFiles(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	return n, err
}

func runGoBuild(ctx context.Context, e *env) ([]sample, error) {
	if e.goBin == "" {
		return nil, errors.New("no go command found")
	}
	cmd := exec.CommandContext(ctx, e.goBin, "build", "./...")
	cmd.Dir = filepath.Join(e.root, "gomod")
	cmd.Env = goEnv(e.root)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	d := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("go build: %v: %s", err, lastLines(string(out), 5))
	}
	return []sample{{dur: d}}, nil
}

// goEnv is the environment for an offline build whose caches all live in
// the target.
func goEnv(root string) []string {
	override := map[string]string{
		"GOCACHE":     filepath.Join(root, ".gocache"),
		"GOMODCACHE":  filepath.Join(root, ".gomodcache"),
		"GOFLAGS":     "-mod=mod",
		"GOPROXY":     "off",
		"GOWORK":      "off",
		"GOTOOLCHAIN": "local",
		"CGO_ENABLED": "0",
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := override[k]; !ok {
			env = append(env, kv)
		}
	}
	for k, v := range override {
		env = append(env, k+"="+v)
	}
	return env
}

func runSmallWrite(_ context.Context, e *env) ([]sample, error) {
	path := filepath.Join(e.root, "big.bin")
	off := e.sz.BigFile / 2 / sector * sector
	buf := make([]byte, sector)
	fillData(buf, idSmall, off)

	start := time.Now()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.WriteAt(buf, off); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("fsync: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	d := time.Since(start)

	// Check, untimed: the new sector reads back and its neighbours are intact.
	r, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	got := make([]byte, 3*sector)
	if _, err := r.ReadAt(got, off-sector); err != nil {
		return nil, fmt.Errorf("read back: %w", err)
	}
	if err := errors.Join(
		checkData(got[:sector], idBig, off-sector),
		checkData(got[sector:2*sector], idSmall, off),
		checkData(got[2*sector:], idBig, off+sector),
	); err != nil {
		return nil, fmt.Errorf("read back: %w", err)
	}
	return []sample{{dur: d}}, nil
}

// runFsyncLoop: what a database commit or an editor's save costs, one
// durable small write at a time.
func runFsyncLoop(_ context.Context, e *env) ([]sample, error) {
	const size = 256 * kib
	path := filepath.Join(e.root, "fsync.db")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	want := make([]byte, size)
	fillData(want, idFsync, 0)
	if _, err := f.WriteAt(want, 0); err != nil {
		return nil, err
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("fsync: %w", err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	rec := make([]byte, 100)
	start := time.Now()
	for i := 0; i < e.sz.FsyncOps; i++ {
		off := int64(rng.IntN(size/sector))*sector + int64(rng.IntN(sector-len(rec)))
		for j := range rec {
			rec[j] = byte(i + j)
		}
		if _, err := f.WriteAt(rec, off); err != nil {
			return nil, err
		}
		copy(want[off:], rec)
		if err := f.Sync(); err != nil {
			return nil, fmt.Errorf("fsync: %w", err)
		}
	}
	d := time.Since(start)
	got := make([]byte, size)
	if _, err := f.ReadAt(got, 0); err != nil {
		return nil, fmt.Errorf("read back: %w", err)
	}
	if !bytes.Equal(got, want) {
		return nil, errors.New("read back: the file differs from what was written")
	}
	return []sample{{dur: d, amount: float64(e.sz.FsyncOps), unit: "fsyncs/s"}}, nil
}

// runTreeWalk: what an agent's first look at a workspace costs, and the
// walks it repeats. git status stats every tracked file (from several
// threads) and lists every directory; it must find the tree clean. It
// takes no optional locks, so it writes nothing on any target.
func runTreeWalk(ctx context.Context, e *env) ([]sample, error) {
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, errors.New("no git command found")
	}
	repo := filepath.Join(e.root, "repo")
	status := func() (time.Duration, error) {
		cmd := exec.CommandContext(ctx, git, "status", "--porcelain")
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		d := time.Since(start)
		if err != nil {
			return 0, fmt.Errorf("git status: %v: %s", err, lastLines(string(out), 3))
		}
		if len(out) != 0 {
			return 0, fmt.Errorf("git status: the tree is not clean: %s", lastLines(string(out), 3))
		}
		return d, nil
	}
	n := float64(e.sz.RepoFiles)
	e.dropCaches()
	cold, err := status()
	if err != nil {
		return nil, err
	}
	warm, err := status()
	if err != nil {
		return nil, err
	}
	e.dropCaches()
	cmd := exec.CommandContext(ctx, "find", "src", "-type", "f")
	cmd.Dir = repo
	start := time.Now()
	out, err := cmd.Output()
	find := time.Since(start)
	if err != nil {
		return nil, fmt.Errorf("find: %v", err)
	}
	if got := bytes.Count(out, []byte("\n")); got != e.sz.RepoFiles {
		return nil, fmt.Errorf("find found %d files, want %d", got, e.sz.RepoFiles)
	}
	return []sample{
		{phase: "git-status cold", dur: cold, amount: n, unit: "files/s"},
		{phase: "git-status warm", dur: warm, amount: n, unit: "files/s"},
		{phase: "find cold", dur: find, amount: n, unit: "files/s"},
	}, nil
}
