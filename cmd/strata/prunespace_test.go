package main

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
)

// storeDataBytes is the disk space the store's data files take.
func storeDataBytes(t *testing.T, store string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(filepath.Join(store, "data"), func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return err
		}
		n += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPruneGivesBackHiddenBlocks: an agent rewrites a file at every step
// (in place, and by writing a new file and renaming it over); pruning all
// but the last two checkpoints gives back the copies no kept state shows,
// through the live mount, and every kept state, the live one and an
// archive read as before, also after a remount.
func TestPruneGivesBackHiddenBlocks(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	const size = 256 << 10 // 4 blocks of 64 KiB
	contents := map[string]string{}
	rng := rand.New(rand.NewSource(7))
	var cps []checkpoint.Checkpoint
	for i := 1; i <= 6; i++ {
		b := make([]byte, size)
		rng.Read(b)
		if i%2 == 0 {
			writeFile(t, filepath.Join(e.mnt, "f.new"), string(b))
			if err := os.Rename(filepath.Join(e.mnt, "f.new"), filepath.Join(e.mnt, "f.bin")); err != nil {
				t.Fatal(err)
			}
		} else {
			writeFile(t, filepath.Join(e.mnt, "f.bin"), string(b))
		}
		writeFile(t, filepath.Join(e.mnt, "step"), strings.Repeat("x", i))
		writeFile(t, filepath.Join(e.mnt, "own"+strings.Repeat("x", i)), "mine")
		cp := e.checkpoint("demo")
		contents[cp.ID] = string(b)
		cps = append(cps, cp)
	}
	before := storeDataBytes(t, e.store)
	var r control.PruneReport
	e.okJSON(&r, "checkpoint", "prune", "demo", "--keep-last", "2")
	// f.bin's 4 blocks and step's one (a 4 KiB slot) in each of the 4
	// pruned checkpoints' layers; each layer's own file stays.
	if len(r.Removed) != 4 || r.GC.HiddenBlocks != 20 || r.GC.BytesFreed != 16*64<<10+4*4<<10 {
		t.Fatalf("prune: removed %d, gc %+v; want 4 removed and 20 hidden blocks (1 MiB and 16 KiB)", len(r.Removed), r.GC)
	}
	if after := storeDataBytes(t, e.store); before-after < 16*64<<10 {
		t.Errorf("the data files take %d bytes, %d before: not 1 MiB less", after, before)
	}
	check := func(when string) {
		t.Helper()
		if got := readFile(t, filepath.Join(e.mnt, "f.bin")); got != contents[cps[5].ID] {
			t.Errorf("%s: f.bin differs", when)
		}
		e.ok("verify", "demo")
		e.ok("fsck")
	}
	check("after the prune")
	e.ok("rollback", "demo", "--to-checkpoint", cps[4].ID)
	if got := readFile(t, filepath.Join(e.mnt, "f.bin")); got != contents[cps[4].ID] {
		t.Errorf("after a rollback to the older kept checkpoint: f.bin differs")
	}
	if got := readFile(t, filepath.Join(e.mnt, "step")); got != "xxxxx" {
		t.Errorf("after the rollback: step is %q", got)
	}
	for i := 1; i <= 5; i++ {
		if got := readFile(t, filepath.Join(e.mnt, "own"+strings.Repeat("x", i))); got != "mine" {
			t.Errorf("after the rollback: the file of step %d reads %q", i, got)
		}
	}
	var ars []checkpoint.Archive
	e.okJSON(&ars, "archive", "list", "demo")
	e.ok("archive", "restore", ars[len(ars)-1].ID)
	e.ok("unmount", "demo")
	e.ok("mount", "demo", e.mnt)
	check("after a restore and a remount")
	if out := e.ok("gc"); !strings.Contains(out, "0 hidden blocks") {
		t.Errorf("a second gc: %q", out)
	}
}
