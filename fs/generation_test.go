package fs

import "testing"

// TestGenerations: a file's generation moves only at a repoint that
// touches it; the kernel forgetting the file keeps it where it is until
// the next repoint, when an entry of a file no longer held goes (a lookup
// that read the generation before the forget must find it unchanged: the
// inode it registers would be stale at birth otherwise).
func TestGenerations(t *testing.T) {
	var g generations
	held := map[uint64]bool{}
	holds := func(ino uint64) bool { return held[ino] }
	steps := []struct {
		name string
		do   func()
		want map[uint64]uint64 // generation by inode number
		kept int               // entries
	}{
		{"fresh", func() {}, map[uint64]uint64{7: 0, 8: 0}, 0},
		{"a repoint touches 7 and 8", func() { held[7], held[8] = true, true; g.repoint(holds, []uint64{7, 8}) }, map[uint64]uint64{7: 1, 8: 1, 9: 0}, 2},
		{"the kernel forgets 7", func() { held[7] = false; g.forget(7) }, map[uint64]uint64{7: 1, 8: 1}, 2},
		{"the kernel forgets 9, which has no entry", func() { g.forget(9) }, map[uint64]uint64{9: 0}, 2},
		{"a repoint touches 8: 7 goes", func() { g.repoint(holds, []uint64{8}) }, map[uint64]uint64{7: 0, 8: 2}, 1},
		{"8 forgotten, then held again before the next repoint", func() { g.forget(8); g.repoint(holds, nil) }, map[uint64]uint64{8: 2}, 1},
		{"a repoint that cannot tell what it touched", func() { g.touchAll() }, map[uint64]uint64{7: 3, 8: 3, 9: 3}, 0},
		{"then one that touches 9", func() { held[9] = true; g.repoint(holds, []uint64{9}) }, map[uint64]uint64{7: 3, 9: 4}, 1},
	}
	for _, st := range steps {
		st.do()
		for ino, want := range st.want {
			if got := g.of(ino); got != want {
				t.Fatalf("%s: generation of %d is %d, want %d", st.name, ino, got, want)
			}
		}
		if len(g.byNo) != st.kept {
			t.Fatalf("%s: %d entries kept, want %d", st.name, len(g.byNo), st.kept)
		}
	}
}
