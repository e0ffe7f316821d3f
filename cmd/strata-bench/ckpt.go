package main

// The checkpoint suite (-suite checkpoint) measures what issue 3 asks of
// checkpoints: how long a checkpoint and a rollback take for a workspace of
// 1k and of 50k small source files when 100 files changed since the last
// one, side by side with what coding agents use instead (git commits, cp -a
// copies, btrfs snapshots), and how many bytes a checkpoint of a small edit
// adds to the store.
//
// Every peer gets the same generated workspace and the same sequence of
// changes. One round is:
//
//	apply change set A (edits, adds, deletes)   untimed
//	checkpoint                                  timed: "checkpoint"
//	apply change set B                          untimed
//	roll back to that checkpoint                timed: "rollback"
//	check that A is there and B is gone         untimed
//
// so a rollback always undoes the last step, as an agent undoing a bad
// edit does, and the workspace drifts a little every round (A adds more
// files than it deletes). After the rounds, a storage phase edits a few
// files in place by a few bytes and checkpoints, several times, and divides
// the growth of the peer's storage by the number of checkpoints.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// ckptConfig is the checkpoint suite's configuration.
type ckptConfig struct {
	Sizes     []int // workspace sizes, in files
	Rounds    int   // checkpoint + rollback rounds per peer and size, at most
	MinRounds int   // rounds run even when Budget is spent
	// Budget bounds the rounds of one peer at one size: once it is spent
	// (and MinRounds are done) no new round starts, so that peers whose
	// checkpoint copies the whole workspace keep the run short. The
	// storage phase gets a quarter of it on top (at least one checkpoint).
	Budget  time.Duration
	Changes int // files changed by one change set
	// Edits files are edited in place by a few bytes before each of
	// StorageCheckpoints checkpoints in the storage phase.
	Edits              int
	StorageCheckpoints int
	Peers              []string
	Command            string // the command line, for the report
	// Pause is waited after each change set is applied, before the
	// checkpoint or rollback: an agent's turn between its tool's writes
	// and the next checkpoint.
	Pause time.Duration
}

// ckptFlags are the command-line flags of the checkpoint suite.
type ckptFlags struct {
	sizes, peers             *string
	rounds, changes, edits   *int
	storageCheckpoints       *int
	budget, pause            *time.Duration
	names                    []string // flag names, to refuse them in the fs suite
	fsOnly                   []string // fs suite flags refused here
	defaultSizes, quickSizes []int
}

// addCkptFlags registers the checkpoint suite's flags on fl.
func addCkptFlags(fl *flag.FlagSet) *ckptFlags {
	f := &ckptFlags{
		defaultSizes: []int{1000, 50000},
		quickSizes:   []int{100, 400},
		fsOnly:       []string{"targets", "workloads", "size", "reps"},
	}
	before := map[string]bool{}
	fl.VisitAll(func(x *flag.Flag) { before[x.Name] = true })
	f.sizes = fl.String("files", "1000,50000", "checkpoint suite: workspace sizes in files, comma-separated")
	f.peers = fl.String("peers", strings.Join(allPeers, ","), "checkpoint suite: comma-separated peers")
	f.rounds = fl.Int("rounds", 30, "checkpoint suite: checkpoint+rollback rounds per peer and size, at most")
	f.changes = fl.Int("changes", 100, "checkpoint suite: files changed per round (70% edited, 20% added, 10% deleted)")
	f.edits = fl.Int("edits", 10, "checkpoint suite: files edited by 8 bytes before each storage-phase checkpoint")
	f.storageCheckpoints = fl.Int("storage-checkpoints", 5, "checkpoint suite: checkpoints in the storage phase")
	f.budget = fl.Duration("budget", 20*time.Second, "checkpoint suite: stop starting rounds of one peer at one size after this long (at least 3 rounds run)")
	f.pause = fl.Duration("pause", 0, "checkpoint suite: wait this long after applying each change set, before the checkpoint or rollback (an agent's turn)")
	fl.VisitAll(func(x *flag.Flag) {
		if !before[x.Name] {
			f.names = append(f.names, x.Name)
		}
	})
	return f
}

// config turns the flags into a ckptConfig; set holds the flags given.
func (f *ckptFlags) config(set map[string]bool, quick bool, args []string) (ckptConfig, error) {
	for _, n := range f.fsOnly {
		if set[n] {
			return ckptConfig{}, fmt.Errorf("-%s belongs to -suite fs", n)
		}
	}
	c := ckptConfig{
		Rounds: *f.rounds, MinRounds: 3, Budget: *f.budget, Changes: *f.changes,
		Edits: *f.edits, StorageCheckpoints: *f.storageCheckpoints, Peers: splitList(*f.peers), Pause: *f.pause,
		Command: "strata-bench " + strings.Join(args, " "),
	}
	sizes := *f.sizes
	if quick {
		// Small enough for a test: a few seconds per peer.
		defaults := map[string]func(){
			"files":               func() { sizes = joinInts(f.quickSizes) },
			"rounds":              func() { c.Rounds = 3 },
			"changes":             func() { c.Changes = 10 },
			"edits":               func() { c.Edits = 3 },
			"storage-checkpoints": func() { c.StorageCheckpoints = 2 },
			"budget":              func() { c.Budget = 10 * time.Second },
		}
		for name, fn := range defaults {
			if !set[name] {
				fn()
			}
		}
	}
	c.MinRounds = min(c.MinRounds, c.Rounds)
	for _, s := range splitList(sizes) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10 || n > 1_000_000 {
			return ckptConfig{}, fmt.Errorf("-files %q: want sizes between 10 and 1000000", s)
		}
		c.Sizes = append(c.Sizes, n)
	}
	switch {
	case len(c.Sizes) == 0:
		return ckptConfig{}, errors.New("-files: no sizes")
	case c.Rounds < 1:
		return ckptConfig{}, fmt.Errorf("-rounds %d: need at least 1", c.Rounds)
	case c.Pause < 0:
		return ckptConfig{}, fmt.Errorf("-pause %v: must not be negative", c.Pause)
	case c.Changes < 3:
		return ckptConfig{}, fmt.Errorf("-changes %d: need at least 3 (an edit, an add and a delete)", c.Changes)
	case c.Changes > min(slices.Min(c.Sizes)/2, 10000):
		return ckptConfig{}, fmt.Errorf("-changes %d: at most half the smallest workspace", c.Changes)
	case c.Edits < 1 || c.Edits > slices.Min(c.Sizes)/2:
		return ckptConfig{}, fmt.Errorf("-edits %d: between 1 and half the smallest workspace", c.Edits)
	case c.StorageCheckpoints < 1:
		return ckptConfig{}, fmt.Errorf("-storage-checkpoints %d: need at least 1", c.StorageCheckpoints)
	case c.Budget <= 0:
		return ckptConfig{}, fmt.Errorf("-budget %v: must be positive", c.Budget)
	}
	for _, p := range c.Peers {
		if peerByName(p) == nil {
			return ckptConfig{}, fmt.Errorf("unknown peer %q (have %s)", p, strings.Join(allPeers, ", "))
		}
	}
	return c, nil
}

func joinInts(xs []int) string {
	var s []string
	for _, x := range xs {
		s = append(s, strconv.Itoa(x))
	}
	return strings.Join(s, ",")
}

// runCheckpoint runs the checkpoint suite: every usable peer at every size.
func (h *harness) runCheckpoint(ctx context.Context, cc ckptConfig) (rep *ckptReport, err error) {
	defer h.finish(false)
	if err := h.prepareWork(); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	h.goBin = findGo()
	h.logf("checkpoint suite: work dir %s, sizes %v, up to %d rounds of %d changes", h.work, cc.Sizes, cc.Rounds, cc.Changes)
	rep = &ckptReport{Meta: h.ckptMeta(cc)}

	var usable []*ckptPeer
	for _, p := range selectedPeers(cc.Peers) {
		st := h.checkPeer(ctx, p)
		rep.Peers = append(rep.Peers, st)
		if st.Status == statusOK {
			usable = append(usable, p)
		}
		h.logf("peer %s: %s", p.name, st.String())
	}
	if len(usable) == 0 {
		return nil, errors.New("no peer is usable")
	}
	for _, n := range cc.Sizes {
		base, err := h.fixture(workspaceFixture(n))
		if err != nil {
			return nil, fmt.Errorf("workspace of %d files: %w", n, err)
		}
		for _, p := range usable {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			res, err := h.ckptRun(ctx, cc, p, base, n)
			if err != nil {
				h.logf("%s at %d files: %v", p.name, n, err)
				rep.Failures = append(rep.Failures, ckptFailure{Peer: p.name, Files: n, Error: err.Error()})
				continue
			}
			h.logf("%s at %d files: checkpoint p50 %s p90 %s, rollback p50 %s p90 %s (%d rounds); %s per checkpoint; took %s",
				p.name, n, fmtSeconds(res.Checkpoint.P50), fmtSeconds(res.Checkpoint.P90),
				fmtSeconds(res.Rollback.P50), fmtSeconds(res.Rollback.P90), res.Rounds, fmtBytes(res.StoredPerCheckpoint),
				fmtSeconds(res.Elapsed))
			rep.Results = append(rep.Results, res)
		}
	}
	h.mu.Lock()
	rep.Notes = slices.Clone(h.notes)
	h.mu.Unlock()
	rep.Meta.LoadEnd = loadAverage()
	rep.finish()
	return rep, nil
}

// ckptRun runs the rounds and the storage phase of one peer on a fresh
// workspace of n files.
func (h *harness) ckptRun(ctx context.Context, cc ckptConfig, p *ckptPeer, base string, n int) (res ckptResult, err error) {
	res = ckptResult{Peer: p.name, Files: n}
	// Where the run's time goes, for the log: the suite must stay short.
	start, last := time.Now(), time.Now()
	var phases []string
	phase := func(name string) {
		phases = append(phases, name+" "+fmtSeconds(time.Since(last).Seconds()))
		last = time.Now()
	}
	defer func() {
		res.Elapsed = time.Since(start).Seconds()
		h.logf("%s at %d files: %s", p.name, n, strings.Join(phases, ", "))
	}()
	dir, err := os.MkdirTemp(filepath.Join(h.work, "runs"), fmt.Sprintf("%s-%d-", p.name, n))
	if err != nil {
		return res, err
	}
	h.dropCachesNoted()
	phase("drop caches")
	t, err := h.ckptSetup(ctx, p, base, dir)
	if err != nil {
		h.removeRun(dir)
		return res, fmt.Errorf("setup: %w", err)
	}
	defer func() {
		if terr := t.teardown(false); terr != nil && err == nil {
			err = fmt.Errorf("teardown: %w", terr)
		}
		removeTree(dir)
		h.removeRun(dir)
		phase("teardown")
	}()
	res.Setup = time.Since(last).Seconds()
	phase("setup")

	// Watchdog: a wedged FUSE server would block the run forever.
	var timedOut atomic.Bool
	timer := time.AfterFunc(h.cfg.Timeout, func() {
		timedOut.Store(true)
		h.logf("%s at %d files exceeded %v: forcing it down", p.name, n, h.cfg.Timeout)
		_ = t.teardown(true)
	})
	defer timer.Stop()
	defer func() {
		if timedOut.Load() {
			err = fmt.Errorf("exceeded -timeout %v, forced down: %v", h.cfg.Timeout, err)
		}
	}()

	// Every round rolls back to its own checkpoint, never to this one.
	_, took, err := t.checkpoint(ctx)
	if err != nil {
		return res, fmt.Errorf("first checkpoint: %w", err)
	}
	res.First = took.Seconds()
	phase("first checkpoint")

	m := newWorkspaceModel(n)
	var cps, rbs []float64
	roundsStart := time.Now()
	for round := 0; round < cc.Rounds; round++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if round >= cc.MinRounds && time.Since(roundsStart) > cc.Budget {
			h.note("Some peers ran fewer than %d rounds: the -budget of %v per peer and size was spent (the rounds column says how many ran).", cc.Rounds, cc.Budget)
			break
		}
		a := m.plan(changeRand(n, round, 0), cc.Changes, fmt.Sprintf("r%da", round), 2*round+1)
		if err := a.apply(t.root); err != nil {
			return res, fmt.Errorf("round %d: apply A: %w", round, err)
		}
		m.commit(a)
		time.Sleep(cc.Pause)
		ref, took, err := t.checkpoint(ctx)
		if err != nil {
			return res, fmt.Errorf("round %d: checkpoint: %w", round, err)
		}
		cps = append(cps, took.Seconds())

		b := m.plan(changeRand(n, round, 1), cc.Changes, fmt.Sprintf("r%db", round), 2*round+2)
		if err := b.apply(t.root); err != nil {
			return res, fmt.Errorf("round %d: apply B: %w", round, err)
		}
		time.Sleep(cc.Pause)
		if took, err = t.rollback(ctx, ref); err != nil {
			return res, fmt.Errorf("round %d: rollback: %w", round, err)
		}
		rbs = append(rbs, took.Seconds())
		if err := m.check(t.root, a, b); err != nil {
			return res, fmt.Errorf("round %d: after rollback: %w", round, err)
		}
	}
	res.Rounds = len(cps)
	res.Checkpoint, res.Rollback = newLatency(cps), newLatency(rbs)
	phase(fmt.Sprintf("%d rounds", res.Rounds))

	if t.mark != nil {
		t.mark()
	}

	if err := h.storagePhase(ctx, cc, t, m, &res); err != nil {
		return res, fmt.Errorf("storage phase: %w", err)
	}
	phase("storage phase")
	return res, nil
}

// removeTree removes dir with rm -rf, unless something is mounted below it
// (removeRun then says so). A cp -a peer leaves half a million files
// behind, and rm takes a fifth of the time os.RemoveAll does for them.
func removeTree(dir string) {
	if len(mountsUnder(dir)) == 0 {
		_ = exec.Command("rm", "-rf", "--one-file-system", dir).Run()
	}
}

// dropCachesNoted drops the caches before a peer's run, for a reason
// particular to ext4 without a journal (as on our VMs; see runOne): after
// the mass delete that ends the previous peer's run, creating files is
// several times slower while the deleted inodes' table blocks are cached,
// which would bill one peer for the last one's cleanup.
func (h *harness) dropCachesNoted() {
	if err := dropCaches(); err != nil {
		h.note("Caches could not be dropped (%v): a peer that creates many files right after another peer's cleanup may be slowed by it.", err)
	}
}

// storagePhase edits cc.Edits files in place by 8 bytes and checkpoints,
// cc.StorageCheckpoints times, and records what the peer's storage grew by
// per checkpoint.
func (h *harness) storagePhase(ctx context.Context, cc ckptConfig, t *ckptTarget, m *workspaceModel, res *ckptResult) error {
	used0, err := t.used(ctx)
	if err != nil {
		return err
	}
	var own0 int64
	if t.own != nil {
		if own0, err = t.own(ctx); err != nil {
			return err
		}
	}
	r := rand.New(rand.NewPCG(uint64(res.Files), 1<<32))
	start := time.Now()
	k := 0
	for ; k < cc.StorageCheckpoints; k++ {
		if k > 0 && time.Since(start) > cc.Budget/4 {
			h.note("Some peers took fewer than %d checkpoints in the storage phase: a quarter of the -budget was spent.", cc.StorageCheckpoints)
			break
		}
		for i, p := range m.pick(r, cc.Edits) {
			if err := editInPlace(filepath.Join(t.root, p), fmt.Sprintf("/*%02d%02d*/", k%100, i%100)); err != nil {
				return err
			}
		}
		if _, _, err := t.checkpoint(ctx); err != nil {
			return fmt.Errorf("checkpoint %d: %w", k+1, err)
		}
	}
	used1, err := t.used(ctx)
	if err != nil {
		return err
	}
	res.StorageCheckpoints = k
	res.StoredPerCheckpoint = (used1 - used0) / int64(k)
	res.OwnPerCheckpoint = -1
	if t.own != nil {
		own1, err := t.own(ctx)
		if err != nil {
			return err
		}
		res.OwnPerCheckpoint = (own1 - own0) / int64(k)
	}
	return nil
}

// editInPlace overwrites len(s) bytes in the middle of path, as a small
// edit that does not change the file's size.
func editInPlace(path, s string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err == nil {
		_, err = f.WriteAt([]byte(s), max(fi.Size()/2-int64(len(s)), 0))
	}
	return errors.Join(err, f.Close())
}

// --- the workspace

// Workspace layout: files of generated Go-like source, 20 per directory,
// four directories deep (src/pkgNN/modNN/subN/fNNNNN.go).
const wsPerDir = 20

func wsDir(leaf int) string {
	return fmt.Sprintf("src/pkg%02d/mod%02d/sub%d", leaf/125, leaf/5%25, leaf%5)
}

func wsPath(i int) string {
	return fmt.Sprintf("%s/f%05d.go", wsDir(i/wsPerDir), i)
}

// srcFile is the content of the file at path in version ver (0 = as in
// the base): 200 B to 6 KiB of source lines chosen by the path, where a
// later version differs from the first in one line, as after an edit.
func srcFile(path string, ver int) []byte {
	h := fnv.New64a()
	h.Write([]byte(path))
	seed := h.Sum64()
	r := rand.New(rand.NewPCG(seed, 0))
	size := 200 + r.IntN(6*kib-200)
	var lines []string
	for n := 0; n < size; {
		l := fmt.Sprintf("func f%x_%d(x int) int { return x*%d + %d }\n", seed&0xffff, len(lines), r.IntN(1000), r.IntN(100))
		lines = append(lines, l)
		n += len(l)
	}
	if ver > 0 {
		lines[(ver*7)%len(lines)] = fmt.Sprintf("// edited: version %d of %s\n", ver, filepath.Base(path))
	}
	return []byte(strings.Join(lines, ""))
}

// workspaceFixture is a workspace of n source files.
func workspaceFixture(n int) fixture {
	return fixture{name: fmt.Sprintf("workspace-%d", n), build: func(dir string) error {
		for i := 0; i < n; i++ {
			p := filepath.Join(dir, wsPath(i))
			if i%wsPerDir == 0 {
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return err
				}
			}
			if err := os.WriteFile(p, srcFile(wsPath(i), 0), 0o644); err != nil {
				return err
			}
		}
		return nil
	}}
}

// workspaceModel is what the workspace should hold: every file's path and
// version. Every peer sees the same sequence of change sets because they
// are drawn from the model with the same seeds.
type workspaceModel struct {
	paths []string       // in a deterministic order
	index map[string]int // position in paths
	ver   map[string]int
	dirs  []string // directories new files go to
}

func newWorkspaceModel(n int) *workspaceModel {
	m := &workspaceModel{index: make(map[string]int, n), ver: make(map[string]int, n)}
	for i := 0; i < n; i++ {
		p := wsPath(i)
		m.index[p] = len(m.paths)
		m.paths = append(m.paths, p)
		m.ver[p] = 0
		if i%wsPerDir == 0 {
			m.dirs = append(m.dirs, wsDir(i/wsPerDir))
		}
	}
	return m
}

func changeRand(n, round, set int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(n), uint64(round)<<1|uint64(set)))
}

// pick draws k distinct existing paths.
func (m *workspaceModel) pick(r *rand.Rand, k int) []string {
	seen := map[int]bool{}
	var out []string
	for len(out) < k && len(out) < len(m.paths) {
		i := r.IntN(len(m.paths))
		if !seen[i] {
			seen[i] = true
			out = append(out, m.paths[i])
		}
	}
	return out
}

// change is one file changed: edited (written anew in version ver), added
// (in version ver) or deleted.
type change struct {
	op   byte // 'e', 'a' or 'd'
	path string
	ver  int
}

// changeSet is the changes of one step of the agent.
type changeSet []change

// changeMix splits n changes: 70% edits, 20% new files, 10% deletes.
func changeMix(n int) (edits, adds, deletes int) {
	adds, deletes = max(n/5, 1), max(n/10, 1)
	return n - adds - deletes, adds, deletes
}

// plan draws n changes (see changeMix).
func (m *workspaceModel) plan(r *rand.Rand, n int, tag string, ver int) changeSet {
	edits, adds, deletes := changeMix(n)
	var cs changeSet
	for i, p := range m.pick(r, edits+deletes) {
		op := byte('e')
		if i >= edits {
			op = 'd'
		}
		cs = append(cs, change{op: op, path: p, ver: ver})
	}
	for k := 0; k < adds; k++ {
		d := m.dirs[r.IntN(len(m.dirs))]
		cs = append(cs, change{op: 'a', path: fmt.Sprintf("%s/n%s_%03d.go", d, tag, k), ver: ver})
	}
	return cs
}

// apply makes the changes below root, as an editor would: whole files
// written anew, new files created, old ones removed.
func (cs changeSet) apply(root string) error {
	for _, c := range cs {
		p := filepath.Join(root, c.path)
		switch c.op {
		case 'e':
			if err := os.WriteFile(p, srcFile(c.path, c.ver), 0o644); err != nil {
				return err
			}
		case 'a':
			// The directory can be gone: git removes directories it
			// empties.
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			_, err = f.Write(srcFile(c.path, c.ver))
			if err := errors.Join(err, f.Close()); err != nil {
				return err
			}
		case 'd':
			if err := os.Remove(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// commit records changes that are to stay.
func (m *workspaceModel) commit(cs changeSet) {
	for _, c := range cs {
		switch c.op {
		case 'e':
			m.ver[c.path] = c.ver
		case 'a':
			m.index[c.path] = len(m.paths)
			m.paths = append(m.paths, c.path)
			m.ver[c.path] = c.ver
		case 'd':
			i := m.index[c.path]
			last := m.paths[len(m.paths)-1]
			m.paths[i], m.index[last] = last, i
			m.paths = m.paths[:len(m.paths)-1]
			delete(m.index, c.path)
			delete(m.ver, c.path)
		}
	}
}

// check reads back, below root, every path that kept (a) or undone (b)
// touched: each must be as the model says.
func (m *workspaceModel) check(root string, kept, undone changeSet) error {
	for _, c := range append(slices.Clone(kept), undone...) {
		p := filepath.Join(root, c.path)
		ver, exists := m.ver[c.path]
		got, err := os.ReadFile(p)
		switch {
		case !exists && err == nil:
			return fmt.Errorf("%s exists, want it absent", c.path)
		case !exists && errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return err
		case string(got) != string(srcFile(c.path, ver)):
			return fmt.Errorf("%s does not hold version %d", c.path, ver)
		}
	}
	return nil
}
