package fs

import (
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestGoFuseReaders(t *testing.T) {
	for _, tc := range []struct{ procs, want int }{
		{1, 3}, {2, 3}, {4, 5}, {16, 17}, {64, 17},
	} {
		if got := goFuseReaders(tc.procs); got != tc.want {
			t.Errorf("goFuseReaders(%d) = %d, want %d", tc.procs, got, tc.want)
		}
	}
}

// Mounts add Ps for one server's readers while any of them is served,
// and the runtime's default is back once all are gone; a GOMAXPROCS the
// user set is left as it is.
func TestMountsAddProcsForTheirReaders(t *testing.T) {
	for _, tc := range []struct {
		name string
		user bool
	}{
		{"runtime default", false},
		{"set by the user", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(u bool) { userProcs = u }(userProcs)
			userProcs = tc.user
			before := runtime.GOMAXPROCS(0)
			want := before
			if !tc.user {
				want = before + goFuseReaders(before)
			}
			var sbs []*sandbox
			for i := range 3 {
				sb := newSandboxIn(t, t.TempDir(), Options{}, nil)
				sbs = append(sbs, sb)
				if got := runtime.GOMAXPROCS(0); got != want {
					t.Fatalf("GOMAXPROCS with %d mounts = %d, want %d", i+1, got, want)
				}
			}
			// The mounts serve while the Ps come and go.
			for i, sb := range sbs {
				writeFile(t, sb.path("f"), strconv.Itoa(i))
			}
			for i, sb := range sbs {
				if got := readFile(t, sb.path("f")); got != strconv.Itoa(i) {
					t.Errorf("mount %d reads %q", i, got)
				}
				sb.unmount()
				w := want
				if i == len(sbs)-1 {
					w = before
				}
				if got := runtime.GOMAXPROCS(0); got != w {
					t.Errorf("GOMAXPROCS after %d unmounts = %d, want %d", i+1, got, w)
				}
			}
		})
	}
}

// Requests yield at most once every yieldEvery, whichever goroutines
// serve them.
func TestYieldSometimes(t *testing.T) {
	lastYield.Store(0)
	if !yieldSometimes() {
		t.Fatal("the first request after a long quiet did not yield")
	}
	if yieldSometimes() {
		t.Fatal("a request right after a yield yielded again")
	}
	var yields atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Since(start) < 50*time.Millisecond {
				if yieldSometimes() {
					yields.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	// One yield per 2 ms at most (plus the one the loop may start on),
	// and at least a few: the goroutines run all the while.
	if n, most := yields.Load(), int64(time.Since(start)/yieldEvery)+1; n > most || n < 5 {
		t.Errorf("%d yields in %v, want between 5 and %d", n, time.Since(start), most)
	}
}
