package layers

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// recordLogSyncs makes syncLogFile report each path to the returned list
// (and fail with fail for paths it matches) until the test ends.
func recordLogSyncs(t *testing.T, fail func(path string) error) *[]string {
	t.Helper()
	var got []string
	syncLogHook = func(path string) error {
		got = append(got, filepath.Base(path))
		if fail != nil {
			return fail(path)
		}
		return nil
	}
	t.Cleanup(func() { syncLogHook = nil })
	return &got
}

// logFiles lists the meta directory's files with extension ext, in order.
func logFiles(t *testing.T, s *Store, ext string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.dir, "meta"))
	ok(t, "read meta", err)
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ext) {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestSyncFlushesEveryLog: Sync flushes every memtable log (badger's own
// Sync flushes only the active one) and the value logs written since the
// last Sync, value logs first; a Sync with nothing new flushes nothing.
func TestSyncFlushesEveryLog(t *testing.T) {
	s, err := Open(t.TempDir())
	ok(t, "open", err)
	defer s.Close()
	big := make([]byte, 4<<10) // over the value threshold: the value log
	ok(t, "write", s.Update(func(tx *Txn) error {
		if err := tx.Set("x/small", []byte("v")); err != nil {
			return err
		}
		return tx.Set("x/big", big)
	}))
	// A file that only looks like a value log is not badger's.
	junk := filepath.Join(s.dir, "meta", "junk"+vlogExt)
	ok(t, "add a stray file", os.WriteFile(junk, nil, 0o600))
	got := recordLogSyncs(t, nil)
	ok(t, "sync", s.Sync())
	ok(t, "remove the stray file", os.Remove(junk))
	wals, vlogs := logFiles(t, s, walExt), logFiles(t, s, vlogExt)
	if len(wals) == 0 || len(vlogs) == 0 {
		t.Fatalf("meta holds wals %v, value logs %v: want both", wals, vlogs)
	}
	want := append(slices.Clone(vlogs), wals...)
	if !slices.Equal(*got, want) {
		t.Fatalf("first sync flushed %v, want every value log then every log %v", *got, want)
	}

	*got = nil
	ok(t, "sync with nothing new", s.Sync())
	if len(*got) != 0 {
		t.Fatalf("a sync with nothing to cover flushed %v", *got)
	}

	// A value log badger moved on to since: the one written before it is
	// flushed too, older ones are not. A memtable's log badger rotated out
	// but has not flushed to a table yet is flushed with the active one.
	newest := vlogs[len(vlogs)-1]
	var n uint64
	_, err = fmt.Sscanf(newest, "%06d.vlog", &n)
	ok(t, "value log number", err)
	next := fmt.Sprintf("%06d%s", n+1, vlogExt)
	ok(t, "add a value log", os.WriteFile(filepath.Join(s.dir, "meta", next), nil, 0o600))
	defer os.Remove(filepath.Join(s.dir, "meta", next))
	older := fmt.Sprintf("%06d%s", n-1, vlogExt)
	ok(t, "add an older value log", os.WriteFile(filepath.Join(s.dir, "meta", older), nil, 0o600))
	defer os.Remove(filepath.Join(s.dir, "meta", older))
	rotated := "99999" + walExt
	ok(t, "add a rotated memtable log", os.WriteFile(filepath.Join(s.dir, "meta", rotated), nil, 0o600))
	defer os.Remove(filepath.Join(s.dir, "meta", rotated))
	ok(t, "write again", s.Update(func(tx *Txn) error { return tx.Set("x/big2", big) }))
	*got = nil
	ok(t, "sync after the value log moved on", s.Sync())
	want = append([]string{newest, next}, logFiles(t, s, walExt)...)
	if !slices.Equal(*got, want) || !slices.Contains(*got, rotated) {
		t.Fatalf("sync flushed %v, want %v", *got, want)
	}
}

// TestSyncSkipsUnwrittenValueLogs: a Sync after commits of values under
// the value threshold only, which badger keeps in the memtable's log,
// flushes no value log (on ext4 each flush of even an unchanged file is a
// device flush); after a value over it, the value log is flushed again.
func TestSyncSkipsUnwrittenValueLogs(t *testing.T) {
	if vlogBytesWritten() < 0 {
		t.Skip("badger keeps no count of value log writes")
	}
	s, err := Open(t.TempDir())
	ok(t, "open", err)
	defer s.Close()
	got := recordLogSyncs(t, nil)
	ok(t, "first sync", s.Sync()) // the value log's state is not known yet
	ok(t, "small write", s.Update(func(tx *Txn) error { return tx.Set("x/small", []byte("v")) }))
	*got = nil
	ok(t, "sync", s.Sync())
	for _, f := range *got {
		if strings.HasSuffix(f, vlogExt) {
			t.Fatalf("a sync after small values only flushed %v", *got)
		}
	}
	if len(*got) == 0 {
		t.Fatalf("a sync after a commit flushed nothing")
	}
	ok(t, "big write", s.Update(func(tx *Txn) error { return tx.Set("x/big", make([]byte, 4<<10)) }))
	*got = nil
	ok(t, "sync", s.Sync())
	if !slices.ContainsFunc(*got, func(f string) bool { return strings.HasSuffix(f, vlogExt) }) {
		t.Fatalf("a sync after a value over the threshold flushed %v: no value log", *got)
	}
}

// TestSyncLogErrors: a log that cannot be flushed fails Sync, which then
// counts nothing as durable: the next Sync flushes again. A log badger
// removed meanwhile needs nothing.
func TestSyncLogErrors(t *testing.T) {
	s, err := Open(t.TempDir())
	ok(t, "open", err)
	defer s.Close()
	eio := errors.New("injected I/O error")
	for _, ext := range []string{vlogExt, walExt} {
		ok(t, "write", s.Update(func(tx *Txn) error { return tx.Set("x/k", []byte("v")) }))
		recordLogSyncs(t, func(path string) error {
			if strings.HasSuffix(path, ext) {
				return eio
			}
			return nil
		})
		if err := s.Sync(); !errors.Is(err, eio) || !strings.Contains(err.Error(), ext) {
			t.Fatalf("sync with a failing %s file: %v, want its name and %v", ext, err, eio)
		}
		got := recordLogSyncs(t, nil)
		ok(t, "sync again", s.Sync())
		if !slices.ContainsFunc(*got, func(p string) bool { return strings.HasSuffix(p, ext) }) {
			t.Fatalf("the sync after one failed on a %s file flushed %v, none", ext, *got)
		}
	}

	tests := []struct {
		name    string
		path    func(dir string) string
		wantErr error
	}{
		{"removed meanwhile", func(dir string) string { return filepath.Join(dir, "00001.mem") }, nil},
		{"under a file", func(dir string) string {
			f := filepath.Join(dir, "f")
			if err := os.WriteFile(f, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(f, "00001.mem")
		}, syscall.ENOTDIR},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := syncLogFile(tc.path(t.TempDir()))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("got %v, want %v", err, tc.wantErr)
			}
		})
	}

	gone := &Store{dir: filepath.Join(t.TempDir(), "gone")}
	if err := gone.syncLogs(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("syncLogs of a store whose meta directory is gone: %v", err)
	}
}
