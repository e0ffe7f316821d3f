package checkpoint

import (
	"errors"
	"strings"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// resolveFixture is sandbox "s" with checkpoints first, second and one
// without a label, and fork "f" of first with checkpoints labelled first
// (again) and only-f.
type resolveFixture struct {
	e                            *storeEnv
	first, second, plain         Checkpoint
	forkFirst, onlyF             Checkpoint
	sharedPrefix, uniquePrefixS3 string
}

func newResolveFixture(t *testing.T) *resolveFixture {
	t.Helper()
	e := newStoreEnv(t, nil)
	r := &resolveFixture{e: e}
	e.put("s", "a", "1")
	r.first = e.checkpoint("s", "first")
	e.put("s", "a", "2")
	r.second = e.checkpoint("s", "second")
	e.put("s", "a", "3")
	r.plain = e.checkpoint("s", "")
	if _, err := e.mgr.Fork("f", "first"); err != nil {
		t.Fatal(err)
	}
	e.put("f", "b", "fork")
	r.forkFirst = e.checkpoint("f", "first")
	e.put("f", "b", "fork2")
	r.onlyF = e.checkpoint("f", "only-f")
	// Ids made within one process share their time prefix: the common
	// prefix of two of them is ambiguous.
	r.sharedPrefix = commonPrefix(r.second.ID, r.plain.ID)
	if len(r.sharedPrefix) < 6 {
		t.Skipf("ids %s and %s share only %q", r.second.ID, r.plain.ID, r.sharedPrefix)
	}
	// The shortest prefix of plain no other checkpoint shares.
	all := []Checkpoint{r.first, r.second, r.forkFirst, r.onlyF}
	n := 6
	for _, c := range all {
		if l := len(commonPrefix(c.ID, r.plain.ID)) + 1; l > n {
			n = l
		}
	}
	r.uniquePrefixS3 = r.plain.ID[:n]
	return r
}

func TestResolve(t *testing.T) {
	r := newResolveFixture(t)
	tests := []struct {
		name, ref string
		want      string // checkpoint id, or "" for an error
		err       error
	}{
		{"full id", r.second.ID, r.second.ID, nil},
		{"full id in lower case", strings.ToLower(r.second.ID), r.second.ID, nil},
		{"unique prefix", r.uniquePrefixS3, r.plain.ID, nil},
		{"unique prefix in lower case", strings.ToLower(r.uniquePrefixS3), r.plain.ID, nil},
		{"unique label", "second", r.second.ID, nil},
		{"label of a fork", "only-f", r.onlyF.ID, nil},
		{"label in two sandboxes", "first", "", ErrAmbiguous},
		{"prefix shared by several", r.sharedPrefix, "", ErrAmbiguous},
		{"prefix shorter than 6", r.plain.ID[:5], "", layers.ErrNotFound},
		{"unknown", "no-such-checkpoint", "", layers.ErrNotFound},
		{"empty", "", "", layers.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cp, err := r.e.mgr.Resolve(tc.ref)
			if tc.err != nil {
				wantErr(t, "resolve "+tc.ref, err, tc.err)
				if cp.ID != "" {
					t.Fatalf("resolve %s: got %s with the error", tc.ref, cp.ID)
				}
				return
			}
			if err != nil {
				t.Fatalf("resolve %s: %v", tc.ref, err)
			}
			if cp.ID != tc.want {
				t.Fatalf("resolve %s: got %s, want %s", tc.ref, cp.ID, tc.want)
			}
		})
	}
}

func TestResolveIn(t *testing.T) {
	r := newResolveFixture(t)
	tests := []struct {
		name, sandbox, ref string
		want               string
		err                error
	}{
		{"label repeated elsewhere, in s", "s", "first", r.first.ID, nil},
		{"label repeated elsewhere, in f", "f", "first", r.forkFirst.ID, nil},
		{"full id", "s", r.plain.ID, r.plain.ID, nil},
		{"unique prefix", "s", r.uniquePrefixS3, r.plain.ID, nil},
		{"checkpoint of another sandbox by id", "f", r.plain.ID, "", ErrOtherSandbox},
		{"checkpoint of another sandbox by label", "s", "only-f", "", ErrOtherSandbox},
		{"prefix shared within the sandbox", "s", r.sharedPrefix, "", ErrAmbiguous},
		{"unknown", "s", "nope", "", layers.ErrNotFound},
		{"ambiguous ref of a missing sandbox", "ghost", "first", "", layers.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cp, err := r.e.mgr.ResolveIn(tc.sandbox, tc.ref)
			if tc.err != nil {
				wantErr(t, "resolve "+tc.ref, err, tc.err)
				return
			}
			if err != nil {
				t.Fatalf("resolve %s in %s: %v", tc.ref, tc.sandbox, err)
			}
			if cp.ID != tc.want || cp.Sandbox != tc.sandbox {
				t.Fatalf("resolve %s in %s: got %s of %s, want %s", tc.ref, tc.sandbox, cp.ID, cp.Sandbox, tc.want)
			}
		})
	}
}

// TestCheckpointRecords checks what Create records and that List returns
// it, oldest first, per sandbox.
func TestCheckpointRecords(t *testing.T) {
	e := newStoreEnv(t, nil)
	if e.mgr.Store() != e.store {
		t.Fatal("Store() is not the store the manager was made with")
	}
	e.put("s", "big", strings.Repeat("x", 3*layers.MinBlockSize))
	o := Options{Label: "one", Reason: "why", Plan: "P1", Decision: "keep", SourceTool: "edit", Phase: "apply", Step: 7}
	cp, err := e.mgr.Create("s", o)
	if err != nil {
		t.Fatal(err)
	}
	got := Options{Label: cp.Label, Reason: cp.Reason, Plan: cp.Plan, Decision: cp.Decision, SourceTool: cp.SourceTool, Phase: cp.Phase, Step: cp.Step}
	if got != o || cp.Sandbox != "s" || cp.Layer == "" || len(cp.StateHash) != 64 || cp.Created.IsZero() {
		t.Fatalf("checkpoint %+v does not carry %+v", cp, o)
	}
	if cp.Bytes != 3*layers.MinBlockSize {
		t.Fatalf("checkpoint bytes %d, want %d", cp.Bytes, 3*layers.MinBlockSize)
	}
	// A label stays unique within its sandbox, also among others.
	e.put("s", "big", "y")
	two := e.checkpoint("s", "two")
	if _, err := e.mgr.Create("s", Options{Label: "one"}); err == nil {
		t.Fatal("second checkpoint labelled one: no error")
	} else {
		wantErr(t, "duplicate label", err, layers.ErrExists)
	}
	cps, err := e.mgr.List("s")
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 2 || cps[0].ID != cp.ID || cps[1].ID != two.ID {
		t.Fatalf("list: got %v, want [%s %s]", ids(cps), cp.ID, two.ID)
	}
	if cps[0] != cp {
		t.Fatalf("listed %+v, created %+v", cps[0], cp)
	}
	if _, err := e.mgr.Fork("f", "one"); err != nil {
		t.Fatal(err)
	}
	if cps, err := e.mgr.List("f"); err != nil || len(cps) != 0 {
		t.Fatalf("list of a new fork: %v, %v; want none", ids(cps), err)
	}
}

// TestCreateTx checks that the extra function runs in the checkpoint's
// transaction: its records appear with the checkpoint, and its error
// leaves neither the checkpoint nor a frozen layer.
func TestCreateTx(t *testing.T) {
	e := newStoreEnv(t, nil)
	e.put("s", "a", "1")
	info, err := e.store.Sandbox("s")
	if err != nil {
		t.Fatal(err)
	}
	boom := errFixed("plan refused")
	if _, err := e.mgr.CreateTx("s", Options{Label: "x"}, func(tx *layers.Txn, cp Checkpoint) error {
		if err := tx.Set("x/test/"+cp.ID, []byte("should vanish")); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("create with failing extra: got %v, want %v", err, boom)
	}
	after, err := e.store.Sandbox("s")
	if err != nil {
		t.Fatal(err)
	}
	if after.Head != info.Head {
		t.Fatalf("failed checkpoint moved the head from %s to %s", info.Head, after.Head)
	}
	if cps, _ := e.mgr.List("s"); len(cps) != 0 {
		t.Fatalf("failed checkpoint left records: %v", ids(cps))
	}
	if _, err := e.mgr.Resolve("x"); err == nil {
		t.Fatal("label of the failed checkpoint resolves")
	}
	cp, err := e.mgr.CreateTx("s", Options{Label: "x"}, func(tx *layers.Txn, cp Checkpoint) error {
		return tx.Set("x/test/"+cp.ID, []byte(cp.Layer))
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.getRecord("x/test/" + cp.ID)
	if err != nil || string(b) != cp.Layer {
		t.Fatalf("extra's record: %q, %v; want %q", b, err, cp.Layer)
	}
	if cp.Layer != info.Head {
		t.Fatalf("checkpoint froze %s, want the active layer %s", cp.Layer, info.Head)
	}
	if got := e.liveTree("s"); got["a"] != "1" {
		t.Fatalf("live tree after checkpoint: %v", got)
	}
}

func ids(cps []Checkpoint) []string {
	out := make([]string, len(cps))
	for i, c := range cps {
		out[i] = c.ID
	}
	return out
}

// errFixed is an error value tests compare by identity.
type errFixed string

func (e errFixed) Error() string { return string(e) }

// An ambiguous reference names what it matched, with the sandboxes, and
// a diff told which sandbox to look in finds the label there.
func TestAmbiguousLabelAcrossSandboxes(t *testing.T) {
	r := newResolveFixture(t)
	_, err := r.e.mgr.DiffCheckpoints("first", "")
	if !errors.Is(err, ErrAmbiguous) {
		t.Fatalf("diff of a label two sandboxes use: got %v, want ErrAmbiguous", err)
	}
	for _, want := range []string{r.first.ID + " of s", r.forkFirst.ID + " of f"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	for _, tc := range []struct {
		sandbox, to string
		want        []string // paths modified
	}{
		{"s", "", []string{"a"}},       // first, then a changed twice
		{"f", "", []string{"b"}},       // the fork's first, then b changed
		{"s", "second", []string{"a"}}, // TO is looked up in the same sandbox
	} {
		d, err := r.e.mgr.DiffCheckpointsIn(tc.sandbox, "first", tc.to)
		if err != nil {
			t.Fatalf("diff first in %s to %q: %v", tc.sandbox, tc.to, err)
		}
		if strings.Join(d.Modified, ",") != strings.Join(tc.want, ",") || len(d.Added)+len(d.Deleted) != 0 {
			t.Errorf("diff first in %s to %q: %+v, want modified %v", tc.sandbox, tc.to, d, tc.want)
		}
	}
	if _, err := r.e.mgr.DiffCheckpointsIn("ghost", "first", ""); !errors.Is(err, layers.ErrNotFound) {
		t.Errorf("diff in a missing sandbox: got %v, want ErrNotFound", err)
	}
	// Past three matches the rest are counted, not listed.
	many := []Checkpoint{{ID: "A", Sandbox: "w"}, {ID: "B", Sandbox: "x"}, {ID: "C", Sandbox: "y"}, {ID: "D", Sandbox: "z"}, {ID: "E", Sandbox: "z"}}
	if got, want := describeMatches(many), "A of w, B of x, C of y, and 2 more"; got != want {
		t.Errorf("describeMatches: got %q, want %q", got, want)
	}
}
