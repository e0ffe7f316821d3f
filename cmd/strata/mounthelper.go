package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/strata-sandbox/strata/cmd/internal/control"
)

// mountHelperHelp is `strata help mount-helper`: how mount(8) and
// /etc/fstab reach strata.
const mountHelperHelp = `mount(8) mounts a sandbox as file system type fuse.strata:

  mount -t fuse.strata strata:NAME MOUNTPOINT -o store=DIR[,ro][,allow_other][,noexec]
  umount MOUNTPOINT

or, in /etc/fstab:

  strata:NAME  MOUNTPOINT  fuse.strata  store=DIR,noauto  0  0

mount(8) runs mount.fuse3, which runs "strata SOURCE MOUNTPOINT -o OPTIONS"
from the PATH (for root /usr/local/sbin, /usr/local/bin, /usr/sbin,
/usr/bin, /sbin, /bin). A link named mount.fuse.strata to the binary
(ln -s "$(command -v strata)" /sbin/mount.fuse.strata) is found first and
does the same without mount.fuse3. Either way the sandbox is served by the
store's background server, as by "strata mount", and the command returns
once the mount is live.

SOURCE is strata:NAME or NAME. Options:

  store=DIR      the store (else $STRATA_STORE, else the default store)
  ro, rw         read-only or writable (the default)
  allow_other    let other users in; the kernel still checks permissions
  noexec, exec   refuse, or allow (the default), executing programs

"mount -o remount,ro MOUNTPOINT" (or rw, noexec, exec) changes the
mount's flags in place, as root; a sandbox mounted read-only stays served
read-only. Name only the mountpoint: given SOURCE and MOUNTPOINT, mount(8)
remounts by itself, without the helper, and clears nosuid and nodev unless
they are named too. umount by source (umount strata:NAME) takes the newest
mount of that name, whichever store it is of; umount MOUNTPOINT is exact.

Strata mounts are always nosuid, nodev and noatime. These options are
accepted and change nothing: defaults, nosuid, nodev, noatime, relatime,
async, default_permissions, auto, noauto, nofail, _netdev, user, users,
nouser, owner, group, and x-* and comment=* (notes for other programs).
mount.fuse3 adds dev and suid to every mount as root: they are accepted
and ignored too, so no set-user-ID program or device node takes effect
through a sandbox. Any other option is refused, unless -s (sloppy) is
given. Flags: -o OPTIONS (may repeat), -s sloppy, -f fake (check and do
nothing), -v verbose (say what was mounted), -n and -t TYPE (ignored).`

func newMountHelperTopic() *cobra.Command {
	return &cobra.Command{
		Use:   "mount-helper",
		Short: "Mounting with mount(8) and /etc/fstab (fuse.strata)",
		Long:  mountHelperHelp,
	}
}

// helperInvocation reports whether a command line is mount(8)'s call of a
// file system helper rather than a strata command: argv0 named mount.*
// (a link such as /sbin/mount.fuse.strata), or, as mount.fuse3 runs it,
// "strata SOURCE MOUNTPOINT -o OPTIONS" with SOURCE no strata command.
func helperInvocation(argv0 string, args []string, isCommand func(string) bool) bool {
	if strings.HasPrefix(filepath.Base(argv0), "mount.") {
		return true
	}
	if len(args) < 2 || strings.HasPrefix(args[0], "-") || isCommand(args[0]) {
		return false
	}
	if strings.HasPrefix(args[0], "strata:") {
		return true
	}
	for _, a := range args[1:] {
		if a == "-o" || strings.HasPrefix(a, "-o") && len(a) > 2 && !strings.HasPrefix(a, "--") {
			return true
		}
	}
	return false
}

// helperCall is a mount helper's command line, understood.
type helperCall struct {
	args    []string // the strata command line it stands for
	fake    bool     // -f: check only
	verbose bool     // -v: print what was mounted
	// remount: change the flags of the mount at target (ro, noexec), which
	// mount(8) asks of the helper for "mount -o remount,... MOUNTPOINT".
	remount    bool
	target     string
	ro, noexec bool
}

// ignoredOptions change nothing: what every strata mount is anyway, what
// mount(8) and fstab keep for themselves, and the dev and suid that
// mount.fuse3 adds to every mount as root.
// kernelOptions are the FUSE options /proc/mounts shows, which mount(8)
// passes back on a remount.
var kernelOptions = []string{"user_id=", "group_id=", "max_read=", "blksize=", "rootmode="}

var ignoredOptions = map[string]bool{
	"defaults": true, "nosuid": true, "nodev": true, "noatime": true, "relatime": true,
	"async": true, "default_permissions": true, "auto": true, "noauto": true, "nofail": true,
	"_netdev": true, "user": true, "users": true, "nouser": true, "owner": true, "group": true,
	"dev": true, "suid": true,
}

// parseHelper turns mount(8)'s helper arguments, "SOURCE MOUNTPOINT [-sfnv]
// [-t TYPE] [-o OPTIONS]...", into the strata mount they ask for.
func parseHelper(args []string) (helperCall, error) {
	var (
		c          helperCall
		pos        []string
		opts       []string
		sloppy     bool
		store      string
		ro, noexec bool
		allowOther bool
	)
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-o" || a == "-t" || a == "-N":
			if i+1 == len(args) {
				return c, fmt.Errorf("%s needs a value", a)
			}
			i++
			switch a {
			case "-o":
				opts = append(opts, args[i])
			case "-N":
				return c, fmt.Errorf("-N %s: mounting into another namespace is not supported", args[i])
			}
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			opts = append(opts, a[2:])
		case strings.HasPrefix(a, "-t") && len(a) > 2:
		case a == "-h" || a == "--help":
			return c, fmt.Errorf("usage: mount -t fuse.strata strata:NAME MOUNTPOINT -o store=DIR[,ro][,allow_other][,noexec] (strata help mount-helper)")
		case len(a) > 1 && a[0] == '-' && a != "--":
			for _, f := range a[1:] {
				switch f {
				case 's':
					sloppy = true
				case 'f':
					c.fake = true
				case 'v':
					c.verbose = true
				case 'n', 'r', 'w':
					// -n: no mtab to write; -r/-w: as ro/rw.
					if f == 'r' {
						ro = true
					} else if f == 'w' {
						ro = false
					}
				default:
					return c, fmt.Errorf("unknown flag -%c", f)
				}
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return c, fmt.Errorf("want SOURCE and MOUNTPOINT, got %d argument(s)", len(pos))
	}
	name := strings.TrimPrefix(pos[0], "strata:")
	if name == "" {
		return c, fmt.Errorf("source %q names no sandbox; want strata:NAME", pos[0])
	}
	for _, list := range opts {
		for _, o := range strings.Split(list, ",") {
			key, val, hasVal := strings.Cut(o, "=")
			switch {
			case o == "":
			case key == "store" && hasVal:
				if val == "" {
					return c, fmt.Errorf("mount option store= names no directory")
				}
				store = val
			case o == "ro":
				ro = true
			case o == "rw":
				ro = false
			case o == "allow_other":
				allowOther = true
			case o == "noexec":
				noexec = true
			case o == "exec":
				noexec = false
			case o == "remount":
				c.remount = true
			case slices.ContainsFunc(kernelOptions, func(p string) bool { return strings.HasPrefix(o, p) }):
			case ignoredOptions[o], strings.HasPrefix(o, "x-"), strings.HasPrefix(o, "comment="):
			case sloppy:
			default:
				return c, fmt.Errorf("mount option %q is not one strata knows (store=DIR, ro, rw, allow_other, noexec, exec; see strata help mount-helper)", o)
			}
		}
	}
	if c.remount {
		c.target, c.ro, c.noexec = pos[1], ro, noexec
		return c, nil
	}
	if store != "" {
		c.args = append(c.args, "--store", store)
	}
	c.args = append(c.args, "mount", name, pos[1])
	if ro {
		c.args = append(c.args, "--read-only")
	}
	if allowOther {
		c.args = append(c.args, "--allow-other")
	}
	if noexec {
		c.args = append(c.args, "--no-exec")
	}
	return c, nil
}

// Exit codes of mount(8), which passes a helper's on: scripts that call
// mount test for them.
const (
	mountExitUsage   = 1  // incorrect invocation
	mountExitFailure = 32 // mount failure
)

// runHelper mounts as mount(8) asked: quietly, as mount helpers do, unless
// -v; errors on stderr in the usual one line, with mount(8)'s exit codes.
func runHelper(args []string, stdout, stderr io.Writer) int {
	c, err := parseHelper(args)
	if err != nil {
		fmt.Fprintf(stderr, "strata: mount helper: %v\n", oneLine(err.Error()))
		return mountExitUsage
	}
	if c.fake {
		return 0
	}
	if c.remount {
		if err := remount(c); err != nil {
			fmt.Fprintf(stderr, "strata: mount helper: %v\n", oneLine(err.Error()))
			return mountExitFailure
		}
		if c.verbose {
			fmt.Fprintf(stdout, "remounted %s\n", c.target)
		}
		return 0
	}
	if !c.verbose {
		stdout = io.Discard
	}
	switch run(c.args, stdout, stderr) {
	case 0:
		return 0
	case exitUsage:
		return mountExitUsage
	default:
		return mountExitFailure
	}
}

// remount changes the flags of the strata mount at c.target in place, as
// "mount -o remount,ro MOUNTPOINT" asks: read-only or writable, noexec or
// not. A sandbox stays nosuid, nodev and noatime. The server is not asked:
// the kernel holds these flags (a sandbox the server serves read-only
// stays so whatever the mount says).
func remount(c helperCall) error {
	target, err := filepath.Abs(c.target)
	if err == nil {
		target, err = filepath.EvalSymlinks(target)
	}
	if err != nil {
		return fmt.Errorf("remount %s: %w", c.target, err)
	}
	table, err := control.Mounts()
	if err != nil {
		return fmt.Errorf("remount %s: %w", c.target, err)
	}
	found := false
	for _, m := range table {
		found = found || m.Mountpoint == target && m.FSType == "fuse.strata"
	}
	if !found {
		return fmt.Errorf("remount %s: not a strata mount", c.target)
	}
	flags := uintptr(unix.MS_REMOUNT | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOATIME)
	if c.ro {
		flags |= unix.MS_RDONLY
	}
	if c.noexec {
		flags |= unix.MS_NOEXEC
	}
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s: %w", c.target, err)
	}
	return nil
}
