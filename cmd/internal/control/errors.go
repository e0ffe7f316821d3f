package control

import (
	"errors"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/correction"
	"github.com/strata-sandbox/strata/layers"
)

// Sentinel errors of the control path, next to the store's own (package
// layers). Test them with errors.Is; they survive a trip over the socket.
var (
	// ErrNoServer: nothing listens on the store's socket.
	ErrNoServer = errors.New("no server serves the store")
	// ErrNotMounted: the sandbox or mountpoint has no live mount.
	ErrNotMounted = errors.New("not mounted")
	// ErrBusy: a mountpoint is in use (already a mount point, or files are
	// open in a mount being unmounted).
	ErrBusy = errors.New("busy")
	// ErrNoFuse: the FUSE device is missing.
	ErrNoFuse = errors.New("fuse device not found")
	// ErrFuseDenied: FUSE is there but this user may not mount through
	// it (the device's mode, no helper, allow_other not allowed).
	ErrFuseDenied = errors.New("fuse not usable by this user")
	// ErrShuttingDown: the server is shutting down and takes no new mounts.
	ErrShuttingDown = errors.New("server is shutting down")
	// ErrUnknownOp: the server has no handler for the requested op.
	ErrUnknownOp = errors.New("unknown op")
	// ErrNotAnswering: a process holds the store's socket but does not
	// answer (stopped, or stuck in the kernel).
	ErrNotAnswering = errors.New("server does not answer")
)

// codes maps the wire's error codes to sentinels, most specific first. A
// package that registers ops with new sentinels adds them here, so that a
// client's errors.Is works on them too.
var codes = []struct {
	code string
	err  error
}{
	{"ambiguous", checkpoint.ErrAmbiguous},
	{"other_sandbox", checkpoint.ErrOtherSandbox},
	{"base_changed", checkpoint.ErrBaseChanged},
	{"sandbox_gone", correction.ErrSandboxGone}, // wraps layers.ErrNotFound
	{"plan_applied", correction.ErrPlanApplied},
	{"plan_applying", correction.ErrApplying},
	{"no_failed_decision", correction.ErrNoFailedDecision},
	{"step_not_begun", correction.ErrStepNotBegun},
	{"conflict", correction.ErrConflict},
	{"nothing_to_apply", correction.ErrNothingToApply},
	{"not_found", layers.ErrNotFound},
	{"exists", layers.ErrExists},
	{"mounted", layers.ErrMounted},
	{"locked", layers.ErrLocked},
	{"not_dir", layers.ErrNotDir},
	{"is_dir", layers.ErrIsDir},
	{"not_empty", layers.ErrNotEmpty},
	{"read_only", layers.ErrReadOnly},
	{"corrupt", layers.ErrCorrupt},
	{"no_space", layers.ErrNoSpace},
	{"stale", layers.ErrStale},
	{"closed", layers.ErrClosed},
	{"too_large", layers.ErrTooLarge},
	{"frozen", layers.ErrFrozen},
	{"not_supported", layers.ErrNotSupported},
	{"invalid", layers.ErrInvalid},
	{"not_mounted", ErrNotMounted},
	{"busy", ErrBusy},
	{"no_fuse", ErrNoFuse},
	{"fuse_denied", ErrFuseDenied},
	{"shutting_down", ErrShuttingDown},
	{"unknown_op", ErrUnknownOp},
}

// CodeInternal is the code of an error that matches no sentinel.
const CodeInternal = "internal"

// ErrorCode returns the wire code of err: the first sentinel it wraps, or
// CodeInternal.
func ErrorCode(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return CodeInternal
}

// RemoteError is an error the server returned. Its message is the server's;
// it unwraps to the sentinel its code names, so errors.Is works as it
// would in the server's process.
type RemoteError struct {
	Code string
	Msg  string
}

func (e *RemoteError) Error() string { return e.Msg }

// Unwrap returns the sentinel of the error's code, or nil.
func (e *RemoteError) Unwrap() error {
	for _, c := range codes {
		if c.code == e.Code {
			return c.err
		}
	}
	return nil
}

// codedError is an error with its own message that still matches a
// sentinel: "mountpoint /x is not a directory" rather than
// "mountpoint /x: not a directory".
type codedError struct {
	msg string
	err error
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.err }

func coded(sentinel error, msg string) error { return &codedError{msg: msg, err: sentinel} }
