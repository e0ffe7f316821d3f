package fs

import (
	"runtime"
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

// A mount adds Ps for its readers, a second one more, and the runtime's
// default is back once both are gone; a GOMAXPROCS the user set is left
// as it is.
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
			want1, want2 := before, before
			if !tc.user {
				want1 = before + goFuseReaders(before)
				want2 = want1 + goFuseReaders(want1)
			}
			a := newSandbox(t, nil)
			if got := runtime.GOMAXPROCS(0); got != want1 {
				t.Fatalf("GOMAXPROCS with one mount = %d, want %d", got, want1)
			}
			b := newSandboxIn(t, t.TempDir(), Options{}, nil)
			if got := runtime.GOMAXPROCS(0); got != want2 {
				t.Fatalf("GOMAXPROCS with two mounts = %d, want %d", got, want2)
			}
			// The mounts serve while the Ps come and go.
			writeFile(t, a.path("f"), "a")
			writeFile(t, b.path("f"), "b")
			b.unmount()
			if got := runtime.GOMAXPROCS(0); got != want1 {
				t.Errorf("GOMAXPROCS after one unmount = %d, want %d", got, want1)
			}
			a.unmount()
			if got := runtime.GOMAXPROCS(0); got != before {
				t.Errorf("GOMAXPROCS after both unmounts = %d, want %d", got, before)
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
