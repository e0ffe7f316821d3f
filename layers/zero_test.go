package layers

import (
	"bytes"
	"math/rand"
	"testing"
)

// TestZeroRanges punches holes and zeroes ranges in a file that spans the
// base, a frozen layer and the active layer, against a byte-slice model,
// before and after a reopen.
func TestZeroRanges(t *testing.T) {
	const bs = MinBlockSize
	rng := rand.New(rand.NewSource(7))
	baseData := make([]byte, 10*bs+123)
	rng.Read(baseData)
	e := newEnv(t, bs, func(base string) { put(t, base+"/f", string(baseData)) })
	v := e.view()
	model := append([]byte(nil), baseData...)
	f := lookup(t, v, RootIno, "f")
	write := func(off int64, n int) {
		p := make([]byte, n)
		rng.Read(p)
		_, err := v.WriteAt(f.Ino, p, off, false)
		ok(t, "write", err)
		if end := int(off) + n; end > len(model) {
			model = append(model, make([]byte, end-len(model))...)
		}
		copy(model[off:], p)
	}
	check := func(what string) {
		t.Helper()
		a, err := v.GetAttr(f.Ino)
		ok(t, what, err)
		got := make([]byte, a.Size)
		if a.Size > 0 {
			if _, err := v.ReadAt(f.Ino, got, 0); err != nil {
				t.Fatalf("%s: read: %v", what, err)
			}
		}
		if !bytes.Equal(got, model) {
			t.Fatalf("%s: content differs from the model (size %d, want %d)", what, len(got), len(model))
		}
	}
	write(3*bs+10, 2*bs)
	_, _, err := e.store.Freeze("sb", noFreezeFn)
	ok(t, "freeze", err)
	write(7*bs, 100)
	cases := []struct {
		off, n int64
		keep   bool
	}{
		{2*bs + 5, 3 * bs, true}, // partial, full blocks, partial; frozen data under it
		{0, bs, true},            // one whole base block
		{9 * bs, 5 * bs, true},   // past the end: only up to the size
		{6*bs + 1, 10, false},    // a few bytes inside
		{10 * bs, 4 * bs, false}, // grows the file
	}
	for _, c := range cases {
		ok(t, "zero", v.Zero(f.Ino, c.off, c.n, c.keep))
		end := c.off + c.n
		if !c.keep && end > int64(len(model)) {
			model = append(model, make([]byte, end-int64(len(model)))...)
		}
		for i := c.off; i < end && i < int64(len(model)); i++ {
			model[i] = 0
		}
		check("after zero")
	}
	v = e.reopen(v)
	f = lookup(t, v, RootIno, "f")
	check("after reopen")
	wantErr(t, "negative", v.Zero(f.Ino, -1, 1, true), ErrInvalid)
	d := mkdir(t, v, RootIno, "d")
	wantErr(t, "directory", v.Zero(d.Ino, 0, 1, true), ErrInvalid)
	v.Close()
}
