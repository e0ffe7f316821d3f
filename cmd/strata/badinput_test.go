package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-sandbox/strata/layers"
)

// TestBadInput runs each mistake a user can make and checks that strata
// says so in one line (and maybe a hint), exits non-zero, and changes
// nothing: neither the store's sandboxes nor the base.
func TestBadInput(t *testing.T) {
	tests := []struct {
		name string
		// setup prepares the case and returns extra environment and an
		// undo step (both may be nil).
		setup    func(t *testing.T, e *env) (undo func())
		args     func(e *env) []string
		env      []string
		wantCode int
		wantErr  string // in the first line of stderr
		wantHint string // in the hint line; "" for no check
	}{
		{
			name: "missing base",
			args: func(e *env) []string {
				return []string{"sandbox", "create", "x", "--base", filepath.Join(e.dir, "nope")}
			},
			wantCode: 1, wantErr: "does not exist",
		},
		{
			name: "base is a file",
			args: func(e *env) []string {
				return []string{"sandbox", "create", "x", "--base", filepath.Join(e.base, "a.txt")}
			},
			wantCode: 1, wantErr: "is not a directory",
		},
		{
			name:     "no base flag",
			args:     func(e *env) []string { return []string{"sandbox", "create", "x"} },
			wantCode: 2, wantErr: "missing --base",
		},
		{
			name:     "existing sandbox",
			args:     func(e *env) []string { return []string{"sandbox", "create", "demo", "--base", e.base} },
			wantCode: 1, wantErr: "already exists",
		},
		{
			name:     "bad sandbox name",
			args:     func(e *env) []string { return []string{"sandbox", "create", "../x", "--base", e.base} },
			wantCode: 1, wantErr: "invalid argument",
		},
		{
			name: "bad block size",
			args: func(e *env) []string {
				return []string{"sandbox", "create", "x", "--base", e.base, "--block-size", "huge"}
			},
			wantCode: 2, wantErr: "invalid size",
		},
		{
			name: "block size not a power of two",
			args: func(e *env) []string {
				return []string{"sandbox", "create", "x", "--base", e.base, "--block-size", "1000"}
			},
			wantCode: 1, wantErr: "power of two",
		},
		{
			name:     "unknown flag",
			args:     func(e *env) []string { return []string{"sandbox", "list", "--colour"} },
			wantCode: 2, wantErr: "unknown flag", wantHint: "--help",
		},
		{
			name:     "unknown command",
			args:     func(e *env) []string { return []string{"sandbox", "lsit"} },
			wantCode: 2, wantErr: `unknown command "lsit"`,
		},
		{
			name:     "mount without mountpoint",
			args:     func(e *env) []string { return []string{"mount", "demo"} },
			wantCode: 2, wantErr: "missing MOUNTPOINT",
		},
		{
			name:     "too many arguments",
			args:     func(e *env) []string { return []string{"unmount", "a", "b"} },
			wantCode: 2, wantErr: "unexpected argument",
		},
		{
			name:     "unknown sandbox",
			args:     func(e *env) []string { return []string{"mount", "nope", e.mnt} },
			wantCode: 1, wantErr: "sandbox nope: not found", wantHint: "strata sandbox list",
		},
		{
			name:     "show unknown sandbox",
			args:     func(e *env) []string { return []string{"sandbox", "show", "nope"} },
			wantCode: 1, wantErr: "sandbox nope: not found",
		},
		{
			name:     "mountpoint missing",
			args:     func(e *env) []string { return []string{"mount", "demo", filepath.Join(e.dir, "nope")} },
			wantCode: 1, wantErr: "does not exist",
		},
		{
			name:     "mountpoint is a file",
			args:     func(e *env) []string { return []string{"mount", "demo", filepath.Join(e.base, "a.txt")} },
			wantCode: 1, wantErr: "is not a directory",
		},
		{
			name: "mountpoint already a mount point",
			setup: func(t *testing.T, e *env) func() {
				e.ok("sandbox", "create", "other", "--base", e.base)
				e.ok("mount", "other", e.mnt2)
				return func() {
					e.ok("unmount", "other")
					e.ok("sandbox", "rm", "other")
				}
			},
			args:     func(e *env) []string { return []string{"mount", "demo", e.mnt2} },
			wantCode: 1, wantErr: "already a mount point",
		},
		{
			name: "sandbox already mounted",
			setup: func(t *testing.T, e *env) func() {
				e.ok("mount", "demo", e.mnt)
				return func() { e.ok("unmount", "demo") }
			},
			args:     func(e *env) []string { return []string{"mount", "demo", e.mnt2} },
			wantCode: 1, wantErr: "already mounted", wantHint: "strata unmount demo",
		},
		{
			name: "remove a mounted sandbox",
			setup: func(t *testing.T, e *env) func() {
				e.ok("mount", "demo", e.mnt)
				return func() { e.ok("unmount", "demo") }
			},
			args:     func(e *env) []string { return []string{"sandbox", "rm", "demo"} },
			wantCode: 1, wantErr: "is mounted", wantHint: "strata unmount demo",
		},
		{
			name:     "unmount what is not mounted",
			args:     func(e *env) []string { return []string{"unmount", "demo"} },
			wantCode: 1, wantErr: "not mounted",
		},
		{
			name: "store locked by another process",
			setup: func(t *testing.T, e *env) func() {
				st, err := layers.Open(e.store)
				if err != nil {
					t.Fatal(err)
				}
				return func() { st.Close() }
			},
			args:     func(e *env) []string { return []string{"sandbox", "create", "x", "--base", e.base} },
			wantCode: 1, wantErr: "store is locked by another process",
		},
		{
			name:     "no fuse device",
			env:      []string{"STRATA_FUSE_DEVICE=/dev/no-such-fuse"},
			args:     func(e *env) []string { return []string{"mount", "demo", e.mnt} },
			wantCode: 1, wantErr: "fuse device /dev/no-such-fuse not found", wantHint: "fuse3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t)
			e.ok("sandbox", "create", "demo", "--base", e.base)
			sandboxes := e.ok("--json", "sandbox", "list")
			base := treeDigest(t, e.base)
			undo := func() {}
			if tt.setup != nil {
				undo = tt.setup(t, e)
			}
			e.extra = tt.env
			r := e.run(tt.args(e)...)
			e.extra = nil
			undo()

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
			if got := e.ok("--json", "sandbox", "list"); got != sandboxes {
				t.Errorf("sandboxes changed:\ngot  %s\nwant %s", got, sandboxes)
			}
			if got := treeDigest(t, e.base); got != base {
				t.Errorf("base changed:\ngot  %s\nwant %s", got, base)
			}
			for _, d := range []string{e.mnt, e.mnt2} {
				if e.isMounted(d) {
					t.Errorf("%s is left mounted", d)
				}
			}
			if _, err := os.Stat(filepath.Join(e.base, "x")); !os.IsNotExist(err) {
				t.Errorf("base gained x: %v", err)
			}
		})
	}
}
