package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestCheckpointBadInput runs the mistakes a user can make with the
// checkpoint, rollback, archive, layers, gc, verify and fork commands,
// against a mounted sandbox (through the server) and an unmounted one (the
// store opened by the command), and checks that each says so in one line
// (and maybe a hint), exits non-zero, and changes nothing in the store.
func TestCheckpointBadInput(t *testing.T) {
	for _, mounted := range []bool{true, false} {
		name := "unmounted"
		if mounted {
			name = "mounted"
		}
		t.Run(name, func(t *testing.T) { testCheckpointBadInput(t, mounted) })
	}
}

func testCheckpointBadInput(t *testing.T, mounted bool) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	e.ok("sandbox", "create", "other", "--base", e.base)
	e.ok("mount", "demo", e.mnt)
	writeFile(t, filepath.Join(e.mnt, "f.txt"), "one")
	e.checkpoint("demo", "--label", "c1")
	e.checkpoint("demo", "--label", "same")
	writeFile(t, filepath.Join(e.mnt, "f.txt"), "two")
	e.checkpoint("demo", "--label", "c2")
	e.checkpoint("other", "--label", "same")
	o1 := e.checkpoint("other", "--label", "o1")
	var r struct {
		Archive string `json:"archive"`
	}
	e.okJSON(&r, "rollback", "demo", "--to-checkpoint", "c1")
	if !mounted {
		e.ok("unmount", "demo")
	}

	nonEmpty := filepath.Join(e.dir, "nonempty")
	if err := os.Mkdir(nonEmpty, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(nonEmpty, "x"), "x")
	// A read-only file system: root may write anywhere else.
	ro := filepath.Join(e.dir, "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", ro, "tmpfs", syscall.MS_RDONLY, "size=64k"); err != nil {
		t.Fatalf("mount a read-only tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(ro, 0); err != nil {
			t.Errorf("unmount %s: %v", ro, err)
		}
	})

	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string // in the first line of stderr
		wantHint string // in the hint line; "" for no check
		noDir    string // a directory the command must not create
	}{
		{name: "show unknown checkpoint", args: []string{"checkpoint", "show", "nope"},
			wantCode: 1, wantErr: "checkpoint nope: not found", wantHint: "strata checkpoint list"},
		{name: "show with a short prefix", args: []string{"checkpoint", "show", o1.ID[:5]},
			wantCode: 1, wantErr: "not found"},
		{name: "show ambiguous label", args: []string{"checkpoint", "show", "same"},
			wantCode: 1, wantErr: "matches 2 checkpoints (", wantHint: "more characters"},
		{name: "show without id", args: []string{"checkpoint", "show"},
			wantCode: 2, wantErr: "missing ID"},
		{name: "create on a missing sandbox", args: []string{"checkpoint", "create", "nope"},
			wantCode: 1, wantErr: "sandbox nope: not found", wantHint: "strata sandbox list"},
		{name: "create with a label taken", args: []string{"checkpoint", "create", "demo", "--label", "c1"},
			wantCode: 1, wantErr: "already exists"},
		{name: "create with a negative step", args: []string{"checkpoint", "create", "demo", "--step", "-1"},
			wantCode: 2, wantErr: "--step -1"},
		{name: "list a missing sandbox", args: []string{"checkpoint", "list", "nope"},
			wantCode: 1, wantErr: "sandbox nope: not found"},
		{name: "diff unknown checkpoint", args: []string{"checkpoint", "diff", "nope"},
			wantCode: 1, wantErr: "checkpoint nope: not found"},
		{name: "diff across sandboxes", args: []string{"checkpoint", "diff", "c1", "o1"},
			wantCode: 1, wantErr: "belongs to another sandbox"},
		{name: "diff with three arguments", args: []string{"checkpoint", "diff", "c1", "c2", "c1"},
			wantCode: 2, wantErr: "unexpected argument"},
		{name: "rm unknown checkpoint", args: []string{"checkpoint", "rm", "nope"},
			wantCode: 1, wantErr: "not found"},
		{name: "rm ambiguous label", args: []string{"checkpoint", "rm", "same"},
			wantCode: 1, wantErr: "ambiguous"},
		{name: "prune negative keep-last", args: []string{"checkpoint", "prune", "demo", "--keep-last", "-1"},
			wantCode: 2, wantErr: "negative"},
		{name: "prune negative keep-within", args: []string{"checkpoint", "prune", "demo", "--keep-within", "-2h"},
			wantCode: 2, wantErr: "negative"},
		{name: "prune bad duration", args: []string{"checkpoint", "prune", "demo", "--keep-within", "soon"},
			wantCode: 2, wantErr: "want a duration"},
		{name: "prune a missing sandbox", args: []string{"checkpoint", "prune", "nope", "--keep-last", "0"},
			wantCode: 1, wantErr: "sandbox nope: not found"},
		{name: "rollback a missing sandbox", args: []string{"rollback", "nope", "--to-checkpoint", "c1"},
			wantCode: 1, wantErr: "sandbox nope: not found", wantHint: "strata sandbox list"},
		{name: "rollback to unknown checkpoint", args: []string{"rollback", "demo", "--to-checkpoint", "nope"},
			wantCode: 1, wantErr: "checkpoint nope: not found", wantHint: "strata checkpoint list demo"},
		{name: "rollback to another sandbox's checkpoint", args: []string{"rollback", "demo", "--to-checkpoint", "o1"},
			wantCode: 1, wantErr: "belongs to another sandbox", wantHint: "strata checkpoint list demo"},
		{name: "rollback without checkpoint", args: []string{"rollback", "demo"},
			wantCode: 2, wantErr: "missing --to-checkpoint"},
		{name: "export into a non-empty directory", args: []string{"archive", "export", r.Archive, nonEmpty},
			wantCode: 1, wantErr: "is not empty", wantHint: "empty directory"},
		{name: "export into a read-only directory", args: []string{"archive", "export", r.Archive, filepath.Join(ro, "out")},
			wantCode: 1, wantErr: "read-only file system"},
		{name: "export below a file", args: []string{"archive", "export", r.Archive, filepath.Join(nonEmpty, "x", "out")},
			wantCode: 1, wantErr: "not a directory"},
		{name: "export unknown archive", args: []string{"archive", "export", "nope", filepath.Join(e.dir, "out")},
			wantCode: 1, wantErr: "archive nope: not found", wantHint: "strata archive list", noDir: filepath.Join(e.dir, "out")},
		{name: "export without directory", args: []string{"archive", "export", r.Archive},
			wantCode: 2, wantErr: "missing DIR"},
		{name: "restore unknown archive", args: []string{"archive", "restore", "nope"},
			wantCode: 1, wantErr: "archive nope: not found"},
		{name: "archive list of a missing sandbox", args: []string{"archive", "list", "nope"},
			wantCode: 1, wantErr: "sandbox nope: not found"},
		{name: "layers of a missing sandbox", args: []string{"layers", "list", "nope"},
			wantCode: 1, wantErr: "sandbox nope: not found"},
		{name: "inspect unknown layer", args: []string{"layers", "inspect", "nope"},
			wantCode: 1, wantErr: "not found", wantHint: "strata layers list"},
		{name: "fork from unknown checkpoint", args: []string{"sandbox", "fork", "new", "--from", "nope"},
			wantCode: 1, wantErr: "checkpoint nope: not found"},
		{name: "fork onto an existing name", args: []string{"sandbox", "fork", "other", "--from", "c1"},
			wantCode: 1, wantErr: "already exists"},
		{name: "fork with a bad name", args: []string{"sandbox", "fork", "../x", "--from", "c1"},
			wantCode: 1, wantErr: "invalid argument"},
		{name: "fork without --from", args: []string{"sandbox", "fork", "new"},
			wantCode: 2, wantErr: "missing --from"},
		{name: "verify unknown", args: []string{"verify", "nope"},
			wantCode: 1, wantErr: "neither a sandbox nor a checkpoint"},
		{name: "gc of a missing sandbox", args: []string{"gc", "nope"},
			wantCode: 1, wantErr: "sandbox nope: not found"},
		{name: "unknown checkpoint subcommand", args: []string{"checkpoint", "craete"},
			wantCode: 2, wantErr: `unknown command "craete"`},
	}
	state := func() string {
		var b strings.Builder
		for _, args := range [][]string{
			{"sandbox", "list"}, {"checkpoint", "list", "demo"}, {"checkpoint", "list", "other"},
			{"archive", "list", "demo"}, {"layers", "list", "demo", "--archived"},
		} {
			b.WriteString(e.ok(append([]string{"--json"}, args...)...))
		}
		return b.String()
	}
	before := state()
	var files string
	if mounted {
		files = treeDigest(t, e.mnt)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.run(tt.args...)
			if r.code != tt.wantCode {
				t.Errorf("exit code: got %d, want %d (stderr %q)", r.code, tt.wantCode, r.stderr)
			}
			lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n")
			if len(lines) > 2 || !strings.HasPrefix(lines[0], "strata: ") || len(lines) == 2 && !strings.HasPrefix(lines[1], "hint: ") {
				t.Errorf("stderr: got %q, want one line 'strata: ...' and at most a 'hint: ...' line", r.stderr)
			}
			if !strings.Contains(lines[0], tt.wantErr) {
				t.Errorf("error: got %q, want it to contain %q", lines[0], tt.wantErr)
			}
			if tt.wantHint != "" && (len(lines) < 2 || !strings.Contains(lines[1], tt.wantHint)) {
				t.Errorf("hint: got %q, want a hint containing %q", r.stderr, tt.wantHint)
			}
			if r.stdout != "" {
				t.Errorf("stdout: got %q, want nothing", r.stdout)
			}
			if tt.noDir != "" {
				mustNotExist(t, tt.noDir)
			}
			if got := state(); got != before {
				t.Errorf("store changed:\ngot  %s\nwant %s", got, before)
			}
			if mounted {
				if got := treeDigest(t, e.mnt); got != files {
					t.Errorf("mount changed:\ngot  %s\nwant %s", got, files)
				}
			}
		})
	}
	if ents, err := os.ReadDir(nonEmpty); err != nil || len(ents) != 1 {
		t.Errorf("the non-empty export directory: got %d entries (%v), want its one file", len(ents), err)
	}
}
