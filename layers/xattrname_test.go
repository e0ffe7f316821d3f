package layers

import "testing"

// TestXattrBareNamespace: a name that is only a namespace prefix is
// invalid for every operation, as local file systems answer (the kernel
// passes it to FUSE unchecked); a name with something after the prefix is
// fine.
func TestXattrBareNamespace(t *testing.T) {
	e := newEnv(t, 0, nil)
	v := e.view()
	defer v.Close()
	f := mkfile(t, v, RootIno, "f", "x")
	for _, name := range []string{"user.", "trusted.", "security.", "system."} {
		wantErr(t, "set "+name, v.SetXattr(f.Ino, name, []byte("1"), 0), ErrInvalid)
		wantErr(t, "remove "+name, v.SetXattr(f.Ino, name, nil, 0), ErrInvalid)
		_, err := v.GetXattr(f.Ino, name)
		wantErr(t, "get "+name, err, ErrInvalid)
	}
	ok(t, "set user.a", v.SetXattr(f.Ino, "user.a", []byte("1"), 0))
	if ls, err := v.ListXattr(f.Ino); err != nil || !sameStrings(ls, []string{"user.a"}) {
		t.Fatalf("list: %v, %v", ls, err)
	}
}
