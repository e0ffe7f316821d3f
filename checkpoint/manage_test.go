package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

func TestPruneForkGC(t *testing.T) {
	l := newLive(t, nil)
	var ids []string
	for i := 0; i < 5; i++ {
		l.write("f.txt", string(rune('a'+i)))
		cp, err := l.mgr.Create("s", Options{Step: i})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cp.ID)
	}
	// A fork of the second checkpoint shares its layers.
	if _, err := l.mgr.Fork("f", ids[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := l.mgr.Fork("f", ids[1]); !errors.Is(err, layers.ErrExists) {
		t.Fatalf("second fork: got %v, want ErrExists", err)
	}
	res, err := l.mgr.Prune("s", Policy{KeepLast: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 3 || len(res.Kept) != 2 {
		t.Fatalf("prune: got removed %d kept %d, want 3 and 2", len(res.Removed), len(res.Kept))
	}
	cps, err := l.mgr.List("s")
	if err != nil || len(cps) != 2 || cps[0].ID != ids[3] {
		t.Fatalf("list after prune: %v %v", cps, err)
	}
	// Every layer is still in the live stack: nothing was collected, and
	// the fork still reads its state.
	if len(res.GC.Layers) != 0 {
		t.Fatalf("gc removed %v, want nothing", res.GC.Layers)
	}
	v, err := l.store.OpenView("f", true)
	if err != nil {
		t.Fatal(err)
	}
	a, err := v.Lookup(layers.RootIno, "f.txt")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	n, _ := v.ReadAt(a.Ino, buf, 0)
	if string(buf[:n]) != "b" {
		t.Fatalf("fork reads %q, want %q", buf[:n], "b")
	}
	v.Close()
	// Removing the original keeps what the fork needs.
	l.unmount()
	if err := l.mgr.RemoveSandbox("s"); err != nil {
		t.Fatal(err)
	}
	v, err = l.store.OpenView("f", true)
	if err != nil {
		t.Fatal(err)
	}
	n, _ = v.ReadAt(a.Ino, buf, 0)
	v.Close()
	if string(buf[:n]) != "b" {
		t.Fatalf("fork after rm of origin reads %q, want %q", buf[:n], "b")
	}
	if err := l.mgr.RemoveSandbox("f"); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(l.store.Dir(), "data"))
	if len(ents) != 0 {
		t.Fatalf("data files left after removing every sandbox: %d", len(ents))
	}
}
