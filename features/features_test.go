// Package features runs the Gherkin features of this directory against the
// real strata binary and real FUSE mounts.
package features

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cucumber/godog"
)

// strataBin is the binary under test, built once by TestMain.
var strataBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-features-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	strataBin = filepath.Join(dir, "strata")
	if out, err := exec.Command("go", "build", "-o", strataBin, "../cmd/strata").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build strata: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestFeatures(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Fatalf("the features mount sandboxes and need /dev/fuse: %v", err)
	}
	suite := godog.TestSuite{
		ScenarioInitializer: func(sc *godog.ScenarioContext) {
			// First: its After hook closes files held open before the
			// world's unmounts the sandboxes.
			initCheckpointSteps(sc)
			initWorld(sc)
			initMountSteps(sc)
			initFileSteps(sc)
			initPlanSteps(sc)
			initRetentionSteps(sc)
			initDiskFullSteps(sc)
		},
		Options: &godog.Options{
			Format:   "pretty",
			Paths:    []string{"."},
			Strict:   true,
			TestingT: t,
		},
	}
	if suite.Run() != 0 {
		t.Fatal("feature tests failed")
	}
}
