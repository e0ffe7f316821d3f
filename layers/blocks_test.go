package layers

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestStatBlocks: st_blocks counts what a file occupies, so sparse files
// show their holes: an untouched base file reports the base's blocks; a
// file written in the sandbox, the pages of its blocks that hold bytes; a
// base file a write copied up, its base blocks (no more than the base file
// occupies) plus the written ones.
// The count holds across a restart (when block maps are read again).
func TestStatBlocks(t *testing.T) {
	const bs = 64 << 10
	e := newEnv(t, bs, func(base string) {
		put(t, filepath.Join(base, "small"), "small")
		f, err := os.Create(filepath.Join(base, "sparse"))
		ok(t, "create", err)
		_, err = f.WriteAt([]byte("end"), 100<<20)
		ok(t, "write", err)
		ok(t, "close", f.Close())
		big := make([]byte, 4*bs)
		for i := range big {
			big[i] = 'a'
		}
		ok(t, "write dense", os.WriteFile(filepath.Join(base, "dense"), big, 0o644))
	})
	var host syscall.Stat_t
	ok(t, "stat", syscall.Stat(filepath.Join(e.base, "sparse"), &host))
	v := e.view()
	type want struct {
		name   string
		blocks int64
	}
	check := func(when string, wants []want) {
		t.Helper()
		for _, w := range wants {
			a := lookup(t, v, RootIno, w.name)
			if a.Blocks != w.blocks {
				t.Errorf("%s: %s has %d blocks, want %d", when, w.name, a.Blocks, w.blocks)
			}
		}
	}
	check("untouched", []want{{"small", 8}, {"sparse", host.Blocks}, {"dense", 4 * bs / 512}})

	// Written in the sandbox: 4 KiB at 1 MiB and 10 bytes at 1 GiB.
	h := mkfile(t, v, RootIno, "holes", "")
	page := make([]byte, 4096)
	page[0] = 1
	_, err := v.WriteAt(h.Ino, page, 1<<20, false)
	ok(t, "write", err)
	_, err = v.WriteAt(h.Ino, []byte("0123456789"), 1<<30, false)
	ok(t, "write", err)
	// A truncate up adds no blocks.
	tr := mkfile(t, v, RootIno, "truncated", "")
	size := int64(1 << 30)
	a, err := v.SetAttr(tr.Ino, SetAttrIn{Size: &size})
	ok(t, "truncate", err)
	if a.Blocks != 0 {
		t.Errorf("a truncate to 1 GiB answers %d blocks, want 0", a.Blocks)
	}
	// A base file written in its second block.
	dense := lookup(t, v, RootIno, "dense")
	_, err = v.WriteAt(dense.Ino, []byte("x"), bs+10, false)
	ok(t, "write dense", err)
	// A sparse base file written at its start: its base part counts what
	// the base file occupies, not its size.
	sp := lookup(t, v, RootIno, "sparse")
	_, err = v.WriteAt(sp.Ino, []byte("y"), 0, false)
	ok(t, "write sparse", err)
	after := []want{
		{"holes", 16}, {"truncated", 0}, {"dense", 4 * bs / 512}, {"small", 8},
		// The base part, no more than the base file's blocks (its last
		// page), and block 0's one page of data: not 100 MiB as a dense
		// count of the base would say (du showed 1 GiB for a 1 GiB sparse
		// base file written once).
		{"sparse", host.Blocks + pageSize/512},
	}
	check("written", after)
	v = e.reopen(v)
	defer v.Close()
	check("after a restart", after)
	freeze(t, e.store, e.name)
	check("after a freeze", after)
}
