package correction

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
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
	// Xattrs are the paths that kept their content but whose extended
	// attributes (POSIX ACLs among them) changed.
	Xattrs []string `json:"xattrs"`
	// Owners are the paths that kept their content but changed owner or
	// group (carried only when the apply runs as root, as a new file's
	// owner is).
	Owners []string `json:"owners"`
	// Times are the paths that kept their content but whose modification
	// time changed (a touch; every directory whose entries changed); they
	// get the sandbox's access and modification times.
	Times  []string `json:"times"`
	Millis float64  `json:"millis"`
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

// applyFault, when set by a test, is called at the points of an apply
// where a crash or a failure is tested: -1 once the journal is written and
// the staging directory made, before anything is staged; 0 … n-1 before
// each of the n steps of the move phase; n after the last one, before the
// plan is marked applied; n+1 once it is marked, before the staging
// directory is removed. An error it returns at -1 … n fails the apply
// there (and is undone); at n+1 it is ignored: the apply has happened.
var applyFault func(step int) error

func fault(step int) error {
	if applyFault == nil {
		return nil
	}
	return applyFault(step)
}

// entryState is what a scan records about one path.
type entryState struct {
	attr   layers.Attr
	fp     string  // regular files: content fingerprint
	target string  // symlinks
	xattrs []xattr // by name
}

// xattr is one extended attribute.
type xattr struct {
	Name  string `json:"name"`
	Value []byte `json:"value"`
}

// xattrsOf reads every extended attribute of the view's inode ino, sorted
// by name.
func xattrsOf(v *layers.View, ino uint64) ([]xattr, error) {
	xs, err := v.Xattrs(ino)
	if err != nil || len(xs) == 0 {
		return nil, err
	}
	out := make([]xattr, 0, len(xs))
	for n, val := range xs {
		out = append(out, xattr{n, val})
	}
	slices.SortFunc(out, func(a, b xattr) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// sameXattrs reports whether two sets of attributes, each sorted by name,
// are equal.
func sameXattrs(a, b []xattr) bool {
	return slices.EqualFunc(a, b, func(x, y xattr) bool { return x.Name == y.Name && bytes.Equal(x.Value, y.Value) })
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
			if err == nil {
				st.xattrs, err = xattrsOf(v, a.Ino)
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
	opChmod          // permission bits (and maybe extended attributes)
	opXattr          // extended attributes only
	opAttr           // owner or times only
)

type change struct {
	op   int
	path string
	live entryState
	old  entryState // opReplace, opChmod, opXattr: the base's
	n    int        // index of the staged file
	// setXattrs: opChmod, opXattr: the attributes change in place (a
	// created or replaced path is staged with its own).
	setXattrs bool
	// setOwner, setTimes: an existing path changes owner, or times, in
	// place (a created or replaced file is staged with its own).
	setOwner, setTimes bool
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
	cs.res = ApplyResult{Added: []string{}, Modified: []string{}, Deleted: []string{}, Modes: []string{}, Xattrs: []string{}, Owners: []string{}, Times: []string{}}
	// Only root can give a file away; a new file's owner is carried on
	// the same terms (stageOne).
	root := os.Geteuid() == 0
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
			x := !sameXattrs(l.xattrs, b.xattrs)
			cs.changes = append(cs.changes, change{op: opChmod, path: p, live: l, old: b, setXattrs: x})
			cs.res.Modes = append(cs.res.Modes, p)
			if x {
				cs.res.Xattrs = append(cs.res.Xattrs, p)
			}
		case !sameXattrs(l.xattrs, b.xattrs):
			cs.changes = append(cs.changes, change{op: opXattr, path: p, live: l, old: b, setXattrs: true})
			cs.res.Xattrs = append(cs.res.Xattrs, p)
		}
		if !ok || gone[p] {
			continue
		}
		owner := root && (l.attr.UID != b.attr.UID || l.attr.GID != b.attr.GID)
		// The modification time only: reading the base sets its access
		// times (relatime), which the view may have seen before.
		times := l.attr.Mtime != b.attr.Mtime
		if !owner && !times {
			continue
		}
		if n := len(cs.changes); n == 0 || cs.changes[n-1].path != p {
			cs.changes = append(cs.changes, change{op: opAttr, path: p, live: l, old: b})
		}
		c := &cs.changes[len(cs.changes)-1]
		if c.op == opReplace {
			continue // staged with its own owner and times
		}
		c.setOwner, c.setTimes = owner, times
		if owner {
			cs.res.Owners = append(cs.res.Owners, p)
		}
		if times {
			cs.res.Times = append(cs.res.Times, p)
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
	root  int // descriptor of the base directory
	stage int // O_PATH descriptor of the staging directory, or -1
	dir   string
	name  string // of the staging directory, in the base root
}

// openHost opens base directory dir, whose staging directory is (or will
// be) name.
func openHost(dir, name string) (*host, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("base %s: %w", dir, err)
	}
	return &host{root: fd, stage: -1, dir: dir, name: name}, nil
}

func (h *host) close() {
	if h.stage >= 0 {
		unix.Close(h.stage)
	}
	unix.Close(h.root)
}

// makeStage makes the staging directory and opens it.
func (h *host) makeStage() error {
	if err := unix.Mkdirat(h.root, h.name, 0o700); err != nil {
		return fmt.Errorf("staging directory: %w", err)
	}
	return h.openStage()
}

func (h *host) openStage() (err error) {
	h.stage, err = h.openat(h.name, unix.O_PATH|unix.O_DIRECTORY)
	return err
}

// removeStage removes the staging directory and what it holds.
func (h *host) removeStage() error {
	if _, err := h.lstat(h.name); absent(err) {
		return nil // on a read-only file system, RemoveAll fails even then
	}
	return os.RemoveAll(filepath.Join(h.dir, h.name))
}

// staged reports whether the staging directory holds name.
func (h *host) staged(name string) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(h.stage, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	return err == nil, err
}

func (h *host) openat(rel string, flags int) (int, error) {
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
	fd, st, err := h.openPath(rel)
	if err == nil {
		unix.Close(fd)
	}
	return st, err
}

// parent opens the directory holding rel.
func (h *host) parent(rel string) (int, string, error) {
	fd, err := h.openat(path.Dir(rel), unix.O_PATH|unix.O_DIRECTORY)
	return fd, path.Base(rel), err
}

// rename moves from (in the staging directory when out is false, else in
// the base) to the other side, never over an existing entry.
func (h *host) rename(rel, name string, out bool) error {
	pfd, base, err := h.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if out {
		err = unix.Renameat2(pfd, base, h.stage, name, unix.RENAME_NOREPLACE)
	} else {
		err = unix.Renameat2(h.stage, name, pfd, base, unix.RENAME_NOREPLACE)
	}
	if err != nil {
		return fmt.Errorf("rename %s: %w", rel, err)
	}
	return nil
}

// moveOut moves base path rel into the staging directory as name.
func (h *host) moveOut(rel, name string) error { return h.rename(rel, name, true) }

// moveIn moves staged name to base path rel.
func (h *host) moveIn(name, rel string) error { return h.rename(rel, name, false) }

// openPath opens rel, a symlink too, as an O_PATH descriptor, and stats
// it: calls made through the descriptor reach the very inode checked.
func (h *host) openPath(rel string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := h.openat(rel, unix.O_PATH)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// chmod sets the permission bits of rel, which must not be a symlink: the
// mode is changed through a descriptor of the very inode that was checked.
func (h *host) chmod(rel string, perm uint32) error {
	fd, st, err := h.openPath(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return fmt.Errorf("chmod %s: is a symlink: %w", rel, layers.ErrInvalid)
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, fdPath(fd, ""), perm, 0); err != nil {
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	return nil
}

// chown gives rel, which may be a symlink, to uid:gid, then sets its
// permission bits to perm (a chown clears set-user-ID and set-group-ID)
// and, when capability is not nil, its file capability (which a chown
// drops).
func (h *host) chown(rel string, uid, gid, perm uint32, capability []xattr) error {
	fd, st, err := h.openPath(rel)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fchownat(fd, "", int(uid), int(gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %s: %w", rel, err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		return nil
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, fdPath(fd, ""), perm, 0); err != nil {
		return fmt.Errorf("chmod %s: %w", rel, err)
	}
	for _, x := range capability {
		if err := unix.Setxattr(fdPath(fd, ""), x.Name, x.Value, 0); err != nil {
			return fmt.Errorf("setxattr %s %s: %w", rel, x.Name, err)
		}
	}
	return nil
}

// capabilityOf is the file capability among xs, if any.
func capabilityOf(xs []xattr) []xattr {
	for _, x := range xs {
		if x.Name == xattrCapability {
			return []xattr{x}
		}
	}
	return nil
}

// xattrCapability is the attribute that holds a file's capabilities.
const xattrCapability = "security.capability"

// utimes sets the access and modification times of rel (nanoseconds),
// which may be a symlink.
func (h *host) utimes(rel string, times []int64) error {
	if len(times) != 2 {
		return fmt.Errorf("utimes %s: %d times: %w", rel, len(times), layers.ErrInvalid)
	}
	pfd, name, err := h.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	ts := []unix.Timespec{unix.NsecToTimespec(times[0]), unix.NsecToTimespec(times[1])}
	if err := unix.UtimesNanoAt(pfd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("utimes %s: %w", rel, err)
	}
	return nil
}

// fdPath is the path by which calls that take no descriptor reach entry
// name of directory descriptor fd, or (name "") the inode fd itself: a
// descriptor's magic link leads to its very inode, symlinks included,
// whichever path it was opened by.
func fdPath(fd int, name string) string {
	p := "/proc/self/fd/" + strconv.Itoa(fd)
	if name != "" {
		p += "/" + name
	}
	return p
}

// xattrOps are the calls that change one entry's extended attributes.
type xattrOps struct {
	set    func(name string, val []byte) error
	remove func(name string) error
}

// changeXattrs turns an entry's attributes from from into to (each sorted
// by name): it removes what to lacks and sets what differs. As archive
// export does, it leaves alone what the file system does not take
// (EOPNOTSUPP) and what the caller may not set (EPERM: trusted.* and
// security.* without privilege).
func changeXattrs(o xattrOps, from, to []xattr) error {
	var errs []error
	check := func(name string, err error) {
		if err != nil && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENODATA) {
			errs = append(errs, fmt.Errorf("xattr %s: %w", name, err))
		}
	}
	find := func(xs []xattr, name string) (xattr, bool) {
		i, ok := slices.BinarySearchFunc(xs, name, func(x xattr, n string) int { return strings.Compare(x.Name, n) })
		if !ok {
			return xattr{}, false
		}
		return xs[i], true
	}
	for _, x := range from {
		if _, ok := find(to, x.Name); !ok {
			check(x.Name, o.remove(x.Name))
		}
	}
	for _, x := range to {
		if old, ok := find(from, x.Name); ok && bytes.Equal(old.Value, x.Value) {
			continue
		}
		check(x.Name, o.set(x.Name, x.Value))
	}
	return errors.Join(errs...)
}

// setXattrs turns the attributes of base path rel from from into to,
// through a descriptor of the very inode that was resolved, with no
// symlink followed.
func (h *host) setXattrs(rel string, from, to []xattr) error {
	fd, err := h.openat(rel, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	p := fdPath(fd, "")
	err = changeXattrs(xattrOps{
		set:    func(n string, v []byte) error { return unix.Setxattr(p, n, v, 0) },
		remove: func(n string) error { return unix.Removexattr(p, n) },
	}, from, to)
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// mkdir makes directory rel with mode 0700 (its chmod step sets the mode).
func (h *host) mkdir(rel string) error {
	pfd, name, err := h.parent(rel)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		return fmt.Errorf("mkdir %s: %w", rel, err)
	}
	return nil
}

// newer reports whether st was modified after t. Only the modification
// time counts: a rename (ours, when a failed apply is undone) changes a
// file's ctime, not its content.
func newer(st unix.Stat_t, t time.Time) bool {
	return layers.NanoOf(st.Mtim.Sec, st.Mtim.Nsec) > layers.NanoOf(t.Unix(), int64(t.Nanosecond()))
}

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
// into the staging directory, and makes it durable.
func (h *host) stageAll(v *layers.View, cs changeSet) error {
	buf := make([]byte, 1<<20)
	// Names of one file in the sandbox (hard links) are staged as links
	// of one staged file, so they stay one file in the base.
	staged := map[uint64]string{}
	for _, c := range cs.changes {
		if c.op == opChmod || c.op == opXattr || c.op == opAttr || c.live.typ() == syscall.S_IFDIR {
			continue
		}
		var err error
		if first, ok := staged[c.live.attr.Ino]; ok {
			err = unix.Linkat(h.stage, first, h.stage, stagedName(c.n), 0)
		} else {
			err = h.stageOne(v, c, buf)
			if c.live.typ() == syscall.S_IFREG && c.live.attr.Nlink > 1 {
				staged[c.live.attr.Ino] = stagedName(c.n)
			}
		}
		if err != nil {
			return fmt.Errorf("stage %s: %w", c.path, err)
		}
	}
	return h.syncfs()
}

// syncfs makes everything written on the base's file system durable.
func (h *host) syncfs() error { return unix.Syncfs(h.root) }

func stagedName(n int) string { return "n" + strconv.Itoa(n) }
func oldName(n int) string    { return "o" + strconv.Itoa(n) }

// stageOne stages the new version of one path with its owner (as root),
// mode and times.
func (h *host) stageOne(v *layers.View, c change, buf []byte) error {
	name := stagedName(c.n)
	a := c.live.attr
	var err error
	switch c.live.typ() {
	case syscall.S_IFLNK:
		err = unix.Symlinkat(c.live.target, h.stage, name)
	case syscall.S_IFREG:
		err = h.stageFile(v, name, a, buf)
	default: // fifos, sockets, devices
		err = unix.Mknodat(h.stage, name, a.Mode, int(a.Rdev))
	}
	if err == nil && os.Geteuid() == 0 {
		err = unix.Fchownat(h.stage, name, int(a.UID), int(a.GID), unix.AT_SYMLINK_NOFOLLOW)
	}
	if err == nil {
		// After the chown, which drops file capabilities.
		p := fdPath(h.stage, name)
		err = changeXattrs(xattrOps{ // nothing to remove from a new entry
			set: func(n string, v []byte) error { return unix.Lsetxattr(p, n, v, 0) },
		}, nil, c.live.xattrs)
	}
	if err == nil && c.live.typ() != syscall.S_IFLNK {
		// After the chown, which clears set-id bits, and the ACL, which
		// sets group bits.
		err = unix.Fchmodat(h.stage, name, c.live.perm(), 0)
	}
	if err == nil {
		ts := []unix.Timespec{unix.NsecToTimespec(a.Atime), unix.NsecToTimespec(a.Mtime)}
		err = unix.UtimesNanoAt(h.stage, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	}
	return err
}

// stageChunk is the granularity at which staged files keep holes.
const stageChunk = 64 << 10

// stageFile copies the content of the view's regular file a into staged
// file name.
func (h *host) stageFile(v *layers.View, name string, a layers.Attr, buf []byte) error {
	fd, err := unix.Openat(h.stage, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	for off := int64(0); off < a.Size; {
		n, err := v.ReadAt(a.Ino, buf, off)
		// Runs of zeros stay holes (the truncate below gives the size),
		// so a sparse file stays sparse in the base.
		for o := 0; o < n; o += stageChunk {
			c := buf[o:min(o+stageChunk, n)]
			if !slices.ContainsFunc(c, func(b byte) bool { return b != 0 }) {
				continue // zeros only
			}
			if _, werr := f.WriteAt(c, off+int64(o)); werr != nil {
				return werr
			}
		}
		off += int64(n)
		if n == 0 || (err != nil && !errors.Is(err, io.EOF)) {
			if err == nil || errors.Is(err, io.EOF) {
				err = fmt.Errorf("%d of %d bytes: %w", off, a.Size, io.ErrUnexpectedEOF)
			}
			return err
		}
	}
	return f.Truncate(a.Size)
}

// move runs the steps of the move phase in order and makes them durable.
// It returns how many steps it made, or began: on an error, those are
// what must be undone.
func (h *host) move(steps []moveStep) (int, error) {
	for i, s := range steps {
		if err := fault(i); err != nil {
			return i, err
		}
		if err := h.do(s); err != nil {
			if s.Op == stepXattr {
				// It may have changed some attributes before it failed;
				// its undo, which needs no proof, puts them back.
				return i + 1, err
			}
			return i, err
		}
	}
	if err := fault(len(steps)); err != nil {
		return len(steps), err
	}
	return len(steps), h.syncfs()
}

// Apply writes the net changes of the plan's sandbox — creates, edits,
// deletes, renames (as a delete and a create), modes, extended attributes
// and POSIX ACLs, owners (as root), modification times, symlinks — onto
// its base directory, and marks the plan applied. It refuses with a
// *ConflictError when a base path the sandbox touches changed since the
// sandbox was created, and with ErrNothingToApply when there is nothing to
// write. Host paths are resolved beneath the base without following
// symlinks.
//
// An apply goes in three phases, each begun by a transaction of the store:
//
//  1. The plan's status becomes "applying" and an intent journal is
//     recorded with it: the staging directory's name (.strata-apply-<id>,
//     inside the base) and every step of the move phase. New content is
//     staged there and made durable; the base is not touched yet.
//  2. The journal says "moving": the moves run — what goes is moved into
//     the staging directory, what comes is moved (or, directories, made) in
//     its place, then modes are set — and are made durable.
//  3. In one transaction the plan is marked applied and the journal says
//     "done"; then the staging directory and the journal go.
//
// A failure in phase 1 or 2 undoes every move in reverse and leaves the
// base and the plan as they were ("nothing applied"). When the process
// dies instead, the next command on the plan (Get, List and every change
// of a plan, through any Manager over the store) finds the journal and
// finishes deterministically: before phase 3 it rolls the apply back —
// each step is undone if, and only if, the base and the staging directory
// show it was made — and gives the plan back its status (open or
// complete); in phase 3 the apply stands and only the staging directory
// is removed. So the base is either exactly as before and the plan not
// applied, or fully applied and the plan "applied". Should an undo itself
// fail (someone put a file where a moved one must come back), the staging
// directory and the journal are kept, the plan stays "applying", changes
// to it are refused with the reason, and the next command tries again.
//
// After Apply the sandbox starts over on its base, which holds what it
// showed: its layers go to an archive. Every checkpoint and archive of the
// sandboxes over that base from before the apply is stale: rolling back to
// it, restoring, comparing, forking and exporting it fail with
// checkpoint.ErrBaseChanged, and verify reports it so.
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
		// Another apply of the plan (another process) may have written
		// the base since the plan was read: that is what to report.
		if _, err := m.prepare(ref); err != nil {
			return ApplyResult{}, err
		}
		return ApplyResult{}, fmt.Errorf("apply %s: sandbox %s has no changes against its base %s: %w", p.Name, p.Sandbox, info.Base, ErrNothingToApply)
	}
	origins, err := m.store.BaseOrigins(p.Sandbox)
	if err != nil {
		return ApplyResult{}, err
	}
	h, err := openHost(info.Base, ".strata-apply-"+layers.NewID())
	if err != nil {
		return ApplyResult{}, fmt.Errorf("apply %s: %w", p.Name, err)
	}
	defer h.close()
	// A base file newer than the sandbox, or than the last apply onto
	// the base (which wrote it), changed under the sandbox.
	since := info.Created
	if info.BaseChanged.After(since) {
		since = info.BaseChanged
	}
	if cf := append(append(broken1, broken2...), h.conflicts(cs, origins, since)...); len(cf) > 0 {
		sort.SliceStable(cf, func(i, j int) bool { return cf[i].Path < cf[j].Path })
		return ApplyResult{}, &ConflictError{Plan: p.Name, Conflicts: cf}
	}

	j := &applyJournal{Plan: p.ID, Base: info.Base, Stage: h.name, Steps: planSteps(cs)}
	defer m.running(p.ID)()
	if err := m.commitApply(j, phaseStaging); err != nil {
		return ApplyResult{}, fmt.Errorf("apply %s: %w", p.Name, err)
	}
	// fail forgets an apply that changed nothing in the base (any more).
	fail := func(err error) (ApplyResult, error) {
		err = fmt.Errorf("apply %s: nothing applied: %w", p.Name, err)
		cerr := m.commitApply(j, phaseUndone)
		if cerr == nil {
			cerr = h.removeStage()
		}
		if cerr == nil {
			cerr = m.commitApply(j, "")
		}
		if cerr != nil {
			return ApplyResult{}, fmt.Errorf("%w; the plan stays applying until its next command tidies up: %w", err, cerr)
		}
		return ApplyResult{}, err
	}
	err = h.makeStage()
	if err == nil {
		err = fault(-1)
	}
	if err == nil {
		err = h.stageAll(live, cs)
	}
	if err == nil {
		err = m.commitApply(j, phaseMoving)
	}
	if err != nil {
		return fail(err)
	}
	n, err := h.move(j.Steps)
	if err == nil {
		err = m.commitApply(j, phaseDone)
	}
	if err != nil {
		if uerr := h.rollback(j.Steps[:n]); uerr != nil {
			return ApplyResult{}, fmt.Errorf("apply %s: %w; %w; the plan stays applying and its next command retries the undo", p.Name, err, uerr)
		}
		return fail(err)
	}
	// The apply stands. What is left is tidying up, which the plan's next
	// command redoes should it fail here.
	_ = fault(len(j.Steps) + 1)
	if h.removeStage() == nil {
		_ = m.commitApply(j, "")
	}
	res := cs.res
	res.Plan, res.Sandbox, res.Base = p.ID, p.Sandbox, info.Base
	// The sandbox starts over on the base it was applied to, which holds
	// its content now: its layers name base files the apply may have
	// moved. They go to an archive, stale like every state from before
	// (marked again, so the archive's time is covered).
	if _, err := m.cp.ResetTx(p.Sandbox, func(tx *layers.Txn, _ string) error {
		return tx.NoteBaseChanged(info.Base, time.Now())
	}); err != nil {
		return res, fmt.Errorf("apply %s: applied onto %s, but the sandbox could not start over on it (roll it back to any checkpoint made from now on): %w", p.Name, info.Base, err)
	}
	res.Millis = float64(time.Since(start).Microseconds()) / 1000
	return res, nil
}
