package layers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawWalRec frames payload as a record of the log, checksum and all, so
// that what the payload says is all a decoder can refuse.
func rawWalRec(cycle, seq uint64, payload []byte) []byte {
	b := make([]byte, walHeader, walHeader+len(payload))
	b = append(b, payload...)
	binary.LittleEndian.PutUint32(b[0:], walMagic)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(payload)))
	binary.LittleEndian.PutUint64(b[8:], cycle)
	binary.LittleEndian.PutUint64(b[16:], seq)
	binary.LittleEndian.PutUint32(b[24:], crc32.Checksum(b[8:24], walTable)^crc32.Checksum(b[walHeader:], walTable))
	return b
}

// payload builds a record's payload from uvarints (numbers) and raw bytes
// (strings).
func payload(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch x := p.(type) {
		case int:
			b = binary.AppendUvarint(b, uint64(x))
		case uint64:
			b = binary.AppendUvarint(b, x)
		case string:
			b = append(b, x...)
		}
	}
	return b
}

// TestWALRecordRefused: a record whose checksum holds but whose contents
// do not parse, or name something that is not a layer, ends the log.
func TestWALRecordRefused(t *testing.T) {
	long := strings.Repeat("L", maxHomeLen+1)
	for _, c := range []struct {
		name string
		p    []byte
	}{
		{"more operations than bytes", payload(1000)},
		{"more changes than bytes", payload(1, 1000)},
		{"a change cut short", payload(1, 1)},
		{"a second change missing", payload(1, 2, "\x01", 1, "k")},
		{"an unknown change kind", payload(1, 1, "\x02", 1, "k")},
		{"a key longer than the record", payload(1, 1, "\x01", 50, "k")},
		{"a segment past the largest file", payload(0, 1, 1, "L", 5, 0, uint64(MaxFileSize+1), 1, "d", 0)},
		{"a size past the largest file", payload(0, 0, 1, 1, "L", uint64(MaxFileSize+1))},
		{"bytes after the record", payload(0, 0, 0, "extra")},
		{"a segment of a path", payload(0, 1, 5, "../x1", 5, 0, 0, 1, "d", 0)},
		{"a segment of no layer", payload(0, 1, 0, 5, 0, 0, 1, "d", 0)},
		{"a size of a long name", payload(0, 0, 1, len(long), long, 10)},
		{"a size of a path", payload(0, 0, 1, 3, "a/b", 10)},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := rawWalRec(1, 1, c.p)
			if _, _, err := decodeWalRec(b); !errors.Is(err, errWalEnd) {
				t.Fatalf("decoded: %v", err)
			}
		})
	}
	if _, _, err := decodeWalRec(rawWalRec(1, 1, payload(0, 0, 0))[:walHeader+2]); !errors.Is(err, errWalEnd) {
		t.Fatalf("a record cut short decoded: %v", err)
	}
	// The same framing accepts a well-formed payload.
	ok := payload(1, 1, "\x00", 3, "x/k", 1, "v", 1, 2, "L1", 7, 2, 4096, 1, "d", 1, 2, "L1", 8192)
	r, n, err := decodeWalRec(rawWalRec(3, 4, ok))
	if err != nil || n != walHeader+len(ok) || r.seq != 4 || r.sizes[0].size != 8192 || string(r.segs[0].data) != "d" || r.segs[0].ino != 7 || r.segs[0].blk != 2 {
		t.Fatalf("a well-formed record: %+v %d %v", r, n, err)
	}
}

// failingReader fails every read from the failAt'th on.
type failingReader struct {
	b      []byte
	reads  int
	failAt int
}

func (r *failingReader) ReadAt(p []byte, off int64) (int, error) {
	r.reads++
	if r.reads >= r.failAt {
		return 0, errors.New("read failed")
	}
	return bytes.NewReader(r.b).ReadAt(p, off)
}

// TestWALCycleReadFails: a log that cannot be read ends where the read
// failed.
func TestWALCycleReadFails(t *testing.T) {
	rec := encodeWalRec(walRec{cycle: 1, seq: 1, ops: [][]kv{{{key: []byte("x/k"), val: []byte("v")}}}})
	log := append(append([]byte(nil), rec...), encodeWalRec(walRec{cycle: 1, seq: 2})...)
	for failAt, want := range map[int]int{1: 0, 2: 0, 3: 1, 4: 1, 5: 2} {
		if got := len(walCycle(&failingReader{b: log, failAt: failAt}, int64(len(log)))); got != want {
			t.Errorf("reads failing from the %dth: %d records, want %d", failAt, got, want)
		}
	}
}

// walStore is a store with sandbox "sb", unmounted, whose log the test
// writes itself; reopen opens it again.
type walStore struct {
	t   *testing.T
	e   *testEnv
	dir string
}

func newWALStore(t *testing.T) *walStore {
	t.Helper()
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	mkfile(t, v, RootIno, "f", "content")
	ok(t, "close view", v.Close())
	return &walStore{t: t, e: e, dir: filepath.Join(e.dir, "store")}
}

func (w *walStore) mark() (committed, synced uint64) {
	w.t.Helper()
	ok(w.t, "mark", w.e.store.View(func(tx *Txn) error {
		var err error
		committed, synced, err = walMark(tx.txn, "sb")
		return err
	}))
	return committed, synced
}

func (w *walStore) head() string {
	w.t.Helper()
	info, err := w.e.store.Sandbox("sb")
	ok(w.t, "sandbox", err)
	return info.Head
}

// reopen writes log as the sandbox's intent log, with the store closed,
// and opens the store again.
func (w *walStore) reopen(log []byte) error {
	w.t.Helper()
	ok(w.t, "close", w.e.store.Close())
	ok(w.t, "write log", os.WriteFile(filepath.Join(w.dir, "wal", "sb"), log, 0o600))
	s, err := Open(w.dir)
	if err == nil {
		w.e.store = s
	}
	return err
}

func (w *walStore) get(key string) (string, bool) {
	w.t.Helper()
	var val []byte
	err := w.e.store.View(func(tx *Txn) error {
		var err error
		val, err = tx.Get(key)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return "", false
	}
	ok(w.t, "get "+key, err)
	return string(val), true
}

// TestWALRecoveryEdges: what opening a store does with logs it cannot or
// need not replay in full.
func TestWALRecoveryEdges(t *testing.T) {
	set := func(k, v string) []kv { return []kv{{key: []byte(k), val: []byte(v)}} }
	t.Run("a gap after the committed record", func(t *testing.T) {
		w := newWALStore(t)
		c, _ := w.mark()
		log := append(encodeWalRec(walRec{cycle: 9, seq: c + 2, ops: [][]kv{set("x/gap", "1")}}),
			encodeWalRec(walRec{cycle: 9, seq: c + 3, ops: [][]kv{set("x/gap2", "1")}})...)
		ok(t, "open", w.reopen(log))
		if _, found := w.get("x/gap"); found {
			t.Fatal("a record past a gap was replayed")
		}
	})
	t.Run("records of a layer that is gone", func(t *testing.T) {
		w := newWALStore(t)
		c, _ := w.mark()
		gone := NewID()
		log := encodeWalRec(walRec{cycle: 9, seq: c + 1, ops: [][]kv{set("x/after", "1")},
			segs:  []walSeg{{layer: gone, off: 0, data: []byte("data")}, {layer: w.head(), off: 1 << 20, data: []byte("tail")}},
			sizes: []walMinSize{{layer: gone, size: 8192}, {layer: w.head(), size: 2 << 20}}})
		ok(t, "open", w.reopen(log))
		if _, err := os.Stat(w.e.store.dataPath(gone)); !os.IsNotExist(err) {
			t.Fatalf("a data file was made for a layer that is gone: %v", err)
		}
		fi, err := os.Stat(w.e.store.dataPath(w.head()))
		ok(t, "stat data file", err)
		if fi.Size() != 2<<20 {
			t.Fatalf("the data file has %d bytes, want %d", fi.Size(), 2<<20)
		}
		if v, _ := w.get("x/after"); v != "1" {
			t.Fatal("the record was not replayed")
		}
		if c2, s2 := w.mark(); c2 != c+1 || s2 != c+1 {
			t.Fatalf("mark %d/%d after the replay, want %d/%d", c2, s2, c+1, c+1)
		}
		fsckClean(t, w.e.store)
	})
	t.Run("data files that cannot be written", func(t *testing.T) {
		w := newWALStore(t)
		c, _ := w.mark()
		head := w.head()
		log := encodeWalRec(walRec{cycle: 9, seq: c + 1, segs: []walSeg{{layer: head, off: 0, data: []byte("data")}}})
		data := w.e.store.dataPath(head)
		ok(t, "close", w.e.store.Close())
		ok(t, "move the data file away", os.Rename(data, data+".away"))
		ok(t, "a directory in its place", os.Mkdir(data, 0o700))
		ok(t, "write log", os.WriteFile(filepath.Join(w.dir, "wal", "sb"), log, 0o600))
		if _, err := Open(w.dir); err == nil || !strings.Contains(err.Error(), "intent log of sb") {
			t.Fatalf("open: %v, want the intent log's error", err)
		}
		ok(t, "remove the directory", os.Remove(data))
		ok(t, "the data file back", os.Rename(data+".away", data))
		s, err := Open(w.dir)
		ok(t, "open once the data file is back", err)
		w.e.store = s
		if c2, _ := w.mark(); c2 != c+1 {
			t.Fatalf("the log was not replayed once it could be (mark %d)", c2)
		}
	})
	t.Run("a record too large for one transaction", func(t *testing.T) {
		w := newWALStore(t)
		c, _ := w.mark()
		var ops [][]kv
		for i := range 120000 {
			ops = append(ops, set(fmt.Sprintf("x/big/%06d", i), "v"))
		}
		ok(t, "open", w.reopen(encodeWalRec(walRec{cycle: 9, seq: c + 1, ops: ops})))
		for _, k := range []string{"x/big/000000", "x/big/119999"} {
			if _, found := w.get(k); !found {
				t.Fatalf("%s was not replayed", k)
			}
		}
	})
	t.Run("an inode below the lease", func(t *testing.T) {
		w := newWALStore(t)
		lease := func() uint64 {
			q, err := openInoSeq(w.e.store.db)
			ok(t, "lease", err)
			return q.next
		}
		ok(t, "open", w.reopen(nil)) // closing gives the lease's unused rest back
		before := lease()
		c, _ := w.mark()
		// Of no layer: only their numbers count here. A base file's
		// number (the host's) never moves the lease; one made in a layer
		// below the lease neither.
		var ops [][]kv
		for _, ino := range []uint64{before + 5000, upperInoBase + before - 1} {
			ops = append(ops, []kv{{key: keyInode(NewID(), ino), val: []byte("x")}})
		}
		ok(t, "open", w.reopen(encodeWalRec(walRec{cycle: 9, seq: c + 1, ops: ops})))
		if got := lease(); got != before {
			t.Fatalf("the lease is %d after the replay, was %d", got, before)
		}
	})
	t.Run("a change badger refuses", func(t *testing.T) {
		w := newWALStore(t)
		c, _ := w.mark()
		err := w.reopen(encodeWalRec(walRec{cycle: 9, seq: c + 1, ops: [][]kv{{{key: nil, val: []byte("x")}}}}))
		if err == nil || !strings.Contains(err.Error(), "intent log of sb") {
			t.Fatalf("open: %v, want the intent log's error", err)
		}
		// Nothing was lost: without the log, the store opens as it was.
		ok(t, "remove the log", os.Remove(filepath.Join(w.dir, "wal", "sb")))
		s, err := Open(w.dir)
		ok(t, "open", err)
		w.e.store = s
		fsckClean(t, s)
	})
	t.Run("not a log", func(t *testing.T) {
		w := newWALStore(t)
		ok(t, "close", w.e.store.Close())
		ok(t, "a directory among the logs", os.Mkdir(filepath.Join(w.dir, "wal", "dir"), 0o700))
		s, err := Open(w.dir)
		ok(t, "open", err)
		w.e.store = s
	})
	t.Run("a file for the log directory", func(t *testing.T) {
		w := newWALStore(t)
		ok(t, "close", w.e.store.Close())
		ok(t, "remove logs", os.RemoveAll(filepath.Join(w.dir, "wal")))
		ok(t, "a file for the log directory", os.WriteFile(filepath.Join(w.dir, "wal"), nil, 0o600))
		s, err := Open(w.dir)
		ok(t, "open", err)
		w.e.store = s
	})
}

// TestWALUnusable: a sandbox whose intent log cannot be made mounts and
// syncs the full way.
func TestWALUnusable(t *testing.T) {
	for _, c := range []struct {
		name  string
		block func(dir string)
	}{
		{"the log directory is a file", func(dir string) { os.WriteFile(filepath.Join(dir, "wal"), nil, 0o600) }},
		{"the log is a directory", func(dir string) {
			os.MkdirAll(filepath.Join(dir, "wal", "sb"), 0o700)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, nil)
			c.block(filepath.Join(e.dir, "store"))
			v := e.view()
			t.Cleanup(func() { v.Close() })
			if walOffset(v) != -1 {
				t.Fatal("the view has a log")
			}
			f := mkfile(t, v, RootIno, "f", "x")
			ok(t, "sync", v.Sync())
			v = e.reopen(v)
			if got := content(t, v, f.Ino); got != "x" {
				t.Fatalf("the file reads %q", got)
			}
		})
	}
}

// TestWALFullLog: a log too small for what is committed stops taking
// records until a full sync lets it start again; a Sync whose record does
// not fit is a full one.
func TestWALFullLog(t *testing.T) {
	old := walSize
	walSize = 64 << 10
	t.Cleanup(func() { walSize = old })
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	ok(t, "sync", v.Sync()) // the first is a full one
	for i := range 400 {
		mkfile(t, v, RootIno, fmt.Sprintf("a-file-with-a-long-name-%04d", i), "")
	}
	ok(t, "commit", v.commit())
	if v.walOn.Load() {
		t.Fatal("the log still serves after the commits it could not take")
	}
	full := v.fullSyncs.Load()
	ok(t, "sync", v.Sync())
	if v.fullSyncs.Load() != full+1 || !v.walOn.Load() || walOffset(v) != 0 {
		t.Fatalf("after the full log: %d full syncs (was %d), serving %v, offset %d", v.fullSyncs.Load(), full, v.walOn.Load(), walOffset(v))
	}
	// 48 KiB of data, under walMaxData, over what is left of the log
	// once a first record is in.
	f := mkfile(t, v, RootIno, "data", strings.Repeat("d", 20<<10))
	ok(t, "sync", v.Sync())
	if walOffset(v) <= 0 {
		t.Fatal("a small Sync did not go through the log")
	}
	_, err := v.WriteAt(f.Ino, bytes.Repeat([]byte("D"), 48<<10), 0, false)
	ok(t, "write", err)
	full = v.fullSyncs.Load()
	ok(t, "sync", v.Sync())
	if v.fullSyncs.Load() != full+1 {
		t.Fatal("a record that does not fit did not make a full sync")
	}
	v = e.reopen(v)
	if got := content(t, v, f.Ino); got != strings.Repeat("D", 48<<10) {
		t.Fatalf("the file reads %d bytes", len(got))
	}
}

// TestWALCommitFails: when the commit after the log's sync fails, the
// operations go back to the journal and the Sync reports the failure
// the full way reports it; nothing half-done is kept.
func TestWALCommitFails(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	ok(t, "sync", v.Sync())
	f := mkfile(t, v, RootIno, "f", "kept")
	v.mu.Lock()
	v.queue([]kv{{key: nil, val: []byte("a change badger refuses")}})
	v.mu.Unlock()
	if err := v.Sync(); err == nil {
		t.Fatal("a Sync with a change badger refuses succeeded")
	}
	if v.walOn.Load() {
		t.Fatal("the log serves after a record it could not commit")
	}
	// Take the refused change out; the rest commits.
	ops, _ := v.takeJournal(1 << 62)
	var keep [][]kv
	for _, op := range ops {
		if len(op) == 1 && op[0].key == nil {
			continue
		}
		keep = append(keep, op)
	}
	v.putBackJournal(keep, nil)
	v.jmu.Lock()
	v.jerr = nil
	v.jmu.Unlock()
	ok(t, "sync", v.Sync())
	v = e.reopen(v)
	if got := content(t, v, f.Ino); got != "kept" {
		t.Fatalf("the file reads %q", got)
	}
}

// TestReusedSlotZeroingFails: a reused slot whose zeroing cannot be
// written fails the write and goes back to the kept slots.
func TestReusedSlotZeroingFails(t *testing.T) {
	keepReuseWhenIdle = true
	t.Cleanup(func() { keepReuseWhenIdle = false })
	const bs = DefaultBlockSize
	e := newEnv(t, bs, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", strings.Repeat("a", bs))
	ok(t, "sync", v.Sync())
	_, err := v.WriteAt(f.Ino, []byte("b"), 0, false)
	ok(t, "write", err)
	ok(t, "sync", v.Sync())
	g := mkfile(t, v, RootIno, "g", "")
	v.mu.Lock()
	kept := v.reusePages
	v.files[v.activeLayer()].Close()
	v.mu.Unlock()
	if kept == 0 {
		t.Fatal("no slot kept for reuse")
	}
	_, err = v.WriteAt(g.Ino, []byte("x"), 0, false)
	wantErr(t, "write into a reused slot", err, os.ErrClosed)
	v.mu.Lock()
	back := v.reusePages
	v.mu.Unlock()
	if back != kept {
		t.Fatalf("%d pages kept after the failed write, want %d", back, kept)
	}
}

// TestWALWritesFail: a log that cannot be written leaves every Sync to
// the full way, which still makes the changes durable.
func TestWALWritesFail(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	ok(t, "sync", v.Sync())
	v.cmu.Lock()
	v.wal.closeDirect() // its page cache descriptor then
	v.wal.f.Close()
	v.cmu.Unlock()
	f := mkfile(t, v, RootIno, "f", "first")
	full := v.fullSyncs.Load()
	ok(t, "sync", v.Sync())
	if v.fullSyncs.Load() != full+1 {
		t.Fatal("a Sync whose record could not be written was not a full one")
	}
	_, err := v.WriteAt(f.Ino, []byte("FIRST"), 0, false)
	ok(t, "write", err)
	mkfile(t, v, RootIno, "g", "") // a change for the journal to commit
	ok(t, "commit", v.commit())
	if v.walOn.Load() {
		t.Fatal("the log serves after a record it could not append")
	}
	ok(t, "sync", v.Sync())
	if err := v.Close(); err == nil {
		t.Fatal("closing a view whose log is closed reported nothing")
	}
	v = e.reopen(e.view())
	t.Cleanup(func() { v.Close() })
	if got := content(t, v, f.Ino); got != "FIRST" {
		t.Fatalf("the file reads %q", got)
	}
}

// TestSlotReuseKeepsAtMost: a sync that frees more than reuseMaxPages
// keeps that many for reuse and punches the rest.
func TestSlotReuseKeepsAtMost(t *testing.T) {
	keepReuseWhenIdle = true
	t.Cleanup(func() { keepReuseWhenIdle = false })
	const bs = DefaultBlockSize
	blocks := 2 * reuseMaxPages * pageSize / bs
	e := newEnv(t, bs, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	f := mkfile(t, v, RootIno, "f", strings.Repeat("a", blocks*bs))
	ok(t, "sync", v.Sync())
	for b := range blocks {
		_, err := v.WriteAt(f.Ino, []byte("b"), int64(b)*bs, false)
		ok(t, "write", err)
	}
	ok(t, "sync", v.Sync())
	v.mu.Lock()
	kept := v.reusePages
	v.mu.Unlock()
	if kept != reuseMaxPages {
		t.Fatalf("%d pages kept for reuse, want %d", kept, reuseMaxPages)
	}
	want := strings.Repeat("b"+strings.Repeat("a", bs-1), blocks)
	if got := content(t, v, f.Ino); got != want {
		t.Fatal("the file reads otherwise")
	}
}
