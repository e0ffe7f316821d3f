package layers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"reflect"
	"testing"
)

func sampleInodes() []*Inode {
	return []*Inode{
		{Floor: -1},
		{Mode: 0o100644, UID: 1000, GID: 1000, Nlink: 1, Size: 12345, Atime: 1, Mtime: -2, Ctime: 3, Floor: -1},
		{Mode: 0o120777, Nlink: 1, Size: 6, Target: "target", Floor: -1},
		{Mode: 0o40755, Nlink: 2, Size: 4096, Origin: "a/b", HasOrigin: true, Floor: 0},
		{Mode: 0o20600, Rdev: 0x0501, Nlink: 1, Floor: 77, Size: 1 << 44},
		{Mode: 0o100600, Nlink: 3, XattrsSet: true, Xattrs: map[string][]byte{}, Floor: -1},
		{Mode: 0o100600, Nlink: 1, XattrsSet: true, Xattrs: map[string][]byte{"user.b": []byte("2"), "user.a": {}, "trusted.x": {0, 1, 2}}, Floor: -1, Origin: "x", HasOrigin: true},
		{Mode: 0o100644, Nlink: 1, Btime: 1_700_000_000_123_456_789, Mtime: 1, Floor: -1},
		{Mode: 0o40700, Nlink: 2, Btime: -500_000_000, Parent: 1, Name: "d", HasParent: true, XattrsSet: true, Xattrs: map[string][]byte{"user.a": {1}}, Floor: -1},
	}
}

func TestInodeRoundTrip(t *testing.T) {
	for i, n := range sampleInodes() {
		b := encodeInode(n)
		got, err := decodeInode(b)
		if err != nil {
			t.Fatalf("inode %d: decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, n) {
			t.Fatalf("inode %d: got %+v, want %+v", i, got, n)
		}
		// Encoding is deterministic (xattrs sorted).
		if !bytes.Equal(encodeInode(got), b) {
			t.Fatalf("inode %d: re-encoding differs", i)
		}
		c := n.clone()
		if !bytes.Equal(encodeInode(c), b) {
			t.Fatalf("inode %d: clone differs", i)
		}
		if len(c.Xattrs) > 0 {
			for k := range c.Xattrs {
				c.Xattrs[k] = append(c.Xattrs[k], 'z')
			}
			if reflect.DeepEqual(c, n) {
				t.Fatalf("inode %d: clone shares xattr values", i)
			}
		}
	}
}

func TestInodeDecodeErrors(t *testing.T) {
	good := encodeInode(sampleInodes()[6])
	// Every strict prefix is truncated, so corrupt.
	for n := 0; n < len(good); n++ {
		if _, err := decodeInode(good[:n]); err == nil {
			t.Fatalf("prefix of %d bytes: got no error", n)
		}
	}
	u32over := []byte{inodeVersion, 0}
	u32over = binary.AppendUvarint(u32over, 1<<33) // mode
	neg := encodeInode(&Inode{Floor: -1})
	negSize := []byte{inodeVersion}
	negSize = binary.AppendUvarint(negSize, 0)
	for i := 0; i < 5; i++ {
		negSize = binary.AppendUvarint(negSize, 0)
	}
	negSize = binary.AppendVarint(negSize, -5) // size
	for i := 0; i < 4; i++ {
		negSize = binary.AppendVarint(negSize, 0)
	}
	negSize = append(negSize, 0, 0)
	bigCount := []byte{inodeVersion, 2}
	for i := 0; i < 5; i++ {
		bigCount = binary.AppendUvarint(bigCount, 0)
	}
	for i := 0; i < 5; i++ {
		bigCount = binary.AppendVarint(bigCount, 0)
	}
	bigCount = append(bigCount, 0, 0)
	bigCount = binary.AppendUvarint(bigCount, 1000)
	longStr := append([]byte(nil), neg[:len(neg)-2]...)
	longStr = append(longStr, 50, 'a')
	cases := []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"wrong version", []byte{2, 0}},
		{"trailing bytes", append(append([]byte(nil), good...), 0)},
		{"uint32 overflow", u32over},
		{"negative size", negSize},
		{"xattr count past the end", bigCount},
		{"string past the end", longStr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := decodeInode(c.b)
			wantErr(t, "decodeInode", err, ErrCorrupt)
			if got != nil {
				t.Fatalf("got %+v with an error, want nil", got)
			}
		})
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, e := range []entry{{}, {Ino: 1, Type: 0o40000}, {Ino: 1<<62 + 5, Type: 0o100000}, {Ino: ^uint64(0), Type: 0xffffffff}} {
		got, err := decodeEntry(encodeEntry(e))
		if err != nil || got != e {
			t.Fatalf("entry %+v: got %+v, %v", e, got, err)
		}
	}
	for _, b := range [][]byte{nil, {0x80}, {1}, {1, 2, 3}, append([]byte{1}, binary.AppendUvarint(nil, 1<<40)...)} {
		_, err := decodeEntry(b)
		wantErr(t, "decodeEntry", err, ErrCorrupt)
	}
}

func TestBlockRefRoundTrip(t *testing.T) {
	for _, r := range []blockRef{
		{Slot: 0, CRCs: []uint32{0}},
		{Slot: 1 << 40, CRCs: []uint32{1, 2, 3, 0xffffffff}},
		{Slot: 5, CRCs: []uint32{9, 9}, alloc: true},
		{Slot: 7, Pages: 1, CRCs: []uint32{1, 2, 3, 4}},
		{Slot: 8, Pages: 3, CRCs: []uint32{1, 2, 3, 4}, alloc: true},
		{Slot: 6, CRCs: []uint32{1, 2}, Home: "01HOMELAYER"},
		{Slot: 8, Pages: 3, CRCs: []uint32{1, 2, 3, 4}, alloc: true, Home: "01M8EDPHR8GC56JNSYR0GN82YC"},
		{Slot: 5, CRCs: []uint32{1, 2}, Home: "L"},
	} {
		got, err := decodeBlockRef(encodeBlockRef(r))
		if err != nil || !reflect.DeepEqual(got, r) || !got.sealed() {
			t.Fatalf("ref %+v: got %+v, %v", r, got, err)
		}
	}
	if (blockRef{open: true}).sealed() {
		t.Fatalf("an open ref reports sealed")
	}
}

// TestBlockRefFirstLayout: a whole block at a block boundary is stored
// as stores written before short slots hold it (slot in blocks, no flag),
// and such a record reads back with its slot in pages.
func TestBlockRefFirstLayout(t *testing.T) {
	old := binary.AppendUvarint(nil, 3)
	old = binary.AppendUvarint(old, 2)
	old = binary.LittleEndian.AppendUint32(old, 7)
	old = binary.LittleEndian.AppendUint32(old, 8)
	r := blockRef{Slot: 6, CRCs: []uint32{7, 8}}
	if got := encodeBlockRef(r); !bytes.Equal(got, old) {
		t.Fatalf("encode %+v: got %x, want %x", r, got, old)
	}
	got, err := decodeBlockRef(old)
	if err != nil || !reflect.DeepEqual(got, r) || got.off() != 6*pageSize || got.capBytes() != 2*pageSize {
		t.Fatalf("decode %x: got %+v, %v", old, got, err)
	}
	// The first layout's alloc flag, alone in its byte.
	r.alloc = true
	oldAlloc := append(append([]byte(nil), old...), blockRefAlloc)
	if got := encodeBlockRef(r); !bytes.Equal(got, oldAlloc) {
		t.Fatalf("encode %+v: got %x, want %x", r, got, oldAlloc)
	}
	if got, err := decodeBlockRef(oldAlloc); err != nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("decode %x: got %+v, %v", oldAlloc, got, err)
	}
}

func TestBlockRefDamage(t *testing.T) {
	good := encodeBlockRef(blockRef{Slot: 4, CRCs: []uint32{7, 8}}) // no flag byte
	with := func(tail ...byte) []byte { return append(append([]byte(nil), good...), tail...) }
	huge := binary.AppendUvarint(nil, math.MaxUint64/2)
	huge = append(binary.AppendUvarint(huge, 1), 0, 0, 0, 0)
	for _, c := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"truncated varint", []byte{0x80}},
		{"no checksum count", []byte{1}},
		{"no checksums", []byte{1, 0}},
		{"short checksums", good[:len(good)-1]},
		{"flag byte zero", with(0)},
		{"unknown flag", with(16)},
		{"home without its length", with(blockRefHome)},
		{"home of no bytes", with(blockRefHome, 0)},
		{"home past the record", with(blockRefHome, 3, 'a', 'b')},
		{"home too long", append(with(blockRefHome, maxHomeLen+1), bytes.Repeat([]byte{'a'}, maxHomeLen+1)...)},
		{"bytes after home", with(blockRefHome, 1, 'a', 0)},
		{"two flag bytes", with(1, 1)},
		{"short without paged", with(blockRefShort)},
		{"short without its pages", with(blockRefPaged | blockRefShort)},
		{"short of no pages", with(blockRefPaged|blockRefShort, 0)},
		{"short of every page", with(blockRefPaged|blockRefShort, 2)},
		{"trailing bytes", with(blockRefPaged|blockRefShort, 1, 0)},
		{"slot past any file", huge},
		{"slot in blocks overflows", append(binary.AppendUvarint(binary.AppendUvarint(nil, math.MaxUint64/2+1), 2), 0, 0, 0, 0, 0, 0, 0, 0)},
	} {
		if _, err := decodeBlockRef(c.b); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s (%x): got %v, want ErrCorrupt", c.name, c.b, err)
		}
	}
}

func TestKeys(t *testing.T) {
	if k := keyInode("L", 1); !bytes.Equal(k, []byte{'i', '/', 'L', '/', 0, 0, 0, 0, 0, 0, 0, 1}) {
		t.Fatalf("keyInode: got %q", k)
	}
	if k := keyEntry("L", 2, "n"); !bytes.HasPrefix(k, prefixEntries("L", 2)) || !bytes.HasSuffix(k, []byte("/n")) {
		t.Fatalf("keyEntry: got %q", k)
	}
	k := keyBlock("L", 3, 0x0102030405060708)
	if !bytes.HasPrefix(k, prefixBlocks("L", 3)) || beUint64(k[len(k)-8:]) != 0x0102030405060708 {
		t.Fatalf("keyBlock: got %q", k)
	}
	if string(keySandbox("a")) != "s/a" || string(keyLayer("b")) != "l/b" {
		t.Fatalf("record keys: got %q %q", keySandbox("a"), keyLayer("b"))
	}
}

// TestZeroPageCRC: the constant is the CRC-32C of a page of zeros, which
// blocks that are holes carry.
func TestZeroPageCRC(t *testing.T) {
	if got := crc32.Checksum(make([]byte, pageSize), castagnoli()); got != zeroPageCRC {
		t.Fatalf("CRC-32C of a zero page: %#x, constant %#x", got, uint32(zeroPageCRC))
	}
}
