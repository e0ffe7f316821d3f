package control

import (
	"os"
	"path/filepath"
	"testing"
)

// userAllowOther reads /etc/fuse.conf as fusermount3 does: the option on
// a line of its own, anything after '#' a comment.
func TestUserAllowOther(t *testing.T) {
	tests := []struct {
		name string
		conf string // "" with missing: no file at all
		want bool
	}{
		{"debian default", "# The file /etc/fuse.conf allows for the following parameters:\n#user_allow_other\n#mount_max = 1000\n", false},
		{"set", "# comment\nuser_allow_other\n", true},
		{"set with blanks and a comment", "mount_max = 10\n  user_allow_other   # for strata\n", true},
		{"last line without newline", "user_allow_other", true},
		{"commented with a space", "# user_allow_other\n", false},
		{"another option containing it", "user_allow_other_x\n", false},
		{"empty", "", false},
	}
	dir := t.TempDir()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "fuse.conf"+string(rune('a'+i)))
			if err := os.WriteFile(p, []byte(tt.conf), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := userAllowOther(p); got != tt.want {
				t.Errorf("userAllowOther(%q) = %v, want %v", tt.conf, got, tt.want)
			}
		})
	}
	if userAllowOther(filepath.Join(dir, "missing")) {
		t.Error("a missing fuse.conf allows allow_other")
	}
}
