package fs

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// statxOf is lstat through statx(2), asking for the birth time too.
func statxOf(t *testing.T, path string) unix.Statx_t {
	t.Helper()
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &sx); err != nil {
		t.Fatalf("statx %s: %v", path, err)
	}
	return sx
}

// TestStatxBirthTime: statx through the mount tells a base file's birth
// time as the base records it and a new file's as it was made, and both
// stay across a write and a remount.
func TestStatxBirthTime(t *testing.T) {
	sb := newSandbox(t, func(base string) { writeFile(t, filepath.Join(base, "old"), "old") })
	host := statxOf(t, filepath.Join(sb.base, "old"))
	if host.Mask&unix.STATX_BTIME == 0 {
		t.Skip("the base's file system records no birth time")
	}
	// Files are stamped by the coarse clock, as on ext4 (layers.stamp).
	before := coarseClock(t)
	writeFile(t, sb.path("new"), "new")
	after := coarseClock(t)
	check := func(when string) {
		t.Helper()
		old, nf := statxOf(t, sb.path("old")), statxOf(t, sb.path("new"))
		if old.Mask&unix.STATX_BTIME == 0 || old.Btime != host.Btime {
			t.Errorf("%s: base file birth time %+v (mask %#x), want the base's %+v", when, old.Btime, old.Mask, host.Btime)
		}
		born := time.Unix(nf.Btime.Sec, int64(nf.Btime.Nsec))
		if nf.Mask&unix.STATX_BTIME == 0 || born.Before(before) || born.After(after) {
			t.Errorf("%s: new file birth time %v (mask %#x), want within [%v, %v]", when, born, nf.Mask, before, after)
		}
	}
	check("after creating")
	writeFile(t, sb.path("old"), "changed")
	check("after a copy-up")
	sb.remount()
	check("after a remount")
}

// TestTimesBefore1970: a time before the epoch with a fraction of a
// second reads back as set (the nanoseconds stay within a second).
func TestTimesBefore1970(t *testing.T) {
	sb := newSandbox(t, nil)
	p := sb.path("old")
	writeFile(t, p, "x")
	want := unix.NsecToTimespec(-1_500_000_000) // 1969-12-31 23:59:58.5
	mustNil(t, "utimensat", unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{want, want}, 0))
	for _, when := range []string{"set", "after a remount"} {
		st := lstat(t, p)
		if st.Mtim != want || st.Atim != want {
			t.Errorf("%s: mtime %+v atime %+v, want %+v", when, st.Mtim, st.Atim, want)
		}
		sx := statxOf(t, p)
		if sx.Mtime.Sec != want.Sec || int64(sx.Mtime.Nsec) != want.Nsec {
			t.Errorf("%s: statx mtime %+v, want %+v", when, sx.Mtime, want)
		}
		sb.remount()
	}
}

// coarseClock reads CLOCK_REALTIME_COARSE, the clock changes are stamped by.
func coarseClock(t *testing.T) time.Time {
	t.Helper()
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &ts); err != nil {
		t.Fatal(err)
	}
	return time.Unix(ts.Sec, ts.Nsec)
}

// TestTimesOutOfRangeClamp: times past 2262 or before 1677, set through
// the mount or found on a base file, read back as the nearest time the
// sandbox holds, as a local file system clamps to its range (xfstests
// generic/402); they used to wrap around (2300 read back as 1715).
func TestTimesOutOfRangeClamp(t *testing.T) {
	y2300 := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	sb := newSandbox(t, func(base string) {
		writeFile(t, filepath.Join(base, "future"), "x")
		// Not os.Chtimes: it goes through time.UnixNano, which wraps.
		ts := []unix.Timespec{{Sec: y2300.Unix()}, {Sec: y2300.Unix()}}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(base, "future"), ts, 0); err != nil {
			t.Fatal(err)
		}
	})
	maxT := time.Unix(0, math.MaxInt64)
	minT := time.Unix(0, math.MinInt64)
	writeFile(t, sb.path("late"), "x")
	writeFile(t, sb.path("early"), "x")
	set := func(name string, sec int64) {
		t.Helper()
		ts := []unix.Timespec{{Sec: sec}, {Sec: sec}}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, sb.path(name), ts, 0); err != nil {
			t.Fatalf("utimensat %s to %d: %v", name, sec, err)
		}
	}
	set("late", y2300.Unix())
	set("early", time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC).Unix())
	for _, when := range []string{"live", "after remount"} {
		if when != "live" {
			sb.remount()
		}
		for _, c := range []struct {
			name string
			want time.Time
		}{{"late", maxT}, {"early", minT}, {"future", maxT}} {
			var st unix.Stat_t
			if err := unix.Stat(sb.path(c.name), &st); err != nil {
				t.Fatal(err)
			}
			for what, ts := range map[string]unix.Timespec{"atime": st.Atim, "mtime": st.Mtim} {
				if got := time.Unix(ts.Sec, ts.Nsec); !got.Equal(c.want) {
					t.Errorf("%s: %s %s = %v, want %v", when, c.name, what, got.UTC(), c.want.UTC())
				}
			}
		}
	}
}
