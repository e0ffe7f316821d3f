package layers

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestBaseChangedUnderTheSandbox: a base file that is gone reads as
// missing and says so; another file at its path, or the file changed in
// place, reads as stale (ESTALE through the mount), never as the other
// content; a symlink put in its place is never followed.
func TestBaseChangedUnderTheSandbox(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, path string)
		want   string
		err    error
	}{
		{"removed", func(t *testing.T, path string) { ok(t, "remove", os.Remove(path)) }, "is gone", ErrNotFound},
		{"replaced", func(t *testing.T, path string) {
			ok(t, "remove", os.Remove(path))
			put(t, path, "another file")
		}, "changed under the sandbox", ErrStale},
		{"replaced by a symlink", func(t *testing.T, path string) {
			ok(t, "remove", os.Remove(path))
			ok(t, "symlink", os.Symlink("/etc/hostname", path))
		}, "", syscall.ELOOP},
		{"written in place", func(t *testing.T, path string) { put(t, path, "the base file, longer now") }, "changed under the sandbox", ErrStale},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 64<<10, func(base string) { put(t, filepath.Join(base, "f"), "the base file") })
			v := e.view()
			a := lookup(t, v, RootIno, "f")
			tc.change(t, filepath.Join(e.base, "f"))
			buf := make([]byte, 64)
			_, err := v.ReadAt(a.Ino, buf, 0)
			wantErr(t, "read", err, tc.err)
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("read: %v, want it to say the base file %s", err, tc.want)
			}
			// A write must not copy the other file's data up either.
			_, err = v.WriteAt(a.Ino, []byte("x"), 0, false)
			wantErr(t, "write", err, tc.err)
		})
	}
}
