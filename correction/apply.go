package correction

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/layers"
)

// ApplyResult reports what Apply wrote onto the base (paths relative to it).
type ApplyResult struct {
	Plan     string   `json:"plan"`
	Sandbox  string   `json:"sandbox"`
	Base     string   `json:"base"`
	Added    []string `json:"added"`
	Modified []string `json:"modified"`
	Deleted  []string `json:"deleted"`
	Modes    []string `json:"modes"`
	Millis   float64  `json:"millis"`
}

// Conflict is one base path that changed under the sandbox.
type Conflict struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// ConflictError lists the base paths that changed under the sandbox since
// it was created; errors.Is(err, ErrConflict) holds.
type ConflictError struct {
	Plan      string
	Conflicts []Conflict
}

func (e *ConflictError) Error() string {
	parts := make([]string, len(e.Conflicts))
	for i, c := range e.Conflicts {
		parts[i] = c.Path + " (" + c.Why + ")"
	}
	return fmt.Sprintf("plan %s: %v: %s", e.Plan, ErrConflict, strings.Join(parts, ", "))
}

// Unwrap makes errors.Is(err, ErrConflict) hold.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// applyFault, when set by a test, is called before each step of the move
// phase; an error it returns fails the apply at that step.
var applyFault func(step int) error

// entryState is what a scan records about one path.
type entryState struct {
	attr   layers.Attr
	fp     string // regular files: content fingerprint
	target string // symlinks
}

func (e entryState) typ() uint32  { return e.attr.Mode & syscall.S_IFMT }
func (e entryState) perm() uint32 { return e.attr.Mode & 0o7777 }

// scan lists every path of a view, parents before children. A path whose
// base file vanished or can no longer be reached without crossing a symlink
// (the base changed under the view) is reported in broken, not failed on.
func scan(v *layers.View) (map[string]entryState, []string, []Conflict, error) {
	out := map[string]entryState{}
	var order []string
	var broken []Conflict
	baseGone := func(p string, err error) bool {
		if errors.Is(err, layers.ErrNotFound) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EXDEV) {
			broken = append(broken, Conflict{Path: p, Why: "removed from base: " + err.Error()})
			return true
		}
		return false
	}
	var rec func(dir uint64, prefix string) error
	rec = func(dir uint64, prefix string) error {
		ents, err := v.ReadDir(dir)
		if err != nil {
			if baseGone(prefix, err) {
				return nil
			}
			return fmt.Errorf("%s: %w", prefix, err)
		}
		sort.Slice(ents, func(i, j int) bool { return ents[i].Name < ents[j].Name })
		for _, e := range ents {
			p := path.Join(prefix, e.Name)
			a, err := v.GetAttr(e.Ino)
			st := entryState{attr: a}
			if err == nil {
				switch st.typ() {
				case syscall.S_IFREG:
					st.fp, err = v.Fingerprint(a.Ino)
				case syscall.S_IFLNK:
					st.target, err = v.Readlink(a.Ino)
				}
			}
			if err != nil {
				if baseGone(p, err) {
					continue
				}
				return fmt.Errorf("%s: %w", p, err)
			}
			out[p] = st
			order = append(order, p)
			if a.IsDir() {
				if err := rec(e.Ino, p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	err := rec(layers.RootIno, "")
	return out, order, broken, err
}

const (
	opCreate  = iota // a path the base lacks (or has with another type)
	opReplace        // new content for a file, symlink or node
	opChmod          // permission bits only
)

type change struct {
	op   int
	path string
	live entryState
	old  entryState // opReplace, opChmod: the base's
	n    int        // index of the staged file
}

// changeSet is what a sandbox changed against its base.
type changeSet struct {
	changes []change // in the live tree's order: parents first
	deleted []string // every base path that goes, parents first
	top     []string // the topmost of them: what is moved away
	res     ApplyResult
}

func diffTrees(base map[string]entryState, baseOrder []string, live map[string]entryState, liveOrder []string) changeSet {
	var cs changeSet
	cs.res = ApplyResult{Added: []string{}, Modified: []string{}, Deleted: []string{}, Modes: []string{}}
	gone := map[string]bool{}
	for _, p := range baseOrder {
		b := base[p]
		l, ok := live[p]
		if !ok || l.typ() != b.typ() {
			gone[p] = true
			cs.deleted = append(cs.deleted, p)
			if !gone[path.Dir(p)] {
				cs.top = append(cs.top, p)
			}
			if !ok {
				cs.res.Deleted = append(cs.res.Deleted, p)
			}
		}
	}
	for _, p := range liveOrder {
		l := live[p]
		b, ok := base[p]
		switch {
		case !ok || gone[p]:
			cs.changes = append(cs.changes, change{op: opCreate, path: p, live: l})
			if ok {
				cs.res.Modified = append(cs.res.Modified, p)
			} else {
				cs.res.Added = append(cs.res.Added, p)
			}
		case l.typ() != syscall.S_IFDIR && (l.fp != b.fp || l.target != b.target || l.attr.Rdev != b.attr.Rdev):
			cs.changes = append(cs.changes, change{op: opReplace, path: p, live: l, old: b})
			cs.res.Modified = append(cs.res.Modified, p)
		case l.perm() != b.perm():
			cs.changes = append(cs.changes, change{op: opChmod, path: p, live: l, old: b})
			cs.res.Modes = append(cs.res.Modes, p)
		}
	}
	for i := range cs.changes {
		cs.changes[i].n = i
	}
	return cs
}

const resolveSafe = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// host writes below one base directory, resolving every path beneath it
// without following any symlink.
type host struct {
	root  int // O_PATH descriptor of the base
	stage int // O_PATH descriptor of the staging directory
	dir   string
	name  string // of the staging directory, in the base root
}

func (h *host) openat(rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(h.root, rel, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC | unix.O_NOFOLLOW), Resolve: resolveSafe})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: rel, Err: err}
		}
		return fd, nil
	}
}

func (h *host) lstat(rel string) (unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := h.openat(rel, unix.O_PATH)
	if err != nil {
		return st, err
	}
	defer unix.Close(fd)
	return st, unix.Fstat(fd, &st)
}

// parent opens the directory holding rel.
func (h *host) parent(rel string) (int, string, error) {
	fd, err := h.openat(path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY)
	return fd, path.Base(rel), err
}

func (h *host) rename(fromDir int, from string, toDir int, to string) error {
	if err := unix.Renameat2(fromDir, from, toDir, to, unix.RENAME_NOREPLACE); err != nil {
		return fmt.Errorf("rename %s to %s: %w", from, to, err)
	}
	return nil
}

// moveOut moves base path rel into the staging directory as name.
func (h *host) moveOut(rel, name string) error {
	pfd, base, err := h.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return h.rename(pfd, base, h.stage, name)
}

// moveIn moves staged name to base path rel.
func (h *host) moveIn(name, rel string) error {
	pfd, base, err := h.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return h.rename(h.stage, name, pfd, base)
}

// chmod sets the permission bits of rel, which must not be a symlink: the
// mode is changed through a descriptor of the very inode that was checked.
func (h *host) chmod(rel string, perm uint32) error {
	fd, err := h.openat(rel, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return fmt.Errorf("chmod %s: is a symlink: %w", rel, layers.ErrInvalid)
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), perm, 0); err != nil {
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	return nil
}

// newer reports whether st was modified after t. Only the modification
// time counts: a rename (ours, when a failed apply is undone) changes a
// file's ctime, not its content.
func newer(st unix.Stat_t, t time.Time) bool { return st.Mtim.Nano() > t.UnixNano() }

// conflicts checks the base paths the plan touches against the sandbox's
// creation time.
func (h *host) conflicts(cs changeSet, origins []string, since time.Time) []Conflict {
	var out []Conflict
	seen := map[string]bool{}
	add := func(p, why string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, Conflict{Path: p, Why: why})
		}
	}
	// expect says whether the base should have p.
	check := func(p string, expect bool) {
		st, err := h.lstat(p)
		switch {
		case errors.Is(err, unix.ENOENT) || (!expect && errors.Is(err, unix.ENOTDIR)):
			if expect {
				add(p, "removed from base")
			}
		case err != nil:
			add(p, err.Error())
		case !expect:
			add(p, "appeared in base")
		case st.Mode&syscall.S_IFMT != syscall.S_IFDIR && newer(st, since):
			add(p, "changed in base")
		}
	}
	gone := map[string]bool{}
	for _, p := range cs.deleted {
		gone[p] = true
		check(p, true)
		if st, err := h.lstat(p); err == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR && newer(st, since) {
			add(p, "entries changed in base")
		}
	}
	created := map[string]bool{}
	for _, c := range cs.changes {
		if c.op == opCreate {
			created[c.path] = true
			if created[path.Dir(c.path)] {
				continue // its parent is new: nothing in the base to check
			}
		}
		check(c.path, c.op != opCreate || gone[c.path])
	}
	for _, p := range origins {
		check(p, true)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// stageAll writes the new content of every created or replaced non-directory
// into the staging directory.
func (h *host) stageAll(v *layers.View, cs changeSet) error {
	buf := make([]byte, 1<<20)
	for _, c := range cs.changes {
		if c.op == opChmod || c.live.typ() == syscall.S_IFDIR {
			continue
		}
		if err := h.stageOne(v, c, buf); err != nil {
			return fmt.Errorf("stage %s: %w", c.path, err)
		}
	}
	return h.syncfs()
}

// syncfs makes everything written on the base's file system durable.
func (h *host) syncfs() error {
	fd, err := h.openat("", unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

func stagedName(n int) string { return "n" + strconv.Itoa(n) }
func oldName(n int) string    { return "o" + strconv.Itoa(n) }

func (h *host) stageOne(v *layers.View, c change, buf []byte) error {
	name := stagedName(c.n)
	a := c.live.attr
	root := os.Geteuid() == 0
	switch c.live.typ() {
	case syscall.S_IFLNK:
		if err := unix.Symlinkat(c.live.target, h.stage, name); err != nil {
			return err
		}
		if root {
			return unix.Fchownat(h.stage, name, int(a.UID), int(a.GID), unix.AT_SYMLINK_NOFOLLOW)
		}
		return nil
	case syscall.S_IFREG:
		fd, err := unix.Openat(h.stage, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		for off := int64(0); off < a.Size; {
			n, err := v.ReadAt(a.Ino, buf, off)
			if n > 0 {
				if _, werr := f.WriteAt(buf[:n], off); werr != nil {
					return werr
				}
				off += int64(n)
			}
			if n == 0 || (err != nil && !errors.Is(err, io.EOF)) {
				if err == nil {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		if err := f.Truncate(a.Size); err != nil {
			return err
		}
		if root {
			if err := f.Chown(int(a.UID), int(a.GID)); err != nil {
				return err
			}
		}
		if err := f.Chmod(os.FileMode(c.live.perm() & 0o777)); err != nil {
			return err
		}
		if c.live.perm()&^0o777 != 0 {
			if err := unix.Fchmod(fd, c.live.perm()); err != nil {
				return err
			}
		}
	default: // fifos, sockets, devices
		if err := unix.Mknodat(h.stage, name, a.Mode, int(a.Rdev)); err != nil {
			return err
		}
		if root {
			if err := unix.Fchownat(h.stage, name, int(a.UID), int(a.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return err
			}
		}
		if err := unix.Fchmodat(h.stage, name, c.live.perm(), 0); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(a.Atime), unix.NsecToTimespec(a.Mtime)}
	return unix.UtimesNanoAt(h.stage, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// move puts the staged changes in place; on failure it undoes every step it
// made, in reverse, and returns the error.
func (h *host) move(cs changeSet) (undoFailed bool, err error) {
	var undo []func() error
	step := 0
	do := func(fn func() error, back func() error) error {
		if applyFault != nil {
			if err := applyFault(step); err != nil {
				return err
			}
		}
		step++
		if err := fn(); err != nil {
			return err
		}
		undo = append(undo, back)
		return nil
	}
	defer func() {
		if err == nil {
			return
		}
		var failed []string
		for i := len(undo) - 1; i >= 0; i-- {
			if uerr := undo[i](); uerr != nil {
				failed = append(failed, uerr.Error())
			}
		}
		if failed != nil {
			undoFailed = true
			err = fmt.Errorf("%w; undo failed, the staging directory %s keeps what could not be put back: %s", err, filepath.Join(h.dir, h.name), strings.Join(failed, "; "))
		}
	}()
	// 1. Move away what goes: deleted paths and the old versions of
	// replaced ones.
	for i, p := range cs.top {
		p, name := p, "d"+strconv.Itoa(i)
		if err := do(func() error { return h.moveOut(p, name) }, func() error { return h.moveIn(name, p) }); err != nil {
			return false, err
		}
	}
	for _, c := range cs.changes {
		if c.op != opReplace {
			continue
		}
		p, name := c.path, oldName(c.n)
		if err := do(func() error { return h.moveOut(p, name) }, func() error { return h.moveIn(name, p) }); err != nil {
			return false, err
		}
	}
	// 2. Put in what comes, parents first.
	var dirs []change
	for _, c := range cs.changes {
		c := c
		switch {
		case c.op == opChmod:
			dirs = append(dirs, c)
		case c.live.typ() == syscall.S_IFDIR:
			dirs = append(dirs, c)
			err := do(func() error {
				pfd, name, err := h.parent(c.path)
				if err != nil {
					return err
				}
				defer unix.Close(pfd)
				return unix.Mkdirat(pfd, name, 0o700)
			}, func() error {
				pfd, name, err := h.parent(c.path)
				if err != nil {
					return err
				}
				defer unix.Close(pfd)
				return unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
			})
			if err != nil {
				return false, fmt.Errorf("mkdir %s: %w", c.path, err)
			}
		default:
			name := stagedName(c.n)
			if err := do(func() error { return h.moveIn(name, c.path) }, func() error { return h.moveOut(c.path, name) }); err != nil {
				return false, err
			}
		}
	}
	// 3. Modes: files first, then directories children first, so that a
	// read-only directory is made so after its entries are in place.
	sort.SliceStable(dirs, func(i, j int) bool {
		di, dj := dirs[i].live.typ() == syscall.S_IFDIR, dirs[j].live.typ() == syscall.S_IFDIR
		if di != dj {
			return !di
		}
		return di && dirs[i].n > dirs[j].n
	})
	for _, c := range dirs {
		c := c
		old := c.old.perm()
		if c.op == opCreate {
			old = 0o700
		}
		if err := do(func() error { return h.chmod(c.path, c.live.perm()) }, func() error { return h.chmod(c.path, old) }); err != nil {
			return false, err
		}
	}
	return false, h.syncfs()
}

// Apply writes the net changes of the plan's sandbox — creates, edits,
// deletes, renames (as a delete and a create), modes, symlinks — onto its
// base directory, and marks the plan applied. It refuses with a
// *ConflictError when a base path the sandbox touches changed since the
// sandbox was created, and with ErrNothingToApply when there is nothing to
// write. New content is staged in a directory inside the base first, then
// moved into place with renames; a failure undoes every move, so the base
// is never left half applied. Host paths are resolved beneath the base
// without following symlinks.
//
// After Apply the sandbox keeps its layers; its renamed base files may no
// longer read (their origin is gone): discard the sandbox or start a new
// one over the base.
func (m *Manager) Apply(ref string) (ApplyResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	start := time.Now()
	p, err := m.prepare(ref)
	if err != nil {
		return ApplyResult{}, err
	}
	info, err := m.store.Sandbox(p.Sandbox)
	if err != nil {
		return ApplyResult{}, err
	}
	live := m.store.LiveView(p.Sandbox)
	if live == nil {
		if live, err = m.store.OpenSnapshot(p.Sandbox, info.Head); err != nil {
			return ApplyResult{}, err
		}
		defer live.Close()
	}
	bv, err := m.store.OpenSnapshot(p.Sandbox, "")
	if err != nil {
		return ApplyResult{}, err
	}
	defer bv.Close()
	baseState, baseOrder, broken1, err := scan(bv)
	if err != nil {
		return ApplyResult{}, fmt.Errorf("apply %s: base: %w", p.Name, err)
	}
	liveState, liveOrder, broken2, err := scan(live)
	if err != nil {
		return ApplyResult{}, fmt.Errorf("apply %s: sandbox: %w", p.Name, err)
	}
	cs := diffTrees(baseState, baseOrder, liveState, liveOrder)
	if len(cs.changes) == 0 && len(cs.deleted) == 0 {
		return ApplyResult{}, fmt.Errorf("apply %s: sandbox %s has no changes against its base %s: %w", p.Name, p.Sandbox, info.Base, ErrNothingToApply)
	}
	origins, err := m.store.BaseOrigins(p.Sandbox)
	if err != nil {
		return ApplyResult{}, err
	}
	rootFd, err := unix.Open(info.Base, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return ApplyResult{}, fmt.Errorf("apply %s: base %s: %w", p.Name, info.Base, err)
	}
	defer unix.Close(rootFd)
	h := &host{root: rootFd, dir: info.Base, name: ".strata-apply-" + layers.NewID()}
	if cf := append(append(broken1, broken2...), h.conflicts(cs, origins, info.Created)...); len(cf) > 0 {
		sort.SliceStable(cf, func(i, j int) bool { return cf[i].Path < cf[j].Path })
		return ApplyResult{}, &ConflictError{Plan: p.Name, Conflicts: cf}
	}
	if err := unix.Mkdirat(rootFd, h.name, 0o700); err != nil {
		return ApplyResult{}, fmt.Errorf("apply %s: staging directory: %w", p.Name, err)
	}
	keepStage := false
	defer func() {
		if !keepStage {
			os.RemoveAll(filepath.Join(info.Base, h.name))
		}
	}()
	if h.stage, err = h.openat(h.name, unix.O_PATH|unix.O_DIRECTORY); err != nil {
		return ApplyResult{}, fmt.Errorf("apply %s: staging directory: %w", p.Name, err)
	}
	defer unix.Close(h.stage)
	if err := h.stageAll(live, cs); err != nil {
		return ApplyResult{}, fmt.Errorf("apply %s: %w", p.Name, err)
	}
	if keepStage, err = h.move(cs); err != nil {
		if keepStage {
			return ApplyResult{}, fmt.Errorf("apply %s: %w", p.Name, err)
		}
		return ApplyResult{}, fmt.Errorf("apply %s: nothing applied: %w", p.Name, err)
	}
	err = m.store.Update(func(tx *layers.Txn) error {
		return m.mutate(tx, p.ID, func(p *Plan) error {
			p.Applied, p.Status, p.AppliedAt = true, StatusApplied, time.Now().UTC()
			return nil
		})
	})
	if err != nil {
		return ApplyResult{}, fmt.Errorf("apply %s: the base was written but the plan could not be marked applied: %w", p.Name, err)
	}
	res := cs.res
	res.Plan, res.Sandbox, res.Base = p.ID, p.Sandbox, info.Base
	res.Millis = float64(time.Since(start).Microseconds()) / 1000
	return res, nil
}
