package layers

import (
	"math"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestBirthTime: a base file shows the birth time its file system
// records, a new inode the time it was made; a copy-up, later changes and
// a restart keep both.
func TestBirthTime(t *testing.T) {
	e := newEnv(t, MinBlockSize, func(base string) { put(t, base+"/old.txt", "old") })
	var sx unix.Statx_t
	ok(t, "statx base", unix.Statx(unix.AT_FDCWD, filepath.Join(e.base, "old.txt"), unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &sx))
	var baseBirth int64
	if sx.Mask&unix.STATX_BTIME != 0 {
		baseBirth = sx.Btime.Sec*1e9 + int64(sx.Btime.Nsec)
	}
	v := e.view()
	old := lookup(t, v, RootIno, "old.txt")
	if old.Btime != baseBirth {
		t.Errorf("base file: birth time %d, want the base's %d", old.Btime, baseBirth)
	}
	// The coarse clock, which files are stamped with (as on ext4).
	before := coarseNow()
	nf, err := v.Mknod(RootIno, "new.txt", syscall.S_IFREG|0o644, 0, Caller{})
	ok(t, "mknod", err)
	after := coarseNow()
	if nf.Btime < before || nf.Btime > after {
		t.Errorf("new file: birth time %d, not within [%d, %d]", nf.Btime, before, after)
	}
	// A copy-up and later changes keep it.
	_, err = v.WriteAt(old.Ino, []byte("changed"), 0, false)
	ok(t, "write base file", err)
	_, err = v.WriteAt(nf.Ino, []byte("data"), 0, false)
	ok(t, "write new file", err)
	mt := int64(5e9)
	_, err = v.SetAttr(nf.Ino, SetAttrIn{Mtime: &mt})
	ok(t, "utimes", err)
	v = e.reopen(v)
	defer v.Close()
	for _, c := range []struct {
		name string
		want int64
	}{{"old.txt", baseBirth}, {"new.txt", nf.Btime}} {
		if got := lookup(t, v, RootIno, c.name).Btime; got != c.want {
			t.Errorf("%s after changes and a restart: birth time %d, want %d", c.name, got, c.want)
		}
	}
}

// TestStampsFollowTheCoarseClock: changes are stamped with the coarse
// clock, so a program reading CLOCK_REALTIME_COARSE before and after a
// change (LTP's statx06) finds the change's times between the two; a
// second change within the same tick still moves ctime and mtime on.
func TestStampsFollowTheCoarseClock(t *testing.T) {
	e := newEnv(t, MinBlockSize, nil)
	v := e.view()
	defer v.Close()
	within := func(what string, got, lo, hi int64) {
		t.Helper()
		if got < lo || got > hi {
			t.Errorf("%s: %d, not within the coarse clock's [%d, %d]", what, got, lo, hi)
		}
	}
	// No time passes between a change and the reading after it: a stamp
	// from the fine clock would be ahead of the coarse clock then.
	before := coarseNow()
	f := mkfile(t, v, RootIno, "f", "")
	after := coarseNow()
	within("birth time", f.Btime, before, after)
	within("mtime of the new file", f.Mtime, before, after)
	root, err := v.GetAttr(RootIno)
	ok(t, "getattr /", err)
	within("mtime of its directory", root.Mtime, before, after)

	// A change in a later tick than the last one is stamped by the coarse
	// clock again.
	for coarseNow() <= f.Ctime {
		time.Sleep(time.Millisecond)
	}
	before = coarseNow()
	attr := func() Attr {
		t.Helper()
		a, err := v.GetAttr(f.Ino)
		ok(t, "getattr", err)
		return a
	}
	_, err = v.WriteAt(f.Ino, []byte("y"), 0, false)
	ok(t, "write", err)
	a := attr()
	after = coarseNow()
	within("mtime after a write", a.Mtime, before, after)
	within("ctime after a write", a.Ctime, before, after)

	// Changes in quick succession: each moves the times on.
	prev := a
	for i := 0; i < 20; i++ {
		_, err := v.WriteAt(f.Ino, []byte{byte(i)}, 0, false)
		ok(t, "write", err)
		got := attr()
		if got.Ctime <= prev.Ctime || got.Mtime <= prev.Mtime {
			t.Fatalf("write %d: ctime %d mtime %d, not after %d and %d", i, got.Ctime, got.Mtime, prev.Ctime, prev.Mtime)
		}
		prev = got
	}
	mode := uint32(0o600)
	got, err := v.SetAttr(f.Ino, SetAttrIn{Mode: &mode})
	ok(t, "chmod", err)
	if got.Ctime <= prev.Ctime {
		t.Fatalf("chmod right after writes: ctime %d, not after %d", got.Ctime, prev.Ctime)
	}
}

// TestNanoOfClamps: times outside what int64 nanoseconds hold are clamped
// to the nearest end, never wrapped around (touch -d 2300 read back as
// 1715 before); times inside are exact.
func TestNanoOfClamps(t *testing.T) {
	for _, c := range []struct {
		name      string
		sec, nsec int64
		want      int64
	}{
		{"epoch", 0, 0, 0},
		{"before 1970", -1, 500_000_000, -500_000_000},
		{"a negative fraction", 1, -1, 999_999_999},
		{"a fraction of a second over", 1, 1_500_000_000, 2_500_000_000},
		{"the last one", MaxTimeSec, 854_775_807, math.MaxInt64},
		{"a nanosecond after it", MaxTimeSec, 854_775_808, math.MaxInt64},
		{"2300", 10413792000, 0, math.MaxInt64},
		{"the end of int64 seconds", math.MaxInt64, 999_999_999, math.MaxInt64},
		{"the first one", MinTimeSec, 145_224_192, math.MinInt64},
		{"a nanosecond before it", MinTimeSec, 145_224_191, math.MinInt64},
		{"1600", -11676096000, 0, math.MinInt64},
		{"the start of int64 seconds", math.MinInt64, 0, math.MinInt64},
		{"2262, inside", MaxTimeSec, 0, MaxTimeSec * 1_000_000_000},
	} {
		if got := NanoOf(c.sec, c.nsec); got != c.want {
			t.Errorf("%s: NanoOf(%d, %d) = %d, want %d", c.name, c.sec, c.nsec, got, c.want)
		}
	}
}

// TestStampMovesOn: a stamp is the coarse clock when that is after the
// last ctime, else the fine clock, else (a ctime in the future, as a
// clock set back leaves) one nanosecond after the last ctime.
func TestStampMovesOn(t *testing.T) {
	if got, now := stamp(0), coarseNow(); got <= 0 || got > now {
		t.Errorf("stamp(0) = %d, want the coarse clock (now %d)", got, now)
	}
	c := coarseNow()
	if got := stamp(c); got <= c {
		t.Errorf("stamp(%d) = %d, want later", c, got)
	}
	future := time.Now().Add(time.Hour).UnixNano()
	if got := stamp(future); got != future+1 {
		t.Errorf("stamp of a ctime an hour ahead = %d, want %d", got, future+1)
	}
}
