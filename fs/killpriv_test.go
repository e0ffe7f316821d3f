package fs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWritesDropPrivileges: the mount negotiates HANDLE_KILLPRIV_V2, so
// dropping set-user-ID and set-group-ID is the server's job. A write, a
// truncate or a fallocate by a user without CAP_FSETID drops them
// (set-group-ID where the group may execute or the user is outside the
// file's group, as ext4 on Linux 6.18), a chown drops them whoever does
// it, and root's writes and chmod keep them; directories keep
// set-group-ID.
func TestWritesDropPrivileges(t *testing.T) {
	tests := []struct {
		name   string
		file   string // in the base, or "upper/..." made through the mount
		mode   uint32
		asRoot func(p string) error // nil: script runs as nobody
		script string               // as nobody; $F is the file
		want   uint32               // permission bits after
	}{
		{"nobody appends", "a", 0o6777, nil, "printf x >> $F", 0o777},
		{"nobody writes in place", "b", 0o6777, nil, "printf x | dd of=$F conv=notrunc status=none", 0o777},
		// Set-group-ID without group execute goes too: nobody is outside
		// the file's group (root's), as the kernel's setattr_should_drop_sgid.
		{"nobody appends, no group execute", "c", 0o6767, nil, "printf x >> $F", 0o767},
		{"nobody truncates, no group execute", "c2", 0o2666, nil, "truncate -s 0 $F", 0o666},
		{"nobody fallocates", "c3", 0o6777, nil, "fallocate -l 65536 $F", 0o777},
		{"nobody punches a hole", "c4", 0o4777, nil, "fallocate -p -o 0 -l 4 $F", 0o777},
		{"nobody appends in the file's group", inNobodysGroup, 0o2666, nil, "printf x >> $F", 0o2666},
		{"nobody truncates", "d", 0o6777, nil, "truncate -s 1 $F", 0o777},
		{"nobody opens with O_TRUNC", "e", 0o4777, nil, ": > $F", 0o777},
		{"nobody appends to an upper file", "upper/f", 0o4777, nil, "printf x >> $F", 0o777},
		{"root appends", "g", 0o6777, func(p string) error {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString("x")
			return errors.Join(err, f.Close())
		}, "", 0o6777},
		{"root truncates", "h", 0o6777, func(p string) error { return os.Truncate(p, 1) }, "", 0o6777},
		{"root chowns", "i", 0o6755, func(p string) error { return os.Chown(p, nobody, nobody) }, "", 0o755},
		{"root chmods", "j", 0o6755, func(p string) error { return syscall.Chmod(p, 0o6711) }, "", 0o6711},
		{"root chowns a directory", "k/", 0o2775, func(p string) error { return os.Chown(p, nobody, nobody) }, "", 0o2775},
	}
	sb := newSandboxIn(t, openDir(t), Options{AllowOther: true}, func(base string) {
		for _, tt := range tests {
			if filepath.Dir(tt.file) == "upper" {
				continue
			}
			p := filepath.Join(base, tt.file)
			if tt.file[len(tt.file)-1] == '/' {
				mustNil(t, "mkdir", os.Mkdir(p, 0o755))
			} else {
				writeFile(t, p, "base data")
			}
			if tt.file == inNobodysGroup {
				mustNil(t, "chgrp", os.Chown(p, 0, nobody))
			}
			mustNil(t, "chmod", syscall.Chmod(p, tt.mode))
		}
	})
	mustNil(t, "mkdir upper", os.Mkdir(sb.path("upper"), 0o777))
	for _, tt := range tests {
		if filepath.Dir(tt.file) == "upper" {
			writeFile(t, sb.path(tt.file), "upper data")
			mustNil(t, "chmod", syscall.Chmod(sb.path(tt.file), tt.mode))
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := sb.path(tt.file)
			if got := lstat(t, p).Mode & 07777; got != tt.mode {
				t.Fatalf("before: mode %o, want %o", got, tt.mode)
			}
			if tt.asRoot != nil {
				mustNil(t, tt.name, tt.asRoot(p))
			} else if out, code := asNobody(t, "F="+p+"; "+tt.script); code != 0 {
				t.Fatalf("as nobody: %s: exit %d: %s", tt.script, code, out)
			}
			if got := lstat(t, p).Mode & 07777; got != tt.want {
				t.Errorf("mode after: %o, want %o", got, tt.want)
			}
		})
	}
	// What was dropped is stored, not only told to the kernel.
	sb.remount()
	for _, tt := range tests {
		if got := lstat(t, sb.path(tt.file)).Mode & 07777; got != tt.want {
			t.Errorf("%s: mode after remount: %o, want %o", tt.name, got, tt.want)
		}
	}
}

// inNobodysGroup is the base file of TestWritesDropPrivileges whose group
// is nobody's.
const inNobodysGroup = "grp"

// TestWritesDropCapabilities: a write, even root's, takes a file's
// capabilities away (the kernel asks for them once and removes them).
func TestWritesDropCapabilities(t *testing.T) {
	sb := newSandboxIn(t, openDir(t), Options{AllowOther: true}, func(base string) {
		writeFile(t, filepath.Join(base, "bin"), "base data")
		mustNil(t, "chmod", os.Chmod(filepath.Join(base, "bin"), 0o777))
	})
	// vfs_cap_data revision 2, effective, CAP_NET_RAW permitted.
	caps := []byte{1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for _, who := range []string{"root", "nobody"} {
		t.Run(who, func(t *testing.T) {
			p := sb.path("bin")
			mustNil(t, "set capabilities", unix.Setxattr(p, "security.capability", caps, 0))
			if _, err := unix.Getxattr(p, "security.capability", make([]byte, 64)); err != nil {
				t.Fatalf("capabilities not set: %v", err)
			}
			if who == "root" {
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
				mustNil(t, "open", err)
				_, err = f.WriteString("x")
				mustNil(t, "write", errors.Join(err, f.Close()))
			} else if out, code := asNobody(t, "printf x >> "+p); code != 0 {
				t.Fatalf("as nobody: exit %d: %s", code, out)
			}
			if _, err := unix.Getxattr(p, "security.capability", make([]byte, 64)); err != unix.ENODATA {
				t.Errorf("capabilities after a write by %s: %v, want ENODATA", who, err)
			}
		})
	}
}
