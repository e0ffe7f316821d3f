package layers

import (
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
	before := time.Now().UnixNano()
	nf, err := v.Mknod(RootIno, "new.txt", syscall.S_IFREG|0o644, 0, Caller{})
	ok(t, "mknod", err)
	after := time.Now().UnixNano()
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
