package layers

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// copyDir copies directory from to to (cp -a): what the kernel holds of
// a live store, as a kill -9 leaves it.
func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("copy %s: %v %s", from, err, out)
	}
}

// walOffset is where the view's intent log writes next (0: nothing in
// this cycle, or no log).
func walOffset(v *View) int64 {
	v.cmu.Lock()
	defer v.cmu.Unlock()
	if v.wal == nil {
		return -1
	}
	return v.wal.off
}

// fileTree reads every file under the root of v (one level of
// directories deep): path -> content ("/" for a directory).
func fileTree(t *testing.T, v *View) map[string]string {
	t.Helper()
	got := map[string]string{}
	var walk func(dir uint64, prefix string)
	walk = func(dir uint64, prefix string) {
		for _, n := range names(t, v, dir) {
			a := lookup(t, v, dir, n)
			if isType(a, 0o040000) {
				got[prefix+n] = "/"
				walk(a.Ino, prefix+n+"/")
				continue
			}
			got[prefix+n] = content(t, v, a.Ino)
		}
	}
	walk(RootIno, "")
	return got
}

func sameFiles(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var diffs []string
	for p, w := range want {
		if g, ok := got[p]; !ok {
			diffs = append(diffs, "missing "+p)
		} else if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: %d bytes, want %d", p, len(g), len(w)))
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			diffs = append(diffs, "extra "+p)
		}
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		t.Fatalf("%s: %s", what, strings.Join(diffs, "; "))
	}
}

// powerCutImage builds, in a new directory, the store a power cut may
// leave: the copy durable made at a full sync, with the live sandbox's
// intent log as its syncs left it (edit, when set, changes the log
// first). It returns the image's directory and the log.
func powerCutImage(t *testing.T, e *testEnv, durable string, edit func(log []byte)) (string, []byte) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "store")
	copyDir(t, durable, img)
	log, err := os.ReadFile(e.store.walPath("sb"))
	ok(t, "read log", err)
	if edit != nil {
		edit(log)
	}
	ok(t, "mkdir wal", os.MkdirAll(filepath.Join(img, "wal"), 0o700))
	ok(t, "write log", os.WriteFile(filepath.Join(img, "wal", "sb"), log, 0o600))
	return img, log
}

// withDataFrom replaces the data files of store image img with the copy
// in data (made when they were synced later than the image's badger
// files: a checkpoint through the log that synced the data file); "" keeps
// them.
func withDataFrom(t *testing.T, img, data string) {
	t.Helper()
	if data == "" {
		return
	}
	ok(t, "rm data", os.RemoveAll(filepath.Join(img, "data")))
	copyDir(t, data, filepath.Join(img, "data"))
}

// syncedData runs fn and, when it synced a data file of sandbox sb (a
// checkpoint or rollback that did not carry its data in the log), returns
// a copy of the store's data files as they are then; "" otherwise.
func syncedData(t *testing.T, e *testEnv, fn func()) string {
	t.Helper()
	var n atomic.Int32
	restore := e.store.InjectFault(func(op, key string) error {
		if op == "datasync" {
			n.Add(1)
		}
		return nil
	})
	fn()
	restore()
	if n.Load() == 0 {
		return ""
	}
	dir := filepath.Join(t.TempDir(), "data")
	copyDir(t, filepath.Join(e.dir, "store", "data"), dir)
	return dir
}

// openImage opens the store image in dir and its sandbox's live view.
func openImage(t *testing.T, dir string) (*Store, *View) {
	t.Helper()
	s, err := Open(dir)
	ok(t, "open the image", err)
	t.Cleanup(func() { s.Close() })
	v, err := s.OpenView("sb", false)
	ok(t, "view of the image", err)
	return s, v
}

// TestWALCodec: records read back as written, one after the other; a
// torn, damaged or foreign record ends the cycle.
func TestWALCodec(t *testing.T) {
	recs := []walRec{
		{cycle: 7, seq: 1, ops: [][]kv{{{key: []byte("i/k"), val: []byte("v")}, {key: []byte("e/x"), del: true}}}},
		{cycle: 7, seq: 2, segs: []walSeg{{layer: "01ABC", off: 8192, data: bytes.Repeat([]byte("d"), 5000)}}, sizes: []walMinSize{{layer: "01ABC", size: 1 << 20}}},
		{cycle: 7, seq: 3, ops: [][]kv{{{key: []byte("b/x"), val: []byte{}}}, {}}},
	}
	var log []byte
	for _, r := range recs {
		log = append(log, encodeWalRec(r)...)
	}
	log = append(log, make([]byte, 100)...)
	got := walCycle(bytes.NewReader(log), int64(len(log)))
	if len(got) != len(recs) {
		t.Fatalf("read %d records, want %d", len(got), len(recs))
	}
	for i, r := range got {
		if r.seq != recs[i].seq || r.cycle != 7 || len(r.ops) != len(recs[i].ops) || len(r.segs) != len(recs[i].segs) {
			t.Fatalf("record %d reads back as %+v", i, r)
		}
	}
	if !bytes.Equal(got[1].segs[0].data, recs[1].segs[0].data) || got[1].sizes[0].size != 1<<20 || string(got[0].ops[0][0].val) != "v" || !got[0].ops[0][1].del {
		t.Fatal("a record's contents read back otherwise")
	}
	second := len(encodeWalRec(recs[0]))
	third := second + len(encodeWalRec(recs[1]))
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
		want int
	}{
		{"torn", func(b []byte) []byte { return b[:third-10] }, 1},
		{"a flipped data byte", func(b []byte) []byte { b[second+walHeader+40] ^= 1; return b }, 1},
		{"a flipped seq", func(b []byte) []byte { b[second+16] ^= 1; return b }, 1},
		{"another cycle", func(b []byte) []byte {
			r := recs[1]
			r.cycle = 8
			return append(append(b[:second:second], encodeWalRec(r)...), b[third:]...)
		}, 1},
		{"a gap", func(b []byte) []byte {
			return append(b[:second:second], b[third:]...)
		}, 1},
		{"zeros", func(b []byte) []byte { return make([]byte, len(b)) }, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := c.edit(append([]byte(nil), log...))
			if got := walCycle(bytes.NewReader(b), int64(len(b))); len(got) != c.want {
				t.Fatalf("read %d records, want %d", len(got), c.want)
			}
		})
	}
}

// FuzzWALRecord: any bytes decode to a record or to the end of the log,
// never a panic, and a record re-encodes to the bytes it came from.
func FuzzWALRecord(f *testing.F) {
	f.Add(encodeWalRec(walRec{cycle: 1, seq: 1, ops: [][]kv{{{key: []byte("k"), val: []byte("v")}}}}))
	f.Add(encodeWalRec(walRec{cycle: 2, seq: 9, segs: []walSeg{{layer: "L", off: 4096, data: []byte("data")}}, sizes: []walMinSize{{layer: "L", size: 8192}}}))
	f.Add([]byte("SWAL"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := decodeWalRec(b)
		if err != nil {
			return
		}
		if again := encodeWalRec(r); !bytes.Equal(again, b[:n]) {
			t.Fatalf("record re-encodes to %d other bytes than the %d it came from", len(again), n)
		}
	})
}

// TestWALPowerCut: Syncs through the intent log keep what they covered
// across every image a power cut may leave: badger's log and the data
// file as they were at the last full sync, or either as it is now (a
// later write-back, or another sandbox's sync, flushed it), with the log
// as its syncs left it. A log torn right after the first Sync's record
// gives the state of that Sync: nothing after a torn record counts.
func TestWALPowerCut(t *testing.T) {
	noLoopSyncs(t)
	for _, c := range []struct {
		name           string
		metaNow, dataN bool // badger's files, the data files as they are now
		torn           bool
	}{
		{"metadata and data lost", false, false, false},
		{"data lost, metadata flushed", true, false, false},
		{"metadata lost, data written back", false, true, false},
		{"both written back", true, true, false},
		{"last record torn", false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, DefaultBlockSize, func(base string) {
				put(t, filepath.Join(base, "base.txt"), strings.Repeat("b", 100000))
			})
			v := e.view()
			t.Cleanup(func() { v.Close() })
			want := map[string]string{"base.txt": strings.Repeat("b", 100000)}
			big := strings.Repeat("x", 2*DefaultBlockSize)
			a := mkfile(t, v, RootIno, "a", big)
			mkfile(t, v, RootIno, "gone", "to be removed")
			want["a"] = big
			ok(t, "full sync", v.sync(false, false))
			durable := filepath.Join(t.TempDir(), "durable")
			copyDir(t, filepath.Join(e.dir, "store"), durable)

			// First logged Sync: an edit in place, a new file, a rename,
			// a removal, a directory, a copy-up of a base file.
			_, err := v.WriteAt(a.Ino, []byte("EDIT"), 100, false)
			ok(t, "write a", err)
			want["a"] = big[:100] + "EDIT" + big[104:]
			mkfile(t, v, RootIno, "new", "a file made after the full sync")
			want["new"] = "a file made after the full sync"
			ok(t, "rename", v.Rename(RootIno, "new", RootIno, "renamed", 0))
			want["renamed"] = want["new"]
			delete(want, "new")
			ok(t, "unlink", v.Unlink(RootIno, "gone"))
			d := mkdir(t, v, RootIno, "dir")
			mkfile(t, v, d.Ino, "inner", "inside")
			want["dir"], want["dir/inner"] = "/", "inside"
			bf := lookup(t, v, RootIno, "base.txt")
			_, err = v.WriteAt(bf.Ino, []byte("BASE"), 70000, false)
			ok(t, "write base file", err)
			want["base.txt"] = want["base.txt"][:70000] + "BASE" + want["base.txt"][70004:]
			ok(t, "logged sync", v.Sync())
			if walOffset(v) <= 0 {
				t.Fatal("the Sync did not go through the intent log")
			}
			firstListing := treeOf(t, v)
			first := map[string]string{}
			for k, val := range want {
				first[k] = val
			}
			firstEnd := walOffset(v)

			// Second: the same block again (a reused slot), a truncate.
			_, err = v.WriteAt(a.Ino, []byte("AGAIN"), 100, false)
			ok(t, "write a again", err)
			want["a"] = big[:100] + "AGAIN" + big[105:]
			sz := int64(DefaultBlockSize + 10)
			_, err = v.SetAttr(a.Ino, SetAttrIn{Size: &sz})
			ok(t, "truncate", err)
			want["a"] = want["a"][:sz]
			ok(t, "logged sync", v.Sync())
			if walOffset(v) <= firstEnd {
				t.Fatal("the second Sync did not go through the intent log")
			}
			listing := treeOf(t, v)
			if c.torn {
				want, listing = first, firstListing
			}

			img, _ := powerCutImage(t, e, durable, func(log []byte) {
				if c.torn {
					// The first record after the first Sync's (the
					// journal loop may have committed some of the
					// second batch on its own) reaches the disk torn.
					copy(log[firstEnd+walHeader:firstEnd+walHeader+20], make([]byte, 20))
				}
			})
			now := filepath.Join(t.TempDir(), "now")
			copyDir(t, filepath.Join(e.dir, "store"), now)
			for _, part := range []struct {
				name string
				now  bool
			}{{"meta", c.metaNow}, {"data", c.dataN}} {
				if part.now {
					ok(t, "rm "+part.name, os.RemoveAll(filepath.Join(img, part.name)))
					copyDir(t, filepath.Join(now, part.name), filepath.Join(img, part.name))
				}
			}
			s2, v2 := openImage(t, img)
			sameFiles(t, "after the power cut", fileTree(t, v2), want)
			// Numbers, modes, sizes, links, block sources and checksums.
			if got := treeOf(t, v2); !slices.Equal(got, listing) {
				t.Fatalf("after the power cut the tree lists\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(listing, "\n"))
			}
			fsckClean(t, s2)
			// It goes on: new inodes get new numbers, and a restart
			// shows the same.
			n := mkfile(t, v2, RootIno, "after", "after the cut")
			want["after"] = "after the cut"
			for p := range want {
				if want[p] == "/" || strings.Contains(p, "/") {
					continue
				}
				if p != "after" && lookup(t, v2, RootIno, p).Ino == n.Ino {
					t.Fatalf("the new file got the number of %s", p)
				}
			}
			ok(t, "sync", v2.Sync())
			ok(t, "close", v2.Close())
			ok(t, "close image", s2.Close())
			_, v3 := openImage(t, img)
			sameFiles(t, "after a restart of the image", fileTree(t, v3), want)
		})
	}
}

// TestWALInodeLease: files made after the last full sync take numbers
// from a lease badger had not flushed; after a power cut, the replayed
// files keep their numbers and new files get others.
func TestWALInodeLease(t *testing.T) {
	noLoopSyncs(t)
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	ok(t, "full sync", v.sync(false, false))
	durable := filepath.Join(t.TempDir(), "durable")
	copyDir(t, filepath.Join(e.dir, "store"), durable)
	inos := map[uint64]string{}
	for i := range inoLease + 100 { // past the lease the copy holds
		name := fmt.Sprintf("f%04d", i)
		inos[mkfile(t, v, RootIno, name, "").Ino] = name // no data: the log takes up to walMaxData
	}
	ok(t, "logged sync", v.Sync())
	if walOffset(v) <= 0 {
		t.Fatalf("the Sync did not go through the intent log (%d full syncs)", v.fullSyncs.Load())
	}
	img, _ := powerCutImage(t, e, durable, nil)
	_, v2 := openImage(t, img)
	if got := len(names(t, v2, RootIno)); got != len(inos) {
		t.Fatalf("%d files after the power cut, want %d", got, len(inos))
	}
	var top uint64
	for ino := range inos {
		top = max(top, ino)
	}
	for i := range 50 {
		n := mkfile(t, v2, RootIno, fmt.Sprintf("new%d", i), "new")
		if old, dup := inos[n.Ino]; dup {
			t.Fatalf("a new file got the number of %s", old)
		}
		// The lease moved just past the replayed numbers, not anywhere.
		if n.Ino <= top || n.Ino > top+2*inoLease {
			t.Fatalf("a new file got number %#x after the replayed ones up to %#x", n.Ino, top)
		}
	}
}

// TestWALFallsBack: when the intent log cannot be synced, Sync syncs the
// data file and badger's log instead and reports success; the log serves
// again after that full sync. A log that fills up is started again the
// same way.
func TestWALFallsBack(t *testing.T) {
	e := newEnv(t, DefaultBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	f := mkfile(t, v, RootIno, "f", "first")
	ok(t, "sync", v.Sync()) // the first after opening the store is a full one
	_, err := v.WriteAt(f.Ino, []byte("FIRST"), 0, false)
	ok(t, "write", err)
	ok(t, "sync", v.Sync())
	if walOffset(v) <= 0 {
		t.Fatal("the Sync did not go through the intent log")
	}
	asked := 0
	restore := e.store.InjectFault(func(op, key string) error {
		if op == "walsync" {
			asked++
			return fmt.Errorf("log device failed")
		}
		return nil
	})
	_, err = v.WriteAt(f.Ino, []byte("second"), 0, false)
	ok(t, "write", err)
	ok(t, "sync with the log failing", v.Sync())
	restore()
	if asked != 1 {
		t.Fatalf("the log's sync was asked %d times, want 1", asked)
	}
	if e.store.synced.Load() != e.store.commits.Load() {
		t.Fatal("the full sync left badger's log unsynced")
	}
	if off := walOffset(v); off != 0 {
		t.Fatalf("after a full sync the log did not start again (offset %d)", off)
	}
	_, err = v.WriteAt(f.Ino, []byte("third!"), 0, false)
	ok(t, "write", err)
	ok(t, "sync", v.Sync())
	if walOffset(v) <= 0 {
		t.Fatal("the log does not serve again after the full sync")
	}
	// Fill it: whole blocks, one record each, past walSize.
	block := bytes.Repeat([]byte("z"), DefaultBlockSize)
	restarted := false
	for i := 0; i < int(2*walSize/DefaultBlockSize); i++ {
		before := walOffset(v)
		_, err = v.WriteAt(f.Ino, block, int64(i%4)*DefaultBlockSize, false)
		ok(t, "write block", err)
		ok(t, "sync", v.Sync())
		if after := walOffset(v); after < before {
			restarted = true
		}
	}
	if !restarted {
		t.Fatal("a full log never started again")
	}
	want := strings.Repeat("z", 4*DefaultBlockSize)
	v = e.reopen(v)
	if got := content(t, v, f.Ino); got != want {
		t.Fatalf("after a restart the file reads %d bytes, want %d", len(got), len(want))
	}
	fsckClean(t, e.store)
}

// TestWALRemovedWithSandbox: removing a sandbox removes its intent log,
// and a log without its sandbox (a crash between the two) goes when the
// store opens.
func TestWALRemovedWithSandbox(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	mkfile(t, v, RootIno, "f", "x")
	ok(t, "sync", v.Sync())
	ok(t, "close", v.Close())
	path := e.store.walPath("sb")
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no intent log after a mount: %v", err)
	}
	ok(t, "remove", e.store.RemoveSandbox("sb"))
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("the intent log stays after the sandbox went: %v", err)
	}
	stray := e.store.walPath("other")
	ok(t, "stray", os.WriteFile(stray, encodeWalRec(walRec{cycle: 1, seq: 1, ops: [][]kv{{{key: []byte("i/x"), val: []byte("y")}}}}), 0o600))
	ok(t, "close store", e.store.Close())
	s, err := Open(filepath.Join(e.dir, "store"))
	ok(t, "open", err)
	e.store = s
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Fatalf("a log without a sandbox stays: %v", err)
	}
	fsckClean(t, s)
}

// TestWALPowerCutModel: random writes, truncates, creations, removals and
// renames, each batch ended by a Sync through the intent log, now and
// then a full sync or a freeze; at random points the image a power cut
// may leave (the store at the last full sync, the log as it is) must
// read as the last Sync left the files.
func TestWALPowerCutModel(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	if n, err := strconv.Atoi(os.Getenv("STRATA_WAL_MODEL_SEEDS")); err == nil && n > 0 {
		seeds = n
	}
	var rewrites uint64
	for seed := int64(1); seed <= int64(seeds); seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { rewrites += walModelRun(t, seed, 60) })
	}
	if rewrites == 0 {
		t.Fatal("no write rewrote a sealed block in place (rewrite.go)")
	}
	t.Logf("%d blocks rewritten in place", rewrites)
}

// TestWALPowerCutModelPageCache is the model with the log written through
// the page cache and fdatasync, as on a file system that refuses O_DIRECT
// (waldirect.go).
func TestWALPowerCutModelPageCache(t *testing.T) {
	walDirectOff = true
	t.Cleanup(func() { walDirectOff = false })
	for seed := int64(101); seed <= 102; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { walModelRun(t, seed, 60) })
	}
}

// noLoopSyncs keeps the journal loops of the test's views from syncing
// on their own: a full sync of theirs would move the image of a power
// cut on from the one the test copied.
func noLoopSyncs(t *testing.T) {
	loopSyncsOff = true
	t.Cleanup(func() { loopSyncsOff = false })
}

// walModelRun runs the model with seed; it returns how many sealed blocks
// writes rewrote in place.
func walModelRun(t *testing.T, seed int64, rounds int) uint64 {
	noLoopSyncs(t)
	rng := rand.New(rand.NewSource(seed))
	bs := []int{MinBlockSize, DefaultBlockSize}[rng.Intn(2)]
	e := newEnv(t, bs, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	model := map[string][]byte{}
	inos := map[string]uint64{}
	durable := ""
	dataAt := "" // the data files as a later data sync left them
	// What the last Sync left durable: the log as it synced it, and what
	// the files and the stack were then. Appends to the log after it are
	// not synced, and a power cut may lose them.
	var syncedLog []byte
	var syncedModel map[string][]byte
	var syncedListing, syncedStack []string
	synced := func() {
		var err error
		syncedLog, err = os.ReadFile(e.store.walPath("sb"))
		ok(t, "read log", err)
		syncedModel = cloneModel(model)
		syncedListing, syncedStack = treeOf(t, v), layerIDsOf(t, e.store)
	}
	snapshot := func() {
		ok(t, "full sync", v.sync(false, false))
		durable = filepath.Join(t.TempDir(), "durable")
		copyDir(t, filepath.Join(e.dir, "store"), durable)
		dataAt = ""
		synced()
	}
	// A checkpoint or rollback through the log that synced the data file
	// (it had too much to carry) makes the data files durable as they are.
	moreData := func(fn func()) {
		if d := syncedData(t, e, fn); d != "" {
			dataAt = d
		}
	}
	snapshot()
	// The checkpoints taken, with the files each froze.
	type modelState struct {
		layer string
		model map[string][]byte
		inos  map[string]uint64
	}
	var states []modelState
	names := []string{"a", "b", "c", "d", "e"}
	for round := 0; round < rounds; round++ {
		for op := 0; op < 1+rng.Intn(4); op++ {
			name := names[rng.Intn(len(names))]
			_, exists := model[name]
			switch k := rng.Intn(10); {
			case !exists || k == 0:
				if exists {
					ok(t, "unlink", v.Unlink(RootIno, name))
				}
				c := bytes.Repeat([]byte{byte('a' + rng.Intn(26))}, rng.Intn(3*bs))
				inos[name] = mkfile(t, v, RootIno, name, string(c)).Ino
				model[name] = c
			case k < 6:
				off := rng.Intn(len(model[name]) + bs)
				p := bytes.Repeat([]byte{byte('A' + rng.Intn(26))}, 1+rng.Intn(bs))
				_, err := v.WriteAt(inos[name], p, int64(off), false)
				ok(t, "write", err)
				m := model[name]
				if need := off + len(p); len(m) < need {
					m = append(m, make([]byte, need-len(m))...)
				}
				copy(m[off:], p)
				model[name] = m
			case k < 8:
				sz := rng.Intn(2*bs + 1)
				s64 := int64(sz)
				_, err := v.SetAttr(inos[name], SetAttrIn{Size: &s64})
				ok(t, "truncate", err)
				m := model[name]
				if sz <= len(m) {
					m = m[:sz]
				} else {
					m = append(m, make([]byte, sz-len(m))...)
				}
				model[name] = m
			case k == 8:
				ok(t, "unlink", v.Unlink(RootIno, name))
				delete(model, name)
				delete(inos, name)
			default:
				to := names[rng.Intn(len(names))]
				if to == name {
					continue
				}
				ok(t, "rename", v.Rename(RootIno, name, RootIno, to, 0))
				model[to], inos[to] = model[name], inos[name]
				delete(model, name)
				delete(inos, name)
			}
		}
		if rng.Intn(3) == 0 {
			// A power cut before this round's Sync, after some of the
			// pages written since the last one reached the data files
			// (the kernel writes them back when it likes): the image
			// must read as the last Sync left it.
			img := filepath.Join(t.TempDir(), "store")
			copyDir(t, durable, img)
			ok(t, "mkdir wal", os.MkdirAll(filepath.Join(img, "wal"), 0o700))
			ok(t, "write log", os.WriteFile(filepath.Join(img, "wal", "sb"), syncedLog, 0o600))
			older := dataAt
			if older == "" {
				older = filepath.Join(durable, "data")
			}
			mixData(t, rng, filepath.Join(img, "data"), older, filepath.Join(e.dir, "store", "data"))
			checkImage(t, fmt.Sprintf("round %d, unsynced writes", round), img, syncedStack, syncedListing, syncedModel)
		}
		switch k := rng.Intn(20); {
		case k == 0:
			snapshot()
			continue
		case k <= 2:
			// A checkpoint, through the log: the image keeps the
			// store from before it.
			if name := names[rng.Intn(len(names))]; rng.Intn(3) == 0 && model[name] != nil {
				// More than a record carries: the checkpoint syncs
				// the data file.
				p := bytes.Repeat([]byte{byte('0' + rng.Intn(10))}, walCarryData+rng.Intn(walCarryData))
				_, err := v.WriteAt(inos[name], p, 0, false)
				ok(t, "big write", err)
				if len(p) > len(model[name]) {
					model[name] = p
				} else {
					copy(model[name], p)
				}
			}
			var frozen string
			moreData(func() { frozen = freeze(t, e.store, e.name) })
			states = append(states, modelState{frozen, cloneModel(model), maps.Clone(inos)})
		case k == 3 && len(states) > 0:
			// A rollback to one of them, through the log too.
			to := states[rng.Intn(len(states))]
			moreData(func() {
				_, err := e.store.Repoint(e.name, to.layer, noRepointFn)
				ok(t, "repoint", err)
			})
			model, inos = cloneModel(to.model), maps.Clone(to.inos)
		}
		full := v.fullSyncs.Load()
		if rng.Intn(3) == 0 {
			ok(t, "sync", v.Sync())
		} else {
			// As fsync(2) through a mount: the operations may stay
			// uncommitted, in the log only, until the journal loop
			// commits them.
			ok(t, "fsync", v.Fsync())
		}
		if v.fullSyncs.Load() != full {
			// Too much data for the log: a full sync, the new image.
			durable = filepath.Join(t.TempDir(), "durable")
			copyDir(t, filepath.Join(e.dir, "store"), durable)
			dataAt = ""
		}
		synced()
		if rng.Intn(6) != 0 {
			continue
		}
		img, log := powerCutImage(t, e, durable, nil)
		withDataFrom(t, img, dataAt)
		if testing.Verbose() {
			recs := walCycle(bytes.NewReader(log), int64(len(log)))
			var c, sy uint64
			_ = e.store.View(func(tx *Txn) error { c, sy, _ = walMark(tx.txn, "sb"); return nil })
			first, last := uint64(0), uint64(0)
			if len(recs) > 0 {
				first, last = recs[0].seq, recs[len(recs)-1].seq
			}
			t.Logf("round %d: log %d records %d..%d, live mark %d/%d walSeq %d", round, len(recs), first, last, c, sy, v.walSeq.Load())
		}
		checkImage(t, fmt.Sprintf("round %d", round), img, syncedStack, syncedListing, syncedModel)
	}
	if len(states) > 0 && v.loggedQuiesces.Load() == 0 {
		t.Fatal("no checkpoint or rollback went through the intent log")
	}
	return v.rewrites.Load()
}

// checkImage opens the store image img of sandbox sb and checks it
// against what the view held when the image's state was durable: its
// stack, its listing and its files; fsck must find nothing.
func checkImage(t *testing.T, what, img string, stack, listing []string, model map[string][]byte) {
	t.Helper()
	s2, err := Open(img)
	ok(t, "open image", err)
	if got := layerIDsOf(t, s2); !slices.Equal(got, stack) {
		t.Fatalf("%s: the image's stack is %v, want %v", what, got, stack)
	}
	v2, err := s2.OpenView("sb", false)
	ok(t, "view of the image", err)
	want := map[string]string{}
	for n, c := range model {
		want[n] = string(c)
	}
	sameFiles(t, what, fileTree(t, v2), want)
	if got := treeOf(t, v2); !slices.Equal(got, listing) {
		t.Fatalf("%s: the image lists\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(listing, "\n"))
	}
	ok(t, "close view", v2.Close())
	fsckClean(t, s2)
	ok(t, "close image", s2.Close())
}

// mixData writes into dir the data files a power cut may leave: each
// page of each file as the older copy holds it (the data files at their
// last sync) or as the newer one does (as they are now), at random. A
// file's size is the newer one's: the model's writes never shrink one.
func mixData(t *testing.T, rng *rand.Rand, dir, older, newer string) {
	t.Helper()
	ok(t, "rm data", os.RemoveAll(dir))
	copyDir(t, older, dir)
	ents, err := os.ReadDir(newer)
	ok(t, "read data dir", err)
	for _, ent := range ents {
		cur, err := os.ReadFile(filepath.Join(newer, ent.Name()))
		ok(t, "read data", err)
		old, err := os.ReadFile(filepath.Join(dir, ent.Name()))
		if err != nil && !os.IsNotExist(err) {
			ok(t, "read old data", err)
		}
		out := make([]byte, len(cur))
		for at := 0; at < len(cur); at += pageSize {
			end := min(at+pageSize, len(cur))
			if rng.Intn(2) == 0 {
				copy(out[at:end], cur[at:end])
			} else if at < len(old) {
				copy(out[at:end], old[at:min(end, len(old))])
			}
		}
		ok(t, "write mixed data", os.WriteFile(filepath.Join(dir, ent.Name()), out, 0o600))
	}
}

// cloneModel copies a model's files (writes change them in place).
func cloneModel(m map[string][]byte) map[string][]byte {
	c := make(map[string][]byte, len(m))
	for n, b := range m {
		c[n] = bytes.Clone(b)
	}
	return c
}

// layerIDsOf lists sandbox sb's layers, head first, and its archived ones.
func layerIDsOf(t *testing.T, s *Store) []string {
	t.Helper()
	var ids []string
	for _, archived := range []bool{false, true} {
		ls, err := s.Layers("sb", archived)
		ok(t, "layers", err)
		for _, l := range ls {
			ids = append(ids, l.ID+" "+l.State)
		}
	}
	return ids
}

// TestWALClearedOnUnmount: an unmount leaves nothing in the intent log to
// read when the store opens next (its start is zeroed once the mark says
// everything is in place).
func TestWALClearedOnUnmount(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "x")
	ok(t, "sync", v.Sync())
	_, err := v.WriteAt(f.Ino, []byte("y"), 0, false)
	ok(t, "write", err)
	ok(t, "sync", v.Sync())
	if walOffset(v) <= 0 {
		t.Fatal("the Sync did not go through the intent log")
	}
	log, err := os.ReadFile(e.store.walPath("sb"))
	ok(t, "read log", err)
	if len(walCycle(bytes.NewReader(log), int64(len(log)))) == 0 {
		t.Fatal("no record in the log of a mounted sandbox")
	}
	ok(t, "close", v.Close())
	log, err = os.ReadFile(e.store.walPath("sb"))
	ok(t, "read log", err)
	if n := len(walCycle(bytes.NewReader(log), int64(len(log)))); n != 0 {
		t.Fatalf("%d records left in the log after the unmount", n)
	}
	v = e.reopen(e.view())
	t.Cleanup(func() { v.Close() })
	if got := content(t, v, f.Ino); got != "y" {
		t.Fatalf("after the unmount the file reads %q", got)
	}
}

// TestWALDamagedMark: a mark that does not decode leaves the log alone:
// the store opens, the sandbox mounts and syncs the full way, and fsck
// reports the mark (and one of a sandbox that does not exist).
func TestWALDamagedMark(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	f := mkfile(t, v, RootIno, "f", "kept")
	ok(t, "close", v.Close())
	ok(t, "damage", e.store.Update(func(tx *Txn) error { return tx.txn.Set(keyWal("sb"), []byte("bad")) }))
	ok(t, "a mark of no sandbox", e.store.Update(func(tx *Txn) error { return tx.txn.Set(keyWal("ghost"), encodeWalMark(1, 1)) }))
	rep, err := e.store.Fsck()
	ok(t, "fsck", err)
	var kinds []string
	for _, p := range rep.Problems {
		kinds = append(kinds, p.Kind+" "+p.Sandbox)
	}
	sort.Strings(kinds)
	if !slices.Equal(kinds, []string{"orphan ghost", "record sb"}) {
		t.Fatalf("fsck found %+v, want the damaged mark and the mark of no sandbox", rep.Problems)
	}
	ok(t, "remove the ghost's mark", e.store.Update(func(tx *Txn) error { return tx.txn.Delete(keyWal("ghost")) }))
	v = e.reopen(e.view())
	t.Cleanup(func() { v.Close() })
	if got := content(t, v, f.Ino); got != "kept" {
		t.Fatalf("the file reads %q", got)
	}
	if walOffset(v) != -1 {
		t.Fatal("a view uses a log whose mark does not decode")
	}
	_, err = v.WriteAt(f.Ino, []byte("KEPT"), 0, false)
	ok(t, "write", err)
	ok(t, "sync", v.Sync())
	v = e.reopen(v)
	if got := content(t, v, f.Ino); got != "KEPT" {
		t.Fatalf("after a full sync and a restart the file reads %q", got)
	}
}

// interleavingEnv is a sandbox of the default block size whose view keeps
// freed slots for reuse and syncs only when the test says: the tests that
// make one interleaving of Syncs happen.
func interleavingEnv(t *testing.T) (*testEnv, *View) {
	t.Helper()
	keepReuseWhenIdle = true
	t.Cleanup(func() { keepReuseWhenIdle = false })
	noLoopSyncs(t)
	e := newEnv(t, DefaultBlockSize, nil)
	v := e.view()
	t.Cleanup(func() { v.Close() })
	return e, v
}

// twoFiles is interleavingEnv with files f ("a"s) and g ("g"s) of a
// block each, made durable by a full sync, and a writer of p at offset
// off of an inode.
func twoFiles(t *testing.T) (*testEnv, *View, Attr, Attr, func(ino uint64, p string, off int64)) {
	t.Helper()
	const bs = DefaultBlockSize
	e, v := interleavingEnv(t)
	f := mkfile(t, v, RootIno, "f", strings.Repeat("a", bs))
	g := mkfile(t, v, RootIno, "g", strings.Repeat("g", bs))
	ok(t, "sync", v.Sync()) // a full one: the first after opening
	write := func(ino uint64, p string, off int64) {
		t.Helper()
		_, err := v.WriteAt(ino, []byte(p), off, false)
		ok(t, "write", err)
	}
	return e, v, f, g, write
}

// TestWALSealedDataTravelsWithItsRecords: a Sync whose sealed operations
// another Sync commits first must not write its data into the log later,
// after the slot it read was freed and written again: the data goes with
// the operations, whoever commits them. (Found by the crash test: a kill
// after such a late record, and the store opened with a block failing
// its checksum.)
func TestWALSealedDataTravelsWithItsRecords(t *testing.T) {
	const bs = DefaultBlockSize
	e, v, f, g, write := twoFiles(t)
	write(f.Ino, "1", 0) // f's block in a new slot X, sealed by the Sync below
	inGap := false
	syncGapHook = func(hv *View) {
		if inGap || hv != v {
			return
		}
		inGap = true
		// While the first Sync is between its seal and its commit: f's
		// block moves out of X and a second Sync commits everything
		// (the first's records too) through the log, which frees X.
		write(f.Ino, "2", 0)
		ok(t, "second sync", v.Sync())
		// X is reused by g's block, and a full sync makes that durable.
		write(g.Ino, "G", 0)
		ok(t, "full sync", v.sync(false, false))
	}
	t.Cleanup(func() { syncGapHook = nil })
	ok(t, "first sync", v.Sync())
	syncGapHook = nil
	// Every record that names a block's slot carries the slot's bytes:
	// none comes later, when the slot may hold another block's.
	log, err := os.ReadFile(e.store.walPath("sb"))
	ok(t, "read log", err)
	for _, r := range walCycle(bytes.NewReader(log), int64(len(log))) {
		named := map[[2]uint64]bool{}
		for _, op := range r.ops {
			for _, c := range op {
				if c.key[0] == tBlock && !c.del {
					ref, err := decodeBlockRef(c.val)
					ok(t, "block record", err)
					named[[2]uint64{beUint64(c.key[29:]), uint64(ref.off())}] = true
				}
			}
		}
		for _, sg := range r.segs {
			if !named[[2]uint64{sg.ino, uint64(sg.off)}] {
				t.Fatalf("record %d carries bytes of inode %d at %d without its block's record", r.seq, sg.ino, sg.off)
			}
		}
	}
	s2, v2 := openImage(t, killImage(t, e))
	t.Cleanup(func() { v2.Close() })
	if got := content(t, v2, f.Ino); got != "2"+strings.Repeat("a", bs-1) {
		t.Fatalf("f reads %q...", got[:4])
	}
	if got := content(t, v2, g.Ino); got != "G"+strings.Repeat("g", bs-1) {
		t.Fatalf("g reads %q...", got[:4])
	}
	fsckClean(t, s2)
}

// TestWALLeavesAFullSyncsRecords: a Sync through the log must not commit
// the records of a full Sync that sealed before it and has not synced
// its data yet: nothing would make that data durable with them, and a
// replay of an older record into the slot (reused) would overwrite it.
// (Found by the crash test: blocks failing their checksums after a kill
// during a checkpoint.)
func TestWALLeavesAFullSyncsRecords(t *testing.T) {
	e, v, sc := reusedSlotScene(t)
	h := mkfile(t, v, RootIno, "h", "")
	img := ""
	inGap := false
	syncGapHook = func(hv *View) {
		if inGap || hv != v {
			return
		}
		inGap = true
		sc.write(h.Ino, "h")
		full := v.fullSyncs.Load()
		ok(t, "sync in the gap", v.Sync())
		if v.fullSyncs.Load() != full+1 {
			t.Error("the Sync in the gap went through the log, over records whose data is not synced")
		}
		// A kill now: the image the kernel holds.
		img = filepath.Join(t.TempDir(), "store")
		copyDir(t, filepath.Join(e.dir, "store"), img)
	}
	t.Cleanup(func() { syncGapHook = nil })
	ok(t, "full sync", v.sync(false, false))
	syncGapHook = nil
	sc.check(img, map[uint64]string{h.Ino: "h"})
}

// reusedSlotScene is a view (interleavingEnv) in which file g's block has
// just been copied, unsealed, into a slot X that file f's block held, whose
// bytes a record of the intent log holds and whose freeing is durable:
// what a replay of that record could put back under g's block.
func reusedSlotScene(t *testing.T) (*testEnv, *View, *slotScene) {
	t.Helper()
	const bs = DefaultBlockSize
	e, v := interleavingEnv(t)
	sc := &slotScene{t: t, v: v}
	sc.f = mkfile(t, v, RootIno, "f", strings.Repeat("f", bs)).Ino
	sc.g = mkfile(t, v, RootIno, "g", strings.Repeat("g", bs)).Ino
	ok(t, "sync", v.Sync()) // a full one: the first after opening
	sc.write(sc.f, "1")
	ok(t, "logged sync", v.Sync()) // f's block in slot X, its bytes in a record
	sc.write(sc.f, "2")
	ok(t, "logged sync", v.Sync()) // f moves on; X is kept for reuse
	sc.write(sc.g, "G")            // g's block copied into X
	return e, v, sc
}

// slotScene is what reusedSlotScene made.
type slotScene struct {
	t    *testing.T
	v    *View
	f, g uint64
}

func (sc *slotScene) write(ino uint64, p string) {
	sc.t.Helper()
	_, err := sc.v.WriteAt(ino, []byte(p), 0, false)
	ok(sc.t, "write", err)
}

// check opens the store image img (a kill's) and checks that f, g and the
// files of more read as written, and fsck.
func (sc *slotScene) check(img string, more map[uint64]string) {
	t := sc.t
	t.Helper()
	const bs = DefaultBlockSize
	s2, v2 := openImage(t, img)
	t.Cleanup(func() { v2.Close() })
	want := map[uint64]string{sc.f: "2" + strings.Repeat("f", bs-1), sc.g: "G" + strings.Repeat("g", bs-1)}
	for ino, c := range more {
		want[ino] = c
	}
	for ino, c := range want {
		if got, err := readAll(v2, ino); err != nil || got != c {
			t.Fatalf("inode %d after the kill: %q... %v", ino, got[:min(len(got), 4)], err)
		}
	}
	fsckClean(t, s2)
}

// readAll reads a whole file of v, returning the read's error.
func readAll(v *View, ino uint64) (string, error) {
	a, err := v.GetAttr(ino)
	if err != nil {
		return "", err
	}
	b := make([]byte, a.Size)
	n, err := v.ReadAt(ino, b, 0)
	return string(b[:n]), err
}

// TestWALCheckpointCommittingTheJournalFirst: a checkpoint whose
// transaction cannot take the journal commits the journal on its own
// first; those commits say that the quiesce synced the data, so a kill
// between them and the checkpoint's transaction leaves nothing to replay
// under them. (Found by the crash test: a kill during a checkpoint, a
// reused slot's old bytes replayed under a committed block.)
func TestWALCheckpointCommittingTheJournalFirst(t *testing.T) {
	e, v, sc := reusedSlotScene(t)
	logged := v.walSeq.Load() // the record that freed X among them
	img := ""
	calls := 0
	_, _, err := e.store.Freeze(e.name, func(tx *Txn, frozen, next string) error {
		calls++
		if calls == 1 {
			return fmt.Errorf("a read of the layer: %w", errNeedsJournal)
		}
		// What is committed (not this transaction's own mark).
		var synced uint64
		err := e.store.View(func(tx *Txn) error {
			var err error
			_, synced, err = walMark(tx.txn, "sb")
			return err
		})
		if err != nil || synced < logged {
			t.Errorf("the journal's commits say the data is synced up to record %d (%v), want %d", synced, err, logged)
		}
		// The journal is committed; a kill now, before this transaction.
		img = filepath.Join(t.TempDir(), "store")
		copyDir(t, filepath.Join(e.dir, "store"), img)
		return nil
	})
	ok(t, "freeze", err)
	if calls != 2 {
		t.Fatalf("the checkpoint's function ran %d times, want 2", calls)
	}
	sc.check(img, nil)
}

// TestFsyncLeavesItsOperationsWhole: an Fsync whose record takes the
// operations of a Sync still between its seal and its commit (and of a
// write before that Sync's hold) leaves them all to the journal, and the
// next commit takes them whole, holds or not: a commit that took only
// those before the hold and stored the record's number would make a
// replay skip the record, and a kill -9 then lose what the Fsync made
// durable. (Found by the crash test, with the fsyncs of a mount left to
// the journal loop.)
func TestFsyncLeavesItsOperationsWhole(t *testing.T) {
	const bs = DefaultBlockSize
	e, v, f, g, write := twoFiles(t)
	// The journal loop must not commit the creation of h before the
	// first Fsync's hold: this hold keeps it pending.
	early := v.holdJournal()
	mkfile(t, v, RootIno, "h", "h")
	write(f.Ino, "1", 0)
	var img string // what a kill -9 leaves, once the journal committed
	inGap := false
	syncGapHook = func(hv *View) {
		if inGap || hv != v {
			return
		}
		inGap = true
		write(g.Ino, "2", 0)
		ok(t, "second fsync", v.Fsync())
		if v.loggedUpTo == 0 {
			t.Fatal("the second Fsync committed its operations")
		}
		v.releaseJournal(early)
		ok(t, "journal commit", v.commit())
		img = killImage(t, e)
	}
	t.Cleanup(func() { syncGapHook = nil })
	ok(t, "first fsync", v.Fsync())
	syncGapHook = nil
	_, v2 := openImage(t, img)
	defer v2.Close()
	if got := content(t, v2, g.Ino); got != "2"+strings.Repeat("g", bs-1) {
		t.Fatalf("after the kill g reads %q..., not what the second Fsync made durable", got[:4])
	}
}

// killImage copies the store of e as a kill -9 of its process leaves it
// (every file as the page cache holds it), for openImage.
func killImage(t *testing.T, e *testEnv) string {
	t.Helper()
	img := filepath.Join(t.TempDir(), "store")
	copyDir(t, filepath.Join(e.dir, "store"), img)
	return img
}
