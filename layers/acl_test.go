package layers

import (
	"bytes"
	"encoding/binary"
	"errors"
	"slices"
	"syscall"
	"testing"
)

// acl writes entries (tag, perm, id) in the xattr form, ids as given.
func acl(ents ...[3]uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, aclVersion)
	for _, e := range ents {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return b
}

const noID = 0xffffffff

var (
	minimalACL = acl([3]uint32{aclUserObj, 6, noID}, [3]uint32{aclGroupObj, 4, noID}, [3]uint32{aclOther, 0, noID})
	namedACL   = acl([3]uint32{aclUserObj, 6, noID}, [3]uint32{aclUser, 4, 1000}, [3]uint32{aclUser, 6, 1001},
		[3]uint32{aclGroupObj, 4, noID}, [3]uint32{aclGroup, 2, 50}, [3]uint32{aclMask, 6, noID}, [3]uint32{aclOther, 0, noID})
)

func TestParseACL(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		want int // entries; -1: ErrInvalid
	}{
		{"minimal", minimalACL, 3},
		{"named users and groups with a mask", namedACL, 7},
		{"header only", acl(), 0},
		{"empty", nil, -1},
		{"torn entry", minimalACL[:len(minimalACL)-1], -1},
		{"version 1", append([]byte{1, 0, 0, 0}, minimalACL[4:]...), -1},
		{"unknown tag", acl([3]uint32{aclUserObj, 6, noID}, [3]uint32{0x40, 4, noID}), -1},
		{"permission bits over 7", acl([3]uint32{aclUserObj, 8, noID}, [3]uint32{aclGroupObj, 4, noID}, [3]uint32{aclOther, 0, noID}), -1},
		{"tags out of order", acl([3]uint32{aclGroupObj, 4, noID}, [3]uint32{aclUserObj, 6, noID}, [3]uint32{aclOther, 0, noID}), -1},
		{"no other", acl([3]uint32{aclUserObj, 6, noID}, [3]uint32{aclGroupObj, 4, noID}), -1},
		{"two owners", acl([3]uint32{aclUserObj, 6, noID}, [3]uint32{aclUserObj, 6, noID}, [3]uint32{aclGroupObj, 4, noID}, [3]uint32{aclOther, 0, noID}), -1},
		{"named user without a mask", acl([3]uint32{aclUserObj, 6, noID}, [3]uint32{aclUser, 4, 1}, [3]uint32{aclGroupObj, 4, noID}, [3]uint32{aclOther, 0, noID}), -1},
		{"two masks", acl([3]uint32{aclUserObj, 6, noID}, [3]uint32{aclGroupObj, 4, noID}, [3]uint32{aclMask, 4, noID}, [3]uint32{aclMask, 4, noID}, [3]uint32{aclOther, 0, noID}), -1},
		{"a user twice", acl([3]uint32{aclUserObj, 6, noID}, [3]uint32{aclUser, 4, 7}, [3]uint32{aclUser, 4, 7}, [3]uint32{aclGroupObj, 4, noID}, [3]uint32{aclMask, 4, noID}, [3]uint32{aclOther, 0, noID}), -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es, err := parseACL(tt.b)
			if tt.want < 0 {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("got %v, %v; want ErrInvalid", es, err)
				}
				return
			}
			if err != nil || len(es) != tt.want {
				t.Fatalf("got %d entries, %v; want %d", len(es), err, tt.want)
			}
			if tt.want > 0 && !bytes.Equal(encodeACL(es), tt.b) {
				t.Fatalf("encoded again: %v, want %v", encodeACL(es), tt.b)
			}
		})
	}
}

func TestACLModeAndChmod(t *testing.T) {
	min, err := parseACL(minimalACL)
	ok(t, "parse", err)
	named, err := parseACL(namedACL)
	ok(t, "parse", err)
	if perm, equiv := aclMode(min); perm != 0o640 || !equiv {
		t.Errorf("minimal ACL: mode %o, equivalent %v; want 640, true", perm, equiv)
	}
	// The mask, not the owning group's entry, gives the group bits.
	if perm, equiv := aclMode(named); perm != 0o660 || equiv {
		t.Errorf("named ACL: mode %o, equivalent %v; want 660, false", perm, equiv)
	}
	perms := func(es []aclEntry) []uint16 {
		var out []uint16
		for _, e := range es {
			out = append(out, e.perm)
		}
		return out
	}
	// chmod sets the owner, the mask (named entries stay) and other.
	if got, want := perms(chmodACL(named, 0o751)), []uint16{7, 4, 6, 4, 2, 5, 1}; !slices.Equal(got, want) {
		t.Errorf("chmod 751 of the named ACL: %v, want %v", got, want)
	}
	// Without a mask it sets the owning group.
	if got, want := perms(chmodACL(min, 0o751)), []uint16{7, 5, 1}; !slices.Equal(got, want) {
		t.Errorf("chmod 751 of the minimal ACL: %v, want %v", got, want)
	}
	if got := perms(named); got[0] != 6 {
		t.Errorf("chmodACL changed its argument: %v", got)
	}
}

// TestInheritACL: what a new inode gets from a default ACL, as Linux's
// posix_acl_create computes it.
func TestInheritACL(t *testing.T) {
	def, err := parseACL(acl([3]uint32{aclUserObj, 7, noID}, [3]uint32{aclUser, 7, 1000}, [3]uint32{aclGroupObj, 5, noID},
		[3]uint32{aclMask, 7, noID}, [3]uint32{aclOther, 5, noID}))
	ok(t, "parse", err)
	minDef, err := parseACL(acl([3]uint32{aclUserObj, 7, noID}, [3]uint32{aclGroupObj, 5, noID}, [3]uint32{aclOther, 0, noID}))
	ok(t, "parse", err)
	tests := []struct {
		name     string
		def      []aclEntry
		mode     uint32
		wantMode uint32
		want     []uint16 // permissions of the access ACL; nil: none
	}{
		{"file", def, syscall.S_IFREG | 0o666, syscall.S_IFREG | 0o664, []uint16{6, 7, 5, 6, 4}},
		{"directory", def, syscall.S_IFDIR | 0o777, syscall.S_IFDIR | 0o775, []uint16{7, 7, 5, 7, 5}},
		{"file created 0600", def, syscall.S_IFREG | 0o600, syscall.S_IFREG | 0o600, []uint16{6, 7, 5, 0, 0}},
		{"set-group-ID kept", def, syscall.S_IFDIR | 0o2777, syscall.S_IFDIR | 0o2775, []uint16{7, 7, 5, 7, 5}},
		{"minimal default: the mode says it all", minDef, syscall.S_IFREG | 0o666, syscall.S_IFREG | 0o640, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			access, mode := inheritACL(tt.def, tt.mode)
			if mode != tt.wantMode {
				t.Errorf("mode %o, want %o", mode, tt.wantMode)
			}
			var got []uint16
			for _, e := range access {
				got = append(got, e.perm)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("access ACL permissions %v, want %v", got, tt.want)
			}
		})
	}
	if def[0].perm != 7 || def[3].perm != 7 {
		t.Errorf("inheritACL changed the default ACL: %v", def)
	}
}

// TestViewACLs: the view keeps ACLs and the mode in step, hands default
// ACLs down, applies a caller's umask only without one, and keeps all of
// it across a restart.
func TestViewACLs(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/base.txt", "b") })
	v := e.view()
	root := Caller{UID: 0, GID: 0}
	f, err := v.Mknod(RootIno, "f", syscall.S_IFREG|0o644, 0, root)
	ok(t, "mknod", err)
	d, err := v.Mkdir(RootIno, "d", 0o755, root)
	ok(t, "mkdir", err)
	l, err := v.Symlink(RootIno, "l", "f", root)
	ok(t, "symlink", err)
	mode := func(ino uint64) uint32 {
		t.Helper()
		a, err := v.GetAttr(ino)
		ok(t, "getattr", err)
		return a.Mode & 0o7777
	}
	get := func(ino uint64, name string) []byte {
		t.Helper()
		b, err := v.GetXattr(ino, name)
		if errors.Is(err, ErrNoAttr) {
			return nil
		}
		ok(t, "getxattr "+name, err)
		return b
	}

	// An access ACL with named entries is kept and sets the bits.
	ok(t, "set named ACL", v.SetXattr(f.Ino, XattrACLAccess, namedACL, 0))
	if m := mode(f.Ino); m != 0o660 {
		t.Errorf("mode after a named ACL: %o, want 660", m)
	}
	if b := get(f.Ino, XattrACLAccess); !bytes.Equal(b, namedACL) {
		t.Errorf("ACL read back: %v, want %v", b, namedACL)
	}
	// chmod rewrites the owner, mask and other entries.
	m := uint32(0o604)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Mode: &m})
	ok(t, "chmod", err)
	es, err := parseACL(get(f.Ino, XattrACLAccess))
	ok(t, "parse after chmod", err)
	if p, _ := aclMode(es); p != 0o604 {
		t.Errorf("ACL after chmod 604 says %o", p)
	}
	// One the mode says all of is not kept.
	ok(t, "set minimal ACL", v.SetXattr(f.Ino, XattrACLAccess, minimalACL, 0))
	if m := mode(f.Ino); m != 0o640 {
		t.Errorf("mode after a minimal ACL: %o, want 640", m)
	}
	if b := get(f.Ino, XattrACLAccess); b != nil {
		t.Errorf("a minimal ACL was kept: %v", b)
	}
	// Removing what is not there succeeds, as on ext4.
	ok(t, "remove absent ACL", v.SetXattr(f.Ino, XattrACLAccess, nil, 0))
	ok(t, "remove absent default ACL of a file", v.SetXattr(f.Ino, XattrACLDefault, nil, 0))
	wantErr(t, "default ACL on a file", v.SetXattr(f.Ino, XattrACLDefault, namedACL, 0), syscall.EACCES)
	wantErr(t, "ACL on a symlink", v.SetXattr(l.Ino, XattrACLAccess, namedACL, 0), ErrNotSupported)
	// ACLs count towards the inode's attribute space.
	big, err := v.Mknod(RootIno, "big", syscall.S_IFREG|0o644, 0, root)
	ok(t, "mknod big", err)
	ok(t, "fill the attribute space", v.SetXattr(big.Ino, "user.fill", make([]byte, MaxXattrSpace-len("user.fill")-1-len(namedACL)), 0))
	wantErr(t, "ACL past the attribute space", v.SetXattr(big.Ino, XattrACLAccess, namedACL, 0), ErrNoSpace)
	if m := mode(big.Ino); m != 0o644 {
		t.Errorf("mode after a refused ACL: %o, want 644", m)
	}
	// A caller outside the group drops set-group-ID with an access ACL.
	sg := uint32(0o2775)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Mode: &sg})
	ok(t, "chmod 2775", err)
	ok(t, "set ACL, killing set-group-ID", v.SetXattr(f.Ino, XattrACLAccess, namedACL, XattrKillSgid))
	if m := mode(f.Ino); m != 0o660 {
		t.Errorf("mode after an ACL set with XattrKillSgid: %o, want 660", m)
	}

	// Without a default ACL the caller's umask applies; with one it does
	// not, and the default ACL is handed down.
	masked := Caller{Umask: 0o027, HasUmask: true}
	a, err := v.Mknod(d.Ino, "plain", syscall.S_IFREG|0o666, 0, masked)
	ok(t, "mknod under no default ACL", err)
	if a.Mode&0o7777 != 0o640 || get(a.Ino, XattrACLAccess) != nil {
		t.Errorf("file under no default ACL: mode %o, ACL %v; want 640, none", a.Mode&0o7777, get(a.Ino, XattrACLAccess))
	}
	def := acl([3]uint32{aclUserObj, 7, noID}, [3]uint32{aclUser, 7, 1000}, [3]uint32{aclGroupObj, 5, noID},
		[3]uint32{aclMask, 7, noID}, [3]uint32{aclOther, 5, noID})
	ok(t, "set default ACL", v.SetXattr(d.Ino, XattrACLDefault, def, 0))
	child, err := v.Mknod(d.Ino, "child", syscall.S_IFREG|0o666, 0, masked)
	ok(t, "mknod under a default ACL", err)
	sub, err := v.Mkdir(d.Ino, "sub", 0o777, masked)
	ok(t, "mkdir under a default ACL", err)
	tmp, err := v.Tmpfile(d.Ino, 0o600, masked)
	ok(t, "tmpfile under a default ACL", err)
	if tmp.Mode&0o7777 != 0o600 || get(tmp.Ino, XattrACLAccess) == nil {
		t.Errorf("O_TMPFILE under a default ACL: mode %o, ACL %v; want 600 and an ACL", tmp.Mode&0o7777, get(tmp.Ino, XattrACLAccess))
	}
	v.Release(tmp.Ino)
	ln, err := v.Symlink(d.Ino, "ln", "child", masked)
	ok(t, "symlink under a default ACL", err)
	wantACL := func(what string, ino uint64, wantMode uint32, wantPerms []uint16, wantDefault bool) {
		t.Helper()
		if m := mode(ino); m != wantMode {
			t.Errorf("%s: mode %o, want %o", what, m, wantMode)
		}
		es, err := parseACL(get(ino, XattrACLAccess))
		ok(t, what+": parse", err)
		var perms []uint16
		for _, e := range es {
			perms = append(perms, e.perm)
		}
		if !slices.Equal(perms, wantPerms) {
			t.Errorf("%s: access ACL permissions %v, want %v", what, perms, wantPerms)
		}
		if got := get(ino, XattrACLDefault) != nil; got != wantDefault {
			t.Errorf("%s: has a default ACL: %v, want %v", what, got, wantDefault)
		}
	}
	wantACL("file", child.Ino, 0o664, []uint16{6, 7, 5, 6, 4}, false)
	wantACL("directory", sub.Ino, 0o775, []uint16{7, 7, 5, 7, 5}, true)
	if a, err := v.GetAttr(ln.Ino); err != nil || a.Mode&0o777 != 0o777 || get(ln.Ino, XattrACLAccess) != nil {
		t.Errorf("symlink: mode %o, ACL %v, %v; want 777, none", a.Mode&0o777, get(ln.Ino, XattrACLAccess), err)
	}
	ok(t, "remove default ACL", v.SetXattr(d.Ino, XattrACLDefault, nil, 0))
	if get(d.Ino, XattrACLDefault) != nil {
		t.Error("default ACL still there after its removal")
	}
	// A default ACL of the three base entries only hands down a mode: the
	// access ACL it would give says no more than the mode, so the file
	// gets none, as on ext4.
	minimal := acl([3]uint32{aclUserObj, 7, noID}, [3]uint32{aclGroupObj, 5, noID}, [3]uint32{aclOther, 0, noID})
	ok(t, "set a minimal default ACL", v.SetXattr(d.Ino, XattrACLDefault, minimal, 0))
	plain2, err := v.Mknod(d.Ino, "plain2", syscall.S_IFREG|0o666, 0, masked)
	ok(t, "mknod under a minimal default ACL", err)
	if plain2.Mode&0o7777 != 0o640 || get(plain2.Ino, XattrACLAccess) != nil {
		t.Errorf("file under a minimal default ACL: mode %o, ACL %v; want 640, none", plain2.Mode&0o7777, get(plain2.Ino, XattrACLAccess))
	}
	ok(t, "remove the minimal default ACL", v.SetXattr(d.Ino, XattrACLDefault, nil, 0))

	// All of it is stored.
	v = e.reopen(v)
	defer v.Close()
	wantACL("file after restart", child.Ino, 0o664, []uint16{6, 7, 5, 6, 4}, false)
	wantACL("directory after restart", sub.Ino, 0o775, []uint16{7, 7, 5, 7, 5}, true)
}

// FuzzParseACL: parseACL takes any bytes without panicking, and what it
// accepts is encoded back to an ACL it reads the same.
func FuzzParseACL(f *testing.F) {
	for _, b := range [][]byte{minimalACL, namedACL, acl(), {2, 0, 0}} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := parseACL(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		again, err := parseACL(encodeACL(es))
		if err != nil || !slices.Equal(again, es) {
			t.Fatalf("encoded and parsed again: %v, %v; want %v", again, err, es)
		}
		perm, _ := aclMode(es)
		if len(es) > 0 {
			if p, _ := aclMode(chmodACL(es, perm)); p != perm {
				t.Fatalf("chmod to the ACL's own mode %o gives %o", perm, p)
			}
		}
	})
}
