package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

// Exit codes.
const (
	exitFailure = 1
	exitUsage   = 2
)

// cliError is what a command returns: what failed, why, and a hint for the
// user where one helps. main prints it as
//
//	strata: <what failed>: <why>
//	hint: <hint>
type cliError struct {
	what  string
	err   error
	hint  string
	usage bool // bad usage: exit 2
}

func (e *cliError) Error() string {
	if e.what == "" {
		return e.err.Error()
	}
	return e.what + ": " + e.err.Error()
}
func (e *cliError) Unwrap() error { return e.err }

// fail wraps err with what failed and the hint that fits it.
func fail(what string, err error, hintArg string) error {
	return &cliError{what: what, err: err, hint: hintFor(err, hintArg)}
}

// hintFor suggests a next step for the errors users can act on; arg is the
// sandbox (or mountpoint) the command was about.
func hintFor(err error, arg string) string {
	switch {
	case errors.Is(err, layers.ErrMounted):
		return fmt.Sprintf("run `strata unmount %s` first", arg)
	case errors.Is(err, control.ErrNotAnswering):
		return "the store's server is stopped or stuck; if it stays so, kill that pid (kill -9); `strata status`, `strata unmount` or the next `strata mount` then detaches the mounts it left"
	case errors.Is(err, layers.ErrLocked):
		return "another strata process has the store open; retry when it is done"
	case errors.Is(err, checkpoint.ErrBaseChanged):
		return "states recorded before the apply cannot come back; checkpoint the sandbox now, or start a new sandbox over the base"
	case errors.Is(err, control.ErrNoFuse):
		return "install fuse3 or load the kernel module (modprobe fuse)"
	case errors.Is(err, control.ErrFuseDenied) && strings.Contains(err.Error(), "user_allow_other"):
		return "add the line user_allow_other to /etc/fuse.conf, or mount without --allow-other"
	case errors.Is(err, control.ErrFuseDenied):
		return "users other than root need /dev/fuse open to them (mode 0666, as udev sets it) and fusermount3 (Debian: apt install fuse3); or mount as root"
	case errors.Is(err, control.ErrNotMounted):
		return "run `strata status` to see what is mounted"
	case errors.Is(err, control.ErrBusy) && strings.Contains(err.Error(), "dead mount"):
		return fmt.Sprintf("run `strata unmount %s` or `umount -l %s`", arg, arg)
	case errors.Is(err, control.ErrBusy) && strings.Contains(err.Error(), "already a mount point"):
		return "unmount it first or choose another directory"
	case errors.Is(err, control.ErrBusy):
		return "close the files open under the mountpoint and leave it, then retry"
	case errors.Is(err, layers.ErrNotFound) && strings.HasPrefix(err.Error(), "sandbox "):
		return "run `strata sandbox list` to see the sandboxes"
	}
	return ""
}

// usageErrorf is a bad-usage error of cmd.
func usageErrorf(cmd *cobra.Command, format string, args ...any) error {
	return &cliError{
		what:  commandName(cmd),
		err:   fmt.Errorf(format, args...),
		hint:  fmt.Sprintf("run `%s --help`", cmd.CommandPath()),
		usage: true,
	}
}

// commandName is cmd's path without the program name: "sandbox create".
func commandName(cmd *cobra.Command) string {
	name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name())
	return strings.TrimSpace(name)
}

// printError prints err as one line, and its hint as a second.
func printError(w io.Writer, err error) {
	msg, hint := err.Error(), ""
	var ce *cliError
	if errors.As(err, &ce) {
		hint = ce.hint
	}
	fmt.Fprintf(w, "strata: %s\n", oneLine(msg))
	if hint != "" {
		fmt.Fprintf(w, "hint: %s\n", oneLine(hint))
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

func exitCode(err error) int {
	var ce *cliError
	if errors.As(err, &ce) && ce.usage {
		return exitUsage
	}
	return exitFailure
}

// exactArgs accepts exactly the named positional arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return usageErrorf(cmd, "missing %s", strings.Join(names[len(args):], " "))
		}
		if len(args) > len(names) {
			return usageErrorf(cmd, "unexpected argument %q", args[len(names)])
		}
		return nonEmptyArgs(cmd, names, args)
	}
}

// maxArgs accepts up to len(names) positional arguments, all optional.
func maxArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > len(names) {
			return usageErrorf(cmd, "unexpected argument %q", args[len(names)])
		}
		return nonEmptyArgs(cmd, names, args)
	}
}

// nonEmptyArgs refuses an empty argument as bad usage: "" names no
// sandbox or id, and as a path it would mean the working directory (a
// mount over it, an export into it).
func nonEmptyArgs(cmd *cobra.Command, names, args []string) error {
	for i, a := range args {
		if a == "" {
			return usageErrorf(cmd, "empty argument %s", names[i])
		}
	}
	return nil
}

// groupRun is the RunE of a command that only groups subcommands: with no
// arguments it shows help, otherwise the argument names no subcommand.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	cmd.SuggestionsMinimumDistance = 2
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usageErrorf(cmd, "%s", msg)
}
