package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	sfs "github.com/strata-sandbox/strata/fs"
	"github.com/strata-sandbox/strata/layers"
)

// allPeers lists the checkpoint suite's peers in report order. strata-api
// is the reference the ratios divide by.
var allPeers = []string{"strata-api", "strata-cli", "git", "cp-a", "btrfs"}

// A ckptPeer is one way of checkpointing a workspace. check says why it
// cannot run here; setup makes a workspace holding a copy of base (or, for
// strata, showing it) with checkpoints of its kind.
type ckptPeer struct {
	name  string
	about func(h *harness) string
	check func(h *harness) error
	setup func(ctx context.Context, h *harness, base, dir string) (*ckptTarget, error)
}

// ckptTarget is one live workspace of a peer. Its instance's root is the
// workspace, where changes are applied; teardown takes it down.
type ckptTarget struct {
	*instance
	// checkpoint takes a checkpoint and returns its reference and how long
	// the checkpoint itself took (not what finds the reference).
	checkpoint func(ctx context.Context) (ref string, took time.Duration, err error)
	// rollback brings the workspace back to checkpoint ref and returns how
	// long that took.
	rollback func(ctx context.Context, ref string) (time.Duration, error)
	// used is the space the peer's checkpoints take, in allocated bytes.
	used func(ctx context.Context) (int64, error)
	// own is the peer's own account of the bytes its checkpoints hold so
	// far; nil when it has none.
	own func(ctx context.Context) (int64, error)
	// mark, when not nil, is called before the storage phase: used and
	// own count only the checkpoints taken after it, so they need not walk
	// the full copies of every round again.
	mark func()
}

func peerByName(name string) *ckptPeer {
	for _, p := range ckptPeers {
		if p.name == name {
			return p
		}
	}
	return nil
}

func selectedPeers(names []string) []*ckptPeer {
	var ps []*ckptPeer
	for _, name := range allPeers {
		if slices.Contains(names, name) {
			ps = append(ps, peerByName(name))
		}
	}
	return ps
}

var ckptPeers = []*ckptPeer{
	{
		name: "strata-api",
		about: func(*harness) string {
			return "in-process: layers.Open, fs.New mount, checkpoint.Manager Create / Rollback; changes applied through the mount"
		},
		check: func(*harness) error { return checkDevFuse() },
		setup: setupStrataAPI,
	},
	{
		name: "strata-cli",
		about: func(*harness) string {
			return "`strata mount` (background server), then `strata checkpoint create --json` / `strata rollback --to-checkpoint ID --json`, end to end"
		},
		check: func(h *harness) error {
			bin, err := h.findStrata()
			if err != nil {
				return err
			}
			h.strataBin = bin
			return checkDevFuse()
		},
		setup: setupStrataCLI,
	},
	{
		name: "git",
		about: func(*harness) string {
			return "`git add -A` + `git commit -q -m x`; rollback `git reset -q --hard REV` + `git clean -fdxq` (auto gc off)"
		},
		check: func(*harness) error {
			_, err := exec.LookPath("git")
			return err
		},
		setup: setupGit,
	},
	{
		name: "cp-a",
		about: func(*harness) string {
			if haveRsync() {
				return "`cp -a ws snapN`; rollback `rsync -a --delete --modify-window=-1 snapN/ ws/`"
			}
			return "`cp -a ws snapN`; rollback `rm -rf ws` + `cp -a snapN ws` (rsync is not installed)"
		},
		check: func(*harness) error {
			_, err := exec.LookPath("cp")
			return err
		},
		setup: setupCopy,
	},
	{
		name: "btrfs",
		about: func(*harness) string {
			return "4 GiB loop file, mkfs.btrfs, workspace a subvolume: `btrfs subvolume snapshot -r ws cpN`; rollback `btrfs subvolume delete ws` + `btrfs subvolume snapshot cpN ws`"
		},
		check: checkBtrfs,
		setup: setupBtrfs,
	},
}

// checkPeer checks a peer's prerequisites (missing: skipped), then probes
// it on a one-file workspace: checkpoint, add a file, roll back, the file
// must be gone (broken: failed).
func (h *harness) checkPeer(ctx context.Context, p *ckptPeer) targetStatus {
	st := targetStatus{Name: p.name}
	if err := p.check(h); err != nil {
		st.Status, st.Reason, st.About = statusSkipped, err.Error(), p.about(h)
		return st
	}
	st.About = p.about(h)
	if err := h.probePeer(ctx, p); err != nil {
		st.Status, st.Reason = statusFailed, "probe: "+err.Error()
		return st
	}
	st.Status = statusOK
	return st
}

func (h *harness) probePeer(ctx context.Context, p *ckptPeer) (err error) {
	base, err := h.fixture(probeFixture())
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Join(h.work, "runs"), "probe-"+p.name+"-")
	if err != nil {
		return err
	}
	defer h.removeRun(dir)
	t, err := h.ckptSetup(ctx, p, base, dir)
	if err != nil {
		return err
	}
	defer func() {
		if terr := t.teardown(false); terr != nil && err == nil {
			err = fmt.Errorf("teardown: %w", terr)
		}
	}()
	ref, _, err := t.checkpoint(ctx)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	added := filepath.Join(t.root, "probe-write")
	if err := os.WriteFile(added, []byte("ok\n"), 0o644); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	if _, err := t.rollback(ctx, ref); err != nil {
		return fmt.Errorf("rollback: %w", err)
	}
	if _, err := os.Lstat(added); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("a file written after the checkpoint is still there after the rollback (%v)", err)
	}
	got, err := os.ReadFile(filepath.Join(t.root, probeFile))
	if err != nil || string(got) != probeContent {
		return fmt.Errorf("base file after rollback: %q, %v", got, err)
	}
	return nil
}

// ckptSetup makes a peer's workspace and registers it for cleanup.
func (h *harness) ckptSetup(ctx context.Context, p *ckptPeer, base, dir string) (*ckptTarget, error) {
	t, err := p.setup(ctx, h, base, dir)
	if err != nil {
		return nil, err
	}
	t.name, t.h = p.name+" "+filepath.Base(dir), h
	if t.used == nil {
		// No sync first: ext4 and xfs count blocks reserved for delayed
		// allocation in st_blocks, and a sync would wait for the writes
		// of everything else on a shared machine.
		t.used = func(context.Context) (int64, error) { return duBytes(t.storage), nil }
	}
	h.track(t.instance)
	return t, nil
}

// timed runs fn and returns how long it took.
func timed(fn func() error) (time.Duration, error) {
	start := time.Now()
	err := fn()
	return time.Since(start), err
}

// runCmd runs a command in dir and returns its stdout; a failure carries
// the end of its output.
func runCmd(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir, cmd.Env = dir, env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%s %s: %v: %s", filepath.Base(name), strings.Join(args, " "), err,
			lastLines(stderr.String()+stdout.String(), 3))
	}
	return stdout.Bytes(), nil
}

// runCmds runs commands one after the other, each a name and its
// arguments, stopping at the first that fails.
func runCmds(ctx context.Context, dir string, env []string, cmds ...[]string) error {
	for _, c := range cmds {
		if _, err := runCmd(ctx, dir, env, c[0], c[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// apparentBytes is the sum of the sizes of the regular files below dir.
func apparentBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
		}
		return nil
	})
	return total, err
}

// --- strata through the Go API

// mountInvalidator is the checkpoint.Invalidator of one in-process mount.
type mountInvalidator struct {
	sandbox string
	m       *sfs.Mount
}

func (i mountInvalidator) Invalidate(sandbox string) {
	if sandbox == i.sandbox {
		i.m.Invalidate()
	}
}

func (i mountInvalidator) InvalidateTouched(sandbox string, t layers.Touched) {
	if sandbox == i.sandbox {
		i.m.InvalidateTouched(t)
	}
}

func setupStrataAPI(_ context.Context, _ *harness, base, dir string) (*ckptTarget, error) {
	storeDir, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return nil, err
	}
	st, err := layers.Open(storeDir)
	if err != nil {
		return nil, err
	}
	if _, err := st.CreateSandbox(strataSandbox, base, 0); err != nil {
		return nil, errors.Join(err, st.Close())
	}
	v, err := st.OpenView(strataSandbox, false)
	if err != nil {
		return nil, errors.Join(err, st.Close())
	}
	m, err := sfs.New(mnt, v, sfs.Options{})
	if err != nil {
		return nil, errors.Join(err, v.Close(), st.Close())
	}
	mgr := checkpoint.New(st, mountInvalidator{strataSandbox, m})
	down := func(force bool) error {
		var err error
		if !force {
			err = m.Unmount()
		}
		if isMountPoint(mnt) {
			err = errors.Join(err, unmount(mnt, true))
		}
		return errors.Join(err, v.Close(), st.Close())
	}
	return &ckptTarget{
		instance: &instance{root: mnt, storage: storeDir, down: down},
		checkpoint: func(context.Context) (string, time.Duration, error) {
			var cp checkpoint.Checkpoint
			took, err := timed(func() (err error) {
				cp, err = mgr.Create(strataSandbox, checkpoint.Options{})
				return err
			})
			return cp.ID, took, err
		},
		rollback: func(_ context.Context, ref string) (time.Duration, error) {
			return timed(func() error {
				_, err := mgr.Rollback(strataSandbox, ref)
				return err
			})
		},
		own: func(context.Context) (int64, error) {
			cps, err := mgr.List(strataSandbox)
			var total int64
			for _, cp := range cps {
				total += cp.Bytes
			}
			return total, err
		},
	}, nil
}

// --- strata through the CLI

func setupStrataCLI(ctx context.Context, h *harness, base, dir string) (*ckptTarget, error) {
	in, err := setupStrata(ctx, h, base, dir)
	if err != nil {
		return nil, err
	}
	cli := func(ctx context.Context, args ...string) ([]byte, error) {
		return runCmd(ctx, "", nil, h.strataBin, append([]string{"--store", in.storage, "--json"}, args...)...)
	}
	return &ckptTarget{
		instance: in,
		checkpoint: func(ctx context.Context) (string, time.Duration, error) {
			var out []byte
			took, err := timed(func() (err error) {
				out, err = cli(ctx, "checkpoint", "create", strataSandbox)
				return err
			})
			if err != nil {
				return "", took, err
			}
			var cp struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(out, &cp); err != nil || cp.ID == "" {
				return "", took, fmt.Errorf("checkpoint create printed %q: no id (%v)", out, err)
			}
			return cp.ID, took, nil
		},
		rollback: func(ctx context.Context, ref string) (time.Duration, error) {
			return timed(func() error {
				_, err := cli(ctx, "rollback", strataSandbox, "--to-checkpoint", ref)
				return err
			})
		},
		own: func(ctx context.Context) (int64, error) {
			out, err := cli(ctx, "checkpoint", "list", strataSandbox)
			if err != nil {
				return 0, err
			}
			var cps []struct {
				Bytes int64 `json:"bytes"`
			}
			if err := json.Unmarshal(out, &cps); err != nil {
				return 0, fmt.Errorf("checkpoint list: %w", err)
			}
			var total int64
			for _, cp := range cps {
				total += cp.Bytes
			}
			return total, nil
		},
	}, nil
}

// --- git

// gitEnv leaves out the user's and the system's git configuration, so the
// repository's own settings are all that count.
func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.com",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.com")
}

func setupGit(ctx context.Context, _ *harness, base, dir string) (*ckptTarget, error) {
	ws := filepath.Join(dir, "ws")
	if err := copyTree(base, ws); err != nil {
		return nil, fmt.Errorf("copy base: %w", err)
	}
	env := gitEnv()
	// Auto gc off: a repack started by one commit would run on in the
	// background (or, detached, skew one sample) and shrink .git in the
	// middle of the storage phase.
	if err := runCmds(ctx, ws, env,
		[]string{"git", "init", "-q"},
		[]string{"git", "config", "gc.auto", "0"},
		[]string{"git", "config", "commit.gpgsign", "false"},
	); err != nil {
		return nil, err
	}
	return &ckptTarget{
		instance: &instance{root: ws, storage: filepath.Join(ws, ".git")},
		checkpoint: func(ctx context.Context) (string, time.Duration, error) {
			took, err := timed(func() error {
				return runCmds(ctx, ws, env,
					[]string{"git", "add", "-A"},
					[]string{"git", "commit", "-q", "-m", "x"})
			})
			if err != nil {
				return "", took, err
			}
			out, err := runCmd(ctx, ws, env, "git", "rev-parse", "HEAD")
			return strings.TrimSpace(string(out)), took, err
		},
		rollback: func(ctx context.Context, ref string) (time.Duration, error) {
			return timed(func() error {
				return runCmds(ctx, ws, env,
					[]string{"git", "reset", "-q", "--hard", ref},
					[]string{"git", "clean", "-fdxq"})
			})
		},
		own: func(context.Context) (int64, error) {
			return apparentBytes(filepath.Join(ws, ".git", "objects"))
		},
	}, nil
}

// --- cp -a

func haveRsync() bool {
	_, err := exec.LookPath("rsync")
	return err == nil
}

func setupCopy(_ context.Context, _ *harness, base, dir string) (*ckptTarget, error) {
	ws, snaps := filepath.Join(dir, "ws"), filepath.Join(dir, "snaps")
	if err := copyTree(base, ws); err != nil {
		return nil, fmt.Errorf("copy base: %w", err)
	}
	if err := os.Mkdir(snaps, 0o755); err != nil {
		return nil, err
	}
	rsync := haveRsync()
	n, marked := 0, 0
	snapDir := func(i int) string { return filepath.Join(snaps, fmt.Sprintf("snap%04d", i)) }
	// sumSince adds up fn over the snapshots taken after the mark.
	sumSince := func(fn func(string) (int64, error)) (int64, error) {
		var total int64
		for i := marked + 1; i <= n; i++ {
			x, err := fn(snapDir(i))
			if err != nil {
				return 0, err
			}
			total += x
		}
		return total, nil
	}
	return &ckptTarget{
		instance: &instance{root: ws, storage: snaps},
		checkpoint: func(ctx context.Context) (string, time.Duration, error) {
			n++
			snap := snapDir(n)
			took, err := timed(func() error {
				_, err := runCmd(ctx, dir, nil, "cp", "-a", ws, snap)
				return err
			})
			return snap, took, err
		},
		// rsync copies only what changed. --modify-window=-1 compares
		// mtimes to the nanosecond: rsync's default quick check (size and
		// whole seconds) misses a file rewritten at the same size within
		// the same second, which this workload does. Without rsync, a
		// fresh copy; on ext4 without a journal that is slow after the
		// mass delete (see runOne), which is part of the cost.
		rollback: func(ctx context.Context, snap string) (time.Duration, error) {
			return timed(func() error {
				if rsync {
					_, err := runCmd(ctx, dir, nil, "rsync", "-a", "--delete", "--modify-window=-1", snap+"/", ws+"/")
					return err
				}
				return runCmds(ctx, dir, nil, []string{"rm", "-rf", ws}, []string{"cp", "-a", snap, ws})
			})
		},
		used: func(context.Context) (int64, error) {
			return sumSince(func(dir string) (int64, error) { return duBytes(dir), nil })
		},
		own:  func(context.Context) (int64, error) { return sumSince(apparentBytes) },
		mark: func() { marked = n },
	}, nil
}

// --- btrfs

func checkBtrfs(*harness) error {
	if os.Geteuid() != 0 {
		return errors.New("needs root to mount a loop device")
	}
	for _, tool := range []string{"mkfs.btrfs", "btrfs", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s not installed (apt-get install btrfs-progs)", tool)
		}
	}
	if data, err := os.ReadFile("/proc/filesystems"); err == nil && !bytes.Contains(data, []byte("\tbtrfs\n")) {
		return errors.New("the kernel has no btrfs (not in /proc/filesystems)")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return fmt.Errorf("no loop devices: %w", err)
	}
	return nil
}

// btrfsImageSize is the size of the (sparse) loop file: room for the
// workspace and, since snapshots share data, for all the changes.
const btrfsImageSize = 4 * gib

func setupBtrfs(ctx context.Context, _ *harness, base, dir string) (*ckptTarget, error) {
	img, mnt := filepath.Join(dir, "btrfs.img"), filepath.Join(dir, "btrfs")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return nil, err
	}
	if err := os.Truncate(img, btrfsImageSize); err != nil {
		return nil, err
	}
	// mount(8) sets the loop device up and frees it on unmount.
	if err := runCmds(ctx, dir, nil,
		[]string{"mkfs.btrfs", "-q", "-f", img},
		[]string{"mount", "-o", "loop", img, mnt},
	); err != nil {
		return nil, err
	}
	down := func(force bool) error { return unmount(mnt, force) }
	ws := filepath.Join(mnt, "ws")
	if _, err := runCmd(ctx, dir, nil, "btrfs", "subvolume", "create", ws); err != nil {
		return nil, errors.Join(err, down(false))
	}
	if err := copyTree(base, ws); err != nil {
		return nil, errors.Join(fmt.Errorf("copy base: %w", err), down(false))
	}
	n := 0
	return &ckptTarget{
		instance: &instance{root: ws, storage: mnt, down: down},
		checkpoint: func(ctx context.Context) (string, time.Duration, error) {
			n++
			snap := filepath.Join(mnt, fmt.Sprintf("cp%04d", n))
			took, err := timed(func() error {
				_, err := runCmd(ctx, dir, nil, "btrfs", "subvolume", "snapshot", "-r", ws, snap)
				return err
			})
			return snap, took, err
		},
		rollback: func(ctx context.Context, snap string) (time.Duration, error) {
			return timed(func() error {
				return runCmds(ctx, dir, nil,
					[]string{"btrfs", "subvolume", "delete", ws},
					[]string{"btrfs", "subvolume", "snapshot", snap, ws})
			})
		},
		// Snapshots share extents, so du would count them again and again:
		// ask btrfs what it uses, data and metadata (kept twice, DUP),
		// once the subvolumes deleted by rollbacks are cleaned up.
		// filesystem sync commits and wakes the cleaner, which otherwise
		// waits for the next periodic commit (30 s).
		used: func(ctx context.Context) (int64, error) {
			if err := runCmds(ctx, dir, nil,
				[]string{"btrfs", "filesystem", "sync", mnt},
				[]string{"btrfs", "subvolume", "sync", mnt},
				[]string{"btrfs", "filesystem", "sync", mnt},
			); err != nil {
				return 0, err
			}
			out, err := runCmd(ctx, dir, nil, "btrfs", "filesystem", "usage", "-b", mnt)
			if err != nil {
				return 0, err
			}
			return btrfsUsed(out)
		},
	}, nil
}

// btrfsUsed reads the overall "Used:" bytes of `btrfs filesystem usage -b`.
func btrfsUsed(out []byte) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "Used:" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("no Used: line in btrfs filesystem usage: %q", lastLines(string(out), 3))
}
