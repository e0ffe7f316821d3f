package layers

import (
	"path/filepath"
	"syscall"
	"testing"
)

// TestRenameWhiteout: renameat2's RENAME_WHITEOUT moves the entry and
// leaves at the old name a character device 0:0 owned by the caller, for
// files and directories from the base or a layer, and it outlives a
// restart. A refused rename changes nothing.
func TestRenameWhiteout(t *testing.T) {
	alice := Caller{UID: 1000, GID: 1001}
	tests := []struct {
		name    string
		src     func(t *testing.T, v *View) // makes "src" in the root if the base has none
		content string                      // of src and later of dst ("" for a directory)
	}{
		{"base file", nil, "from the base"},
		{"layer file", func(t *testing.T, v *View) { mkfile(t, v, RootIno, "src", "from a layer") }, "from a layer"},
		{"base directory", nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, MinBlockSize, func(base string) {
				switch tc.name {
				case "base file":
					put(t, filepath.Join(base, "src"), tc.content)
				case "base directory":
					put(t, filepath.Join(base, "src", "inner"), "inner")
				}
			})
			v := e.view()
			if tc.src != nil {
				tc.src(t, v)
			}
			moved := lookup(t, v, RootIno, "src")
			ok(t, "rename", v.RenameWhiteoutAs(RootIno, "src", RootIno, "dst", RenameWhiteout|RenameNoReplace, alice))
			check := func(when string) {
				t.Helper()
				wh := lookup(t, v, RootIno, "src")
				if wh.Mode != syscall.S_IFCHR || wh.Rdev != 0 || wh.UID != alice.UID || wh.GID != alice.GID || wh.Nlink != 1 {
					t.Fatalf("%s: whiteout %+v, want a character device 0:0 of mode 0 owned by %+v", when, wh, alice)
				}
				dst := lookup(t, v, RootIno, "dst")
				if dst.Ino != moved.Ino {
					t.Fatalf("%s: dst is inode %d, want the moved %d", when, dst.Ino, moved.Ino)
				}
				if tc.content != "" {
					if got := content(t, v, dst.Ino); got != tc.content {
						t.Fatalf("%s: dst holds %q, want %q", when, got, tc.content)
					}
				} else if got := names(t, v, dst.Ino); !sameStrings(got, []string{"inner"}) {
					t.Fatalf("%s: dst lists %v", when, got)
				}
			}
			check("after the rename")
			v = e.reopen(v)
			check("after a restart")
		})
	}

	t.Run("in a set-group-ID directory", func(t *testing.T) {
		e := newEnv(t, MinBlockSize, nil)
		v := e.view()
		d := mkdir(t, v, RootIno, "shared")
		mode, gid := uint32(syscall.S_IFDIR|syscall.S_ISGID|0o775), uint32(2000)
		_, err := v.SetAttr(d.Ino, SetAttrIn{Mode: &mode, GID: &gid})
		ok(t, "make the directory set-group-ID", err)
		mkfile(t, v, d.Ino, "f", "f")
		ok(t, "rename", v.RenameWhiteoutAs(d.Ino, "f", d.Ino, "g", RenameWhiteout, alice))
		if wh := lookup(t, v, d.Ino, "f"); wh.UID != alice.UID || wh.GID != gid || wh.Mode != syscall.S_IFCHR {
			t.Fatalf("whiteout %+v, want uid %d, the directory's gid %d, mode %#o", wh, alice.UID, gid, syscall.S_IFCHR)
		}
	})

	t.Run("refused", func(t *testing.T) {
		e := newEnv(t, MinBlockSize, func(base string) {
			put(t, filepath.Join(base, "a"), "a")
			put(t, filepath.Join(base, "b"), "b")
		})
		v := e.view()
		wantErr(t, "onto an existing name with RENAME_NOREPLACE",
			v.RenameWhiteoutAs(RootIno, "a", RootIno, "b", RenameWhiteout|RenameNoReplace, alice), ErrExists)
		wantErr(t, "with RENAME_EXCHANGE",
			v.RenameWhiteoutAs(RootIno, "a", RootIno, "b", RenameWhiteout|RenameExchange, alice), ErrInvalid)
		if got := names(t, v, RootIno); !sameStrings(got, []string{"a", "b"}) {
			t.Fatalf("after refused renames the root lists %v", got)
		}
		if got := content(t, v, lookup(t, v, RootIno, "a").Ino); got != "a" {
			t.Fatalf("a holds %q", got)
		}
	})
}
