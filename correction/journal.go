package correction

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/layers"
)

// Phases of an apply, as its journal records them.
const (
	phaseStaging = "staging" // content is being staged; the base is untouched
	phaseMoving  = "moving"  // everything is staged; moves into the base may have begun
	phaseUndone  = "undone"  // every move was undone; the staging directory is to go
	phaseDone    = "done"    // applied and recorded; the staging directory is to go
)

// Kinds of the steps of an apply's move phase.
const (
	stepOut   = "out"   // move base Path into the staging directory as Name
	stepIn    = "in"    // move staged Name to base Path
	stepMkdir = "mkdir" // make directory Path, mode 0700 until its chmod step
	stepChmod = "chmod" // set the permission bits of Path from Old to Mode
	stepXattr = "xattr" // turn the extended attributes of Path from OldX into X (mode Old before)
	stepOwner = "owner" // give Path from OldUID:OldGID to UID:GID, keeping mode Mode (Old before) and file capability X (OldX before)
	stepTimes = "times" // set the access and modification times of Path from OldTimes to Times
)

// moveStep is one step of an apply's move phase.
type moveStep struct {
	Op   string `json:"op"`
	Path string `json:"path"`
	Name string `json:"name,omitempty"`
	Mode uint32 `json:"mode,omitempty"`
	Old  uint32 `json:"old,omitempty"`
	// Made: the path is a directory the apply makes (mkdir, chmod, xattr).
	Made bool    `json:"made,omitempty"`
	X    []xattr `json:"x,omitempty"`
	OldX []xattr `json:"old_x,omitempty"`
	// Owner steps.
	UID    uint32 `json:"uid,omitempty"`
	GID    uint32 `json:"gid,omitempty"`
	OldUID uint32 `json:"old_uid,omitempty"`
	OldGID uint32 `json:"old_gid,omitempty"`
	// Times steps: access and modification time, in nanoseconds.
	Times    []int64 `json:"times,omitempty"`
	OldTimes []int64 `json:"old_times,omitempty"`
}

// applyJournal is the intent record of an apply, kept under
// x/plan/apply/<plan id> from the transaction that marks the plan applying
// until the apply is over: enough to undo it after a crash.
type applyJournal struct {
	Plan   string     `json:"plan"`
	Base   string     `json:"base"`
	Stage  string     `json:"stage"`  // the staging directory's name in Base
	Phase  string     `json:"phase"`  // staging, moving, undone or done
	Status string     `json:"status"` // the plan's status before the apply
	Steps  []moveStep `json:"steps"`
}

func keyApply(id string) string { return "x/plan/apply/" + id }

// planSteps lists the move phase of cs in order: first what goes is moved
// away (deleted paths, then the old versions of replaced ones), then what
// comes is put in place, parents first, then owners change in place, then
// extended attributes (existing paths, made directories), then modes are
// set: files first, then directories children first, so that a read-only
// directory is made so after its entries are in place. Owners come first,
// since a chown drops set-id bits and file capabilities; modes after
// attributes, since an access ACL sets group bits. Times come last, in the
// order of modes, since every move into a directory sets its times.
func planSteps(cs changeSet) []moveStep {
	var steps []moveStep
	for i, p := range cs.top {
		steps = append(steps, moveStep{Op: stepOut, Path: p, Name: "d" + strconv.Itoa(i)})
	}
	for _, c := range cs.changes {
		if c.op == opReplace {
			steps = append(steps, moveStep{Op: stepOut, Path: c.path, Name: oldName(c.n)})
		}
	}
	var modes []change
	for _, c := range cs.changes {
		switch {
		case c.op == opXattr, c.op == opAttr:
		case c.op == opChmod:
			modes = append(modes, c)
		case c.live.typ() == syscall.S_IFDIR:
			modes = append(modes, c)
			steps = append(steps, moveStep{Op: stepMkdir, Path: c.path, Made: true})
		default:
			steps = append(steps, moveStep{Op: stepIn, Path: c.path, Name: stagedName(c.n)})
		}
	}
	for _, c := range cs.changes {
		if c.setOwner {
			a, b := c.live.attr, c.old.attr
			steps = append(steps, moveStep{Op: stepOwner, Path: c.path, UID: a.UID, GID: a.GID, OldUID: b.UID, OldGID: b.GID,
				Mode: c.live.perm(), Old: c.old.perm(), X: capabilityOf(c.live.xattrs), OldX: capabilityOf(c.old.xattrs)})
		}
	}
	for _, c := range cs.changes {
		switch {
		case c.setXattrs:
			steps = append(steps, moveStep{Op: stepXattr, Path: c.path, X: c.live.xattrs, OldX: c.old.xattrs, Old: c.old.perm()})
		case c.op == opCreate && c.live.typ() == syscall.S_IFDIR && len(c.live.xattrs) > 0:
			steps = append(steps, moveStep{Op: stepXattr, Path: c.path, X: c.live.xattrs, Made: true})
		}
	}
	filesThenDirsChildrenFirst(modes)
	for _, c := range modes {
		s := moveStep{Op: stepChmod, Path: c.path, Mode: c.live.perm(), Old: c.old.perm()}
		if c.op == opCreate {
			s.Old, s.Made = 0o700, true
		}
		steps = append(steps, s)
	}
	// Times: of what changed them in place, and of every made directory
	// (staged files carry their own); files first, then directories
	// children first.
	var times []change
	for _, c := range cs.changes {
		if c.setTimes || c.op == opCreate && c.live.typ() == syscall.S_IFDIR {
			times = append(times, c)
		}
	}
	filesThenDirsChildrenFirst(times)
	for _, c := range times {
		s := moveStep{Op: stepTimes, Path: c.path, Times: []int64{c.live.attr.Atime, c.live.attr.Mtime}}
		if c.op == opCreate {
			s.Made = true
		} else {
			s.OldTimes = []int64{c.old.attr.Atime, c.old.attr.Mtime}
		}
		steps = append(steps, s)
	}
	return steps
}

// filesThenDirsChildrenFirst orders cs (in the live tree's order, parents
// first) files first, then directories children first: the order in which
// setting a directory's mode or times is not undone by a later step below
// it.
func filesThenDirsChildrenFirst(cs []change) {
	sort.SliceStable(cs, func(i, j int) bool {
		di, dj := cs[i].live.typ() == syscall.S_IFDIR, cs[j].live.typ() == syscall.S_IFDIR
		if di != dj {
			return !di
		}
		return di && cs[i].n > cs[j].n
	})
}

// do makes step s.
func (h *host) do(s moveStep) error {
	switch s.Op {
	case stepOut:
		return h.moveOut(s.Path, s.Name)
	case stepIn:
		return h.moveIn(s.Name, s.Path)
	case stepMkdir:
		return h.mkdir(s.Path)
	case stepXattr:
		return h.setXattrs(s.Path, s.OldX, s.X)
	case stepOwner:
		return h.chown(s.Path, s.UID, s.GID, s.Mode, s.X)
	case stepTimes:
		return h.utimes(s.Path, s.Times)
	}
	return h.chmod(s.Path, s.Mode)
}

// undo undoes step s if the base and the staging directory show that it
// was made, and does nothing otherwise: run over the steps of an apply in
// reverse, after any prefix of them was made, it puts the base back as it
// was. A staged name is in the staging directory from the start of the
// move phase until its step moves it in; a moved-out one only after its
// step; a directory the apply makes is one the base did not have (at most
// a non-directory that is moved away first).
func (h *host) undo(s moveStep) error {
	if s.Made {
		st, err := h.lstat(s.Path)
		if absent(err) || (err == nil && st.Mode&syscall.S_IFMT != syscall.S_IFDIR) {
			return nil // not made
		}
	}
	switch s.Op {
	case stepOut:
		made, err := h.staged(s.Name)
		if !made {
			return err
		}
		return h.moveIn(s.Name, s.Path)
	case stepIn:
		there, err := h.staged(s.Name)
		if there || err != nil {
			return err
		}
		return h.moveOut(s.Path, s.Name)
	case stepMkdir:
		pfd, name, err := h.parent(s.Path)
		if err != nil {
			return err
		}
		defer unix.Close(pfd)
		if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil {
			return fmt.Errorf("rmdir %s: %w", s.Path, err)
		}
		return nil
	case stepXattr:
		err := h.setXattrs(s.Path, s.X, s.OldX)
		if err == nil && !s.Made && hasAccessACL(s) {
			// Setting an access ACL set the mode's bits; removing it
			// does not set them back.
			err = h.chmod(s.Path, s.Old)
		}
		if err != nil && !absent(err) {
			return err
		}
		return nil
	case stepOwner:
		if err := h.chown(s.Path, s.OldUID, s.OldGID, s.Old, s.OldX); err != nil && !absent(err) {
			return err
		}
		return nil
	case stepTimes:
		if s.Made {
			return nil // the directory goes in the mkdir's undo
		}
		if err := h.utimes(s.Path, s.OldTimes); err != nil && !absent(err) {
			return err
		}
		return nil
	}
	if err := h.chmod(s.Path, s.Old); err != nil && !absent(err) {
		return err
	}
	return nil
}

// hasAccessACL reports whether xattr step s sets or removes an access ACL.
func hasAccessACL(s moveStep) bool {
	for _, x := range append(slices.Clip(s.X), s.OldX...) {
		if x.Name == layers.XattrACLAccess {
			return true
		}
	}
	return false
}

// absent reports whether err says a path is not there (its parent is not
// a directory, or not there either).
func absent(err error) bool { return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) }

// rollback undoes steps in reverse; it goes on past a step it cannot undo
// and reports them all.
func (h *host) rollback(steps []moveStep) error {
	var failed errList
	for i := len(steps) - 1; i >= 0; i-- {
		if err := h.undo(steps[i]); err != nil {
			failed = append(failed, err)
		}
	}
	if failed != nil {
		return fmt.Errorf("undo failed, the staging directory %s keeps what could not be put back: %w", filepath.Join(h.dir, h.name), failed)
	}
	return nil
}

// errList is errors on one line; errors.Is matches each.
type errList []error

func (l errList) Error() string {
	s := make([]string, len(l))
	for i, err := range l {
		s[i] = err.Error()
	}
	return strings.Join(s, "; ")
}

func (l errList) Unwrap() []error { return l }

// commitApply moves the apply of j into phase (the journal and the plan
// in one transaction) and sets j.Phase. Phase staging starts it: the plan
// must not be applied nor applying, and becomes applying. Phase done marks
// the plan applied. Phase "" ends it: the journal goes, and the plan gets
// its status back unless it was applied.
func (m *Manager) commitApply(j *applyJournal, phase string) error {
	err := m.store.Update(func(tx *layers.Txn) error {
		d, err := readPlan(tx, j.Plan)
		if err != nil {
			return err
		}
		p := d.p
		switch phase {
		case phaseStaging:
			if err := final(p); err != nil {
				return err
			}
			j.Status, p.Status = p.Status, StatusApplying
		case phaseDone:
			p.Applied, p.Status, p.AppliedAt = true, StatusApplied, time.Now().UTC()
			// What the sandboxes over this base recorded before lies
			// over content the apply replaced.
			if err := tx.NoteBaseChanged(j.Base, p.AppliedAt); err != nil {
				return err
			}
		case "":
			if j.Phase != phaseDone {
				p.Status = j.Status
			}
		}
		err = d.write(tx)
		if err == nil && phase == "" {
			return tx.Delete(keyApply(j.Plan))
		}
		if err == nil {
			next := *j
			next.Phase = phase
			err = putJSON(tx, keyApply(j.Plan), next)
		}
		return err
	})
	if err == nil {
		j.Phase = phase
	}
	return err
}

// The applies running in this process, by store and plan: their journals
// are not a crash's leftovers. A store is open in one process at a time,
// so every other journal is. recoverMu also serialises recoveries.
var (
	recoverMu sync.Mutex
	running   = map[runningKey]bool{}
)

type runningKey struct {
	store *layers.Store
	plan  string
}

// running records that this process applies plan id, until the function
// it returns is called.
func (m *Manager) running(id string) func() {
	k := runningKey{m.store, id}
	recoverMu.Lock()
	running[k] = true
	recoverMu.Unlock()
	return func() {
		recoverMu.Lock()
		delete(running, k)
		recoverMu.Unlock()
	}
}

// recoverApply finishes the apply of plan id whose journal a dead process
// (or a failed undo) left: see Apply. An apply running in this process is
// left alone.
func (m *Manager) recoverApply(id string) error {
	recoverMu.Lock()
	defer recoverMu.Unlock()
	if running[runningKey{m.store, id}] {
		return nil
	}
	var j applyJournal
	err := m.store.View(func(tx *layers.Txn) error { return getJSON(tx, keyApply(id), "apply journal of plan "+id, &j) })
	if err != nil {
		return err
	}
	h, err := openHost(j.Base, j.Stage)
	if err != nil {
		return fmt.Errorf("plan %s: interrupted apply: %w", id, err)
	}
	defer h.close()
	if j.Phase == phaseMoving {
		err = h.openStage()
		if err == nil {
			err = h.rollback(j.Steps)
		}
		if err == nil {
			err = m.commitApply(&j, phaseUndone)
		}
	}
	if err == nil {
		err = h.removeStage()
	}
	if err == nil {
		err = m.commitApply(&j, "")
	}
	if err != nil {
		return fmt.Errorf("plan %s: interrupted apply: %w", id, err)
	}
	return nil
}

// getJSON decodes the record under key into v; what names it in errors.
func getJSON(tx *layers.Txn, key, what string, v any) error {
	b, err := tx.Get(key)
	if errors.Is(err, layers.ErrNotFound) {
		return fmt.Errorf("%s: %w", what, layers.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %v: %w", what, err, layers.ErrCorrupt)
	}
	return nil
}

// putJSON stores v under key.
func putJSON(tx *layers.Txn, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return tx.Set(key, b)
}
