package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestWorkspaceModel plays one round by hand on a plain directory: the
// check passes after A, fails while B is in place, and passes again once
// the copy taken after A is put back, as after a rollback.
func TestWorkspaceModel(t *testing.T) {
	const n = 60
	dir := t.TempDir()
	ws, snap := filepath.Join(dir, "ws"), filepath.Join(dir, "snap")
	if err := workspaceFixture(n).build(mkdir(t, ws)); err != nil {
		t.Fatal(err)
	}
	m := newWorkspaceModel(n)
	a := m.plan(changeRand(n, 0, 0), 10, "r0a", 1)
	if err := a.apply(ws); err != nil {
		t.Fatal(err)
	}
	m.commit(a)
	if got := len(m.paths); got != n+2-1 {
		t.Errorf("after A (2 adds, 1 delete): %d files in the model, want %d", got, n+1)
	}
	if err := m.check(ws, a, nil); err != nil {
		t.Fatalf("after A: %v", err)
	}
	if err := copyTree(ws, snap); err != nil {
		t.Fatal(err)
	}
	b := m.plan(changeRand(n, 0, 1), 10, "r0b", 2)
	if err := b.apply(ws); err != nil {
		t.Fatal(err)
	}
	if err := m.check(ws, a, b); err == nil {
		t.Fatal("check passes with B applied: it cannot see a failed rollback")
	}
	if err := os.RemoveAll(ws); err != nil {
		t.Fatal(err)
	}
	if err := copyTree(snap, ws); err != nil {
		t.Fatal(err)
	}
	if err := m.check(ws, a, b); err != nil {
		t.Fatalf("after putting A back: %v", err)
	}
}

func mkdir(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestChangeSetsRepeat: every peer must see the same changes.
func TestChangeSetsRepeat(t *testing.T) {
	const n = 1000
	m1, m2 := newWorkspaceModel(n), newWorkspaceModel(n)
	for round := 0; round < 5; round++ {
		tag := fmt.Sprintf("r%da", round)
		c1 := m1.plan(changeRand(n, round, 0), 100, tag, round+1)
		c2 := m2.plan(changeRand(n, round, 0), 100, tag, round+1)
		if !slices.Equal(c1, c2) {
			t.Fatalf("round %d: change sets differ", round)
		}
		edits, adds, deletes := 0, 0, 0
		seen := map[string]bool{}
		for _, c := range c1 {
			if seen[c.path] {
				t.Errorf("round %d: %s changed twice", round, c.path)
			}
			seen[c.path] = true
			switch c.op {
			case 'e':
				edits++
			case 'a':
				adds++
			case 'd':
				deletes++
			}
		}
		if edits != 70 || adds != 20 || deletes != 10 {
			t.Errorf("round %d: %d edits, %d adds, %d deletes; want 70, 20, 10", round, edits, adds, deletes)
		}
		m1.commit(c1)
		m2.commit(c2)
	}
	if len(m1.paths) != n+5*10 {
		t.Errorf("after 5 rounds: %d files, want %d", len(m1.paths), n+50)
	}
}

func TestSrcFile(t *testing.T) {
	p := wsPath(1234)
	v0, v1, v2 := srcFile(p, 0), srcFile(p, 1), srcFile(p, 2)
	if !bytes.Equal(v0, srcFile(p, 0)) {
		t.Error("srcFile is not deterministic")
	}
	if bytes.Equal(v0, v1) || bytes.Equal(v1, v2) {
		t.Error("versions 0, 1 and 2 are not all different")
	}
	if len(v0) < 200 || len(v0) > 6*kib+100 {
		t.Errorf("size %d, want 200 B to 6 KiB", len(v0))
	}
	if got := strings.Count(p, "/"); got != 4 {
		t.Errorf("%s is %d directories deep, want 4", p, got)
	}
}

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	tests := []struct {
		name string
		xs   []float64
		q    float64
		want float64
	}{
		{"p50 of 10", xs, 0.5, 5},
		{"p90 of 10", xs, 0.9, 9},
		{"p90 of 3", []float64{3, 1, 2}, 0.9, 3},
		{"one", []float64{7}, 0.5, 7},
		{"none", nil, 0.5, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := percentile(tt.xs, tt.q); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBtrfsUsed(t *testing.T) {
	out := []byte("Overall:\n    Device size:\t\t        4294967296\n    Used:\t\t\t            294912\n" +
		"Data,single: Size:8388608, Used:0 (0.00%)\n")
	got, err := btrfsUsed(out)
	if err != nil || got != 294912 {
		t.Errorf("got %d, %v; want 294912", got, err)
	}
	if _, err := btrfsUsed([]byte("nothing\n")); err == nil {
		t.Error("no error for output without a Used: line")
	}
}

// TestGoals checks the verdicts on issue 3's targets.
func TestGoals(t *testing.T) {
	res := func(files int, cp, rb float64) ckptResult {
		return ckptResult{Peer: refPeer, Files: files, Checkpoint: latency{P50: cp}, Rollback: latency{P50: rb}}
	}
	tests := []struct {
		name    string
		results []ckptResult
		want    []string
	}{
		{"all met", []ckptResult{res(1000, 0.5e-3, 0.8e-3), res(50000, 0.55e-3, 0.9e-3)},
			[]string{"met", "met", "met", "met", "met", "met"}},
		{"slow and not flat", []ckptResult{res(1000, 0.5e-3, 2e-3), res(50000, 0.9e-3, 3e-3)},
			[]string{"met", "met", "missed", "missed", "missed", "missed"}},
		{"50k not measured", []ckptResult{res(1000, 0.5e-3, 0.5e-3)},
			[]string{"met", "not measured", "not measured", "met", "not measured", "not measured"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &ckptReport{Meta: ckptMeta{Sizes: []int{1000, 50000}, CPUs: 2}, Results: tt.results}
			r.finish()
			var got []string
			for _, g := range r.Goals {
				got = append(got, g.Verdict)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v (%+v)", got, tt.want, r.Goals)
			}
		})
	}
}

// TestCheckpointFlags: bad command lines are usage errors (exit 2) that
// say what is wrong, before anything runs.
func TestCheckpointFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown suite", []string{"-suite", "nope"}, `-suite "nope"`},
		{"fs flag in checkpoint suite", []string{"-suite", "checkpoint", "-targets", "native"}, "-targets belongs to -suite fs"},
		{"checkpoint flag in fs suite", []string{"-rounds", "3"}, "-rounds belongs to -suite checkpoint"},
		{"unknown peer", []string{"-suite", "checkpoint", "-peers", "zfs"}, `unknown peer "zfs"`},
		{"tiny workspace", []string{"-suite", "checkpoint", "-files", "5"}, `-files "5"`},
		{"too many changes", []string{"-suite", "checkpoint", "-files", "100", "-changes", "80"}, "-changes 80"},
		{"no rounds", []string{"-suite", "checkpoint", "-rounds", "0"}, "-rounds 0"},
		{"negative pause", []string{"-suite", "checkpoint", "-pause", "-1s"}, "-pause -1s"},
		{"pause in fs suite", []string{"-pause", "1s"}, "-pause belongs to -suite checkpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := mainErr(tt.args, &stdout, &stderr)
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			if !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("stderr %q does not say %q", stderr.String(), tt.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout: %q, want nothing", stdout.String())
			}
		})
	}
}
