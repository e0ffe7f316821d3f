package layers

import (
	"cmp"
	"container/list"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// RootIno is the inode number of a sandbox's root directory.
const RootIno = 1

// Attr is what stat shows for one inode of the merged view.
type Attr struct {
	Ino                 uint64
	Mode                uint32
	Nlink               uint32
	UID, GID            uint32
	Rdev                uint64
	Size                int64
	Blocks              int64 // 512-byte units
	Atime, Mtime, Ctime int64 // nanoseconds
	Btime               int64 // nanoseconds; 0: not known
}

// IsDir reports whether the attributes are a directory's.
func (a Attr) IsDir() bool { return a.Mode&syscall.S_IFMT == syscall.S_IFDIR }

// DirEntry is one name in a merged directory listing.
type DirEntry struct {
	Name string
	Ino  uint64
	Mode uint32 // S_IF* type bits
}

// Caller is who asks for a new inode: it becomes the owner.
type Caller struct {
	UID, GID uint32
	// Umask, when HasUmask is set, is the caller's umask, not yet applied
	// to the mode of what it creates: the view applies it unless the
	// directory's default ACL stands in for it, as POSIX asks. Without
	// it the mode is taken as already masked.
	Umask    uint32
	HasUmask bool
}

// SetAttrIn says which attributes SetAttr changes; nil fields stay.
type SetAttrIn struct {
	Mode         *uint32
	UID, GID     *uint32
	Size         *int64
	Atime, Mtime *int64 // nanoseconds
	// KillSuidgid drops set-user-ID, and set-group-ID where the group may
	// execute or the caller is outside the file's group (InGroup), from a
	// file that is not a directory, as the kernel does on
	// a truncate by a caller without CAP_FSETID and on a chown; a FUSE
	// server that negotiated HANDLE_KILLPRIV_V2 does it itself. A Mode
	// given too wins.
	KillSuidgid bool
	// InGroup tells whether the caller is in a group, for KillSuidgid (nil:
	// in every one).
	InGroup func(gid uint32) bool
}

// Rename flags, as renameat2 takes them. RenameWhiteout leaves, in the
// old name's place, a whiteout: a character device 0:0 owned by the
// caller (RenameWhiteoutAs), as ext4 makes it for overlayfs.
const (
	RenameNoReplace = 1 << 0
	RenameExchange  = 1 << 1
	RenameWhiteout  = 1 << 2
)

// castagnoli is the CRC-32C table of block checksums, made on first use:
// made at init it cost every strata command's start about 0.2 ms (the
// package's init went from 0.38-0.42 to 0.18-0.22 ms, GODEBUG=inittrace=1),
// and most commands never checksum anything.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// inodeState is the merged, in-memory truth about one inode while a view
// is open: its record, where its blocks are, and what is not yet stored.
type inodeState struct {
	ino      uint64
	rec      *Inode
	inActive bool // rec belongs to (is stored in) the active layer
	tmp      bool // made by Tmpfile and not linked yet: Link may name it

	blocksLoaded bool
	active       map[uint64]*blockRef // blocks written in the active layer
	frozen       map[uint64]frozenRef // visible blocks of the frozen layers
	baseLimit    int64                // base data shows only below this offset

	// bsize and bmtime are the size and modification time the base file
	// had when the record was built from it (bknown): with its inode number
	// name the base's content in fingerprints without another lstat.
	bsize, bmtime int64
	bknown        bool
	// pureBase: no layer records the inode, so its blocks are the base
	// file's and bblocks, the base's st_blocks, is what it occupies.
	pureBase bool
	bblocks  int64
	// bblocksKnown: bblocks holds the base file's st_blocks for a file
	// a layer records too (statAttrLocked).
	bblocksKnown bool
	// allocData and allocBase are what statAttrLocked counted of the
	// block map (bytes of the layers' data pages, and of the base's pages
	// the file still reads, before the cap by bblocks), while allocKnown:
	// a change of the map or its pages clears it, unless the change
	// keeps the counts itself (allocTrack).
	allocData, allocBase int64
	allocKnown           bool
	purged               bool // its records and blocks left the active layer (purge)
	// bornIn is the active layer the inode was created in: while that
	// layer is still the active one, no layer below can hold it (inode
	// numbers are never used twice), and removing it asks no lower layer.
	bornIn string

	dirtyRec    bool
	dirtyBlocks map[uint64]struct{}
	baseFile    *baseHandle
	baseElem    *list.Element     // in View.baseLRU while baseFile is open
	baseXattrs  map[string][]byte // the base file's attributes, once read
}

type frozenRef struct {
	layer string
	ref   blockRef
}

// dirState is the merged listing of one directory.
type dirState struct {
	entries map[string]entry // visible names
	below   map[string]bool  // names visible in the frozen layers or the base
}

type kv struct {
	key, val []byte
	del      bool
}

// View is the live, merged state of one sandbox: the active layer over its
// frozen layers over the base. Every file operation of a mount goes through
// it. It is safe for concurrent use.
//
// The view keeps what it has read in memory and is the authority while it
// is open; changes reach badger through an ordered journal, committed in the
// background a few milliseconds later, so that a crash leaves a prefix of
// the operations. Sync (fsync) waits for the journal and makes it durable.
type View struct {
	s    *Store
	info SandboxInfo
	ro   bool
	bs   int64
	base *baseDir

	// ioMu: data writes hold it shared while they copy into slots; sealing
	// and truncation hold it exclusively so no write lands in a block while
	// its checksums are computed. Lock order: ioMu, then mu, then jmu.
	ioMu sync.RWMutex

	// baseIO is held shared by base I/O made without mu
	// (fetchUnlocked), exclusively by Close to close the base.
	baseIO sync.RWMutex

	// mu protects every field below it.
	mu    sync.Mutex
	stack []string      // layer ids, active first
	epoch atomic.Uint64 // changed under mu; read without it (every handle I/O)
	// onRepoint is told, under mu, what each repoint touched (OnRepoint).
	onRepoint func(*Touched)
	// fetched is base I/O the operation holding mu made without it.
	fetched *baseFetch
	inodes  map[uint64]*inodeState
	// zombies are inodes with no name left and no open file, that the
	// kernel may still hold (an open directory, a cwd): they answer
	// getattr with no links until the kernel forgets them, and are never
	// reloaded from a store their deletion may not have reached yet.
	zombies map[uint64]*inodeState
	gone    map[uint64]uint64 // forgotten zombies -> journal position their deletion needs
	dirs    map[uint64]*dirState
	baseLRU *list.List        // inodes with an open base file, most recent first
	origins map[uint64]string // base inode number -> base-relative path
	bparent map[uint64]uint64 // base inode number -> the directory that listed it
	opens   map[uint64]int
	dirty   map[uint64]*inodeState
	// writing counts the data writes between taking their slots and
	// marking their pages; overlapped is set when two overlap, and a
	// write that overlapped another leaves its pages' checksums to the
	// seal (pageSums).
	writing    int
	overlapped bool
	files      map[string]*os.File // data file of each layer in the stack
	// tmps holds the open tmpfiles not linked yet: a freeze carries them
	// over (viewOnlyLocked) without a walk of every cached inode.
	tmps map[uint64]*inodeState
	// present are frozen layers whose data file was found, so that a
	// fingerprint, which needs only their checksums, looks for each once
	// (layerPresent), not once per checkpoint.
	present  map[string]bool
	nextPage uint64     // the first page of the active layer's data file no slot holds
	freed    []slotSpan // slots of the active layer no block uses any more
	// punchable are freed slots of the active layer whose freeing is
	// durable: the journal loop gives their space back, so an fsync(2)
	// does not wait for the hole punching.
	punchable []slotSpan
	// moved are slots of the active layer a write moved its block out
	// of (a copy-up of a sealed block, a slot grown): freed, and kept for
	// reuse once that is durable, where freed slots are punched.
	moved []slotSpan
	// reuse are moved slots whose freeing is durable and that no reader
	// can be in (Sync took them under ioMu): a copy-up takes one before
	// growing the data file (takeSlotLocked). At most reuseMaxPages;
	// they are punched once the writer pauses (idleSync) and when the
	// view leaves the layer.
	reuse      []slotSpan
	reusePages uint64
	punchReq   chan struct{}
	punchSoon  bool // a punch-hole freed slots: the next Sync punches them itself
	// removed: a removal, truncate or punch freed slots since the journal
	// loop last looked; it syncs soon so that df shows the space again
	// (slots a write superseded wait for the 5 s sync: a write that syncs
	// seals, and sealing makes the next writes copy).
	removed bool
	// dataGen counts writes to the active layer's data file (and new
	// data files); dataSynced is the count the last finished fdatasync
	// covered. Every write takes its slot from writableSlotLocked (or
	// grows the file in reserveSlotsLocked) under mu, and a Sync reads
	// the count under ioMu and mu, when every write before it has reached
	// the file. A Sync skips the fdatasync only when one that covered its
	// count has finished: one still running does not count, or the
	// records a Sync commits could reach the disk before the data.
	dataGen, dataSynced uint64
	// changes counts the changes to the tree (markRec, markBlock and every
	// queued operation), so that a delta computed while the view was
	// idle (idleDelta, under mu) is used only when nothing changed since.
	changes   atomic.Uint64
	idleDelta *idleDelta

	pre      *preImages
	closed   bool
	snapshot bool // opened by OpenSnapshot: no journal loop, not registered

	cmu sync.Mutex // serialises journal commits, so they land in order
	// wal is the intent log of a read-write view (wal.go), under cmu;
	// nil when it could not be opened. walSeq is the number of the last
	// commit of the journal, walSynced the number up to which the data
	// of the log's records is synced in the data files, walData the last
	// record that carried data, and walUnlogd the store's commit count
	// after the last commit of the view's records that has no record (a
	// freeze's, a repoint's): the log serves a Sync only once that is
	// durable.
	wal                                   *walLog
	walSeq, walSynced, walData, walUnlogd atomic.Uint64
	walOn                                 atomic.Bool   // wal.usable, read without cmu
	fullSyncs                             atomic.Uint64 // Syncs that synced the data file and badger's log
	loggedQuiesces                        atomic.Uint64 // checkpoints and rollbacks through the intent log
	// sealedNow are the slots the last seal sealed (sealLocked), with
	// their blocks: a Sync through the intent log writes their pages
	// into it.
	sealedNow []sealedSlot
	// reopen (under mu) registers the sealed slots of the active layer
	// that a write may rewrite in place, by block (rewrite.go);
	// reopenAside is the register the last seal took, and sealGen counts
	// seals. rewrites counts slots reopened.
	reopen      map[reopenKey]uint64
	reopenAside map[reopenKey]uint64
	sealGen     uint64
	rewrites    atomic.Uint64
	// sealedData (under jmu) is the data of seals through the intent log
	// whose operations no commit has taken yet, in order.
	sealedData []sealedData
	jmu        sync.Mutex // protects pending, jerr, dataErr, jqueued, jdone and holds
	pending    [][]kv     // the last len(pending) operations queued, in order
	jerr       error
	// dataErr is the data sync that failed (syncData): no record is
	// committed from then on.
	dataErr error
	// dsMu serialises the data syncs of the view's files (syncData,
	// syncLazy).
	dsMu sync.Mutex
	// lazy (under lzMu) are duplicates of the descriptors of data files
	// of layers the view left by a checkpoint or rollback through the
	// intent log, whose data the log holds and the next full sync syncs
	// (syncLazy), before it says so in the mark.
	lzMu    sync.Mutex
	lazy    []*os.File
	jqueued uint64 // operations queued so far
	jdone   uint64 // operations committed so far
	// loggedUpTo and loggedSeq (under jmu): the pending operations up to
	// number loggedUpTo are in durable records of the intent log, the
	// last of them record loggedSeq, and not committed yet (Fsync left
	// them to the journal loop). 0: none.
	loggedUpTo, loggedSeq uint64
	// holds are the numbers of the first operations of seals whose data
	// is being synced: no commit takes an operation from the earliest on,
	// since sealed blocks' records must not reach the store's log, which
	// any sync of any sandbox may flush, before their data is durable.
	holds []uint64
	// fullHolds are the holds of seals whose data is neither registered
	// for the intent log (sealedData) nor synced yet: a commit through
	// the log must not take their operations (syncLogged).
	fullHolds map[uint64]int
	kick      chan struct{}
	written   atomic.Bool // data was written since the last writeback
	// spareReq asks the journal loop for spare data files; spares (under
	// mu) are those made, open, oldest first. ready is the
	// spare that became a new active layer's data file, which the
	// restack onto that layer takes (readyLayer names it) without
	// opening it again.
	spareReq   chan struct{}
	spares     []spareFile
	ready      *os.File
	readyLayer string
	stop       chan struct{}
	stopped    chan struct{}
}

// OpenView opens the live view of a sandbox. Only one view per sandbox may
// be open: a second fails with ErrMounted.
func (s *Store) OpenView(name string, readOnly bool) (*View, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if _, ok := s.views[name]; ok {
		return nil, fmt.Errorf("sandbox %s: %w", name, ErrMounted)
	}
	var info SandboxInfo
	var stack []string
	err := s.view(func(txn *badger.Txn) error {
		if err := getJSON(txn, keySandbox(name), &info); err != nil {
			return fmt.Errorf("sandbox %s: %w", name, err)
		}
		var err error
		stack, err = chainOf(txn, info.Head)
		return err
	})
	if err != nil {
		return nil, err
	}
	base, err := openBase(info.Base)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", name, err)
	}
	v := &View{
		s: s, info: info, ro: readOnly, bs: int64(info.BlockSize), base: base,
		origins:  map[uint64]string{RootIno: ""},
		bparent:  map[uint64]uint64{},
		opens:    map[uint64]int{},
		kick:     make(chan struct{}, 1),
		spareReq: make(chan struct{}, 1),
		punchReq: make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	if err := v.setStackLocked(stack); err != nil {
		base.close()
		return nil, err
	}
	if !readOnly {
		empty, err := s.layerEmpty(stack[0])
		if err != nil {
			for _, f := range v.files {
				f.Close()
			}
			base.close()
			return nil, err
		}
		v.pre.complete = empty
		v.spareReq <- struct{}{}
		_ = v.openWAL() // without it, every Sync is a full one
	}
	s.views[name] = v
	go v.loop()
	return v, nil
}

// Info returns the sandbox the view shows.
func (v *View) Info() SandboxInfo { return v.info }

// BlockSize is the sandbox's block size in bytes.
func (v *View) BlockSize() int64 { return v.bs }

// ReadOnly reports whether the view refuses changes.
func (v *View) ReadOnly() bool { return v.ro }

// Epoch counts how often the view's stack was replaced (rollback, restore).
// File handles remember the epoch they were opened in.
func (v *View) Epoch() uint64 {
	return v.epoch.Load()
}

// OnRepoint registers fn, which every repoint of the view (a rollback, a
// restore) calls with what it touched, or nil when it cannot tell, before
// any operation sees the new state: fn runs under the view's lock, so it
// must only take note. A mount uses it to give the files a rollback
// touched new kernel inodes before anyone can open them again.
func (v *View) OnRepoint(fn func(*Touched)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.onRepoint = fn
}

// setStackLocked points the view at a new stack and forgets every cached
// fact that depended on the old one.
func (v *View) setStackLocked(stack []string) error { return v.restackLocked(stack, nil) }

// changedKeys are the inodes and directories whose state may differ
// between a view's old stack and its new one: those the layers one stack
// has and the other lacks record. Everything else the view cached holds
// over the new stack too, so a checkpoint or rollback need not cost a
// reload of the whole working set.
type changedKeys struct {
	inodes map[uint64]bool
	// dirs holds, for each directory, the names whose entries changed.
	dirs map[uint64]map[string]struct{}
}

func newChangedKeys(inodes int) *changedKeys {
	return &changedKeys{inodes: make(map[uint64]bool, inodes), dirs: map[uint64]map[string]struct{}{}}
}

// restackLocked is setStackLocked keeping, when changed is not nil, the
// cached inodes and listings it does not name. An inode kept was read
// from a layer both stacks share or from the base (the active layer,
// being new or sealed and named in changed, holds nothing of it), so its
// record, block map and base handle stay right.
func (v *View) restackLocked(stack []string, changed *changedKeys) error {
	if len(stack) == 0 && !v.snapshot {
		return fmt.Errorf("empty stack: %w", ErrCorrupt)
	}
	if changed != nil {
		for ino := range changed.inodes {
			delete(v.inodes, ino)
			delete(v.dirs, ino)
		}
		for ino := range changed.dirs {
			delete(v.dirs, ino)
		}
	} else {
		v.inodes = map[uint64]*inodeState{}
		v.dirs = map[uint64]*dirState{}
	}
	// What is open and no longer needed goes: the data files of the old
	// stack, and the base files of inodes not kept (only those the list
	// holds, not a walk of every cached inode). They are closed off the
	// caller's path: a checkpoint or rollback need not wait for a hundred
	// close(2)s. No read uses them (the caller holds ioMu or the view is
	// new).
	var closing []*os.File
	for id, f := range v.files {
		closing = append(closing, f)
		delete(v.files, id)
	}
	lru := list.New()
	if v.baseLRU != nil {
		for e := v.baseLRU.Front(); e != nil; e = e.Next() {
			st := e.Value.(*inodeState)
			if v.inodes[st.ino] == st {
				st.baseElem = lru.PushBack(st)
				continue
			}
			bh := st.baseFile
			st.baseFile, st.baseElem = nil, nil
			bh.evicted = true
			if bh.refs == 0 {
				closing = append(closing, bh.f)
			}
		}
	}
	if len(closing) > 0 {
		go func() {
			for _, f := range closing {
				f.Close()
			}
		}()
	}
	v.baseLRU = lru
	v.freed, v.moved, v.punchable, v.punchSoon = nil, nil, nil, false
	v.reuse, v.reusePages = nil, 0
	v.stack = stack
	v.zombies = map[uint64]*inodeState{}
	v.gone = map[uint64]uint64{}
	v.dirty = map[uint64]*inodeState{}
	v.files = map[string]*os.File{}
	v.nextPage = 0
	v.dataGen++ // a new active data file: the next Sync syncs it
	// Callers that know the new active layer is empty say so (complete).
	v.pre = newPreImages(false)
	if len(stack) == 0 {
		return nil // the base alone
	}
	flags := os.O_RDWR | os.O_CREATE
	if v.ro {
		flags = os.O_RDONLY
	}
	ready, readyLayer := v.ready, v.readyLayer
	v.ready, v.readyLayer = nil, ""
	if ready != nil && readyLayer != stack[0] {
		ready.Close()
		ready = nil
	}
	if ready != nil {
		v.files[stack[0]] = ready // a spare: empty, slots start at page 0
		return nil
	}
	f, err := os.OpenFile(v.s.dataPath(stack[0]), flags, 0o600)
	if err != nil && !(v.ro && os.IsNotExist(err)) {
		return fmt.Errorf("layer %s data: %w", stack[0], mapOSErr(err))
	}
	v.nextPage = 0
	if f != nil {
		v.files[stack[0]] = f
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		// From the next block boundary on: a whole slot handed out last,
		// into which nothing was written past its first pages, ends there.
		v.nextPage = uint64((fi.Size()+v.bs-1)/v.bs) * uint64(v.bs/pageSize)
	}
	return nil
}

func (v *View) activeLayer() string { return v.stack[0] }

// Close flushes everything to the store and releases the view.
func (v *View) Close() error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil
	}
	v.mu.Unlock()
	// The log takes no more Syncs: the full one below then covers the
	// data of every record, and the mark closeWAL stores can say so.
	v.cmu.Lock()
	if v.wal != nil {
		v.wal.usable, v.wal.closing = false, true
	}
	v.walOn.Store(false)
	v.cmu.Unlock()
	err := v.sync(false, false)
	if cerr := v.closeWAL(err == nil); err == nil {
		err = cerr
	}
	if !v.snapshot {
		close(v.stop)
	}
	<-v.stopped
	v.punchPending()
	v.mu.Lock()
	if len(v.reuse) > 0 && len(v.stack) > 0 {
		// Nothing is written any more: the slots kept for reuse go too.
		v.punchLocked(v.files[v.activeLayer()], v.reuse)
		v.reuse, v.reusePages = nil, 0
	}
	v.closed = true
	for _, sp := range v.spares {
		sp.f.Close()
		os.Remove(sp.path)
	}
	v.spares = nil
	if v.ready != nil {
		v.ready.Close()
		v.ready = nil
	}
	for _, f := range v.files {
		f.Close()
	}
	v.lzMu.Lock()
	for _, f := range v.lazy { // the sync above failed: the log keeps their data
		f.Close()
	}
	v.lazy = nil
	v.lzMu.Unlock()
	for _, st := range v.inodes {
		v.closeBaseLocked(st)
	}
	v.mu.Unlock()
	v.baseIO.Lock()
	v.base.close()
	v.baseIO.Unlock()
	v.s.mu.Lock()
	if v.snapshot {
		delete(v.s.snaps, v)
	} else {
		delete(v.s.views, v.info.Name)
	}
	v.s.mu.Unlock()
	return err
}

// movedOn tells whether data file f is no longer the active layer's: a
// freeze, a rollback or Close took it, and synced it before closing it.
func (v *View) movedOn(f *os.File) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.closed || len(v.stack) == 0 || v.files[v.activeLayer()] != f
}

// syncGapHook, when a test sets it, runs in Sync between the seal, which
// lets go of the view's locks, and the data's fdatasync.
var syncGapHook func(v *View)

// journalDelay is how long the journal waits for more operations before
// it commits.
const journalDelay = 2 * time.Millisecond

func (v *View) loop() {
	defer close(v.stopped)
	// Spare data files are made apart from the journal: creating a file
	// can take a millisecond (ext4 skips recently freed inodes), and a
	// checkpoint that finds no spare creates its data file itself, on its
	// own critical path. Behind a busy journal the spare was missing for
	// every other checkpoint of a benchmark's steady edits.
	spares := make(chan struct{})
	go func() {
		defer close(spares)
		for {
			select {
			case <-v.stop:
				return
			case <-v.spareReq:
				v.makeSpare()
			}
		}
	}()
	defer func() { <-spares }()
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	// idle fires once the sandbox has had no change for idleSync; a burst
	// of writes or operations pushes it back (each burst kicks the loop
	// once).
	idle := time.NewTimer(idleSyncDelay())
	idle.Stop()
	defer idle.Stop()
	// freeing is armed while slots a removal, truncate or punch freed
	// wait for the durable sync that lets them be punched: df shows the
	// space again within freeDelay, not at the next tick (xfstests
	// generic/315 compares df before and after, and the harness starts
	// it within 50 ms of the previous test's cleanup).
	var freeing <-chan time.Time
	for {
		select {
		case <-v.stop:
			return
		case <-v.kick:
			// Let a burst of operations gather, so one transaction carries
			// many of them; a crash loses at most this much more.
			select {
			case <-time.After(journalDelay):
			case <-v.stop:
			}
			v.commitQuietly()
			v.writeback()
			if v.takeRemoved() && freeing == nil {
				freeing = time.After(freeDelay)
			}
			idle.Reset(idleSyncDelay())
		case <-idle.C:
			// The writer paused (an agent between two tool calls): what
			// it wrote is sealed and made durable now, and what the layer
			// changed is told, so a checkpoint taken next finds nothing
			// left to seal, sync, journal or compare.
			if idleSyncHook != nil {
				idleSyncHook(v)
			}
			if v.loopSync() == nil {
				v.keepIdleDelta()
			}
			v.punchPending()
			if !keepReuseWhenIdle {
				v.punchReuse()
			}
		case <-freeing:
			freeing = nil
			_ = v.loopSync()
			v.punchPending()
		case <-v.punchReq:
			v.punchPending()
		case <-t.C:
			// Bound how much written data a crash can lose. The blocks'
			// records may reach the disk only after their data (Sync
			// orders it): a record naming a slot whose data a power cut
			// lost would read as damage, not as the older content.
			_ = v.loopSync()
			v.punchPending()
		}
	}
}

// freeDelay is how long freed slots wait for a sync before the journal
// loop makes one to punch them.
const freeDelay = 20 * time.Millisecond

// idleSync is how long a view waits, after the last burst of changes,
// before it seals and syncs them and tells the active layer's delta. A
// checkpoint then costs its own records, one small commit and one log
// flush (docs/design.md, "Idle sync"). Agents take a checkpoint after a
// pause (the model's turn), rarely within 100 ms of their last write.
// The price is for writers that pause and go on: a block written again
// after its seal moves to a new slot (a copy of the pages it holds) and
// each pause costs a data and a log flush, as the 5 s sync does.
const idleSync = 100 * time.Millisecond

// idleSyncOverride, when not zero, replaces idleSync (SetIdleSync).
var idleSyncOverride atomic.Int64

func idleSyncDelay() time.Duration {
	if d := idleSyncOverride.Load(); d != 0 {
		return time.Duration(d)
	}
	return idleSync
}

// SetIdleSync makes views wait d after the last burst of changes before
// their idle sync, from their next burst on, and returns what puts the
// default back. It is for tests that need no seal in a window (a
// fallocate's reservation lasts until the next seal) and would otherwise
// depend on how fast the machine is.
func SetIdleSync(d time.Duration) (restore func()) {
	idleSyncOverride.Store(int64(d))
	return func() { idleSyncOverride.Store(0) }
}

// loopSyncsOff, set by a test, keeps the journal loop from syncing on its
// own, so that the test knows the last full sync (a power cut's image).
var loopSyncsOff bool

// errLoopSyncsOff: the journal loop's sync did not run (loopSyncsOff).
var errLoopSyncsOff = errors.New("journal loop syncs are off")

// loopSync is the journal loop's own sync, a full one.
func (v *View) loopSync() error {
	if loopSyncsOff {
		return errLoopSyncsOff
	}
	return v.sync(false, false)
}

// idleSyncHook, when a test sets it, runs before each sync the idle timer
// starts.
var idleSyncHook func(v *View)

// idleDelta is the active layer's delta as the idle sync left it, with
// the view's change count then, and how the state differs from the
// latest checkpoints (backs, idleBacks of them at most): an agent's undo.
type idleDelta struct {
	d       *LayerDelta
	layer   string
	changes uint64
	backs   []idleBack // to the latest checkpoints, the nearest first
}

// idleBack is how the state an idle sync saw differs from a layer below
// the active one, for a rollback onto it.
type idleBack struct {
	to   string
	diff *repointDiff
}

// backTo returns the difference from layer the idle sync told, or nil.
func (k *idleDelta) backTo(layer string) *repointDiff {
	if k == nil {
		return nil
	}
	for _, b := range k.backs {
		if b.to == layer {
			return b.diff
		}
	}
	return nil
}

// idleBacks is how many of the latest checkpoints the idle sync tells the
// difference to: an agent's undo goes to the latest, or to the one before
// when the decision before the last was the wrong one. Each further one
// holds the view for about as long again (0.3 ms for 100 changed files a
// layer), and is told only while the layers it undoes hold at most
// idleDeltaMax changes together.
const idleBacks = 2

// idleDeltaMax bounds the changes (inodes and entries) of an active layer
// whose delta (and differences from the layers below) the idle sync tells:
// it holds the view meanwhile (1.9 ms for 1,000 new files over a
// checkpoint, 2,001 changes, in a scratch test; 0.15 ms for 100), and a
// writer that goes on after the pause waits for it. A larger layer's
// checkpoint or rollback tells them as before. Tests make it smaller.
var idleDeltaMax = 2048

// keepIdleDelta tells, after an idle sync sealed everything, what the
// active layer changed, for the freeze or repoint that may come next
// (activeDeltaNowLocked). A write that came in after the sync leaves
// blocks to seal: then nothing is kept, nor for a layer past
// idleDeltaMax changes.
func (v *View) keepIdleDelta() {
	v.ioMu.Lock()
	v.mu.Lock()
	defer v.mu.Unlock()
	defer v.ioMu.Unlock()
	v.idleDelta = nil
	if v.closed || len(v.stack) == 0 || len(v.dirty) > 0 || v.pre == nil || len(v.pre.inodes)+len(v.pre.entries) > idleDeltaMax {
		return
	}
	d, ok, err := v.activeDeltaLocked()
	if !ok || err != nil {
		return
	}
	k := &idleDelta{d: d, layer: v.activeLayer(), changes: v.changes.Load()}
	undone := len(d.Inodes) + len(d.Entries)
	for i := 1; i <= idleBacks && i < len(v.stack); i++ {
		if i > 1 {
			// The layer this rollback undoes on top of the last one's:
			// only one whose delta is known, not read from the store.
			ld := v.s.deltas.get(v.stack[i-1])
			if ld == nil {
				break
			}
			if undone += len(ld.Inodes) + len(ld.Entries); undone > idleDeltaMax {
				break
			}
		}
		rd, err := v.diffLocked(v.stack[i], d)
		if err != nil {
			break
		}
		k.backs = append(k.backs, idleBack{v.stack[i], rd})
	}
	v.idleDelta = k
}

// takeIdleLocked hands over what the last idle sync told, when nothing
// changed since, or nil. Either way the kept one goes: it is handed to
// one freeze or repoint.
func (v *View) takeIdleLocked() *idleDelta {
	k := v.idleDelta
	v.idleDelta = nil
	if k != nil && k.layer == v.activeLayer() && k.changes == v.changes.Load() {
		return k
	}
	return nil
}

// activeDeltaNowLocked is activeDeltaLocked, or the delta the last idle
// sync told when nothing changed since (takeIdleLocked), then with the
// rest of what it told (kept).
func (v *View) activeDeltaNowLocked() (d *LayerDelta, kept *idleDelta, ok bool, err error) {
	if k := v.takeIdleLocked(); k != nil {
		return k.d, k, true, nil
	}
	d, ok, err = v.activeDeltaLocked()
	return d, nil, ok, err
}

// takeRemoved reports whether a removal, truncate or punch freed slots
// since it was last asked.
func (v *View) takeRemoved() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	r := v.removed
	v.removed = false
	return r && len(v.freed) > 0
}

// makeSpare creates spare data files for the next active layers, up to
// keepSpares.
func (v *View) makeSpare() {
	for v.makeOneSpare() {
	}
}

// spareFile is a spare data file, open.
type spareFile struct {
	path string
	f    *os.File
}

// keepSpares is how many spare data files a view keeps ready: an agent
// may checkpoint and roll back within the time it takes to make one
// behind a busy disk.
const keepSpares = 2

// makeOneSpare makes a spare data file when the view keeps fewer than
// keepSpares; it reports whether it made one.
func (v *View) makeOneSpare() bool {
	v.mu.Lock()
	have := len(v.spares) >= keepSpares || v.closed
	v.mu.Unlock()
	if have {
		return false
	}
	p := v.s.sparePath(NewID())
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return false // the next layer creates its data file itself
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.spares) >= keepSpares || v.closed {
		f.Close()
		os.Remove(p)
		return false
	}
	v.spares = append(v.spares, spareFile{p, f})
	return true
}

// useSpareLocked makes the spare data file, if there is one, the data
// file of layer (a new active layer, which has none yet), and asks for
// another. The restack onto layer takes the open file (ready).
func (v *View) useSpareLocked(layer string) {
	if len(v.spares) == 0 {
		return
	}
	sp := v.spares[0]
	v.spares = v.spares[1:]
	if err := os.Rename(sp.path, v.s.dataPath(layer)); err != nil {
		sp.f.Close()
		os.Remove(sp.path)
	} else {
		if v.ready != nil {
			v.ready.Close()
		}
		v.ready, v.readyLayer = sp.f, layer
	}
	select {
	case v.spareReq <- struct{}{}:
	default:
	}
}

// writeback starts writing the active layer's data file to disk when
// data was written to it since the last time, without waiting: the fsync
// a checkpoint or an fsync(2) makes then finds most of it written already.
func (v *View) writeback() {
	if !v.written.Swap(false) {
		return
	}
	v.mu.Lock()
	var f *os.File
	if !v.closed && len(v.stack) > 0 {
		f = v.files[v.activeLayer()]
	}
	v.mu.Unlock()
	if f == nil {
		return
	}
	if rc, err := f.SyscallConn(); err == nil {
		// A closed file (the stack moved on meanwhile) fails Control.
		_ = rc.Control(func(fd uintptr) {
			_ = unix.SyncFileRange(int(fd), 0, 0, unix.SYNC_FILE_RANGE_WRITE)
		})
	}
}

// queue appends one operation's changes to the journal; called under mu so
// the journal's order is the order of the operations.
func (v *View) queue(op []kv) {
	if len(op) == 0 {
		return
	}
	v.jmu.Lock()
	v.pending = append(v.pending, op)
	v.jqueued++
	v.jmu.Unlock()
	select {
	case v.kick <- struct{}{}:
	default:
	}
}

// commit writes the journal to badger, several operations per transaction
// but never splitting one.
func (v *View) commit() error {
	v.cmu.Lock()
	defer v.cmu.Unlock()
	return v.commitLocked()
}

// commitQuietly is the journal loop's commit: a journal that failed to
// commit (an oversized operation, a full disk) is left to the next Sync,
// freeze or the ticker, which report the error, instead of being retried
// behind their back on every kick.
func (v *View) commitQuietly() {
	v.cmu.Lock()
	defer v.cmu.Unlock()
	v.jmu.Lock()
	failed := v.jerr != nil
	v.jmu.Unlock()
	if !failed {
		_ = v.commitLocked()
	}
}

// commitLocked is commit for a caller that holds cmu.
func (v *View) commitLocked() error { return v.commitThroughLocked(0) }

// commitThroughLocked commits the journal up to the first held operation
// (holdJournal), but at least up to operation number through: a caller
// whose data sync covers the operations up to there (a Sync's own seal,
// a freeze's everything) may commit them whoever holds them.
func (v *View) commitThroughLocked(through uint64) error {
	if err := v.dataFailed(); err != nil {
		return err
	}
	ops, upto := v.takeJournal(through)
	// Those an Fsync left are in the log already (all of them: taking
	// the journal takes them whole): committed as their records, with
	// the last one's number, and appended to the log no more.
	if k, seq := v.loggedCount(ops, upto); k > 0 {
		if err := v.commitOpsLocked(ops[:k], seq, ops[k:]); err != nil {
			return err
		}
		v.jmu.Lock()
		if v.loggedSeq == seq {
			v.loggedUpTo, v.loggedSeq = 0, 0
		}
		v.jmu.Unlock()
		ops = ops[k:]
	}
	if err := v.commitOpsLocked(ops, 0, nil); err != nil {
		return err
	}
	v.journalDone(upto)
	return nil
}

// commitOpsLocked commits operations taken from the journal, in order,
// several per transaction but never splitting one; what it could not
// commit goes back to the journal, followed by after (taken with them,
// to be committed next). With seq 0, each transaction is a commit of its
// own with the next number, whose record it appends to the intent log
// (unsynced); else the operations are those of the records up to seq,
// already in the log, and the last transaction stores that number.
func (v *View) commitOpsLocked(ops [][]kv, seq uint64, after [][]kv) error {
	all := ops
	if seq != 0 && v.wal != nil {
		// The number goes in as one more operation, after the others.
		all = append(ops[:len(ops):len(ops)], []kv{v.walMarkKV(seq)})
	}
	var head func(txn *badger.Txn) error
	if seq == 0 && v.wal != nil {
		head = func(txn *badger.Txn) error {
			m := v.walMarkKV(v.walSeq.Load() + 1)
			return txn.Set(m.key, m.val)
		}
	}
	n, err := commitBatches(v.s.db, all, head, func(from, to int) {
		v.s.commits.Add(1)
		if head != nil {
			seq := v.walSeq.Add(1)
			v.walAppendLocked(seq, all[from:to])
		}
	})
	if err != nil {
		v.putBackJournal(append(ops[min(n, len(ops)):len(ops):len(ops)], after...), err)
		return fmt.Errorf("commit journal: %w", err)
	}
	if seq != 0 && seq > v.walSeq.Load() {
		v.walSeq.Store(seq)
	}
	return nil
}

// takeJournal takes the journal's pending operations up to the first held
// one, but at least up to number through (commitThroughLocked), and the
// number of the last one taken. The caller holds cmu, and commits them or
// puts them back.
func (v *View) takeJournal(through uint64) (ops [][]kv, upto uint64) {
	ops, upto, _ = v.takeJournalData(through)
	return ops, upto
}

// sealedData is the data of the slots a seal through the intent log
// sealed, registered with the number of its last operation (upto): the
// commit that takes those operations writes it into the log with them
// (syncLogged), or, committing them the full way, has synced it.
type sealedData struct {
	upto  uint64
	segs  []walSeg
	sizes []walMinSize
}

// takeJournalData is takeJournal that also hands over the sealed data
// registered with the operations it takes.
func (v *View) takeJournalData(through uint64) (ops [][]kv, upto uint64, data []sealedData) {
	ops, upto = v.takeJournalOps(through)
	v.jmu.Lock()
	defer v.jmu.Unlock()
	i := 0
	for i < len(v.sealedData) && v.sealedData[i].upto <= upto {
		i++
	}
	data = v.sealedData[:i:i]
	v.sealedData = v.sealedData[i:]
	return ops, upto, data
}

func (v *View) takeJournalOps(through uint64) (ops [][]kv, upto uint64) {
	v.jmu.Lock()
	defer v.jmu.Unlock()
	// The operations an Fsync left in the log are taken whole, whoever
	// holds some of them (their data is in the log): a commit that took
	// part of them could not say which of their records it applied, and
	// a record one commit covers in part a replay would skip.
	through = max(through, v.loggedUpTo)
	ops = v.pending
	v.pending = nil
	upto = v.jqueued
	if len(v.holds) > 0 {
		first := v.jqueued - uint64(len(ops)) + 1 // the number of ops[0]
		limit := max(slices.Min(v.holds), min(through, v.jqueued)+1, first)
		n := min(uint64(len(ops)), limit-first)
		ops, v.pending = ops[:n], ops[n:]
		upto = first + n - 1
	}
	return ops, upto
}

// putBackJournal returns operations takeJournal took and could not commit
// to the front of the journal; err, when not nil, is why (jerr).
func (v *View) putBackJournal(ops [][]kv, err error) {
	v.jmu.Lock()
	defer v.jmu.Unlock()
	v.pending = append(append([][]kv(nil), ops...), v.pending...)
	if err != nil {
		v.jerr = err
	}
}

// journalDone records that the operations up to number upto are committed.
func (v *View) journalDone(upto uint64) {
	v.jmu.Lock()
	defer v.jmu.Unlock()
	if len(v.pending) == 0 {
		v.jerr = nil
	}
	v.jdone = upto
	if upto >= v.loggedUpTo {
		v.loggedUpTo, v.loggedSeq = 0, 0
	}
}

// loggedCount is how many of ops, taken from the journal up to number
// upto, are in durable records of the intent log (loggedUpTo), and the
// number of the last of those records.
func (v *View) loggedCount(ops [][]kv, upto uint64) (n int, seq uint64) {
	v.jmu.Lock()
	defer v.jmu.Unlock()
	first := upto - uint64(len(ops)) + 1
	if v.loggedUpTo == 0 || v.loggedUpTo < first {
		return 0, 0
	}
	return min(int(v.loggedUpTo-first+1), len(ops)), v.loggedSeq
}

// applyOp writes one journal operation's records into txn.
func applyOp(txn dbTxn, op []kv) error {
	for _, e := range op {
		var err error
		if e.del {
			err = txn.Delete(e.key)
		} else {
			err = txn.Set(e.key, e.val)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// journalFunc writes a freeze's or repoint's records into txn; journal
// says whether txn also holds the view's journal, not yet committed
// (Txn.pending).
type journalFunc func(txn dbTxn, journal bool) error

// prepared is a transaction a quiesced view builds while its data syncs
// (prepareWithJournalLocked): the journal's records and fn's, committed
// once the data is durable (commit), or dropped (abandon). One commit on
// a checkpoint's critical path instead of two, and the time it takes to
// build the transaction hides behind the data sync.
type prepared struct {
	v    *View
	fn   journalFunc
	ops  [][]kv
	upto uint64
	txn  *badger.Txn
	err  error // from building it
	// For the intent log: the sealed data taken with ops, the mark, and
	// the recording of fn's writes.
	data []sealedData
	mark kv
	rec  *recordingTxn
}

// prepareWithJournalLocked builds the transaction, without committing it.
// With logged, the transaction is built for the intent log
// (commitLogged): it stores the mark of the record it will be, which
// says every record's data is synced when synced (the caller syncs the
// data first), and keeps fn's writes for the record; without synced it
// takes the sealed data registered with the journal's operations, which
// the record carries.
func (v *View) prepareWithJournalLocked(fn journalFunc, logged, synced bool) *prepared {
	p := &prepared{v: v, fn: fn, txn: v.s.db.NewTransaction(true)}
	if logged && !synced {
		p.ops, p.upto, p.data = v.takeJournalData(math.MaxUint64)
	} else {
		p.ops, p.upto = v.takeJournal(math.MaxUint64)
	}
	for _, op := range p.ops {
		if p.err = applyOp(p.txn, op); p.err != nil {
			return p
		}
	}
	var t dbTxn = p.txn
	if logged {
		seq := v.walSeq.Load() + 1
		p.mark = v.walMarkKV(seq)
		if synced {
			p.mark.val = encodeWalMark(seq, seq)
		}
		p.rec = &recordingTxn{Txn: p.txn}
		t = p.rec
		p.err = p.txn.Set(p.mark.key, p.mark.val)
	} else {
		p.err = v.setWALPlaced(p.txn)
	}
	if p.err != nil {
		return p
	}
	p.err = fn(t, len(p.ops) > 0)
	return p
}

// commitLogged is a quiesce's commit through the intent log when the
// data is not synced: one record with the journal's operations, the
// transaction's own writes and the mark (one operation: replayed in one
// transaction), the sealed data of this seal (segs, sizes) and of the
// earlier ones registered with the operations, synced in the log, and
// then the commit. It reports false when the log could not take the
// record, or the commit failed after it (p.err): the caller goes the
// full way (unlog, a data sync, commit).
func (p *prepared) commitLogged(segs []walSeg, sizes []walMinSize) bool {
	v := p.v
	w := v.wal
	if p.err != nil {
		return false
	}
	var all []walSeg
	var allSizes []walMinSize
	for _, d := range p.data {
		all = append(all, d.segs...)
		allSizes = append(allSizes, d.sizes...)
	}
	all, allSizes = append(all, segs...), append(allSizes, sizes...)
	seq := v.walSeq.Load() + 1
	rec := encodeWalRec(walRec{cycle: w.cycle, seq: seq, ops: p.recordOps(), segs: all, sizes: allSizes})
	fail := func() bool {
		v.walStopLocked()
		return false
	}
	if w.off+int64(len(rec)) > walSize {
		return fail()
	}
	if err := v.walWriteSync(w, rec, w.off); err != nil {
		return fail()
	}
	w.off += int64(len(rec))
	w.dirty = false
	if err := p.txn.Commit(); err != nil {
		p.err = v.walRefused(w, seq, w.off-int64(len(rec)), len(rec), err)
		return fail()
	}
	p.txn.Discard()
	v.s.commits.Add(1)
	v.walSeq.Store(seq)
	v.walData.Store(seq)
	v.journalDone(p.upto)
	v.loggedQuiesces.Add(1)
	return true
}

// recordOps are the operations of p's record: the journal's, then the
// transaction's own writes with the mark as one more.
func (p *prepared) recordOps() [][]kv {
	own := append(p.rec.writes[:len(p.rec.writes):len(p.rec.writes)], p.mark)
	return append(p.ops[:len(p.ops):len(p.ops)], own)
}

// commitBehind is a quiesce's commit through the intent log when the data
// is synced (the mark says so): the record (with no data) is written and
// synced while the transaction commits, and the function it returns
// waits for that, which the caller runs while the view moves onto the
// new stack and the kernel's caches are dropped, as badger's log sync ran
// before, still holding cmu; the order of the commit and the record does
// not matter. When that write or sync fails, badger's log is synced
// instead. It reports false, with nothing left in the log for a replay,
// when the log has no room or the commit failed (p.err).
func (p *prepared) commitBehind() (func() error, bool) {
	v := p.v
	w := v.wal
	if p.err != nil {
		return nil, false
	}
	seq := v.walSeq.Load() + 1
	rec := encodeWalRec(walRec{cycle: w.cycle, seq: seq, ops: p.recordOps()})
	at := w.off
	if at+int64(len(rec)) > walSize {
		v.walStopLocked()
		return nil, false
	}
	wrote := v.walWriteSyncBehind(w, rec, at)
	if err := p.txn.Commit(); err != nil {
		// Erased even when its write or sync failed: some of it may
		// reach the disk yet.
		_ = wrote()
		w.off = at + int64(len(rec))
		p.err = v.walRefused(w, seq, at, len(rec), err)
		v.walStopLocked()
		return nil, false
	}
	p.txn.Discard()
	v.s.commits.Add(1)
	v.walSeq.Store(seq)
	v.walCovered(seq)
	v.journalDone(p.upto)
	w.off += int64(len(rec))
	return func() error {
		err := wrote()
		if err == nil {
			w.dirty = false
			v.loggedQuiesces.Add(1)
			return nil
		}
		// Durable by badger's sync instead, with no record of its own.
		v.walStopLocked()
		v.walPlaced()
		return v.s.Sync()
	}, true
}

// walRefused is told that badger refused (err) the commit of record seq,
// written to the log at offset at (n bytes): a replay must not apply it,
// as its writes were made on reads the refusal says are stale and would
// overwrite the commit it conflicted with. The full way's commits carry
// its number in their mark, which keeps a replay from it; until the
// first of them, a power cut would leave the record to replay, so it is
// erased (best effort: the log goes out of use either way). It returns
// err.
func (v *View) walRefused(w *walLog, seq uint64, at int64, n int, err error) error {
	v.walSeq.Store(seq)
	_ = v.walWriteSync(w, make([]byte, n), at)
	return err
}

// unlog turns a transaction prepared for the intent log into one of the
// full way: the mark says every record's data is synced (the caller
// syncs it before the commit), and the sealed data it took goes back.
func (p *prepared) unlog() {
	v := p.v
	if len(p.data) > 0 {
		v.jmu.Lock()
		v.sealedData = append(p.data[:len(p.data):len(p.data)], v.sealedData...)
		v.jmu.Unlock()
		p.data = nil
	}
	if p.err == nil {
		p.err = v.setWALPlaced(p.txn)
	}
}

// commit commits the prepared transaction. When the journal could not
// share it (too big for one transaction, or fn had to read the layer's
// committed state: errNeedsJournal) or it met a conflict, the journal is
// committed on its own and fn runs again after it; when fn failed on its
// own, the journal is committed and fn's error returned.
func (p *prepared) commit() error {
	err := p.err
	if err == nil {
		err = p.txn.Commit()
	}
	p.txn.Discard()
	if err == nil {
		p.v.s.commits.Add(1)
		p.v.walPlaced()
		p.v.journalDone(p.upto)
		return nil
	}
	p.v.putBackJournal(p.ops, nil)
	// The quiesce synced the data of every record so far: the journal's
	// commits below say so (a replay of an older record's data would
	// otherwise write a reused slot's old bytes under them).
	p.v.walCovered(p.v.walSeq.Load())
	if cerr := p.v.commitThroughLocked(math.MaxUint64); cerr != nil {
		return cerr
	}
	if errors.Is(err, errNeedsJournal) || errors.Is(err, badger.ErrTxnTooBig) || errors.Is(err, badger.ErrConflict) {
		err := p.v.s.update(func(txn *badger.Txn) error {
			if err := p.v.setWALPlaced(txn); err != nil {
				return err
			}
			return p.fn(txn, false)
		})
		if err == nil {
			p.v.walPlaced()
		}
		return err
	}
	return mapOSErr(err)
}

// abandon drops the prepared transaction: the journal's operations stay
// pending.
func (p *prepared) abandon() {
	p.txn.Discard()
	p.v.putBackJournal(p.ops, nil)
}

// Sync seals every written block, makes the data durable, commits the
// journal and syncs the metadata store. After it returns, a crash of any
// kind keeps what was written before.
func (v *View) Sync() error { return v.sync(true, false) }

// Fsync is Sync for fsync(2) and fdatasync(2): the changes are as durable
// when it returns, but when they go through the intent log their
// operations are left to the journal loop to commit (within
// journalDelay), the log's record being their durable copy until then.
// Committing them on the fsync's path cost a badger transaction and its
// goroutine handoffs per fsync. Callers that read the store afterwards
// (a diff of the live state, fsck) call Sync.
func (v *View) Fsync() error { return v.sync(true, true) }

// sync is Sync; logged lets it go through the intent log (wal.go), which
// makes the changes durable in one device flush and leaves the data file
// and badger's log to a later sync: the journal loop's and Close's syncs
// are full ones.
func (v *View) sync(logged, leave bool) error {
	if v.ro {
		return nil
	}
	v.ioMu.Lock()
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		v.ioMu.Unlock()
		return ErrClosed
	}
	// The seal's operations are the next ones queued: the writers that
	// could queue others wait for mu.
	hold := v.holdJournal()
	err := v.reserveForSealLocked()
	if err == nil {
		err = v.sealLocked()
	}
	v.jmu.Lock()
	sealed := v.jqueued // the last operation this Sync's data sync covers
	v.jmu.Unlock()
	f := v.files[v.activeLayer()]
	freed, moved := v.takeFreedLocked(), v.moved
	v.moved = nil
	gen := v.dataGen
	dataToSync := v.dataSynced < gen
	// The records whose data a data sync from here covers.
	covers := v.walSeq.Load()
	var back reopenBack
	if err == nil && logged {
		// Registered with the seal's operations, still under mu: the
		// commit that takes them, whichever it is, takes the data too.
		var segs []walSeg
		var sizes []walMinSize
		if segs, sizes, logged = v.walSealedLocked(f, dataToSync); logged && len(segs) > 0 {
			v.jmu.Lock()
			v.sealedData = append(v.sealedData, sealedData{upto: sealed, segs: segs, sizes: sizes})
			v.jmu.Unlock()
		}
		if logged {
			back = v.reopenBackLocked(len(segs) > 0)
		}
	}
	if err == nil && !logged && dataToSync {
		// The data of this seal reaches the disk by this Sync's data
		// sync only: until then, no commit through the log may take its
		// operations (a full commit's own data sync covers them).
		v.jmu.Lock()
		if v.fullHolds == nil {
			v.fullHolds = map[uint64]int{}
		}
		v.fullHolds[hold]++
		v.jmu.Unlock()
	}
	v.mu.Unlock()
	v.ioMu.Unlock()
	if err != nil {
		v.releaseJournal(hold)
		return err
	}
	if syncGapHook != nil {
		syncGapHook(v)
	}
	if logged && v.syncLogged(sealed, leave) {
		v.releaseJournal(hold)
		v.freedDurable(f, freed, moved)
		v.giveBackReopen(back)
		return nil
	}
	// The data files checkpoints and rollbacks through the intent log
	// left: the records up to covers hold data of theirs too.
	if err := v.syncLazy(); err != nil {
		v.releaseJournal(hold)
		v.keepFreed(f, append(freed, moved...))
		return err
	}
	if f != nil && dataToSync {
		// A freeze or rollback may close f meanwhile (Sync holds no lock
		// here): fdatasync keeps it open while it syncs. One that closed
		// it first had synced it (quiesce) or kept it for the next full
		// sync (syncLazy), after this seal: the data is durable or in
		// the intent log, and the fsync(2) must not fail with EBADF.
		switch err := v.syncData(f); {
		case err == nil:
			v.mu.Lock()
			v.dataSynced = max(v.dataSynced, gen)
			v.mu.Unlock()
			v.walCovered(covers)
		case errors.Is(err, os.ErrClosed) && v.movedOn(f):
		default:
			v.releaseJournal(hold)
			v.keepFreed(f, append(freed, moved...))
			return err
		}
	} else {
		v.walCovered(covers)
	}
	v.releaseJournal(hold)
	v.cmu.Lock()
	err = v.commitThroughLocked(sealed)
	committed := v.walSeq.Load()
	v.cmu.Unlock()
	if err != nil {
		v.keepFreed(f, append(freed, moved...))
		return err
	}
	if err := v.s.Sync(); err != nil {
		v.keepFreed(f, append(freed, moved...))
		return err
	}
	v.restartWALAfter(committed)
	v.fullSyncs.Add(1)
	v.freedDurable(f, freed, moved)
	return nil
}

// freedDurable takes the slots of data file f a Sync freed once their
// freeing is durable: those a write moved out of are kept for reuse (up
// to reuseMaxPages), the others punched.
func (v *View) freedDurable(f *os.File, freed, moved []slotSpan) {
	v.mu.Lock()
	now := false
	if len(freed)+len(moved) > 0 && !v.closed && v.files[v.activeLayer()] == f {
		freed = append(freed, v.keepForReuseLocked(moved)...)
		v.punchable = append(v.punchable, freed...)
		now, v.punchSoon = v.punchSoon, false
		if !now && len(v.punchable) >= punchBatch {
			select {
			case v.punchReq <- struct{}{}:
			default:
			}
		}
	}
	v.mu.Unlock()
	if now {
		v.punchPending()
	}
}

// syncData makes data file f durable for a seal whose records name it.
// When that fails, the data those records name may not be on disk, and a
// later sync would not tell: the kernel reports a writeback error once,
// to one caller, and no longer counts the pages it failed to write as
// dirty. So the view fails stop: no record is committed from then on
// (the sealed records would name lost data), every later sync, checkpoint
// and rollback fails with ErrDataSync, and what the store holds stays
// what the last good sync committed, which the next mount shows. The
// syncs of one view's files are serialised, so the one that meets the
// error records it before another can return.
func (v *View) syncData(f *os.File) error {
	v.dsMu.Lock()
	defer v.dsMu.Unlock()
	return v.syncDataLocked(f)
}

// syncDataLocked is syncData with dsMu held.
func (v *View) syncDataLocked(f *os.File) error {
	if err := v.dataFailed(); err != nil {
		return err
	}
	err := v.s.fault("datasync", v.info.Name)
	if err == nil {
		err = fdatasync(f)
	}
	if err == nil || errors.Is(err, os.ErrClosed) {
		return err // closed: see Sync
	}
	v.jmu.Lock()
	defer v.jmu.Unlock()
	v.dataErr = fmt.Errorf("sync data of sandbox %s: %w: %w (nothing written since its last durable sync is stored; unmount and mount again)", v.info.Name, ErrDataSync, mapOSErr(err))
	return v.dataErr
}

// dataFailed is the data sync that failed, if one did (syncData).
func (v *View) dataFailed() error {
	v.jmu.Lock()
	defer v.jmu.Unlock()
	return v.dataErr
}

// holdJournal keeps commits from taking the operations queued from now
// on, until releaseJournal: Sync's seal queues records of blocks whose
// data it has yet to sync.
func (v *View) holdJournal() uint64 {
	v.jmu.Lock()
	defer v.jmu.Unlock()
	at := v.jqueued + 1
	v.holds = append(v.holds, at)
	return at
}

// releaseJournal ends the hold holdJournal returned.
func (v *View) releaseJournal(at uint64) {
	v.jmu.Lock()
	defer v.jmu.Unlock()
	if i := slices.Index(v.holds, at); i >= 0 {
		v.holds = slices.Delete(v.holds, i, i+1)
	}
	if n := v.fullHolds[at]; n > 1 {
		v.fullHolds[at] = n - 1
	} else {
		delete(v.fullHolds, at)
	}
}

// fullHoldUpTo reports whether a seal at or before operation n still has
// its data only in the data file, unsynced (fullHolds).
func (v *View) fullHoldUpTo(n uint64) bool {
	v.jmu.Lock()
	defer v.jmu.Unlock()
	for at := range v.fullHolds {
		if at <= n {
			return true
		}
	}
	return false
}

// punchBatch is how many durably freed slots wait before the journal loop
// punches them (the 5 s tick punches fewer). A punch is a metadata change
// of the data file that stops every read and write of the view while it
// runs; in batches, runs of adjacent slots go in one call.
const punchBatch = 64

// keepForReuseLocked keeps moved slots for reuse (View.reuse) up to
// reuseMaxPages and returns the others, which are punched. They come from
// a Sync, whose commit freeing them is durable, and which took them under
// ioMu: the readers that resolved them before they were freed are done.
func (v *View) keepForReuseLocked(moved []slotSpan) []slotSpan {
	var rest []slotSpan
	for _, sp := range moved {
		if v.reusePages+sp.n > reuseMaxPages {
			rest = append(rest, sp)
			continue
		}
		v.reuse = append(v.reuse, sp)
		v.reusePages += sp.n
	}
	return rest
}

// keepFreed gives slots freed in data file f back to the view after a
// sync that failed, so a later one punches them; if the view moved to
// another stack meanwhile, the space stays until the layer is collected.
func (v *View) keepFreed(f *os.File, freed []slotSpan) {
	if len(freed) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.closed && v.files[v.activeLayer()] == f {
		v.freed = append(v.freed, freed...)
	}
}

// punchPending punches the slots whose freeing is durable, off the view's
// locks (see below and punchLocked).
func (v *View) punchPending() {
	v.mu.Lock()
	slots := v.punchable
	v.punchable = nil
	var f *os.File
	if !v.closed && len(v.stack) > 0 {
		f = v.files[v.activeLayer()]
	}
	v.mu.Unlock()
	if f == nil || len(slots) == 0 {
		return
	}
	// A reader holds ioMu (shared) from resolving a slot until it has read
	// it, and no block names these slots any more: once the readers that
	// began before they were freed are done, nothing reads them again. So
	// they are punched without holding ioMu, which would stall every read
	// and write meanwhile (on a file system mounted with discard each
	// punch waits for the device).
	v.ioMu.Lock()
	//lint:ignore SA2001 the empty section is the barrier
	v.ioMu.Unlock()
	v.punchLocked(f, slots)
}

// takeFreedLocked hands over the slots freed so far; they may be punched
// once the changes that freed them are durable.
func (v *View) takeFreedLocked() []slotSpan {
	freed := v.freed
	v.freed = nil
	return freed
}

// keepReuseWhenIdle, set by a test, keeps the slots kept for reuse
// across a pause of the writer, so the test decides when they are taken.
var keepReuseWhenIdle bool

// punchReuse gives the slots kept for reuse back to the file system: the
// writer paused, and df should show the space again. No reader can be in
// them (View.reuse).
func (v *View) punchReuse() {
	v.mu.Lock()
	slots := v.reuse
	v.reuse, v.reusePages = nil, 0
	var f *os.File
	if !v.closed && len(v.stack) > 0 {
		f = v.files[v.activeLayer()]
	}
	v.mu.Unlock()
	if len(slots) > 0 {
		v.punchLocked(f, slots)
	}
}

// punchLocked gives the space of freed slots of data file f back to the
// file system, runs of adjacent slots in one call. No reader may be in one
// of these slots: the caller holds ioMu, or waited for the readers that
// began before the slots were freed (punchPending). f may be closed
// meanwhile (a repoint): the descriptor is held while it is used, so a
// number the kernel gave to another file is never punched.
func (v *View) punchLocked(f *os.File, slots []slotSpan) {
	if f == nil {
		return
	}
	slots = slices.Clone(slots)
	slices.SortFunc(slots, func(a, b slotSpan) int { return cmp.Compare(a.at, b.at) })
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		for i := 0; i < len(slots); {
			at, end := slots[i].at, slots[i].at+slots[i].n
			j := i + 1
			for ; j < len(slots) && slots[j].at <= end; j++ {
				end = max(end, slots[j].at+slots[j].n)
			}
			// Errors are harmless: a file system without hole punching
			// keeps the space until the layer is collected.
			_ = unix.Fallocate(int(fd), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(at)*pageSize, int64(end-at)*pageSize)
			i = j
		}
	})
}

// reserveForSealLocked grows the active layer's data file, before a seal
// and the data sync that follows it, to cover every slot handed out: the
// records the seal stores name slots past what was written to them (a
// short slot keeps room to grow), and the file's size, synced with the
// data, keeps the next view from handing out any of their pages again.
func (v *View) reserveForSealLocked() error {
	if v.ro || len(v.dirty) == 0 {
		return nil
	}
	return v.reserveSlotsLocked(v.files[v.activeLayer()])
}

// sealLocked computes the checksums of every written block and queues the
// block map and records of every dirty inode. A sealed block is not
// written in place again: the next write copies it to a new slot, so a
// crash cannot leave a block whose data disagrees with its checksums;
// unless a record of the intent log that a crash replays holds its bytes
// (rewrite.go). Every seal takes that register away.
func (v *View) sealLocked() error {
	v.sealedNow = v.sealedNow[:0]
	v.takeReopenLocked()
	if v.ro || len(v.dirty) == 0 {
		return nil
	}
	act := v.activeLayer()
	f := v.files[act]
	ids := make([]uint64, 0, len(v.dirty))
	for ino := range v.dirty {
		ids = append(ids, ino)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	if err := v.checksumDirtyLocked(f, ids); err != nil {
		return err
	}
	for _, ino := range ids {
		st := v.dirty[ino]
		var op []kv
		blks := make([]uint64, 0, len(st.dirtyBlocks))
		for b := range st.dirtyBlocks {
			blks = append(blks, b)
		}
		sort.Slice(blks, func(i, j int) bool { return blks[i] < blks[j] })
		for _, b := range blks {
			ref, ok := st.active[b]
			if !ok {
				op = append(op, kv{key: keyBlock(act, ino, b), del: true})
				continue
			}
			if !ref.sealed() {
				st.allocKnown = false // a page of zeros is a hole now
				if ref.rewritten != nil {
					// Reopened: the rest of the slot is in the record
					// that let it be (rewrite.go).
					for _, sp := range rewrittenSpans(ref) {
						v.sealedNow = append(v.sealedNow, sealedSlot{ino: ino, blk: b, span: sp})
					}
				} else {
					v.sealedNow = append(v.sealedNow, sealedSlot{ino: ino, blk: b, span: ref.span(), whole: true})
				}
				ref.open, ref.dirty, ref.zero, ref.rewritten = false, nil, nil, nil
			}
			op = append(op, kv{key: keyBlock(act, ino, b), val: encodeBlockRef(*ref)})
		}
		if st.dirtyRec && st.inActive {
			op = append(op, kv{key: keyInode(act, ino), val: encodeInode(st.rec)})
		}
		st.dirtyRec = false
		st.dirtyBlocks = nil
		v.queue(op)
	}
	v.dirty = map[uint64]*inodeState{}
	return nil
}

// sealRun bounds the pages sealing reads in one call.
const sealRun = 256

// checksumDirtyLocked computes the checksums of the pages written since
// their slots were filled, of the open slots of inodes ids: it reads them
// from data file f in runs of adjacent pages, since slots handed out one
// after the other lie next to each other, so sealing a hundred small
// edits costs a read or two, not a hundred. Nothing changes when a read
// fails.
func (v *View) checksumDirtyLocked(f *os.File, ids []uint64) error {
	type dirtyPage struct {
		off      int64
		ref      *blockRef
		p        int
		ino, blk uint64
	}
	var pages []dirtyPage
	for _, ino := range ids {
		st := v.dirty[ino]
		for b := range st.dirtyBlocks {
			ref, ok := st.active[b]
			if !ok || ref.sealed() {
				continue
			}
			for p, d := range ref.dirty {
				switch {
				case d && p >= ref.capPages():
					ref.CRCs[p] = zeroPageCRC // past the slot: zeros
				case d:
					pages = append(pages, dirtyPage{ref.off() + int64(p)*pageSize, ref, p, ino, b})
				}
			}
		}
	}
	if len(pages) == 0 {
		return nil
	}
	sort.Slice(pages, func(i, j int) bool { return pages[i].off < pages[j].off })
	crcs := make([]uint32, len(pages))
	// The buffer holds the longest run, not sealRun pages: most seals
	// read a few scattered pages, and a fresh megabyte each time cost
	// more than the reads (page faults and clearing).
	runEnd := func(i int) int {
		j := i + 1
		for j < len(pages) && j-i < sealRun && pages[j].off == pages[j-1].off+pageSize {
			j++
		}
		return j
	}
	longest := 0
	for i := 0; i < len(pages); {
		j := runEnd(i)
		longest = max(longest, j-i)
		i = j
	}
	buf := make([]byte, longest*pageSize)
	for i := 0; i < len(pages); {
		j := runEnd(i)
		run := buf[:(j-i)*pageSize]
		if err := readFull(f, run, pages[i].off); err != nil {
			return fmt.Errorf("seal inode %d block %d: %w", pages[i].ino, pages[i].blk, err)
		}
		for k := i; k < j; k++ {
			crcs[k] = crc32.Checksum(run[(k-i)*pageSize:(k-i+1)*pageSize], castagnoli())
		}
		i = j
	}
	for k, pg := range pages {
		pg.ref.CRCs[pg.p] = crcs[k]
	}
	return nil
}

func pageCRCs(block []byte) []uint32 {
	crcs := make([]uint32, len(block)/pageSize)
	for i := range crcs {
		crcs[i] = crc32.Checksum(block[i*pageSize:(i+1)*pageSize], castagnoli())
	}
	return crcs
}

// readFull reads len(buf) bytes at off; past the end of the file it reads zeros.
func readFull(f *os.File, buf []byte, off int64) error {
	n, err := f.ReadAt(buf, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return mapOSErr(err)
	}
	clear(buf[n:])
	return nil
}

func (v *View) checkWritable() error {
	if v.ro {
		return ErrReadOnly
	}
	if v.closed {
		return ErrClosed
	}
	return nil
}

// ---- loading ---------------------------------------------------------------

func (v *View) getInode(ino uint64) (*inodeState, error) {
	if v.closed {
		return nil, ErrClosed
	}
	if st, ok := v.inodes[ino]; ok {
		return st, nil
	}
	if z, ok := v.zombies[ino]; ok {
		return z, nil
	}
	if pos, ok := v.gone[ino]; ok {
		v.jmu.Lock()
		done := v.jdone
		v.jmu.Unlock()
		if done < pos {
			return nil, fmt.Errorf("inode %d: %w", ino, ErrNotFound)
		}
		delete(v.gone, ino)
	}
	var rec *Inode
	inActive := false
	err := v.viewIfHeld(ino, "", false, func(txn *badger.Txn) error {
		for i, l := range v.stack {
			if i > 0 && v.lacks(txn, l, ino, false) {
				continue
			}
			item, err := txn.Get(keyInode(l, ino))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			err = item.Value(func(b []byte) error {
				var err error
				rec, err = decodeInode(b)
				return err
			})
			if err != nil {
				return fmt.Errorf("inode %d in layer %s: %w", ino, l, err)
			}
			inActive = i == 0
			return nil
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	fromBase := false
	var bblocks int64
	if rec == nil {
		origin, ok := v.origins[ino]
		if !ok {
			return nil, fmt.Errorf("inode %d: %w", ino, ErrNotFound)
		}
		rec, bblocks, err = v.baseRec(origin)
		if err != nil {
			return nil, err
		}
		fromBase = true
	}
	if !inActive {
		rec = rec.clone()
		rec.Floor = -1
	}
	st := &inodeState{ino: ino, rec: rec, inActive: inActive}
	if fromBase {
		st.bsize, st.bmtime, st.bknown = rec.Size, rec.Mtime, true
		st.pureBase, st.bblocks, st.bblocksKnown = true, bblocks, true
	}
	v.inodes[ino] = st
	return st, nil
}

// baseRec builds the record of an untouched base file, and tells the
// blocks it occupies (st_blocks).
func (v *View) baseRec(origin string) (*Inode, int64, error) {
	var st unix.Stat_t
	var btime int64
	var err error
	f, fetched := v.fetchedStat(origin)
	if fetched {
		st, btime, err = f.st, f.btime, f.statErr
	} else {
		st, btime, err = v.base.lstatx(origin)
	}
	if err != nil {
		return nil, 0, mapOSErr(err)
	}
	rec := &Inode{
		Mode: st.Mode, UID: st.Uid, GID: st.Gid, Nlink: uint32(st.Nlink), Rdev: st.Rdev,
		Size:  st.Size,
		Atime: tsNano(st.Atim), Mtime: tsNano(st.Mtim), Ctime: tsNano(st.Ctim), Btime: btime,
		Origin: origin, HasOrigin: true, Floor: -1,
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		if fetched {
			rec.Target, err = f.target, f.targetErr
		} else {
			rec.Target, err = v.base.readlink(origin)
		}
		if err != nil {
			return nil, 0, err
		}
	}
	return rec, st.Blocks, nil
}

// viewIfHeld runs fn in a read transaction unless the view knows without
// the store that no layer of its stack records inode ino (dir: entries of
// directory ino; with a name, that entry): the active layer's keys are
// all noted in v.pre when it was empty as the view started on it, and
// frozen layers' key sets are kept once read. Most lookups in a sandbox
// are of untouched base files, and a read transaction costs each of them
// a round through badger's watermark goroutines.
func (v *View) viewIfHeld(ino uint64, name string, dir bool, fn func(txn *badger.Txn) error) error {
	if v.surelyUnrecorded(ino, name, dir) {
		return nil
	}
	return v.s.view(fn)
}

// surelyUnrecorded tells whether no layer of the stack records the key
// viewIfHeld describes, by what is in memory only; false when not known.
func (v *View) surelyUnrecorded(ino uint64, name string, dir bool) bool {
	p := v.pre
	if v.ro || p == nil || !p.complete || len(v.stack) == 0 {
		return false
	}
	switch {
	case !dir:
		_, ok := p.inodes[ino]
		if ok {
			return false
		}
	case name != "":
		if _, ok := p.entries[entryKey{ino, name}]; ok {
			return false
		}
	default:
		if p.dirs[ino] > 0 {
			return false
		}
	}
	for _, l := range v.stack[1:] {
		ks := v.keptKeySet(l)
		if ks == nil {
			return false
		}
		if name != "" {
			if ks.holdsEntry(ino, name) {
				return false
			}
		} else if ks.holds(ino, dir) {
			return false
		}
	}
	return true
}

// keptKeySet is frozen layer l's key set if it is at hand without the
// store, else nil.
func (v *View) keptKeySet(l string) *keySet {
	if d := v.s.deltas.get(l); d != nil {
		return d.keySet()
	}
	return v.s.keySets.get(l)
}

// lacks tells whether frozen layer l holds nothing of inode ino (dir: no
// entries of directory ino), by its delta when the store keeps one, else
// by its key set, read in txn the first time. In a deep stack most layers
// hold nothing of a given key, and asking the store for it in each layer
// is most of a lookup's cost.
func (v *View) lacks(txn dbTxn, l string, ino uint64, dir bool) bool {
	ks := v.keySetOf(txn, l)
	return ks != nil && !ks.holds(ino, dir)
}

// lacksEntry reports whether frozen layer l surely holds no entry name in
// directory dir.
func (v *View) lacksEntry(txn dbTxn, l string, dir uint64, name string) bool {
	ks := v.keySetOf(txn, l)
	return ks != nil && !ks.holdsEntry(dir, name)
}

// keySetOf is frozen layer l's key set, or nil when it is too large to keep.
func (v *View) keySetOf(txn dbTxn, l string) *keySet {
	if ks := v.keptKeySet(l); ks != nil {
		return ks
	}
	ks := readKeySet(txn, l)
	if ks != nil {
		v.s.keySets.put(l, ks)
	}
	return ks
}

func (v *View) getDir(ino uint64) (*dirState, *inodeState, error) {
	st, err := v.getInode(ino)
	if err != nil {
		return nil, nil, err
	}
	if st.rec.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, nil, fmt.Errorf("inode %d: %w", ino, ErrNotDir)
	}
	if d, ok := v.dirs[ino]; ok {
		return d, st, nil
	}
	d := &dirState{entries: map[string]entry{}, below: map[string]bool{}}
	seenAll := map[string]bool{}
	seenBelow := map[string]bool{}
	err = v.viewIfHeld(ino, "", true, func(txn *badger.Txn) error {
		for i, l := range v.stack {
			if i > 0 && v.lacks(txn, l, ino, true) {
				continue
			}
			prefix := prefixEntries(l, ino)
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
			for it.Rewind(); it.Valid(); it.Next() {
				name := string(it.Item().Key()[len(prefix):])
				e, err := decodeItem(it.Item(), decodeEntry)
				if err != nil {
					it.Close()
					return fmt.Errorf("directory %d entry %q: %w", ino, name, err)
				}
				if !seenAll[name] {
					seenAll[name] = true
					if e.Ino != 0 {
						d.entries[name] = e
					}
				}
				if i > 0 && !seenBelow[name] {
					seenBelow[name] = true
					if e.Ino != 0 {
						d.below[name] = true
					}
				}
			}
			it.Close()
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if st.rec.HasOrigin {
		list, err, ok := v.fetchedList(st.rec.Origin)
		if !ok {
			list, err = v.base.readDir(st.rec.Origin)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ENOTDIR) {
			return nil, nil, err
		}
		for _, be := range list {
			if !seenBelow[be.name] {
				d.below[be.name] = true
			}
			if !seenAll[be.name] {
				d.entries[be.name] = entry{Ino: be.ino, Type: be.typ}
				v.origins[be.ino] = path.Join(st.rec.Origin, be.name)
				v.bparent[be.ino] = ino
			}
		}
	}
	v.dirs[ino] = d
	return d, st, nil
}

// ensureBlocks builds the inode's block map once: the blocks of the active
// layer, then the visible blocks of the frozen layers merged top-down, so a
// read finds any block with one map lookup instead of a walk down the stack.
func (v *View) ensureBlocks(st *inodeState) error {
	if st.blocksLoaded {
		return nil
	}
	active := map[uint64]*blockRef{}
	frozen := map[uint64]frozenRef{}
	cut := int64(math.MaxInt64)
	err := v.viewIfHeld(st.ino, "", false, func(txn *badger.Txn) error {
		for i, l := range v.stack {
			if i > 0 && v.lacks(txn, l, st.ino, false) {
				continue
			}
			prefix := prefixBlocks(l, st.ino)
			it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
			for it.Rewind(); it.Valid(); it.Next() {
				k := it.Item().Key()
				if len(k) != len(prefix)+8 {
					it.Close()
					return fmt.Errorf("block key %q: %w", k, ErrCorrupt)
				}
				blk := beUint64(k[len(prefix):])
				ref, err := decodeItem(it.Item(), decodeBlockRef)
				if err != nil {
					it.Close()
					return fmt.Errorf("inode %d block %d in layer %s: %w", st.ino, blk, l, err)
				}
				if len(ref.CRCs) != int(v.bs/pageSize) {
					it.Close()
					return fmt.Errorf("inode %d block %d in layer %s: %d checksums: %w", st.ino, blk, l, len(ref.CRCs), ErrCorrupt)
				}
				if i == 0 {
					r := ref
					active[blk] = &r
				} else if _, ok := frozen[blk]; !ok && int64(blk) < cut/v.bs+boolInt(cut%v.bs != 0) {
					frozen[blk] = frozenRef{layer: ref.dataLayer(l), ref: ref}
				}
			}
			it.Close()
			if i == 0 {
				continue
			}
			item, err := txn.Get(keyInode(l, st.ino))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			var rec *Inode
			if err := item.Value(func(b []byte) error { rec, err = decodeInode(b); return err }); err != nil {
				return err
			}
			if rec.Floor >= 0 && rec.Floor < cut {
				cut = rec.Floor
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	st.active = active
	st.allocKnown = false
	st.frozen = frozen
	st.baseLimit = 0
	if st.rec.HasOrigin {
		st.baseLimit = cut
	}
	st.blocksLoaded = true
	return nil
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func beUint64(b []byte) uint64 {
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// statAttrLocked is st's attributes as stat tells them: Blocks counts
// what the file occupies, so that a sparse file shows its holes (du, cp
// --sparse). An untouched base file occupies what the base file does. A
// file a layer records occupies the 4 KiB pages of its layers' blocks
// that hold data (a page never written, or written with zeros, is a hole,
// as its checksum tells), plus the base it still reads, counted dense but
// never more than the base file occupies. A
// large file's block map is loaded for it once; a file of one block or
// less is counted by its size.
func (v *View) statAttrLocked(st *inodeState) Attr {
	a := st.attr()
	if st.rec.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return a
	}
	if st.pureBase {
		a.Blocks = st.bblocks
		return a
	}
	size := st.rec.Size
	if size <= v.bs || v.ensureBlocks(st) != nil {
		a.Blocks = roundPage(size) / 512
		return a
	}
	if !st.allocKnown {
		st.allocData, st.allocBase = v.countAllocLocked(st)
		st.allocKnown = true
	}
	base := st.allocBase
	if st.rec.HasOrigin && st.baseLimit > 0 {
		// No more than the base file occupies: a sparse base file's holes
		// stay holes.
		if !st.bblocksKnown {
			if bst, _, err := v.base.lstatx(st.rec.Origin); err == nil {
				st.bblocks, st.bblocksKnown = bst.Blocks, true
			}
		}
		if st.bblocksKnown {
			base = min(base, st.bblocks*512)
		}
	}
	a.Blocks = max(0, st.allocData+max(0, base)) / 512
	return a
}

func roundPage(n int64) int64 { return (n + pageSize - 1) / pageSize * pageSize }

// allocShape is what the count of one block depends on besides the block
// map: the file's size, the active layer's truncation floor, and how many
// leading blocks the base still provides.
type allocShape struct {
	size, floor int64
	nb          uint64
}

func (v *View) allocShapeLocked(st *inodeState) allocShape {
	sh := allocShape{size: st.rec.Size, floor: -1}
	if st.inActive && st.rec.Floor >= 0 {
		sh.floor = st.rec.Floor
	}
	if st.rec.HasOrigin && st.baseLimit > 0 {
		end := min(st.baseLimit, sh.size)
		if sh.floor >= 0 {
			end = min(end, sh.floor)
		}
		sh.nb = uint64((end + v.bs - 1) / v.bs)
	}
	return sh
}

// pagesIn is the bytes of ref's data pages (written since the last seal,
// or stored with content that is not all zeros) inside a file of size
// bytes, ref being block blk.
func (v *View) pagesIn(blk uint64, ref *blockRef, size int64) int64 {
	live := min(v.bs, size-int64(blk)*v.bs)
	if ref.alloc {
		return roundPage(max(0, live))
	}
	var n int64
	for p := int64(0); p*pageSize < live && int(p) < len(ref.CRCs); p++ {
		if (ref.dirty != nil && ref.dirty[p]) || ref.CRCs[p] != zeroPageCRC {
			n++
		}
	}
	return n * pageSize
}

// blockAllocLocked is what block blk adds to the counts: its data pages in
// the layers (a frozen block hidden by the floor adds none), and the base
// pages it still reads.
func (v *View) blockAllocLocked(st *inodeState, blk uint64, sh allocShape) (data, base int64) {
	ref, inActive := st.active[blk]
	fr, inFrozen := st.frozen[blk]
	switch {
	case inActive:
		data = v.pagesIn(blk, ref, sh.size)
	case inFrozen && (sh.floor < 0 || int64(blk)*v.bs < sh.floor):
		data = v.pagesIn(blk, &fr.ref, sh.size)
	}
	if blk < sh.nb && !inActive && !inFrozen {
		base = roundPage(min(v.bs, sh.size-int64(blk)*v.bs))
	}
	return data, base
}

// countAllocLocked counts what the file occupies, block map and base,
// from scratch.
func (v *View) countAllocLocked(st *inodeState) (data, base int64) {
	sh := v.allocShapeLocked(st)
	for blk, ref := range st.active {
		data += v.pagesIn(blk, ref, sh.size)
	}
	for blk, fr := range st.frozen {
		if _, ok := st.active[blk]; !ok && (sh.floor < 0 || int64(blk)*v.bs < sh.floor) {
			data += v.pagesIn(blk, &fr.ref, sh.size)
		}
	}
	if sh.nb > 0 {
		// The base's blocks below nb, less those a layer replaced.
		base = roundPage(min(int64(sh.nb)*v.bs, sh.size))
		replaced := func(blk uint64) {
			if blk < sh.nb {
				base -= roundPage(min(v.bs, sh.size-int64(blk)*v.bs))
			}
		}
		for blk := range st.active {
			replaced(blk)
		}
		for blk := range st.frozen {
			if _, ok := st.active[blk]; !ok {
				replaced(blk)
			}
		}
	}
	return data, base
}

// allocTrack keeps st's counts known across a change confined to blocks:
// what those blocks added before the change, taken away after it and
// replaced by what they add then. A change of more blocks than are worth
// counting one by one leaves the counts to a recount.
type allocTrack struct {
	ok         bool
	blks       []uint64
	data, base int64
}

// maxTrackedBlocks bounds the blocks a change counts one by one.
const maxTrackedBlocks = 256

// allocBeforeLocked starts tracking a change of st confined to blks
// (distinct; nil: not tracked, the counts are recounted).
func (v *View) allocBeforeLocked(st *inodeState, blks []uint64) allocTrack {
	if !st.allocKnown || blks == nil {
		return allocTrack{}
	}
	t := allocTrack{ok: true, blks: blks}
	sh := v.allocShapeLocked(st)
	for _, b := range blks {
		d, bs := v.blockAllocLocked(st, b, sh)
		t.data, t.base = t.data+d, t.base+bs
	}
	return t
}

// allocAfterLocked ends tracking t: the counts take the change in, and
// stay known.
func (v *View) allocAfterLocked(st *inodeState, t allocTrack) {
	if !t.ok {
		return
	}
	sh := v.allocShapeLocked(st)
	var data, base int64
	for _, b := range t.blks {
		d, bs := v.blockAllocLocked(st, b, sh)
		data, base = data+d, base+bs
	}
	st.allocData += data - t.data
	st.allocBase += base - t.base
	st.allocKnown = true
}

func (st *inodeState) attr() Attr {
	r := st.rec
	a := Attr{
		Ino: st.ino, Mode: r.Mode, Nlink: r.Nlink, UID: r.UID, GID: r.GID, Rdev: r.Rdev,
		Size: r.Size, Atime: r.Atime, Mtime: r.Mtime, Ctime: r.Ctime, Btime: r.Btime,
	}
	a.Blocks = (r.Size + 511) / 512
	return a
}
