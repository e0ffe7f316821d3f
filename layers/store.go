package layers

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/dgraph-io/badger/v4"
	"github.com/oklog/ulid/v2"
)

// DefaultBlockSize is the block size of a new sandbox when none is given.
// 64 KiB: a 4 KiB write into a large base file copies up at most 64 KiB, and
// one block is one FUSE write at the kernel's default max_write, so a
// sequential writer fills whole blocks without read-modify-write. See
// docs/design.md for the measurement.
const DefaultBlockSize = 64 << 10

// MinBlockSize and MaxBlockSize bound a sandbox's block size; it must be a
// power of two between them, so that per-page checksums tile a block.
const (
	MinBlockSize = 4 << 10
	MaxBlockSize = 4 << 20
	pageSize     = 4 << 10
)

// Layer states.
const (
	StateActive   = "active"
	StateFrozen   = "frozen"
	StateArchived = "archived"
)

// SandboxInfo describes one sandbox: where it starts from and which layer
// is on top of its stack (its head).
type SandboxInfo struct {
	Name      string    `json:"name"`
	Base      string    `json:"base"`
	BlockSize int       `json:"block_size"`
	Head      string    `json:"head"`
	Created   time.Time `json:"created"`
	// BaseChanged is when a plan apply last wrote onto Base (NoteBaseChanged):
	// a state recorded before it lies over base content that is gone.
	BaseChanged time.Time `json:"base_changed,omitzero"`
}

// LayerInfo describes one layer: the sandbox that created it, the layer
// below it ("" for the base) and whether it is still written.
type LayerInfo struct {
	ID      string    `json:"id"`
	Sandbox string    `json:"sandbox"`
	Parent  string    `json:"parent"`
	State   string    `json:"state"`
	Created time.Time `json:"created"`
}

// Store is one directory holding the metadata of every sandbox (badger, in
// meta/), the block data of every layer (data/) and the control sockets
// (run/). Exactly one process opens a store at a time; it holds an flock on
// the store's lock file for as long as it is open.
type Store struct {
	dir   string
	db    *badger.DB
	lockf *os.File
	seq   *inoSeq

	mu     sync.Mutex // protects views, snaps and closed
	views  map[string]*View
	snaps  map[*View]struct{} // open snapshots (OpenSnapshot)
	closed bool

	dedupMu sync.Mutex // one dedup pass at a time (dedup.go)

	deltas  deltaCache  // what frozen layers changed (LayerDelta)
	keySets keySetCache // which keys frozen layers hold (View.lacks)

	// commits counts the metadata writes that returned; synced is the
	// count the last successful Sync covered. A Sync with nothing new to
	// cover returns at once: it flushes badger's logs whether or not they
	// changed, device flushes an fsync(2) of an unchanged file would
	// otherwise pay.
	commits atomic.Uint64
	synced  atomic.Uint64

	// reads counts the read transactions views began (View.viewIfHeld
	// is judged by the ones it spares).
	reads atomic.Uint64

	// spaceOKUntil is when a checkSpace that found the reserve far away
	// stops being trusted (UnixNano).
	spaceOKUntil atomic.Int64

	// noRewrite, while above zero, keeps writes from rewriting sealed
	// blocks in place (PauseRewrites).
	noRewrite atomic.Int32

	logMu      sync.Mutex
	vlogSynced uint64 // the newest value log when a Sync last flushed the logs (logsync.go)
	// vlogBytes is badger's count of bytes written to value logs when a
	// Sync last flushed them (-1: not known); logsync.go.
	vlogBytes int64
}

// ValidName reports whether s may name a sandbox: 1 to 64 ASCII letters,
// digits, '.', '_' or '-', the first a letter or a digit. (Checked by
// hand: the regular expression it was, compiled at init, cost every
// strata command's start 866 allocations and 0.15 ms.)
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// Open opens the store in dir, creating it if needed. It fails with
// ErrLocked when another process has the store open.
func Open(dir string) (*Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", dir, err)
	}
	for _, d := range []string{abs, filepath.Join(abs, "meta"), filepath.Join(abs, "data"), filepath.Join(abs, "run"), filepath.Join(abs, "spare")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("store %s: %w", abs, mapOSErr(err))
		}
	}
	// An existing store keeps its owner-only mode even if created by hand.
	if err := os.Chmod(abs, 0o700); err != nil {
		return nil, fmt.Errorf("store %s: %w", abs, err)
	}
	lockf, err := os.OpenFile(filepath.Join(abs, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", abs, mapOSErr(err))
	}
	if err := syscall.Flock(int(lockf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lockf.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("store %s: %w", abs, ErrLocked)
		}
		return nil, fmt.Errorf("store %s: lock: %w", abs, err)
	}
	opts := badger.DefaultOptions(filepath.Join(abs, "meta")).
		WithLogger(nil).
		WithSyncWrites(false).
		WithMemTableSize(32 << 20).
		WithValueLogFileSize(64 << 20).
		WithNumVersionsToKeep(1).
		WithBlockCacheSize(32 << 20).
		WithIndexCacheSize(16 << 20).
		WithValueThreshold(1 << 10)
	db, err := badger.Open(opts)
	if err != nil {
		lockf.Close()
		return nil, fmt.Errorf("store %s: open metadata: %w", abs, mapOSErr(err))
	}
	// What the intent logs of mounted sandboxes hold goes in first (with
	// the store's own log flush): the inode lease may move past the
	// numbers they hold.
	if err := (&Store{dir: abs, db: db, vlogBytes: -1}).recoverWALs(); err != nil {
		db.Close()
		lockf.Close()
		return nil, fmt.Errorf("store %s: %w", abs, err)
	}
	seq, err := openInoSeq(db)
	if err != nil {
		db.Close()
		lockf.Close()
		return nil, fmt.Errorf("store %s: inode sequence: %w", abs, err)
	}
	// Spare data files a process that held the store left behind.
	if ents, err := os.ReadDir(filepath.Join(abs, "spare")); err == nil {
		for _, e := range ents {
			os.Remove(filepath.Join(abs, "spare", e.Name()))
		}
	}
	st := &Store{dir: abs, db: db, lockf: lockf, seq: seq, views: map[string]*View{}, snaps: map[*View]struct{}{}, vlogBytes: -1}
	// What badger replayed from a log a crash left unflushed is not
	// known to be durable: the first Sync flushes whatever the count says.
	st.commits.Store(1)
	return st, nil
}

// Dir is the store's absolute directory.
func (s *Store) Dir() string { return s.dir }

// RunDir is the directory for the store's control sockets (mode 0700).
func (s *Store) RunDir() string { return filepath.Join(s.dir, "run") }

// Close closes every open view, then the metadata store, then releases the lock.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	views := make([]*View, 0, len(s.views))
	for _, v := range s.views {
		views = append(views, v)
	}
	s.mu.Unlock()
	var first error
	for _, v := range views {
		if err := v.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	if err := s.seq.Release(); err != nil && first == nil {
		first = err
	}
	if err := s.db.Close(); err != nil && first == nil {
		first = err
	}
	s.lockf.Close()
	return first
}

// update runs fn in one read-write transaction, retrying on conflict. The
// transaction is always discarded, so fn must not keep it.
func (s *Store) update(fn func(txn *badger.Txn) error) error {
	for attempt := 0; ; attempt++ {
		txn := s.db.NewTransaction(true)
		err := fn(txn)
		if err == nil {
			err = txn.Commit()
		}
		txn.Discard()
		if err == nil {
			s.commits.Add(1)
		}
		if errors.Is(err, badger.ErrConflict) && attempt < 10 {
			continue
		}
		return mapOSErr(err)
	}
}

// view runs fn in one read-only transaction.
func (s *Store) view(fn func(txn *badger.Txn) error) error {
	s.reads.Add(1)
	return mapOSErr(s.db.View(fn))
}

// Sync makes every committed metadata change durable.
func (s *Store) Sync() error {
	// A write counts once its commit returned, so it is in badger's log
	// before gen is read and the flush below covers it.
	gen := s.commits.Load()
	if s.synced.Load() >= gen {
		return nil
	}
	if err := s.syncLogs(); err != nil {
		return mapOSErr(err)
	}
	for {
		cur := s.synced.Load()
		if cur >= gen || s.synced.CompareAndSwap(cur, gen) {
			return nil
		}
	}
}

// Update runs fn in one read-write transaction of the store's metadata; the
// packages built on layers (checkpoints, plans) keep their own tables
// through it, under keys beginning with "x/".
func (s *Store) Update(fn func(tx *Txn) error) error {
	return s.update(func(txn *badger.Txn) error { return fn(&Txn{txn: txn, s: s}) })
}

// View runs fn in one read-only transaction of the store's metadata.
func (s *Store) View(fn func(tx *Txn) error) error {
	return s.view(func(txn *badger.Txn) error { return fn(&Txn{txn: txn, s: s}) })
}

// NewID returns a new ULID, the id format of layers, checkpoints and plans.
// Ids made by one process increase strictly, even within a millisecond, so
// sorting by id is sorting by creation.
func NewID() string {
	idMu.Lock()
	defer idMu.Unlock()
	return ulid.MustNew(ulid.Timestamp(time.Now()), idEntropy).String()
}

var (
	idMu      sync.Mutex // protects idEntropy
	idEntropy = ulid.Monotonic(rand.Reader, 0)
)

func (s *Store) nextIno() (uint64, error) {
	n, err := s.seq.Next()
	if err != nil {
		return 0, fmt.Errorf("allocate inode: %w", err)
	}
	// Upper inodes live above every number a host file system hands out, so
	// they never collide with base inode numbers.
	return upperInoBase + n, nil
}

const upperInoBase = 1 << 62

// decodeItem decodes a record's value in place, without copying it out of
// badger's buffers.
func decodeItem[T any](item *badger.Item, decode func([]byte) (T, error)) (T, error) {
	var v T
	err := item.Value(func(b []byte) error {
		var err error
		v, err = decode(b)
		return err
	})
	return v, err
}

func getJSON(txn dbTxn, key []byte, v any) error {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return item.Value(func(b []byte) error {
		if err := json.Unmarshal(b, v); err != nil {
			return fmt.Errorf("%s: %v: %w", key, err, ErrCorrupt)
		}
		return nil
	})
}

func putJSON(txn dbTxn, key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return txn.Set(key, b)
}

// CreateSandbox records a new sandbox over the host directory base with an
// empty active layer. base must be an existing directory outside the store.
func (s *Store) CreateSandbox(name, base string, blockSize int) (SandboxInfo, error) {
	if !ValidName(name) {
		return SandboxInfo{}, fmt.Errorf("sandbox name %q: want 1-64 letters, digits, '.', '_' or '-': %w", name, ErrInvalid)
	}
	if blockSize == 0 {
		blockSize = DefaultBlockSize
	}
	if blockSize < MinBlockSize || blockSize > MaxBlockSize || blockSize&(blockSize-1) != 0 {
		return SandboxInfo{}, fmt.Errorf("block size %d: want a power of two from %d to %d: %w", blockSize, MinBlockSize, MaxBlockSize, ErrInvalid)
	}
	abs, err := filepath.Abs(base)
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("base %s: %w", base, err)
	}
	// The base is named by the user, so resolving its own symlinks is fine;
	// links inside it are never followed.
	abs, err = filepath.EvalSymlinks(abs)
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("base %s: %w", base, mapOSErr(err))
	}
	// The record is JSON, which would turn the bytes of an invalid UTF-8
	// path into U+FFFD: the sandbox would open another directory.
	if !utf8.ValidString(abs) {
		return SandboxInfo{}, fmt.Errorf("base %q: the path is not valid UTF-8: %w", base, ErrInvalid)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("base %s: %w", base, mapOSErr(err))
	}
	if !st.IsDir() {
		return SandboxInfo{}, fmt.Errorf("base %s: %w", base, ErrNotDir)
	}
	if rel, err := filepath.Rel(s.dir, abs); err == nil && (rel == "." || !filepath.IsAbs(rel) && len(rel) >= 2 && rel[:2] != "..") {
		return SandboxInfo{}, fmt.Errorf("base %s is inside the store: %w", base, ErrInvalid)
	}
	if rel, err := filepath.Rel(abs, s.dir); err == nil && rel != ".." && (len(rel) < 3 || rel[:3] != "../") {
		return SandboxInfo{}, fmt.Errorf("base %s contains the store: %w", base, ErrInvalid)
	}
	now := time.Now().UTC()
	info := SandboxInfo{Name: name, Base: abs, BlockSize: blockSize, Head: NewID(), Created: now}
	layer := LayerInfo{ID: info.Head, Sandbox: name, State: StateActive, Created: now}
	err = s.update(func(txn *badger.Txn) error {
		var old SandboxInfo
		if err := getJSON(txn, keySandbox(name), &old); err == nil {
			return fmt.Errorf("sandbox %s: %w", name, ErrExists)
		} else if !errors.Is(err, ErrNotFound) {
			return err
		}
		if err := putJSON(txn, keySandbox(name), info); err != nil {
			return err
		}
		return putJSON(txn, keyLayer(layer.ID), layer)
	})
	if err != nil {
		return SandboxInfo{}, err
	}
	return info, nil
}

// Sandbox returns the named sandbox.
func (s *Store) Sandbox(name string) (SandboxInfo, error) {
	var info SandboxInfo
	err := s.view(func(txn *badger.Txn) error { return getJSON(txn, keySandbox(name), &info) })
	if err != nil {
		return SandboxInfo{}, fmt.Errorf("sandbox %s: %w", name, err)
	}
	return info, nil
}

// Sandboxes lists every sandbox, sorted by name.
func (s *Store) Sandboxes() ([]SandboxInfo, error) {
	if err := s.fault("sandboxes", ""); err != nil {
		return nil, err
	}
	var out []SandboxInfo
	err := s.view(func(txn *badger.Txn) error {
		var err error
		out, err = sandboxesIn(txn)
		return err
	})
	return out, err
}

// sandboxesIn lists every sandbox txn sees, sorted by name.
func sandboxesIn(txn dbTxn) ([]SandboxInfo, error) {
	var out []SandboxInfo
	it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tSandbox, '/'}, PrefetchValues: true})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		var info SandboxInfo
		if err := it.Item().Value(func(b []byte) error { return json.Unmarshal(b, &info) }); err != nil {
			return out, fmt.Errorf("%s: %v: %w", it.Item().Key(), err, ErrCorrupt)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Layer returns the layer with the given id.
func (s *Store) Layer(id string) (LayerInfo, error) {
	var l LayerInfo
	err := s.view(func(txn *badger.Txn) error { return getJSON(txn, keyLayer(id), &l) })
	if err != nil {
		return LayerInfo{}, fmt.Errorf("layer %s: %w", id, err)
	}
	return l, nil
}

// Stack returns the layer ids of a sandbox's stack, top (active) first.
func (s *Store) Stack(name string) ([]string, error) {
	if err := s.fault("stack", name); err != nil {
		return nil, err
	}
	var stack []string
	err := s.view(func(txn *badger.Txn) error {
		var err error
		stack, err = stackOf(txn, name)
		return err
	})
	return stack, err
}

func stackOf(txn dbTxn, name string) ([]string, error) {
	var info SandboxInfo
	if err := getJSON(txn, keySandbox(name), &info); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", name, err)
	}
	return chainOf(txn, info.Head)
}

func chainOf(txn dbTxn, top string) ([]string, error) {
	infos, err := chainInfos(txn, top)
	if err != nil {
		return nil, err
	}
	return layerIDs(infos), nil
}

// chainInfos is chainOf with the records of the layers, top first.
func chainInfos(txn dbTxn, top string) ([]LayerInfo, error) {
	var stack []LayerInfo
	seen := map[string]bool{}
	for id := top; id != ""; {
		if seen[id] {
			return nil, fmt.Errorf("layer %s: parent cycle: %w", id, ErrCorrupt)
		}
		seen[id] = true
		var l LayerInfo
		if err := getJSON(txn, keyLayer(id), &l); err != nil {
			return nil, fmt.Errorf("layer %s: %w", id, err)
		}
		stack = append(stack, l)
		id = l.Parent
	}
	return stack, nil
}

// chainTo reads the layer records of the chain from top down to target:
// with onChain, the last is target's; otherwise target is not on it (or
// is "") and the whole chain was read.
func chainTo(txn dbTxn, top, target string) (chain []LayerInfo, onChain bool, err error) {
	seen := map[string]bool{}
	for id := top; id != ""; {
		if seen[id] {
			return nil, false, fmt.Errorf("layer %s: parent cycle: %w", id, ErrCorrupt)
		}
		seen[id] = true
		var l LayerInfo
		if err := getJSON(txn, keyLayer(id), &l); err != nil {
			return nil, false, fmt.Errorf("layer %s: %w", id, err)
		}
		chain = append(chain, l)
		if id == target {
			return chain, true, nil
		}
		id = l.Parent
	}
	return chain, false, nil
}

func layerIDs(infos []LayerInfo) []string {
	ids := make([]string, len(infos))
	for i, l := range infos {
		ids[i] = l.ID
	}
	return ids
}

// RemoveSandbox deletes a sandbox's record; CollectGarbage then removes the
// layers no other sandbox, fork or pin still needs. It fails with
// ErrMounted while the sandbox has a live view.
func (s *Store) RemoveSandbox(name string) error {
	s.mu.Lock()
	if _, ok := s.views[name]; ok {
		s.mu.Unlock()
		return fmt.Errorf("sandbox %s: %w", name, ErrMounted)
	}
	s.mu.Unlock()
	err := s.update(func(txn *badger.Txn) error {
		var info SandboxInfo
		if err := getJSON(txn, keySandbox(name), &info); err != nil {
			return fmt.Errorf("sandbox %s: %w", name, err)
		}
		// Pins owned by the sandbox's checkpoints and archives go with it.
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tPin, '/'}})
		var keys [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().KeyCopy(nil)
			rest := string(k[2:])
			if i := strings.IndexByte(rest, '/'); i > 0 && strings.HasPrefix(rest[i+1:], name+"/") {
				keys = append(keys, k)
			}
		}
		it.Close()
		for _, k := range keys {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		if err := txn.Delete(keyWal(name)); err != nil {
			return err
		}
		return txn.Delete(keySandbox(name))
	})
	if err != nil {
		return err
	}
	// After the record: a log left without its sandbox (this failed, a
	// crash) is removed when the store opens.
	_ = os.Remove(s.walPath(name))
	_, err = s.CollectGarbage()
	return err
}

// dropStepHook, when set by a test, is called before each step of a
// layer's drop (the table's type byte, 0 for the data file, 'd' for the
// mark); an error it returns stops the drop there, as a crash would.
var dropStepHook func(id string, step byte) error

// dropLayerData deletes every key of a layer's tables and its data file,
// then the layer's drop mark (CollectGarbage), if it has one.
func (s *Store) dropLayerData(id string) error {
	s.deltas.forget(id)
	s.keySets.forget(id)
	step := func(b byte) error {
		if dropStepHook != nil {
			return dropStepHook(id, b)
		}
		return nil
	}
	for _, t := range []byte{tInode, tEntry, tBlock, tPunch, tHash, tHashed, tKept, tReclaimed} {
		if err := step(t); err != nil {
			return err
		}
		if err := s.deletePrefix(prefixLayerTable(t, id)); err != nil {
			return err
		}
	}
	if err := step(0); err != nil {
		return err
	}
	if err := os.Remove(s.dataPath(id)); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := step(tDrop); err != nil {
		return err
	}
	return s.update(func(txn *badger.Txn) error { return txn.Delete(keyDrop(id)) })
}

// deleteBatch is how many keys deletePrefix deletes in one batch.
var deleteBatch = 10000

// deletePrefix deletes every key under prefix, in batches of ordinary
// writes. Not with badger's DropPrefix: that blocks every write to the
// store while it runs, and the journals of the other sandboxes' mounts,
// their new inodes and their fsyncs failed meanwhile ("Writes are
// blocked"), which applications saw as EIO.
func (s *Store) deletePrefix(prefix []byte) error {
	batch := deleteBatch
	for {
		var keys [][]byte
		err := s.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < batch; it.Next() {
				keys = append(keys, it.Item().KeyCopy(nil))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return err
		}
		wb := s.db.NewWriteBatch()
		for _, k := range keys {
			if err := wb.Delete(k); err != nil {
				wb.Cancel()
				return err
			}
		}
		if err := wb.Flush(); err != nil {
			return err
		}
		s.commits.Add(1)
	}
}

func (s *Store) dataPath(layer string) string { return filepath.Join(s.dir, "data", layer) }

// sparePath names a spare data file: made empty ahead of time, it becomes
// the data file of the next active layer by a rename, because creating a
// file can cost as much as a whole checkpoint (about 1 ms on ext4).
func (s *Store) sparePath(id string) string { return filepath.Join(s.dir, "spare", id) }

// checkSpace fails with ErrNoSpace when the store's file system has less
// free space than the reserve kept for metadata. Badger writes its journal
// and tables through memory maps of sparse files, and a write
// into a mapped page the file system cannot back kills the process with
// SIGBUS instead of failing with ENOSPC. So the operations that grow the
// store (data writes, new inodes, links, xattrs) stop at the reserve,
// while those that free space (unlink, truncate) and the small metadata
// of checkpoints and rollbacks may use it.
//
// Every data write and new inode asks, so a check that found more than
// spaceSlack beyond the reserve is trusted for spaceTrust: filling that
// much in so short a time takes 20 GB/s, and the statfs(2) it saves was a
// system call on every 4 KiB write.
func (s *Store) checkSpace() error {
	now := time.Now().UnixNano()
	if now < s.spaceOKUntil.Load() {
		return nil
	}
	var fs syscall.Statfs_t
	if err := syscall.Fstatfs(int(s.lockf.Fd()), &fs); err != nil {
		return nil // nothing to go by; the writes report ENOSPC themselves
	}
	total, free := fs.Blocks*uint64(fs.Bsize), fs.Bavail*uint64(fs.Bsize)
	// Badger's memtable journal (32 MiB) plus the table it is flushed to.
	reserve := metaReserve(total)
	if free < reserve {
		return fmt.Errorf("%w: %d bytes free, the rest is kept for metadata", ErrNoSpace, free)
	}
	if free-reserve > spaceSlack {
		s.spaceOKUntil.Store(now + int64(spaceTrust))
	}
	return nil
}

// metaReserve is the free space checkSpace keeps for the metadata store
// on a file system of total bytes: badger's memtable journal (32 MiB)
// plus the table it is flushed to, or a quarter of a small file system.
func metaReserve(total uint64) uint64 { return min(96<<20, total/4) }

// spaceSlack and spaceTrust: see checkSpace.
const (
	spaceSlack = 1 << 30
	spaceTrust = 50 * time.Millisecond
)

// mapOSErr turns the errors of the host into this package's sentinels where
// callers need to tell them apart.
func mapOSErr(err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, badger.ErrDBClosed):
		return fmt.Errorf("%w: %w", ErrClosed, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
