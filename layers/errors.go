package layers

import "errors"

// Sentinel errors. Callers test them with errors.Is; every function wraps them
// with the object it failed on ("sandbox demo: not found").
var (
	// ErrNotFound: the sandbox, layer, inode or name does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: the sandbox or name already exists.
	ErrExists = errors.New("already exists")
	// ErrMounted: the sandbox already has a live view (it is mounted).
	ErrMounted = errors.New("already mounted")
	// ErrLocked: another process holds the store.
	ErrLocked = errors.New("store is locked by another process")
	// ErrInvalid: an argument is malformed (bad name, block size, base).
	ErrInvalid = errors.New("invalid argument")
	// ErrNotDir: a directory was expected.
	ErrNotDir = errors.New("not a directory")
	// ErrIsDir: a non-directory was expected.
	ErrIsDir = errors.New("is a directory")
	// ErrNotEmpty: a directory to be removed or replaced has entries.
	ErrNotEmpty = errors.New("directory not empty")
	// ErrReadOnly: the view was opened read-only.
	ErrReadOnly = errors.New("read-only view")
	// ErrCorrupt: stored data failed its checksum or could not be decoded.
	ErrCorrupt = errors.New("corrupt data")
	// ErrNoSpace: the store's file system is full.
	ErrNoSpace = errors.New("no space left in store")
	// ErrNoAttr: the extended attribute does not exist.
	ErrNoAttr = errors.New("no such attribute")
	// ErrNotSupported: the operation or attribute namespace is not supported.
	ErrNotSupported = errors.New("not supported")
	// ErrStale: a handle refers to state that a rollback replaced.
	ErrStale = errors.New("stale handle")
	// ErrClosed: the store or view was closed.
	ErrClosed = errors.New("closed")
	// ErrTooLarge: a value (xattr, name, file size) is over its limit.
	ErrTooLarge = errors.New("too large")
	// ErrNameTooLong: a name or symlink target is over its limit.
	ErrNameTooLong = errors.New("name too long")
	// ErrPastEnd: a seek for data or a hole started past the end of the
	// file, or no data follows (lseek's ENXIO).
	ErrPastEnd = errors.New("no data or hole past the end")
	// ErrFrozen: a frozen layer was asked to change.
	ErrFrozen = errors.New("layer is frozen")
	// ErrDataSync: a sync of a view's data failed; the view stores
	// nothing more (View.syncData), and a new mount starts from what was
	// stored before.
	ErrDataSync = errors.New("data sync failed")
)
