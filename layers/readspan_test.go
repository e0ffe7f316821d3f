package layers

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
)

// TestReadAcrossBaseAndLayerBlocks: a read spanning base blocks, blocks a
// write copied up, a hole past the base's end and a truncated tail returns
// exactly what a plain file would.
func TestReadAcrossBaseAndLayerBlocks(t *testing.T) {
	const bs = 64 << 10
	data := make([]byte, 6*bs+123)
	rand.New(rand.NewSource(1)).Read(data)
	e := newEnv(t, bs, func(base string) {
		if err := os.WriteFile(filepath.Join(base, "f"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	})
	v := e.view()
	defer v.Close()
	f := lookup(t, v, RootIno, "f")
	model := append([]byte(nil), data...)
	write := func(off int64, b []byte) {
		t.Helper()
		_, err := v.WriteAt(f.Ino, b, off, false)
		ok(t, "write", err)
		if end := off + int64(len(b)); end > int64(len(model)) {
			model = append(model, make([]byte, end-int64(len(model)))...)
		}
		copy(model[off:], b)
	}
	check := func(what string) {
		t.Helper()
		for _, r := range []struct{ off, n int64 }{
			{0, int64(len(model))}, {100, 3 * bs}, {bs - 1, 2}, {2*bs + 7, 4 * bs}, {5 * bs, 2 * bs}, {int64(len(model)) - 10, 100},
		} {
			buf := make([]byte, r.n)
			got, err := v.ReadAt(f.Ino, buf, r.off)
			if err != nil && got == 0 {
				t.Fatalf("%s: read %d+%d: %v", what, r.off, r.n, err)
			}
			want := model[min(r.off, int64(len(model))):min(r.off+r.n, int64(len(model)))]
			if !bytes.Equal(buf[:got], want) {
				t.Fatalf("%s: read %d+%d differs from the model (%d bytes read, %d wanted)", what, r.off, r.n, got, len(want))
			}
		}
	}
	check("untouched")
	write(2*bs+5, []byte("copied up"))
	check("one block copied up")
	write(4*bs, bytes.Repeat([]byte{'z'}, bs))
	check("a whole block written")
	size := int64(3*bs + 10)
	_, err := v.SetAttr(f.Ino, SetAttrIn{Size: &size})
	ok(t, "truncate", err)
	model = model[:size]
	write(5*bs, []byte("past a hole"))
	check("truncated, then written past a hole")
	freeze(t, e.store, e.name)
	check("after a freeze")
}
