package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Issue 3's targets for Strata through the Go API.
const (
	goalLatency = 1e-3 // checkpoint and rollback p50, seconds
	goalScaling = 1.2  // p50 at the largest size ÷ p50 at the smallest
	refPeer     = "strata-api"
)

type ckptMeta struct {
	Date     string  `json:"date"`
	Kernel   string  `json:"kernel"`
	CPUs     int     `json:"cpus"`
	CPUModel string  `json:"cpu_model"`
	MemBytes int64   `json:"mem_bytes"`
	Go       string  `json:"go"`
	WorkDir  string  `json:"work_dir"`
	WorkFS   string  `json:"work_fs"`
	Command  string  `json:"command"`
	Seconds  float64 `json:"seconds"` // the whole run
	// LoadStart and LoadEnd are the 1-minute load averages when the run
	// started and ended: other work on the machine skews the figures.
	LoadStart          float64 `json:"load_start"`
	LoadEnd            float64 `json:"load_end"`
	Sizes              []int   `json:"sizes"`
	Rounds             int     `json:"rounds"`
	MinRounds          int     `json:"min_rounds"`
	Budget             string  `json:"budget"`
	Changes            int     `json:"changes"`
	Edits              int     `json:"edits"`
	StorageCheckpoints int     `json:"storage_checkpoints"`
	Pause              string  `json:"pause,omitempty"`
	started            time.Time
}

// latency is one operation's times over the rounds, in seconds.
type latency struct {
	Seconds []float64 `json:"seconds"`
	P50     float64   `json:"p50"`
	P90     float64   `json:"p90"`
}

func newLatency(xs []float64) latency {
	return latency{Seconds: xs, P50: percentile(xs, 0.5), P90: percentile(xs, 0.9)}
}

// percentile is the nearest-rank q-quantile of xs; 0 for none.
func percentile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// ckptResult is one peer at one workspace size.
type ckptResult struct {
	Peer       string  `json:"peer"`
	Files      int     `json:"files"`
	Elapsed    float64 `json:"elapsed_seconds"`          // the whole run of this peer at this size
	Setup      float64 `json:"setup_seconds"`            // making the workspace
	First      float64 `json:"first_checkpoint_seconds"` // of the untouched workspace
	Rounds     int     `json:"rounds"`
	Checkpoint latency `json:"checkpoint"`
	Rollback   latency `json:"rollback"`
	// StoredPerCheckpoint is the growth of the peer's storage per
	// checkpoint in the storage phase, in allocated bytes; OwnPerCheckpoint
	// the peer's own account of it (-1: it has none).
	StorageCheckpoints  int   `json:"storage_checkpoints"`
	StoredPerCheckpoint int64 `json:"stored_bytes_per_checkpoint"`
	OwnPerCheckpoint    int64 `json:"own_bytes_per_checkpoint"`
}

type ckptFailure struct {
	Peer  string `json:"peer"`
	Files int    `json:"files"`
	Error string `json:"error"`
}

// goal is one of issue 3's targets and whether the run met it.
type goal struct {
	What     string `json:"what"`
	Measured string `json:"measured"`
	Verdict  string `json:"verdict"` // met, missed or not measured
}

// ckptReport is the checkpoint suite's report.
type ckptReport struct {
	Meta     ckptMeta       `json:"meta"`
	Peers    []targetStatus `json:"peers"`
	Results  []ckptResult   `json:"results"`
	Goals    []goal         `json:"goals"`
	Failures []ckptFailure  `json:"failures,omitempty"`
	Notes    []string       `json:"notes,omitempty"`
}

func (h *harness) ckptMeta(cc ckptConfig) ckptMeta {
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	var info unix.Sysinfo_t
	var mem int64
	if unix.Sysinfo(&info) == nil {
		mem = int64(info.Totalram) * int64(info.Unit)
	}
	return ckptMeta{
		Date: time.Now().UTC().Format(time.RFC3339), Kernel: unix.ByteSliceToString(uts.Release[:]),
		CPUs: runtime.NumCPU(), CPUModel: cpuModel(), MemBytes: mem, Go: runtime.Version(),
		WorkDir: h.work, WorkFS: fsType(h.work), Command: cc.Command, LoadStart: loadAverage(),
		Sizes: cc.Sizes, Rounds: cc.Rounds, MinRounds: cc.MinRounds, Budget: cc.Budget.String(),
		Changes: cc.Changes, Edits: cc.Edits, StorageCheckpoints: cc.StorageCheckpoints,
		Pause: pauseString(cc.Pause), started: time.Now(),
	}
}

// pauseString is the pause for the report, "" for none.
func pauseString(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return d.String()
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (r *ckptReport) result(peer string, files int) *ckptResult {
	for i := range r.Results {
		if x := &r.Results[i]; x.Peer == peer && x.Files == files {
			return x
		}
	}
	return nil
}

func (r *ckptReport) failed(peer string, files int) bool {
	for _, f := range r.Failures {
		if f.Peer == peer && f.Files == files {
			return true
		}
	}
	return false
}

func (r *ckptReport) errorCount() int { return len(r.Failures) }

// columns are the peers that ran, in report order.
func (r *ckptReport) columns() []string {
	var out []string
	for _, p := range r.Peers {
		if p.Status == statusOK {
			out = append(out, p.Name)
		}
	}
	return out
}

// finish fills in what is derived: the goals, the load note, the duration.
func (r *ckptReport) finish() {
	m := &r.Meta
	if !m.started.IsZero() {
		m.Seconds = time.Since(m.started).Seconds()
	}
	if load := max(m.LoadStart, m.LoadEnd); load > 0.5*float64(m.CPUs) {
		r.Notes = append(r.Notes, fmt.Sprintf("The machine was busy: load average %.1f (start) and %.1f (end) on %d CPUs, "+
			"from other work besides this run. Absolute times are inflated and the p90s noisy; the ratios within this run are fairer.",
			m.LoadStart, m.LoadEnd, m.CPUs))
	}
	r.Goals = nil
	for _, op := range []string{"checkpoint", "rollback"} {
		for _, n := range m.Sizes {
			g := goal{What: fmt.Sprintf("%s p50 ≤ %s at %d files", op, fmtSeconds(goalLatency), n), Verdict: "not measured"}
			if x := r.result(refPeer, n); x != nil {
				p50 := x.op(op).P50
				g.Measured, g.Verdict = fmtSeconds(p50), verdict(p50 <= goalLatency)
			}
			r.Goals = append(r.Goals, g)
		}
		if len(m.Sizes) < 2 {
			continue
		}
		lo, hi := slices.Min(m.Sizes), slices.Max(m.Sizes)
		g := goal{What: fmt.Sprintf("%s p50 at %d files ≤ %s× that at %d files", op, hi, fmtNum(goalScaling), lo), Verdict: "not measured"}
		a, b := r.result(refPeer, lo), r.result(refPeer, hi)
		if a != nil && b != nil && a.op(op).P50 > 0 {
			ratio := b.op(op).P50 / a.op(op).P50
			g.Measured = fmt.Sprintf("%s (%s vs %s)", fmtRatio(ratio), fmtSeconds(b.op(op).P50), fmtSeconds(a.op(op).P50))
			g.Verdict = verdict(ratio <= goalScaling)
		}
		r.Goals = append(r.Goals, g)
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

func (x *ckptResult) op(name string) latency {
	if name == "rollback" {
		return x.Rollback
	}
	return x.Checkpoint
}

func (r *ckptReport) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	return append(b, '\n'), err
}

// Markdown renders the report: the targets met or missed, latency tables
// with one row per peer and columns per workspace size, bytes per
// checkpoint, then how each peer and the workload work.
func (r *ckptReport) Markdown() string {
	var b strings.Builder
	m := r.Meta
	cpu := ""
	if m.CPUModel != "" {
		cpu = " (" + m.CPUModel + ")"
	}
	fmt.Fprintf(&b, "# strata-bench: checkpoint and rollback\n\n")
	fmt.Fprintf(&b, "%s, Linux %s, %d CPUs%s, %s RAM, %s; work dir on %s. The run took %s; "+
		"load average %.1f at the start, %.1f at the end.\n\n",
		m.Date, m.Kernel, m.CPUs, cpu, fmtBytes(m.MemBytes), m.Go, m.WorkFS, fmtSeconds(m.Seconds), m.LoadStart, m.LoadEnd)
	fmt.Fprintf(&b, "Command: `%s`. `make bench-checkpoint` builds bin/strata and runs "+
		"`strata-bench -suite checkpoint -strata ./bin/strata -out docs/bench-checkpoint.md`.\n", m.Command)

	b.WriteString("\n## Issue 3's targets (Strata through the Go API)\n\n| target | measured | verdict |\n| --- | ---: | --- |\n")
	for _, g := range r.Goals {
		v := g.Verdict
		if v == "met" || v == "missed" {
			v = "**" + v + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", g.What, orDash(g.Measured), v)
	}

	cols := r.columns()
	for _, op := range []string{"checkpoint", "rollback"} {
		fmt.Fprintf(&b, "\n## %s latency\n\n", upperFirst(op))
		fmt.Fprintf(&b, "p50 and p90 over the rounds (one %s per round), then **p50 ÷ %s's p50** at the same size "+
			"(how many times slower than Strata through the Go API; lower is better)", op, refPeer)
		if len(m.Sizes) > 1 {
			fmt.Fprintf(&b, ", and how the p50 grows from %d to %d files", slices.Min(m.Sizes), slices.Max(m.Sizes))
		}
		b.WriteString(".\n\n| peer")
		for _, n := range m.Sizes {
			fmt.Fprintf(&b, " | %d files p50 | p90 | ÷ %s", n, refPeer)
		}
		if len(m.Sizes) > 1 {
			fmt.Fprintf(&b, " | %d ÷ %d files", slices.Max(m.Sizes), slices.Min(m.Sizes))
		}
		b.WriteString(" | rounds |\n| ---" + strings.Repeat(" | ---: | ---: | ---:", len(m.Sizes)))
		if len(m.Sizes) > 1 {
			b.WriteString(" | ---:")
		}
		b.WriteString(" | ---: |\n")
		for _, p := range cols {
			b.WriteString("| " + p)
			var rounds []string
			for _, n := range m.Sizes {
				x := r.result(p, n)
				if x == nil {
					what := "–"
					if r.failed(p, n) {
						what = "failed"
					}
					fmt.Fprintf(&b, " | %s | | ", what)
					rounds = append(rounds, "–")
					continue
				}
				l := x.op(op)
				fmt.Fprintf(&b, " | %s | %s | %s", fmtSeconds(l.P50), fmtSeconds(l.P90), r.ratioTo(refPeer, x, op))
				rounds = append(rounds, fmt.Sprint(x.Rounds))
			}
			if len(m.Sizes) > 1 {
				lo, hi := r.result(p, slices.Min(m.Sizes)), r.result(p, slices.Max(m.Sizes))
				if lo != nil && hi != nil && lo.op(op).P50 > 0 {
					b.WriteString(" | " + fmtRatio(hi.op(op).P50/lo.op(op).P50))
				} else {
					b.WriteString(" | –")
				}
			}
			b.WriteString(" | " + strings.Join(rounds, ", ") + " |\n")
		}
	}

	b.WriteString("\n## Bytes per checkpoint\n\n")
	fmt.Fprintf(&b, "Small edits: %d files edited in place by 8 bytes, then a checkpoint; up to %d times (the checkpoints column says how many ran); "+
		"the growth divided by the number of checkpoints. "+
		"**stored** is allocated space: du of the store (strata), of .git (git), of the snapshots (cp -a); "+
		"for btrfs the file system's own `Used` (data, and metadata kept twice), since du counts shared extents once per snapshot. "+
		"For strata and btrfs the edits themselves count too, because there the workspace and the checkpoints are the same storage. "+
		"**÷ %s** is stored ÷ %s's stored. "+
		"**own** is the peer's own account: strata's `bytes` from `checkpoint list` (what the slots of the checkpoint layer's blocks take "+
		"in its data file: the pages a short file's block needs, whole blocks otherwise), git's new objects (apparent size), cp -a's copy (apparent size).\n\n",
		m.Edits, m.StorageCheckpoints, refPeer, refPeer)
	b.WriteString("| peer")
	for _, n := range m.Sizes {
		fmt.Fprintf(&b, " | %d files: stored | ÷ %s | own", n, refPeer)
	}
	b.WriteString(" | checkpoints |\n| ---" + strings.Repeat(" | ---: | ---: | ---:", len(m.Sizes)) + " | ---: |\n")
	for _, p := range cols {
		b.WriteString("| " + p)
		var counts []string
		for _, n := range m.Sizes {
			x := r.result(p, n)
			if x == nil {
				b.WriteString(" | – | – | –")
				counts = append(counts, "–")
				continue
			}
			ratio := "–"
			if y := r.result(refPeer, n); p == refPeer {
				ratio = "1×"
			} else if y != nil && y.StoredPerCheckpoint > 0 {
				ratio = fmtRatio(float64(x.StoredPerCheckpoint) / float64(y.StoredPerCheckpoint))
			}
			own := "n/a"
			if x.OwnPerCheckpoint >= 0 {
				own = fmtBytes(x.OwnPerCheckpoint)
			}
			fmt.Fprintf(&b, " | %s | %s | %s", fmtBytes(x.StoredPerCheckpoint), ratio, own)
			counts = append(counts, fmt.Sprint(x.StorageCheckpoints))
		}
		b.WriteString(" | " + strings.Join(counts, ", ") + " |\n")
	}

	b.WriteString("\n## Setup and first checkpoint\n\n")
	b.WriteString("Untimed in the tables above: making the workspace (copying the base; strata: creating the sandbox and mounting it), " +
		"and the first checkpoint of the untouched workspace (git: adding every file; cp -a: a full copy; strata: hashing the base once).\n\n| peer")
	for _, n := range m.Sizes {
		fmt.Fprintf(&b, " | %d files: setup | first checkpoint", n)
	}
	b.WriteString(" |\n| ---" + strings.Repeat(" | ---: | ---:", len(m.Sizes)) + " |\n")
	for _, p := range cols {
		b.WriteString("| " + p)
		for _, n := range m.Sizes {
			if x := r.result(p, n); x != nil {
				fmt.Fprintf(&b, " | %s | %s", fmtSeconds(x.Setup), fmtSeconds(x.First))
			} else {
				b.WriteString(" | – | –")
			}
		}
		b.WriteString(" |\n")
	}

	b.WriteString("\n## Peers\n\n| peer | status | how |\n| --- | --- | --- |\n")
	for _, p := range r.Peers {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", p.Name, mdEscape(p.String()), mdEscape(p.About))
	}
	b.WriteString("\nThey do not promise the same: a Strata checkpoint is on disk when it returns (it fdatasyncs the layer's data " +
		"and syncs its metadata store) and so is a btrfs snapshot (a transaction commit); git's defaults " +
		"(core.fsync=committed,-loose-object) and cp -a leave the checkpoint in the page cache. " +
		"A Strata rollback also drops the kernel's caches of the live mount and records the state it leaves in an archive.\n")

	b.WriteString("\n## Workload\n\n")
	fmt.Fprintf(&b, "A workspace of N generated Go-like source files (200 B to 6 KiB), %d per directory, four directories deep, "+
		"the same for every peer. Each round: a change set A of %d files (%s) is applied to the workspace "+
		"(for strata through its FUSE mount); checkpoint (timed); a change set B of as many files is applied; "+
		"roll back to that checkpoint (timed); every file A or B touched is read back and must be as after A. "+
		"Up to %d rounds per peer and size; after %d rounds no new round starts once %s were spent. "+
		"Every peer sees the same sequence of changes. Times are wall clock around the operation only: "+
		"the Go call for strata-api, the command(s) for the others (process start included). "+
		"Caches are dropped before each peer's setup (after the previous peer's cleanup), then stay warm.\n",
		wsPerDir, m.Changes, describeMix(m.Changes), m.Rounds, m.MinRounds, m.Budget)
	if m.Pause != "" {
		fmt.Fprintf(&b, "\nEach change set is followed by a pause of %s (an agent's turn) before the checkpoint or rollback.\n", m.Pause)
	}

	if len(r.Failures) > 0 {
		b.WriteString("\n## Failures\n\n")
		for _, f := range r.Failures {
			fmt.Fprintf(&b, "- %s at %d files: %s\n", f.Peer, f.Files, mdEscape(f.Error))
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n## Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}

// ratioTo is x's p50 of op ÷ peer ref's at the same size, or – when
// unknown.
func (r *ckptReport) ratioTo(ref string, x *ckptResult, op string) string {
	if x.Peer == ref {
		return "1×"
	}
	y := r.result(ref, x.Files)
	if y == nil || y.op(op).P50 <= 0 {
		return "–"
	}
	return fmtRatio(x.op(op).P50 / y.op(op).P50)
}

// describeMix says what a change set of n files does.
func describeMix(n int) string {
	edits, adds, deletes := changeMix(n)
	return fmt.Sprintf("%d edited by rewriting one line, %d added, %d deleted", edits, adds, deletes)
}

func orDash(s string) string {
	if s == "" {
		return "–"
	}
	return s
}
