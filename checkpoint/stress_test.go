package checkpoint

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
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

	"github.com/strata-sandbox/strata/layers"
	"golang.org/x/sys/unix"
)

// The randomised stress test. Worker processes apply seeded random file
// operations, each within its own subtree, through a live mount and,
// identically, to a plain directory (the replica); every operation must
// answer alike on both. This process serves the mount and, at barriers
// where every worker has finished its share of the epoch, checkpoints,
// rolls back to random earlier checkpoints, restores archives, remounts,
// prunes and collects garbage; meanwhile, while the workers run, it takes
// checkpoints, verifies and collects garbage concurrently. At a barrier the
// replica is the model: a checkpoint keeps it in memory, and after a
// rollback the mount must equal it byte for byte (names, types, contents,
// permission bits, sizes, link counts, which names share an inode, symlink
// targets). Operation streams and barrier actions depend on the seed only,
// so STRATA_STRESS_SEED replays a run (the concurrent actions' timing
// aside).

// Environment of a worker process: the test binary re-executed.
const (
	stressWorkerEnv = "STRATA_STRESS_WORKER" // the worker's index; set only in workers
	stressMntEnv    = "STRATA_STRESS_WORKER_MNT"
	stressRefEnv    = "STRATA_STRESS_WORKER_REF"
	stressSeedEnv   = "STRATA_STRESS_WORKER_SEED"
)

// A worker process must not run the package's tests, and the package's
// TestMain belongs to crash_test.go: an init function is the one hook that
// runs before it.
func init() {
	if os.Getenv(stressWorkerEnv) != "" {
		os.Exit(stressWorkerMain(os.Stdin, os.Stdout))
	}
}

// workerReply is a worker's answer to "run N": how many operations it ran,
// how many succeeded by kind, or why it stopped.
type workerReply struct {
	Ops  int            `json:"ops"`
	Runs map[string]int `json:"runs"`
	OK   map[string]int `json:"ok"`
	Fail string         `json:"fail,omitempty"`
}

// stressWorkerMain is a worker process: for each line "run N" on in it
// applies its next N operations to the mount and to the replica and
// answers one JSON workerReply on out. It stops at the first operation
// whose outcomes differ.
func stressWorkerMain(in io.Reader, out io.Writer) int {
	mnt, ref := os.Getenv(stressMntEnv), os.Getenv(stressRefEnv)
	enc := json.NewEncoder(out)
	seed, err := strconv.ParseInt(os.Getenv(stressSeedEnv), 10, 64)
	if err != nil || mnt == "" || ref == "" {
		enc.Encode(workerReply{Fail: fmt.Sprintf("worker environment: mnt %q ref %q seed: %v", mnt, ref, err)})
		return 2
	}
	rng := rand.New(rand.NewSource(seed))
	var history []string
	done := 0
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		var n int
		if _, err := fmt.Sscanf(sc.Text(), "run %d", &n); err != nil {
			enc.Encode(workerReply{Fail: fmt.Sprintf("bad command %q", sc.Text())})
			return 2
		}
		rep := workerReply{Runs: map[string]int{}, OK: map[string]int{}}
		for i := 0; i < n; i++ {
			op := randomStressOp(rng)
			history = append(history, op.desc)
			if len(history) > 12 {
				history = history[1:]
			}
			gotObs, gotErr := op.do(mnt)
			wantObs, wantErr := op.do(ref)
			done++
			if errnoName(gotErr) != errnoName(wantErr) || gotObs != wantObs {
				rep.Fail = fmt.Sprintf("operation %d (%s): mount answered %s %s, replica %s %s; last operations: %s",
					done, op.desc, errnoName(gotErr), gotObs, errnoName(wantErr), wantObs, strings.Join(history, " | "))
				enc.Encode(rep)
				return 1
			}
			rep.Ops++
			rep.Runs[op.kind]++
			if gotErr == nil {
				rep.OK[op.kind]++
			}
		}
		if err := enc.Encode(rep); err != nil {
			return 1
		}
	}
	return 0
}

// Names are few on purpose, so operations collide: a name is a file in one
// place and a directory in another, renames and links hit existing names.
// Symlink targets never climb out of the worker's subtree, so nothing a
// worker does (O_CREAT through a dangling link included) reaches another's.
var (
	stressDirs    = []string{"", "a", "b", "a/a", "a/b", "b/a"}
	stressLeaves  = []string{"a", "b", "f", "g", "h"}
	stressTargets = []string{"f", "g", "a", "nowhere", "b/h"}
)

var castagnoliTable = crc32.MakeTable(crc32.Castagnoli)

// stressOp is one drawn operation; do applies it beneath a root and
// returns what it observed (data read, sizes) besides its error.
type stressOp struct {
	kind, desc string
	do         func(root string) (string, error)
}

// stressPath draws a path; a third of them in the subtree's root, which
// always exists, so that fewer operations fail for want of a parent.
func stressPath(rng *rand.Rand) string {
	dir := ""
	if rng.Intn(3) != 0 {
		dir = stressDirs[rng.Intn(len(stressDirs))]
	}
	return filepath.Join(dir, stressLeaves[rng.Intn(len(stressLeaves))])
}

func stressData(rng *rand.Rand) []byte {
	sizes := []int{1, 100, 4096, 20000, 65536, 70000}
	b := make([]byte, 1+rng.Intn(sizes[rng.Intn(len(sizes))]))
	rng.Read(b)
	return b
}

// randomStressOp draws one operation. Everything random is drawn here, so
// the mount and the replica get the same operation and the stream depends
// on the seed only.
func randomStressOp(rng *rand.Rand) stressOp {
	p := stressPath(rng)
	switch k := rng.Intn(21); k {
	case 0:
		mode := uint32(0o600 + rng.Intn(0o200))
		return stressOp{"create", fmt.Sprintf("create %s %o", p, mode), func(root string) (string, error) {
			fd, err := unix.Open(filepath.Join(root, p), unix.O_CREAT|unix.O_WRONLY|unix.O_EXCL, mode)
			if err == nil {
				unix.Close(fd)
			}
			return "", err
		}}
	case 1, 2, 3, 4:
		data := stressData(rng)
		off := rng.Int63n(200 << 10)
		return stressOp{"write", fmt.Sprintf("write %s %d bytes at %d", p, len(data), off), func(root string) (string, error) {
			fd, err := unix.Open(filepath.Join(root, p), unix.O_WRONLY|unix.O_CREAT, 0o644)
			if err != nil {
				return "", err
			}
			defer unix.Close(fd)
			n, err := unix.Pwrite(fd, data, off)
			return strconv.Itoa(n), err
		}}
	case 5:
		size := rng.Int63n(200 << 10)
		if rng.Intn(3) == 0 {
			size = rng.Int63n(1000)
		}
		return stressOp{"truncate", fmt.Sprintf("truncate %s %d", p, size), func(root string) (string, error) {
			return "", unix.Truncate(filepath.Join(root, p), size)
		}}
	case 6:
		data := stressData(rng)
		return stressOp{"append", fmt.Sprintf("append %s %d bytes", p, len(data)), func(root string) (string, error) {
			fd, err := unix.Open(filepath.Join(root, p), unix.O_WRONLY|unix.O_APPEND, 0)
			if err != nil {
				return "", err
			}
			defer unix.Close(fd)
			n, err := unix.Write(fd, data)
			return strconv.Itoa(n), err
		}}
	case 20:
		// Directories pile up otherwise (rmdir needs them empty), and
		// file operations on their names fail.
		return stressOp{"rmtree", "rm -r " + p, func(root string) (string, error) {
			return "", unwrapErrno(os.RemoveAll(filepath.Join(root, p)))
		}}
	case 7:
		return stressOp{"mkdir", "mkdir " + p, func(root string) (string, error) {
			return "", unix.Mkdir(filepath.Join(root, p), 0o755)
		}}
	case 8:
		return stressOp{"rmdir", "rmdir " + p, func(root string) (string, error) {
			return "", unix.Rmdir(filepath.Join(root, p))
		}}
	case 9:
		return stressOp{"unlink", "unlink " + p, func(root string) (string, error) {
			return "", unix.Unlink(filepath.Join(root, p))
		}}
	case 10, 11:
		q := stressPath(rng)
		flags := []uint{0, 0, unix.RENAME_NOREPLACE, unix.RENAME_EXCHANGE}[rng.Intn(4)]
		return stressOp{"rename", fmt.Sprintf("rename %s %s flags %d", p, q, flags), func(root string) (string, error) {
			return "", unix.Renameat2(unix.AT_FDCWD, filepath.Join(root, p), unix.AT_FDCWD, filepath.Join(root, q), flags)
		}}
	case 12:
		q := stressPath(rng)
		return stressOp{"link", fmt.Sprintf("link %s %s", p, q), func(root string) (string, error) {
			return "", unix.Link(filepath.Join(root, p), filepath.Join(root, q))
		}}
	case 13:
		target := stressTargets[rng.Intn(len(stressTargets))]
		return stressOp{"symlink", fmt.Sprintf("symlink %s -> %s", p, target), func(root string) (string, error) {
			return "", unix.Symlink(target, filepath.Join(root, p))
		}}
	case 14:
		mode := uint32(rng.Intn(0o1000))
		return stressOp{"chmod", fmt.Sprintf("chmod %s %o", p, mode), func(root string) (string, error) {
			return "", unix.Chmod(filepath.Join(root, p), mode)
		}}
	case 15, 16:
		// Fractions, not offsets: the size is known only when the file is
		// open, and drawing after that would make the stream depend on it.
		u, v, dataSeed := rng.Float64(), rng.Float64(), rng.Int63()
		return stressOp{"mmap", fmt.Sprintf("mmap-write %s at %.3f of %.3f", p, u, v), func(root string) (string, error) {
			return mmapWrite(filepath.Join(root, p), u, v, dataSeed)
		}}
	case 17:
		return stressOp{"fsync", "fsync " + p, func(root string) (string, error) {
			fd, err := unix.Open(filepath.Join(root, p), unix.O_RDONLY, 0)
			if err != nil {
				return "", err
			}
			defer unix.Close(fd)
			return "", unix.Fsync(fd)
		}}
	default:
		return stressOp{"read", "read " + p, func(root string) (string, error) {
			b, err := os.ReadFile(filepath.Join(root, p))
			if err != nil {
				return "", unwrapErrno(err)
			}
			return fmt.Sprintf("%d bytes crc %08x", len(b), crc32.Checksum(b, castagnoliTable)), nil
		}}
	}
}

// mmapWrite maps a file shared and writable, fills a range chosen by the
// fractions u and v with bytes from dataSeed, and msyncs it.
func mmapWrite(path string, u, v float64, dataSeed int64) (string, error) {
	fd, err := unix.Open(path, unix.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return "", err
	}
	size := st.Size
	if size == 0 {
		return "empty", nil
	}
	off := int64(u * float64(size))
	n := 1 + int64(v*float64(size-off-1))
	m, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return "", err
	}
	rand.New(rand.NewSource(dataSeed)).Read(m[off : off+n])
	err = unix.Msync(m, unix.MS_SYNC)
	if uerr := unix.Munmap(m); err == nil {
		err = uerr
	}
	return fmt.Sprintf("size %d wrote %d at %d", size, n, off), err
}

func unwrapErrno(err error) error {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return err
}

func errnoName(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e.Error()
	}
	return "other: " + err.Error()
}

// stressEntry is what the model compares about one name.
type stressEntry struct {
	Type   uint32
	Perm   uint32
	Nlink  uint64
	Size   int64
	Sum    [32]byte
	Target string
	// Group is, for a file with more than one name, its first name in walk
	// order: names that share an inode share a group.
	Group string
}

// stressTree is a whole tree as the model keeps it: the entries in walk
// order, and for a replica's files their bytes, to rebuild the replica.
type stressTree struct {
	order   []string
	entries map[string]stressEntry
	data    map[string][]byte
}

// readStressTree walks root without following symlinks; keepData keeps
// every file's bytes.
func readStressTree(root string, keepData bool) (*stressTree, error) {
	tr := &stressTree{entries: map[string]stressEntry{}, data: map[string][]byte{}}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := stressEntry{Type: st.Mode & unix.S_IFMT, Perm: st.Mode & 0o7777, Nlink: uint64(st.Nlink)}
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
			if keepData {
				tr.data[rel] = b
			}
		case unix.S_IFLNK:
			e.Size = st.Size
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
			e.Perm = 0 // a symlink's permission bits mean nothing
		case unix.S_IFDIR:
		default:
			return fmt.Errorf("%s: unexpected file type %o", rel, e.Type)
		}
		// link(2) names symlinks as well as files a second time.
		if e.Type != unix.S_IFDIR && st.Nlink > 1 {
			if first, ok := inodes[st.Ino]; ok {
				e.Group = first
			} else {
				inodes[st.Ino] = rel
				e.Group = rel
			}
		}
		tr.order = append(tr.order, rel)
		tr.entries[rel] = e
		return nil
	})
	return tr, err
}

// diffStressTrees lists how got differs from want, sorted; nil if alike.
func diffStressTrees(got, want *stressTree) []string {
	var diffs []string
	for name, w := range want.entries {
		g, ok := got.entries[name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: missing, want %s", name, describeStress(w)))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%s: got %s, want %s", name, describeStress(g), describeStress(w)))
		}
	}
	for name, g := range got.entries {
		if _, ok := want.entries[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: should not exist: %s", name, describeStress(g)))
		}
	}
	sort.Strings(diffs)
	return diffs
}

func describeStress(e stressEntry) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "type %o perm %o nlink %d", e.Type, e.Perm, e.Nlink)
	switch e.Type {
	case unix.S_IFREG:
		fmt.Fprintf(&b, " size %d sha256 %x", e.Size, e.Sum[:6])
	case unix.S_IFLNK:
		fmt.Fprintf(&b, " -> %q", e.Target)
	}
	if e.Group != "" {
		fmt.Fprintf(&b, " inode of %s", e.Group)
	}
	return b.String()
}

// rebuild makes root hold exactly the tree (which must have been read with
// its data): the replica goes back to a checkpoint's state. Names that
// share an inode are linked again.
func (tr *stressTree) rebuild(root string) error {
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	var dirs []string
	for _, rel := range tr.order {
		e, p := tr.entries[rel], filepath.Join(root, rel)
		switch e.Type {
		case unix.S_IFDIR:
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, rel)
		case unix.S_IFLNK:
			if e.Group != "" && e.Group != rel {
				if err := os.Link(filepath.Join(root, e.Group), p); err != nil {
					return err
				}
				continue
			}
			if err := os.Symlink(e.Target, p); err != nil {
				return err
			}
		case unix.S_IFREG:
			if e.Group != "" && e.Group != rel {
				if err := os.Link(filepath.Join(root, e.Group), p); err != nil {
					return err
				}
				continue
			}
			if err := os.WriteFile(p, tr.data[rel], 0o600); err != nil {
				return err
			}
			if err := unix.Chmod(p, e.Perm); err != nil {
				return err
			}
		}
	}
	// Directories last, deepest first: a mode without write permission must
	// not stop their filling.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Chmod(filepath.Join(root, dirs[i]), tr.entries[dirs[i]].Perm); err != nil {
			return err
		}
	}
	return nil
}

// fillStressBase gives a worker's subtree of the base directory a few
// files, directories and a symlink, so that operations hit base entries.
func fillStressBase(t *testing.T, rng *rand.Rand, dir string) {
	t.Helper()
	for _, d := range []string{"a", "b", "a/b"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"f", "a/f", "a/g", "b/h", "a/b/f"} {
		b := make([]byte, rng.Intn(150<<10))
		rng.Read(b)
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("h", filepath.Join(dir, "b/g")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "a/g"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// stressWorkerProc is the parent's handle on one worker process.
type stressWorkerProc struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	replies chan workerReply
}

func startStressWorker(t *testing.T, i int, mnt, ref string, seed int64) *stressWorkerProc {
	t.Helper()
	cmd, in, out := startChild(t,
		fmt.Sprintf("%s=%d", stressWorkerEnv, i),
		stressMntEnv+"="+mnt, stressRefEnv+"="+ref,
		fmt.Sprintf("%s=%d", stressSeedEnv, seed))
	w := &stressWorkerProc{cmd: cmd, in: in, replies: make(chan workerReply, 1)}
	go func() {
		dec := json.NewDecoder(out)
		for {
			var r workerReply
			if err := dec.Decode(&r); err != nil {
				w.replies <- workerReply{Fail: fmt.Sprintf("worker %d stopped answering: %v", i, err)}
				return
			}
			w.replies <- r
		}
	}()
	// Workers go before the mount: the cleanups of newLive, registered
	// earlier, run later.
	t.Cleanup(func() {
		in.Close()
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	return w
}

// stressCounts are the figures a stress run reports.
type stressCounts struct {
	ops, barriers, compares, checkpoints, concCheckpoints, rollbacks, restores int
	remounts, prunes, pruned, gcLayers, verifies, diffs, maxStack, sessions    int
	hidden                                                                     int // block records GC dropped as hidden
	dedups, deduped                                                            int
	okOps, runOps                                                              map[string]int
}

func envInt(t *testing.T, name string, def int64) int64 {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, s, err)
	}
	return n
}

// TestStressRandomOpsCheckpointsRollbacks runs the randomised stress test
// described at the top of this file. STRATA_STRESS_OPS sets the number of
// operations (default 5000; `make stress` runs 1,000,000),
// STRATA_STRESS_WORKERS the number of worker processes (default 3), and
// STRATA_STRESS_SEED replays a seed.
func TestStressRandomOpsCheckpointsRollbacks(t *testing.T) {
	seed := envInt(t, "STRATA_STRESS_SEED", time.Now().UnixNano())
	nOps := int(envInt(t, "STRATA_STRESS_OPS", 5000))
	workers := int(envInt(t, "STRATA_STRESS_WORKERS", 3))
	t.Logf("seed %d, %d operations, %d worker processes", seed, nOps, workers)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d: replay with STRATA_STRESS_SEED=%d STRATA_STRESS_OPS=%d STRATA_STRESS_WORKERS=%d go test -count=1 -run TestStressRandomOpsCheckpointsRollbacks ./checkpoint",
				seed, seed, nOps, workers)
		}
	})
	rng := rand.New(rand.NewSource(seed))
	l := newLive(t, func(base string) {
		for i := 0; i < workers; i++ {
			fillStressBase(t, rng, filepath.Join(base, fmt.Sprintf("w%d", i)))
		}
	})
	ref := filepath.Join(t.TempDir(), "ref")
	if out, err := exec.Command("cp", "-a", l.base, ref).CombinedOutput(); err != nil {
		t.Fatalf("copy base: %v: %s", err, out)
	}
	procs := make([]*stressWorkerProc, workers)
	for i := range procs {
		w := fmt.Sprintf("w%d", i)
		procs[i] = startStressWorker(t, i, filepath.Join(l.mnt, w), filepath.Join(ref, w), seed*1000+int64(i))
	}

	c := stressCounts{okOps: map[string]int{}, runOps: map[string]int{}}
	start := time.Now()
	// Barrier checkpoints, the only rollback targets, with the replica's
	// state at each; archives likewise with the state they hold.
	cps := map[string]*stressTree{}
	var cpIDs []string
	archives := map[string]*stressTree{}
	var arIDs []string
	// A barrier every epochOps operations per worker on average: about 400
	// barriers in a long run, a few dozen in a short one.
	epochOps := min(max(nOps/(workers*400), 50), 800)
	pruneEvery := 6
	// Frozen layers are never merged, so every checkpoint deepens the
	// sandbox's stack for good, and each layer makes lookups after a
	// checkpoint or rollback dearer. A long run therefore works as a
	// platform's successive sessions would: after sessionBarriers barriers
	// the sandbox is removed and a new one made over a base holding the
	// tree it had. A short run changes sandbox once, midway.
	sessionBarriers := int(envInt(t, "STRATA_STRESS_SESSION", int64(min(150, max(10, nOps/(workers*epochOps)/2)))))
	sessionStart, baseGen := 0, 0

	readReplica := func() *stressTree {
		t.Helper()
		tr, err := readStressTree(ref, true)
		if err != nil {
			t.Fatalf("read the replica: %v", err)
		}
		return tr
	}
	// expect compares the mount with want.
	expect := func(want *stressTree, when string) {
		t.Helper()
		got, err := readStressTree(l.mnt, false)
		if err != nil {
			t.Fatalf("%s: read the mount: %v", when, err)
		}
		c.compares++
		if diffs := diffStressTrees(got, want); len(diffs) > 0 {
			if len(diffs) > 40 {
				diffs = append(diffs[:40], fmt.Sprintf("... and %d more", len(diffs)-40))
			}
			t.Fatalf("%s: the mount differs from the model (seed %d):\n%s", when, seed, strings.Join(diffs, "\n"))
		}
	}
	// concurrent runs, while the workers run, one action that must not
	// disturb them.
	concurrent := func(kind int) {
		t.Helper()
		switch kind {
		case 0:
			if _, err := l.mgr.Create("s", Options{Label: "", Reason: "concurrent"}); err != nil {
				t.Fatalf("concurrent checkpoint: %v", err)
			}
			c.concCheckpoints++
		case 1:
			// Half the collections also dedup, moving blocks under the
			// workers and the mount's cached block maps.
			collect := l.store.CollectGarbage
			if rand.Intn(2) == 0 {
				collect = l.store.CollectGarbageDedup
			}
			res, err := collect()
			if err != nil {
				t.Fatalf("concurrent gc: %v", err)
			}
			c.gcLayers += len(res.Layers)
			c.hidden += res.HiddenBlocks
			if res.Dedup != nil {
				c.dedups++
				c.deduped += res.Dedup.Blocks
			}
		case 2:
			if len(cpIDs) == 0 {
				return
			}
			id := cpIDs[rand.Intn(len(cpIDs))]
			res, err := l.mgr.Verify(id)
			if err != nil || !res.OK {
				t.Fatalf("concurrent verify %s: %+v %v", id, res, err)
			}
			c.verifies++
		case 3:
			// Between checkpoints, not against the live state: that one
			// moves meanwhile, and the barrier diffs it once it holds still.
			if len(cpIDs) < 2 {
				return
			}
			a, b := cpIDs[rand.Intn(len(cpIDs))], cpIDs[rand.Intn(len(cpIDs))]
			d, err := l.mgr.DiffCheckpoints(a, b)
			if err != nil {
				t.Fatalf("concurrent diff %s %s: %v", a, b, err)
			}
			// One way only: a diff may list a file rewritten to the same
			// bytes, but must not miss a change.
			if changes := diffStressTrees(cps[a], cps[b]); len(changes) > 0 && len(d.Added)+len(d.Modified)+len(d.Deleted) == 0 {
				t.Fatalf("concurrent diff %s %s: nothing changed, but the model says:\n%s", a, b, strings.Join(changes, "\n"))
			}
			c.diffs++
		}
	}

	lastOps, lastLog := 0, start
	for epoch := 0; c.ops < nOps; epoch++ {
		for i, p := range procs {
			n := 1 + rng.Intn(2*epochOps)
			if _, err := fmt.Fprintf(p.in, "run %d\n", n); err != nil {
				t.Fatalf("epoch %d: worker %d: %v", epoch, i, err)
			}
		}
		var conc []int
		for i := rng.Intn(4); i > 0; i-- {
			// Checkpoints, gc, verifies (twice as often), diffs.
			conc = append(conc, []int{0, 1, 2, 2, 3}[rng.Intn(5)])
		}
		// Every drawn action runs, while the workers run or after: the
		// checkpoints that exist, and so what a prune removes, depend on
		// the seed only. Their timing and targets come from the global
		// source, so the seeded stream does not depend on them.
		for _, k := range conc {
			time.Sleep(time.Duration(rand.Intn(20)) * time.Millisecond)
			concurrent(k)
		}
		for i, p := range procs {
			r := <-p.replies
			if r.Fail != "" {
				t.Fatalf("epoch %d: worker %d (seed %d): %s", epoch, i, seed*1000+int64(i), r.Fail)
			}
			c.ops += r.Ops
			for k, v := range r.OK {
				c.okOps[k] += v
			}
			for k, v := range r.Runs {
				c.runOps[k] += v
			}
		}
		c.barriers++

		switch r := rng.Intn(100); {
		case c.barriers-sessionStart >= sessionBarriers:
			now := readReplica()
			expect(now, fmt.Sprintf("epoch %d: at the end of a session", epoch))
			all, err := l.mgr.List("s")
			if err != nil {
				t.Fatal(err)
			}
			for _, cp := range all {
				if res, err := l.mgr.Verify(cp.ID); err != nil || !res.OK {
					t.Fatalf("epoch %d: verify %s at the end of a session: %+v %v", epoch, cp.ID, res, err)
				}
				c.verifies++
			}
			l.unmount()
			if rep, err := l.store.Fsck(); err != nil || len(rep.Problems) > 0 {
				t.Fatalf("epoch %d: fsck at the end of a session: %v %+v", epoch, err, rep.Problems)
			}
			if err := l.mgr.RemoveSandbox("s"); err != nil {
				t.Fatalf("epoch %d: remove the sandbox: %v", epoch, err)
			}
			if baseGen > 0 {
				if err := os.RemoveAll(l.base); err != nil {
					t.Fatal(err)
				}
			}
			baseGen++
			l.base = filepath.Join(filepath.Dir(ref), fmt.Sprintf("base%d", baseGen))
			// Hard links stay: a base file with two names fingerprints
			// by its inode, whichever name reaches it.
			if err := now.rebuild(l.base); err != nil {
				t.Fatalf("make the next base: %v", err)
			}
			if now, err = readStressTree(l.base, true); err != nil {
				t.Fatal(err)
			}
			if err := now.rebuild(ref); err != nil {
				t.Fatalf("rebuild the replica: %v", err)
			}
			if _, err := l.store.CreateSandbox("s", l.base, 0); err != nil {
				t.Fatal(err)
			}
			l.mount()
			expect(now, fmt.Sprintf("epoch %d: a new sandbox over the last state", epoch))
			cps, cpIDs, archives, arIDs = map[string]*stressTree{}, nil, map[string]*stressTree{}, nil
			sessionStart = c.barriers
			c.sessions++
		case r < 30 && len(cpIDs) > 0:
			id := cpIDs[rng.Intn(len(cpIDs))]
			left := readReplica()
			res, err := l.mgr.Rollback("s", id)
			if err != nil {
				t.Fatalf("epoch %d: rollback to %s: %v", epoch, id, err)
			}
			c.rollbacks++
			archives[res.Archive], arIDs = left, append(arIDs, res.Archive)
			if err := cps[id].rebuild(ref); err != nil {
				t.Fatalf("rebuild the replica: %v", err)
			}
			expect(cps[id], fmt.Sprintf("epoch %d: after rollback to %s", epoch, id))
		case r < 37 && len(arIDs) > 0:
			id := arIDs[rng.Intn(len(arIDs))]
			left := readReplica()
			res, err := l.mgr.Restore(id)
			if err != nil {
				t.Fatalf("epoch %d: restore %s: %v", epoch, id, err)
			}
			c.restores++
			want := archives[id]
			archives[res.Archive], arIDs = left, append(arIDs, res.Archive)
			if err := want.rebuild(ref); err != nil {
				t.Fatalf("rebuild the replica: %v", err)
			}
			expect(want, fmt.Sprintf("epoch %d: after restoring archive %s", epoch, id))
		case r < 42:
			l.unmount()
			l.mount()
			c.remounts++
			expect(readReplica(), fmt.Sprintf("epoch %d: after a remount", epoch))
		default:
			// The live tree first (between barriers nothing else checks
			// it whole), then the checkpoint of it.
			now := readReplica()
			expect(now, fmt.Sprintf("epoch %d: before a checkpoint", epoch))
			cp, err := l.mgr.Create("s", Options{Step: epoch})
			if err != nil {
				t.Fatalf("epoch %d: checkpoint: %v", epoch, err)
			}
			c.checkpoints++
			cps[cp.ID], cpIDs = now, append(cpIDs, cp.ID)
			// Nothing changed since: the live state diffs empty.
			if d, err := l.mgr.DiffCheckpoints(cp.ID, ""); err != nil || len(d.Added)+len(d.Modified)+len(d.Deleted) > 0 {
				t.Fatalf("epoch %d: diff of a new checkpoint against the live state: %+v %v", epoch, d, err)
			}
			c.diffs++
			if c.checkpoints%pruneEvery == 0 {
				// Archives pin what they hold and nothing expires them
				// yet; a platform would, so the test drops all but the
				// newest few before the prune, whose gc collects both.
				for _, id := range dropOldArchives(t, l.mgr, "s", 3) {
					delete(archives, id)
				}
				arIDs = keptIDs(arIDs, archives)
				keep := 3 + rng.Intn(6)
				res, err := l.mgr.Prune("s", Policy{KeepLast: keep})
				if err != nil {
					t.Fatalf("epoch %d: prune: %v", epoch, err)
				}
				c.prunes++
				c.pruned += len(res.Removed)
				c.gcLayers += len(res.GC.Layers)
				c.hidden += res.GC.HiddenBlocks
				for _, id := range res.Removed {
					delete(cps, id)
				}
				cpIDs = keptIDs(cpIDs, cps)
			}
		}
		stack, err := l.store.Stack("s")
		if err != nil {
			t.Fatal(err)
		}
		c.maxStack = max(c.maxStack, len(stack))
		if c.barriers%50 == 0 {
			t.Logf("%d operations, %d barriers, %v, %.0f operations/s lately, stack of %d layers",
				c.ops, c.barriers, time.Since(start).Round(time.Second), float64(c.ops-lastOps)/time.Since(lastLog).Seconds(), len(stack))
			lastOps, lastLog = c.ops, time.Now()
		}
	}

	expect(readReplica(), "at the end")
	all, err := l.mgr.List("s")
	if err != nil {
		t.Fatal(err)
	}
	for _, cp := range all {
		if res, err := l.mgr.Verify(cp.ID); err != nil || !res.OK {
			t.Fatalf("verify %s at the end: %+v %v", cp.ID, res, err)
		}
		c.verifies++
	}
	l.unmount()
	rep, err := l.store.Fsck()
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("fsck at the end: %v %+v", err, rep.Problems)
	}
	took := time.Since(start)
	var kinds []string
	okTotal := 0
	for k, n := range c.runOps {
		kinds = append(kinds, fmt.Sprintf("%s %d/%d", k, c.okOps[k], n))
		okTotal += c.okOps[k]
	}
	sort.Strings(kinds)
	t.Logf("%d operations (%d succeeded, the rest failed alike on both sides) in %v (%.0f/s) by %d processes; succeeded/run by kind: %s",
		c.ops, okTotal, took.Round(time.Millisecond), float64(c.ops)/took.Seconds(), workers, strings.Join(kinds, ", "))
	t.Logf("%d barriers, %d tree comparisons, %d sandboxes in turn; checkpoints: %d at barriers, %d concurrent; %d rollbacks, %d archive restores, %d remounts; %d prunes removed %d checkpoints, gc removed %d layers and %d hidden blocks; %d dedup passes kept %d blocks once; %d verifies, %d diffs; deepest stack %d layers; fsck: %d layers, %d blocks, 0 problems",
		c.barriers, c.compares, c.sessions+1, c.checkpoints, c.concCheckpoints, c.rollbacks, c.restores, c.remounts, c.prunes, c.pruned, c.gcLayers, c.hidden, c.dedups, c.deduped, c.verifies, c.diffs, c.maxStack, rep.Layers, rep.Blocks)
}

// keptIDs is ids without those the model no longer keeps, in order.
func keptIDs[T any](ids []string, kept map[string]T) []string {
	out := ids[:0]
	for _, id := range ids {
		if _, ok := kept[id]; ok {
			out = append(out, id)
		}
	}
	return out
}

// dropOldArchives deletes the records and pins of all but the newest keep
// archives of sandbox, as RemoveSandbox does for all of them, and returns
// their ids. There is no command for it yet.
func dropOldArchives(t *testing.T, m *Manager, sandbox string, keep int) []string {
	t.Helper()
	ars, err := m.Archives(sandbox)
	if err != nil {
		t.Fatal(err)
	}
	if len(ars) <= keep {
		return nil
	}
	old := ars[:len(ars)-keep]
	err = m.store.Update(func(tx *layers.Txn) error {
		for _, ar := range old {
			for _, k := range []string{keyArchive(ar.ID), keyArchiveIndex(sandbox, ar.ID)} {
				if err := tx.Delete(k); err != nil {
					return err
				}
			}
			if ar.Top != "" {
				if err := tx.Unpin(ar.Top, pinOwner(sandbox, "ar", ar.ID)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("drop archives: %v", err)
	}
	ids := make([]string, len(old))
	for i, ar := range old {
		ids[i] = ar.ID
	}
	return ids
}

// TestFsckCleanAfterTruncateThenUnlink pins down what the stress test
// found: a file whose blocks were truncated away and which was then
// removed before the next seal kept the stored records of those blocks,
// pointing at slots given back to the file system, and fsck reported the
// checkpoint's layer as corrupt.
func TestFsckCleanAfterTruncateThenUnlink(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	info, err := st.CreateSandbox("s", base, 0)
	if err != nil {
		t.Fatal(err)
	}
	v, err := st.OpenView("s", false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	a, err := v.Mknod(layers.RootIno, "f", unix.S_IFREG|0o644, 0, layers.Caller{})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("strata"), 3*int(info.BlockSize)/6)
	if _, err := v.WriteAt(a.Ino, data, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := v.Sync(); err != nil { // the blocks' records are stored
		t.Fatal(err)
	}
	size := int64(1000)
	if _, err := v.SetAttr(a.Ino, layers.SetAttrIn{Size: &size}); err != nil {
		t.Fatal(err)
	}
	if err := v.Unlink(layers.RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := New(st, nil).Create("s", Options{}); err != nil {
		t.Fatal(err)
	}
	rep, err := st.Fsck()
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("fsck: got %+v, want no problems", rep.Problems)
	}
}
