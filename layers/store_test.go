package layers

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

func TestOpenCreatesLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	s, err := Open(dir)
	ok(t, "open", err)
	defer s.Close()
	if s.Dir() != dir {
		t.Fatalf("Dir: got %q, want %q", s.Dir(), dir)
	}
	if s.RunDir() != filepath.Join(dir, "run") {
		t.Fatalf("RunDir: got %q", s.RunDir())
	}
	for _, d := range []string{"", "meta", "data", "run"} {
		fi, err := os.Stat(filepath.Join(dir, d))
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%s: got %v, %v; want a 0700 directory", d, fi, err)
		}
	}
	ok(t, "sync", s.Sync())
	ok(t, "close", s.Close())
	ok(t, "second close", s.Close())
	_, err = s.OpenView("x", false)
	wantErr(t, "OpenView on a closed store", err, ErrClosed)
}

func TestOpenErrors(t *testing.T) {
	cases := []struct {
		name  string
		setup func(t *testing.T, dir string) string
	}{
		{"store path is a file", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "file")
			put(t, p, "x")
			return p
		}},
		{"lock is a directory", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "s")
			ok(t, "mkdir", os.MkdirAll(filepath.Join(p, "lock"), 0o700))
			return p
		}},
		{"corrupt metadata", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "s")
			put(t, filepath.Join(p, "meta", "MANIFEST"), "this is not a manifest")
			return p
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.setup(t, t.TempDir())
			s, err := Open(p)
			if err == nil {
				s.Close()
				t.Fatalf("Open: got no error, want one")
			}
		})
	}
}

const lockHelperEnv = "STRATA_LAYERS_LOCK_HELPER"

// TestLockHelper holds a store open for TestOpenLocked from another process.
func TestLockHelper(t *testing.T) {
	dir := os.Getenv(lockHelperEnv)
	if dir == "" {
		t.Skip("helper process for TestOpenLocked")
	}
	s, err := Open(dir)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	bufio.NewReader(os.Stdin).ReadString('\n')
	s.Close()
}

func TestOpenLocked(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	ok(t, "stdin", err)
	stdout, err := cmd.StdoutPipe()
	ok(t, "stdout", err)
	ok(t, "start helper", cmd.Start())
	defer cmd.Wait()
	defer stdin.Close()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "locked" {
		t.Fatalf("helper: got %q, %v; want \"locked\"", line, err)
	}
	s, err := Open(dir)
	if err == nil {
		s.Close()
	}
	wantErr(t, "second Open from this process", err, ErrLocked)
	stdin.Close()
	ok(t, "helper", cmd.Wait())
	s, err = Open(dir)
	ok(t, "Open after the helper exited", err)
	s.Close()
}

func TestCreateSandbox(t *testing.T) {
	e := newEnv(t, 0, nil)
	s := e.store
	info, err := s.Sandbox("sb")
	ok(t, "sandbox", err)
	if info.BlockSize != DefaultBlockSize || info.Base != e.base || info.Head == "" || info.Name != "sb" {
		t.Fatalf("got %+v, want default block size, base %s and a head", info, e.base)
	}
	l, err := s.Layer(info.Head)
	ok(t, "layer", err)
	if l.State != StateActive || l.Sandbox != "sb" || l.Parent != "" {
		t.Fatalf("head layer: got %+v, want an active layer of sb without parent", l)
	}
	stack, err := s.Stack("sb")
	ok(t, "stack", err)
	if len(stack) != 1 || stack[0] != info.Head {
		t.Fatalf("stack: got %v, want [%s]", stack, info.Head)
	}
	file := filepath.Join(e.dir, "file")
	put(t, file, "x")
	link := filepath.Join(e.dir, "baselink")
	ok(t, "symlink", os.Symlink(e.base, link))
	cases := []struct {
		name, sandbox, base string
		bs                  int
		want                error
	}{
		{"bad name", "-bad", e.base, 0, ErrInvalid},
		{"empty name", "", e.base, 0, ErrInvalid},
		{"name with slash", "a/b", e.base, 0, ErrInvalid},
		{"long name", strings.Repeat("a", 65), e.base, 0, ErrInvalid},
		{"block size not a power of two", "x", e.base, 5000, ErrInvalid},
		{"block size too small", "x", e.base, 2048, ErrInvalid},
		{"block size too large", "x", e.base, 8 << 20, ErrInvalid},
		{"missing base", "x", filepath.Join(e.dir, "nope"), 0, ErrNotFound},
		{"base is a file", "x", file, 0, ErrNotDir},
		{"base is the store", "x", s.Dir(), 0, ErrInvalid},
		{"base inside the store", "x", filepath.Join(s.Dir(), "data"), 0, ErrInvalid},
		{"base contains the store", "x", e.dir, 0, ErrInvalid},
		{"exists", "sb", e.base, 0, ErrExists},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.CreateSandbox(c.sandbox, c.base, c.bs)
			wantErr(t, "CreateSandbox", err, c.want)
		})
	}
	// A base named through a symlink is resolved once.
	info2, err := s.CreateSandbox("b.2_x", link, MinBlockSize)
	ok(t, "create through a link", err)
	if info2.Base != e.base || info2.BlockSize != MinBlockSize {
		t.Fatalf("got %+v, want base %s and block size %d", info2, e.base, MinBlockSize)
	}
	_, err = s.CreateSandbox("big", e.base, MaxBlockSize)
	ok(t, "max block size", err)
	all, err := s.Sandboxes()
	ok(t, "list", err)
	var got []string
	for _, i := range all {
		got = append(got, i.Name)
	}
	if want := []string{"b.2_x", "big", "sb"}; !sameStrings(got, want) {
		t.Fatalf("Sandboxes: got %v, want %v", got, want)
	}
	for name, want := range map[string]bool{
		"a-b.c_9": true, "A": true, "9": true, strings.Repeat("x", 64): true,
		"": false, ".hidden": false, "-x": false, "_x": false, strings.Repeat("x", 65): false,
		"a/b": false, "a b": false, "é": false, "a\x00": false, "a:b": false,
	} {
		if got := ValidName(name); got != want {
			t.Errorf("ValidName(%q) = %v, want %v", name, got, want)
		}
	}
	// The same answers as the regular expression it replaced.
	re := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	rng := rand.New(rand.NewSource(1))
	const alphabet = "aZ09._-/ \x00\n:é"
	for range 20000 {
		b := make([]byte, rng.Intn(68))
		for i := range b {
			b[i] = alphabet[rng.Intn(len(alphabet))]
		}
		if got, want := ValidName(string(b)), re.MatchString(string(b)); got != want {
			t.Fatalf("ValidName(%q) = %v, the expression says %v", b, got, want)
		}
	}
	_, err = s.Sandbox("nope")
	wantErr(t, "Sandbox of a missing name", err, ErrNotFound)
	_, err = s.Layer("nope")
	wantErr(t, "Layer of a missing id", err, ErrNotFound)
	_, err = s.Stack("nope")
	wantErr(t, "Stack of a missing sandbox", err, ErrNotFound)
	if a, b := NewID(), NewID(); len(a) != 26 || a == b {
		t.Fatalf("NewID: got %q and %q, want two distinct ULIDs", a, b)
	}
}

func TestRemoveSandbox(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/f", "base") })
	s := e.store
	v := e.view()
	_, err := s.OpenView("sb", false)
	wantErr(t, "second OpenView", err, ErrMounted)
	wantErr(t, "remove while mounted", s.RemoveSandbox("sb"), ErrMounted)
	mkfile(t, v, RootIno, "new", "data")
	ok(t, "close", v.Close())
	info, _ := s.Sandbox("sb")
	if _, err := os.Stat(s.dataPath(info.Head)); err != nil {
		t.Fatalf("data file: %v", err)
	}
	ok(t, "remove", s.RemoveSandbox("sb"))
	if _, err := os.Stat(s.dataPath(info.Head)); !os.IsNotExist(err) {
		t.Fatalf("data file after remove: got %v, want it gone", err)
	}
	_, err = s.Sandbox("sb")
	wantErr(t, "sandbox after remove", err, ErrNotFound)
	_, err = s.Layer(info.Head)
	wantErr(t, "layer after remove", err, ErrNotFound)
	wantErr(t, "remove again", s.RemoveSandbox("sb"), ErrNotFound)
	// The layer tables are gone too: a new sandbox of the same name starts empty.
	_, err = s.CreateSandbox("sb", e.base, MinBlockSize)
	ok(t, "create again", err)
	v = e.view()
	defer v.Close()
	if got := names(t, v, RootIno); !sameStrings(got, []string{"f"}) {
		t.Fatalf("recreated sandbox: got %v, want [f]", got)
	}
}

func TestRemoveSandboxKeepsSharedLayers(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	s := e.store
	v := e.view()
	mkfile(t, v, RootIno, "f", "shared")
	ok(t, "close", v.Close())
	frozen, _, err := s.Freeze("sb", func(*Txn, string, string) error { return nil })
	ok(t, "freeze", err)
	// A fork: a second sandbox whose stack continues from sb's frozen layer.
	_, err = s.CreateSandbox("fork", e.base, MinBlockSize)
	ok(t, "create fork", err)
	ok(t, "repoint fork", s.update(func(txn *badger.Txn) error {
		var info SandboxInfo
		if err := getJSON(txn, keySandbox("fork"), &info); err != nil {
			return err
		}
		var l LayerInfo
		if err := getJSON(txn, keyLayer(info.Head), &l); err != nil {
			return err
		}
		l.Parent = frozen
		return putJSON(txn, keyLayer(l.ID), l)
	}))
	ok(t, "remove fork", s.RemoveSandbox("fork"))
	if _, err := s.Layer(frozen); err != nil {
		t.Fatalf("shared layer after removing the fork: %v", err)
	}
	v = e.view()
	defer v.Close()
	if got := content(t, v, lookup(t, v, RootIno, "f").Ino); got != "shared" {
		t.Fatalf("f: got %q, want %q", got, "shared")
	}
}

func TestStackCorruption(t *testing.T) {
	e := newEnv(t, 0, nil)
	s := e.store
	info, _ := s.Sandbox("sb")
	// A layer whose parent is itself.
	ok(t, "make cycle", s.update(func(txn *badger.Txn) error {
		return putJSON(txn, keyLayer(info.Head), LayerInfo{ID: info.Head, Sandbox: "sb", Parent: info.Head, State: StateActive})
	}))
	_, err := s.Stack("sb")
	wantErr(t, "stack with a cycle", err, ErrCorrupt)
	_, err = s.OpenView("sb", false)
	wantErr(t, "view of a stack with a cycle", err, ErrCorrupt)
	// A layer record that is not JSON.
	ok(t, "corrupt", s.update(func(txn *badger.Txn) error { return txn.Set(keyLayer(info.Head), []byte("{")) }))
	_, err = s.Layer(info.Head)
	wantErr(t, "undecodable layer", err, ErrCorrupt)
	// A missing parent.
	ok(t, "dangling parent", s.update(func(txn *badger.Txn) error {
		return putJSON(txn, keyLayer(info.Head), LayerInfo{ID: info.Head, Sandbox: "sb", Parent: "gone", State: StateActive})
	}))
	_, err = s.Stack("sb")
	wantErr(t, "stack with a missing parent", err, ErrNotFound)
	// A sandbox record that is not JSON.
	ok(t, "corrupt sandbox", s.update(func(txn *badger.Txn) error { return txn.Set(keySandbox("zz"), []byte("[")) }))
	_, err = s.Sandboxes()
	wantErr(t, "list with a corrupt record", err, ErrCorrupt)
}

func TestTxnExtTables(t *testing.T) {
	e := newEnv(t, 0, nil)
	s := e.store
	ok(t, "update", s.Update(func(tx *Txn) error {
		for _, k := range []string{"x/sb/a", "x/sb/b", "x/other/c"} {
			if err := tx.Set(k, []byte("v:"+k)); err != nil {
				return err
			}
		}
		return nil
	}))
	ok(t, "view", s.View(func(tx *Txn) error {
		v, err := tx.Get("x/sb/a")
		if err != nil || string(v) != "v:x/sb/a" {
			t.Fatalf("Get: got %q, %v", v, err)
		}
		_, err = tx.Get("x/sb/none")
		wantErr(t, "Get missing", err, ErrNotFound)
		var keys []string
		if err := tx.Scan("x/sb/", func(k string, v []byte) error {
			keys = append(keys, k+"="+string(v))
			return nil
		}); err != nil {
			return err
		}
		if want := []string{"x/sb/a=v:x/sb/a", "x/sb/b=v:x/sb/b"}; !sameStrings(keys, want) {
			t.Fatalf("Scan: got %v, want %v", keys, want)
		}
		stop := errors.New("stop")
		if err := tx.Scan("x/", func(string, []byte) error { return stop }); !errors.Is(err, stop) {
			t.Fatalf("Scan stop: got %v, want %v", err, stop)
		}
		return nil
	}))
	ok(t, "delete", s.Update(func(tx *Txn) error {
		if err := tx.Delete("x/sb/a"); err != nil {
			return err
		}
		return tx.Delete("x/sb/never")
	}))
	err := s.View(func(tx *Txn) error { _, err := tx.Get("x/sb/a"); return err })
	wantErr(t, "Get deleted", err, ErrNotFound)
	for _, k := range []string{"s/sb", "l/x", "", "x"} {
		err := s.Update(func(tx *Txn) error {
			if _, err := tx.Get(k); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Get %q: got %v, want ErrInvalid", k, err)
			}
			if err := tx.Delete(k); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Delete %q: got %v, want ErrInvalid", k, err)
			}
			if err := tx.Scan(k, nil); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Scan %q: got %v, want ErrInvalid", k, err)
			}
			return tx.Set(k, nil)
		})
		wantErr(t, "Set "+k, err, ErrInvalid)
	}
	// A failing function leaves nothing behind.
	boom := errors.New("boom")
	err = s.Update(func(tx *Txn) error {
		if err := tx.Set("x/sb/tmp", []byte("1")); err != nil {
			return err
		}
		return boom
	})
	wantErr(t, "update error", err, boom)
	err = s.View(func(tx *Txn) error { _, err := tx.Get("x/sb/tmp"); return err })
	wantErr(t, "rolled back key", err, ErrNotFound)
}

func TestUpdateRetriesConflicts(t *testing.T) {
	e := newEnv(t, 0, nil)
	s := e.store
	calls := 0
	err := s.Update(func(tx *Txn) error {
		calls++
		if _, err := tx.Get("x/n"); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		if calls == 1 {
			// Another writer commits the key this transaction has read.
			if err := s.Update(func(tx2 *Txn) error { return tx2.Set("x/n", []byte("other")) }); err != nil {
				return err
			}
		}
		return tx.Set("x/n", []byte("mine"))
	})
	ok(t, "update", err)
	if calls != 2 {
		t.Fatalf("calls: got %d, want 2 (one conflict, one retry)", calls)
	}
}

func TestMapOSErr(t *testing.T) {
	cases := []struct {
		in   error
		want error
	}{
		{syscall.ENOSPC, ErrNoSpace},
		{syscall.EDQUOT, ErrNoSpace},
		{os.ErrNotExist, ErrNotFound},
		{syscall.ENOENT, ErrNotFound},
	}
	for _, c := range cases {
		if got := mapOSErr(c.in); !errors.Is(got, c.want) || !errors.Is(got, c.in) {
			t.Fatalf("mapOSErr(%v): got %v, want it to wrap %v and the cause", c.in, got, c.want)
		}
	}
	if mapOSErr(nil) != nil {
		t.Fatalf("mapOSErr(nil): got non-nil")
	}
	if got := mapOSErr(syscall.EPERM); got != syscall.EPERM {
		t.Fatalf("mapOSErr(EPERM): got %v, want it unchanged", got)
	}
}
