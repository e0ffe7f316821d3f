package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// sentInval is touchedInval that keeps how many notifications each
// targeted invalidation sent.
type sentInval struct {
	m    *Mount
	sent *[]int
}

func (i sentInval) Invalidate(string) { i.m.Invalidate() }

func (i sentInval) InvalidateTouched(_ string, t layers.Touched) {
	*i.sent = append(*i.sent, i.m.InvalidateTouched(t))
}

// TestRollbackNotifiesOnlyChangedNames: in a directory whose entries a
// rollback changed, the kernel is told about the changed names only, not
// about every name it knows there, and what it then shows is the
// checkpoint's state, the unchanged names included.
func TestRollbackNotifiesOnlyChangedNames(t *testing.T) {
	const files = 200
	sb := newSandbox(t, func(base string) {
		for i := 0; i < files; i++ {
			writeFile(t, filepath.Join(base, "d", fmt.Sprintf("f%03d", i)), fmt.Sprintf("base %d", i))
		}
	})
	var sent []int
	mgr := checkpoint.New(sb.store, sentInval{sb.m, &sent})
	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	// The kernel learns every name of d.
	for i := 0; i < files; i++ {
		if _, err := os.Lstat(sb.path(fmt.Sprintf("d/f%03d", i))); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, sb.path("d/new"), "new")
	mustNil(t, "remove", os.Remove(sb.path("d/f000")))
	writeFile(t, sb.path("d/f001"), "changed")
	mustNil(t, "rename", os.Rename(sb.path("d/f002"), sb.path("d/f002.moved")))
	if _, err := os.Lstat(sb.path("d/missing")); !os.IsNotExist(err) {
		t.Fatalf("d/missing: got %v, want not found", err)
	}
	_, err = mgr.Rollback(sb.name, cp.ID)
	mustNil(t, "rollback", err)
	if len(sent) != 1 {
		t.Fatalf("the rollback used %d targeted invalidations, want 1", len(sent))
	}
	// d's attributes and listing, f001's and new's contents, and the
	// names new, f000, f002 and f002.moved; f000 and f002 are not known
	// as inodes any more, so less may be sent, never a name per file.
	if sent[0] > 10 {
		t.Fatalf("the rollback sent %d notifications for 4 changed names of %d", sent[0], files)
	}
	want := map[string]string{"d/f000": "base 0", "d/f001": "base 1", "d/f002": "base 2", "d/f100": "base 100", "d/f199": "base 199"}
	for p, w := range want {
		if got := readFile(t, sb.path(p)); got != w {
			t.Errorf("%s after the rollback: %q, want %q", p, got, w)
		}
	}
	for _, p := range []string{"d/new", "d/f002.moved", "d/missing"} {
		if _, err := os.Lstat(sb.path(p)); !os.IsNotExist(err) {
			t.Errorf("%s after the rollback: got %v, want not found", p, err)
		}
	}
	ents, err := os.ReadDir(sb.path("d"))
	mustNil(t, "readdir", err)
	if len(ents) != files {
		t.Errorf("d lists %d entries after the rollback, want %d", len(ents), files)
	}
}

// TestOpenWaitingForARollbackIsRefused: a rollback drops only the
// attributes of a file no handle holds (pagesFrom), so an open that
// passed the check of staleness before the rollback moved the file, and
// waited for the view meanwhile, must not return a handle of the stale
// inode, whose pages the kernel still holds: it is refused (ESTALE, and
// the kernel opens the new inode), and counts no handle.
func TestOpenWaitingForARollbackIsRefused(t *testing.T) {
	sb := newSandbox(t, func(base string) { writeFile(t, filepath.Join(base, "f"), "base") })
	var sent []int
	mgr := checkpoint.New(sb.store, sentInval{sb.m, &sent})
	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	writeFile(t, sb.path("f"), "EDIT")
	if got := readFile(t, sb.path("f")); got != "EDIT" {
		t.Fatalf("f: %q before the rollback", got)
	}
	fn := sb.m.root.GetChild("f").Operations().(*node)
	// The kernel releases a closed file's handle after close returns.
	for i := 0; fn.handles.Load() != 0; i++ {
		if i == 1000 {
			t.Fatalf("f holds %d handles after its reads", fn.handles.Load())
		}
		time.Sleep(time.Millisecond)
	}
	if pagesFrom(&fn.Inode) != -1 {
		t.Fatal("a file no handle holds keeps its pages' drop")
	}
	type opened struct {
		fh    any
		errno syscall.Errno
	}
	res := make(chan opened, 1)
	_, err = mgr.RollbackTx(sb.name, cp.ID, func(*layers.Txn, string) error {
		// The rollback holds the view: the open passes its first check
		// and waits in the view's Open.
		go func() {
			fh, _, errno := fn.open(syscall.O_RDONLY, false)
			res <- opened{fh, errno}
		}()
		time.Sleep(50 * time.Millisecond)
		return nil
	})
	mustNil(t, "rollback", err)
	r := <-res
	if r.errno != syscall.ESTALE {
		t.Fatalf("an open that waited for the rollback: handle %v, errno %v; want ESTALE", r.fh, r.errno)
	}
	if n := fn.handles.Load(); n != 0 {
		t.Errorf("the refused open left %d handles counted", n)
	}
	if got := readFile(t, sb.path("f")); got != "base" {
		t.Errorf("f after the rollback: %q, want \"base\"", got)
	}
	// A handle the file had when the rollback came keeps the pages' drop.
	writeFile(t, sb.path("f"), "EDIT")
	f, err := os.Open(sb.path("f"))
	mustNil(t, "open", err)
	defer f.Close()
	held := sb.m.root.GetChild("f")
	if pagesFrom(held) != 0 {
		t.Error("a file a handle holds has only its attributes dropped")
	}
}
