package layers

import (
	"encoding/binary"
	"errors"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A record that a checkpoint or a rollback writes to the intent log
// (commitBehind) is written while the transaction commits and the view
// moves onto the new stack. Handed to a goroutine, its write started
// 0.1-1.5 ms late: the goroutine waited for the other CPU's idle thread
// to wake, or for the caller to block on its result (traced in
// BenchmarkCheckpointRollbackAfterPause, 2026-11-28), and the record's
// write and sync, 0.3-0.5 ms, is most of a checkpoint. Submitted to the
// kernel's asynchronous I/O (io_submit(2) of a direct write with
// RWF_DSYNC), it starts at once on the caller's CPU, which goes on with
// the commit, and is reaped where the caller waits for it.

// aioWrite is a direct write of the log in flight.
type aioWrite struct {
	done bool
	err  error
	end  int64 // the log's end once it is written
	n    int   // the bytes written, from the start of end's first page
}

// iocb is the kernel's struct iocb (linux/aio_abi.h) on a little-endian
// machine.
type iocb struct {
	_       uint64 // aio_data
	_       uint32 // aio_key
	rwFlags uint32
	opcode  uint16
	_       int16 // aio_reqprio
	fildes  uint32
	buf     uint64
	nbytes  uint64
	offset  int64
	_       uint64 // aio_reserved2
	_       uint32 // aio_flags
	_       uint32 // aio_resfd
}

// ioEvent is the kernel's struct io_event.
type ioEvent struct {
	_   uint64 // data
	_   uint64 // obj
	res int64
	_   int64 // res2
}

// The kernel's sizes of both: a layout that differs does not build.
var (
	_ [unsafe.Sizeof(iocb{}) - 64]byte
	_ [64 - unsafe.Sizeof(iocb{})]byte
	_ [unsafe.Sizeof(ioEvent{}) - 32]byte
	_ [32 - unsafe.Sizeof(ioEvent{})]byte
)

// iocbCmdPwrite is IOCB_CMD_PWRITE.
const iocbCmdPwrite = 1

// aioRWFlags are the flags of the log's asynchronous writes; a test sets
// flags the kernel refuses, as an older kernel refuses RWF_DSYNC there.
var aioRWFlags uint32 = unix.RWF_DSYNC

// walAIOOff, set by a test, makes the log's writes behind a commit go
// through a goroutine, as where the kernel has no asynchronous I/O.
var walAIOOff bool

// setupAIO makes the log's context for asynchronous writes; without one
// (a kernel that refuses it, a big-endian machine whose struct iocb is
// laid out otherwise) a write behind a commit runs in a goroutine.
func (d *directLog) setupAIO() {
	d.aio = 0
	if walAIOOff || binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		return
	}
	var ctx uint64
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); e != 0 {
		return
	}
	d.aio = ctx
}

// destroyAIO waits for a write in flight and frees the context.
func (d *directLog) destroyAIO() {
	if d.aio == 0 {
		return
	}
	d.reapLocked()
	unix.Syscall(unix.SYS_IO_DESTROY, uintptr(d.aio), 0, 0)
	d.aio = 0
}

// writeSyncBehind is writeSync started now and finished by the function it
// returns, which reports its error: the caller goes on meanwhile. Only an
// append at the log's end goes to the kernel's asynchronous I/O; every
// other write is made by a goroutine, as before.
func (d *directLog) writeSyncBehind(f *os.File, b []byte, at int64, fault func() error) func() error {
	if w := d.submit(b, at, fault); w != nil {
		return func() error {
			d.mu.Lock()
			defer d.mu.Unlock()
			if !w.done {
				d.reapLocked()
			}
			return w.err
		}
	}
	wrote := make(chan error, 1)
	go func() { wrote <- d.writeSync(f, b, at, fault) }()
	return func() error { return <-wrote }
}

// submit submits the write of pend and then b at the log's end, at, with
// RWF_DSYNC; it returns nil, having done nothing, when the log cannot
// take it that way. A write whose fault fails is made, unsynced, at once,
// and returned done.
func (d *directLog) submit(b []byte, at int64, fault func() error) *aioWrite {
	if !d.direct() || d.noDsync || d.aio == 0 {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reapLocked()
	if at != d.pendAt+int64(len(d.pend)) {
		return nil
	}
	buf, start := d.fillLocked(d.pendAt, d.pend, b)
	if err := fault(); err != nil {
		// As a failed sync leaves it: written, perhaps not durable.
		_, _ = unix.Pwrite(d.fd, buf, start)
		return &aioWrite{done: true, err: err}
	}
	cb := iocb{
		opcode: iocbCmdPwrite, rwFlags: aioRWFlags, fildes: uint32(d.fd),
		buf: uint64(uintptr(unsafe.Pointer(&buf[0]))), nbytes: uint64(len(buf)), offset: start,
	}
	p := &cb
	for {
		r, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, uintptr(d.aio), 1, uintptr(unsafe.Pointer(&p)))
		switch {
		case e == unix.EINTR || e == unix.EAGAIN:
			continue
		case e == unix.EINVAL || e == unix.ENOSYS || e == unix.EOPNOTSUPP:
			// A kernel without RWF_DSYNC for asynchronous writes: the
			// plain way from now on.
			unix.Syscall(unix.SYS_IO_DESTROY, uintptr(d.aio), 0, 0)
			d.aio = 0
			return nil
		case e != 0 || r != 1:
			// The plain way tells what is wrong.
			return nil
		}
		break
	}
	w := &aioWrite{end: at + int64(len(b)), n: len(buf)}
	d.inflight = w
	return w
}

// reapLocked waits for the write in flight, if there is one, and moves
// the log's end past it when it succeeded.
func (d *directLog) reapLocked() {
	w := d.inflight
	if w == nil {
		return
	}
	d.inflight = nil
	w.done = true
	var ev ioEvent
	var r uintptr
	var e unix.Errno
	for {
		r, _, e = unix.Syscall6(unix.SYS_IO_GETEVENTS, uintptr(d.aio), 1, 1, uintptr(unsafe.Pointer(&ev)), 0, 0)
		if e != unix.EINTR {
			break
		}
	}
	switch {
	case e != 0:
		w.err = e
	case r != 1:
		w.err = errors.New("intent log: no completion of a write")
	case ev.res < 0:
		w.err = unix.Errno(-ev.res)
	case ev.res != int64(w.n):
		w.err = errors.New("intent log: a short write")
	}
	if w.err == nil {
		d.wroteLocked(d.pendAt&^(walAlign-1), d.buf[:w.n], w.end)
	}
}
