package layers

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSeekDataAndHoles checks SEEK_DATA and SEEK_HOLE over a file whose
// blocks come from everywhere: the base (with a hole of its own), a frozen
// layer, the active layer, and blocks nothing holds past the base's end,
// and over a file whose tail a truncation cut off.
func TestSeekDataAndHoles(t *testing.T) {
	const bs = MinBlockSize
	e := newEnv(t, bs, func(base string) {
		f, err := os.Create(filepath.Join(base, "f"))
		ok(t, "create", err)
		_, err = f.WriteAt([]byte("A"), 0)
		ok(t, "write", err)
		_, err = f.WriteAt([]byte("B"), 8*bs)
		ok(t, "write", err)
		ok(t, "truncate", f.Truncate(10*bs))
		ok(t, "close", f.Close())
		put(t, filepath.Join(base, "g"), strings.Repeat("g", 4*bs))
	})
	v := e.view()
	f := lookup(t, v, RootIno, "f").Ino
	_, err := v.WriteAt(f, []byte("C"), 3*bs, false)
	ok(t, "write", err)
	ok(t, "close", v.Close())
	freeze(t, e.store, "sb")
	v = e.view()
	defer v.Close()
	_, err = v.WriteAt(f, []byte("D"), 5*bs, false)
	ok(t, "write", err)
	size := int64(20 * bs)
	_, err = v.SetAttr(f, SetAttrIn{Size: &size})
	ok(t, "extend", err)
	g := lookup(t, v, RootIno, "g").Ino
	cut, grown := int64(bs), int64(4*bs)
	_, err = v.SetAttr(g, SetAttrIn{Size: &cut})
	ok(t, "cut", err)
	_, err = v.SetAttr(g, SetAttrIn{Size: &grown})
	ok(t, "grow", err)

	checkSeeks(t, v, []seekCase{
		{"data at the base's data", f, 0, true, 0},
		{"data skips the base's hole to the frozen block", f, bs, true, 3 * bs},
		{"data inside the frozen block", f, 3*bs + 5, true, 3*bs + 5},
		{"data skips to the active block", f, 4 * bs, true, 5 * bs},
		{"data skips to the base's last data", f, 6 * bs, true, 8 * bs},
		{"no data after the base's end", f, 9 * bs, true, past},
		{"data past the end", f, size, true, past},
		{"hole after the base's first block", f, 0, false, bs},
		{"hole after the frozen block", f, 3 * bs, false, 4 * bs},
		{"hole after the active block", f, 5 * bs, false, 6 * bs},
		{"hole after the base's last data", f, 8*bs + 10, false, 9 * bs},
		{"hole where nothing is", f, 12 * bs, false, 12 * bs},
		{"hole in the last block", f, size - 1, false, size - 1},
		{"hole past the end", f, size, false, past},
		{"data before the cut", g, 0, true, 0},
		{"no data after the cut", g, bs, true, past},
		{"hole at the cut", g, 0, false, bs},
	})
	d := mkdir(t, v, RootIno, "d")
	_, err = v.Seek(d.Ino, 0, true)
	wantErr(t, "seek in a directory", err, ErrInvalid)
	_, err = v.Seek(1<<50, 0, true)
	wantErr(t, "seek in an unknown inode", err, ErrNotFound)
	_, err = v.Seek(f, -1, true)
	wantErr(t, "seek before the start", err, ErrPastEnd)
}

// TestSeekHugeAndLong: a 1 TiB sparse file with data only near its end is
// answered by jumping, and a run of written blocks longer than seekSteps
// is answered as data to the end, which lseek allows.
func TestSeekHugeAndLong(t *testing.T) {
	const bs = MinBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	defer v.Close()
	huge := mkfile(t, v, RootIno, "huge", "").Ino
	size := int64(1 << 40)
	_, err := v.SetAttr(huge, SetAttrIn{Size: &size})
	ok(t, "extend", err)
	_, err = v.WriteAt(huge, []byte("Z"), size-100, false)
	ok(t, "write", err)
	last := (size - 100) / bs * bs
	long := mkfile(t, v, RootIno, "long", strings.Repeat("x", 10*bs)).Ino
	longSize := int64(20 * bs) // a hole after the run
	_, err = v.SetAttr(long, SetAttrIn{Size: &longSize})
	ok(t, "extend", err)

	saved := seekSteps
	seekSteps = 4
	defer func() { seekSteps = saved }()
	checkSeeks(t, v, []seekCase{
		{"data jumps to the last block", huge, 0, true, last},
		{"hole at the start", huge, 0, false, 0},
		{"hole after the last block", huge, last, false, size},
		{"past seekSteps the rest is data", long, 0, false, longSize},
		{"the hole after the run, looked for from near it", long, 8 * bs, false, 10 * bs},
		{"data in a long run", long, 3 * bs, true, 3 * bs},
	})
}

// past, as a seekCase's want, expects ErrPastEnd (lseek's ENXIO).
const past = -1

// seekCase is one Seek and what it must answer.
type seekCase struct {
	name string
	ino  uint64
	off  int64
	data bool
	want int64
}

func checkSeeks(t *testing.T, v *View, cases []seekCase) {
	t.Helper()
	for _, c := range cases {
		got, err := v.Seek(c.ino, c.off, c.data)
		if c.want == past {
			if !errors.Is(err, ErrPastEnd) {
				t.Errorf("%s: got %d, %v; want ErrPastEnd", c.name, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %d, %v; want %d", c.name, got, err, c.want)
		}
	}
}

// TestSeekWithinABlock: inside a block a layer holds, SEEK_DATA and
// SEEK_HOLE answer page by page, as ext4 does (xfstests' seek_sanity_test
// expects it): pages never written, or sealed as zeros, are holes; pages
// written since the last seal are data, zeros or not.
func TestSeekWithinABlock(t *testing.T) {
	const bs = DefaultBlockSize
	const pg = pageSize
	e := newEnv(t, bs, func(base string) {
		// A base file whose second page is zeros (but not a hole).
		put(t, filepath.Join(base, "b"), strings.Repeat("b", pg)+strings.Repeat("\x00", pg)+strings.Repeat("b", pg))
	})
	v := e.view()
	defer v.Close()
	f, err := v.Mknod(RootIno, "f", 0o100644, 0, root)
	ok(t, "create", err)
	for _, off := range []int64{0, 5 * pg, 6*pg + 10, bs + 2*pg} {
		_, err = v.WriteAt(f.Ino, []byte("x"), off, false)
		ok(t, "write", err)
	}
	size := int64(2 * bs)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Size: &size})
	ok(t, "extend", err)
	b := lookup(t, v, RootIno, "b").Ino
	_, err = v.WriteAt(b, []byte("c"), 2*pg, false) // copies the block up
	ok(t, "write", err)
	zeros := make([]byte, pg)
	_, err = v.WriteAt(f.Ino, zeros, 8*pg, false) // written zeros: data until sealed
	ok(t, "write zeros", err)
	cases := []seekCase{
		{"data at the start", f.Ino, 0, true, 0},
		{"hole after the first page", f.Ino, 0, false, pg},
		{"data at the next written page", f.Ino, pg, true, 5 * pg},
		{"hole after two written pages", f.Ino, 5 * pg, false, 7 * pg},
		{"data inside a written page", f.Ino, 6*pg + 100, true, 6*pg + 100},
		{"written zeros are data before a seal", f.Ino, 7 * pg, true, 8 * pg},
		{"data in the next block", f.Ino, 9 * pg, true, bs + 2*pg},
		{"hole after it", f.Ino, bs + 2*pg, false, bs + 3*pg},
		{"copied-up base pages are data", b, pg / 2, true, pg / 2},
		{"hole in the copied-up base's page of zeros", b, 0, false, pg},
		{"data after it", b, pg, true, 2 * pg},
	}
	checkSeeks(t, v, cases)
	freeze(t, e.store, "sb")
	cases[5] = seekCase{"written zeros are a hole once sealed", f.Ino, 7 * pg, true, bs + 2*pg}
	checkSeeks(t, v, cases)
}

// TestSeekOverHiddenAndZeroBlocks: a base file that vanished is reported
// as gone; a frozen block a truncation hid is no data, however the walk
// meets it; blocks sealed as zeros are holes, and
// past seekSteps of them SEEK_DATA answers where it got to (data, which
// lseek allows).
func TestSeekOverHiddenAndZeroBlocks(t *testing.T) {
	const bs = MinBlockSize
	e := newEnv(t, bs, func(base string) {
		put(t, filepath.Join(base, "k"), strings.Repeat("k", 6*bs))
		put(t, filepath.Join(base, "gone"), "soon gone")
	})
	v := e.view()
	k := lookup(t, v, RootIno, "k").Ino
	gone := lookup(t, v, RootIno, "gone").Ino
	ok(t, "remove from the base", os.Remove(filepath.Join(e.base, "gone")))
	_, err := v.Seek(gone, 0, true)
	wantErr(t, "seek in a base file that vanished", err, ErrNotFound)
	_, err = v.WriteAt(k, []byte("K"), 4*bs, false)
	ok(t, "write", err)
	z := mkfile(t, v, RootIno, "z", strings.Repeat("\x00", 10*bs)+"x").Ino
	ok(t, "close", v.Close())
	freeze(t, e.store, "sb")
	v = e.view()
	defer v.Close()
	cut, grown := int64(bs), int64(6*bs)
	_, err = v.SetAttr(k, SetAttrIn{Size: &cut})
	ok(t, "cut", err)
	_, err = v.SetAttr(k, SetAttrIn{Size: &grown})
	ok(t, "grow", err)
	checkSeeks(t, v, []seekCase{
		{"no data past the cut, the hidden block included", k, bs, true, past},
		{"no data from the hidden block", k, 4 * bs, true, past},
		{"data after blocks sealed as zeros", z, 0, true, 10 * bs},
	})
	saved := seekSteps
	seekSteps = 4
	defer func() { seekSteps = saved }()
	checkSeeks(t, v, []seekCase{
		{"past seekSteps zero blocks SEEK_DATA stops", z, 0, true, 4 * bs},
	})
}
