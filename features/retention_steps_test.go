package features

import (
	"context"
	"fmt"
	"time"

	"github.com/cucumber/godog"
	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/checkpoint/checkpointtest"
	"github.com/strata-sandbox/strata/layers"
)

// initRetentionSteps registers the steps of retention.feature.
func initRetentionSteps(sc *godog.ScenarioContext) {
	sc.Step(`^the sandbox "([^"]*)" has (\d+) checkpoints "c1" to "c\d+", the oldest (\d+) of them (\d+) days old$`, oldCheckpoints)
	sc.Step(`^I mount the sandbox "([^"]*)" with the retention applied every (\d+) ms$`, mountWithRetention)
	sc.Step(`^within (\d+) s the checkpoints of "([^"]*)" are "c(\d+)" to "c(\d+)"$`, checkpointsBecome)
}

// oldCheckpoints makes n checkpoints of an unmounted sandbox through the Go
// API, labelled c1 to cn, and dates the first old of them days back, as
// if they had been made then.
func oldCheckpoints(ctx context.Context, sandbox string, n, old, days int) error {
	st, err := layers.Open(getWorld(ctx).store)
	if err != nil {
		return err
	}
	defer st.Close()
	m := checkpoint.New(st, nil)
	var ids []string
	for i := 1; i <= n; i++ {
		cp, err := m.Create(sandbox, checkpoint.Options{Label: fmt.Sprintf("c%d", i)})
		if err != nil {
			return err
		}
		ids = append(ids, cp.ID)
	}
	when := time.Now().Add(-time.Duration(days) * 24 * time.Hour)
	for _, id := range ids[:old] {
		if err := checkpointtest.Backdate(st, id, when); err != nil {
			return err
		}
	}
	return nil
}

func mountWithRetention(ctx context.Context, name string, ms int) error {
	w := getWorld(ctx)
	r, err := w.runEnv([]string{fmt.Sprintf("STRATA_RETENTION_EVERY=%dms", ms)}, "mount", name, w.mnt)
	if err != nil {
		return err
	}
	if r.code != 0 {
		return fmt.Errorf("want success, got %v", r)
	}
	return nil
}

// checkpointsBecome waits for the checkpoints of sandbox to be exactly
// those labelled cfirst to clast.
func checkpointsBecome(ctx context.Context, secs int, sandbox string, first, last int) error {
	deadline := time.Now().Add(time.Duration(secs) * time.Second)
	for {
		var cps []checkpointJSON
		if err := getWorld(ctx).okJSON(&cps, "checkpoint", "list", sandbox); err != nil {
			return err
		}
		ok := len(cps) == last-first+1
		for i, cp := range cps {
			ok = ok && cp.Label == fmt.Sprintf("c%d", first+i)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %d s, %d checkpoints, from %q to %q; want c%d to c%d", secs, len(cps), cps[0].Label, cps[len(cps)-1].Label, first, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
