package checkpoint

// Hard links and checkpoints: a file reached through several names hashes
// alike through each, and a file whose recorded name went away still has
// a path in diffs.

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/strata-sandbox/strata/layers"
	"golang.org/x/sys/unix"
)

// A base file with two names fingerprints by the name it is reached
// through, so the incremental state hash and verify's full walk disagree.
func TestVerifyWithHardLinksInTheBase(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	if err := os.MkdirAll(filepath.Join(base, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "a", "g"), make([]byte, 100000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(base, "a", "g"), filepath.Join(base, "z")); err != nil {
		t.Fatal(err)
	}
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateSandbox("s", base, 0); err != nil {
		t.Fatal(err)
	}
	m := New(st, nil)
	v, err := st.OpenView("s", false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if _, err := m.Create("s", Options{}); err != nil {
		t.Fatal(err)
	}
	z, err := v.Lookup(layers.RootIno, "z")
	if err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o600)
	if _, err := v.SetAttr(z.Ino, layers.SetAttrIn{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	cp, err := m.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := m.Verify(cp.ID); err != nil || !res.OK {
		t.Fatalf("verify: got %+v %v, want OK", res, err)
	}
}

// link a/f b/g; rm b/g; rmdir b: the file keeps a/f, but its recorded
// parent is b, so diffs fail to find its path (and a rollback's report of
// changed paths comes out empty, the error dropped).
func TestDiffAfterTheDirOfALinkIsRemoved(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateSandbox("s", base, 0); err != nil {
		t.Fatal(err)
	}
	m := New(st, nil)
	v, err := st.OpenView("s", false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	cp0, err := m.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := layers.Caller{}
	a, err := v.Mkdir(layers.RootIno, "a", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.Mkdir(layers.RootIno, "b", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.Mknod(a.Ino, "f", unix.S_IFREG|0o644, 0, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Link(f.Ino, b.Ino, "g"); err != nil {
		t.Fatal(err)
	}
	if err := v.Unlink(b.Ino, "g"); err != nil {
		t.Fatal(err)
	}
	if err := v.Rmdir(layers.RootIno, "b"); err != nil {
		t.Fatal(err)
	}
	d, err := m.DiffCheckpoints(cp0.ID, "")
	if err != nil {
		t.Fatalf("diff against the live state: %v", err)
	}
	if len(d.Added) != 2 || d.Added[0] != "a" || d.Added[1] != "a/f" {
		t.Fatalf("diff: added %v, want [a a/f]", d.Added)
	}
}

// A rollback to a state where a file's recorded name is gone (its other
// name stayed) lists the file among the changed paths by that other name;
// the error used to be dropped and the list come out empty.
func TestRollbackListsAFileWhoseRecordedNameWentAway(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.CreateSandbox("s", base, 0); err != nil {
		t.Fatal(err)
	}
	m := New(st, nil)
	v, err := st.OpenView("s", false)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	c := layers.Caller{}
	a, err := v.Mkdir(layers.RootIno, "a", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.Mkdir(layers.RootIno, "b", 0o755, c)
	if err != nil {
		t.Fatal(err)
	}
	f, err := v.Mknod(a.Ino, "f", unix.S_IFREG|0o644, 0, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Link(f.Ino, b.Ino, "g"); err != nil {
		t.Fatal(err)
	}
	if err := v.Unlink(b.Ino, "g"); err != nil {
		t.Fatal(err)
	}
	if err := v.Rmdir(layers.RootIno, "b"); err != nil {
		t.Fatal(err)
	}
	cp, err := m.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.WriteAt(f.Ino, []byte("changed after the checkpoint"), 0, false); err != nil {
		t.Fatal(err)
	}
	res, err := m.Rollback("s", cp.ID)
	if err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if len(res.ChangedPaths) != 1 || res.ChangedPaths[0] != "a/f" {
		t.Fatalf("rollback: changed %v, want [a/f]", res.ChangedPaths)
	}
}
