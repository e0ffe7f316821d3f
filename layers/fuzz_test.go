package layers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzCodec feeds arbitrary bytes to the record decoders, which must never
// panic, and checks that whatever decodes encodes back to the same value.
func FuzzCodec(f *testing.F) {
	for _, n := range sampleInodes() {
		f.Add(encodeInode(n))
	}
	f.Add(encodeEntry(entry{Ino: 42, Type: 0o100000}))
	f.Add(encodeBlockRef(blockRef{Slot: 9, CRCs: []uint32{1, 2}}))
	f.Add(encodeBlockRef(blockRef{Slot: 9, CRCs: []uint32{1, 2}, alloc: true}))
	f.Add(encodeBlockRef(blockRef{Slot: 10, CRCs: []uint32{1, 2}}))
	f.Add(encodeBlockRef(blockRef{Slot: 7, Pages: 3, CRCs: []uint32{1, 2, 3, 4}, alloc: true}))
	f.Add(encodeBlockRef(blockRef{Slot: 7, Pages: 3, CRCs: []uint32{1, 2, 3, 4}, Home: "01M8EDPHR8GC56JNSYR0GN82YC"}))
	f.Add([]byte{})
	f.Add([]byte{inodeVersion, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if n, err := decodeInode(b); err == nil {
			if n.Size < 0 {
				t.Fatalf("decoded a negative size")
			}
			got, err := decodeInode(encodeInode(n))
			if err != nil {
				t.Fatalf("re-decode: %v", err)
			}
			if !reflect.DeepEqual(got, n) {
				t.Fatalf("round trip: got %+v, want %+v", got, n)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeInode error %v is not ErrCorrupt", err)
		}
		if e, err := decodeEntry(b); err == nil {
			if got, err := decodeEntry(encodeEntry(e)); err != nil || got != e {
				t.Fatalf("entry round trip: got %+v, %v; want %+v", got, err, e)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeEntry error %v is not ErrCorrupt", err)
		}
		if r, err := decodeBlockRef(b); err == nil {
			if !r.sealed() {
				t.Fatalf("decoded a ref without checksums")
			}
			if got, err := decodeBlockRef(encodeBlockRef(r)); err != nil || !reflect.DeepEqual(got, r) {
				t.Fatalf("block ref round trip: got %+v, %v; want %+v", got, err, r)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("decodeBlockRef error %v is not ErrCorrupt", err)
		}
	})
}

// FuzzWriteTruncate decodes its input into writes at offsets, truncates,
// syncs, freezes and close/reopen cycles of one file in a view over a base
// file, applies the same to a byte slice, and requires the file to read
// back exactly as the slice after every step. It runs each input with
// blocks of one page and of four, where blocks take short slots that
// writes move.
//
// Input: base file length (2 bytes) then records of 4 bytes: kind, then
// an argument of 3 bytes (offset or size, in units of 61 bytes so that
// small inputs reach many blocks of 4 KiB).
func FuzzWriteTruncate(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 1})
	f.Add([]byte{0x40, 0, 0, 0, 0, 5, 1, 0, 0, 3, 0, 0, 1, 0, 0, 200, 2, 0, 0, 0})
	f.Add([]byte{0x10, 0, 0, 0, 1, 0, 4, 0, 0, 0, 1, 0, 0, 2, 0, 0, 1, 0x10, 3, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{0x00, 0x80, 1, 0, 0, 10, 4, 0, 0, 0, 1, 0, 0, 1, 3, 0, 0, 0, 0, 0, 0x02, 0, 5, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0, 0, 0x10, 0, 4, 0, 0, 0, 1, 0, 0, 67, 4, 0, 0, 0, 1, 0, 0, 134, 3, 0, 0, 0, 0, 0, 0, 201})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 2 || len(in) > 2+4*64 {
			return
		}
		for _, bs := range []int{MinBlockSize, 4 * MinBlockSize} {
			fuzzWriteTruncate(t, in, bs)
		}
	})
}

func fuzzWriteTruncate(t *testing.T, in []byte, bs int) {
	t.Helper()
	baseLen := int(binary.BigEndian.Uint16(in[:2]))
	baseData := bytes.Repeat([]byte("base-data-"), baseLen/10+1)[:baseLen]
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "f"), baseData, 0o644); err != nil {
		t.Fatal(err)
	}
	storeDir := filepath.Join(dir, "store")
	s, err := Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }()
	if _, err := s.CreateSandbox("fz", base, bs); err != nil {
		t.Fatal(err)
	}
	v, err := s.OpenView("fz", false)
	if err != nil {
		t.Fatal(err)
	}
	a, err := v.Lookup(RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	ino := a.Ino
	m := model(append([]byte(nil), baseData...))
	check := func(step int) {
		t.Helper()
		a, err := v.GetAttr(ino)
		if err != nil {
			t.Fatalf("step %d: getattr: %v", step, err)
		}
		if a.Size != int64(len(m)) {
			t.Fatalf("step %d: size got %d, want %d", step, a.Size, len(m))
		}
		got := make([]byte, len(m)+7)
		n, err := v.ReadAt(ino, got, 0)
		if err != nil && !(errors.Is(err, io.EOF) && len(m) == 0) {
			t.Fatalf("step %d: read: %v", step, err)
		}
		if !bytes.Equal(got[:n], m) {
			t.Fatalf("step %d: content differs from the model (read %d bytes, want %d)", step, n, len(m))
		}
	}
	recs := in[2:]
	for i := 0; i+4 <= len(recs); i += 4 {
		kind := recs[i] % 6
		arg := int64(recs[i+1])<<16 | int64(recs[i+2])<<8 | int64(recs[i+3])
		off := (arg % 4096) * 61
		switch kind {
		case 0, 1: // write; the length comes from the high byte
			n := 1 + int(arg>>12)%9000
			p := bytes.Repeat([]byte{byte(i/4 + 1)}, n)
			if _, err := v.WriteAt(ino, p, off, false); err != nil {
				t.Fatalf("step %d: write %d at %d: %v", i/4, n, off, err)
			}
			m.write(p, off)
		case 2: // truncate
			if _, err := v.SetAttr(ino, SetAttrIn{Size: &off}); err != nil {
				t.Fatalf("step %d: truncate %d: %v", i/4, off, err)
			}
			m.truncate(off)
		case 3: // sync, or close and reopen
			if arg%2 == 0 {
				if err := v.Sync(); err != nil {
					t.Fatalf("step %d: sync: %v", i/4, err)
				}
				break
			}
			if err := v.Close(); err != nil {
				t.Fatalf("step %d: close: %v", i/4, err)
			}
			if err := s.Close(); err != nil {
				t.Fatalf("step %d: close store: %v", i/4, err)
			}
			if s, err = Open(storeDir); err != nil {
				t.Fatal(err)
			}
			if v, err = s.OpenView("fz", false); err != nil {
				t.Fatal(err)
			}
			// A base file's number is known once its name was looked up,
			// as the kernel does after a remount.
			if _, err := v.Lookup(RootIno, "f"); err != nil {
				t.Fatal(err)
			}
		case 4: // freeze: what was written moves into a frozen layer
			if _, _, err := s.Freeze("fz", func(*Txn, string, string) error { return nil }); err != nil {
				t.Fatalf("step %d: freeze: %v", i/4, err)
			}
		case 5: // append
			p := []byte{byte(arg), byte(arg >> 8)}
			if _, err := v.WriteAt(ino, p, 0, true); err != nil {
				t.Fatalf("step %d: append: %v", i/4, err)
			}
			m.write(p, int64(len(m)))
		}
		check(i / 4)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if v, err = s.OpenView("fz", false); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Lookup(RootIno, "f"); err != nil {
		t.Fatal(err)
	}
	check(-1)
	v.Close()
	got, err := os.ReadFile(filepath.Join(base, "f"))
	if err != nil || !bytes.Equal(got, baseData) {
		t.Fatalf("base file changed: %v", err)
	}
	rep, err := s.Fsck()
	if err != nil || len(rep.Problems) != 0 {
		t.Fatalf("block size %d: fsck: %+v %v", bs, rep.Problems, err)
	}
}
