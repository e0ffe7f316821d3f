package fs

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/layers"
	"golang.org/x/sys/unix"
)

// posixACL writes an ACL in the kernel's xattr form: entries of tag,
// permissions and id (the owner, owning group, mask and other carry none).
func posixACL(ents ...[3]uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range ents {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return b
}

const (
	aclUserObj, aclUser, aclGroupObj, aclMask, aclOther = 0x01, 0x02, 0x04, 0x10, 0x20
	noID                                                = 0xffffffff
)

// TestACLsThroughTheMount: the kernel checks access against the ACLs the
// view keeps; setting one sets the mode, chmod narrows it, a default ACL
// is handed down in place of the creator's umask, and ACLs survive a
// remount and go back with a rollback, the kernel's cached copies too.
func TestACLsThroughTheMount(t *testing.T) {
	sb := newSandboxIn(t, openDir(t), Options{AllowOther: true}, func(base string) {
		writeFile(t, filepath.Join(base, "secret"), "s")
		mustNil(t, "chmod", os.Chmod(filepath.Join(base, "secret"), 0o600))
		mustNil(t, "mkdir", os.Mkdir(filepath.Join(base, "shared"), 0o755))
	})
	mgr := checkpoint.New(sb.store, touchedInval{sb.m})
	cp, err := mgr.Create(sb.name, checkpoint.Options{})
	mustNil(t, "checkpoint", err)
	secret, shared := sb.path("secret"), sb.path("shared")
	nobodyReads := func(what string, want bool) {
		t.Helper()
		out, code := asNobody(t, "cat "+secret)
		if got := code == 0; got != want {
			t.Fatalf("%s: nobody reads secret: %v (%s), want %v", what, got, strings.TrimSpace(out), want)
		}
	}
	nobodyReads("before any ACL", false)

	readers := posixACL([3]uint32{aclUserObj, 6, noID}, [3]uint32{aclUser, 4, nobody}, [3]uint32{aclGroupObj, 0, noID},
		[3]uint32{aclMask, 4, noID}, [3]uint32{aclOther, 0, noID})
	mustNil(t, "set ACL", unix.Setxattr(secret, layers.XattrACLAccess, readers, 0))
	if m := lstat(t, secret).Mode & 0o7777; m != 0o640 {
		t.Errorf("mode after the ACL: %o, want 640 (the mask gives the group bits)", m)
	}
	nobodyReads("with an ACL naming nobody", true)
	// chmod rewrites the mask, and the kernel forgets the ACL it cached.
	mustNil(t, "chmod", os.Chmod(secret, 0o600))
	nobodyReads("after chmod 600", false)
	buf := make([]byte, 256)
	n, err := unix.Getxattr(secret, layers.XattrACLAccess, buf)
	mustNil(t, "get ACL", err)
	if mask := binary.LittleEndian.Uint16(buf[4+3*8+2:]); n != len(readers) || mask != 0 {
		t.Errorf("ACL after chmod 600: %d bytes, mask %o; want %d bytes, mask 0", n, mask, len(readers))
	}
	mustNil(t, "chmod", os.Chmod(secret, 0o640))
	nobodyReads("after chmod 640", true)

	// A default ACL: new inodes take it instead of the umask.
	def := posixACL([3]uint32{aclUserObj, 7, noID}, [3]uint32{aclUser, 7, nobody}, [3]uint32{aclGroupObj, 5, noID},
		[3]uint32{aclMask, 7, noID}, [3]uint32{aclOther, 0, noID})
	mustNil(t, "set default ACL", unix.Setxattr(shared, layers.XattrACLDefault, def, 0))
	mustNil(t, "set ACL", unix.Setxattr(shared, layers.XattrACLAccess, def, 0))
	if out, err := exec.Command("sh", "-c", "umask 077 && cd "+shared+" && echo x > new && mkdir sub && touch plain.txt && chmod 600 plain.txt").CombinedOutput(); err != nil {
		t.Fatalf("create under the default ACL: %v: %s", err, out)
	}
	for _, c := range []struct {
		path string
		mode uint32
	}{{"shared/new", 0o660}, {"shared/sub", 0o770}} {
		if m := lstat(t, sb.path(c.path)).Mode & 0o7777; m != c.mode {
			t.Errorf("%s: mode %o, want %o (the default ACL, not umask 077)", c.path, m, c.mode)
		}
	}
	if out, code := asNobody(t, "echo y >> "+sb.path("shared/new")); code != 0 {
		t.Errorf("nobody appends to shared/new, as its inherited ACL allows: exit %d: %s", code, out)
	}
	if _, code := asNobody(t, "cat "+sb.path("shared/plain.txt")); code == 0 {
		t.Error("nobody reads shared/plain.txt after chmod 600")
	}

	sb.remount()
	for _, c := range []struct{ path, attr string }{
		{"secret", layers.XattrACLAccess}, {"shared/new", layers.XattrACLAccess},
		{"shared/sub", layers.XattrACLAccess}, {"shared/sub", layers.XattrACLDefault},
	} {
		if _, err := unix.Getxattr(sb.path(c.path), c.attr, buf); err != nil {
			t.Errorf("%s: %s after remount: %v", c.path, c.attr, err)
		}
	}
	nobodyReads("after remount", true)

	mgr = checkpoint.New(sb.store, touchedInval{sb.m})
	_, err = mgr.Rollback(sb.name, cp.ID)
	mustNil(t, "rollback", err)
	nobodyReads("after the rollback", false)
	if _, err := unix.Getxattr(secret, layers.XattrACLAccess, buf); err != unix.ENODATA {
		t.Errorf("secret's ACL after the rollback: %v, want ENODATA", err)
	}
	if m := lstat(t, secret).Mode & 0o7777; m != 0o600 {
		t.Errorf("secret's mode after the rollback: %o, want 600", m)
	}
	if _, err := os.Lstat(sb.path("shared/new")); !os.IsNotExist(err) {
		t.Errorf("shared/new after the rollback: %v, want not found", err)
	}
}

// TestACLDropsSetGroupID: an access ACL set by a user outside the file's
// group drops set-group-ID (the kernel says so with SETXATTR_EXT), as on
// ext4; root's keeps it. It runs setfacl as that user.
func TestACLDropsSetGroupID(t *testing.T) {
	if _, err := exec.LookPath("setfacl"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("setfacl is missing (.ci/run installs the acl package)")
		}
		t.Skip("setfacl is not installed (Debian package acl)")
	}
	sb := newSandboxIn(t, openDir(t), Options{AllowOther: true}, nil)
	for _, c := range []struct {
		name  string
		owner int
		cmd   func(p string) (string, int)
		want  uint32
	}{
		{"nobody", nobody, func(p string) (string, int) { return asNobody(t, "setfacl -m u:1000:r "+p) }, 0o775},
		{"root", 0, func(p string) (string, int) {
			out, err := exec.Command("setfacl", "-m", "u:1000:r", p).CombinedOutput()
			if err != nil {
				return string(out), 1
			}
			return string(out), 0
		}, 0o2775},
	} {
		p := sb.path("sg-" + c.name)
		writeFile(t, p, "x")
		mustNil(t, "chown", os.Chown(p, c.owner, 0))
		mustNil(t, "chmod", unix.Chmod(p, 0o2775))
		if out, code := c.cmd(p); code != 0 {
			t.Fatalf("%s: setfacl: exit %d: %s", c.name, code, out)
		}
		if m := lstat(t, p).Mode & 0o7777; m != c.want {
			t.Errorf("%s set an ACL on a set-group-ID file of group 0: mode %o, want %o", c.name, m, c.want)
		}
	}
}

// TestUmaskWithoutDefaultACL: with no default ACL the view applies the
// creator's umask (the kernel leaves it to the view, DONT_MASK), to every
// kind of inode but symlinks.
func TestUmaskWithoutDefaultACL(t *testing.T) {
	sb := newSandbox(t, nil)
	script := "umask 027 && cd " + sb.mnt + " && touch f && mkdir d && mkfifo p && mknod c c 1 3 && ln -s f l"
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", script, err, out)
	}
	for name, want := range map[string]uint32{"f": 0o640, "d": 0o750, "p": 0o640, "c": 0o640, "l": 0o777} {
		if m := lstat(t, sb.path(name)).Mode & 0o7777; m != want {
			t.Errorf("%s under umask 027: mode %o, want %o", name, m, want)
		}
	}
	fd, err := unix.Open(sb.mnt, unix.O_TMPFILE|unix.O_RDWR, 0o666)
	mustNil(t, "O_TMPFILE", err)
	defer unix.Close(fd)
	var st unix.Stat_t
	mustNil(t, "fstat", unix.Fstat(fd, &st))
	if want := 0o666 &^ uint32(currentUmask()); st.Mode&0o7777 != want {
		t.Errorf("O_TMPFILE: mode %o, want %o", st.Mode&0o7777, want)
	}
}

// currentUmask reads the process's umask without changing it for long.
func currentUmask() int {
	m := unix.Umask(0)
	unix.Umask(m)
	return m
}
