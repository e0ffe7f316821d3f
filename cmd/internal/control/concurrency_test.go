package control

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentIOAndCommands: many readers and writers on the same files
// of a live mount while checkpoint, list, diff, verify, layers, status and
// fsck requests arrive over the socket at the same time, as agents and
// their platform do. Run under -race by `make test` (RACE_PKGS): the server,
// the view and the FUSE node code all run here, in one process.
//
// Writers own disjoint 4 KiB slots of shared files and stamp each slot
// with its writer and round, so a reader can tell a torn or foreign slot
// from an old one; every checkpoint must verify, and at the end the files
// hold each writer's last round.
func TestConcurrentIOAndCommands(t *testing.T) {
	srv, base := newServer(t)
	mnt := filepath.Join(filepath.Dir(base), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	const (
		files   = 3
		writers = 6
		readers = 4
		slot    = 4096
		slots   = 8 // per writer and file
	)
	// The base holds the shared files, so the first writes copy blocks up.
	for f := 0; f < files; f++ {
		if err := os.WriteFile(filepath.Join(base, fmt.Sprint("shared", f)), make([]byte, writers*slots*slot), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Dial(srv.Store().Dir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Call(OpSandboxCreate, CreateArgs{Name: "s", Base: base}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(OpMount, MountArgs{Name: "s", Mountpoint: mnt}, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Call(OpUnmount, UnmountArgs{Name: "s"}, nil); err != nil {
			t.Errorf("unmount: %v", err)
		}
	})

	stamp := func(w, round int) []byte {
		b := bytes.Repeat([]byte(fmt.Sprintf("w%02d r%06d|", w, round)), slot/12+1)
		return b[:slot]
	}
	duration := 3 * time.Second
	if testing.Short() {
		duration = time.Second
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	lastRound := make([]int, writers)
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 1; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				for f := 0; f < files; f++ {
					fh, err := os.OpenFile(filepath.Join(mnt, fmt.Sprint("shared", f)), os.O_WRONLY, 0)
					if err != nil {
						fail(fmt.Errorf("writer %d: %w", w, err))
						return
					}
					for s := 0; s < slots; s++ {
						if _, err := fh.WriteAt(stamp(w, round), int64((w*slots+s)*slot)); err != nil {
							fail(fmt.Errorf("writer %d: %w", w, err))
						}
					}
					if round%5 == 0 {
						if err := fh.Sync(); err != nil {
							fail(fmt.Errorf("writer %d: fsync: %w", w, err))
						}
					}
					if err := fh.Close(); err != nil {
						fail(fmt.Errorf("writer %d: close: %w", w, err))
					}
				}
				lastRound[w] = round
			}
		}()
	}
	var reads atomic.Int64
	for r := 0; r < readers; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				data, err := os.ReadFile(filepath.Join(mnt, fmt.Sprint("shared", i%files)))
				if err != nil {
					fail(fmt.Errorf("reader %d: %w", r, err))
					return
				}
				for off := 0; off+slot <= len(data); off += slot {
					w := off / slot / slots
					s := data[off : off+slot]
					if bytes.Equal(s, make([]byte, slot)) {
						continue // not written yet
					}
					// A read racing a write of the same page may see part of
					// each round (Linux reads do not lock pages), or, racing
					// the slot's first write, part of it and the zeros of the
					// hole it fills; never another writer's bytes or anything
					// else.
					for u := 0; u+12 <= slot; u += 12 {
						var ww, round int
						if tornFromHole(s[u:u+12], w) {
							continue
						}
						if _, err := fmt.Sscanf(string(s[u:u+12]), "w%02d r%06d|", &ww, &round); err != nil || ww != w || !bytes.Equal(s[u:u+12], stamp(w, round)[:12]) {
							fail(fmt.Errorf("reader %d: slot at %d of shared%d holds foreign bytes at %d: %q", r, off, i%files, u, s[u:min(u+24, slot)]))
							return
						}
					}
				}
				reads.Add(1)
			}
		}()
	}
	var cps []string
	commands := 0
	deadline := time.Now().Add(duration)
	for time.Now().Before(deadline) && len(errs) == 0 {
		var cp struct {
			ID string `json:"id"`
		}
		if err := c.Call(OpCheckpointCreate, CheckpointCreateArgs{Sandbox: "s"}, &cp); err != nil {
			t.Fatalf("checkpoint: %v", err)
		}
		cps = append(cps, cp.ID)
		calls := []struct {
			op   string
			args any
		}{
			{OpCheckpointList, CheckpointListArgs{Sandbox: "s"}},
			{OpCheckpointDiff, DiffArgs{From: cps[0]}},
			{OpVerify, VerifyArgs{Ref: cp.ID}},
			{OpLayersList, LayersArgs{Sandbox: "s"}},
			{OpStatus, NameArgs{Name: "s"}},
			{OpSandboxList, nil},
		}
		if len(cps)%4 == 0 {
			calls = append(calls, struct {
				op   string
				args any
			}{OpFsck, nil})
		}
		// Another client at the same time, as a second CLI would be.
		var cwg sync.WaitGroup
		for _, call := range calls {
			cwg.Add(1)
			go func() {
				defer cwg.Done()
				c2, err := Dial(srv.Store().Dir())
				if err != nil {
					fail(err)
					return
				}
				defer c2.Close()
				var res any
				if call.op == OpVerify {
					var vs []VerifyReport
					err = c2.Call(call.op, call.args, &vs)
					for _, v := range vs {
						if err == nil && !v.OK {
							err = fmt.Errorf("checkpoint %s does not verify: %+v", cp.ID, v)
						}
					}
					if err == nil && len(vs) != 1 {
						err = fmt.Errorf("verify %s: %d reports, want 1", cp.ID, len(vs))
					}
				} else if call.op == OpFsck {
					var f FsckResult
					err = c2.Call(call.op, call.args, &f)
					if err == nil && !f.OK {
						err = fmt.Errorf("fsck: %+v", f.Problems)
					}
				} else {
					err = c2.Call(call.op, call.args, &res)
				}
				if err != nil {
					fail(fmt.Errorf("%s: %w", call.op, err))
				}
			}()
		}
		cwg.Wait()
		commands += len(calls) + 1
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for f := 0; f < files; f++ {
		data, err := os.ReadFile(filepath.Join(mnt, fmt.Sprint("shared", f)))
		if err != nil {
			t.Fatal(err)
		}
		for w := 0; w < writers; w++ {
			for s := 0; s < slots; s++ {
				off := (w*slots + s) * slot
				if got, want := data[off:off+slot], stamp(w, lastRound[w]); !bytes.Equal(got, want) {
					t.Fatalf("shared%d writer %d slot %d: got %q, want round %d", f, w, s, got[:12], lastRound[w])
				}
			}
		}
	}
	if len(cps) < 2 || reads.Load() == 0 {
		t.Fatalf("too little happened: %d checkpoints, %d reads", len(cps), reads.Load())
	}
	t.Logf("%d checkpoints, %d commands, %d whole-file reads, writers' last rounds %v", len(cps), commands, reads.Load(), lastRound)
}

// tornFromHole tells whether unit, 12 bytes of a slot of writer w, mixes
// zeros with the bytes of some stamp of w at their places ("w01 r0000"
// then zeros, say): what a read sees that races the first write into a
// hole, copied while it is copied.
func tornFromHole(unit []byte, w int) bool {
	tmpl := []byte(fmt.Sprintf("w%02d r000000|", w))
	zeros := 0
	for i, b := range unit {
		switch {
		case b == 0:
			zeros++
		case i >= 5 && i <= 10:
			if b < '0' || b > '9' {
				return false
			}
		case b != tmpl[i]:
			return false
		}
	}
	return zeros > 0
}

func TestTornFromHole(t *testing.T) {
	for _, tc := range []struct {
		unit string
		w    int
		want bool
	}{
		{"w01 \x00\x00\x00\x00\x00\x00\x00\x00", 1, true},
		{"\x00\x00\x00\x00\x00\x0012345|", 1, true},
		{"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", 1, true},
		{"w01 r000123|", 1, false}, // whole: the stamp check's
		{"w02 \x00\x00\x00\x00\x00\x00\x00\x00", 1, false},
		{"w01 r0x\x00\x00\x00\x00\x00", 1, false},
		{"w01 r000123\x00", 3, false},
	} {
		if got := tornFromHole([]byte(tc.unit), tc.w); got != tc.want {
			t.Errorf("tornFromHole(%q, %d) = %v, want %v", tc.unit, tc.w, got, tc.want)
		}
	}
}
