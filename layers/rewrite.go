package layers

// Rewriting a sealed block in place.
//
// A seal makes a block's slot immutable: its checksums are stored, so a
// write in place that a crash cut short would leave a block that fails
// them. The next write into the block therefore copies it to a new slot,
// and the next fsync logs the whole copy: for a database rewriting one
// page of a 64 KiB block between fsyncs, a 64 KiB copy and a 64 KiB log
// record per transaction, where ext4 writes one page.
//
// A slot sealed by a Sync through the intent log has all its bytes in a
// record that a crash replays over it, page by page where the committed
// record of its block expects that page, for as long as no data sync of
// the layer's file has said otherwise (walCovered). While that holds, a
// write may reopen the slot and write in place: a crash before the next
// Sync leaves pages that the replay puts back as the record holds them
// (what that Sync made durable), and the next Sync through the log
// records only the pages written since, each of which the replay writes
// where the committed record now expects it. Such a slot is registered
// (View.reopen) once the record holding it is durable, and every seal
// takes the register away: a full sync, a checkpoint or a rollback
// syncs the data file after its seal (the record no longer needed), and
// a Sync through the log gives the register back once its own record is
// durable, unless another seal came in between (View.sealGen), which
// may have started a data sync that says more records are synced.
//
// A reopening write holds ioMu alone: a read that resolved the slot
// while it was sealed checks the old checksums against what it reads.

// reopenKey names a block of the active layer in View.reopen.
type reopenKey struct{ ino, blk uint64 }

// reopenableLocked reports whether ref, the sealed slot of block blk of
// inode ino in the active layer, may be written in place by a write
// ending at file offset end. The caller holds mu.
func (v *View) reopenableLocked(ino, blk uint64, ref *blockRef, end int64) bool {
	if !ref.sealed() || ref.Home != "" || v.s.noRewrite.Load() > 0 {
		return false
	}
	slot, ok := v.reopen[reopenKey{ino, blk}]
	return ok && slot == ref.Slot && v.slotHolds(ref, blk, end)
}

// reopenRangeLocked is reopenableLocked for every block the write of
// [off, end) of st touches that has a sealed slot: whether any may be
// reopened, and, when reopen is set, reopens them.
func (v *View) reopenRangeLocked(st *inodeState, off, end int64, reopen bool) bool {
	if len(v.reopen) == 0 || end <= off {
		return false
	}
	found := false
	for blk := uint64(off / v.bs); blk <= uint64((end-1)/v.bs); blk++ {
		ref, ok := st.active[blk]
		if !ok || !v.reopenableLocked(st.ino, blk, ref, end) {
			continue
		}
		found = true
		if reopen {
			pages := len(ref.CRCs)
			ref.open = true
			ref.dirty = make([]bool, pages)
			ref.zero = nil
			ref.rewritten = make([]bool, pages)
			v.markBlock(st, blk)
			v.rewrites.Add(1)
		}
	}
	return found
}

// takeReopenLocked is called by every seal: the register goes aside, for
// a Sync through the log to give back (giveBackReopen).
func (v *View) takeReopenLocked() {
	v.sealGen++
	v.reopenAside, v.reopen = v.reopen, nil
}

// reopenBack is what a Sync through the log gives back to the register
// once its record is durable: the register its seal took, and the slots
// it sealed whole, whose bytes its record holds.
type reopenBack struct {
	gen   uint64
	layer string
	keep  map[reopenKey]uint64
	fresh []sealedSlot
}

// reopenBackLocked is what the seal just made may give back, when the
// Sync goes through the log with the sealed data in its record
// (withData); without it, nothing: a slot this seal sealed would have
// its bytes in no record, and one the register names after its block was
// freed may be such a slot again. (A Sync has no data to log only after
// a data sync that followed the last write, whose seal emptied the
// register.) The caller holds mu, right after the seal.
func (v *View) reopenBackLocked(withData bool) reopenBack {
	b := reopenBack{gen: v.sealGen, layer: v.activeLayer()}
	aside := v.reopenAside
	v.reopenAside = nil
	if !withData {
		return b
	}
	b.keep = aside
	for _, ss := range v.sealedNow {
		if ss.whole {
			b.fresh = append(b.fresh, ss)
		}
	}
	return b
}

// giveBackReopen puts b into the register, once the record of the Sync
// that made it is durable, unless another seal came since.
func (v *View) giveBackReopen(b reopenBack) {
	if len(b.keep) == 0 && len(b.fresh) == 0 {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.closed || v.sealGen != b.gen || v.activeLayer() != b.layer || v.dataFailed() != nil {
		return
	}
	if v.reopen == nil {
		v.reopen = make(map[reopenKey]uint64, len(b.keep)+len(b.fresh))
	}
	for k, slot := range b.keep {
		v.reopen[k] = slot
	}
	for _, ss := range b.fresh {
		v.reopen[reopenKey{ss.ino, ss.blk}] = ss.span.at
	}
}

// rewrittenSpans are the runs of pages of reopened slot ref written since
// it was reopened, inside the slot: what a seal through the log records
// of it.
func rewrittenSpans(ref *blockRef) []slotSpan {
	var spans []slotSpan
	n := min(len(ref.rewritten), ref.capPages())
	for p := 0; p < n; {
		if !ref.rewritten[p] {
			p++
			continue
		}
		q := p
		for q < n && ref.rewritten[q] {
			q++
		}
		spans = append(spans, slotSpan{ref.Slot + uint64(p), uint64(q - p)})
		p = q
	}
	return spans
}

// PauseRewrites stops writes from rewriting sealed blocks in place until
// the function it returns is called: fsck syncs the live views and then
// reads their layers' data files against the stored checksums, which a
// block rewritten meanwhile would fail until its next seal.
func (s *Store) PauseRewrites() func() {
	s.noRewrite.Add(1)
	return func() { s.noRewrite.Add(-1) }
}
