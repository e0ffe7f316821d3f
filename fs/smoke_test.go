package fs

import (
	"os"
	"testing"
)

func TestSmoke(t *testing.T) {
	sb := newSandbox(t, func(base string) {
		writeFile(t, base+"/a.txt", "hello")
		writeFile(t, base+"/dir/b.txt", "world")
	})
	if got := readFile(t, sb.path("a.txt")); got != "hello" {
		t.Fatalf("got %q", got)
	}
	writeFile(t, sb.path("new.txt"), "new")
	writeFile(t, sb.path("a.txt"), "changed")
	if err := os.Rename(sb.path("dir"), sb.path("dir2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(sb.path("dir2/b.txt")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, sb.path("dir2/c.txt"), "c")
	sb.remount()
	if got := readFile(t, sb.path("a.txt")); got != "changed" {
		t.Fatalf("a.txt: got %q", got)
	}
	if got := readFile(t, sb.path("new.txt")); got != "new" {
		t.Fatalf("new.txt got %q", got)
	}
	if _, err := os.Stat(sb.path("dir2/b.txt")); !os.IsNotExist(err) {
		t.Fatalf("b.txt: %v", err)
	}
	if got := readFile(t, sb.path("dir2/c.txt")); got != "c" {
		t.Fatalf("c got %q", got)
	}
	if got := readFile(t, sb.base+"/a.txt"); got != "hello" {
		t.Fatalf("base changed: %q", got)
	}
}
