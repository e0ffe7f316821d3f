package layers

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
)

// Key layout of the badger store. Every key starts with a one-letter table
// name so that a prefix scan reads one table of one layer:
//
//	s/<sandbox>                      sandbox record
//	l/<layer>                        layer record
//	i/<layer>/<ino:8>                inode record as of that layer
//	e/<layer>/<dir:8>/<name>         directory entry (ino 0 = whiteout)
//	b/<layer>/<ino:8>/<block:8>      block map entry: slot in the layer's data file + page checksums
//	d/<layer>                        a layer being dropped: its tables and data file go first, then this
//	x/<sandbox>/...                  reserved for checkpoint, archive and plan tables
//
// Entries and blocks are keyed by inode identity, never by path: renaming a
// directory moves one entry, and a directory created anew gets a new identity,
// so no opaque markers are needed to hide what a lower layer held under the
// same name.
const (
	tSandbox = 's'
	tLayer   = 'l'
	tInode   = 'i'
	tEntry   = 'e'
	tBlock   = 'b'
	tDrop    = 'd'
)

func keySandbox(name string) []byte { return append([]byte{tSandbox, '/'}, name...) }
func keyLayer(id string) []byte     { return append([]byte{tLayer, '/'}, id...) }
func keyDrop(id string) []byte      { return append([]byte{tDrop, '/'}, id...) }

func prefixLayerTable(t byte, layer string) []byte {
	k := make([]byte, 0, 3+len(layer))
	k = append(k, t, '/')
	k = append(k, layer...)
	return append(k, '/')
}

func keyInode(layer string, ino uint64) []byte {
	return binary.BigEndian.AppendUint64(prefixLayerTable(tInode, layer), ino)
}

func prefixEntries(layer string, dir uint64) []byte {
	return append(binary.BigEndian.AppendUint64(prefixLayerTable(tEntry, layer), dir), '/')
}

func keyEntry(layer string, dir uint64, name string) []byte {
	return append(prefixEntries(layer, dir), name...)
}

func prefixBlocks(layer string, ino uint64) []byte {
	return append(binary.BigEndian.AppendUint64(prefixLayerTable(tBlock, layer), ino), '/')
}

func keyBlock(layer string, ino uint64, blk uint64) []byte {
	return binary.BigEndian.AppendUint64(prefixBlocks(layer, ino), blk)
}

// Inode is the stored metadata of one file, directory, symlink or special
// file as of one layer. A layer stores a whole record whenever it changes
// anything about the inode, so the topmost record wins outright.
type Inode struct {
	Mode                uint32 // S_IF* type bits and permission bits
	UID, GID            uint32
	Nlink               uint32
	Rdev                uint64
	Size                int64
	Atime, Mtime, Ctime int64 // nanoseconds since the epoch
	// Btime is when the inode was made (statx's birth time), in
	// nanoseconds since the epoch; 0: not known (a base file system that
	// does not record it, a record stored before it was kept).
	Btime  int64
	Target string
	// Origin is the base-relative path whose data (files) or entries
	// (directories) show through below the layers; valid when HasOrigin.
	Origin    string
	HasOrigin bool
	// Floor is the smallest size the file had in this layer (-1: never
	// truncated here). Blocks of lower layers and the base at or past it
	// are hidden: they were cut off by a truncate.
	Floor int64
	// Xattrs is the complete attribute set when XattrsSet; otherwise the
	// attributes of the layer below (or the base) apply.
	Xattrs    map[string][]byte
	XattrsSet bool
	// xattrEnc caches the stored form of Xattrs, which encodeInode would
	// otherwise sort and write out again on every change of the inode (a
	// write's mtime included), and xattrNames its names in order, from
	// which a changed set's names follow without a sort. Whoever gives
	// Xattrs a new map sets or clears both; neither the map nor the
	// slices are ever changed in place.
	xattrEnc   []byte
	xattrNames []string
	// Parent and Name are the directory and name the inode was last given
	// (valid when HasParent): they turn an inode back into a path, so that
	// what a layer changed can be listed by path without walking the tree.
	// A file with several names keeps the newest.
	Parent    uint64
	Name      string
	HasParent bool
	// ParentOrigin is the base path of Parent when Parent is a base
	// directory, so a view that has no record of it can still find it.
	ParentOrigin string
}

const inodeVersion = 1

func (n *Inode) clone() *Inode {
	c := *n
	if n.Xattrs != nil {
		c.Xattrs = make(map[string][]byte, len(n.Xattrs))
		for k, v := range n.Xattrs {
			c.Xattrs[k] = append([]byte(nil), v...)
		}
	}
	return &c
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// encodeInode is the stored form of an Inode: a version byte and varints.
func encodeInode(n *Inode) []byte {
	b := make([]byte, 0, 64+len(n.Target)+len(n.Origin))
	b = append(b, inodeVersion)
	var flags uint64
	if n.HasOrigin {
		flags |= 1
	}
	if n.XattrsSet {
		flags |= 2
	}
	if n.HasParent {
		flags |= 4
	}
	if n.Btime != 0 {
		flags |= 8
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, uint64(n.Mode))
	b = binary.AppendUvarint(b, uint64(n.UID))
	b = binary.AppendUvarint(b, uint64(n.GID))
	b = binary.AppendUvarint(b, uint64(n.Nlink))
	b = binary.AppendUvarint(b, n.Rdev)
	b = binary.AppendVarint(b, n.Size)
	b = binary.AppendVarint(b, n.Atime)
	b = binary.AppendVarint(b, n.Mtime)
	b = binary.AppendVarint(b, n.Ctime)
	if n.Btime != 0 {
		b = binary.AppendVarint(b, n.Btime)
	}
	b = binary.AppendVarint(b, n.Floor)
	b = appendString(b, n.Target)
	b = appendString(b, n.Origin)
	if n.HasParent {
		b = binary.AppendUvarint(b, n.Parent)
		b = appendString(b, n.Name)
		b = appendString(b, n.ParentOrigin)
	}
	if n.XattrsSet {
		if n.xattrEnc == nil {
			if n.xattrNames == nil {
				n.xattrNames = sortedNames(n.Xattrs)
			}
			n.xattrEnc = encodeXattrs(n.Xattrs, n.xattrNames)
		}
		b = append(b, n.xattrEnc...)
	}
	return b
}

func sortedNames(xs map[string][]byte) []string {
	names := make([]string, 0, len(xs))
	for k := range xs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// encodeXattrs is the stored form of a set of attributes: a count, then
// names and values in name order (names: the set's names, sorted), so
// equal sets encode alike.
func encodeXattrs(xs map[string][]byte, names []string) []byte {
	size := binary.MaxVarintLen64
	for k, v := range xs {
		size += len(k) + len(v) + 2*binary.MaxVarintLen64
	}
	b := make([]byte, 0, size)
	b = binary.AppendUvarint(b, uint64(len(names)))
	for _, k := range names {
		b = appendString(b, k)
		b = appendString(b, string(xs[k]))
	}
	return b
}

// decoder reads what encodeInode and friends wrote; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("truncated varint: %w", ErrCorrupt)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = fmt.Errorf("truncated varint: %w", ErrCorrupt)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u32() uint32 {
	v := d.uvarint()
	if v > 0xffffffff && d.err == nil {
		d.err = fmt.Errorf("value %d out of range: %w", v, ErrCorrupt)
	}
	return uint32(v)
}

func (d *decoder) str() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = fmt.Errorf("string of %d bytes past end: %w", n, ErrCorrupt)
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func decodeInode(b []byte) (*Inode, error) {
	if len(b) == 0 || b[0] != inodeVersion {
		return nil, fmt.Errorf("inode record version: %w", ErrCorrupt)
	}
	d := decoder{b: b[1:]}
	flags := d.uvarint()
	n := &Inode{
		HasOrigin: flags&1 != 0,
		XattrsSet: flags&2 != 0,
		HasParent: flags&4 != 0,
	}
	n.Mode = d.u32()
	n.UID = d.u32()
	n.GID = d.u32()
	n.Nlink = d.u32()
	n.Rdev = d.uvarint()
	n.Size = d.varint()
	n.Atime = d.varint()
	n.Mtime = d.varint()
	n.Ctime = d.varint()
	if flags&8 != 0 {
		n.Btime = d.varint()
	}
	n.Floor = d.varint()
	n.Target = d.str()
	n.Origin = d.str()
	if n.HasParent {
		n.Parent = d.uvarint()
		n.Name = d.str()
		n.ParentOrigin = d.str()
	}
	if n.XattrsSet {
		start := d.b
		cnt := d.uvarint()
		if cnt > uint64(len(d.b)) {
			return nil, fmt.Errorf("xattr count %d: %w", cnt, ErrCorrupt)
		}
		n.Xattrs = make(map[string][]byte, cnt)
		ordered := true
		names := make([]string, 0, cnt)
		for i := uint64(0); i < cnt && d.err == nil; i++ {
			k := d.str()
			n.Xattrs[k] = []byte(d.str())
			ordered = ordered && (i == 0 || k > names[len(names)-1])
			names = append(names, k)
		}
		if d.err == nil && ordered {
			// Stored in name order, the section is its own encoding.
			n.xattrEnc = bytes.Clone(start[:len(start)-len(d.b)])
			n.xattrNames = names
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("inode record: %d trailing bytes: %w", len(d.b), ErrCorrupt)
	}
	if n.Size < 0 {
		return nil, fmt.Errorf("inode record: negative size: %w", ErrCorrupt)
	}
	return n, nil
}

// entry is a stored directory entry; Ino 0 marks a whiteout.
type entry struct {
	Ino  uint64
	Type uint32 // S_IF* bits of the child
}

func encodeEntry(e entry) []byte {
	b := binary.AppendUvarint(make([]byte, 0, 12), e.Ino)
	return binary.AppendUvarint(b, uint64(e.Type))
}

func decodeEntry(b []byte) (entry, error) {
	d := decoder{b: b}
	e := entry{Ino: d.uvarint(), Type: d.u32()}
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("entry: trailing bytes: %w", ErrCorrupt)
	}
	return e, d.err
}

// blockRef says where a block of a file lives inside one layer: the slot in
// that layer's data file, and a CRC-32C for each page of the block. A block
// with no checksums has been written but not sealed yet (only possible in
// the active layer, in memory).
//
// A slot is a run of pages of the data file: Slot is the index of its
// first page and Pages how many it holds, 0 meaning a whole block. A block
// copied up from a short file, or first written near its start, gets a
// short slot, just the pages it needs: slots handed out one after the
// other then lie next to each other in the data file, so the sync a
// checkpoint waits for writes one run of pages, not a page per block with
// a hole after each (on ext4 three times slower). The block's pages past
// its slot read as zeros; a write there moves the block to a larger slot.
type blockRef struct {
	Slot  uint64
	Pages uint32
	CRCs  []uint32
	// open: the slot belongs to the active layer and has not been sealed
	// (stored) yet, so it may be written in place. dirty marks its pages
	// whose checksum is stale; zero (nil: none) its pages known to hold
	// only zeros in the slot, so that a write into part of one knows the
	// whole page and its checksum. None is stored.
	open  bool
	dirty []bool
	zero  []bool
	// rewritten, set on a sealed slot reopened for a write in place
	// (rewrite.go), marks its pages written since: a seal through the
	// intent log records only those. Not stored.
	rewritten []bool
	// alloc: a fallocate allocated the block's slot whole on disk, so the
	// block counts in st_blocks whole, as an allocated extent counts on a
	// local file system, zeros or not. Stored (a flag byte after the
	// checksums), and a copy of the block is allocated whole too.
	alloc bool
	// Home, when set, is the layer whose data file holds the slot: the
	// record's own layer or one below it in its stack, which holds the
	// same content (dedup.go). Only frozen layers' records have one; they
	// take no space of their own.
	Home string
}

// dataLayer is the layer whose data file holds the block of a record
// stored in layer.
func (r *blockRef) dataLayer(layer string) string {
	if r.Home != "" {
		return r.Home
	}
	return layer
}

// The flag byte after a stored blockRef's checksums.
const (
	blockRefAlloc = 1 << iota // alloc is set
	blockRefPaged             // Slot counts pages, not blocks
	blockRefShort             // a uvarint follows: Pages
	blockRefHome              // a uvarint length and Home follow (after Pages)
)

// maxHomeLen bounds a stored Home: a layer id.
const maxHomeLen = 64

func (r blockRef) sealed() bool { return !r.open }

// capPages is how many of the block's pages its slot holds.
func (r *blockRef) capPages() int {
	if r.Pages == 0 {
		return len(r.CRCs)
	}
	return int(r.Pages)
}

// capBytes is how many of the block's bytes its slot holds.
func (r *blockRef) capBytes() int64 { return int64(r.capPages()) * pageSize }

// off is where the slot starts in its layer's data file.
func (r *blockRef) off() int64 { return int64(r.Slot) * pageSize }

// span is the run of pages the slot holds, as the view frees it.
func (r *blockRef) span() slotSpan {
	return slotSpan{r.Slot, uint64(r.capPages())}
}

// slotSpan is a run of pages of a data file: n pages from page at.
type slotSpan struct{ at, n uint64 }

func encodeBlockRef(r blockRef) []byte {
	b := make([]byte, 0, 12+4*len(r.CRCs))
	n := uint64(len(r.CRCs))
	var flags byte
	slot := r.Slot
	switch {
	case r.Pages == 0 && n > 0 && slot%n == 0:
		// A whole block at a block boundary keeps the first layout, in
		// block units, which stores written before short slots hold.
		slot /= n
	case r.Pages == 0:
		flags |= blockRefPaged
	default:
		flags |= blockRefPaged | blockRefShort
	}
	if r.alloc {
		flags |= blockRefAlloc
	}
	if r.Home != "" {
		flags |= blockRefHome
	}
	b = binary.AppendUvarint(b, slot)
	b = binary.AppendUvarint(b, n)
	for _, c := range r.CRCs {
		b = binary.LittleEndian.AppendUint32(b, c)
	}
	if flags != 0 {
		b = append(b, flags)
	}
	if flags&blockRefShort != 0 {
		b = binary.AppendUvarint(b, uint64(r.Pages))
	}
	if r.Home != "" {
		b = binary.AppendUvarint(b, uint64(len(r.Home)))
		b = append(b, r.Home...)
	}
	return b
}

func decodeBlockRef(b []byte) (blockRef, error) {
	d := decoder{b: b}
	r := blockRef{Slot: d.uvarint()}
	n := d.uvarint()
	if d.err != nil {
		return r, d.err
	}
	if n == 0 || n > uint64(len(d.b))/4 {
		return r, fmt.Errorf("block ref: %d checksums in %d bytes: %w", n, len(d.b), ErrCorrupt)
	}
	r.CRCs = make([]uint32, n)
	for i := range r.CRCs {
		r.CRCs[i] = binary.LittleEndian.Uint32(d.b[4*i:])
	}
	tail := d.b[4*n:]
	var flags byte
	if len(tail) > 0 {
		flags, tail = tail[0], tail[1:]
		if flags == 0 || flags&^(blockRefAlloc|blockRefPaged|blockRefShort|blockRefHome) != 0 || flags&blockRefShort != 0 && flags&blockRefPaged == 0 {
			return r, fmt.Errorf("block ref: flags %#x: %w", flags, ErrCorrupt)
		}
	}
	r.alloc = flags&blockRefAlloc != 0
	if flags&blockRefShort != 0 {
		t := decoder{b: tail}
		pages := t.uvarint()
		if t.err != nil || pages == 0 || pages >= n {
			return r, fmt.Errorf("block ref: slot of %d pages for %d: %w", pages, n, ErrCorrupt)
		}
		r.Pages, tail = uint32(pages), t.b
	}
	if flags&blockRefHome != 0 {
		t := decoder{b: tail}
		n := t.uvarint()
		if t.err != nil || n == 0 || n > maxHomeLen || n > uint64(len(t.b)) {
			return r, fmt.Errorf("block ref: home of %d bytes: %w", n, ErrCorrupt)
		}
		r.Home, tail = string(t.b[:n]), t.b[n:]
	}
	if len(tail) != 0 {
		return r, fmt.Errorf("block ref: %d trailing bytes: %w", len(tail), ErrCorrupt)
	}
	if flags&blockRefPaged == 0 {
		if r.Slot > math.MaxUint64/n {
			return r, fmt.Errorf("block ref: slot %d: %w", r.Slot, ErrCorrupt)
		}
		r.Slot *= n
	}
	if r.Slot > math.MaxInt64/pageSize-uint64(r.capPages()) {
		return r, fmt.Errorf("block ref: slot %d past the largest data file: %w", r.Slot, ErrCorrupt)
	}
	return r, nil
}

func jsonUnmarshal(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%v: %w", err, ErrCorrupt)
	}
	return nil
}
