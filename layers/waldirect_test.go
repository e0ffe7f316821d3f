package layers

import (
	"bytes"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"testing"

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
	}{{"direct", true, false}, {"direct, no RWF_DSYNC", true, true}, {"page cache", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			walDirectOff = !c.direct
			t.Cleanup(func() { walDirectOff = false })
			f, d := newDirectLog(t)
			if c.direct && !d.direct() {
				t.Skip("the file system refuses O_DIRECT")
			}
			d.noDsync = c.noDsync
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
				if synced == off {
					got := make([]byte, off)
					ok(t, "read back", readFull(f, got, 0))
					if !bytes.Equal(got, model[:off]) {
						t.Fatalf("step %d: the log reads otherwise than written up to its end %d", i, off)
					}
				}
			}
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
