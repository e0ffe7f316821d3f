package main

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

// TestDedupKilled kills the serving process with SIGKILL at random moments
// of `gc --dedup` passes over files copied from step to step, and checks
// after each restart that every file reads as written, fsck finds
// nothing, and a pass run to the end gives every duplicate's slot back.
func TestDedupKilled(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "dd", "--base", e.base)
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	var info control.MountInfo
	e.okJSON(&info, "mount", "dd", e.mnt)
	want := map[string][]byte{}
	// Four steps, each copying what the one before wrote: 3 x 8 MiB to keep
	// once (128 blocks of 64 KiB each).
	data := make([]byte, 8<<20)
	rng.Read(data)
	for step := range 4 {
		name := fmt.Sprintf("copy%d.bin", step)
		writeFile(t, filepath.Join(e.mnt, name), string(data))
		want[name] = data
		e.checkpoint("dd")
	}
	check := func(when string) {
		t.Helper()
		for name, b := range want {
			got, err := os.ReadFile(filepath.Join(e.mnt, name))
			if err != nil || !bytes.Equal(got, b) {
				t.Fatalf("%s: %s reads %d bytes (%v), not what was written", when, name, len(got), err)
			}
		}
	}
	midway := 0
	for k := range 6 {
		c, err := control.Dial(e.store)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Call(control.OpGC, control.GCArgs{Dedup: true}, nil) }()
		time.Sleep(time.Duration(rng.Intn(60)) * time.Millisecond)
		if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %d: %v", k, err)
		}
		if err := <-done; err != nil {
			midway++
		}
		c.Close()
		waitFor(t, 10*time.Second, "the killed server to be gone", func() bool { return processGone(info.PID) })
		syscall.Unmount(e.mnt, syscall.MNT_DETACH)
		e.okJSON(&info, "mount", "dd", e.mnt)
		check(fmt.Sprintf("after kill %d", k))
		var rep layers.FsckReport
		e.okJSON(&rep, "fsck")
		if len(rep.Problems) != 0 {
			t.Fatalf("fsck after kill %d: %+v", k, rep.Problems)
		}
	}
	t.Logf("%d of 6 kills landed before the pass returned", midway)
	var r layers.GCResult
	e.okJSON(&r, "gc", "--dedup")
	var ls []struct {
		ID    string `json:"id"`
		Bytes int64  `json:"bytes"`
	}
	e.okJSON(&ls, "layers", "list", "dd")
	var kept int64
	for _, l := range ls {
		kept += l.Bytes
	}
	if kept != 8<<20 {
		t.Errorf("layers keep %d bytes after a whole pass, want one copy (%d)", kept, 8<<20)
	}
	check("after a whole pass")
	e.ok("verify", "dd")
}
