package features

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/cucumber/godog"
)

// initDiskFullSteps registers the steps of diskfull.feature.
func initDiskFullSteps(sc *godog.ScenarioContext) {
	sc.Step(`^the store is on a file system of (\d+) MiB$`, storeOnSmallFS)
	sc.Step(`^I rewrite (\d+) MiB of random bytes in "([^"]*)" and checkpoint "([^"]*)" until the store is full$`, fillByRewrites)
	sc.Step(`^the collection gave back at least (\d+) MiB$`, gaveBackAtLeast)
}

// storeOnSmallFS mounts a tmpfs of mib MiB where the scenario's store
// goes; teardown unmounts it once the store is released.
func storeOnSmallFS(ctx context.Context, mib int) error {
	w := getWorld(ctx)
	if err := os.Mkdir(w.store, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", w.store, "tmpfs", 0, fmt.Sprintf("size=%dm", mib)); err != nil {
		return fmt.Errorf("mount a %d MiB tmpfs for the store (needs root): %w", mib, err)
	}
	w.storeFS = true
	return nil
}

// fillByRewrites rewrites rel with mib MiB of new random bytes and takes
// a checkpoint of sandbox, again and again, until a write fails with
// ENOSPC; it fails if that never comes or anything else fails.
func fillByRewrites(ctx context.Context, mib int, rel, sandbox string) error {
	w := getWorld(ctx)
	b := make([]byte, mib<<20)
	for i := 0; i < 100; i++ {
		if _, err := rand.Read(b); err != nil {
			return err
		}
		err := os.WriteFile(w.path(rel), b, 0o644)
		if errors.Is(err, syscall.ENOSPC) {
			if i < 2 {
				return fmt.Errorf("the store was full after %d rewrites", i)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("rewrite %d: %w", i+1, err)
		}
		if _, err := w.ok("checkpoint", "create", sandbox); err != nil {
			return err
		}
	}
	return fmt.Errorf("the store did not fill up after 100 rewrites of %d MiB", mib)
}

func gaveBackAtLeast(ctx context.Context, mib int) error {
	if got := getCheckpoints(ctx).gc.BytesFreed; got < int64(mib)<<20 {
		return fmt.Errorf("the collection freed %d bytes, want at least %d MiB", got, mib)
	}
	return nil
}
