package main

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

type meta struct {
	Date     string  `json:"date"`
	Kernel   string  `json:"kernel"`
	CPUs     int     `json:"cpus"`
	Go       string  `json:"go"`
	WorkDir  string  `json:"work_dir"`
	WorkFS   string  `json:"work_fs"`
	Scale    float64 `json:"scale"`
	Reps     int     `json:"reps"`
	ColdRead bool    `json:"cold_read"` // caches could be dropped
	// LoadStart and LoadEnd are the 1-minute load averages when the run
	// started and ended: other work on the machine skews the figures.
	LoadStart float64 `json:"load_start"`
	LoadEnd   float64 `json:"load_end"`
}

// result is one workload phase on one target.
type result struct {
	Workload string    `json:"workload"`
	Phase    string    `json:"phase,omitempty"`
	Target   string    `json:"target"`
	Seconds  []float64 `json:"seconds"`        // each repetition
	Median   float64   `json:"median_seconds"` // median of Seconds
	// TimeRatio is Median ÷ native's Median: lower is better. 0 = unknown.
	TimeRatio float64 `json:"time_ratio,omitempty"`
	// Throughput is amount ÷ Median in Unit (MiB/s, IOPS, files/s); none
	// where time is the only natural figure. ThroughputRatio is it ÷
	// native's: higher is better.
	Unit            string  `json:"throughput_unit,omitempty"`
	Throughput      float64 `json:"throughput,omitempty"`
	ThroughputRatio float64 `json:"throughput_ratio,omitempty"`
}

// stored is how much a target's own storage grew in one workload (median
// over repetitions): allocated bytes, measured after unmount.
type stored struct {
	Workload string `json:"workload"`
	Target   string `json:"target"`
	Bytes    int64  `json:"bytes"`
}

type failure struct {
	Workload string   `json:"workload"`
	Target   string   `json:"target"`
	Errors   []string `json:"errors"`
}

type workloadInfo struct {
	Name   string   `json:"name"`
	Phases []string `json:"phases,omitempty"`
	About  string   `json:"about"`
}

type report struct {
	Meta      meta           `json:"meta"`
	Targets   []targetStatus `json:"targets"`
	Columns   []string       `json:"columns"` // targets that ran, native first
	Workloads []workloadInfo `json:"workloads"`
	Results   []result       `json:"results"`
	Stored    []stored       `json:"stored"`
	Failures  []failure      `json:"failures,omitempty"`
	Notes     []string       `json:"notes,omitempty"`
}

// fill turns the accumulated runs into results, medians and ratios.
func (r *report) fill(acc *accumulator, names []string) {
	sz := scaledSizes(r.Meta.Scale)
	for _, name := range names {
		w := workloadByName(name)
		r.Workloads = append(r.Workloads, workloadInfo{Name: w.name, Phases: w.phases, About: w.about(sz)})
		for _, phase := range phasesOf(w) {
			var native *result
			for _, t := range r.Columns {
				samples := acc.runs[w.name+"|"+phase+"|"+t]
				if len(samples) == 0 {
					continue
				}
				res := result{Workload: w.name, Phase: phase, Target: t, Unit: samples[0].unit}
				for _, s := range samples {
					res.Seconds = append(res.Seconds, s.dur.Seconds())
				}
				res.Median = median(res.Seconds)
				if res.Unit != "" && res.Median > 0 {
					res.Throughput = samples[0].amount / res.Median
				}
				if t == "native" {
					native = &res
				}
				if native != nil && native.Median > 0 {
					res.TimeRatio = res.Median / native.Median
					if native.Throughput > 0 {
						res.ThroughputRatio = res.Throughput / native.Throughput
					}
				}
				r.Results = append(r.Results, res)
			}
		}
		for _, t := range r.Columns {
			if bs := acc.stored[w.name+"|"+t]; len(bs) > 0 {
				s := slices.Clone(bs)
				slices.Sort(s)
				r.Stored = append(r.Stored, stored{Workload: w.name, Target: t, Bytes: s[len(s)/2]})
			}
			if errs := acc.errs[w.name+"|"+t]; len(errs) > 0 {
				r.Failures = append(r.Failures, failure{Workload: w.name, Target: t, Errors: errs})
			}
		}
	}
}

func (r *report) errorCount() int {
	n := 0
	for _, f := range r.Failures {
		n += len(f.Errors)
	}
	return n
}

func (r *report) result(workload, phase, target string) *result {
	for i := range r.Results {
		x := &r.Results[i]
		if x.Workload == workload && x.Phase == phase && x.Target == target {
			return x
		}
	}
	return nil
}

func (r *report) storedBytes(workload, target string) (int64, bool) {
	for _, s := range r.Stored {
		if s.Workload == workload && s.Target == target {
			return s.Bytes, true
		}
	}
	return 0, false
}

func (r *report) failed(workload, target string) bool {
	for _, f := range r.Failures {
		if f.Workload == workload && f.Target == target {
			return true
		}
	}
	return false
}

func (r *report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	return append(b, '\n'), err
}

// Markdown renders the report: target status, then time, throughput and
// bytes stored tables with one row per workload phase and one column per
// target that ran.
func (r *report) Markdown() string {
	var b strings.Builder
	m := r.Meta
	size := "full sizes"
	if m.Scale != 1 {
		size = fmt.Sprintf("sizes scaled by %g", m.Scale)
	}
	fmt.Fprintf(&b, "# strata-bench\n\n")
	fmt.Fprintf(&b, "%s, Linux %s, %d CPUs, %s. %s; median of %d repetition(s), each on a fresh target after sync and drop_caches; work dir on %s. "+
		"Load average %.1f at the start, %.1f at the end.\n\n",
		m.Date, m.Kernel, m.CPUs, m.Go, upperFirst(size), m.Reps, m.WorkFS, m.LoadStart, m.LoadEnd)

	b.WriteString("## Targets\n\n| target | status | what |\n| --- | --- | --- |\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.Name, mdEscape(t.String()), t.About)
	}

	header := func(extra string) {
		b.WriteString("| workload" + extra)
		for _, c := range r.Columns {
			b.WriteString(" | " + c)
		}
		b.WriteString(" |\n| ---" + strings.Repeat(" | ---", strings.Count(extra, "|")))
		b.WriteString(strings.Repeat(" | ---:", len(r.Columns)) + " |\n")
	}
	rows := func(fn func(w workloadInfo, phase string)) {
		for _, w := range r.Workloads {
			phases := w.Phases
			if len(phases) == 0 {
				phases = []string{""}
			}
			for _, p := range phases {
				fn(w, p)
			}
		}
	}

	b.WriteString("\n## Time relative to native\n\n")
	b.WriteString("Each cell: **target time ÷ native time** (lower is better), then the median time.\n\n")
	header("")
	rows(func(w workloadInfo, phase string) {
		b.WriteString("| " + rowName(w.Name, phase))
		for _, t := range r.Columns {
			b.WriteString(" | ")
			x := r.result(w.Name, phase, t)
			switch {
			case x == nil && r.failed(w.Name, t):
				b.WriteString("failed")
			case x == nil:
				b.WriteString("–")
			case t == "native":
				b.WriteString(fmtSeconds(x.Median))
			case x.TimeRatio > 0:
				fmt.Fprintf(&b, "%s (%s)", fmtRatio(x.TimeRatio), fmtSeconds(x.Median))
			default:
				fmt.Fprintf(&b, "n/a (%s)", fmtSeconds(x.Median))
			}
		}
		b.WriteString(" |\n")
	})

	b.WriteString("\n## Throughput relative to native\n\n")
	b.WriteString("Each cell: **target throughput ÷ native throughput** (higher is better), then the throughput at the median time. ")
	b.WriteString("Workloads measured only by time are left out.\n\n")
	header(" | unit")
	rows(func(w workloadInfo, phase string) {
		nat := r.result(w.Name, phase, "native")
		if nat == nil || nat.Unit == "" {
			return
		}
		b.WriteString("| " + rowName(w.Name, phase) + " | " + nat.Unit)
		for _, t := range r.Columns {
			b.WriteString(" | ")
			x := r.result(w.Name, phase, t)
			switch {
			case x == nil && r.failed(w.Name, t):
				b.WriteString("failed")
			case x == nil:
				b.WriteString("–")
			case t == "native":
				b.WriteString(fmtNum(x.Throughput))
			case x.ThroughputRatio > 0:
				fmt.Fprintf(&b, "%s (%s)", fmtRatio(x.ThroughputRatio), fmtNum(x.Throughput))
			default:
				fmt.Fprintf(&b, "n/a (%s)", fmtNum(x.Throughput))
			}
		}
		b.WriteString(" |\n")
	})

	b.WriteString("\n## Bytes stored\n\n")
	b.WriteString("How much each target's own storage grew during a run, in allocated blocks (du), measured after unmount: ")
	b.WriteString("native = its directory, overlayfs and fuse-overlayfs = the upperdir, loopback = its copy of the base, strata = the store.\n\n")
	header("")
	for _, w := range r.Workloads {
		b.WriteString("| " + w.Name)
		for _, t := range r.Columns {
			b.WriteString(" | ")
			if n, ok := r.storedBytes(w.Name, t); ok {
				b.WriteString(fmtBytes(n))
			} else if r.failed(w.Name, t) {
				b.WriteString("failed")
			} else {
				b.WriteString("–")
			}
		}
		b.WriteString(" |\n")
	}

	b.WriteString("\n## Workloads\n\n")
	for _, w := range r.Workloads {
		fmt.Fprintf(&b, "- **%s**: %s.\n", w.Name, w.About)
	}
	if len(r.Failures) > 0 {
		b.WriteString("\n## Failures\n\n")
		for _, f := range r.Failures {
			for _, e := range f.Errors {
				fmt.Fprintf(&b, "- %s on %s: %s\n", f.Workload, f.Target, mdEscape(e))
			}
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

func mdEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func fmtSeconds(s float64) string {
	switch {
	case s < 1e-3:
		return fmt.Sprintf("%.0f µs", s*1e6)
	case s < 1:
		return fmt.Sprintf("%s ms", fmtNum(s*1e3))
	}
	return fmt.Sprintf("%s s", fmtNum(s))
}

// fmtNum prints three significant digits, without exponents.
func fmtNum(x float64) string {
	switch a := math.Abs(x); {
	case a >= 100:
		return fmt.Sprintf("%.0f", x)
	case a >= 10:
		return fmt.Sprintf("%.1f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

func fmtRatio(x float64) string {
	return fmtNum(x) + "×"
}

func fmtBytes(n int64) string {
	a := math.Abs(float64(n))
	switch {
	case a >= gib:
		return fmtNum(float64(n)/gib) + " GiB"
	case a >= mib:
		return fmtNum(float64(n)/mib) + " MiB"
	case a >= kib:
		return fmtNum(float64(n)/kib) + " KiB"
	}
	return fmt.Sprintf("%d B", n)
}
