package fs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestBaseFileChangedUnderTheMount: through a real mount, a base file
// replaced behind the sandbox fails its read with ESTALE, and one removed
// with ENOENT, instead of showing the other content or made-up data.
func TestBaseFileChangedUnderTheMount(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		for _, n := range []string{"replaced", "removed"} {
			writeFile(t, filepath.Join(base, n), "the base file")
		}
	})
	tests := []struct {
		name   string
		change func(path string) error
		want   syscall.Errno
	}{
		{"replaced", func(path string) error {
			if err := os.Remove(path); err != nil {
				return err
			}
			return os.WriteFile(path, []byte("another, longer file"), 0o644)
		}, syscall.ESTALE},
		{"removed", os.Remove, syscall.ENOENT},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := os.Stat(sb.path(tc.name)); err != nil {
				t.Fatal(err)
			}
			if err := tc.change(filepath.Join(sb.base, tc.name)); err != nil {
				t.Fatal(err)
			}
			_, err := os.ReadFile(sb.path(tc.name))
			if !errors.Is(err, tc.want) {
				t.Fatalf("read: %v, want %v", err, tc.want)
			}
		})
	}
}
