package layers

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
)

// TestKillSuidgid: a write by a caller without CAP_FSETID, a truncate by
// one and a chown drop set-user-ID, and set-group-ID where the group may
// execute; a directory keeps both, and a file with neither records
// nothing. The change survives a restart and, on a base file, leaves the
// base alone.
func TestKillSuidgid(t *testing.T) {
	outside := func(uint32) bool { return false } // a caller in no group
	tests := []struct {
		name    string
		mode    uint32
		inGroup func(uint32) bool
		want    uint32
	}{
		{"suid and sgid, group executes", 0o6755, nil, 0o755},
		{"sgid without group execute stays for the group", 0o6745, nil, 0o2745},
		{"sgid without group execute goes for others", 0o6745, outside, 0o745},
		{"sgid alone, group executes", 0o2771, nil, 0o771},
		{"sticky stays", 0o5777, nil, 0o1777},
		{"nothing to drop", 0o755, outside, 0o755},
	}
	e := newEnv(t, 0, func(base string) {
		for i, tt := range tests {
			p := filepath.Join(base, "f"+string(rune('a'+i)))
			put(t, p, "data")
			ok(t, "chmod", syscall.Chmod(p, tt.mode))
		}
	})
	v := e.view()
	ents, err := v.ReadDir(RootIno)
	ok(t, "readdir", err)
	byName := map[string]uint64{}
	for _, d := range ents {
		byName[d.Name] = d.Ino
	}
	for i, tt := range tests {
		ino := byName["f"+string(rune('a'+i))]
		ok(t, tt.name, v.KillSuidgid(ino, tt.inGroup))
		if a, err := v.GetAttr(ino); err != nil || a.Mode&07777 != tt.want {
			t.Errorf("%s: mode %o (%v), want %o", tt.name, a.Mode&07777, err, tt.want)
		}
	}
	// A file with nothing to drop was not copied up.
	v.mu.Lock()
	recorded := v.recordIn(v.stack, byName["ff"])
	v.mu.Unlock()
	if recorded {
		t.Error("KillSuidgid recorded a file that had nothing to drop")
	}
	v = e.reopen(v)
	defer v.Close()
	_, err = v.ReadDir(RootIno)
	ok(t, "readdir", err)
	for i, tt := range tests {
		a, err := v.GetAttr(byName["f"+string(rune('a'+i))])
		if err != nil || a.Mode&07777 != tt.want {
			t.Errorf("%s after a restart: mode %o (%v), want %o", tt.name, a.Mode&07777, err, tt.want)
		}
		var st syscall.Stat_t
		ok(t, "stat base", syscall.Stat(filepath.Join(e.base, "f"+string(rune('a'+i))), &st))
		if st.Mode&07777 != tt.mode {
			t.Errorf("%s: base file's mode %o, want %o", tt.name, st.Mode&07777, tt.mode)
		}
	}

	// SetAttr drops them with a chown or truncate, unless it sets a mode.
	dir, err := v.Mkdir(RootIno, "d", 0o2775, root)
	ok(t, "mkdir", err)
	f := mkfile(t, v, RootIno, "g", "data")
	m := uint32(0o6755)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Mode: &m})
	ok(t, "chmod", err)
	size := int64(1)
	a, err := v.SetAttr(f.Ino, SetAttrIn{Size: &size, KillSuidgid: true})
	ok(t, "truncate", err)
	if a.Mode&07777 != 0o755 || a.Size != 1 {
		t.Errorf("after a truncate that drops privileges: mode %o size %d, want 755 and 1", a.Mode&07777, a.Size)
	}
	_, err = v.SetAttr(f.Ino, SetAttrIn{Mode: &m})
	ok(t, "chmod", err)
	if a, err = v.SetAttr(f.Ino, SetAttrIn{Mode: &m, KillSuidgid: true}); err != nil || a.Mode&07777 != 0o6755 {
		t.Errorf("a mode given with KillSuidgid: mode %o (%v), want 6755", a.Mode&07777, err)
	}
	// A chgrp weighs the group the file had: a caller outside it loses
	// set-group-ID even where the group may not execute.
	m2, gid := uint32(0o2745), uint32(5)
	_, err = v.SetAttr(f.Ino, SetAttrIn{Mode: &m2})
	ok(t, "chmod", err)
	inNew := func(g uint32) bool { return g == gid }
	if a, err = v.SetAttr(f.Ino, SetAttrIn{GID: &gid, KillSuidgid: true, InGroup: inNew}); err != nil || a.Mode&07777 != 0o745 || a.GID != gid {
		t.Errorf("a chgrp by a caller outside the old group: mode %o gid %d (%v), want 745 and %d", a.Mode&07777, a.GID, err, gid)
	}
	uid := uint32(1000)
	if a, err = v.SetAttr(dir.Ino, SetAttrIn{UID: &uid, KillSuidgid: true}); err != nil || a.Mode&07777 != 0o2775 {
		t.Errorf("a directory's chown: mode %o (%v), want 2775", a.Mode&07777, err)
	}

	// Errors: an unknown inode, a read-only view.
	if err := v.KillSuidgid(1<<40, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("KillSuidgid of an unknown inode: %v, want ErrNotFound", err)
	}
	head, err := e.store.Sandbox(e.name)
	ok(t, "sandbox", err)
	ro, err := e.store.OpenSnapshot(e.name, head.Head)
	ok(t, "open a snapshot", err)
	defer ro.Close()
	if err := ro.KillSuidgid(f.Ino, nil); !errors.Is(err, ErrReadOnly) {
		t.Errorf("KillSuidgid on a read-only view: %v, want ErrReadOnly", err)
	}
}
