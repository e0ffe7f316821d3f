package fs

import "testing"

// TestGenerations walks the rules of generations: a file moves only at a
// repoint that touches it, and the kernel forgetting it keeps it where it
// is until the next repoint, which drops the entry if the file is no
// longer held (a lookup that read the generation before the forget must
// find it unchanged, or the inode it registers is stale at birth); a
// directory moves when the kernel made it dead and goes back to 0 once
// the kernel forgets it; a repoint that cannot tell what it touched moves
// every file and no directory.
func TestGenerations(t *testing.T) {
	var g generations
	held := map[uint64]bool{}
	holds := func(ino uint64) bool { return held[ino] }
	type gens map[uint64]uint64
	steps := []struct {
		name        string
		do          func()
		files, dirs gens
		kept        int // file entries
	}{
		{"fresh", func() {}, gens{7: 0, 8: 0}, gens{20: 0}, 0},
		{"a repoint touches files 7 and 8", func() { held[7], held[8] = true, true; g.repoint(holds, []uint64{7, 8}) }, gens{7: 1, 8: 1, 9: 0}, nil, 2},
		{"the kernel forgets 7", func() { held[7] = false; g.forget(7) }, gens{7: 1, 8: 1}, nil, 2},
		{"the kernel forgets 9, which has no entry", func() { g.forget(9) }, gens{9: 0}, nil, 2},
		{"a repoint touches 8: 7 goes", func() { g.repoint(holds, []uint64{8}) }, gens{7: 0, 8: 2}, nil, 1},
		{"8 forgotten, then held again before a repoint that touches nothing", func() { g.forget(8); g.repoint(holds, nil) }, gens{8: 2}, nil, 1},
		{"directory 20 dies", func() { g.bury(20) }, gens{8: 2}, gens{20: 3, 21: 0}, 1},
		{"a repoint that cannot tell what it touched", func() { g.touchAll() }, gens{7: 4, 8: 4, 9: 4}, gens{20: 3, 21: 0}, 0},
		{"then one that touches 9", func() { held[9] = true; g.repoint(holds, []uint64{9}) }, gens{7: 4, 9: 5}, gens{20: 3}, 1},
		{"the kernel forgets directory 20", func() { g.forget(20) }, gens{9: 5}, gens{20: 0}, 1},
	}
	for _, st := range steps {
		st.do()
		for ino, want := range st.files {
			if got := g.file(ino); got != want {
				t.Fatalf("%s: generation of file %d is %d, want %d", st.name, ino, got, want)
			}
		}
		for ino, want := range st.dirs {
			if got := g.dir(ino); got != want {
				t.Fatalf("%s: generation of directory %d is %d, want %d", st.name, ino, got, want)
			}
		}
		if len(g.files) != st.kept {
			t.Fatalf("%s: %d file entries kept, want %d", st.name, len(g.files), st.kept)
		}
	}
}
