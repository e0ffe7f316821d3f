package layers

// The intent log: an fsync(2) in one device flush.
//
// A Sync that syncs the data file and then badger's log makes two device
// flushes in a row, and they must come in that order (a record that
// reached the disk before its data would read as damage). A mounted
// sandbox therefore keeps an intent log, wal/<sandbox> in the store: a
// file written full of zeros once, so that writing over it allocates
// nothing and its fdatasync is a data write and one flush. Every journal
// commit of the view appends what it committed (a record, unsynced); a
// Sync with little sealed data (walMaxData) appends the sealed blocks'
// pages with their records, fdatasyncs the log, and only then commits
// the records to badger, whose log and the data file are synced later
// (the idle sync, the 5 s tick, a checkpoint, an unmount).
//
// Records carry a number (seq) and the cycle they belong to: the log is
// written from its start again (a new cycle) once a Sync made the data
// files and badger's log durable with nothing committed meanwhile. Every
// commit stores, under w/<sandbox>, the number of its record and the
// number up to which the records' data is synced in the data files. On
// opening the store, the records of the cycle that follow one another
// from the log's start are read: the operations of those past the
// committed number are committed again, in order, and then the data of
// those past the synced number is written into the data files, each page
// only where the committed record of its block names its slot and
// expects its checksum (replayWalData).
//
// A seal's data travels with its operations: whichever commit takes them
// logs the data with them or, a full one, has synced it (sealedData); a
// commit through the log never takes the operations of a seal whose data
// only a full Sync still in progress will sync (fullHolds).

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

const (
	// walMaxData bounds the sealed data a Sync writes into the log;
	// more is synced in the data file itself.
	walMaxData = 256 << 10
	// walCarryData bounds the unsynced sealed data a checkpoint's or
	// rollback's record carries in place of a data sync. The data file's
	// writeback starts with the writes (View.writeback) and the log's
	// copy of the pages does not, so a large carry costs more than the
	// sync it saves: 100 pages (400 KiB) took 1.5-2.5 ms to write and
	// sync in the log here, against 0.3-0.5 ms for the data file.
	walCarryData = 128 << 10
	walMagic     = 0x4c415753 // "SWAL"
	// walHeader: magic, payload length, cycle, seq, checksum.
	walHeader = 4 + 4 + 8 + 8 + 4
)

var walTable = crc32.MakeTable(crc32.Castagnoli)

// walSize is the intent log's size; a record that does not fit makes
// that Sync a full one, after which the log starts again. A variable for
// tests that fill it.
var walSize int64 = 4 << 20

// tWal keys w/<sandbox>: the last record committed and the last whose
// data is synced (two big-endian uint64).
const tWal = 'w'

func keyWal(sandbox string) []byte { return append([]byte{tWal, '/'}, sandbox...) }

func (s *Store) walPath(sandbox string) string { return filepath.Join(s.dir, "wal", sandbox) }

// walSeg is data to write into a layer's data file at off: the slot of
// block blk of inode ino, as it was sealed.
type walSeg struct {
	layer    string
	ino, blk uint64
	off      int64
	data     []byte
}

// sealedSlot is a slot a seal sealed, with its block.
type sealedSlot struct {
	ino, blk uint64
	span     slotSpan
	whole    bool // span is the whole slot, not pages of a reopened one
}

// walMinSize is the size a layer's data file has at least.
type walMinSize struct {
	layer string
	size  int64
}

// walRec is one record of the intent log.
type walRec struct {
	cycle, seq uint64
	ops        [][]kv
	segs       []walSeg
	sizes      []walMinSize
}

// errWalEnd: no valid record at this place of the log.
var errWalEnd = errors.New("end of the intent log")

func appendBytes(b, p []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// encodeWalRec is r as the log holds it.
func encodeWalRec(r walRec) []byte {
	b := make([]byte, walHeader, walHeader+256)
	b = binary.AppendUvarint(b, uint64(len(r.ops)))
	for _, op := range r.ops {
		b = binary.AppendUvarint(b, uint64(len(op)))
		for _, e := range op {
			if e.del {
				b = append(b, 1)
				b = appendBytes(b, e.key)
				continue
			}
			b = append(b, 0)
			b = appendBytes(b, e.key)
			b = appendBytes(b, e.val)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(r.segs)))
	for _, sg := range r.segs {
		b = appendBytes(b, []byte(sg.layer))
		b = binary.AppendUvarint(b, sg.ino)
		b = binary.AppendUvarint(b, sg.blk)
		b = binary.AppendUvarint(b, uint64(sg.off))
		b = appendBytes(b, sg.data)
	}
	b = binary.AppendUvarint(b, uint64(len(r.sizes)))
	for _, sz := range r.sizes {
		b = appendBytes(b, []byte(sz.layer))
		b = binary.AppendUvarint(b, uint64(sz.size))
	}
	binary.LittleEndian.PutUint32(b[0:], walMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-walHeader))
	binary.LittleEndian.PutUint64(b[8:], r.cycle)
	binary.LittleEndian.PutUint64(b[16:], r.seq)
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[8:24], walTable)^crc32.Checksum(b[walHeader:], walTable))
	return b
}

// decodeWalRec reads the record at the start of b and how many bytes it
// takes; errWalEnd when none is there (zeros, a torn or damaged one).
func decodeWalRec(b []byte) (walRec, int, error) {
	var r walRec
	if len(b) < walHeader || binary.LittleEndian.Uint32(b) != walMagic {
		return r, 0, errWalEnd
	}
	n := int(binary.LittleEndian.Uint32(b[4:]))
	if n > len(b)-walHeader {
		return r, 0, errWalEnd
	}
	payload := b[walHeader : walHeader+n]
	if crc32.Checksum(b[8:24], walTable)^crc32.Checksum(payload, walTable) != binary.LittleEndian.Uint32(b[24:]) {
		return r, 0, errWalEnd
	}
	r.cycle, r.seq = binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:])
	d := decoder{b: payload}
	bytesOf := func() []byte {
		l := d.uvarint()
		if d.err != nil || l > uint64(len(d.b)) {
			d.err = ErrCorrupt
			return nil
		}
		p := d.b[:l:l]
		d.b = d.b[l:]
		return p
	}
	count := func() int {
		c := d.uvarint()
		if d.err != nil || c > uint64(len(d.b)) {
			d.err = ErrCorrupt
			return 0
		}
		return int(c)
	}
	for range count() {
		op := make([]kv, count())
		for i := range op {
			if len(d.b) == 0 {
				d.err = ErrCorrupt
				break
			}
			del := d.b[0]
			d.b = d.b[1:]
			switch del {
			case 1:
				op[i] = kv{key: bytesOf(), del: true}
			case 0:
				op[i] = kv{key: bytesOf()}
				op[i].val = bytesOf()
			default:
				d.err = ErrCorrupt
			}
		}
		r.ops = append(r.ops, op)
	}
	for range count() {
		layer := string(bytesOf())
		ino, blk, off := d.uvarint(), d.uvarint(), d.uvarint()
		r.segs = append(r.segs, walSeg{layer: layer, ino: ino, blk: blk, off: int64(off), data: bytesOf()})
		if off > MaxFileSize {
			d.err = ErrCorrupt
		}
	}
	for range count() {
		layer := string(bytesOf())
		size := d.uvarint()
		r.sizes = append(r.sizes, walMinSize{layer: layer, size: int64(size)})
		if size > MaxFileSize {
			d.err = ErrCorrupt
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return walRec{}, 0, errWalEnd
	}
	for _, sg := range r.segs {
		if !validLayerName(sg.layer) {
			return walRec{}, 0, errWalEnd
		}
	}
	for _, sz := range r.sizes {
		if !validLayerName(sz.layer) {
			return walRec{}, 0, errWalEnd
		}
	}
	return r, walHeader + n, nil
}

// validLayerName: a layer id, which names a data file (no path).
func validLayerName(s string) bool {
	if s == "" || len(s) > maxHomeLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') {
			return false
		}
	}
	return true
}

// walCycle reads the records of the log's current cycle that follow one
// another from its start, record by record: a log whose start holds none
// (a clean unmount zeroes it) costs one small read.
func walCycle(r io.ReaderAt, size int64) []walRec {
	var recs []walRec
	var hdr [walHeader]byte
	for off := int64(0); off+walHeader <= size; {
		if _, err := r.ReadAt(hdr[:], off); err != nil {
			break
		}
		n := int64(binary.LittleEndian.Uint32(hdr[4:]))
		if binary.LittleEndian.Uint32(hdr[:]) != walMagic || n > size-off-walHeader {
			break
		}
		b := make([]byte, walHeader+n)
		if _, err := r.ReadAt(b, off); err != nil {
			break
		}
		rec, _, err := decodeWalRec(b)
		if err != nil {
			break
		}
		if len(recs) > 0 && (rec.cycle != recs[0].cycle || rec.seq != recs[len(recs)-1].seq+1) {
			break
		}
		recs = append(recs, rec)
		off += walHeader + n
	}
	return recs
}

func encodeWalMark(committed, synced uint64) []byte {
	b := binary.BigEndian.AppendUint64(nil, committed)
	return binary.BigEndian.AppendUint64(b, synced)
}

func decodeWalMark(b []byte) (committed, synced uint64, err error) {
	if len(b) != 16 {
		return 0, 0, fmt.Errorf("intent log mark of %d bytes: %w", len(b), ErrCorrupt)
	}
	return binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:]), nil
}

// walMark reads sandbox's mark in txn; none is (0, 0).
func walMark(txn dbTxn, sandbox string) (committed, synced uint64, err error) {
	item, err := txn.Get(keyWal(sandbox))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	err = item.Value(func(v []byte) error {
		committed, synced, err = decodeWalMark(v)
		return err
	})
	return committed, synced, err
}

// recoverWALs replays the intent logs a process that held the store left
// (see the top of this file), before anything reads the store. It runs
// before the inode sequence is read: the lease is moved past every inode
// number a replayed record holds.
func (s *Store) recoverWALs() error {
	ents, err := os.ReadDir(filepath.Join(s.dir, "wal"))
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil // no logs (a file in the way keeps views from making any)
	}
	if err != nil {
		return fmt.Errorf("intent logs: %w", mapOSErr(err))
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue // not a log this package made
		}
		if err := s.recoverWAL(e.Name()); err != nil {
			return fmt.Errorf("intent log of %s: %w", e.Name(), err)
		}
	}
	return nil
}

// walState reads what the store holds of sandbox's log: whether the
// sandbox exists, and its mark.
func (s *Store) walState(sandbox string) (exists bool, committed, synced uint64, err error) {
	err = s.view(func(txn *badger.Txn) error {
		if _, err := txn.Get(keySandbox(sandbox)); errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		exists = true
		committed, synced, err = walMark(txn, sandbox)
		return err
	})
	return exists, committed, synced, err
}

func (s *Store) recoverWAL(sandbox string) error {
	path := filepath.Join(s.dir, "wal", sandbox)
	exists, committed, synced, err := s.walState(sandbox)
	switch {
	case errors.Is(err, ErrCorrupt):
		// What the log holds cannot be placed: it stays as it is (a
		// view of the sandbox then syncs the full way), and the store
		// opens with what badger and the data files hold.
		return nil
	case err != nil:
		return err
	case !exists:
		// The sandbox was removed (its log goes after its record).
		_ = os.Remove(path)
		return nil
	}
	lf, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return mapOSErr(err)
	}
	defer lf.Close()
	fi, err := lf.Stat()
	if err != nil {
		return mapOSErr(err)
	}
	// Records past the committed one count only when they follow it: a
	// cycle may begin past commits badger never made durable (the log
	// serves no Sync until they are, but a record appended meanwhile may
	// reach the disk).
	var recs []walRec
	next := committed + 1
	for _, r := range walCycle(lf, fi.Size()) {
		if r.seq > committed {
			if r.seq != next {
				break
			}
			next++
		}
		recs = append(recs, r)
	}
	last := next - 1
	if last > synced {
		// The operations first: the data is written only where the
		// records then committed expect it.
		if err := s.replayWalOps(recs, committed); err != nil {
			return err
		}
		if err := s.replayWalData(recs, synced); err != nil {
			return err
		}
		if err := s.markWALPlaced(sandbox, last); err != nil {
			return err
		}
	}
	// Every record's data is synced and committed: the next opening of
	// the store need not read them.
	return clearWAL(lf)
}

// replayWalData writes the data of the records past synced into the data
// files, makes the files at least as large as they say, and syncs them.
// A page is written only where the committed record of its block names
// its slot and expects its checksum: a record's bytes for a slot that was
// freed and used again since (whose own bytes a later record, or a data
// sync a mark did not tell of, holds) are left out, so no replay can put
// old bytes under a newer block. A layer that is gone keeps nothing (its
// data file is not made again); the active layer's data file may have
// been lost with the rename that made it, and is.
func (s *Store) replayWalData(recs []walRec, synced uint64) error {
	files := map[string]*os.File{}
	var first error
	keep := func(err error) {
		if first == nil && err != nil {
			first = mapOSErr(err)
		}
	}
	file := func(layer string) *os.File {
		f, seen := files[layer]
		if seen {
			return f
		}
		files[layer] = nil
		err := s.view(func(txn *badger.Txn) error {
			_, err := txn.Get(keyLayer(layer))
			return err
		})
		if err == nil {
			f, err = os.OpenFile(s.dataPath(layer), os.O_RDWR|os.O_CREATE, 0o600)
			files[layer] = f
		}
		if !errors.Is(err, badger.ErrKeyNotFound) {
			keep(err)
		}
		return f
	}
	for _, r := range recs {
		if r.seq <= synced {
			continue
		}
		for _, sz := range r.sizes {
			if f := file(sz.layer); f != nil {
				if fi, err := f.Stat(); err != nil || fi.Size() < sz.size {
					keep(errors.Join(err, f.Truncate(sz.size)))
				}
			}
		}
		for _, sg := range r.segs {
			f := file(sg.layer)
			if f == nil {
				continue
			}
			ref, p0, err := s.committedRef(sg)
			keep(err)
			for p := 0; ref != nil && p0+p < len(ref.CRCs) && (p+1)*pageSize <= len(sg.data); p++ {
				page := sg.data[p*pageSize : (p+1)*pageSize]
				if crc32.Checksum(page, castagnoli()) == ref.CRCs[p0+p] {
					_, err := f.WriteAt(page, sg.off+int64(p)*pageSize)
					keep(err)
				}
			}
		}
	}
	for _, f := range files {
		if f != nil {
			if first == nil {
				keep(fdatasync(f))
			}
			f.Close()
		}
	}
	return first
}

// committedRef is the committed record of sg's block when its slot, in
// sg's layer's own data file, holds sg (from its first page, or from a
// later one for the pages of a slot rewritten in place: rewrite.go), and
// the page of the block sg starts at; nil otherwise.
func (s *Store) committedRef(sg walSeg) (*blockRef, int, error) {
	var ref *blockRef
	p0 := 0
	err := s.view(func(txn *badger.Txn) error {
		item, err := txn.Get(keyBlock(sg.layer, sg.ino, sg.blk))
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error {
			r, err := decodeBlockRef(v)
			if err != nil || r.Home != "" || sg.off < r.off() || sg.off >= r.off()+r.capBytes() || (sg.off-r.off())%pageSize != 0 {
				return nil
			}
			ref, p0 = &r, int((sg.off-r.off())/pageSize)
			return nil
		})
	})
	return ref, p0, err
}

// replayWalOps commits the operations of the records past committed, in
// order, and moves the inode lease past every inode number they hold (its
// own commit was never synced).
func (s *Store) replayWalOps(recs []walRec, committed uint64) error {
	var maxIno uint64 // the lease the replayed numbers need
	for _, r := range recs {
		if r.seq <= committed {
			continue
		}
		for _, op := range r.ops {
			for _, e := range op {
				if len(e.key) != 2+26+1+8 || e.key[0] != tInode || e.del {
					continue
				}
				// Numbers of inodes made in layers (nextIno); base
				// files' numbers are the host's.
				if ino := binary.BigEndian.Uint64(e.key[len(e.key)-8:]); ino >= upperInoBase {
					maxIno = max(maxIno, ino-upperInoBase+1)
				}
			}
		}
		if err := replayWalRec(s.db, r); err != nil {
			return err
		}
	}
	err := s.update(func(txn *badger.Txn) error {
		lease := uint64(0)
		item, err := txn.Get(inoSeqKey)
		if err == nil {
			err = item.Value(func(v []byte) error {
				if len(v) == 8 {
					lease = binary.BigEndian.Uint64(v)
				}
				return nil
			})
		}
		if errors.Is(err, badger.ErrKeyNotFound) {
			err = nil
		}
		if err == nil && maxIno > lease {
			err = txn.Set(inoSeqKey, binary.BigEndian.AppendUint64(nil, maxIno))
		}
		return err
	})
	return mapOSErr(err)
}

// markWALPlaced stores, once the replay's operations are committed and its
// data synced, the mark that says every record up to last is in place,
// and syncs badger's logs.
func (s *Store) markWALPlaced(sandbox string, last uint64) error {
	err := s.update(func(txn *badger.Txn) error {
		return txn.Set(keyWal(sandbox), encodeWalMark(last, last))
	})
	if err == nil {
		err = s.syncLogs()
	}
	return mapOSErr(err)
}

// clearWAL zeroes the start of an intent log whose records are all in
// place, so the next opening of the store finds none at once. It needs
// no sync: records that stay are replayed no further than the mark says.
func clearWAL(f *os.File) error {
	var zero [walHeader]byte
	_, err := f.WriteAt(zero[:], 0)
	return mapOSErr(err)
}

// replayWalRec commits r's operations, in as many transactions as they
// need.
func replayWalRec(db *badger.DB, r walRec) error {
	_, err := commitBatches(db, r.ops, nil, nil)
	return err
}

// commitBatches commits ops in order, as many to a transaction as fit but
// never splitting one. head, when set, writes its own keys first into
// every transaction (their number is given); done, when set, runs after
// each commit with the operations it took. It returns how many operations
// it committed, which are all of them unless it fails.
func commitBatches(db *badger.DB, ops [][]kv, head func(txn *badger.Txn) error, done func(from, to int)) (int, error) {
	for i := 0; i < len(ops); {
		fill := func(txn *badger.Txn, to int) (int, error) {
			if head != nil {
				if err := head(txn); err != nil {
					return i, err
				}
			}
			for k := i; k < to; k++ {
				if err := applyOp(txn, ops[k]); err != nil {
					return k, err
				}
			}
			return to, nil
		}
		txn := db.NewTransaction(true)
		j, err := fill(txn, len(ops))
		if errors.Is(err, badger.ErrTxnTooBig) && j > i {
			// The operation that did not fit goes into the next one.
			txn.Discard()
			txn = db.NewTransaction(true)
			j, err = fill(txn, j)
		}
		if err == nil {
			err = txn.Commit()
		}
		txn.Discard()
		if err != nil {
			return i, mapOSErr(err)
		}
		if done != nil {
			done(i, j)
		}
		i = j
	}
	return len(ops), nil
}

// walLog is a live view's intent log; guarded by the view's cmu.
type walLog struct {
	f *os.File
	directLog
	off   int64
	cycle uint64
	// usable: the log is written full and every commit since the cycle
	// began has its record; else Syncs are full ones until one lets the
	// log start again.
	usable  bool
	dirty   bool // records were appended since the log's last sync
	closing bool // the view is closing: the log does not start again
}

// newCycle is a cycle number not used before (random: the log's earlier
// records need not be read to find one).
func newCycle() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// openWAL opens the view's intent log, creating it written full of zeros
// (once per sandbox: a few milliseconds) when the file system has room
// for it beyond the metadata reserve (checkSpace); without it every Sync
// is a full one.
func (v *View) openWAL() error {
	if err := os.MkdirAll(filepath.Join(v.s.dir, "wal"), 0o700); err != nil {
		return mapOSErr(err)
	}
	f, err := os.OpenFile(v.s.walPath(v.info.Name), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return mapOSErr(err)
	}
	fail := func(err error) error {
		f.Close()
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(mapOSErr(err))
	}
	if fi.Size() < walSize {
		var fs unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
			return fail(mapOSErr(err))
		}
		total, free := fs.Blocks*uint64(fs.Bsize), fs.Bavail*uint64(fs.Bsize)
		if free < metaReserve(total)+4*uint64(walSize) {
			return fail(fmt.Errorf("intent log: %w", ErrNoSpace))
		}
		if err := writeZeros(f, 0, walSize); err != nil {
			return fail(mapOSErr(err))
		}
		if err := fdatasync(f); err != nil {
			return fail(mapOSErr(err))
		}
	}
	var committed uint64
	if err := v.s.view(func(txn *badger.Txn) error {
		var err error
		committed, _, err = walMark(txn, v.info.Name)
		return err
	}); err != nil {
		return fail(err)
	}
	v.wal = &walLog{f: f}
	v.wal.openDirect(v.s.walPath(v.info.Name))
	// Opening the store replayed what a crash left, and synced it.
	v.walSeq.Store(committed)
	v.walSynced.Store(committed)
	v.restartWALLocked()
	return nil
}

// restartWALLocked starts a new cycle at the log's start. The caller holds
// cmu, and every record of the old cycle is committed and its data synced.
func (v *View) restartWALLocked() {
	w := v.wal
	if w.closing {
		return
	}
	w.off, w.cycle, w.usable, w.dirty = 0, newCycle(), true, false
	w.resetDirect()
	// The commits before the cycle have no record in it: the log serves
	// a Sync once they are durable.
	v.walUnlogd.Store(v.s.commits.Load())
	v.walOn.Store(true)
}

// walAppendLocked appends the record of operations just committed as
// number seq, unsynced. A log that cannot take it is not used until it
// starts again.
func (v *View) walAppendLocked(seq uint64, ops [][]kv) {
	w := v.wal
	if w == nil || !w.usable {
		return
	}
	b := encodeWalRec(walRec{cycle: w.cycle, seq: seq, ops: ops})
	if w.off+int64(len(b)) > walSize {
		v.walStopLocked()
		return
	}
	if err := w.appendAt(w.f, b, w.off); err != nil {
		v.walStopLocked()
		return
	}
	w.off += int64(len(b))
	w.dirty = true
}

// setWALPlaced stores in a quiesce's transaction (a checkpoint's, a
// rollback's) the mark that says every record is committed and its data
// synced: the transaction holds the journal, and the quiesce syncs the
// data file before it commits. The caller holds cmu.
func (v *View) setWALPlaced(txn dbTxn) error {
	if v.wal == nil {
		return nil
	}
	seq := v.walSeq.Load()
	return txn.Set(keyWal(v.info.Name), encodeWalMark(seq, seq))
}

// walPlaced follows the commit of such a transaction: it has no record of
// its own, so the log serves no Sync until it is durable.
func (v *View) walPlaced() {
	v.walUnlogd.Store(v.s.commits.Load())
	v.walSynced.Store(v.walSeq.Load())
}

// walMarkKV is the mark a commit of record seq stores.
func (v *View) walMarkKV(seq uint64) kv {
	return kv{key: keyWal(v.info.Name), val: encodeWalMark(seq, v.walSynced.Load())}
}

// closeWAL closes the intent log. When the caller synced everything
// (synced), the mark says so, and nothing of the log is replayed.
func (v *View) closeWAL(synced bool) error {
	v.cmu.Lock()
	defer v.cmu.Unlock()
	w := v.wal
	if w == nil {
		return nil
	}
	v.wal = nil
	v.walOn.Store(false)
	defer w.f.Close()
	defer w.closeDirect()
	if !synced {
		return nil
	}
	seq := v.walSeq.Load()
	err := v.s.update(func(txn *badger.Txn) error {
		return txn.Set(keyWal(v.info.Name), encodeWalMark(seq, seq))
	})
	if err == nil {
		err = v.s.Sync()
	}
	if err == nil {
		err = clearWAL(w.f)
	}
	return err
}

// walSealedLocked decides, under ioMu and mu after a seal, whether a Sync
// goes through the intent log, and reads what it writes there: the pages
// of the slots the seal sealed, when data was written since the data
// file's last sync (withData), and the size the data file must keep. A
// seal with more than walMaxData of them syncs the data file instead.
func (v *View) walSealedLocked(f *os.File, withData bool) ([]walSeg, []walMinSize, bool) {
	return v.walSealedUpToLocked(f, withData, walMaxData)
}

// walSealedUpToLocked is walSealedLocked with its bound on the data.
func (v *View) walSealedUpToLocked(f *os.File, withData bool, maxData int) ([]walSeg, []walMinSize, bool) {
	if !v.walOn.Load() || f == nil {
		return nil, nil, false
	}
	if !withData {
		return nil, nil, true
	}
	total := 0
	for _, ss := range v.sealedNow {
		total += int(ss.span.n) * pageSize
	}
	if total > maxData {
		return nil, nil, false
	}
	layer := v.activeLayer()
	segs := make([]walSeg, 0, len(v.sealedNow))
	buf := make([]byte, total)
	for _, ss := range v.sealedNow {
		sp := ss.span
		data := buf[: int(sp.n)*pageSize : int(sp.n)*pageSize]
		buf = buf[len(data):]
		if n, err := f.ReadAt(data, int64(sp.at)*pageSize); err != nil && !(errors.Is(err, io.EOF) && n >= 0) {
			return nil, nil, false
		}
		segs = append(segs, walSeg{layer: layer, ino: ss.ino, blk: ss.blk, off: int64(sp.at) * pageSize, data: data})
	}
	return segs, []walMinSize{{layer: layer, size: int64(v.nextPage) * pageSize}}, true
}

// syncLogged is Sync's commit through the intent log: the operations up
// to sealed and the sealed data go into one record, the log is synced
// (the one device flush), and then the operations are committed, the
// data file and badger's log left to later syncs. It reports false when
// the log cannot take them (not usable, too full, a commit of the view's
// records outside it not durable yet, a write or a sync that failed) and
// nothing it took was committed: the caller then syncs the full way.
func (v *View) syncLogged(sealed uint64, leave bool) bool {
	v.cmu.Lock()
	defer v.cmu.Unlock()
	w := v.wal
	if w == nil || !w.usable || v.walUnlogd.Load() > v.s.synced.Load() || v.dataFailed() != nil {
		return false
	}
	// A full Sync that sealed before this one and has not synced its
	// data yet: its operations come first, and this one's data sync
	// covers them. (A hold at or before sealed cannot appear meanwhile:
	// a new one starts past the operations queued so far.)
	if v.fullHoldUpTo(sealed) {
		return false
	}
	// The data sealed with the operations taken, this Sync's and any
	// earlier one's whose operations no commit took yet.
	ops, upto, data := v.takeJournalData(sealed)
	var segs []walSeg
	var sizes []walMinSize
	for _, d := range data {
		segs = append(segs, d.segs...)
		sizes = append(sizes, d.sizes...)
	}
	// What an earlier Fsync left uncommitted is in the log already: a
	// record that leaves its operations too holds only the new ones.
	recOps := ops
	if leave {
		k, _ := v.loggedCount(ops, upto)
		recOps = ops[k:]
	}
	var rec []byte
	seq := v.walSeq.Load() + 1
	if len(recOps) > 0 || len(segs) > 0 {
		rec = encodeWalRec(walRec{cycle: w.cycle, seq: seq, ops: recOps, segs: segs, sizes: sizes})
	}
	fail := func() bool {
		v.putBackJournal(ops, nil)
		v.walStopLocked()
		return false
	}
	if w.off+int64(len(rec)) > walSize {
		return fail()
	}
	if rec != nil || w.dirty {
		if err := v.walWriteSync(w, rec, w.off); err != nil {
			return fail()
		}
	}
	w.off += int64(len(rec))
	w.dirty = false
	if rec == nil {
		v.putBackJournal(ops, nil)
		return true
	}
	if leave {
		// Durable: the operations go back to the journal, in the log up
		// to here, and the journal loop commits them.
		v.walSeq.Store(seq)
		if len(segs) > 0 {
			v.walData.Store(seq)
		}
		v.putBackJournal(ops, nil)
		if len(ops) > 0 {
			v.jmu.Lock()
			v.loggedUpTo, v.loggedSeq = max(v.loggedUpTo, upto), seq
			v.jmu.Unlock()
			select {
			case v.kick <- struct{}{}:
			default:
			}
		}
		return true
	}
	if err := v.commitOpsLocked(ops, seq, nil); err != nil {
		// The record is in the log, its operations back in the
		// journal: the full way syncs the data, then commits them.
		v.walStopLocked()
		return false
	}
	if len(segs) > 0 {
		v.walData.Store(seq)
	}
	v.journalDone(upto)
	return true
}

// walStopLocked takes the intent log out of use until a full sync lets
// it start again (restartWALLocked): it could not take or keep a record.
// The caller holds cmu.
func (v *View) walStopLocked() {
	v.wal.usable = false
	v.walOn.Store(false)
}

// walWriteSync writes rec (when there is one) at offset at of intent log
// w and syncs the log: a data write and one device flush.
func (v *View) walWriteSync(w *walLog, rec []byte, at int64) error {
	return w.writeSync(w.f, rec, at, func() error { return v.s.fault("walsync", v.info.Name) })
}

// walWriteSyncBehind is walWriteSync started now and finished by the
// function it returns.
func (v *View) walWriteSyncBehind(w *walLog, rec []byte, at int64) func() error {
	return w.writeSyncBehind(w.f, rec, at, func() error { return v.s.fault("walsync", v.info.Name) })
}

// walCovered records that a data sync that began after the commit of
// record seq made the data of every record up to it durable.
func (v *View) walCovered(seq uint64) {
	for {
		cur := v.walSynced.Load()
		if cur >= seq || v.walSynced.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// restartWALAfter starts the intent log again after a full Sync whose
// commits up to committed are durable, when nothing was committed since
// and every record's data is synced.
func (v *View) restartWALAfter(committed uint64) {
	v.cmu.Lock()
	defer v.cmu.Unlock()
	v.restartWALAfterLocked(committed)
}

// restartWALAfterLocked is restartWALAfter with cmu held.
func (v *View) restartWALAfterLocked(committed uint64) {
	if v.wal != nil && v.walSeq.Load() == committed && v.walData.Load() <= v.walSynced.Load() {
		v.restartWALLocked()
	}
}

// quiesceLogOff, set by a test, makes every checkpoint and rollback go the
// full way.
var quiesceLogOff bool

// quiesceMayLogLocked tells whether a quiesce may commit through the
// intent log: the log is usable, the view's commits without a record are
// durable, and no full Sync's sealed data waits for its own data sync
// (fullHolds), which the record would not carry. The caller holds mu
// and cmu.
func (v *View) quiesceMayLogLocked() bool {
	w := v.wal
	if quiesceLogOff || w == nil || !w.usable || v.walUnlogd.Load() > v.s.synced.Load() {
		return false
	}
	v.jmu.Lock()
	defer v.jmu.Unlock()
	return len(v.fullHolds) == 0 && v.dataErr == nil
}

// unsealedPagesLocked counts the pages of the slots the next seal seals
// (sealLocked), without sealing them.
func (v *View) unsealedPagesLocked() int {
	n := 0
	for _, st := range v.dirty {
		for b := range st.dirtyBlocks {
			if ref, ok := st.active[b]; ok && !ref.sealed() {
				n += int(ref.span().n)
			}
		}
	}
	return n
}

// addLazyLocked keeps data file f, which a checkpoint or rollback through
// the intent log leaves with its data in the log only, for the next full
// sync (syncLazy). The view closes f when it moves off the layer, so a
// duplicate descriptor is kept (it shares f's write-back errors); when
// none can be made, f is synced now, and that sync's failure (which
// stops the view) is returned.
func (v *View) addLazyLocked(f *os.File) error {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return v.syncData(f)
	}
	v.lzMu.Lock()
	v.lazy = append(v.lazy, os.NewFile(uintptr(fd), f.Name()))
	v.lzMu.Unlock()
	select {
	case v.kick <- struct{}{}: // the idle sync follows soon
	default:
	}
	return nil
}

// syncLazy syncs the data files checkpoints and rollbacks through the
// intent log left (addLazyLocked) and closes them. It runs before a full
// sync's data sync, under the same lock, so that a sync that says every
// record's data is synced (walCovered, setWALPlaced) has synced theirs;
// a failure stops the view as a failed data sync does.
func (v *View) syncLazy() error {
	v.dsMu.Lock()
	defer v.dsMu.Unlock()
	v.lzMu.Lock()
	lz := v.lazy
	v.lazy = nil
	v.lzMu.Unlock()
	var err error
	for _, f := range lz {
		if err == nil {
			err = v.syncDataLocked(f)
		}
		f.Close()
	}
	return err
}

// noLazySync reports whether no data file waits for syncLazy and none is
// being synced by it (the lock it holds while it syncs is free).
func (v *View) noLazySync() bool {
	if !v.dsMu.TryLock() {
		return false
	}
	defer v.dsMu.Unlock()
	v.lzMu.Lock()
	defer v.lzMu.Unlock()
	return len(v.lazy) == 0
}

// syncLazyViews syncs the data files that checkpoints and rollbacks of the
// live views left to a later sync (syncLazy). The passes that drop block
// records and punch or share slots run after it: a replay of the intent
// log writes a slot's pages only where the committed record of its own
// block still names it, which a pass may have changed.
func (s *Store) syncLazyViews() error {
	s.mu.Lock()
	views := make([]*View, 0, len(s.views))
	for _, v := range s.views {
		views = append(views, v)
	}
	s.mu.Unlock()
	for _, v := range views {
		if err := v.syncLazy(); err != nil {
			return err
		}
	}
	return nil
}
