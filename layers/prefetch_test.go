package layers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// prefetchBase is a base with a directory of files, a symlink and a
// subdirectory.
func prefetchBase(base string) {
	for _, n := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(base, n), []byte("file "+n), 0o640); err != nil {
			panic(err)
		}
	}
	if err := os.Mkdir(filepath.Join(base, "sub"), 0o750); err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(base, "sub", "deep"), []byte("deep"), 0o600); err != nil {
		panic(err)
	}
	if err := os.Symlink("a", filepath.Join(base, "link")); err != nil {
		panic(err)
	}
}

// withFetchGap runs hook in every base fetch's gap for the rest of the
// test.
func withFetchGap(t *testing.T, hook func(v *View)) {
	t.Helper()
	fetchGapHook = hook
	t.Cleanup(func() { fetchGapHook = nil })
}

// TestLookupReadsTheBaseWithoutTheLock: a lookup that must list a base
// directory or stat a base file lets go of the view while it does, so
// another request is served meanwhile (here: one that would deadlock if
// the lock were held), and answers what the base holds.
func TestLookupReadsTheBaseWithoutTheLock(t *testing.T) {
	cases := []struct {
		name   string
		before func(t *testing.T, v *View) // what the view loaded already
		dir    func(t *testing.T, v *View) uint64
		look   string
		path   string // base-relative
		target string
	}{
		{"a directory not listed yet", nil, func(*testing.T, *View) uint64 { return RootIno }, "a", "a", ""},
		{"a file of a listed directory", func(t *testing.T, v *View) { names(t, v, RootIno) },
			func(*testing.T, *View) uint64 { return RootIno }, "b", "b", ""},
		{"a symlink", nil, func(*testing.T, *View) uint64 { return RootIno }, "link", "link", "a"},
		{"a subdirectory's file", nil, func(t *testing.T, v *View) uint64 {
			return lookup(t, v, RootIno, "sub").Ino
		}, "deep", "sub/deep", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 4096, prefetchBase)
			v := e.view()
			defer v.Close()
			if c.before != nil {
				c.before(t, v)
			}
			dir := c.dir(t, v)
			gaps := 0
			withFetchGap(t, func(v *View) {
				gaps++
				done := make(chan error, 1)
				go func() {
					_, err := v.GetAttr(RootIno)
					done <- err
				}()
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("getattr during the fetch: %v", err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("a getattr waited for the lookup's base I/O")
				}
			})
			a := lookup(t, v, dir, c.look)
			if gaps == 0 {
				t.Fatal("the lookup read the base under the view's lock")
			}
			var bst syscall.Stat_t
			ok(t, "lstat", syscall.Lstat(filepath.Join(e.base, c.path), &bst))
			if a.Ino != bst.Ino || a.Mode != bst.Mode || a.Size != bst.Size || a.Mtime != bst.Mtim.Nano() || a.Nlink != uint32(bst.Nlink) {
				t.Fatalf("lookup %s: %+v, base has ino %d mode %o size %d mtime %d", c.look, a, bst.Ino, bst.Mode, bst.Size, bst.Mtim.Nano())
			}
			if c.target != "" {
				got, err := v.Readlink(a.Ino)
				ok(t, "readlink", err)
				if got != c.target {
					t.Fatalf("readlink: %q, want %q", got, c.target)
				}
			}
			// Loaded now: no more base I/O for it.
			gaps = 0
			lookup(t, v, dir, c.look)
			if gaps != 0 {
				t.Fatalf("a second lookup of %s read the base again", c.look)
			}
		})
	}
}

// TestLookupFetchLosesToNewerState: what a request changes while a lookup
// reads the base is what the lookup answers, not the base's older view.
func TestLookupFetchLosesToNewerState(t *testing.T) {
	e := newEnv(t, 4096, prefetchBase)
	v := e.view()
	defer v.Close()
	var ino uint64
	for _, d := range mustReadDir(t, v, RootIno) {
		if d.Name == "a" {
			ino = d.Ino
		}
	}
	mode := uint32(0o600)
	withFetchGap(t, func(v *View) {
		if _, err := v.SetAttr(ino, SetAttrIn{Mode: &mode}); err != nil {
			t.Errorf("chmod during the fetch: %v", err)
		}
	})
	a := lookup(t, v, RootIno, "a")
	if a.Mode&0o7777 != mode {
		t.Fatalf("lookup after a chmod made during its fetch: mode %o, want %o", a.Mode&0o7777, mode)
	}
	fetchGapHook = nil
	if got := lookup(t, v, RootIno, "a").Mode & 0o7777; got != mode {
		t.Fatalf("mode %o, want %o", got, mode)
	}
}

// TestBaseFetchAfterTheFileWent: a base file removed from the host before
// the lookup's fetch reads it is not found (as when the lock is held), and
// a listing fetched of a directory gone is empty.
func TestBaseFetchAfterTheFileWent(t *testing.T) {
	e := newEnv(t, 4096, prefetchBase)
	v := e.view()
	defer v.Close()
	names(t, v, RootIno)
	withFetchGap(t, func(*View) { os.Remove(filepath.Join(e.base, "c")) })
	if _, err := v.Lookup(RootIno, "c"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("lookup of a base file removed meanwhile: %v, want not found", err)
	}
	sub := lookup(t, v, RootIno, "sub").Ino
	withFetchGap(t, func(*View) { os.RemoveAll(filepath.Join(e.base, "sub")) })
	if got := names(t, v, sub); len(got) != 0 {
		t.Fatalf("listing of a base directory removed meanwhile: %v", got)
	}
}

// TestCloseWaitsForABaseFetch: Close does not close the base's descriptor
// under a fetch reading through it (the number could be reused), and the
// lookup then finds the view closed.
func TestCloseWaitsForABaseFetch(t *testing.T) {
	e := newEnv(t, 4096, prefetchBase)
	v := e.view()
	closed := make(chan error, 1)
	withFetchGap(t, func(v *View) {
		go func() { closed <- v.Close() }()
		select {
		case err := <-closed:
			t.Errorf("Close returned (%v) while a fetch read the base", err)
		case <-time.After(100 * time.Millisecond):
		}
	})
	if _, err := v.Lookup(RootIno, "a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("lookup across a Close: %v, want ErrClosed", err)
	}
	select {
	case err := <-closed:
		ok(t, "close", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return after the fetch")
	}
	// A closed view reads no base at all.
	fetchGapHook = func(*View) { t.Error("a closed view read the base") }
	if _, err := v.Lookup(RootIno, "b"); !errors.Is(err, ErrClosed) {
		t.Fatalf("lookup in a closed view: %v, want ErrClosed", err)
	}
	if _, err := v.ReadDir(RootIno); !errors.Is(err, ErrClosed) {
		t.Fatalf("listing in a closed view: %v, want ErrClosed", err)
	}
}

func mustReadDir(t *testing.T, v *View, dir uint64) []DirEntry {
	t.Helper()
	ents, err := v.ReadDir(dir)
	ok(t, "readdir", err)
	return ents
}

// TestBaseFetchesRaceChanges: lookups, listings and getattrs of a fresh
// view (every one of them reads the base) run while other goroutines
// chmod, rename, unlink, write and create in the same directories. Every
// answer must be one the changes could have made, and the tree after
// them, and after a restart, what they made.
func TestBaseFetchesRaceChanges(t *testing.T) {
	const dirs, files = 8, 40
	orig := func(i int) int { return i%100 + 1 }
	for round := 0; round < 3; round++ {
		t.Run(itoa(round), func(t *testing.T) {
			baseIno := map[string]uint64{}
			e := newEnv(t, 4096, func(base string) {
				for d := 0; d < dirs; d++ {
					for i := 0; i < files; i++ {
						p := filepath.Join(base, "d"+itoa(d), "f"+itoa(i))
						put(t, p, strings.Repeat("x", orig(i)))
					}
				}
			})
			for d := 0; d < dirs; d++ {
				for i := 0; i < files; i++ {
					var st syscall.Stat_t
					ok(t, "lstat", syscall.Lstat(filepath.Join(e.base, "d"+itoa(d), "f"+itoa(i)), &st))
					baseIno["d"+itoa(d)+"/f"+itoa(i)] = st.Ino
				}
			}
			v := e.view()
			var dirIno [dirs]uint64
			for d := range dirIno {
				dirIno[d] = lookup(t, v, RootIno, "d"+itoa(d)).Ino
			}
			// What file i of a directory goes through: 0 chmod 0600, 1
			// renamed to g<i>, 2 unlinked, 3 "yyyyyyy" written at 0, 4
			// nothing; and n<i> is created.
			mode600 := uint32(0o600)
			mutate := func(d int) error {
				for i := 0; i < files; i++ {
					dir := dirIno[d]
					var err error
					switch i % 5 {
					case 0:
						var a Attr
						if a, err = v.Lookup(dir, "f"+itoa(i)); err == nil {
							_, err = v.SetAttr(a.Ino, SetAttrIn{Mode: &mode600})
						}
					case 1:
						err = v.Rename(dir, "f"+itoa(i), dir, "g"+itoa(i), 0)
					case 2:
						err = v.Unlink(dir, "f"+itoa(i))
					case 3:
						var a Attr
						if a, err = v.Lookup(dir, "f"+itoa(i)); err == nil {
							_, err = v.WriteAt(a.Ino, []byte("yyyyyyy"), 0, false)
						}
					}
					if err == nil {
						_, err = v.Mknod(dir, "n"+itoa(i), 0o644, 0, root)
					}
					if err != nil {
						return fmt.Errorf("d%d file %d: %w", d, i, err)
					}
				}
				return nil
			}
			// check tells whether a lookup's answer is one the changes allow.
			check := func(d, i int, name string, a Attr, err error) error {
				if errors.Is(err, ErrNotFound) {
					return nil
				}
				if err != nil {
					return err
				}
				if name[0] == 'n' {
					if a.Size != 0 || a.Mode&0o777 != 0o644 {
						return fmt.Errorf("d%d/%s: %+v", d, name, a)
					}
					return nil
				}
				if want := baseIno["d"+itoa(d)+"/f"+itoa(i)]; a.Ino != want {
					return fmt.Errorf("d%d/%s: inode %d, want %d", d, name, a.Ino, want)
				}
				size := int64(orig(i))
				if i%5 == 3 && a.Size != size && a.Size != max(size, 7) {
					return fmt.Errorf("d%d/%s: size %d", d, name, a.Size)
				}
				if i%5 != 3 && a.Size != size {
					return fmt.Errorf("d%d/%s: size %d, want %d", d, name, a.Size, size)
				}
				if m := a.Mode & 0o777; m != 0o644 && (m != 0o600 || i%5 != 0) {
					return fmt.Errorf("d%d/%s: mode %o", d, name, m)
				}
				return nil
			}
			errs := make(chan error, 8)
			for g := 0; g < 4; g++ {
				go func() { errs <- errors.Join(mutate(2*g), mutate(2*g+1)) }()
				go func() {
					for k := 0; k < 3*dirs*files; k++ {
						d, i := (k*7+g*3)%dirs, (k*11+g)%files
						name := []string{"f", "g", "n"}[k%3] + itoa(i)
						if k%17 == 0 {
							if _, err := v.ReadDir(dirIno[d]); err != nil {
								errs <- err
								return
							}
						}
						a, err := v.Lookup(dirIno[d], name)
						if err := check(d, i, name, a, err); err != nil {
							errs <- fmt.Errorf("lookup: %w", err)
							return
						}
						if err == nil {
							a, err = v.GetAttr(a.Ino)
							if err := check(d, i, name, a, err); err != nil {
								errs <- fmt.Errorf("getattr: %w", err)
								return
							}
						}
					}
					errs <- nil
				}()
			}
			for k := 0; k < 8; k++ {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			final := func(v *View) {
				t.Helper()
				for d := 0; d < dirs; d++ {
					var want []string
					for i := 0; i < files; i++ {
						switch i % 5 {
						case 1:
							want = append(want, "g"+itoa(i))
						case 2:
						default:
							want = append(want, "f"+itoa(i))
						}
						want = append(want, "n"+itoa(i))
					}
					slices.Sort(want)
					if got := names(t, v, dirIno[d]); !sameStrings(got, want) {
						t.Fatalf("d%d: %v, want %v", d, got, want)
					}
					for _, name := range want {
						i, _ := strconv.Atoi(name[1:])
						a, err := v.Lookup(dirIno[d], name)
						ok(t, "lookup", err)
						wantMode, wantSize := uint32(0o644), int64(orig(i))
						switch {
						case name[0] == 'n':
							wantSize = 0
						case i%5 == 0:
							wantMode = 0o600
						case i%5 == 3:
							wantSize = max(wantSize, 7)
						}
						if a.Mode&0o777 != wantMode || a.Size != wantSize {
							t.Fatalf("d%d/%s: mode %o size %d, want %o and %d", d, name, a.Mode&0o777, a.Size, wantMode, wantSize)
						}
					}
				}
			}
			final(v)
			v = e.reopen(v)
			defer v.Close()
			final(v)
		})
	}
}
