package layers

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// TestWriteSumsItsPages: a write works out the checksums of the pages it
// fills (whole pages, and parts of pages known to hold zeros), so the
// seal reads back only the pages it could not know; what the seal stores
// is the checksum of what the data file holds, and what reads back,
// after a restart too, is what was written.
func TestWriteSumsItsPages(t *testing.T) {
	const bs = 16 << 10 // 4 pages a block
	type w struct {
		off   int64
		n     int
		zeros bool // write zeros, not random bytes
		// overlap: another write is in flight during this one
		overlap bool
		trunc   int64
	}
	trunc := func(size int64) w { return w{trunc: size, n: -1} }
	for _, tc := range []struct {
		name     string
		base     int // bytes of base file "f"; 0: a new file
		writes   []w
		wantRead []int // the file's pages the seal must read back
	}{
		{name: "whole pages of a new file", writes: []w{{off: 0, n: 2 * pageSize}}},
		{name: "a new file's last page, in part", writes: []w{{off: 0, n: pageSize + 1000}}},
		{name: "the middle of a fresh page", writes: []w{{off: 100, n: 100}}},
		{name: "a second write into a page", writes: []w{{off: 0, n: 100}, {off: 100, n: 100}}, wantRead: []int{0}},
		{name: "a base file's page, in part", base: 10000, writes: []w{{off: 10, n: 10}}, wantRead: []int{0}},
		{name: "a base file's page, whole", base: 10000, writes: []w{{off: pageSize, n: pageSize}}},
		{name: "past a base file's end", base: 5000, writes: []w{{off: 9000, n: 100}}},
		{name: "zeros stay written until the seal", writes: []w{{off: 0, n: pageSize, zeros: true}}, wantRead: []int{0}},
		{name: "another write in flight", writes: []w{{off: 0, n: pageSize, overlap: true}}, wantRead: []int{0}},
		{name: "a page written beside another write, then in part", writes: []w{{off: 0, n: 100, overlap: true}, {off: 200, n: 100}}, wantRead: []int{0}},
		{name: "a slot that grew", writes: []w{{off: 0, n: 100}, {off: 5000, n: 100}}},
		{name: "a slot that grew, then its first page again", writes: []w{{off: 0, n: 100}, {off: 5000, n: 100}, {off: 100, n: 100}}, wantRead: []int{0}},
		{name: "across blocks", writes: []w{{off: bs - 10, n: bs + 20}}},
		{name: "after a truncation", writes: []w{{off: 0, n: 2 * pageSize}, trunc(100), {off: pageSize, n: 10}}, wantRead: []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewSource(int64(len(tc.name))))
			var model []byte
			var fill func(string)
			if tc.base > 0 {
				model = make([]byte, tc.base)
				rng.Read(model)
				fill = func(base string) {
					if err := os.WriteFile(filepath.Join(base, "f"), model, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			e := newEnv(t, bs, fill)
			v := e.view()
			var ino uint64
			if tc.base > 0 {
				ino = lookup(t, v, RootIno, "f").Ino
			} else {
				ino = mkfile(t, v, RootIno, "f", "").Ino
			}
			for _, wr := range tc.writes {
				if wr.n < 0 {
					size := wr.trunc
					_, err := v.SetAttr(ino, SetAttrIn{Size: &size})
					ok(t, "truncate", err)
					model = model[:size]
					continue
				}
				b := make([]byte, wr.n)
				if !wr.zeros {
					rng.Read(b)
				}
				if wr.overlap {
					v.mu.Lock()
					v.writing++
					v.mu.Unlock()
				}
				_, err := v.WriteAt(ino, b, wr.off, false)
				ok(t, "write", err)
				if wr.overlap {
					v.mu.Lock()
					v.wroteLocked()
					v.mu.Unlock()
				}
				if end := wr.off + int64(wr.n); end > int64(len(model)) {
					model = append(model, make([]byte, end-int64(len(model)))...)
				}
				copy(model[wr.off:], b)
			}
			if got := pagesToRead(v, ino); !slices.Equal(got, tc.wantRead) {
				t.Errorf("pages left for the seal to read: %v, want %v", got, tc.wantRead)
			}
			ok(t, "sync", v.Sync())
			if err := sumsMatchData(v, ino); err != nil {
				t.Error(err)
			}
			check := func(v *View, what string) {
				t.Helper()
				got := make([]byte, len(model)+10)
				n, err := v.ReadAt(ino, got, 0)
				if err != nil && n < len(model) {
					t.Fatalf("%s: read: %v", what, err)
				}
				if !bytes.Equal(got[:n], model) {
					t.Fatalf("%s: read back %d bytes that differ from the %d written", what, n, len(model))
				}
			}
			check(v, "live")
			v = e.reopen(v)
			defer v.Close()
			check(v, "after a restart")
		})
	}
}

// TestOverlappingWritesSumRight: writers that overlap in the same pages,
// each of them filling whole pages, leave checksums that match what the
// data file holds once sealed, whichever write landed last.
func TestOverlappingWritesSumRight(t *testing.T) {
	const bs = 16 << 10
	e := newEnv(t, bs, nil)
	v := e.view()
	defer v.Close()
	ino := mkfile(t, v, RootIno, "f", "").Ino
	for round := 0; round < 20; round++ {
		var wg sync.WaitGroup
		for g := 0; g < 4; g++ {
			wg.Add(1)
			go func(seed int64) {
				defer wg.Done()
				rng := rand.New(rand.NewSource(seed))
				b := make([]byte, 2*pageSize)
				for i := 0; i < 50; i++ {
					rng.Read(b)
					off := int64(rng.Intn(8)) * pageSize
					if _, err := v.WriteAt(ino, b, off, false); err != nil {
						t.Error(err)
						return
					}
				}
			}(int64(round*10 + g))
		}
		wg.Wait()
		ok(t, "sync", v.Sync())
		if err := sumsMatchData(v, ino); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		buf := make([]byte, 10*pageSize)
		if _, err := v.ReadAt(ino, buf, 0); err != nil {
			t.Fatalf("round %d: read: %v", round, err)
		}
	}
}

// pagesToRead lists the pages of file ino whose checksums a seal would
// read back from the data file.
func pagesToRead(v *View, ino uint64) []int {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []int
	st := v.inodes[ino]
	per := int(v.bs / pageSize)
	for blk, ref := range st.active {
		for p, d := range ref.dirty {
			if d && p < ref.capPages() {
				out = append(out, int(blk)*per+p)
			}
		}
	}
	slices.Sort(out)
	return out
}

// sumsMatchData checks the stored checksums of file ino's active blocks
// against what its slots hold in the data file.
func sumsMatchData(v *View, ino uint64) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	st := v.inodes[ino]
	f := v.files[v.activeLayer()]
	for blk, ref := range st.active {
		if !ref.sealed() {
			return fmt.Errorf("block %d not sealed", blk)
		}
		buf := make([]byte, v.bs)
		if err := readFull(f, buf[:ref.capBytes()], ref.off()); err != nil {
			return err
		}
		if want := pageCRCs(buf); !slices.Equal(ref.CRCs, want) {
			return fmt.Errorf("block %d: checksums %x, the data file's pages %x", blk, ref.CRCs, want)
		}
	}
	return nil
}

// TestDeltaOpensNoFrozenData: working out what the active layer changed
// reads the checksums of the blocks the layers below hold from the block
// map, without opening those layers' data files, and tells the same
// fingerprints as a twin that reads the blocks.
func TestDeltaOpensNoFrozenData(t *testing.T) {
	const bs = 16 << 10
	e := newEnv(t, bs, nil)
	v := e.view()
	defer v.Close()
	a := mkfile(t, v, RootIno, "a", strings.Repeat("first ", 5000))
	_, _, err := e.store.Freeze(e.name, func(*Txn, string, string) error { return nil })
	ok(t, "freeze", err)
	// The whole file is written anew: nothing below is read to write it.
	zero := int64(0)
	_, err = v.SetAttr(a.Ino, SetAttrIn{Size: &zero})
	ok(t, "truncate", err)
	_, err = v.WriteAt(a.Ino, []byte("second"), 0, false)
	ok(t, "write", err)
	ok(t, "sync", v.Sync())
	v.mu.Lock()
	d, ok1, err := v.activeDeltaLocked()
	files := len(v.files)
	v.mu.Unlock()
	if err != nil || !ok1 {
		t.Fatalf("delta: ok %v, %v", ok1, err)
	}
	if files != 1 {
		t.Errorf("%d data files open after the delta, want the active layer's alone", files)
	}
	var old *InodeState
	for _, c := range d.Inodes {
		if c.Ino == a.Ino {
			old = c.Old
		}
	}
	if old == nil {
		t.Fatalf("the delta does not hold file a's old state: %+v", d.Inodes)
	}
	// The twin: the same content, fingerprinted from its blocks.
	e2 := newEnv(t, bs, nil)
	v2 := e2.view()
	defer v2.Close()
	a2 := mkfile(t, v2, RootIno, "a", strings.Repeat("first ", 5000))
	ok(t, "sync", v2.Sync())
	v2.mu.Lock()
	st, err := v2.getInode(a2.Ino)
	if err == nil {
		var fp string
		fp, err = v2.fingerprintLocked(st, true)
		if err == nil && fp != old.Fingerprint {
			err = fmt.Errorf("fingerprint %s, the twin's %s", old.Fingerprint, fp)
		}
	}
	v2.mu.Unlock()
	ok(t, "old state's fingerprint", err)
}
