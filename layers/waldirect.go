package layers

import (
	"errors"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// How the intent log reaches the disk.
//
// Written through the page cache, a record cost a write and an
// fdatasync(2) that wrote the dirty pages back and then flushed the
// device: 0.60-0.68 ms on this machine's disk on a slow day, 0.34-0.38 ms
// of it CPU in the kernel. Written with O_DIRECT and RWF_DSYNC, the same
// record is one system call that sends the pages to the device and
// flushes it: 0.29-0.35 ms, 0.17-0.20 ms of CPU (a scratch probe, 300
// records of 4.4 KiB each way, 2026-11-28). In a mount's fsync loop the
// record's write and sync went from 355-485 to 286-396 us (p50), and its
// p90 from 645-1,395 to 383-901 us. Direct I/O writes whole
// pages, so the log keeps the page its end falls in (tail) and the
// records appended since its last write (pend), which unsynced appends
// no longer write at all: a kill -9 loses nothing that way that a replay
// needs (their commits were made), and the next synced record writes them
// before it, so the records still follow one another. A file system
// that refuses O_DIRECT gets the page cache and fdatasync.

// walAlign is the alignment of the log's direct writes: their offsets,
// lengths and buffers.
const walAlign = 4096

// directLog is the part of walLog that writes it with O_DIRECT.
type directLog struct {
	mu      sync.Mutex // held across a write: an append waits for it
	fd      int        // O_DIRECT descriptor of the log; -1: none
	pendAt  int64      // where pend starts in the log: the end of what is written
	pend    []byte
	tail    []byte // the page pendAt falls in, as written
	buf     []byte // aligned scratch for writes
	noDsync bool   // the kernel refused RWF_DSYNC: pwrite and fdatasync

	aio      uint64    // the context of asynchronous writes; 0: none
	inflight *aioWrite // the asynchronous write not reaped yet
}

// walDirectOff, set by a test, keeps the intent log in the page cache.
var walDirectOff bool

// openDirect opens path for the log's direct writes, when the file system
// allows them.
func (d *directLog) openDirect(path string) {
	d.fd = -1
	if walDirectOff {
		return
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	d.fd = fd
	d.tail = make([]byte, walAlign)
	d.setupAIO()
}

// direct reports whether the log is written with O_DIRECT.
func (d *directLog) direct() bool { return d.fd >= 0 }

// closeDirect closes the direct descriptor.
func (d *directLog) closeDirect() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.destroyAIO()
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
}

// resetDirect starts the log again at its start (a new cycle).
func (d *directLog) resetDirect() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reapLocked()
	d.pendAt, d.pend = 0, d.pend[:0]
	clear(d.tail)
}

// appendAt appends b, unsynced, at offset at of the log (f: its page
// cache descriptor), which is the log's end.
func (d *directLog) appendAt(f *os.File, b []byte, at int64) error {
	if !d.direct() {
		_, err := f.WriteAt(b, at)
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reapLocked()
	if at != d.pendAt+int64(len(d.pend)) {
		return errors.New("intent log: an append away from its end")
	}
	d.pend = append(d.pend, b...)
	return nil
}

// writeSync writes b at offset at of the log and makes it durable, with
// every record appended before it; fault, when it fails, leaves the
// write made and unsynced (as a failed fdatasync would). At the log's
// end it is an append; elsewhere (erasing a refused record) the pages
// around b are read back first.
func (d *directLog) writeSync(f *os.File, b []byte, at int64, fault func() error) error {
	if !d.direct() {
		if len(b) > 0 {
			if _, err := f.WriteAt(b, at); err != nil {
				return err
			}
		}
		if err := fault(); err != nil {
			return err
		}
		return fdatasync(f)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reapLocked()
	if at != d.pendAt+int64(len(d.pend)) {
		if len(d.pend) > 0 {
			if err := d.writeLocked(d.pendAt, d.pend, nil, noFault); err != nil {
				return err
			}
		}
		return d.rewriteLocked(f, b, at, fault)
	}
	return d.writeLocked(d.pendAt, d.pend, b, fault)
}

// writeLocked writes pend and then b at offset at, the log's end, from
// the start of the page at falls in, and syncs them; on success they are
// the log's new end.
func (d *directLog) writeLocked(at int64, pend, b []byte, fault func() error) error {
	buf, start := d.fillLocked(at, pend, b)
	if err := d.pwriteSync(buf, start, fault); err != nil {
		return err
	}
	d.wroteLocked(start, buf, at+int64(len(pend)+len(b)))
	return nil
}

// fillLocked lays out in the scratch buffer pend and then b at offset at,
// the log's end, after what the log holds before at in its page: the
// whole pages a direct write of them writes, and where they start.
func (d *directLog) fillLocked(at int64, pend, b []byte) ([]byte, int64) {
	start := at &^ (walAlign - 1)
	n := int(at-start) + len(pend) + len(b)
	buf := d.scratch(n)
	copy(buf, d.tail[:at-start])
	copy(buf[at-start:], pend)
	copy(buf[int(at-start)+len(pend):], b)
	clear(buf[n:])
	return buf, start
}

// wroteLocked follows the write of buf (from fillLocked) at start: end is
// the log's end now, and the page it falls in is kept.
func (d *directLog) wroteLocked(start int64, buf []byte, end int64) {
	if last := end &^ (walAlign - 1); last-start < int64(len(buf)) {
		copy(d.tail, buf[last-start:last-start+walAlign])
	} else {
		clear(d.tail)
	}
	d.pendAt, d.pend = end, d.pend[:0]
}

// rewriteLocked writes b at offset at, before the log's end, keeping the
// rest of the pages it falls in, and syncs it.
func (d *directLog) rewriteLocked(f *os.File, b []byte, at int64, fault func() error) error {
	start := at &^ (walAlign - 1)
	n := int(at-start) + len(b)
	buf := d.scratch(n)
	// The page cache holds none of what direct writes wrote: the read
	// goes to the disk.
	if err := readFull(f, buf, start); err != nil {
		return err
	}
	copy(buf[at-start:], b)
	if err := d.pwriteSync(buf, start, fault); err != nil {
		return err
	}
	if tp := d.pendAt &^ (walAlign - 1); tp >= start && tp-start < int64(len(buf)) {
		copy(d.tail, buf[tp-start:tp-start+walAlign])
	}
	return nil
}

// pwriteSync writes buf at off with the direct descriptor and syncs it:
// one pwritev2 with RWF_DSYNC, or a pwrite and an fdatasync where the
// kernel refuses that flag.
func (d *directLog) pwriteSync(buf []byte, off int64, fault func() error) error {
	if len(buf) == 0 {
		return fault()
	}
	if err := fault(); err != nil {
		// As a failed sync leaves it: written, perhaps not durable.
		_, _ = unix.Pwrite(d.fd, buf, off)
		return err
	}
	if !d.noDsync {
		n, err := unix.Pwritev2(d.fd, [][]byte{buf}, off, unix.RWF_DSYNC)
		switch {
		case errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP):
			d.noDsync = true
		case err != nil:
			return err
		case n != len(buf):
			return errors.New("intent log: a short write")
		default:
			return nil
		}
	}
	n, err := unix.Pwrite(d.fd, buf, off)
	if err != nil {
		return err
	}
	if n != len(buf) {
		return errors.New("intent log: a short write")
	}
	return unix.Fdatasync(d.fd)
}

// noFault is a fault hook that never fails.
func noFault() error { return nil }

// scratch is an aligned buffer of at least n bytes, in whole pages.
func (d *directLog) scratch(n int) []byte {
	size := (n + walAlign - 1) &^ (walAlign - 1)
	if cap(d.buf) < size {
		raw := make([]byte, size+walAlign)
		skip := (walAlign - int(uintptr(unsafe.Pointer(&raw[0]))&(walAlign-1))) & (walAlign - 1)
		d.buf = raw[skip : skip+size]
	}
	return d.buf[:size]
}
