package layers

import (
	"syscall"
	"testing"
)

// orphanDir is a valid directory record that names no parent, as a damaged
// store could hold: no path leads to it.
var orphanDir = encodeInode(&Inode{Mode: syscall.S_IFDIR | 0o755, Nlink: 2, Size: 4096, Floor: -1})

// TestComparePathsOfDamagedParents: Compare with paths fails, naming the
// cause, whenever a path it has to name (of a directory that went away or
// came, of the tree below a new one, of a changed file) runs into a
// damaged record; it never reports a change under a made-up path.
func TestComparePathsOfDamagedParents(t *testing.T) {
	type built struct {
		s      *Store
		l1, l2 string
		p, n   uint64
	}
	cases := []struct {
		name   string
		before func(t *testing.T, v *View, p uint64) // in l1, inside directory p
		after  func(t *testing.T, v *View, p uint64) // in l2
		damage func(t *testing.T, b built)
		want   error
	}{
		{
			name:   "removed dir whose parent names no parent",
			before: func(t *testing.T, v *View, p uint64) { mkdir(t, v, p, "n") },
			after:  func(t *testing.T, v *View, p uint64) { ok(t, "rmdir", v.Rmdir(p, "n")) },
			damage: func(t *testing.T, b built) { corrupt(t, b.s, keyInode(b.l1, b.p), orphanDir) },
			want:   ErrNotFound,
		},
		{
			name:   "new dir whose parent names no parent",
			after:  func(t *testing.T, v *View, p uint64) { mkdir(t, v, p, "n") },
			damage: func(t *testing.T, b built) { corrupt(t, b.s, keyInode(b.l2, b.p), orphanDir) },
			want:   ErrNotFound,
		},
		{
			name:  "new dir listing an inode that does not exist",
			after: func(t *testing.T, v *View, p uint64) { mkdir(t, v, p, "n") },
			damage: func(t *testing.T, b built) {
				corrupt(t, b.s, keyEntry(b.l2, b.n, "ghost"), encodeEntry(entry{Ino: 1<<62 + 555555, Type: syscall.S_IFREG}))
			},
			want: ErrNotFound,
		},
		{
			name:   "changed file whose unchanged parent is damaged",
			before: func(t *testing.T, v *View, p uint64) { mkfile(t, v, p, "n", "old") },
			after: func(t *testing.T, v *View, p uint64) {
				_, err := v.WriteAt(lookup(t, v, p, "n").Ino, []byte("new"), 0, false)
				ok(t, "write", err)
			},
			damage: func(t *testing.T, b built) { corrupt(t, b.s, keyInode(b.l1, b.p), []byte{9}) },
			want:   ErrCorrupt,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			v := e.view()
			p := mkdir(t, v, RootIno, "p")
			if c.before != nil {
				c.before(t, v, p.Ino)
			}
			l1 := freeze(t, e.store, "sb")
			c.after(t, v, p.Ino)
			var n uint64
			if a, err := v.Lookup(p.Ino, "n"); err == nil {
				n = a.Ino
			}
			l2 := freeze(t, e.store, "sb")
			ok(t, "close", v.Close())
			// Undamaged, the comparison works.
			_, err := e.store.Compare("sb", l1, l2, true)
			ok(t, "compare before the damage", err)
			c.damage(t, built{s: e.store, l1: l1, l2: l2, p: p.Ino, n: n})
			_, err = e.store.Compare("sb", l1, l2, true)
			wantErr(t, "compare", err, c.want)
		})
	}
}
