package control

import (
	"errors"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
)

// TestCheckpointErrorsSurviveTheSocket: the checkpoint package's sentinels
// have wire codes, so a client tells them apart as the server does.
func TestCheckpointErrorsSurviveTheSocket(t *testing.T) {
	srv, base := newServer(t)
	c, err := Dial(srv.Store().Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, name := range []string{"a", "b"} {
		if err := c.Call(OpSandboxCreate, CreateArgs{Name: name, Base: base}, nil); err != nil {
			t.Fatal(err)
		}
		var cp checkpoint.Checkpoint
		if err := c.Call(OpCheckpointCreate, CheckpointCreateArgs{Sandbox: name, Label: "same"}, &cp); err != nil {
			t.Fatal(err)
		}
		if cp.Sandbox != name || cp.Label != "same" {
			t.Fatalf("checkpoint.create: got %+v, want %s's checkpoint labelled same", cp, name)
		}
	}
	var cps []checkpoint.Checkpoint
	if err := c.Call(OpCheckpointList, CheckpointListArgs{Sandbox: "b"}, &cps); err != nil || len(cps) != 1 {
		t.Fatalf("checkpoint.list: got %v, %v; want one checkpoint", cps, err)
	}
	tests := []struct {
		name string
		op   string
		args any
		want error
		code string
	}{
		{name: "ambiguous label", op: OpCheckpointShow, args: IDArgs{ID: "same"}, want: checkpoint.ErrAmbiguous, code: "ambiguous"},
		{name: "other sandbox", op: OpRollback, args: RollbackArgs{Sandbox: "a", Checkpoint: cps[0].ID}, want: checkpoint.ErrOtherSandbox, code: "other_sandbox"},
		{name: "unknown checkpoint", op: OpRollback, args: RollbackArgs{Sandbox: "a", Checkpoint: "nope"}, want: layers.ErrNotFound, code: "not_found"},
		{name: "missing sandbox", op: OpRollback, args: RollbackArgs{Sandbox: "nope", Checkpoint: "same"}, want: layers.ErrNotFound, code: "not_found"},
		{name: "relative export dir", op: OpArchiveExport, args: ExportArgs{Archive: "x", Dir: "rel"}, want: layers.ErrInvalid, code: "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Call(tt.op, tt.args, nil)
			var re *RemoteError
			if !errors.Is(err, tt.want) || !errors.As(err, &re) || re.Code != tt.code {
				t.Fatalf("got %#v, want a RemoteError with code %q that Is %v", err, tt.code, tt.want)
			}
			if err := srv.Call(tt.op, tt.args, nil); !errors.Is(err, tt.want) {
				t.Fatalf("in process: got %v, want an error that Is %v", err, tt.want)
			}
		})
	}
}

func TestParsePolicy(t *testing.T) {
	n := func(v int) *int { return &v }
	tests := []struct {
		name     string
		keepLast *int
		within   string
		want     checkpoint.Policy
		bad      bool
	}{
		{name: "default", want: checkpoint.DefaultPolicy},
		{name: "keep last", keepLast: n(3), want: checkpoint.Policy{KeepLast: 3}},
		{name: "keep within hours", within: "36h", want: checkpoint.Policy{KeepWithin: 36 * time.Hour}},
		{name: "keep within days", within: "7d", want: checkpoint.Policy{KeepWithin: 7 * 24 * time.Hour}},
		{name: "both", keepLast: n(1), within: "90m", want: checkpoint.Policy{KeepLast: 1, KeepWithin: 90 * time.Minute}},
		{name: "keep nothing", keepLast: n(0), want: checkpoint.Policy{KeepWithin: time.Nanosecond}},
		{name: "negative last", keepLast: n(-1), bad: true},
		{name: "negative within", within: "-1h", bad: true},
		{name: "negative days", within: "-2d", bad: true},
		{name: "not a duration", within: "soon", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicy(tt.keepLast, tt.within)
			if tt.bad {
				if !errors.Is(err, layers.ErrInvalid) {
					t.Fatalf("got %+v, %v; want ErrInvalid", got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
