package layers

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// newDirectLog is a log file written full of zeros, as openWAL makes it,
// and its directLog; both are closed when the test ends.
func newDirectLog(t *testing.T) (*os.File, *directLog) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "log")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	ok(t, "create", err)
	t.Cleanup(func() { f.Close() })
	ok(t, "fill", writeZeros(f, 0, walSize))
	d := &directLog{}
	d.openDirect(path)
	t.Cleanup(d.closeDirect)
	return f, d
}

// TestDirectLogModel: random appends, synced writes, erasures of the last
// record and restarts through the log's direct writes leave the file, up
// to its end, as a plain model of the log says, whatever page the records
// start and end in; unsynced appends reach the file with the next synced
// write, before it.
func TestDirectLogModel(t *testing.T) {
	for _, c := range []struct {
		name            string
		direct, noDsync bool
		behind, noAIO   bool // synced writes through writeSyncBehind; without the kernel's AIO
	}{
		{"direct", true, false, false, false},
		{"direct, no RWF_DSYNC", true, true, false, false},
		{"page cache", false, false, false, false},
		{"direct, behind", true, false, true, false},
		{"direct, behind, no AIO", true, false, true, true},
		{"page cache, behind", false, false, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			walDirectOff, walAIOOff = !c.direct, c.noAIO
			t.Cleanup(func() { walDirectOff, walAIOOff = false, false })
			f, d := newDirectLog(t)
			if c.direct && !d.direct() {
				t.Skip("the file system refuses O_DIRECT")
			}
			if c.behind && c.direct && !c.noAIO && d.aio == 0 {
				t.Skip("the kernel refuses asynchronous I/O")
			}
			d.noDsync = c.noDsync
			// A write behind in flight: the kernel's AIO lets it stay so
			// over the next operation, which waits for it.
			var inflight func() error
			reap := func() {
				if inflight != nil {
					ok(t, "write behind", inflight())
					inflight = nil
				}
			}
			rng := rand.New(rand.NewSource(1))
			model := make([]byte, walSize)
			var off, synced, last int64 // the end, what is durable, the last record's start
			for i := 0; i < 600; i++ {
				rec := bytes.Repeat([]byte{byte(1 + rng.Intn(255))}, 1+rng.Intn(3*walAlign))
				if off+int64(len(rec)) > walSize || rng.Intn(200) == 0 {
					d.resetDirect()
					off, synced, last = 0, 0, 0
					continue
				}
				switch k := rng.Intn(10); {
				case k < 5:
					ok(t, "append", d.appendAt(f, rec, off))
					copy(model[off:], rec)
					off += int64(len(rec))
				case k < 9 && c.behind:
					reap()
					inflight = d.writeSyncBehind(f, rec, off, noFault)
					if d.aio == 0 {
						reap() // a goroutine's write must end before the next
					}
					copy(model[off:], rec)
					last, off = off, off+int64(len(rec))
					synced = off
				case k < 9:
					ok(t, "write and sync", d.writeSync(f, rec, off, noFault))
					copy(model[off:], rec)
					last, off = off, off+int64(len(rec))
					synced = off
				default:
					// Erase the last synced record (a refused commit's).
					if synced != off || last == synced {
						continue
					}
					zero := make([]byte, synced-last)
					ok(t, "erase", d.writeSync(f, zero, last, noFault))
					copy(model[last:], zero)
				}
				if synced == off && (inflight == nil || rng.Intn(2) == 0) {
					reap()
					got := make([]byte, off)
					ok(t, "read back", readFull(f, got, 0))
					if !bytes.Equal(got, model[:off]) {
						for j := range got {
							if got[j] != model[j] {
								t.Logf("first difference at %d: %d, want %d; last %d", j, got[j], model[j], last)
								break
							}
						}
						t.Fatalf("step %d: the log reads otherwise than written up to its end %d", i, off)
					}
				}
			}
			reap()
		})
	}
}

// TestDirectLogFaults: a failed sync returns its error and leaves the
// log's end where it was, so that the next write starts there again.
func TestDirectLogFaults(t *testing.T) {
	f, d := newDirectLog(t)
	if !d.direct() {
		t.Skip("the file system refuses O_DIRECT")
	}
	boom := errors.New("device gone")
	ok(t, "append", d.appendAt(f, []byte("first"), 0))
	if err := d.writeSync(f, []byte("second"), 5, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("a failed sync returned %v", err)
	}
	if d.pendAt != 0 || string(d.pend) != "first" {
		t.Fatalf("after the failure the log ends at %d with %q pending", d.pendAt, d.pend)
	}
	if err := d.appendAt(f, []byte("x"), 100); err == nil {
		t.Fatal("an append away from the log's end was taken")
	}

	// The same behind a commit, and a write behind that the device
	// refuses once submitted (a buffer out of alignment): the error, the
	// end unmoved.
	if err := d.writeSyncBehind(f, []byte("second"), 5, func() error { return boom })(); !errors.Is(err, boom) {
		t.Fatalf("a failed sync behind returned %v", err)
	}
	if d.aio == 0 {
		t.Skip("the kernel refuses asynchronous I/O")
	}
	raw := make([]byte, 4*walAlign)
	skip := (walAlign - int(uintptr(unsafe.Pointer(&raw[0]))&(walAlign-1))) & (walAlign - 1)
	d.buf = raw[skip+1 : skip+1+2*walAlign]
	wait := d.writeSyncBehind(f, []byte("second"), 5, noFault)
	if d.inflight == nil {
		t.Fatal("the write was not submitted")
	}
	if err := wait(); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("a write out of alignment returned %v", err)
	}
	if d.pendAt != 0 || string(d.pend) != "first" {
		t.Fatalf("after the refusal the log ends at %d with %q pending", d.pendAt, d.pend)
	}
	d.buf = nil
	ok(t, "write behind", d.writeSyncBehind(f, []byte("second"), 5, noFault)())
	got := make([]byte, 11)
	ok(t, "read back", readFull(f, got, 0))
	if string(got) != "firstsecond" {
		t.Fatalf("the log holds %q", got)
	}
	// Closed with a write in flight: it is waited for.
	wait = d.writeSyncBehind(f, []byte("third"), 11, noFault)
	d.closeDirect()
	ok(t, "write behind a close", wait())
}

// TestDirectLogRefused: a log whose direct writes fail (here a descriptor
// open for reading only) reports the error and keeps its end, with and
// without RWF_DSYNC; so does one in the page cache; and a log that cannot
// be opened for direct writes stays in the page cache.
func TestDirectLogRefused(t *testing.T) {
	f, d := newDirectLog(t)
	if !d.direct() {
		t.Skip("the file system refuses O_DIRECT")
	}
	ro, err := unix.Open(f.Name(), unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	ok(t, "open read-only", err)
	unix.Close(d.fd)
	d.fd = ro
	for _, noDsync := range []bool{false, true} {
		d.noDsync = noDsync
		if err := d.writeSync(f, []byte("record"), 0, noFault); err == nil {
			t.Fatalf("a write through a read-only descriptor succeeded (noDsync %v)", noDsync)
		}
		if d.pendAt != 0 || len(d.pend) != 0 {
			t.Fatalf("the failed write moved the log's end to %d", d.pendAt)
		}
		if err := d.writeSyncBehind(f, []byte("record"), 0, noFault)(); err == nil {
			t.Fatalf("a write behind through a read-only descriptor succeeded (noDsync %v)", noDsync)
		}
	}
	// Erasing before the end reads the pages around it back first.
	ok(t, "append", d.appendAt(f, []byte("pending"), 0))
	if err := d.writeSync(f, []byte("x"), 0, noFault); err == nil {
		t.Fatal("an erasure through a read-only descriptor succeeded")
	}

	pf, err := os.OpenFile(filepath.Join(t.TempDir(), "plain"), os.O_RDWR|os.O_CREATE, 0o600)
	ok(t, "create", err)
	defer pf.Close()
	boom := errors.New("device gone")
	var pd directLog
	pd.fd = -1
	if err := pd.writeSync(pf, []byte("record"), 0, func() error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("a failed sync in the page cache returned %v", err)
	}
	pf.Close()
	if err := pd.writeSync(pf, []byte("record"), 0, noFault); err == nil {
		t.Fatal("a write to a closed log succeeded")
	}

	// A log that cannot be opened for direct writes stays in the page
	// cache.
	var gone directLog
	gone.openDirect(filepath.Join(t.TempDir(), "missing", "log"))
	if gone.direct() {
		t.Fatal("a log that could not be opened is written directly")
	}
}

// TestDirectLogAIORefused: a kernel that refuses the flags of an
// asynchronous write (as one without RWF_DSYNC for AIO does) leaves the
// log writing behind a commit through a goroutine, from then on, and the
// write is made.
func TestDirectLogAIORefused(t *testing.T) {
	f, d := newDirectLog(t)
	if !d.direct() || d.aio == 0 {
		t.Skip("the file system refuses O_DIRECT, or the kernel AIO")
	}
	aioRWFlags = 1 << 30
	t.Cleanup(func() { aioRWFlags = unix.RWF_DSYNC })
	ok(t, "write behind", d.writeSyncBehind(f, []byte("record"), 0, noFault)())
	if d.aio != 0 {
		t.Fatal("the log keeps its AIO context after the kernel refused a write")
	}
	got := make([]byte, 6)
	ok(t, "read back", readFull(f, got, 0))
	if string(got) != "record" {
		t.Fatalf("the log holds %q", got)
	}
}
