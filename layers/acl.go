package layers

import (
	"encoding/binary"
	"fmt"
	"syscall"
)

// POSIX ACLs. A mount with ACLs on (fs) lets the kernel check access
// against them; the file system keeps them as the extended attributes
// system.posix_acl_access and system.posix_acl_default, in the kernel's
// xattr form, and keeps them and the mode in step as ext4 does: setting
// an access ACL sets the permission bits, chmod rewrites the ACL's owner,
// mask (or group) and other entries, and a new inode in a directory with
// a default ACL inherits it.

// The names of the two ACL attributes.
const (
	XattrACLAccess  = "system.posix_acl_access"
	XattrACLDefault = "system.posix_acl_default"
)

// ACL entry tags and the xattr form's version, as in linux/posix_acl.h and
// linux/posix_acl_xattr.h.
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20

	aclVersion   = 2
	aclHeaderLen = 4
	aclEntryLen  = 8
)

type aclEntry struct {
	tag  uint16
	perm uint16
	id   uint32
}

// isACL tells whether name is one of the ACL attributes.
func isACL(name string) bool { return name == XattrACLAccess || name == XattrACLDefault }

// parseACL reads an ACL in the xattr form and checks it is one POSIX
// allows: one owner, owning group and other entry each, a mask when named
// users or groups are present, at most one of it, no id twice, entries in
// the kernel's order. An ACL with no entries is nil.
func parseACL(b []byte) ([]aclEntry, error) {
	if len(b) < aclHeaderLen || (len(b)-aclHeaderLen)%aclEntryLen != 0 {
		return nil, fmt.Errorf("ACL of %d bytes: %w", len(b), ErrInvalid)
	}
	if v := binary.LittleEndian.Uint32(b); v != aclVersion {
		return nil, fmt.Errorf("ACL version %d: %w", v, ErrInvalid)
	}
	n := (len(b) - aclHeaderLen) / aclEntryLen
	if n == 0 {
		return nil, nil
	}
	es := make([]aclEntry, n)
	counts := map[uint16]int{}
	var lastTag uint16
	var lastID uint32
	for i := range es {
		p := b[aclHeaderLen+i*aclEntryLen:]
		e := aclEntry{tag: binary.LittleEndian.Uint16(p), perm: binary.LittleEndian.Uint16(p[2:]), id: binary.LittleEndian.Uint32(p[4:])}
		switch e.tag {
		case aclUserObj, aclGroupObj, aclMask, aclOther:
			e.id = 0 // carries no id (the kernel writes -1)
		case aclUser, aclGroup:
			if e.tag == lastTag && e.id <= lastID {
				return nil, fmt.Errorf("ACL entry %d: ids out of order: %w", i, ErrInvalid)
			}
		default:
			return nil, fmt.Errorf("ACL entry %d: tag %#x: %w", i, e.tag, ErrInvalid)
		}
		if e.perm&^7 != 0 {
			return nil, fmt.Errorf("ACL entry %d: permissions %#o: %w", i, e.perm, ErrInvalid)
		}
		if e.tag < lastTag {
			return nil, fmt.Errorf("ACL entry %d: tags out of order: %w", i, ErrInvalid)
		}
		counts[e.tag]++
		lastTag, lastID = e.tag, e.id
		es[i] = e
	}
	for _, t := range []uint16{aclUserObj, aclGroupObj, aclOther} {
		if counts[t] != 1 {
			return nil, fmt.Errorf("ACL has %d entries of tag %#x: %w", counts[t], t, ErrInvalid)
		}
	}
	if counts[aclMask] > 1 || (counts[aclMask] == 0 && counts[aclUser]+counts[aclGroup] > 0) {
		return nil, fmt.Errorf("ACL has %d mask entries: %w", counts[aclMask], ErrInvalid)
	}
	return es, nil
}

// encodeACL writes es in the xattr form, ids of the entries that carry
// none as the kernel writes them.
func encodeACL(es []aclEntry) []byte {
	b := make([]byte, aclHeaderLen+len(es)*aclEntryLen)
	binary.LittleEndian.PutUint32(b, aclVersion)
	for i, e := range es {
		p := b[aclHeaderLen+i*aclEntryLen:]
		binary.LittleEndian.PutUint16(p, e.tag)
		binary.LittleEndian.PutUint16(p[2:], e.perm)
		id := e.id
		if e.tag != aclUser && e.tag != aclGroup {
			id = ^uint32(0)
		}
		binary.LittleEndian.PutUint32(p[4:], id)
	}
	return b
}

// aclMode is the permission bits es stands for, and whether the mode says
// all of it (no named entries, no mask): such an ACL is not stored.
func aclMode(es []aclEntry) (perm uint32, equiv bool) {
	var owner, group, other uint32
	mask, hasMask := uint32(0), false
	equiv = true
	for _, e := range es {
		switch e.tag {
		case aclUserObj:
			owner = uint32(e.perm)
		case aclGroupObj:
			group = uint32(e.perm)
		case aclOther:
			other = uint32(e.perm)
		case aclMask:
			mask, hasMask = uint32(e.perm), true
			equiv = false
		default:
			equiv = false
		}
	}
	if hasMask {
		group = mask
	}
	return owner<<6 | group<<3 | other, equiv
}

// chmodACL sets the owner, mask (the owning group without one) and other
// entries of es to mode's permission bits, as chmod(2) does to an ACL.
func chmodACL(es []aclEntry, mode uint32) []aclEntry {
	out := append([]aclEntry(nil), es...)
	hasMask := false
	for _, e := range out {
		hasMask = hasMask || e.tag == aclMask
	}
	for i := range out {
		switch out[i].tag {
		case aclUserObj:
			out[i].perm = uint16(mode >> 6 & 7)
		case aclMask:
			out[i].perm = uint16(mode >> 3 & 7)
		case aclGroupObj:
			if !hasMask {
				out[i].perm = uint16(mode >> 3 & 7)
			}
		case aclOther:
			out[i].perm = uint16(mode & 7)
		}
	}
	return out
}

// inheritACL is what a new inode of mode gets from its directory's
// default ACL def (Linux's posix_acl_create): the access ACL, with its
// owner, mask (or group) and other entries limited by mode's bits, and
// mode limited by them in turn; access is nil when the mode says it all.
func inheritACL(def []aclEntry, mode uint32) (access []aclEntry, newMode uint32) {
	es := append([]aclEntry(nil), def...)
	perm := mode & 0o777
	var group, mask *aclEntry
	equiv := true
	for i := range es {
		e := &es[i]
		switch e.tag {
		case aclUserObj:
			e.perm &= uint16(perm >> 6 & 7)
			perm &= uint32(e.perm)<<6 | 0o077
		case aclOther:
			e.perm &= uint16(perm & 7)
			perm &= uint32(e.perm) | 0o770
		case aclGroupObj:
			group = e
		case aclMask:
			mask = e
			equiv = false
		default:
			equiv = false
		}
	}
	g := group
	if mask != nil {
		g = mask
	}
	g.perm &= uint16(perm >> 3 & 7)
	perm &= uint32(g.perm)<<3 | 0o707
	newMode = mode&^0o777 | perm
	if equiv {
		return nil, newMode
	}
	return es, newMode
}

// setACL is SetXattr for the ACL attributes, on an inode of mode whose
// attributes are xs: an access ACL also sets the permission bits (and is
// not kept when they say it all); a default ACL is for directories only.
// Removing one that is not there succeeds, as on ext4. killSgid drops
// set-group-ID with an access ACL set. It returns the attributes as they
// become and the mode.
func setACL(mode uint32, xs map[string][]byte, name string, val []byte, killSgid bool) (map[string][]byte, uint32, error) {
	typ := mode & syscall.S_IFMT
	if typ == syscall.S_IFLNK {
		return nil, 0, fmt.Errorf("ACL on a symlink: %w", ErrNotSupported)
	}
	var es []aclEntry
	if val != nil {
		var err error
		if es, err = parseACL(val); err != nil {
			return nil, 0, err
		}
	}
	next := make(map[string][]byte, len(xs)+1)
	for k, x := range xs {
		next[k] = x
	}
	delete(next, name)
	if name == XattrACLDefault {
		if typ != syscall.S_IFDIR {
			if es == nil {
				return next, mode, nil
			}
			return nil, 0, fmt.Errorf("default ACL on a non-directory: %w", syscall.EACCES)
		}
		if es != nil {
			next[name] = encodeACL(es)
		}
		return next, mode, nil
	}
	if es == nil {
		return next, mode, nil
	}
	perm, equiv := aclMode(es)
	if !equiv {
		next[name] = encodeACL(es)
	}
	if killSgid {
		mode &^= syscall.S_ISGID
	}
	return next, mode&^0o777 | perm, nil
}
