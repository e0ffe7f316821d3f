package fs

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// TestIndexDoesNotGrowWithRollbacks: a name looked up again after a
// rollback gave it back to an inode go-fuse still has (held open here)
// gets the inode of the file's current generation (generation.go), which
// go-fuse keeps; the open one stays until it is closed. So at most two per
// number, however many rollbacks: a node go-fuse discarded would stay in
// the index, one more per rollback.
func TestIndexDoesNotGrowWithRollbacks(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		for i := 0; i < 20; i++ {
			writeFile(t, filepath.Join(base, fmt.Sprintf("f%02d", i)), "base")
		}
	})
	mgr := checkpoint.New(sb.store, touchedInval{sb.m})
	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	// Open files keep their inodes in the kernel (and in go-fuse) across
	// the rollbacks, so each lookup after one finds the inode still known.
	for i := 0; i < 20; i++ {
		f, err := os.Open(sb.path(fmt.Sprintf("f%02d", i)))
		mustNil(t, "open", err)
		defer f.Close()
	}
	var most []int
	for round := 0; round < 5; round++ {
		for i := 0; i < 20; i++ {
			// A new file under the old name: the rollback gives the name
			// back to the base file's inode.
			p := sb.path(fmt.Sprintf("f%02d", i))
			mustNil(t, "remove", os.Remove(p))
			mustNil(t, "write", os.WriteFile(p, []byte(fmt.Sprintf("round %d", round)), 0o644))
			if _, err := os.Stat(p); err != nil {
				t.Fatal(err)
			}
		}
		_, err := mgr.Rollback(sb.name, cp.ID)
		mustNil(t, "rollback", err)
		for i := 0; i < 20; i++ {
			if got := readFile(t, sb.path(fmt.Sprintf("f%02d", i))); got != "base" {
				t.Fatalf("round %d: f%02d after rollback: %q", round, i, got)
			}
		}
		most = append(most, settledMost(t, &sb.m.index))
	}
	for _, m := range most {
		if m > 2 {
			t.Fatalf("most inodes indexed for one number after each round: %v; want at most 2 (the open one and the current one)", most)
		}
	}
}

// settledMost is the most inodes idx holds for one number once the
// kernel's FORGETs for the nodes it let go of came in: they come in their
// own time, so right after a rollback the previous round's node may still
// be there. A node the index failed to drop never goes, so waiting cannot
// hide the growth the test is for.
func settledMost(t *testing.T, idx *inodeIndex) int {
	t.Helper()
	n := idx.mostPerNumber()
	for i := 0; i < 100 && n > 2; i++ {
		dropCaches(t)
		time.Sleep(20 * time.Millisecond)
		n = idx.mostPerNumber()
	}
	return n
}

// touchedInval is a checkpoint.TouchedInvalidator of one mount.
type touchedInval struct{ m *Mount }

func (i touchedInval) Invalidate(string) { i.m.Invalidate() }

func (i touchedInval) InvalidateTouched(_ string, t layers.Touched) { i.m.InvalidateTouched(t) }

// TestOldGenerationForgotten: the inode a file had before a rollback
// stays while a handle holds it, and once the kernel forgets it the index
// lets it go, while the file's current inode works on: here unlinked and
// still open, its data kept by the view until its last handle goes.
func TestOldGenerationForgotten(t *testing.T) {
	sb := newSandbox(t, nil)
	writeFile(t, sb.path("f"), "checkpoint")
	mgr := checkpoint.New(sb.store, touchedInval{sb.m})
	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	old, err := os.Open(sb.path("f"))
	mustNil(t, "open", err)
	// Closed before the unmount however the test ends: an open file
	// makes the unmount fail and the mount outlive the test.
	t.Cleanup(func() { old.Close() })
	writeFile(t, sb.path("f"), "changed")
	_, err = mgr.Rollback(sb.name, cp.ID)
	mustNil(t, "rollback", err)
	cur, err := os.Open(sb.path("f"))
	mustNil(t, "open after the rollback", err)
	defer cur.Close()
	mustNil(t, "remove", os.Remove(sb.path("f")))
	ino := sb.m.index.known(fileIno(t, cur))
	if len(ino) != 2 {
		// What tells a missed generation from a lookup that never came.
		var gens []string
		for _, in := range ino {
			//lint:ignore SA1019 a diagnostic
			gens = append(gens, fmt.Sprintf("gen %d forgotten %v", in.StableAttr().Gen, in.Forgotten()))
		}
		t.Fatalf("inodes of f's number: %d (%v; f's generation now %d), want the old and the current one", len(ino), gens, sb.m.gens.file(fileIno(t, cur)))
	}
	// The old inode goes: its handle closes and the kernel drops it.
	mustNil(t, "close old", old.Close())
	waitForget := func() bool {
		dropCaches(t)
		return len(sb.m.index.known(fileIno(t, cur))) == 1
	}
	for i := 0; i < 100 && !waitForget(); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(sb.m.index.known(fileIno(t, cur))); n != 1 {
		t.Fatalf("the kernel kept %d inodes of f's number after the old one closed", n)
	}
	buf := make([]byte, 32)
	n, err := cur.ReadAt(buf, 0)
	if string(buf[:n]) != "checkpoint" {
		t.Fatalf("the unlinked file through its open handle: %q, %v; want %q", buf[:n], err, "checkpoint")
	}
}

// fileIno is the inode number of f.
func fileIno(t *testing.T, f *os.File) uint64 {
	t.Helper()
	fi, err := f.Stat()
	mustNil(t, "fstat", err)
	return fi.Sys().(*syscall.Stat_t).Ino
}

// dropCaches asks the kernel to let go of unused dentries and inodes.
func dropCaches(t *testing.T) {
	t.Helper()
	mustNil(t, "drop_caches", os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0o200))
}

// TestGenerationsFollowWhatTheKernelHolds: a rollback gives new
// generations only to the files the kernel holds, and a file's entry goes
// at the first repoint after the kernel forgot it, so what the mount keeps
// stays as large as what the kernel knows, however many files rollbacks
// touch.
func TestGenerationsFollowWhatTheKernelHolds(t *testing.T) {
	sb := newSandbox(t, nil)
	mgr := checkpoint.New(sb.store, touchedInval{sb.m})
	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	for i := 0; i < 50; i++ {
		writeFile(t, sb.path(fmt.Sprintf("f%02d", i)), "written")
	}
	held, err := os.Open(sb.path("f00"))
	mustNil(t, "open", err)
	defer held.Close()
	heldIno := fileIno(t, held)
	// The kernel lets go of the other 49 (its FORGETs come in their own
	// time: wait until no file but f00 is held).
	for i := 0; i < 100; i++ {
		dropCaches(t)
		sb.m.index.mu.Lock()
		others := 0
		for ino := range sb.m.index.m {
			if ino != heldIno && ino != layers.RootIno {
				others++
			}
		}
		sb.m.index.mu.Unlock()
		if others == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	_, err = mgr.Rollback(sb.name, cp.ID)
	mustNil(t, "rollback", err)
	sb.m.gens.mu.Lock()
	kept, heldGen := len(sb.m.gens.files), sb.m.gens.files[heldIno]
	sb.m.gens.mu.Unlock()
	if kept != 1 || heldGen == 0 {
		t.Fatalf("after a rollback of 50 files, one of them held: %d kept, the held one's generation %d; want 1 kept, above 0", kept, heldGen)
	}
	mustNil(t, "close", held.Close())
	for i := 0; i < 100 && sb.m.index.holds(heldIno); i++ {
		dropCaches(t)
		time.Sleep(20 * time.Millisecond)
	}
	if sb.m.index.holds(heldIno) {
		t.Fatal("the kernel kept f00 after it was closed and caches were dropped")
	}
	// The next repoint lets the entry go.
	_, err = mgr.Rollback(sb.name, cp.ID)
	mustNil(t, "rollback", err)
	sb.m.gens.mu.Lock()
	kept = len(sb.m.gens.files)
	sb.m.gens.mu.Unlock()
	if kept != 0 {
		t.Fatalf("%d generations kept after the kernel let go of every file and a repoint", kept)
	}
}

// TestRevivedInodeBackInIndex: an inode a lookup handed go-fuse goes back
// into the index after the request when go-fuse holds it (here taken out
// as a FORGET racing with the lookup would), and one go-fuse does not
// hold (a new inode never registered) does not; nothing stays kept.
func TestRevivedInodeBackInIndex(t *testing.T) {
	sb := newSandbox(t, nil)
	writeFile(t, sb.path("f"), "data")
	f, err := os.Open(sb.path("f"))
	mustNil(t, "open", err)
	defer f.Close()
	ino := fileIno(t, f)
	held := sb.m.index.known(ino)
	if len(held) != 1 {
		t.Fatalf("index holds %d inodes of f, want 1", len(held))
	}
	in := held[0]
	// As child does for a request that found in live, then a FORGET.
	cancel := make(chan struct{})
	sb.m.revives.put(&fuse.Context{Cancel: cancel}, in)
	sb.m.index.remove(ino, in)
	sb.m.revived(cancel)
	if got := sb.m.index.known(ino); len(got) != 1 || got[0] != in {
		t.Fatalf("after the revival the index holds %d inodes of f, want the one the kernel holds", len(got))
	}
	if _, kept := sb.m.revives.take(cancel); kept {
		t.Fatal("the revival stayed kept after its request")
	}
	// A request that found nothing live leaves nothing; an inode go-fuse
	// never registered stays out.
	sb.m.revived(cancel)
	stray := sb.m.root.NewInode(context.Background(), &node{m: sb.m}, gofs.StableAttr{Ino: ino, Mode: syscall.S_IFREG, Gen: 99})
	other := make(chan struct{})
	sb.m.revives.put(&fuse.Context{Cancel: other}, stray)
	sb.m.revived(other)
	if got := sb.m.index.known(ino); len(got) != 1 {
		t.Fatalf("an empty revival changed the index: %d inodes of f", len(got))
	}
}
