package layers

import (
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"math/bits"
	"os"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// MaxFileSize is the largest size a file may reach (as ext4's 16 TiB).
const MaxFileSize = 16 << 40

// srcKind says where a block's bytes come from.
type srcKind int

const (
	srcZero srcKind = iota // a hole: reads as zeros
	srcSlot                // a slot of a layer's data file
	srcBase                // the base file, at the block's own offset
)

// source is a resolved block: the file and offset of its first byte, and
// the page checksums to verify (nil when the block is not sealed yet or
// comes from the base).
type source struct {
	kind srcKind
	f    *os.File
	off  int64
	// size is, for a slot, how many of the block's bytes it holds: the
	// rest of the block reads as zeros.
	size int64
	crcs []uint32
	blk  uint64
	bh   *baseHandle // for base blocks: the handle that keeps f open
}

func (v *View) layerFile(layer string) (*os.File, error) {
	if f, ok := v.files[layer]; ok {
		return f, nil
	}
	f, err := os.Open(v.s.dataPath(layer))
	if err != nil {
		return nil, fmt.Errorf("layer %s data: %w", layer, mapOSErr(err))
	}
	v.files[layer] = f
	return f, nil
}

// layerPresent reports whether frozen layer's data file is there, as
// layerFile would find it, without opening it.
func (v *View) layerPresent(layer string) error {
	if _, ok := v.files[layer]; ok || v.present[layer] {
		return nil
	}
	if _, err := os.Stat(v.s.dataPath(layer)); err != nil {
		return fmt.Errorf("layer %s data: %w", layer, mapOSErr(err))
	}
	if v.present == nil {
		v.present = map[string]bool{}
	}
	v.present[layer] = true
	return nil
}

// maxBaseFiles bounds the base files a view keeps open for reading; the
// least recently used is closed first, so reading a large tree through a
// mount does not run out of descriptors.
const maxBaseFiles = 256

// baseHandle is an open base file, shared by the reads that resolved it:
// an evicted handle is closed when its last read is done.
type baseHandle struct {
	f       *os.File
	refs    int // reads using f now; protected by View.mu
	evicted bool
}

func (v *View) baseFileLocked(st *inodeState) (*baseHandle, error) {
	if st.baseFile != nil {
		v.baseLRU.MoveToFront(st.baseElem)
		return st.baseFile, nil
	}
	fd, err := v.base.open(st.rec.Origin, syscall.O_RDONLY)
	if errors.Is(err, syscall.ENOENT) {
		// The base changed under the sandbox (it must not).
		return nil, fmt.Errorf("base file %s is gone: %w", st.rec.Origin, ErrNotFound)
	}
	if err != nil {
		return nil, mapOSErr(err)
	}
	// Another file now at the path, or this one changed since its record
	// was read from it: reading it would mix two contents into one file.
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		unix.Close(fd)
		return nil, mapOSErr(err)
	}
	changed := fst.Ino != st.ino
	if st.bknown {
		changed = changed || fst.Size != st.bsize || tsNano(fst.Mtim) != st.bmtime
	}
	if changed {
		unix.Close(fd)
		return nil, fmt.Errorf("base file %s changed under the sandbox: %w", st.rec.Origin, ErrStale)
	}
	st.baseFile = &baseHandle{f: os.NewFile(uintptr(fd), st.rec.Origin)}
	st.baseElem = v.baseLRU.PushFront(st)
	for v.baseLRU.Len() > maxBaseFiles {
		v.closeBaseLocked(v.baseLRU.Back().Value.(*inodeState))
	}
	return st.baseFile, nil
}

// closeBaseLocked lets go of st's base file; it is closed at once, or when
// the reads that use it are done.
func (v *View) closeBaseLocked(st *inodeState) {
	bh := st.baseFile
	if bh == nil {
		return
	}
	v.baseLRU.Remove(st.baseElem)
	st.baseFile, st.baseElem = nil, nil
	bh.evicted = true
	if bh.refs == 0 {
		bh.f.Close()
	}
}

func (v *View) releaseBaseLocked(bh *baseHandle) {
	bh.refs--
	if bh.evicted && bh.refs == 0 {
		bh.f.Close()
	}
}

// sourceLocked resolves block blk of st: active layer, then (below the
// active layer's truncation floor) the frozen layers, then the base.
func (v *View) sourceLocked(st *inodeState, blk uint64) (source, error) {
	src, err := v.sourceBlock(st, blk)
	if err != nil || src.kind != srcBase {
		return src, err
	}
	src.bh, err = v.baseFileLocked(st)
	if err != nil {
		return src, err
	}
	src.f = src.bh.f
	return src, nil
}

// sourceBlock is sourceLocked without opening the base file.
func (v *View) sourceBlock(st *inodeState, blk uint64) (source, error) {
	src, layer := v.blockSource(st, blk)
	if layer != "" {
		f, err := v.layerFile(layer)
		if err != nil {
			return source{}, err
		}
		src.f = f
	}
	return src, nil
}

// blockSource is sourceBlock without opening the data file of the frozen
// layer that holds the block (layer names it; src.f is nil then): its
// checksums are known without it, and a checkpoint after a rollback would
// otherwise open again every layer its changed files were last written in.
func (v *View) blockSource(st *inodeState, blk uint64) (src source, layer string) {
	if ref, ok := st.active[blk]; ok {
		if ref.Home != "" {
			// A snapshot's top layer, whose block dedup keeps in a layer
			// below (the active layer of a sandbox has no Home).
			return source{kind: srcSlot, off: ref.off(), size: ref.capBytes(), crcs: ref.CRCs, blk: blk}, ref.Home
		}
		src := source{kind: srcSlot, f: v.files[v.activeLayer()], off: ref.off(), size: ref.capBytes(), blk: blk}
		if ref.sealed() {
			src.crcs = ref.CRCs
		}
		return src, ""
	}
	start := int64(blk) * v.bs
	if st.inActive && st.rec.Floor >= 0 && start >= st.rec.Floor {
		return source{kind: srcZero, blk: blk}, ""
	}
	if fr, ok := st.frozen[blk]; ok {
		return source{kind: srcSlot, off: fr.ref.off(), size: fr.ref.capBytes(), crcs: fr.ref.CRCs, blk: blk}, fr.layer
	}
	if st.rec.HasOrigin && start < st.baseLimit {
		return source{kind: srcBase, off: start, blk: blk}, ""
	}
	return source{kind: srcZero, blk: blk}, ""
}

// read copies len(dst) bytes from offset inBlk of the block into dst,
// verifying the checksums of every page it touches.
func (v *View) read(src source, dst []byte, inBlk int64) error {
	switch src.kind {
	case srcZero:
		clear(dst)
		return nil
	case srcBase:
		return readFull(src.f, dst, src.off+inBlk)
	}
	if src.crcs == nil {
		return src.readSlot(dst, inBlk)
	}
	p0 := inBlk / pageSize
	p1 := (inBlk + int64(len(dst)) - 1) / pageSize
	buf := make([]byte, (p1-p0+1)*pageSize)
	if err := src.readSlot(buf, p0*pageSize); err != nil {
		return err
	}
	for p := p0; p <= p1; p++ {
		page := buf[(p-p0)*pageSize : (p-p0+1)*pageSize]
		if crc32.Checksum(page, castagnoli()) != src.crcs[p] {
			return fmt.Errorf("block %d page %d: checksum mismatch: %w", src.blk, p, ErrCorrupt)
		}
	}
	copy(dst, buf[inBlk-p0*pageSize:])
	return nil
}

// readSlot reads [inBlk, inBlk+len(dst)) of a slot's block: what the
// slot holds from the data file, zeros past it.
func (src source) readSlot(dst []byte, inBlk int64) error {
	n := min(int64(len(dst)), max(0, src.size-inBlk))
	clear(dst[n:])
	if n == 0 {
		return nil
	}
	return readFull(src.f, dst[:n], src.off+inBlk)
}

// ReadAt reads from file ino at off. It returns 0, io.EOF at or past the
// end of the file. A block that fails its checksum is an ErrCorrupt error,
// never wrong data.
func (v *View) ReadAt(ino uint64, p []byte, off int64) (int, error) {
	// Shared: no slot becomes a hole (punch) while it is read.
	v.ioMu.RLock()
	defer v.ioMu.RUnlock()
	return v.readAt(ino, p, off)
}

func (v *View) readAt(ino uint64, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	v.mu.Lock()
	st, err := v.getInode(ino)
	if err != nil {
		v.mu.Unlock()
		return 0, err
	}
	if st.rec.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		v.mu.Unlock()
		return 0, ErrIsDir
	}
	size := st.rec.Size
	if off >= size {
		v.mu.Unlock()
		return 0, io.EOF
	}
	n := int64(len(p))
	if off+n > size {
		n = size - off
	}
	if err := v.ensureBlocks(st); err != nil {
		v.mu.Unlock()
		return 0, err
	}
	type piece struct {
		src  source
		dst  []byte
		inBl int64
	}
	var pieces []piece
	for pos := off; pos < off+n; {
		blk := uint64(pos / v.bs)
		inBl := pos % v.bs
		l := min(v.bs-inBl, off+n-pos)
		src, err := v.sourceLocked(st, blk)
		if err != nil {
			for _, pc := range pieces {
				if pc.src.bh != nil {
					v.releaseBaseLocked(pc.src.bh)
				}
			}
			v.mu.Unlock()
			return 0, err
		}
		if src.bh != nil {
			src.bh.refs++
		}
		pieces = append(pieces, piece{src, p[pos-off : pos-off+l], inBl})
		pos += l
	}
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		for _, pc := range pieces {
			if pc.src.bh != nil {
				v.releaseBaseLocked(pc.src.bh)
			}
		}
		v.mu.Unlock()
	}()
	// A slot is freed, and a sealed one rewritten in place (rewrite.go),
	// only under ioMu held alone, which this read shares: the I/O runs
	// without mu.
	for _, pc := range pieces {
		if err := v.read(pc.src, pc.dst, pc.inBl); err != nil {
			return 0, fmt.Errorf("inode %d: %w", ino, err)
		}
	}
	return int(n), nil
}

// writableSlotLocked returns the active-layer slot that block blk of st is
// written into, copying the block up from below unless the write covers
// every byte of it that matters (covered: [lo, hi) within the block). The
// slot holds at least the block's first need bytes, where the caller then
// writes. An open slot too short for them moves to a larger one, which
// only a caller holding ioMu exclusively may ask for (slotsGrowLocked
// tells WriteAt beforehand): a write under the shared lock may be copying
// into the old slot meanwhile.
func (v *View) writableSlotLocked(st *inodeState, blk uint64, lo, hi, need int64) (*blockRef, error) {
	v.dataGen++
	ref, ok := st.active[blk]
	if ok && !ref.sealed() {
		if ref.capBytes() < need {
			if err := v.growSlotLocked(ref, need); err != nil {
				return nil, err
			}
		}
		return ref, nil
	}
	if ok {
		v.moved = append(v.moved, ref.span()) // superseded by the copy below
	}
	start := int64(blk) * v.bs
	live := min(v.bs, max(0, st.rec.Size-start)) // bytes of this block inside the file
	needOld := live > 0 && (lo > 0 || hi < live)
	var old []byte
	if needOld {
		src, err := v.sourceLocked(st, blk)
		if err != nil {
			return nil, err
		}
		if src.kind != srcZero {
			old = getBlockBuf(v.bs)
			defer putBlockBuf(old)
			if err := v.read(src, old[:live], 0); err != nil {
				return nil, err
			}
		}
	}
	f := v.files[v.activeLayer()]
	pages := int(v.bs / pageSize)
	whole := v.allocatedBelowLocked(st, blk, ref, ok)
	filled := 0 // the pages written from old below
	if old != nil {
		filled = pagesFor(live)
	}
	n := pagesFor(need) // the pages the slot must hold
	if old != nil {
		n = max(n, pagesFor(live))
	}
	n = max(n, 1)
	switch {
	case hi > live && start > 0:
		// A file past its first block grows: a whole block, as it would
		// have once the file is written on.
		n = pages
	case hi > live:
		// The write grows the file: room for it to go on growing, so a
		// file written a page at a time moves a few times, not at every
		// page.
		n = 1 << bits.Len(uint(n-1))
	}
	if whole || n >= pages {
		n = pages
	}
	at, err := v.takeSlotLocked(f, n, filled)
	if err != nil {
		return nil, err
	}
	nref := &blockRef{Slot: at, open: true, dirty: make([]bool, pages), zero: make([]bool, pages)}
	if n < pages {
		nref.Pages = uint32(n)
	}
	// Past the pages written here, a slot reads as zeros (takeSlotLocked).
	if old != nil {
		// Only the pages that hold the file's bytes are written: the rest
		// of the block reads as the zeros old holds there, so a small edit
		// of a small file costs one page to write and to sync at the next
		// checkpoint, not a whole block.
		if _, err := f.WriteAt(old[:filled*pageSize], nref.off()); err != nil {
			return nil, mapOSErr(err)
		}
		nref.CRCs = pageCRCs(old)
	} else {
		nref.CRCs = make([]uint32, pages)
		for i := range nref.CRCs {
			nref.CRCs[i] = zeroPageCRC
		}
	}
	for i := filled; i < pages; i++ {
		nref.zero[i] = true
	}
	if whole {
		// A copy of an allocated block stays allocated, as far as the
		// disk lets it: st_blocks does not shrink because a write moved it.
		nref.alloc = unix.Fallocate(int(f.Fd()), 0, nref.off(), v.bs) == nil
	}
	st.active[blk] = nref
	v.markBlock(st, blk)
	return nref, nil
}

// pagesFor is how many pages hold n bytes.
func pagesFor(n int64) int { return int((n + pageSize - 1) / pageSize) }

// zeroChunk is written, never changed, by writeZeros.
var zeroChunk = make([]byte, 256<<10)

// writeZeros writes n zero bytes into f at off.
func writeZeros(f *os.File, off, n int64) error {
	for n > 0 {
		c := min(n, int64(len(zeroChunk)))
		if _, err := f.WriteAt(zeroChunk[:c], off); err != nil {
			return err
		}
		off, n = off+c, n-c
	}
	return nil
}

// takePages hands out a slot of n pages at the end of the active layer's
// data file, a hole that reads as zeros.
func (v *View) takePages(n int) uint64 {
	at := v.nextPage
	v.nextPage += uint64(n)
	return at
}

// reuseMaxPages bounds the freed slots a view keeps for reuse
// (View.reuse) instead of punching them: 1 MiB (16 blocks of the default
// size, as many as a database's transaction may rewrite between two
// fsyncs), which a crash leaves allocated until the layer is collected,
// as it does the slots waiting for a punch.
const reuseMaxPages = 256

// takeSlotLocked hands out a slot of n pages for a copy-up into data file
// f, the active layer's, whose first written pages the caller writes
// itself; every page past them reads as zeros. It takes the slot from the
// freed slots kept for reuse when one is large enough: overwriting blocks
// the file system has allocated makes the next fdatasync a data write,
// where pages past the end of the file also cost a journal commit for
// their allocation and the file's size (an fsync(2) after a small write
// into a sealed block: 266 us against 100 us for 64 KiB on this disk).
// Else it takes one at the end of the file (takePages).
func (v *View) takeSlotLocked(f *os.File, n, written int) (uint64, error) {
	best := -1
	for i, sp := range v.reuse {
		if sp.n >= uint64(n) && (best < 0 || sp.n < v.reuse[best].n) {
			best = i
			if sp.n == uint64(n) {
				break
			}
		}
	}
	if best < 0 {
		return v.takePages(n), nil
	}
	sp := v.reuse[best]
	if sp.n == uint64(n) {
		v.reuse = slices.Delete(v.reuse, best, best+1)
	} else {
		v.reuse[best] = slotSpan{sp.at + uint64(n), sp.n - uint64(n)}
	}
	v.reusePages -= uint64(n)
	if written < n {
		// A freed slot holds what its block held: the pages the caller
		// does not write are zeroed, written over rather than punched, so
		// they stay allocated.
		if err := writeZeros(f, int64(sp.at+uint64(written))*pageSize, int64(n-written)*pageSize); err != nil {
			// The slot goes back to the pool: nothing names it.
			v.reuse = append(v.reuse, slotSpan{sp.at, uint64(n)})
			v.reusePages += uint64(n)
			return 0, mapOSErr(err)
		}
	}
	return sp.at, nil
}

// growSlotLocked moves open slot ref to a larger one that holds the
// block's first need bytes (twice its pages at least, so a growing block
// moves a few times, not at every write); the old one is freed.
func (v *View) growSlotLocked(ref *blockRef, need int64) error {
	pages := len(ref.CRCs)
	n := min(pages, max(pagesFor(need), 2*ref.capPages()))
	f := v.files[v.activeLayer()]
	buf := getBlockBuf(v.bs)
	defer putBlockBuf(buf)
	held := buf[:ref.capBytes()]
	if err := readFull(f, held, ref.off()); err != nil {
		return err
	}
	at, err := v.takeSlotLocked(f, n, ref.capPages())
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(held, int64(at)*pageSize); err != nil {
		// What the slot had is still in the old one; the pages taken
		// are covered by the data file before the next seal
		// (reserveForSealLocked).
		return mapOSErr(err)
	}
	v.moved = append(v.moved, ref.span())
	ref.rewritten = nil // a new slot: no record holds any of it
	// The new slot's pages past the old one's read as zeros.
	if ref.zero != nil {
		for p := ref.capPages(); p < n; p++ {
			ref.zero[p] = true
		}
	}
	ref.Slot, ref.Pages = at, uint32(n)
	if n == pages {
		ref.Pages = 0
	}
	return nil
}

// slotsGrowLocked reports whether a write of [off, end) of st meets an
// open slot too short for it.
func (v *View) slotsGrowLocked(st *inodeState, off, end int64) bool {
	if len(st.active) == 0 || end <= off {
		return false
	}
	for blk := uint64(off / v.bs); blk <= uint64((end-1)/v.bs); blk++ {
		ref, ok := st.active[blk]
		if ok && !ref.sealed() && !v.slotHolds(ref, blk, end) {
			return true
		}
	}
	return false
}

// slotHolds reports whether ref, the slot of block blk, holds what a
// write ending at file offset end puts into the block.
func (v *View) slotHolds(ref *blockRef, blk uint64, end int64) bool {
	return ref.capBytes() >= min(v.bs, end-int64(blk)*v.bs)
}

// allocatedBelowLocked reports whether the block a copy-up of blk starts
// from was allocated whole: the active layer's sealed ref (active, when
// inActive), else a frozen layer's that the truncation floor does not hide.
func (v *View) allocatedBelowLocked(st *inodeState, blk uint64, active *blockRef, inActive bool) bool {
	if inActive {
		return active.alloc
	}
	fr, ok := st.frozen[blk]
	if !ok || st.inActive && st.rec.Floor >= 0 && int64(blk)*v.bs >= st.rec.Floor {
		return false
	}
	return fr.ref.alloc
}

// zeroPageCRC is the CRC-32C of a page of zeros (TestZeroPageCRC checks it).
const zeroPageCRC = 0x98f94189

// blockBufs keeps the buffers copy-ups read a block into: a random write
// into a large file copies a block per write, and a fresh 64 KiB buffer
// each time was a large allocation for the garbage collector to clear.
var blockBufs sync.Pool

// getBlockBuf returns a zeroed buffer of bs bytes.
func getBlockBuf(bs int64) []byte {
	if p, ok := blockBufs.Get().(*[]byte); ok && int64(len(*p)) == bs {
		clear(*p)
		return *p
	}
	return make([]byte, bs)
}

func putBlockBuf(b []byte) { blockBufs.Put(&b) }

// touchPages marks the pages of ref that [lo, hi) of the block covers as
// changed, so that sealing recomputes only their checksums.
func touchPages(ref *blockRef, lo, hi int64) {
	for p := lo / pageSize; p <= (hi-1)/pageSize && p < int64(len(ref.dirty)); p++ {
		ref.dirty[p] = true
		if ref.zero != nil {
			ref.zero[p] = false
		}
		if ref.rewritten != nil {
			ref.rewritten[p] = true
		}
	}
}

// pageSum is the checksum a write works out for one page it fills: the
// whole page, or part of a page known to hold zeros, so the page's
// content is what the write put there and the seal need not read it
// back.
type pageSum struct {
	ref *blockRef
	p   int
	crc uint32
}

// pageSumsLocked lists the pages of ref that the write of [lo, hi) of
// its block fills, as pageSums without their checksums yet: they are
// worked out from the write's bytes once it is in the data file.
func pageSumsLocked(sums []pageSum, ref *blockRef, lo, hi int64) []pageSum {
	for p := int(lo / pageSize); int64(p)*pageSize < hi && p < ref.capPages(); p++ {
		start := int64(p) * pageSize
		if (lo <= start && hi >= start+pageSize) || (ref.zero != nil && ref.zero[p]) {
			sums = append(sums, pageSum{ref: ref, p: p})
		}
	}
	return sums
}

// sum works out the checksum of page s.p after data, the bytes written
// at [lo, lo+len(data)) of the block, went into it.
func (s *pageSum) sum(data []byte, lo int64) {
	start := int64(s.p) * pageSize
	a, b := max(lo, start), min(lo+int64(len(data)), start+pageSize)
	if a == start && b == start+pageSize {
		s.crc = crc32.Checksum(data[a-lo:b-lo], castagnoli())
		return
	}
	var page [pageSize]byte
	copy(page[a-start:], data[a-lo:b-lo])
	s.crc = crc32.Checksum(page[:], castagnoli())
}

// set records the page's checksum, on a page touchPages marked written
// (no longer zero, checksum stale). A page of zeros stays marked until
// the seal, as any page written is: until then it counts as data, not as
// a hole.
func (s *pageSum) set() {
	if s.crc != zeroPageCRC {
		s.ref.CRCs[s.p], s.ref.dirty[s.p] = s.crc, false
	}
}

func (v *View) markBlock(st *inodeState, blk uint64) {
	st.allocKnown = false
	if st.dirtyBlocks == nil {
		st.dirtyBlocks = map[uint64]struct{}{}
	}
	st.dirtyBlocks[blk] = struct{}{}
	v.dirty[st.ino] = st
	v.changes.Add(1)
}

func (v *View) markRec(st *inodeState) {
	st.allocKnown = false
	st.dirtyRec = true
	v.dirty[st.ino] = st
	v.changes.Add(1)
}

// WriteAt writes p into file ino at off (append: at the end of the file).
// Only the blocks it touches are copied into the active layer.
func (v *View) WriteAt(ino uint64, p []byte, off int64, appendMode bool) (int, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	n, err := v.writeAt(ino, p, off, appendMode, false)
	if err == errSlotsGrow {
		// Writes share ioMu while they copy into their slots; moving a
		// slot takes it alone (writableSlotLocked).
		n, err = v.writeAt(ino, p, off, appendMode, true)
	}
	return n, err
}

// errSlotsGrow tells WriteAt that the write must move a slot, which it
// does holding ioMu alone.
var errSlotsGrow = errors.New("a slot must grow")

func (v *View) writeAt(ino uint64, p []byte, off int64, appendMode, alone bool) (int, error) {
	if alone {
		v.ioMu.Lock()
		defer v.ioMu.Unlock()
	} else {
		v.ioMu.RLock()
		defer v.ioMu.RUnlock()
	}
	v.mu.Lock()
	if err := v.checkWritable(); err != nil {
		v.mu.Unlock()
		return 0, err
	}
	st, err := v.getInode(ino)
	if err != nil {
		v.mu.Unlock()
		return 0, err
	}
	if st.rec.Mode&syscall.S_IFMT != syscall.S_IFREG {
		v.mu.Unlock()
		return 0, ErrInvalid
	}
	if appendMode {
		off = st.rec.Size
	}
	if off+int64(len(p)) > MaxFileSize {
		v.mu.Unlock()
		return 0, fmt.Errorf("write past %d bytes: %w", int64(MaxFileSize), ErrTooLarge)
	}
	if err := v.ensureBlocks(st); err != nil {
		v.mu.Unlock()
		return 0, err
	}
	if !alone && (v.slotsGrowLocked(st, off, off+int64(len(p))) || v.reopenRangeLocked(st, off, off+int64(len(p)), false)) {
		v.mu.Unlock()
		return 0, errSlotsGrow
	}
	// A write into slots a fallocate reserved needs no data space, only
	// the metadata the reserve is kept for.
	if !v.reservedLocked(st, off, int64(len(p))) {
		if err := v.s.checkSpace(); err != nil {
			v.mu.Unlock()
			return 0, err
		}
	}
	v.copyUp(st)
	if alone {
		v.reopenRangeLocked(st, off, off+int64(len(p)), true)
	}
	type piece struct {
		off    int64 // in the data file
		src    int   // where its bytes (hi-lo of them) start in p
		ref    *blockRef
		lo, hi int64
		sums   int // where its pages' checksums start in sums
	}
	var pieces []piece
	end := off + int64(len(p))
	// The counts of what the file occupies follow the write block by
	// block (a stat after each write of a growing file would otherwise
	// recount the whole map).
	var written []uint64
	if len(p) > 0 && st.allocKnown {
		written = blockRange(uint64(off/v.bs), uint64((end-1)/v.bs))
	}
	track := v.allocBeforeLocked(st, written)
	for pos := off; pos < end; {
		blk := uint64(pos / v.bs)
		inBl := pos % v.bs
		l := min(v.bs-inBl, end-pos)
		ref, err := v.writableSlotLocked(st, blk, inBl, inBl+l, inBl+l)
		if err != nil {
			v.mu.Unlock()
			return 0, err
		}
		pieces = append(pieces, piece{ref.off() + inBl, int(pos - off), ref, inBl, inBl + l, 0})
		pos += l
	}
	v.allocAfterLocked(st, track)
	// The pages the write fills get their checksums from its bytes, so
	// that a checkpoint need not read them back.
	var sums []pageSum
	for i := range pieces {
		pieces[i].sums = len(sums)
		sums = pageSumsLocked(sums, pieces[i].ref, pieces[i].lo, pieces[i].hi)
	}
	if v.writing > 0 {
		v.overlapped = true
	}
	v.writing++
	f := v.files[v.activeLayer()]
	v.mu.Unlock()
	// Pieces whose slots follow each other in the data file (a file
	// written from its start gets its slots in order) go in one pwrite:
	// a 1 MiB write of 64 KiB blocks is one system call, not 16.
	for i := 0; i < len(pieces); {
		n := pieces[i].hi - pieces[i].lo
		j := i + 1
		for ; j < len(pieces) && pieces[j].off == pieces[i].off+n; j++ {
			n += pieces[j].hi - pieces[j].lo
		}
		if _, err := f.WriteAt(p[pieces[i].src:pieces[i].src+int(n)], pieces[i].off); err != nil {
			// Some of it may be in the slots: the seal reads them.
			v.mu.Lock()
			v.wroteLocked()
			for _, pc := range pieces {
				touchPages(pc.ref, pc.lo, pc.hi)
			}
			v.mu.Unlock()
			return 0, fmt.Errorf("inode %d: %w", ino, mapOSErr(err))
		}
		i = j
	}
	for i, pc := range pieces {
		end := len(sums)
		if i+1 < len(pieces) {
			end = pieces[i+1].sums
		}
		for k := pc.sums; k < end; k++ {
			sums[k].sum(p[pc.src:pc.src+int(pc.hi-pc.lo)], pc.lo)
		}
	}
	v.mu.Lock()
	clean := v.wroteLocked()
	// The pages written count now, and a growing size changes what the
	// blocks from the old end on hold.
	changed := written
	if end > st.rec.Size && len(p) > 0 && st.allocKnown {
		changed = blockRange(uint64(min(off, st.rec.Size)/v.bs), uint64((end-1)/v.bs))
	}
	track = v.allocBeforeLocked(st, changed)
	for _, pc := range pieces {
		touchPages(pc.ref, pc.lo, pc.hi)
	}
	if clean {
		for i := range sums {
			sums[i].set()
		}
	}
	if end > st.rec.Size {
		st.rec.Size = end
	}
	touch(st, true)
	v.markRec(st)
	v.allocAfterLocked(st, track)
	v.mu.Unlock()
	if !v.written.Swap(true) {
		select {
		case v.kick <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// wroteLocked ends a write that writeAt counted in writing, and reports
// whether no other write was between taking its slots and marking its
// pages meanwhile: only then are its pages' contents the bytes it wrote.
func (v *View) wroteLocked() bool {
	v.writing--
	alone := !v.overlapped
	if v.writing == 0 {
		v.overlapped = false
	}
	return alone
}

// truncateLocked sets the size of st: blocks past the new end leave the
// active layer, lower ones are hidden by the layer's floor, and the block
// that holds the new end keeps only the bytes before it. Holds ioMu.
func (v *View) truncateLocked(st *inodeState, size int64) error {
	if size < 0 || size > MaxFileSize {
		return fmt.Errorf("size %d: %w", size, ErrTooLarge)
	}
	if err := v.ensureBlocks(st); err != nil {
		return err
	}
	v.copyUp(st)
	if size < st.rec.Size {
		if size%v.bs != 0 {
			blk := uint64(size / v.bs)
			inBl := size % v.bs
			ref, err := v.writableSlotLocked(st, blk, 0, 0, 0)
			if err != nil {
				return err
			}
			// Past its slot the block reads as zeros already.
			if held := ref.capBytes(); inBl < held {
				zeros := make([]byte, held-inBl)
				if _, err := v.files[v.activeLayer()].WriteAt(zeros, ref.off()+inBl); err != nil {
					return mapOSErr(err)
				}
				touchPages(ref, inBl, held)
			}
		}
		first := uint64((size + v.bs - 1) / v.bs)
		for blk, ref := range st.active {
			if blk >= first {
				delete(st.active, blk)
				v.freed = append(v.freed, ref.span())
				v.removed = true
				v.markBlock(st, blk)
			}
		}
		if st.rec.Floor < 0 || size < st.rec.Floor {
			st.rec.Floor = size
		}
	}
	st.rec.Size = size
	touch(st, true)
	v.markRec(st)
	return nil
}

// blockRange is the blocks first to last, or nil when there are none or
// more than maxTrackedBlocks (a change of so many is recounted instead).
func blockRange(first, last uint64) []uint64 {
	if last < first || last-first >= maxTrackedBlocks {
		return nil
	}
	out := make([]uint64, 0, last-first+1)
	for b := first; b <= last; b++ {
		out = append(out, b)
	}
	return out
}

// reservedLocked reports whether every block of [off, off+n) of st has a
// slot of its own in the active layer that can still be written: a write
// there takes no new data space.
func (v *View) reservedLocked(st *inodeState, off, n int64) bool {
	if n <= 0 {
		return false
	}
	for blk := uint64(off / v.bs); blk <= uint64((off+n-1)/v.bs); blk++ {
		// A slot too short for the write moves to a new one.
		if ref, ok := st.active[blk]; !ok || ref.sealed() || !v.slotHolds(ref, blk, off+n) {
			return false
		}
	}
	return true
}

// Allocate implements fallocate mode 0 and KEEP_SIZE: it reserves the
// space later writes of [off, off+length) need, as posix_fallocate
// promises, so that they cannot fail with ENOSPC. Every block of the range
// gets a slot of its own in the active layer, with its content copied up
// from below, and the slots are allocated on disk; blocks past the end of
// the file are reserved only when the file grows to cover them (without
// keepSize). The range is checked against the free space first: a request
// the disk cannot hold fails with ErrNoSpace and changes nothing.
func (v *View) Allocate(ino uint64, off, length int64, keepSize bool) error {
	if off < 0 || length <= 0 {
		return ErrInvalid
	}
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return err
	}
	st, err := v.getInode(ino)
	if err != nil {
		return err
	}
	if st.rec.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return ErrInvalid
	}
	end := off + length
	if !keepSize && end > MaxFileSize {
		return ErrTooLarge
	}
	if err := v.ensureBlocks(st); err != nil {
		return err
	}
	// What is reserved: the range, within the file as it will be.
	size := st.rec.Size
	if !keepSize {
		size = max(size, end)
	}
	rend := min(end, size)
	var first, last uint64
	if off < rend {
		first, last = uint64(off/v.bs), uint64((rend-1)/v.bs)
	}
	var need int64
	for blk := first; off < rend && blk <= last; blk++ {
		if ref, ok := st.active[blk]; !ok || ref.sealed() {
			need += v.bs
		}
	}
	if need > 0 {
		var fs unix.Statfs_t
		if err := unix.Statfs(v.s.dir, &fs); err != nil {
			return mapOSErr(err)
		}
		if avail := int64(fs.Bavail) * fs.Bsize; need > avail {
			return fmt.Errorf("allocate %d bytes with %d free: %w", need, avail, ErrNoSpace)
		}
	}
	v.copyUp(st)
	if !keepSize && end > st.rec.Size {
		st.rec.Size = end
		touch(st, true)
	}
	v.markRec(st)
	if off >= rend {
		return nil
	}
	f := v.files[v.activeLayer()]
	// Slots handed out are covered by the data file whatever happens
	// below (reserveSlotsLocked says why).
	defer v.reserveSlotsLocked(f)
	var runStart, runEnd int64 = -1, -1 // a run of adjacent slots to allocate
	flush := func() error {
		if runStart < 0 {
			return nil
		}
		err := unix.Fallocate(int(f.Fd()), 0, runStart, runEnd-runStart)
		runStart = -1
		return mapOSErr(err)
	}
	for blk := first; blk <= last; blk++ {
		ref, err := v.writableSlotLocked(st, blk, 0, 0, v.bs)
		if err != nil {
			return err
		}
		ref.alloc = true
		at := ref.off()
		if at != runEnd {
			if err := flush(); err != nil {
				return err
			}
			runStart = at
		}
		runEnd = at + v.bs
	}
	return flush()
}

// Zero makes [off, off+length) of file ino read as zeros and gives the
// space back (fallocate's PUNCH_HOLE). Whole blocks become fresh slots
// that are holes in the data file, so they cost no space; partial blocks
// are written. Without keepSize the file grows to cover the range.
func (v *View) Zero(ino uint64, off, length int64, keepSize bool) error {
	return v.zero(ino, off, length, keepSize, false)
}

// ZeroRange makes [off, off+length) of file ino read as zeros and keeps
// its space allocated (fallocate's ZERO_RANGE): a later write there cannot
// fail for want of space, as Allocate promises. A request the disk cannot
// hold fails with ErrNoSpace and changes nothing.
func (v *View) ZeroRange(ino uint64, off, length int64, keepSize bool) error {
	if off < 0 || length <= 0 || off+length > MaxFileSize {
		return ErrInvalid
	}
	if err := v.Allocate(ino, off, length, keepSize); err != nil {
		return err
	}
	return v.zero(ino, off, length, true, true)
}

// zero is Zero, or with alloc the zeroing of ZeroRange: whole blocks keep
// (or get) a slot of their own, allocated on disk and zeroed in place.
func (v *View) zero(ino uint64, off, length int64, keepSize, alloc bool) error {
	if off < 0 || length <= 0 || off+length > MaxFileSize {
		return ErrInvalid
	}
	v.ioMu.Lock()
	defer v.ioMu.Unlock()
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.checkWritable(); err != nil {
		return err
	}
	st, err := v.getInode(ino)
	if err != nil {
		return err
	}
	if st.rec.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return ErrInvalid
	}
	if err := v.ensureBlocks(st); err != nil {
		return err
	}
	v.copyUp(st)
	end := off + length
	zend := min(end, st.rec.Size) // past the end everything reads as zeros already
	f := v.files[v.activeLayer()]
	fresh := false // whole blocks became fresh slots, written to by nothing
	for pos := off; pos < zend; {
		blk := uint64(pos / v.bs)
		start := int64(blk) * v.bs
		lo, hi := pos-start, min(zend-start, v.bs)
		switch {
		case lo == 0 && hi == v.bs && alloc:
			ref, err := v.writableSlotLocked(st, blk, 0, v.bs, v.bs)
			if err != nil {
				return err
			}
			if err := zeroSlot(f, ref.off(), v.bs); err != nil {
				return err
			}
			for i := range ref.CRCs {
				ref.CRCs[i], ref.dirty[i] = zeroPageCRC, false
				if ref.zero != nil {
					ref.zero[i] = true
				}
				if ref.rewritten != nil {
					ref.rewritten[i] = true
				}
			}
			ref.alloc = true
			v.markBlock(st, blk)
			fresh = true // a seal since Allocate may have moved it to a new slot
		case lo == 0 && hi == v.bs:
			if old, ok := st.active[blk]; ok {
				v.freed = append(v.freed, old.span())
				v.removed = true
				v.punchSoon = true // the caller asked for the space back
			}
			pages := int(v.bs / pageSize)
			ref := &blockRef{Slot: v.takePages(pages), open: true, dirty: make([]bool, pages), zero: make([]bool, pages), CRCs: make([]uint32, pages)}
			for i := range ref.CRCs {
				ref.CRCs[i], ref.zero[i] = zeroPageCRC, true
			}
			st.active[blk] = ref
			v.markBlock(st, blk)
			fresh = true
		default:
			ref, err := v.writableSlotLocked(st, blk, lo, hi, hi)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt(make([]byte, hi-lo), ref.off()+lo); err != nil {
				return mapOSErr(err)
			}
			touchPages(ref, lo, hi)
		}
		pos = start + hi
	}
	if fresh {
		if err := v.reserveSlotsLocked(f); err != nil {
			return err
		}
	}
	if !keepSize && end > st.rec.Size {
		st.rec.Size = end
	}
	touch(st, true)
	v.markRec(st)
	return nil
}

// zeroSlot zeroes n bytes of data file f at off and keeps them allocated:
// one fallocate where the file system has ZERO_RANGE, else a write.
func zeroSlot(f *os.File, off, n int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		err = writeZeros(f, off, n)
	}
	return mapOSErr(err)
}

// reserveSlotsLocked grows data file f to cover every slot handed out.
// A slot nothing was written to (a block Zero made) would otherwise lie
// past the end of the file, and the next view, which starts handing out
// slots at the end of the file, would give it to another block. The size
// is made durable with the data, by the fdatasync of a sync or freeze.
func (v *View) reserveSlotsLocked(f *os.File) error {
	if f == nil {
		return nil
	}
	fi, err := f.Stat()
	if err != nil {
		return mapOSErr(err)
	}
	if want := int64(v.nextPage) * pageSize; fi.Size() < want {
		v.dataGen++
		if err := f.Truncate(want); err != nil {
			return fmt.Errorf("reserve data slots: %w", mapOSErr(err))
		}
	}
	return nil
}

// BaseFile opens the base file behind ino for reading when ino is a regular
// file no layer has changed, so the kernel can read it directly
// (passthrough). It returns nil otherwise.
func (v *View) BaseFile(ino uint64) (*os.File, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	st, err := v.getInode(ino)
	if err != nil {
		return nil, err
	}
	if st.inActive || !st.rec.HasOrigin || st.rec.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, nil
	}
	if err := v.ensureBlocks(st); err != nil {
		return nil, err
	}
	if len(st.frozen) > 0 || len(st.active) > 0 || st.baseLimit < st.rec.Size {
		return nil, nil
	}
	// Frozen records may still differ from the base (mode, size): only an
	// inode that no layer recorded at all is the base file itself.
	if v.recordIn(v.stack, ino) {
		return nil, nil
	}
	fd, err := v.base.open(st.rec.Origin, syscall.O_RDONLY)
	if err != nil {
		return nil, mapOSErr(err)
	}
	return os.NewFile(uintptr(fd), st.rec.Origin), nil
}

// Seek finds, at or after off, where the file's next data begins (data
// set: SEEK_DATA) or its next hole (SEEK_HOLE; the end of the file counts
// as one). Blocks the active or a frozen layer holds count as data; blocks
// no layer holds and the base does not cover are holes; where the base
// shows through, the base file's own holes are reported. Past the end it
// fails with ErrPastEnd, as lseek does with ENXIO.
//
// It jumps over holes to the next block a layer holds and over the
// base's runs of data or holes, so a huge sparse file costs little; past
// seekSteps blocks looked at one by one (a long run of written blocks),
// it answers that the rest is data, which lseek allows.
func (v *View) Seek(ino uint64, off int64, data bool) (int64, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	st, err := v.getInode(ino)
	if err != nil {
		return 0, err
	}
	if st.rec.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return 0, ErrInvalid
	}
	size := st.rec.Size
	if off < 0 || off >= size {
		return 0, fmt.Errorf("seek to %d of %d bytes: %w", off, size, ErrPastEnd)
	}
	if err := v.ensureBlocks(st); err != nil {
		return 0, err
	}
	keys := make([]uint64, 0, len(st.active)+len(st.frozen))
	for b := range st.active {
		keys = append(keys, b)
	}
	for b := range st.frozen {
		if _, ok := st.active[b]; !ok {
			keys = append(keys, b)
		}
	}
	slices.Sort(keys)
	// nextKey is where the next block a layer holds after blk begins.
	nextKey := func(blk uint64) int64 {
		i, found := slices.BinarySearch(keys, blk)
		if found {
			i++
		}
		if i == len(keys) {
			return size
		}
		return min(int64(keys[i])*v.bs, size)
	}
	baseEnd := (st.baseLimit + v.bs - 1) / v.bs * v.bs // base blocks end here
	for pos, steps := off, 0; pos < size; steps++ {
		if steps == seekSteps {
			if data {
				return pos, nil
			}
			return size, nil
		}
		blk := uint64(pos / v.bs)
		blockEnd := min(int64(blk+1)*v.bs, size)
		src, err := v.sourceBlock(st, blk)
		if err != nil {
			return 0, err
		}
		switch src.kind {
		case srcSlot:
			// Page by page, as ext4 answers: a page never written, or
			// sealed as zeros, is a hole.
			ref := layerRef(st, blk)
			for q := pos; q < blockEnd; q = (q/pageSize + 1) * pageSize {
				if ref.pageData(int((q-int64(blk)*v.bs)/pageSize)) == data {
					return q, nil
				}
			}
			pos = blockEnd
		case srcZero:
			if !data {
				return pos, nil
			}
			// The base shows only below baseLimit and above no floor, so
			// past a hole only the layers' blocks can hold data.
			pos = max(blockEnd, nextKey(blk))
		case srcBase:
			at, err := v.seekBaseLocked(st, pos, data)
			if err != nil {
				return 0, err
			}
			if at < blockEnd {
				return at, nil
			}
			// The base keeps to its data (or hole) up to at; a layer's
			// block before that is data, the end of the base a hole.
			next := min(at/v.bs*v.bs, baseEnd)
			if data {
				next = min(next, nextKey(blk))
			}
			pos = max(blockEnd, next)
		}
	}
	if data {
		return 0, fmt.Errorf("no data at or after %d: %w", off, ErrPastEnd)
	}
	return size, nil
}

// layerRef is the block map entry of block blk of st, which a layer
// holds: the active layer's, else the frozen one's.
func layerRef(st *inodeState, blk uint64) *blockRef {
	if ref, ok := st.active[blk]; ok {
		return ref
	}
	fr := st.frozen[blk]
	return &fr.ref
}

// pageData reports whether page p of the block may hold data: it was
// written since the block was last sealed, or its checksum is not that of
// a page of zeros.
func (r *blockRef) pageData(p int) bool {
	if r.dirty != nil && r.dirty[p] {
		return true
	}
	return r.CRCs[p] != zeroPageCRC
}

// seekSteps bounds the blocks Seek looks at one by one.
var seekSteps = 1 << 16

// seekBaseLocked is lseek(SEEK_DATA or SEEK_HOLE) on the base file from
// pos: where its next data (or hole) begins, math.MaxInt64 when no data
// follows. Past the base file's end is a hole (it reads as zeros). A base
// file system that cannot tell holes has none.
func (v *View) seekBaseLocked(st *inodeState, pos int64, data bool) (int64, error) {
	bh, err := v.baseFileLocked(st)
	if err != nil {
		return 0, err
	}
	whence := unix.SEEK_HOLE
	if data {
		whence = unix.SEEK_DATA
	}
	at, err := unix.Seek(int(bh.f.Fd()), pos, whence)
	switch {
	case errors.Is(err, unix.ENXIO):
		// No data after pos (SEEK_DATA), or pos is past the base file's
		// end, a hole.
		if data {
			return math.MaxInt64, nil
		}
		return pos, nil
	case err != nil:
		if data {
			return pos, nil // no hole information: all data
		}
		fi, serr := bh.f.Stat()
		if serr != nil {
			return 0, mapOSErr(serr)
		}
		return max(pos, fi.Size()), nil
	}
	return at, nil
}
