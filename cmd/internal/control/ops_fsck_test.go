package control

import (
	"os"
	"path/filepath"
	"testing"
)

// TestFsckOp: fsck answers over the socket as in process; a data file of
// no layer is reported as an orphan and left where it is.
func TestFsckOp(t *testing.T) {
	srv, base := newServer(t)
	c, err := Dial(srv.Store().Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Call(OpSandboxCreate, CreateArgs{Name: "demo", Base: base}, nil); err != nil {
		t.Fatal(err)
	}
	var r FsckResult
	if err := c.Call(OpFsck, nil, &r); err != nil {
		t.Fatalf("fsck: %v", err)
	}
	if !r.OK || r.Sandboxes != 1 || r.Layers != 1 || r.Problems == nil || len(r.Problems) != 0 {
		t.Fatalf("fsck of a healthy store: got %+v, want ok, 1 sandbox, 1 layer, an empty problem list", r)
	}

	const stray = "01ZZZZZZZZZZZZZZZZZZZZZZZZ"
	path := filepath.Join(srv.Store().Dir(), "data", stray)
	if err := os.WriteFile(path, []byte("left behind"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, how := range []string{"over the socket", "in process"} {
		r = FsckResult{}
		if how == "over the socket" {
			err = c.Call(OpFsck, nil, &r)
		} else {
			err = srv.Call(OpFsck, nil, &r)
		}
		if err != nil {
			t.Fatalf("fsck %s: %v", how, err)
		}
		if r.OK || len(r.Problems) != 1 || r.Problems[0].Kind != "orphan" || r.Problems[0].Layer != stray {
			t.Fatalf("fsck %s: got %+v, want one orphan problem of layer %s", how, r, stray)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "left behind" {
			t.Fatalf("after fsck %s: the orphan data file: %q, %v; want it untouched", how, b, err)
		}
	}
}
