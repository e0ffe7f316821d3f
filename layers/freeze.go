package layers

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/dgraph-io/badger/v4"
	"golang.org/x/sys/unix"
)

// FreezeFunc records, in the transaction that freezes a layer, what the
// caller keeps about it (a checkpoint). frozen is the layer just sealed,
// next the new empty active layer above it.
type FreezeFunc func(tx *Txn, frozen, next string) error

// Freeze seals a sandbox's active layer and opens a new, empty one above it,
// in one transaction that also runs fn. Written data is made durable first,
// so a checkpoint holds everything written before it. Whether or not the
// sandbox is mounted (has a live view in this process), the cost does not
// depend on the size of the workspace, only on what was written since the
// last seal.
func (s *Store) Freeze(name string, fn FreezeFunc) (frozen, next string, err error) {
	s.mu.Lock()
	v := s.views[name]
	s.mu.Unlock()
	if v != nil {
		return v.freeze(fn)
	}
	next = NewID()
	tx := &Txn{s: s}
	err = s.update(func(txn *badger.Txn) error {
		var err error
		frozen, err = freezeTxn(txn, name, next)
		if err != nil {
			return err
		}
		tx.txn = txn
		return fn(tx, frozen, next)
	})
	if err == nil {
		err = s.Sync()
	}
	if err == nil {
		tx.rememberDeltas([]string{frozen})
	}
	return frozen, next, err
}

func freezeTxn(txn dbTxn, name, next string) (string, error) {
	var info SandboxInfo
	if err := getJSON(txn, keySandbox(name), &info); err != nil {
		return "", fmt.Errorf("sandbox %s: %w", name, err)
	}
	var top LayerInfo
	if err := getJSON(txn, keyLayer(info.Head), &top); err != nil {
		return "", fmt.Errorf("layer %s: %w", info.Head, err)
	}
	if top.State != StateActive {
		return "", fmt.Errorf("layer %s is %s: %w", top.ID, top.State, ErrCorrupt)
	}
	top.State = StateFrozen
	if err := putJSON(txn, keyLayer(top.ID), top); err != nil {
		return "", err
	}
	nl := LayerInfo{ID: next, Sandbox: name, Parent: top.ID, State: StateActive, Created: time.Now().UTC()}
	if err := putJSON(txn, keyLayer(next), nl); err != nil {
		return "", err
	}
	info.Head = next
	return top.ID, putJSON(txn, keySandbox(name), info)
}

// quiesce stops the view's writers, seals everything, makes the changes
// durable and commits, in one transaction with the journal, what fn
// writes; it returns with ioMu, mu and cmu held (release), and reports
// whether the commit went through the intent log (then the caller does
// not sync badger's log: the log's record is the durable copy).
//
// The data written so far is final, so it syncs while the blocks are
// sealed, which only reads it; during runs meanwhile too (work on the
// sealed state in memory), and then the transaction is built
// (prepareWithJournalLocked). The journal, whose sealed blocks' records
// name the new slots, is committed only once the data is durable: the
// store's log is shared, and another sandbox's sync may flush it at any
// moment after a commit. If the seal or the sync fails, nothing is
// committed and the journal stays pending. Holding cmu keeps the journal
// loop out meanwhile.
//
// Through the intent log (quiesceMayLogLocked), the transaction also
// records its writes, and a record of them with the journal's operations
// is synced in the log in place of badger's log: once the data is
// synced, beside the commit. A quiesce with little unsynced data
// (walCarryData) does not sync the data file at all: the record carries
// the sealed pages, is synced first and then committed, and the data
// file of the layer left is synced by the next full sync (lazy).
func (v *View) quiesce(during func(), fn journalFunc) (logged bool, behind func() error, err error) {
	v.ioMu.Lock()
	v.mu.Lock()
	v.cmu.Lock()
	if v.closed {
		return false, nil, ErrClosed
	}
	if v.ro {
		return false, nil, ErrReadOnly
	}
	if err := v.dataFailed(); err != nil {
		return false, nil, err
	}
	// Before the sync starts: it must cover the size.
	if err := v.reserveForSealLocked(); err != nil {
		return false, nil, err
	}
	f := v.files[v.activeLayer()]
	// Nothing written since the last data sync (an idle sync made it):
	// nothing to wait for, not even a device flush.
	dataToSync := f != nil && v.dataSynced < v.dataGen
	var syncErr error
	var synced chan struct{}
	// With no data to sync, nothing is waited for. A goroutine is started
	// all the same: it wakes the other CPU, so that the one dropping the
	// kernel's caches for a rollback (MovedFunc) starts at once. Waited
	// for, it started 0.2-0.3 ms late under that drop's load (traced
	// through a mount), and the commit waited; left out, the drop started
	// as late (an idle vCPU of these VMs wakes slowly).
	nothing := !dataToSync && v.noLazySync()
	startSync := func() {
		if nothing {
			go func() {}()
			return
		}
		synced = make(chan struct{})
		go func() {
			defer close(synced)
			if syncErr = v.syncLazy(); syncErr == nil && dataToSync {
				syncErr = v.syncData(f)
			}
		}()
	}
	tryLog := v.quiesceMayLogLocked()
	carry := tryLog && dataToSync && v.unsealedPagesLocked()*pageSize <= walCarryData
	if !carry {
		startSync()
	}
	var p *prepared
	var segs []walSeg
	var sizes []walMinSize
	err = v.sealLocked()
	if err == nil && carry {
		if segs, sizes, carry = v.walSealedUpToLocked(f, true, walCarryData); !carry {
			startSync()
		}
	}
	if err == nil {
		during()
		p = v.prepareWithJournalLocked(fn, tryLog, !carry)
		if carry {
			if p.commitLogged(segs, sizes) {
				// Committed: a failure here is the view's (ErrDataSync).
				return true, nil, v.addLazyLocked(f)
			}
			// The log could not take it: the full way.
			p.unlog()
			startSync()
		}
	}
	if synced != nil { // not started when a carrying quiesce's seal failed
		<-synced
	}
	if err == nil {
		err = syncErr
	}
	if err != nil {
		if p != nil {
			p.abandon()
		}
		return false, nil, err
	}
	if tryLog && !carry {
		if behind, ok := p.commitBehind(); ok {
			return true, behind, nil
		}
		p.unlog()
	}
	return false, nil, p.commit()
}

// afterQuiesce starts what makes a quiesce's commit durable while the
// view moves onto the new stack: the intent log record's write and sync
// (behind), nothing when the record is synced already (logged; err is
// then a failure to keep the left data file for a later sync), or
// badger's log sync (sync). The channel gets its error.
func afterQuiesce(logged bool, behind func() error, err error, sync func() error) <-chan error {
	synced := make(chan error, 1)
	switch {
	case behind != nil:
		go func() { synced <- behind() }()
	case logged:
		synced <- err
	default:
		go func() { synced <- sync() }()
	}
	return synced
}

// fdatasync makes f's data (and its size) durable.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.Fdatasync(int(fd)) }); err != nil {
		// Control fails only when f is closed: the descriptor is gone.
		return fmt.Errorf("%w: %w (%v)", os.ErrClosed, unix.EBADF, err)
	}
	return serr
}

func (v *View) release() {
	v.cmu.Unlock()
	v.mu.Unlock()
	v.ioMu.Unlock()
}

func (v *View) freeze(fn FreezeFunc) (frozen, next string, err error) {
	defer v.release()
	tx := &Txn{s: v.s}
	next = NewID()
	logged, behind, err := v.quiesce(func() {
		// What the layer changed, from memory, while its data syncs: the
		// checkpoint's state hash needs it, a later rollback too.
		if d, _, ok, err := v.activeDeltaNowLocked(); ok && err == nil {
			tx.keepDelta(d)
		}
	}, func(txn dbTxn, journal bool) error {
		var err error
		frozen, err = freezeTxn(txn, v.info.Name, next)
		if err != nil {
			return err
		}
		tx.bind(txn, journal, frozen)
		return fn(tx, frozen, next)
	})
	if err != nil && !logged {
		return "", "", err
	}
	// A checkpoint makes everything before it durable: the metadata store
	// syncs while the view moves onto the new stack, which the committed
	// head already names (through the intent log, the log's record is
	// durable already; a failure to keep the left data file for a later
	// sync is reported once the view is on the new stack).
	synced := afterQuiesce(logged, behind, err, v.s.Sync)
	tx.rememberDeltas([]string{frozen})
	punch := v.holdFreedLocked()
	// The tree is the same over the new stack. What the cache holds of
	// the keys the frozen layer records names it as the one being
	// written: that is rebuilt lazily; the rest stays.
	var changed *changedKeys
	if d := tx.deltas[frozen]; d != nil {
		changed = d.keys()
	}
	stack := append([]string{next}, v.stack...)
	v.useSpareLocked(next)
	kept := v.viewOnlyLocked()
	err = v.restackLocked(stack, changed)
	v.keepLocked(kept)
	v.pre.complete = true // next is empty
	serr := <-synced
	punch(serr == nil)
	if serr != nil {
		return "", "", serr
	}
	if !logged {
		// Everything is durable: the intent log may start again.
		v.restartWALAfterLocked(v.walSeq.Load())
	}
	if err != nil {
		return "", "", err
	}
	return frozen, next, nil
}

// viewOnly is what only the view knows of, which a freeze must carry over
// to the new stack: open tmpfiles (their "may be linked" mark is never
// stored, nor is the record of one never written) and zombies (removed
// inodes the kernel still holds, whose records may be gone from the
// store). The tree is the same over the new stack, so they stay what they
// are. A rollback or restore does not keep them: the tree changes, and
// the handles of the old state are stale (View.Epoch).
type viewOnly struct {
	tmps    []*inodeState
	zombies map[uint64]*inodeState
}

func (v *View) viewOnlyLocked() viewOnly {
	var k viewOnly
	for ino, st := range v.tmps {
		if v.inodes[ino] != st {
			delete(v.tmps, ino) // a rollback moved the view off it
			continue
		}
		k.tmps = append(k.tmps, st)
	}
	k.zombies = v.zombies
	return k
}

// keepLocked puts what viewOnlyLocked took back into the view after a
// freeze moved it onto a new stack. Their records and blocks now belong
// to the frozen layer (the written and sealed ones are stored there): a
// change copies them up again, and the block map is reloaded.
func (v *View) keepLocked(k viewOnly) {
	for _, st := range k.tmps {
		settleBelow(st)
		v.inodes[st.ino] = st
	}
	for ino, st := range k.zombies {
		settleBelow(st)
		v.zombies[ino] = st
	}
}

// settleBelow makes st, cached while its layer was the active one, an
// inode of the layers below the new active layer.
func settleBelow(st *inodeState) {
	if st.inActive {
		st.rec = st.rec.clone()
		st.rec.Floor = -1
		st.inActive = false
	}
	st.blocksLoaded, st.allocKnown = false, false
	st.active, st.frozen = nil, nil
	st.dirtyRec, st.dirtyBlocks = false, nil
}

// holdFreedLocked takes the active layer's data file out of the view,
// with the slots freed in it, before the view moves to another stack; the
// function it returns punches them once the changes that freed them are
// durable (ok) and closes the file.
func (v *View) holdFreedLocked() func(ok bool) {
	layer := v.activeLayer()
	f, freed, durable := v.files[layer], append(v.takeFreedLocked(), v.moved...), append(v.punchable, v.reuse...)
	v.moved, v.punchable, v.reuse, v.reusePages = nil, nil, nil, 0
	delete(v.files, layer)
	return func(ok bool) {
		if f == nil {
			return
		}
		if ok {
			v.punchLocked(f, freed)
		}
		v.punchLocked(f, durable)
		f.Close()
	}
}

// RepointFunc records, in the transaction that moves a sandbox's head, what
// the caller keeps about the move. left are the layers of the old stack that
// the new one does not contain (they are now archived, top first); joined
// are the archived layers the new stack brings back.
type RepointFunc func(tx *Txn, left, joined []string, next string) error

// Repoint moves a sandbox's head to a new empty active layer over parent, a
// frozen or archived layer or "" for the base alone, in one transaction
// that also runs fn. The old
// active layer is sealed and archived with the other layers that leave the
// stack, so nothing is lost and the move can be undone. A live view in this
// process switches to the new stack before Repoint returns; the caller then
// tells the kernel (fs.Mount.Invalidate).
func (s *Store) Repoint(name, parent string, fn RepointFunc) (next string, err error) {
	next, _, err = s.repoint(name, parent, fn, false, nil)
	return next, err
}

// RepointDiff is Repoint that also returns what differs between the state
// the sandbox leaves (its head, active layer included) and the one it
// moves to, as Compare(name, head, parent, true) would. With a live view
// it is told from the deltas of the layers the two stacks do not share
// and from the view's caches, not by reading both trees; otherwise ch is
// nil and the caller compares.
func (s *Store) RepointDiff(name, parent string, fn RepointFunc) (next string, ch *Changes, err error) {
	return s.repoint(name, parent, fn, true, nil)
}

// MovedFunc is told what a repoint of a live view touches (nil when that
// is not known): the caller drops the kernel's caches of the mount with it
// (fs.Mount.InvalidateTouched). It is told as soon as that is known, while
// the view is held for the move, so every request answered after it sees
// the state moved to; when the move then fails, the view still shows the
// state it had, and the caller drops every cache (rereads cost time, not
// correctness).
type MovedFunc func(t *Touched)

// RepointDiffMoved is RepointDiff that runs moved, in its own goroutine,
// as soon as the repoint of a live view knows what it touches (the
// difference the last idle sync told, or the one it makes), before or
// while the move commits, the view moves and the list of changes is
// finished; or, when that is not known, once the view shows the new
// state. It returns once moved has returned, and only after it let go of
// the view's locks, so moved may wait for requests to the mount (a kernel
// cache drop can). Without a live view moved is not called.
func (s *Store) RepointDiffMoved(name, parent string, fn RepointFunc, moved MovedFunc) (next string, ch *Changes, err error) {
	return s.repoint(name, parent, fn, true, moved)
}

func (s *Store) repoint(name, parent string, fn RepointFunc, wantDiff bool, moved MovedFunc) (next string, ch *Changes, err error) {
	s.mu.Lock()
	v := s.views[name]
	s.mu.Unlock()
	tx := &Txn{s: s}
	var rd *repointDiff
	// Registered before the release below, so it runs after it: moved may
	// wait on requests that need the view.
	var movedDone chan struct{}
	defer func() {
		if movedDone != nil {
			<-movedDone
		}
	}()
	startMoved := func(t *Touched) {
		movedDone = make(chan struct{})
		go func() {
			defer close(movedDone)
			moved(t)
		}()
	}
	var touched *Touched
	next = NewID()
	var stack, left []string
	body := func(txn dbTxn, journal bool) error {
		var info SandboxInfo
		if err := getJSON(txn, keySandbox(name), &info); err != nil {
			return fmt.Errorf("sandbox %s: %w", name, err)
		}
		// A rollback's target lies on the chain from the head: only the
		// records from the head down to it are read (the layers that
		// leave, and the target), and the chain below it is the live
		// view's stack's tail, so a rollback costs the same at any depth.
		// A restore (the target off the chain) reads both chains.
		head := info.Head // the active layer, which leaves
		old, onChain, err := chainTo(txn, head, parent)
		if err != nil {
			return err
		}
		var newInfos []LayerInfo
		var newChain []string
		if onChain {
			newInfos = old[len(old)-1:]
			old = old[:len(old)-1]
			if v != nil {
				k := len(old)
				if len(v.stack) <= k || !slices.Equal(v.stack[:k], layerIDs(old)) || v.stack[k] != parent {
					return fmt.Errorf("sandbox %s: the live view's stack %v is not the stored chain: %w", name, v.stack, ErrCorrupt)
				}
				newChain = v.stack[k:]
			}
		} else if parent != "" {
			if newInfos, err = chainInfos(txn, parent); err != nil {
				return err
			}
		}
		// parent "" is the base alone (no layer).
		if len(newInfos) > 0 && newInfos[0].State == StateActive {
			return fmt.Errorf("layer %s is the active layer: %w", parent, ErrInvalid)
		}
		if newChain == nil {
			newChain = layerIDs(newInfos)
		}
		in := map[string]bool{}
		for _, id := range newChain {
			in[id] = true
		}
		var leaving, joined []string
		for _, l := range old {
			if in[l.ID] {
				continue
			}
			leaving = append(leaving, l.ID)
			if err := setLayerState(txn, l.ID, StateArchived); err != nil {
				return err
			}
		}
		for _, l := range newInfos {
			if l.State == StateArchived {
				joined = append(joined, l.ID)
				if err := setLayerState(txn, l.ID, StateFrozen); err != nil {
					return err
				}
			}
		}
		nl := LayerInfo{ID: next, Sandbox: name, Parent: parent, State: StateActive, Created: time.Now().UTC()}
		if err := putJSON(txn, keyLayer(next), nl); err != nil {
			return err
		}
		info.Head = next
		if err := putJSON(txn, keySandbox(name), info); err != nil {
			return err
		}
		stack = append([]string{next}, newChain...)
		tx.bind(txn, journal, head)
		left = leaving
		return fn(tx, leaving, joined, next)
	}
	logged := false
	var behind func() error
	if v != nil {
		defer v.release()
		logged, behind, err = v.quiesce(func() {
			// The state being left is final: what it changed, and how it
			// differs from the target, are told while its data syncs, or
			// were told by the idle sync when nothing changed since.
			d, k, ok, err := v.activeDeltaNowLocked()
			if !ok || err != nil {
				return
			}
			tx.keepDelta(d)
			if !wantDiff {
				return
			}
			if rd = k.backTo(parent); rd == nil {
				rd, _ = v.diffLocked(parent, d)
			}
			if rd == nil {
				return
			}
			touched = rd.changed.touched()
			// Every request waits for the view from here until it shows
			// the new state, so the kernel's caches of what the move
			// touches can go now, while the move commits: an answer the
			// kernel asks for meanwhile is the new state's. The caller
			// waits for it only once the view is released (the defers),
			// as the kernel may hold a lock a waiting request needs. A
			// move that fails after this only cost the kernel rereads.
			if moved != nil {
				startMoved(touched)
			}
		}, body)
	} else {
		err = s.update(func(txn *badger.Txn) error { return body(txn, false) })
	}
	if err != nil && !logged {
		return "", nil, err
	}
	// The metadata store syncs while the view moves onto the new stack,
	// which the committed head already names (through the intent log, the
	// log's record is durable already; a failure to keep the left data
	// file for a later sync is reported once the view is on it).
	synced := afterQuiesce(logged, behind, err, s.Sync)
	tx.rememberDeltas(left)
	punch := func(bool) {}
	if v != nil {
		punch = v.holdFreedLocked()
		v.useSpareLocked(next)
		// What the layers left and joined record is forgotten; when they
		// are not all known, everything is.
		var changed *changedKeys
		if rd != nil {
			changed = rd.changed
		}
		err = v.restackLocked(stack, changed)
		v.pre.complete = true // next is empty
		v.epoch.Add(1)
		var t *Touched
		if rd != nil && err == nil {
			t = touched
		}
		if v.onRepoint != nil {
			v.onRepoint(t)
		}
		if moved != nil && err == nil && movedDone == nil {
			startMoved(t)
		}
		if rd != nil && err == nil {
			// A diff that cannot be finished is left to the caller.
			ch, _ = rd.finishLocked(v, t)
		}
	}
	serr := <-synced
	punch(serr == nil)
	if serr != nil {
		return "", nil, serr
	}
	if v != nil && !logged {
		// Everything is durable: the intent log may start again.
		v.restartWALAfterLocked(v.walSeq.Load())
	}
	if err != nil {
		return "", nil, err
	}
	return next, ch, nil
}

func setLayerState(txn dbTxn, id, state string) error {
	var l LayerInfo
	if err := getJSON(txn, keyLayer(id), &l); err != nil {
		return fmt.Errorf("layer %s: %w", id, err)
	}
	l.State = state
	return putJSON(txn, keyLayer(id), l)
}

// SetLayerState changes a layer's state inside a transaction (prune and
// fork use it). An active layer cannot be changed this way.
func (t *Txn) SetLayerState(id, state string) error {
	var l LayerInfo
	if err := getJSON(t.txn, keyLayer(id), &l); err != nil {
		return fmt.Errorf("layer %s: %w", id, err)
	}
	if l.State == StateActive {
		return fmt.Errorf("layer %s: %w", id, ErrInvalid)
	}
	return setLayerState(t.txn, id, state)
}

// Layer reads a layer record inside a transaction.
func (t *Txn) Layer(id string) (LayerInfo, error) {
	if err := t.fault("layer", id); err != nil {
		return LayerInfo{}, err
	}
	var l LayerInfo
	if err := getJSON(t.txn, keyLayer(id), &l); err != nil {
		return LayerInfo{}, fmt.Errorf("layer %s: %w", id, err)
	}
	return l, nil
}

// Sandbox reads a sandbox record inside a transaction.
func (t *Txn) Sandbox(name string) (SandboxInfo, error) {
	var info SandboxInfo
	if err := getJSON(t.txn, keySandbox(name), &info); err != nil {
		return SandboxInfo{}, fmt.Errorf("sandbox %s: %w", name, err)
	}
	return info, nil
}

// Usage is what a layer holds: its block map entries, the files they
// belong to, and the bytes their slots take in the layer's data file (a
// block copied up from a short file takes only the pages it needs, so
// Bytes is what the layer costs on disk, not Blocks times the block size).
type Usage struct {
	Blocks int64
	Files  int
	Bytes  int64
	// Shared is how many of Blocks a layer below keeps the content of
	// (a dedup pass moved them): they take no bytes here.
	Shared int64
}

// LayerUsage counts what a layer holds (Usage).
func (s *Store) LayerUsage(id string) (Usage, error) {
	if err := s.fault("usage", id); err != nil {
		return Usage{}, err
	}
	var u Usage
	err := s.view(func(txn *badger.Txn) error {
		var err error
		u, err = layerUsage(txn, id)
		return err
	})
	return u, err
}

// layerUsage reads a layer's block records (LayerUsage).
func layerUsage(txn dbTxn, layer string) (Usage, error) {
	var u Usage
	prefix := prefixLayerTable(tBlock, layer)
	var last []byte
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 256})
	defer it.Close()
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()
		if len(k) != len(prefix)+17 {
			return Usage{}, fmt.Errorf("block key %q: %w", k, ErrCorrupt)
		}
		ref, err := decodeItem(it.Item(), decodeBlockRef)
		if err != nil {
			return Usage{}, fmt.Errorf("block %q of layer %s: %w", k, layer, err)
		}
		u.Blocks++
		if ref.Home == "" {
			u.Bytes += ref.capBytes()
		} else {
			u.Shared++ // kept in another slot: none of its own
		}
		if ino := k[len(prefix) : len(prefix)+8]; string(ino) != string(last) {
			u.Files++
			last = append(last[:0], ino...)
		}
	}
	return u, nil
}

// OpenSnapshot opens a read-only view of the stack whose top is layer
// (frozen or archived) of sandbox name: what the sandbox looked like when
// that layer was frozen, if a pin names the layer (a checkpoint, an
// archive): of a layer no pin names, a collection keeps only what the
// stacks above it show (hidden.go). While open, the snapshot keeps its
// stack as it is. It does not count as the sandbox's live view. With
// layer "" it shows the sandbox's base alone, as it is now.
func (s *Store) OpenSnapshot(name, layer string) (*View, error) {
	var info SandboxInfo
	var stack []string
	err := s.view(func(txn *badger.Txn) error {
		if err := getJSON(txn, keySandbox(name), &info); err != nil {
			return fmt.Errorf("sandbox %s: %w", name, err)
		}
		if layer == "" {
			// A layer id no record names: an empty layer over the base.
			stack = []string{"base-" + NewID()}
			return nil
		}
		var err error
		stack, err = chainOf(txn, layer)
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
		s: s, info: info, ro: true, bs: int64(info.BlockSize), base: base,
		origins:  map[uint64]string{RootIno: ""},
		bparent:  map[uint64]uint64{},
		opens:    map[uint64]int{},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
		snapshot: true,
	}
	if err := v.setStackLocked(stack); err != nil {
		base.close()
		return nil, err
	}
	close(v.stopped)
	s.mu.Lock()
	s.snaps[v] = struct{}{}
	s.mu.Unlock()
	return v, nil
}

// LiveView returns the sandbox's open view in this process, or nil.
func (s *Store) LiveView(name string) *View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.views[name]
}

// Fork creates sandbox name over the frozen layer of another sandbox: it
// shares that layer and everything below it, and copies no data. The
// layer should be pinned (a checkpoint's): one no pin names shows only
// what collections left of it (hidden.go).
func (s *Store) Fork(name, layer string) (SandboxInfo, error) {
	if !ValidName(name) {
		return SandboxInfo{}, fmt.Errorf("sandbox name %q: %w", name, ErrInvalid)
	}
	var info SandboxInfo
	err := s.update(func(txn *badger.Txn) error {
		var old SandboxInfo
		if err := getJSON(txn, keySandbox(name), &old); err == nil {
			return fmt.Errorf("sandbox %s: %w", name, ErrExists)
		}
		var l LayerInfo
		if err := getJSON(txn, keyLayer(layer), &l); err != nil {
			return fmt.Errorf("layer %s: %w", layer, err)
		}
		if l.State == StateActive {
			return fmt.Errorf("layer %s is active: %w", layer, ErrInvalid)
		}
		var from SandboxInfo
		if err := getJSON(txn, keySandbox(l.Sandbox), &from); err != nil {
			return fmt.Errorf("sandbox %s of layer %s: %w", l.Sandbox, layer, err)
		}
		now := time.Now().UTC()
		info = SandboxInfo{Name: name, Base: from.Base, BlockSize: from.BlockSize, Head: NewID(), Created: now}
		if err := putJSON(txn, keyLayer(info.Head), LayerInfo{ID: info.Head, Sandbox: name, Parent: layer, State: StateActive, Created: now}); err != nil {
			return err
		}
		return putJSON(txn, keySandbox(name), info)
	})
	return info, err
}

// Layers lists the layers of a sandbox's stack (top first) and, with
// archived, the archived layers the sandbox created.
func (s *Store) Layers(name string, archived bool) ([]LayerInfo, error) {
	if err := s.fault("layers", name); err != nil {
		return nil, err
	}
	var out []LayerInfo
	err := s.view(func(txn *badger.Txn) error {
		stack, err := stackOf(txn, name)
		if err != nil {
			return err
		}
		for _, id := range stack {
			var l LayerInfo
			if err := getJSON(txn, keyLayer(id), &l); err != nil {
				return err
			}
			out = append(out, l)
		}
		if !archived {
			return nil
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tLayer, '/'}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var l LayerInfo
			if err := it.Item().Value(func(b []byte) error { return jsonUnmarshal(b, &l) }); err != nil {
				return err
			}
			if l.Sandbox == name && l.State == StateArchived {
				out = append(out, l)
			}
		}
		return nil
	})
	return out, err
}
