package layers

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestWriteAcrossSlots: a write that spans several blocks goes to the data
// file in runs of slots that follow each other there, split wherever
// they do not (blocks given slots earlier, out of order, or moved by a
// seal). What reads back, also after a restart, is what was written.
func TestWriteAcrossSlots(t *testing.T) {
	const bs = 16 << 10
	type w struct {
		off  int64
		n    int
		seal bool // seal (Sync) after this write
	}
	for _, tc := range []struct {
		name   string
		writes []w
	}{
		{"new file, slots in order", []w{{0, 5*bs + 100, false}}},
		{"unaligned start and end", []w{{bs/2 + 3, 4 * bs, false}}},
		{"slots given out of order first", []w{{3 * bs, 10, false}, {1*bs + 7, 10, false}, {0, 5 * bs, false}}},
		{"some slots sealed", []w{{0, 2 * bs, false}, {2 * bs, 2 * bs, true}, {bs / 2, 4 * bs, false}}},
		{"all sealed, then rewritten", []w{{0, 6 * bs, true}, {0, 6 * bs, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, bs, nil)
			v := e.view()
			f := mkfile(t, v, RootIno, "f", "")
			var model []byte
			rng := rand.New(rand.NewSource(int64(len(tc.writes))))
			for _, wr := range tc.writes {
				b := make([]byte, wr.n)
				rng.Read(b)
				n, err := v.WriteAt(f.Ino, b, wr.off, false)
				ok(t, "write", err)
				if n != wr.n {
					t.Fatalf("wrote %d bytes, want %d", n, wr.n)
				}
				if end := wr.off + int64(wr.n); end > int64(len(model)) {
					model = append(model, make([]byte, end-int64(len(model)))...)
				}
				copy(model[wr.off:], b)
				if wr.seal {
					ok(t, "sync", v.Sync())
				}
			}
			check := func(v *View, what string) {
				t.Helper()
				got := make([]byte, len(model)+10)
				n, _ := v.ReadAt(f.Ino, got, 0)
				if !bytes.Equal(got[:n], model) {
					t.Fatalf("%s: read back %d bytes that differ from the %d written", what, n, len(model))
				}
			}
			check(v, "live")
			ok(t, "sync", v.Sync())
			v = e.reopen(v)
			defer v.Close()
			check(v, "after a restart")
		})
	}
}
