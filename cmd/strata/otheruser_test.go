package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/cmd/internal/control"

	"golang.org/x/sys/unix"
)

// otherUserDirs makes, below a directory every user may traverse, a
// directory owned by nobody for the store, the base and the mountpoint,
// and a copy of the binary nobody may run.
func otherUserDirs(t *testing.T) (home, bin string) {
	t.Helper()
	top := t.TempDir()
	for _, d := range []string{filepath.Dir(top), top} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin = publicBinary(t, top)
	home = filepath.Join(top, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	return home, bin
}

// haveFusermount reports whether a fusermount helper is installed.
func haveFusermount() bool {
	for _, name := range []string{"fusermount3", "fusermount"} {
		if _, err := exec.LookPath(name); err == nil {
			return true
		}
	}
	return false
}

// A user other than root mounts through fusermount3 (go-fuse's direct
// mount needs CAP_SYS_ADMIN): the whole round works, mount, write,
// checkpoint, rollback, archive restore, unmount, and the mount carries
// the same flags as root's.
func TestMountAsOtherUser(t *testing.T) {
	if _, err := exec.LookPath("fusermount3"); err != nil {
		t.Skip("fusermount3 is not installed (Debian: fuse3)")
	}
	if out, code := asNobody(t, "exec 3<>/dev/fuse"); code != 0 {
		t.Skipf("/dev/fuse is not open to other users (.ci/run makes it 0666, as udev does): %s", out)
	}
	home, bin := otherUserDirs(t)
	mnt := filepath.Join(home, "mnt")
	storeEnv := "STRATA_STORE=" + filepath.Join(home, "store")
	t.Cleanup(func() {
		// Whatever the script reached, nothing stays mounted, and the
		// server has let go of the store before its directory goes.
		if out, code := asNobody(t, bin+" unmount s", storeEnv); code != 0 && !strings.Contains(out, "not mounted") {
			t.Errorf("unmount as nobody: %s", out)
		}
		if mounted(t, mnt) {
			t.Errorf("%s still mounted after strata unmount", mnt)
			_ = unix.Unmount(mnt, unix.MNT_DETACH)
		}
		waitFor(t, 15*time.Second, "the server to release the store", func() bool {
			out, _ := asNobody(t, bin+" status", storeEnv)
			return strings.Contains(out, "not running")
		})
	})
	script := fmt.Sprintf(`set -eu
cd %[1]s
mkdir base mnt
echo one > base/a
%[2]s sandbox create s --base base
%[2]s mount s mnt
grep " $(pwd)/mnt " /proc/mounts
echo two > mnt/a
%[2]s checkpoint create s --label two
echo three > mnt/a
mkdir mnt/d
%[2]s rollback s --to-checkpoint two >/dev/null
echo "after rollback: $(cat mnt/a) $(ls mnt | tr '\n' ' ')"
%[2]s archive restore "$(%[2]s --json archive list s | sed -n 's/.*"id": "\([^"]*\)".*/\1/p' | tail -n 1)" >/dev/null
echo "after restore: $(cat mnt/a) $(ls mnt | tr '\n' ' ')"
%[2]s unmount s
echo "base: $(cat base/a)"
`, home, bin)
	out, code := asNobody(t, script, storeEnv)
	if code != 0 {
		t.Fatalf("script as nobody: exit %d\n%s", code, out)
	}
	for _, want := range []string{
		"fuse.strata rw,nosuid,nodev,noatime,user_id=65534,group_id=65534,default_permissions",
		"after rollback: two a \n",
		"after restore: three a d \n",
		"base: one\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if mounted(t, mnt) {
		t.Errorf("%s still mounted after strata unmount", mnt)
	}
}

// A user FUSE refuses gets one line saying why and what to do, and the
// store is left as it was.
func TestMountRefusedToOtherUser(t *testing.T) {
	home, bin := otherUserDirs(t)
	// A device only root may open stands in for a /dev/fuse of mode 0600.
	dev := filepath.Join(filepath.Dir(home), "fuse")
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	storeEnv := "STRATA_STORE=" + filepath.Join(home, "store")
	if out, code := asNobody(t, fmt.Sprintf("cd %s && mkdir base mnt && %s sandbox create s --base base", home, bin), storeEnv); code != 0 {
		t.Fatalf("sandbox create as nobody: %s", out)
	}
	allowed, _ := os.ReadFile("/etc/fuse.conf")
	tests := []struct {
		name string
		args string
		env  string
		want string
		hint string
		skip bool
		// needsHelper: the error comes after the check for fusermount3,
		// which a user other than root mounts through.
		needsHelper bool
	}{
		{
			name: "device not open to the user",
			args: "mount s mnt", env: "STRATA_FUSE_DEVICE=" + dev,
			want: "strata: mount s: fuse device " + dev + ": permission denied",
			hint: "hint: users other than root need /dev/fuse open to them",
		},
		{
			name: "allow-other without user_allow_other",
			args: "mount s mnt --allow-other", env: "STRATA_FUSE_DEVICE=/dev/null",
			want:        "strata: mount s: --allow-other needs user_allow_other in /etc/fuse.conf",
			hint:        "hint: add the line user_allow_other to /etc/fuse.conf",
			skip:        allowOtherSet(string(allowed)),
			needsHelper: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.skip {
				t.Skip("/etc/fuse.conf allows allow_other")
			}
			if tt.needsHelper && !haveFusermount() {
				t.Skip("no fusermount3 or fusermount (Debian: fuse3): the mount is refused for that first")
			}
			before, _ := asNobody(t, bin+" --json sandbox list", storeEnv)
			out, code := asNobody(t, fmt.Sprintf("cd %s && %s %s", home, bin, tt.args), storeEnv, tt.env)
			if code != 1 {
				t.Errorf("exit code %d, want 1: %s", code, out)
			}
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], tt.want) || !strings.HasPrefix(lines[1], tt.hint) {
				t.Errorf("output:\n%s\nwant a line starting %q and a hint starting %q", out, tt.want, tt.hint)
			}
			if after, _ := asNobody(t, bin+" --json sandbox list", storeEnv); after != before {
				t.Errorf("sandboxes changed:\n%s\nwant\n%s", after, before)
			}
			if mounted(t, filepath.Join(home, "mnt")) {
				t.Errorf("mounted although refused")
			}
		})
	}
}

// allowOtherSet reports whether a fuse.conf lets users mount with
// allow_other.
func allowOtherSet(conf string) bool {
	for _, line := range strings.Split(conf, "\n") {
		line, _, _ = strings.Cut(line, "#")
		if strings.TrimSpace(line) == "user_allow_other" {
			return true
		}
	}
	return false
}

// mounted reports whether dir is a mount point.
func mounted(t *testing.T, dir string) bool {
	t.Helper()
	ms, err := control.Mounts()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Mountpoint == dir {
			return true
		}
	}
	return false
}
