package checkpoint

import (
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/fs"
	"github.com/strata-sandbox/strata/layers"
)

// crashChild is the body of the process the crash test kills: it serves a
// real mount (which the test writes into) and checkpoints and rolls back as
// fast as it can. It never touches its own mount: a FUSE server killed
// while it waits on itself hangs in the kernel.
func crashChild(storeDir, mnt string, seed int64) {
	st, err := layers.Open(storeDir)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(3)
	}
	v, err := st.OpenView("s", false)
	if err != nil {
		fmt.Println("view:", err)
		os.Exit(3)
	}
	ms := mounts{}
	m, err := fs.New(mnt, v, fs.Options{})
	if err != nil {
		fmt.Println("mount:", err)
		os.Exit(3)
	}
	ms["s"] = m
	mgr := New(st, ms)
	rng := rand.New(rand.NewSource(seed))
	fmt.Println("ready")
	for i := 0; ; i++ {
		time.Sleep(time.Duration(rng.Intn(3)) * time.Millisecond)
		switch rng.Intn(3) {
		case 0, 1:
			mgr.Create("s", Options{Step: i})
		case 2:
			if cps, _ := mgr.List("s"); len(cps) > 0 {
				mgr.Rollback("s", cps[rng.Intn(len(cps))].ID)
			}
		}
	}
}

func TestMain(m *testing.M) {
	if path := os.Getenv("STRATA_MAPPER_FILE"); path != "" {
		mapperChild(path)
		return
	}
	if dir := os.Getenv("STRATA_CRASH_CHILD"); dir != "" {
		seed, _ := strconv.ParseInt(os.Getenv("STRATA_CRASH_SEED"), 10, 64)
		crashChild(dir, os.Getenv("STRATA_CRASH_MNT"), seed)
		return
	}
	os.Exit(m.Run())
}

// TestCrashDuringCheckpointAndRollback kills the serving process with
// SIGKILL at random moments while it writes, checkpoints and rolls back,
// and checks after each kill that the store opens, every checkpoint
// verifies, and the sandbox mounts again. STRATA_CRASH_KILLS sets the
// number of kills (default 8; the stress target runs hundreds).
func TestCrashDuringCheckpointAndRollback(t *testing.T) {
	kills := 8
	if s := os.Getenv("STRATA_CRASH_KILLS"); s != "" {
		kills, _ = strconv.Atoi(s)
	}
	dir := t.TempDir()
	base, mnt, storeDir := filepath.Join(dir, "base"), filepath.Join(dir, "mnt"), filepath.Join(dir, "store")
	os.MkdirAll(base, 0o755)
	os.MkdirAll(mnt, 0o755)
	os.WriteFile(filepath.Join(base, "f0"), []byte("base"), 0o644)
	st, err := layers.Open(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateSandbox("s", base, 0); err != nil {
		t.Fatal(err)
	}
	st.Close()
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	for k := 0; k < kills; k++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "STRATA_CRASH_CHILD="+storeDir, "STRATA_CRASH_MNT="+mnt, fmt.Sprintf("STRATA_CRASH_SEED=%d", seed+int64(k)))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, _ := out.Read(buf)
		if string(buf[:n]) != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("kill %d: child said %q", k, buf[:n])
		}
		deadline := time.Now().Add(time.Duration(20+rng.Intn(300)) * time.Millisecond)
		for i := 0; time.Now().Before(deadline); i++ {
			p := filepath.Join(mnt, fmt.Sprintf("f%d", rng.Intn(20)))
			if f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
				f.WriteAt(make([]byte, 1+rng.Intn(200<<10)), int64(rng.Intn(1<<20)))
				if i%5 == 0 {
					f.Sync()
				}
				f.Close()
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		// The dead server's mount is gone from the kernel's point of view
		// only once detached.
		syscall.Unmount(mnt, syscall.MNT_DETACH)

		st, err := layers.Open(storeDir)
		if err != nil {
			t.Fatalf("kill %d: store does not open: %v", k, err)
		}
		mgr := New(st, nil)
		cps, err := mgr.List("s")
		if err != nil {
			st.Close()
			t.Fatalf("kill %d: list: %v", k, err)
		}
		for _, cp := range cps {
			if cp.StateHash == "" {
				continue // killed between the freeze and storing its hash
			}
			res, err := mgr.Verify(cp.ID)
			if err != nil || !res.OK {
				st.Close()
				t.Fatalf("kill %d: verify %s: %+v %v", k, cp.ID, res, err)
			}
		}
		v, err := st.OpenView("s", false)
		if err != nil {
			st.Close()
			t.Fatalf("kill %d: view: %v", k, err)
		}
		if _, err := v.ReadDir(layers.RootIno); err != nil {
			t.Errorf("kill %d: readdir: %v", k, err)
		}
		v.Close()
		st.Close()
		t.Logf("kill %d: %d checkpoints verified", k, len(cps))
	}
}
