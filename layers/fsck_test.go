package layers

import (
	"os"
	"strings"
	"testing"
)

func TestFsckCleanAndCorrupt(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) {
		put(t, base+"/dir/a", "base a")
	})
	v := e.view()
	f := mkfile(t, v, RootIno, "f", strings.Repeat("x", 3*MinBlockSize))
	d := lookup(t, v, RootIno, "dir")
	ok(t, "unlink base file", v.Unlink(d.Ino, "a"))
	ok(t, "close", v.Close())

	rep, err := e.store.Fsck()
	ok(t, "fsck", err)
	if len(rep.Problems) != 0 {
		t.Fatalf("fsck of a healthy store: got %+v, want no problems", rep.Problems)
	}
	if rep.Blocks != 3 || rep.Sandboxes != 1 || rep.Layers != 1 || rep.Paths != 3 {
		t.Fatalf("fsck counted %+v, want 3 blocks, 1 sandbox, 1 layer, 3 paths", rep)
	}

	// Flip one byte of the file's second block in the layer's data file.
	info, _ := e.store.Sandbox("sb")
	data := e.store.dataPath(info.Head)
	b, err := os.ReadFile(data)
	ok(t, "read data", err)
	b[MinBlockSize+100] ^= 0xff
	ok(t, "write data", os.WriteFile(data, b, 0o600))
	// An orphan data file too.
	ok(t, "orphan", os.WriteFile(e.store.dataPath("01ORPHANORPHANORPHANORPHAN"), nil, 0o600))

	rep, err = e.store.Fsck()
	ok(t, "fsck", err)
	var checksum, orphan bool
	for _, p := range rep.Problems {
		switch p.Kind {
		case "checksum":
			checksum = true
			if p.Path != "f" || p.Ino != f.Ino || p.Sandbox != "sb" {
				t.Errorf("checksum problem %+v: want path f, inode %d, sandbox sb", p, f.Ino)
			}
		case "orphan":
			orphan = true
		}
	}
	if !checksum || !orphan || len(rep.Problems) != 2 {
		t.Fatalf("fsck after damage: got %+v, want one checksum and one orphan problem", rep.Problems)
	}
	// fsck repaired nothing: the damage is still there.
	v = e.view()
	defer v.Close()
	buf := make([]byte, MinBlockSize)
	if _, err := v.ReadAt(f.Ino, buf, MinBlockSize); !strings.Contains(errString(err), "checksum") {
		t.Fatalf("read of the damaged block: got %v, want a checksum error", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
