package layers

import (
	"errors"
	"expvar"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Badger names its write-ahead logs NNNNN.mem (one per memtable, the
// active one and those not yet flushed to a table) and its value logs
// NNNNNN.vlog, numbered upwards.
const (
	walExt  = ".mem"
	vlogExt = ".vlog"
)

// syncLogHook, when set by a test, is called with each log file Sync is
// about to flush; an error it returns is that file's sync error.
var syncLogHook func(path string) error

// syncLogs flushes every badger log that may hold a committed write Sync
// must make durable. badger's own DB.Sync flushes the active memtable's
// log and the newest value log only: a write that went into a memtable
// badger has since rotated out (still waiting for its flush to a table),
// or into a value log it has since moved on from (with SyncWrites off it
// does not flush one it leaves), would be lost to a power cut after an
// fsync(2) that reported it durable.
//
// Value logs go first: a log entry points into a value log, and a pointer
// that reached the disk before its value would read as damage.
func (s *Store) syncLogs() error {
	meta := filepath.Join(s.dir, "meta")
	ents, err := os.ReadDir(meta)
	if err != nil {
		return fmt.Errorf("sync metadata: %w", err)
	}
	type vlog struct {
		n    uint64
		name string
	}
	var wals []string
	var vlogs []vlog
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, walExt):
			wals = append(wals, name)
		case strings.HasSuffix(name, vlogExt):
			if n, err := strconv.ParseUint(strings.TrimSuffix(name, vlogExt), 10, 64); err == nil {
				vlogs = append(vlogs, vlog{n, name})
			}
		}
	}
	sort.Slice(vlogs, func(i, j int) bool { return vlogs[i].n < vlogs[j].n })
	// Read before the flush: a commit that returned before it has counted
	// its value log bytes.
	written := vlogBytesWritten()
	s.logMu.Lock()
	from := s.vlogSynced
	unchanged := written >= 0 && written == s.vlogBytes
	s.logMu.Unlock()
	// Every value written since the last Sync went into the value log that
	// was newest then, or into a newer one. When badger has written no
	// value log byte since then (values under the threshold live in the
	// memtable's log), there is nothing to flush there: an fdatasync of an
	// unchanged file still costs ext4 a device flush (0.13-0.2 ms here).
	for _, l := range vlogs {
		if l.n < from || unchanged {
			continue
		}
		if err := syncLogFile(filepath.Join(meta, l.name)); err != nil {
			return err
		}
	}
	for _, name := range wals {
		if err := syncLogFile(filepath.Join(meta, name)); err != nil {
			return err
		}
	}
	s.logMu.Lock()
	if len(vlogs) > 0 {
		s.vlogSynced = max(s.vlogSynced, vlogs[len(vlogs)-1].n)
	}
	s.vlogBytes = written
	s.logMu.Unlock()
	return nil
}

// vlogBytesWritten is badger's count of the bytes it has written to value
// logs in this process, of every store (an expvar it keeps while metrics
// are on, as they are by default), or -1 when it keeps none. It only
// grows, and a store whose value logs another store's writes moved only
// flushes them once more than it needs.
func vlogBytesWritten() int64 {
	if v, ok := expvar.Get("badger_write_bytes_vlog").(*expvar.Int); ok {
		return v.Value()
	}
	return -1
}

// syncLogFile flushes one log file's data. A file badger removed meanwhile
// needs nothing: a memtable's log goes once its table is written and
// flushed, a value log once value log GC moved its values on.
func syncLogFile(path string) error {
	if err := flushLogFile(path); err != nil {
		return fmt.Errorf("sync %s: %w", filepath.Base(path), err)
	}
	return nil
}

func flushLogFile(path string) error {
	if syncLogHook != nil {
		if err := syncLogHook(path); err != nil {
			return err
		}
	}
	f, err := os.Open(path) // fdatasync needs no write access
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fdatasync(int(f.Fd()))
}
