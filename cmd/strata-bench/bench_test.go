package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	// The loopback target re-executes this binary as its FUSE server.
	if len(os.Args) > 1 && os.Args[1] == "-serve-loopback" {
		os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// underCI: tests that need root, FUSE or fuse-overlayfs fail instead of
// skipping when CI=true, because .ci/run installs all of them.
var underCI = os.Getenv("CI") == "true"

// require skips the test (or fails it under CI) when why is not empty.
func require(t *testing.T, why string) {
	t.Helper()
	if why == "" {
		return
	}
	if underCI {
		t.Fatalf("%s (required when CI=true)", why)
	}
	t.Skip(why)
}

// quickTargets are the targets TestQuickRun runs: native and overlayfs
// always, fuse-overlayfs and loopback when present (always under CI).
func quickTargets(t *testing.T) []string {
	if os.Geteuid() != 0 {
		require(t, "needs root to mount overlayfs")
	}
	targets := []string{"native", "overlayfs"}
	optional := []struct{ name, why string }{
		{"fuse-overlayfs", func() string {
			if _, err := exec.LookPath("fuse-overlayfs"); err != nil {
				return "fuse-overlayfs is not installed"
			}
			return ""
		}()},
		{"loopback", func() string {
			if _, err := os.Stat("/dev/fuse"); err != nil {
				return "no /dev/fuse"
			}
			return ""
		}()},
	}
	for _, o := range optional {
		switch {
		case o.why == "":
			targets = append(targets, o.name)
		case underCI:
			t.Fatalf("target %s: %s (required when CI=true)", o.name, o.why)
		default:
			t.Logf("leaving out target %s: %s", o.name, o.why)
		}
	}
	return targets
}

// runBench runs the command line in-process with -json and decodes the report.
func runBench(t *testing.T, args ...string) *report {
	t.Helper()
	work := t.TempDir()
	out := filepath.Join(work, "report.json")
	var stdout, stderr bytes.Buffer
	args = append([]string{"-work", work, "-json", "-out", out}, args...)
	code := mainErr(args, &stdout, &stderr)
	t.Logf("strata-bench %s\n%s", strings.Join(args, " "), stderr.String())
	if code != 0 {
		t.Fatalf("strata-bench exited %d", code)
	}
	if m := mountsUnder(work); len(m) > 0 {
		t.Errorf("mounts left behind: %v", m)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, stdout.Bytes()) {
		t.Errorf("-out file differs from stdout")
	}
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatalf("decode report: %v", err)
	}
	return &rep
}

func TestQuickRun(t *testing.T) {
	targets := quickTargets(t)
	rep := runBench(t, "-quick", "-targets", strings.Join(targets, ","))
	sz := scaledSizes(quickScale)

	for _, st := range rep.Targets {
		if st.Status != statusOK {
			t.Errorf("target %s: got %s, want ok", st.Name, st)
		}
	}
	if got, want := strings.Join(rep.Columns, ","), strings.Join(targets, ","); got != want {
		t.Fatalf("columns: got %s, want %s", got, want)
	}
	for _, f := range rep.Failures {
		t.Errorf("%s on %s failed: %v", f.Workload, f.Target, f.Errors)
	}

	finite := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }
	md := rep.Markdown()
	for _, w := range workloads {
		for _, phase := range phasesOf(w) {
			name := rowName(w.name, phase)
			if !strings.Contains(md, "\n| "+name+" | ") {
				t.Errorf("markdown has no row for %q", name)
			}
			for _, target := range targets {
				x := rep.result(w.name, phase, target)
				if x == nil {
					t.Errorf("%s on %s: no result", name, target)
					continue
				}
				if len(x.Seconds) != 1 || !finite(x.Median) || x.Median > 600 {
					t.Errorf("%s on %s: times %v, median %v: want one sane time", name, target, x.Seconds, x.Median)
				}
				if !finite(x.TimeRatio) || (target == "native" && x.TimeRatio != 1) {
					t.Errorf("%s on %s: time ratio %v", name, target, x.TimeRatio)
				}
				if x.Unit != "" && (!finite(x.Throughput) || !finite(x.ThroughputRatio)) {
					t.Errorf("%s on %s: throughput %v %s, ratio %v", name, target, x.Throughput, x.Unit, x.ThroughputRatio)
				}
			}
		}
	}

	// Bytes stored: a new file costs its size everywhere; a 4 KiB write into
	// a base file costs nothing in place but a whole copy-up in an overlay.
	for _, target := range targets {
		if n, _ := rep.storedBytes("seq-write-1g", target); n < sz.SeqWrite {
			t.Errorf("seq-write-1g on %s stored %s, want at least %s", target, fmtBytes(n), fmtBytes(sz.SeqWrite))
		}
		n, ok := rep.storedBytes("small-write-1g-base", target)
		switch target {
		case "native", "loopback":
			if !ok || n > mib {
				t.Errorf("small-write-1g-base on %s stored %s, want under 1 MiB", target, fmtBytes(n))
			}
		case "overlayfs", "fuse-overlayfs":
			if n < sz.BigFile {
				t.Errorf("small-write-1g-base on %s stored %s, want the copied-up %s", target, fmtBytes(n), fmtBytes(sz.BigFile))
			}
		}
	}
	t.Logf("report:\n%s", md)
}

func TestMissingToolIsSkipped(t *testing.T) {
	rep := runBench(t, "-quick", "-targets", "strata", "-strata", "/nonexistent/strata", "-workloads", "small-write-1g-base")
	var got []string
	for _, st := range rep.Targets {
		got = append(got, st.Name+"="+st.Status)
		if st.Name == "strata" && !strings.Contains(st.Reason, "/nonexistent/strata") {
			t.Errorf("strata skip reason %q does not name the binary", st.Reason)
		}
	}
	if want := "native=ok,strata=skipped"; strings.Join(got, ",") != want {
		t.Errorf("targets: got %s, want %s", strings.Join(got, ","), want)
	}
	if md := rep.Markdown(); !strings.Contains(md, "| strata | skipped: ") {
		t.Errorf("markdown does not report strata as skipped:\n%s", md)
	}
}

func TestData(t *testing.T) {
	buf := make([]byte, 3*mib+123)
	for _, off := range []int64{0, 1, sector - 1, 5*mib + 17} {
		fillData(buf, 9, off)
		if err := checkData(buf, 9, off); err != nil {
			t.Errorf("offset %d: %v", off, err)
		}
		if err := checkData(buf, 8, off); err == nil {
			t.Errorf("offset %d: data of file 9 passes as file 8", off)
		}
	}
	// No two sectors alike: a deduplicating store gets no free ride.
	fillData(buf, 9, 0)
	seen := map[string]bool{}
	for s := 0; s+sector <= len(buf); s += sector {
		k := string(buf[s : s+sector])
		if seen[k] {
			t.Fatalf("sector at %d repeats", s)
		}
		seen[k] = true
	}
}

func TestFormat(t *testing.T) {
	tests := []struct{ name, got, want string }{
		{"bytes", fmtBytes(4096), "4.00 KiB"},
		{"gib", fmtBytes(gib), "1.00 GiB"},
		{"small", fmtBytes(12), "12 B"},
		{"micro", fmtSeconds(0.000206), "206 µs"},
		{"milli", fmtSeconds(0.0134), "13.4 ms"},
		{"sec", fmtSeconds(123.4), "123 s"},
		{"ratio", fmtRatio(65.1), "65.1×"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %q, want %q", tt.got, tt.want)
			}
		})
	}
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median: got %v, want 2", got)
	}
	if got := median([]float64{4, 1, 2, 3}); got != 2.5 {
		t.Errorf("median: got %v, want 2.5", got)
	}
}
