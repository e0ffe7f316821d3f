package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	var rep report
	runJSON(t, &rep, args...)
	return &rep
}

// runJSON runs the command line in-process with -json and decodes the
// report into rep.
func runJSON(t *testing.T, rep any, args ...string) {
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
	if err := json.Unmarshal(data, rep); err != nil {
		t.Fatalf("decode report: %v", err)
	}
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

// TestCheckpointQuickRun runs the checkpoint suite at its -quick sizes
// against every peer this machine has: every peer must checkpoint, roll
// back (the suite checks each rollback's content) and report sane figures.
func TestCheckpointQuickRun(t *testing.T) {
	if os.Geteuid() != 0 {
		require(t, "needs root to mount FUSE and btrfs")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		require(t, "no /dev/fuse")
	}
	var rep ckptReport
	runJSON(t, &rep, "-suite", "checkpoint", "-quick", "-pause", "10ms")

	ok := map[string]bool{}
	for _, st := range rep.Peers {
		switch {
		case st.Status == statusOK:
			ok[st.Name] = true
		case st.Name == "btrfs" && st.Status == statusSkipped:
			t.Logf("peer btrfs: %s", st)
		default:
			t.Errorf("peer %s: got %s, want ok", st.Name, st)
		}
	}
	for _, f := range rep.Failures {
		t.Errorf("%s at %d files failed: %s", f.Peer, f.Files, f.Error)
	}
	if got, want := rep.Meta.Sizes, []int{100, 400}; !slices.Equal(got, want) {
		t.Fatalf("sizes: got %v, want %v", got, want)
	}
	for _, peer := range allPeers {
		if !ok[peer] {
			continue
		}
		for _, n := range rep.Meta.Sizes {
			x := rep.result(peer, n)
			if x == nil {
				t.Errorf("%s at %d files: no result", peer, n)
				continue
			}
			if x.Rounds != 3 || len(x.Checkpoint.Seconds) != 3 || len(x.Rollback.Seconds) != 3 {
				t.Errorf("%s at %d files: %d rounds, %d checkpoint and %d rollback times; want 3 each",
					peer, n, x.Rounds, len(x.Checkpoint.Seconds), len(x.Rollback.Seconds))
			}
			for _, l := range []latency{x.Checkpoint, x.Rollback} {
				if l.P50 <= 0 || l.P90 < l.P50 || l.P90 > 60 {
					t.Errorf("%s at %d files: p50 %v, p90 %v: want 0 < p50 ≤ p90 < 60 s", peer, n, l.P50, l.P90)
				}
			}
			// The storage phase stops after its first checkpoint once a
			// quarter of the budget is spent: a loaded machine may get there.
			if x.First <= 0 || x.StorageCheckpoints < 1 || x.StorageCheckpoints > 2 {
				t.Errorf("%s at %d files: first checkpoint %v s, %d storage checkpoints", peer, n, x.First, x.StorageCheckpoints)
			}
			// Three 8-byte edits: every peer stores something, and none
			// more than a copy of the workspace (6 KiB files at most).
			// Strata's store may fill space it freed before, so only its
			// own account must grow.
			least := int64(1)
			if strings.HasPrefix(peer, "strata") {
				least = 0
			}
			if x.StoredPerCheckpoint < least || x.StoredPerCheckpoint > int64(n)*8*kib {
				t.Errorf("%s at %d files: %s stored per checkpoint", peer, n, fmtBytes(x.StoredPerCheckpoint))
			}
			if peer != "btrfs" && x.OwnPerCheckpoint <= 0 {
				t.Errorf("%s at %d files: own account %d bytes per checkpoint, want > 0", peer, n, x.OwnPerCheckpoint)
			}
		}
	}
	// A copy holds every file: at least 200 bytes each.
	if x := rep.result("cp-a", 400); x != nil && x.OwnPerCheckpoint < 400*200 {
		t.Errorf("cp-a at 400 files: a copy of %s, want at least %s", fmtBytes(x.OwnPerCheckpoint), fmtBytes(400*200))
	}
	if len(rep.Goals) != 6 {
		t.Errorf("goals: got %d, want 6: %+v", len(rep.Goals), rep.Goals)
	}
	for _, g := range rep.Goals {
		if g.Verdict != "met" && g.Verdict != "missed" {
			t.Errorf("goal %q: verdict %q", g.What, g.Verdict)
		}
	}
	md := rep.Markdown()
	if rep.Meta.Pause != "10ms" {
		t.Errorf("pause in the report: %q, want 10ms", rep.Meta.Pause)
	}
	for _, want := range []string{"## Checkpoint latency", "## Rollback latency", "## Bytes per checkpoint", "| strata-api | ", "a pause of 10ms"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
	t.Logf("report:\n%s", md)
}
