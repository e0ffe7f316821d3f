package layers

import (
	"fmt"
	"os"
	"testing"
)

// TestBaseFilesBounded reads many more base files than the view keeps open
// and checks the process's descriptors stay bounded and every read is right.
func TestBaseFilesBounded(t *testing.T) {
	const n = 3 * maxBaseFiles
	e := newEnv(t, MinBlockSize, func(base string) {
		for i := 0; i < n; i++ {
			put(t, fmt.Sprintf("%s/f%04d", base, i), fmt.Sprint("content ", i))
		}
	})
	v := e.view()
	defer v.Close()
	before := openFDs(t)
	for i := 0; i < n; i++ {
		a := lookup(t, v, RootIno, fmt.Sprintf("f%04d", i))
		if got, want := content(t, v, a.Ino), fmt.Sprint("content ", i); got != want {
			t.Fatalf("f%04d: got %q, want %q", i, got, want)
		}
	}
	if grew := openFDs(t) - before; grew > maxBaseFiles+8 {
		t.Fatalf("descriptors grew by %d reading %d files, want at most %d", grew, n, maxBaseFiles+8)
	}
	// The first files were closed on the way; they read again.
	a := lookup(t, v, RootIno, "f0000")
	if got := content(t, v, a.Ino); got != "content 0" {
		t.Fatalf("f0000 again: got %q", got)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
