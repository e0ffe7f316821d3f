package layers

import (
	"bytes"
	"testing"
)

// TestZeroedLastBlockKeepsItsSlot: a whole block Zero makes is a fresh
// slot nothing is written to. When it is the last slot of the data file
// and the view goes away (a restart, a crash), the next view must not
// hand the same slot to another block: the zeroed block would then read
// another file's data, which fails its checksums.
func TestZeroedLastBlockKeepsItsSlot(t *testing.T) {
	const bs = MinBlockSize
	for _, keepSize := range []bool{true, false} {
		e := newEnv(t, bs, nil)
		v := e.view()
		z := mkfile(t, v, RootIno, "z", "")
		if keepSize {
			size := int64(2 * bs)
			_, err := v.SetAttr(z.Ino, SetAttrIn{Size: &size})
			ok(t, "truncate up", err)
			ok(t, "zero", v.Zero(z.Ino, bs, bs, true))
		} else {
			// Grows the file over a block that only Zero makes.
			_, err := v.WriteAt(z.Ino, []byte("head"), 0, false)
			ok(t, "write", err)
			ok(t, "sync", v.Sync())
			ok(t, "zero", v.Zero(z.Ino, 0, 3*bs, false))
		}
		ok(t, "sync", v.Sync())
		v = e.reopen(v)
		other := mkfile(t, v, RootIno, "other", string(bytes.Repeat([]byte("o"), 3*bs)))
		ok(t, "sync", v.Sync())
		got := content(t, v, z.Ino)
		want := int(2 * bs)
		if !keepSize {
			want = 3 * bs
		}
		if got != string(make([]byte, want)) {
			t.Fatalf("keepSize=%v: zeroed file: got %d bytes, not all zeros (%q...)", keepSize, len(got), got[:min(len(got), 16)])
		}
		ok(t, "verify zeroed file", v.VerifyData(z.Ino))
		ok(t, "verify other file", v.VerifyData(other.Ino))
		ok(t, "close", v.Close())
	}
}
