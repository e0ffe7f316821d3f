package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

// The crash test kills the serving process (`strata mount`'s server) with
// SIGKILL at random moments while writers in this process write heavily
// through the mount and fsync, and a controller checkpoints, rolls back,
// prunes, collects garbage and verifies over the control socket. After
// every kill the store must open, fsck must find nothing, every
// checkpoint must verify, and every file must hold what the model allows:
// at least what was fsync'ed, and never a torn or foreign block.
//
// The files are made of 4 KiB slots, each stamped with its file, its slot
// and a generation number drawn from one counter, and filled from those
// three, so any slot read back says which write it came from. The model
// keeps, per slot, the range of generations the live state may hold (cur)
// and the range that must survive a crash (dur); a checkpoint records the
// range its slots may hold. Generations only grow, so a range is a lower
// bound (the last write known to be there) and an upper bound (the last
// write begun).

const (
	crashFiles     = 4
	crashSlots     = 256 // 1 MiB files
	crashSlotSize  = 4096
	crashMaxRun    = 64 // slots in one write: up to 256 KiB
	crashSandbox   = "demo"
	crashKillsDflt = 12
)

// genRange is the generations a slot may hold.
type genRange struct{ lo, hi uint64 }

// crashModel is what the test knows about the files' slots.
type crashModel struct {
	mu  sync.Mutex
	cur [crashFiles][crashSlots]genRange // the live view
	dur [crashFiles][crashSlots]genRange // what survives a kill
}

// slotsState is the ranges of every slot, as a checkpoint holds them.
type slotsState [crashFiles][crashSlots]genRange

// fillSlot writes the stamped content of (file, slot, gen) into b.
func fillSlot(b []byte, file, slot int, gen uint64) {
	binary.LittleEndian.PutUint32(b[0:], uint32(file))
	binary.LittleEndian.PutUint32(b[4:], uint32(slot))
	binary.LittleEndian.PutUint64(b[8:], gen)
	x := gen*0x9E3779B97F4A7C15 ^ uint64(file)<<40 ^ uint64(slot)<<20 | 1
	for i := 16; i < len(b); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(b[i:], x)
	}
}

// decodeSlot says which generation b holds: 0 for a slot never written
// (zeros), or an error if b is no whole slot of (file, slot).
func decodeSlot(b []byte, file, slot int) (uint64, error) {
	zero := true
	for _, c := range b {
		if c != 0 {
			zero = false
			break
		}
	}
	if zero {
		return 0, nil
	}
	gen := binary.LittleEndian.Uint64(b[8:])
	want := make([]byte, len(b))
	fillSlot(want, file, slot, gen)
	if string(want) != string(b) {
		return 0, fmt.Errorf("slot %d of f%d is torn or foreign (stamp: file %d slot %d gen %d)",
			slot, file, binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:]), gen)
	}
	return gen, nil
}

// crashRun is the shared state of one round between one mount and its kill.
type crashRun struct {
	mnt     string
	model   *crashModel
	gen     *atomic.Uint64
	killed  atomic.Bool
	stop    chan struct{}
	rbMu    *sync.RWMutex // writers hold it shared; a rollback exclusively
	errs    chan error    // failures seen before the kill
	inOp    atomic.Value  // string: the controller's op in flight
	started chan string   // the controller announces ops the killer may aim at
	writes  atomic.Int64
	fsyncs  atomic.Int64
	epoch   *atomic.Int64 // bumped by every rollback: handles go stale
}

func (r *crashRun) fail(err error) {
	if r.killed.Load() {
		return
	}
	select {
	case r.errs <- err:
	default:
	}
}

// writer writes runs of slots of file i at random, fsyncing half of the
// time, until stopped or the server is gone.
func (r *crashRun) writer(i int, rng *rand.Rand) {
	p := filepath.Join(r.mnt, fmt.Sprintf("f%d", i))
	buf := make([]byte, crashMaxRun*crashSlotSize)
	var f *os.File
	var fEpoch int64 = -1
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		r.rbMu.RLock()
		if e := r.epoch.Load(); f == nil || fEpoch != e {
			if f != nil {
				f.Close()
			}
			var err error
			if f, err = os.OpenFile(p, os.O_RDWR, 0); err != nil {
				r.rbMu.RUnlock()
				r.fail(fmt.Errorf("open f%d: %w", i, err))
				return
			}
			fEpoch = e
		}
		first := rng.Intn(crashSlots)
		n := 1 + rng.Intn(min(crashMaxRun, crashSlots-first))
		if rng.Intn(4) != 0 {
			n = min(n, 4)
		}
		g := r.gen.Add(1)
		for s := 0; s < n; s++ {
			fillSlot(buf[s*crashSlotSize:(s+1)*crashSlotSize], i, first+s, g)
		}
		// The write may land (and survive) from the moment it begins.
		r.model.mu.Lock()
		for s := first; s < first+n; s++ {
			r.model.cur[i][s].hi = g
			r.model.dur[i][s].hi = g
		}
		r.model.mu.Unlock()
		_, err := f.WriteAt(buf[:n*crashSlotSize], int64(first)*crashSlotSize)
		if err != nil {
			r.rbMu.RUnlock()
			r.fail(fmt.Errorf("write f%d slots %d-%d: %w", i, first, first+n-1, err))
			return
		}
		r.writes.Add(1)
		r.model.mu.Lock()
		for s := first; s < first+n; s++ {
			r.model.cur[i][s] = genRange{g, g}
		}
		r.model.mu.Unlock()
		if rng.Intn(2) == 0 {
			// What the live view held when fsync was called is durable
			// once it returns.
			r.model.mu.Lock()
			before := r.model.cur[i]
			r.model.mu.Unlock()
			if err := f.Sync(); err != nil {
				r.rbMu.RUnlock()
				r.fail(fmt.Errorf("fsync f%d: %w", i, err))
				return
			}
			r.fsyncs.Add(1)
			r.model.mu.Lock()
			// Only this writer writes file i, so nothing moved meanwhile.
			r.model.dur[i] = before
			r.model.mu.Unlock()
		}
		r.rbMu.RUnlock()
	}
}

// crashTest is the state kept across rounds.
type crashTest struct {
	e        *env
	rng      *rand.Rand
	model    crashModel
	gen      atomic.Uint64
	epoch    atomic.Int64
	rbMu     sync.RWMutex
	cps      map[string]slotsState // checkpoints the model knows, by id
	archives int                   // archives known to exist
	// An op the last kill may have interrupted: it may or may not have
	// taken effect.
	pendingCP       *slotsState
	pendingRollback string
	killsDuring     map[string]int
	ops             map[string]int
	orphans         int
	lastPID         int
}

// snapshotCur is the ranges of the live state: a checkpoint taken now
// holds at least their lower bounds.
func (ct *crashTest) snapshotCur() slotsState {
	ct.model.mu.Lock()
	defer ct.model.mu.Unlock()
	return ct.model.cur
}

// TestCrashKillDuringWritesCheckpointsRollbacksPruneGC is the crash test
// described at the top of this file. STRATA_CRASH_KILLS sets the number of
// kills (default 12; `make stress` runs 300); STRATA_CRASH_SEED replays the
// choices of a run (not the timing of its kills).
func TestCrashKillDuringWritesCheckpointsRollbacksPruneGC(t *testing.T) {
	kills := crashKillsDflt
	if s := os.Getenv("STRATA_CRASH_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("STRATA_CRASH_KILLS=%q: %v", s, err)
		}
		kills = n
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("STRATA_CRASH_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("STRATA_CRASH_SEED=%q: %v", s, err)
		}
		seed = n
	}
	t.Logf("seed %d, %d kills", seed, kills)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("failed with seed %d: replay with STRATA_CRASH_SEED=%d STRATA_CRASH_KILLS=%d go test -count=1 -run TestCrashKill ./cmd/strata", seed, seed, kills)
		}
	})
	e := newEnv(t)
	e.ok("sandbox", "create", crashSandbox, "--base", e.base)
	ct := &crashTest{e: e, rng: rand.New(rand.NewSource(seed)), cps: map[string]slotsState{},
		killsDuring: map[string]int{}, ops: map[string]int{}}
	start := time.Now()

	// The files exist, fsync'ed, before the first checkpoint, so every
	// checkpoint has them.
	pid := ct.mount()
	for i := 0; i < crashFiles; i++ {
		f, err := os.Create(filepath.Join(e.mnt, fmt.Sprintf("f%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(crashSlots * crashSlotSize); err != nil {
			t.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	if d, err := os.Open(e.mnt); err == nil {
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
	c := ct.dial()
	var cp checkpoint.Checkpoint
	if err := c.Call(control.OpCheckpointCreate, control.CheckpointCreateArgs{Sandbox: crashSandbox}, &cp); err != nil {
		t.Fatal(err)
	}
	c.Close()
	ct.cps[cp.ID] = ct.snapshotCur()

	for k := 0; k < kills; k++ {
		if k > 0 {
			pid = ct.mount()
		}
		ct.lastPID = pid
		ct.round(k, pid)
		ct.check(k)
	}

	// A clean mount at the end reads back, through the kernel, exactly
	// what the last check found.
	ct.mount()
	for i := 0; i < crashFiles; i++ {
		b, err := os.ReadFile(filepath.Join(e.mnt, fmt.Sprintf("f%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		for s := 0; s < crashSlots; s++ {
			g, err := decodeSlot(b[s*crashSlotSize:(s+1)*crashSlotSize], i, s)
			if want := ct.model.cur[i][s].lo; err != nil || g != want {
				t.Fatalf("after the last kill, through the mount: f%d slot %d holds generation %d (%v), want %d", i, s, g, err, want)
			}
		}
	}
	e.ok("unmount", crashSandbox)
	var during []string
	for op, n := range ct.killsDuring {
		during = append(during, fmt.Sprintf("%s %d", op, n))
	}
	sort.Strings(during)
	t.Logf("%d kills survived in %v, 0 failures; kills landed during: %s; controller ops: %v; drops and data files a kill left, finished by the next gc: %d",
		kills, time.Since(start).Round(time.Millisecond), strings.Join(during, ", "), ct.ops, ct.orphans)
}

// mount mounts the sandbox in the background and returns its server's pid.
func (ct *crashTest) mount() int {
	ct.e.t.Helper()
	var info control.MountInfo
	ct.e.okJSON(&info, "mount", crashSandbox, ct.e.mnt)
	if info.PID <= 0 {
		ct.e.t.Fatalf("mount: no server pid in %+v", info)
	}
	return info.PID
}

func (ct *crashTest) dial() *control.Client {
	ct.e.t.Helper()
	c, err := control.Dial(ct.e.store)
	if err != nil {
		ct.e.t.Fatal(err)
	}
	return c
}

// round runs writers and the controller against the server pid until the
// killer kills it, then waits for everything to stop.
func (ct *crashTest) round(k, pid int) {
	t := ct.e.t
	t.Helper()
	r := &crashRun{mnt: ct.e.mnt, model: &ct.model, gen: &ct.gen, stop: make(chan struct{}),
		rbMu: &ct.rbMu, errs: make(chan error, 16), started: make(chan string, 16), epoch: &ct.epoch}
	r.inOp.Store("")
	c := ct.dial()
	defer c.Close()
	var wg sync.WaitGroup
	for i := 0; i < crashFiles; i++ {
		wg.Add(1)
		go func(i int, seed int64) {
			defer wg.Done()
			r.writer(i, rand.New(rand.NewSource(seed)))
		}(i, ct.rng.Int63())
	}
	ctlDone := make(chan struct{})
	ctlSeed := ct.rng.Int63()
	go func() {
		defer close(ctlDone)
		ct.controller(r, c, rand.New(rand.NewSource(ctlSeed)))
	}()

	// The killer: at a random moment, or just after the controller begins
	// the kind of op it aims at.
	aim := []string{"", "", "checkpoint", "rollback", "prune", "gc"}[ct.rng.Intn(6)]
	delay := time.Duration(30+ct.rng.Intn(500)) * time.Millisecond
	if aim != "" {
		deadline := time.After(2 * time.Second)
	wait:
		for {
			select {
			case op := <-r.started:
				if op == aim {
					time.Sleep(time.Duration(rand.Intn(3000)) * time.Microsecond)
					break wait
				}
			case <-deadline:
				break wait
			}
		}
	} else {
		time.Sleep(delay)
	}
	during := r.inOp.Load().(string)
	if during == "" {
		during = "writes"
	}
	r.killed.Store(true)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %d: %v", k, err)
	}
	ct.killsDuring[during]++
	close(r.stop)
	waitFor(t, 10*time.Second, "the killed server to be gone", func() bool { return processGone(pid) })
	// The dead server's connection is aborted with it: every request in
	// flight fails, so the writers and the controller stop.
	wg.Wait()
	<-ctlDone
	syscall.Unmount(ct.e.mnt, syscall.MNT_DETACH)
	select {
	case err := <-r.errs:
		t.Fatalf("kill %d: before the kill: %v", k, err)
	default:
	}
	t.Logf("kill %d during %s: %d writes, %d fsyncs", k, during, r.writes.Load(), r.fsyncs.Load())
}

// controller checkpoints, rolls back, prunes, collects and verifies over
// the control socket until the server is gone.
func (ct *crashTest) controller(r *crashRun, c *control.Client, rng *rand.Rand) {
	for {
		select {
		case <-r.stop:
			return
		case <-time.After(time.Duration(rng.Intn(30)) * time.Millisecond):
		}
		op := []string{"checkpoint", "checkpoint", "rollback", "prune", "gc", "verify"}[rng.Intn(6)]
		announce := func() {
			r.inOp.Store(op)
			select {
			case r.started <- op:
			default:
			}
		}
		var err error
		switch op {
		case "checkpoint":
			lo := ct.snapshotCur()
			ct.pendingCP = &lo
			announce()
			var cp checkpoint.Checkpoint
			err = c.Call(control.OpCheckpointCreate, control.CheckpointCreateArgs{Sandbox: crashSandbox}, &cp)
			if err == nil {
				hi := ct.snapshotCur()
				ct.cps[cp.ID] = joinStates(lo, hi)
				ct.pendingCP = nil
			}
		case "rollback":
			ids := sortedIDs(ct.cps)
			if len(ids) == 0 {
				continue
			}
			id := ids[rng.Intn(len(ids))]
			ct.rbMu.Lock()
			ct.pendingRollback = id
			announce()
			err = c.Call(control.OpRollback, control.RollbackArgs{Sandbox: crashSandbox, Checkpoint: id}, nil)
			if err == nil {
				ct.applyRollback(id)
				ct.pendingRollback = ""
			}
			ct.rbMu.Unlock()
		case "prune":
			keep := 2 + rng.Intn(5)
			announce()
			var rep control.PruneReport
			err = c.Call(control.OpCheckpointPrune, control.PruneArgs{Sandbox: crashSandbox, KeepLast: &keep}, &rep)
			if err == nil {
				for _, id := range rep.Removed {
					delete(ct.cps, id)
				}
			}
		case "gc":
			announce()
			// Half the collections also dedup, so kills land in passes.
			err = c.Call(control.OpGC, control.GCArgs{Dedup: rng.Intn(2) == 0}, nil)
		case "verify":
			announce()
			var reps []control.VerifyReport
			err = c.Call(control.OpVerify, control.VerifyArgs{Ref: crashSandbox}, &reps)
			for _, v := range reps {
				if err == nil && (!v.OK || v.Error != "") {
					r.fail(fmt.Errorf("verify %s while serving: %+v", v.Checkpoint, v))
				}
			}
		}
		r.inOp.Store("")
		if err != nil {
			r.fail(fmt.Errorf("%s: %w", op, err))
			return
		}
		ct.ops[op]++
	}
}

// applyRollback makes the model's live and durable state the checkpoint's;
// the caller holds rbMu, so no write is in flight.
func (ct *crashTest) applyRollback(id string) {
	st := ct.cps[id]
	ct.model.mu.Lock()
	ct.model.cur = st
	ct.model.dur = st
	ct.model.mu.Unlock()
	ct.archives++
	ct.epoch.Add(1)
}

// joinStates is, per slot, the checkpoint's range: at least what the live
// state held when it began (lo's lower bounds), at most what had begun by
// the time it ended (hi's upper bounds).
func joinStates(lo, hi slotsState) slotsState {
	var out slotsState
	for i := range out {
		for s := range out[i] {
			out[i][s] = genRange{lo[i][s].lo, hi[i][s].hi}
		}
	}
	return out
}

func sortedIDs(m map[string]slotsState) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// check opens the store after kill k and checks it: fsck, every
// checkpoint's hash and content, and the live content against the model.
func (ct *crashTest) check(k int) {
	t := ct.e.t
	t.Helper()
	st, err := layers.Open(ct.e.store)
	for deadline := time.Now().Add(10 * time.Second); errors.Is(err, layers.ErrLocked) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		st, err = layers.Open(ct.e.store)
	}
	if err != nil {
		out, _ := exec.Command("sh", "-c", fmt.Sprintf("for t in /proc/%d/task/*; do echo $t; cat $t/stat; cat $t/stack; done; grep fuse /proc/mounts; ls /sys/fs/fuse/connections", ct.lastPID)).CombinedOutput()
		t.Fatalf("kill %d: the store does not open: %v\n%s", k, err, out)
	}
	defer st.Close()
	rep, err := st.Fsck()
	if err != nil {
		t.Fatalf("kill %d: fsck: %v", k, err)
	}
	// A kill between gc's commit and the end of its drops leaves layers
	// marked as being dropped, which fsck lists apart and the next gc
	// finishes; a data file of no layer (a kill before a new layer's
	// record was committed) fsck reports and gc removes; anything else is
	// a failure.
	var orphans, other []layers.Problem
	for _, p := range rep.Problems {
		if p.Kind == "orphan" && strings.HasPrefix(p.Detail, "data file of a layer that does not exist") {
			orphans = append(orphans, p)
		} else {
			other = append(other, p)
		}
	}
	if len(other) > 0 {
		t.Fatalf("kill %d: fsck found %d problems: %+v", k, len(other), other)
	}
	if len(orphans) > 0 || len(rep.Dropping) > 0 {
		ct.orphans += len(orphans) + len(rep.Dropping)
		gc, err := st.CollectGarbage()
		if err != nil || gc.DataFiles != len(orphans) {
			t.Fatalf("kill %d: gc after fsck found %d leftover data files: %+v, %v", k, len(orphans), gc, err)
		}
		for _, id := range rep.Dropping {
			if !slices.Contains(gc.Layers, id) {
				t.Fatalf("kill %d: gc did not finish the drop of %s: %+v", k, id, gc)
			}
		}
		if rep, err := st.Fsck(); err != nil || len(rep.Problems) > 0 || len(rep.Dropping) > 0 {
			t.Fatalf("kill %d: fsck after gc: %+v, dropping %v, %v", k, rep.Problems, rep.Dropping, err)
		}
	}

	mgr := checkpoint.New(st, nil)
	list, err := mgr.List(crashSandbox)
	if err != nil {
		t.Fatalf("kill %d: list checkpoints: %v", k, err)
	}
	// Settle what the kill may have interrupted.
	listed := map[string]bool{}
	for _, cp := range list {
		listed[cp.ID] = true
		if _, ok := ct.cps[cp.ID]; ok {
			continue
		}
		if ct.pendingCP == nil {
			t.Fatalf("kill %d: checkpoint %s exists, but none was being made", k, cp.ID)
		}
		ct.cps[cp.ID] = joinStates(*ct.pendingCP, ct.snapshotCur())
	}
	ct.pendingCP = nil
	for id := range ct.cps {
		if !listed[id] {
			delete(ct.cps, id) // a prune the kill interrupted had committed
		}
	}
	ars, err := mgr.Archives(crashSandbox)
	if err != nil {
		t.Fatalf("kill %d: list archives: %v", k, err)
	}
	switch {
	case len(ars) == ct.archives:
	case len(ars) == ct.archives+1 && ct.pendingRollback != "":
		// The interrupted rollback had committed: its checkpoint still
		// exists (rollback removes none, and the prune that could have
		// run is serialized with it).
		if _, ok := ct.cps[ct.pendingRollback]; !ok {
			t.Fatalf("kill %d: rollback to %s committed, but the checkpoint is gone", k, ct.pendingRollback)
		}
		ct.applyRollback(ct.pendingRollback)
	default:
		t.Fatalf("kill %d: %d archives, want %d (a rollback to %q was in flight)", k, len(ars), ct.archives, ct.pendingRollback)
	}
	ct.pendingRollback = ""

	for _, cp := range list {
		res, err := mgr.Verify(cp.ID)
		if err != nil || !res.OK {
			t.Fatalf("kill %d: verify %s: %+v %v", k, cp.ID, res, err)
		}
		v, err := st.OpenSnapshot(crashSandbox, cp.Layer)
		if err != nil {
			t.Fatalf("kill %d: open checkpoint %s: %v", k, cp.ID, err)
		}
		state := ct.cps[cp.ID]
		checkSlots(t, fmt.Sprintf("kill %d: checkpoint %s", k, cp.ID), v, &state, nil)
		v.Close()
	}
	v, err := st.OpenView(crashSandbox, true)
	if err != nil {
		t.Fatalf("kill %d: open the sandbox: %v", k, err)
	}
	var seen slotsState
	ct.model.mu.Lock()
	dur := slotsState(ct.model.dur)
	ct.model.mu.Unlock()
	checkSlots(t, fmt.Sprintf("kill %d: live state", k), v, &dur, &seen)
	v.Close()
	// What was found is now the truth, and durable: it was read back from
	// the store.
	ct.model.mu.Lock()
	ct.model.cur, ct.model.dur = seen, seen
	ct.model.mu.Unlock()
}

// checkSlots reads every slot of every file of v and requires each to be
// whole and within want's range; seen, if not nil, gets what was found.
func checkSlots(t *testing.T, what string, v *layers.View, want, seen *slotsState) {
	t.Helper()
	buf := make([]byte, crashSlots*crashSlotSize)
	for i := 0; i < crashFiles; i++ {
		a, err := v.Lookup(layers.RootIno, fmt.Sprintf("f%d", i))
		if err != nil {
			t.Fatalf("%s: f%d: %v", what, i, err)
		}
		if a.Size != int64(len(buf)) {
			t.Fatalf("%s: f%d has %d bytes, want %d", what, i, a.Size, len(buf))
		}
		for off := 0; off < len(buf); {
			n, err := v.ReadAt(a.Ino, buf[off:], int64(off))
			off += n
			if err != nil || n == 0 {
				if off < len(buf) {
					t.Fatalf("%s: read f%d at %d: %v", what, i, off, err)
				}
			}
		}
		for s := 0; s < crashSlots; s++ {
			g, err := decodeSlot(buf[s*crashSlotSize:(s+1)*crashSlotSize], i, s)
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			if r := want[i][s]; g < r.lo || g > r.hi {
				t.Fatalf("%s: f%d slot %d holds generation %d, want %d to %d (fsync'ed data lost or a rollback undone)", what, i, s, g, r.lo, r.hi)
			}
			if seen != nil {
				seen[i][s] = genRange{g, g}
			}
		}
	}
}
