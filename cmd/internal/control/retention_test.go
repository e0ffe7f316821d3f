package control

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/checkpoint/checkpointtest"
	"github.com/strata-sandbox/strata/layers"
)

// TestRetentionPrunesServedSandboxes: a serving server applies its
// retention policy to the sandboxes it serves, on its own, as prune does
// (the last checkpoints and the young ones stay); one with retention off
// applies nothing.
func TestRetentionPrunesServedSandboxes(t *testing.T) {
	for _, c := range []struct {
		name      string
		every     time.Duration
		wantAfter int
	}{
		{"on", 20 * time.Millisecond, 2},
		{"off", 0, 5},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, st, mnt := mountedServer(t, Options{Retention: c.every, RetentionPolicy: checkpoint.Policy{KeepLast: 2, KeepWithin: time.Hour}})
			var ids []string
			for i := range 5 {
				if err := os.WriteFile(filepath.Join(mnt, "f"), []byte{byte(i)}, 0o644); err != nil {
					t.Fatal(err)
				}
				var cp checkpoint.Checkpoint
				if err := srv.Call(OpCheckpointCreate, CheckpointCreateArgs{Sandbox: "s"}, &cp); err != nil {
					t.Fatal(err)
				}
				ids = append(ids, cp.ID)
			}
			// The first four are two hours old: past the policy's hour,
			// and only the last two stay by its count.
			for _, id := range ids[:4] {
				if err := checkpointtest.Backdate(st, id, time.Now().Add(-2*time.Hour)); err != nil {
					t.Fatal(err)
				}
			}
			if err := srv.Listen(); err != nil {
				t.Fatal(err)
			}
			served := make(chan error, 1)
			go func() { served <- srv.Serve() }()
			defer func() {
				srv.Shutdown()
				if err := <-served; err != nil {
					t.Errorf("Serve: %v", err)
				}
				st.Close()
			}()
			list := func() []checkpoint.Checkpoint {
				var cps []checkpoint.Checkpoint
				if err := srv.Call(OpCheckpointList, CheckpointListArgs{Sandbox: "s"}, &cps); err != nil {
					t.Fatal(err)
				}
				return cps
			}
			deadline := time.Now().Add(5 * time.Second)
			for len(list()) != c.wantAfter && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if c.every == 0 {
				time.Sleep(100 * time.Millisecond)
			}
			cps := list()
			if len(cps) != c.wantAfter {
				t.Fatalf("%d checkpoints left, want %d", len(cps), c.wantAfter)
			}
			if got := cps[len(cps)-1].ID; got != ids[4] {
				t.Errorf("the newest checkpoint left is %s, want %s", got, ids[4])
			}
			// The mount goes on, and a kept checkpoint still rolls back.
			if err := srv.Call(OpRollback, RollbackArgs{Sandbox: "s", Checkpoint: ids[3]}, nil); err != nil {
				t.Fatalf("rollback to a kept checkpoint: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || len(b) != 1 || b[0] != 3 {
				t.Errorf("f after the rollback: %v, %v; want [3]", b, err)
			}
		})
	}
}

// TestRetentionStopsWithTheServer: a server applying its policy every
// millisecond, while checkpoints are made, shuts down cleanly and its
// store closes. (Serve waits for the retention to stop before it returns,
// so that its owner may close the store; the interleaving where that
// matters, a pass entering after the mounts stopped, is too narrow for
// this test to meet reliably.)
func TestRetentionStopsWithTheServer(t *testing.T) {
	for round := range 3 {
		srv, st, _ := mountedServer(t, Options{Retention: time.Millisecond, RetentionPolicy: checkpoint.Policy{KeepLast: 1}})
		if err := srv.Listen(); err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- srv.Serve() }()
		for range 10 {
			if err := srv.Call(OpCheckpointCreate, CheckpointCreateArgs{Sandbox: "s"}, nil); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		srv.Shutdown()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if err := st.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	}
}

// mountedServer opens a store in a temporary directory, makes a server of
// it with o and has it mount sandbox "s" over an empty base; it returns
// the server (not yet listening), the store and the mountpoint. The test's
// end shuts the server down and closes the store, failed or not.
func mountedServer(t *testing.T, o Options) (*Server, *layers.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(st, o)
	// Whatever the test does, the mount goes and the store closes (both
	// do nothing the second time).
	t.Cleanup(func() {
		srv.Shutdown()
		st.Close()
	})
	base, mnt := filepath.Join(dir, "base"), filepath.Join(dir, "mnt")
	for _, d := range []string{base, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Call(OpSandboxCreate, CreateArgs{Name: "s", Base: base}, nil); err != nil {
		t.Fatal(err)
	}
	if err := srv.Call(OpMount, MountArgs{Name: "s", Mountpoint: mnt}, nil); err != nil {
		t.Fatal(err)
	}
	return srv, st, mnt
}
