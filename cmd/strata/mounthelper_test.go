package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/cmd/internal/control"
	"golang.org/x/sys/unix"
)

func TestParseHelper(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    []string
		fake    bool
		verbose bool
		remount bool
		target  string
		ro      bool
		noexec  bool
		err     string
	}{
		{name: "as mount.fuse3 runs it", args: []string{"strata:demo", "/m", "-o", "rw,dev,suid"},
			want: []string{"mount", "demo", "/m"}},
		{name: "store and every honoured option", args: []string{"strata:demo", "/m", "-o", "store=/s,ro,allow_other,noexec"},
			want: []string{"--store", "/s", "mount", "demo", "/m", "--read-only", "--allow-other", "--no-exec"}},
		{name: "later options win", args: []string{"demo", "/m", "-o", "ro,noexec", "-o", "rw,exec"},
			want: []string{"mount", "demo", "/m"}},
		{name: "joined -o and a type", args: []string{"-ostore=/s", "strata:demo", "-tfuse.strata", "/m"},
			want: []string{"--store", "/s", "mount", "demo", "/m"}},
		{name: "libmount's flags", args: []string{"strata:demo", "/m", "-n", "-v", "-t", "fuse.strata", "-o", "defaults,noauto,nofail,_netdev,x-systemd.automount,comment=x,noatime,nosuid,nodev"},
			want: []string{"mount", "demo", "/m"}, verbose: true},
		{name: "-r and -f together", args: []string{"-rf", "strata:demo", "/m"},
			want: []string{"mount", "demo", "/m", "--read-only"}, fake: true},
		{name: "sloppy takes what it does not know", args: []string{"-s", "strata:demo", "/m", "-o", "sync,mand"},
			want: []string{"mount", "demo", "/m"}},
		{name: "remount, as mount(8) asks it", args: []string{"strata:demo", "/m", "-o", "ro,nosuid,nodev,noexec,noatime,remount,user_id=0,group_id=0,default_permissions,max_read=1048576"},
			remount: true, target: "/m", ro: true, noexec: true},
		{name: "unknown option", args: []string{"strata:demo", "/m", "-o", "rw,sync"}, err: `mount option "sync" is not one strata knows`},
		{name: "atime is not kept", args: []string{"strata:demo", "/m", "-o", "strictatime"}, err: `"strictatime"`},
		{name: "empty store", args: []string{"strata:demo", "/m", "-o", "store="}, err: "store= names no directory"},
		{name: "no sandbox in the source", args: []string{"strata:", "/m"}, err: "names no sandbox"},
		{name: "one argument", args: []string{"strata:demo"}, err: "want SOURCE and MOUNTPOINT, got 1"},
		{name: "three arguments", args: []string{"a", "b", "c"}, err: "got 3"},
		{name: "-o without a value", args: []string{"strata:demo", "/m", "-o"}, err: "-o needs a value"},
		{name: "unknown flag", args: []string{"-x", "strata:demo", "/m"}, err: "unknown flag -x"},
		{name: "namespaces", args: []string{"-N", "/proc/1/ns/mnt", "strata:demo", "/m"}, err: "another namespace"},
		{name: "help", args: []string{"--help"}, err: "usage: mount -t fuse.strata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseHelper(tt.args)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("parseHelper(%q): got error %v, want one containing %q", tt.args, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseHelper(%q): %v", tt.args, err)
			}
			if c.remount != tt.remount || c.target != tt.target || c.ro != tt.ro || c.noexec != tt.noexec {
				t.Fatalf("parseHelper(%q): got remount=%v target=%q ro=%v noexec=%v, want %v %q %v %v",
					tt.args, c.remount, c.target, c.ro, c.noexec, tt.remount, tt.target, tt.ro, tt.noexec)
			}
			if !reflect.DeepEqual(c.args, tt.want) || c.fake != tt.fake || c.verbose != tt.verbose {
				t.Fatalf("parseHelper(%q): got %q fake=%v verbose=%v, want %q fake=%v verbose=%v",
					tt.args, c.args, c.fake, c.verbose, tt.want, tt.fake, tt.verbose)
			}
		})
	}
}

func TestHelperInvocation(t *testing.T) {
	cmds := commandNames()
	for _, name := range []string{"mount", "checkpoint", "help", "sandbox"} {
		if !cmds[name] {
			t.Fatalf("commandNames lacks %q: %v", name, cmds)
		}
	}
	tests := []struct {
		argv0 string
		args  []string
		want  bool
	}{
		{"/sbin/mount.fuse.strata", []string{"strata:demo", "/m"}, true},
		{"mount.strata", nil, true},
		{"/usr/local/bin/strata", []string{"strata:demo", "/m"}, true},
		{"strata", []string{"demo", "/m", "-o", "rw,dev,suid"}, true},
		{"strata", []string{"demo", "/m", "-orw"}, true},
		{"strata", []string{"mount", "demo", "/m"}, false},
		{"strata", []string{"mount", "demo", "/m", "-o", "x"}, false},
		{"strata", []string{"help", "mount"}, false},
		{"strata", []string{"--store", "/s", "status"}, false},
		{"strata", []string{"demo", "/m"}, false},
		{"strata", []string{"demo", "/m", "--output"}, false},
		{"strata", []string{"strata:demo"}, false},
	}
	for _, tt := range tests {
		if got := helperInvocation(tt.argv0, tt.args, func(n string) bool { return cmds[n] }); got != tt.want {
			t.Errorf("helperInvocation(%q, %q) = %v, want %v", tt.argv0, tt.args, got, tt.want)
		}
	}
}

// mountEntry is the line of /proc/self/mountinfo for dir: its per-mount
// options, file system type and source.
func mountEntry(t *testing.T, dir string) (opts, fstype, source string) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[4] != dir {
			continue
		}
		for i, x := range f {
			if x == "-" && i+2 < len(f) {
				return f[5], f[i+1], f[i+2]
			}
		}
	}
	t.Fatalf("%s is not in /proc/self/mountinfo", dir)
	return "", "", ""
}

// runNamed runs the strata binary under another name (as mount(8) runs a
// helper) with env on top of the test's environment.
func runNamed(t *testing.T, bin string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	code := 0
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s %q: %v", bin, args, err)
	}
	return result{stdout: out.String(), stderr: errb.String(), code: code}
}

// mount(8) reaches strata two ways: a link named mount.fuse.strata, and
// mount.fuse3 running "strata SOURCE MOUNTPOINT -o OPTIONS" from the PATH.
// Both mount through the store's server, quietly, with the options they
// name; a plain umount(2) ends the mount as strata unmount does; failures
// are one line with mount(8)'s exit codes and leave nothing mounted.
func TestMountHelper(t *testing.T) {
	e := newEnv(t)
	e.ok("sandbox", "create", "demo", "--base", e.base)
	script := filepath.Join(e.base, "run.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	bindir := t.TempDir()
	helper := filepath.Join(bindir, "mount.fuse.strata")
	if err := os.Symlink(strataBin, helper); err != nil {
		t.Fatal(err)
	}
	storeOpt := "store=" + e.store
	serverGone := func() {
		t.Helper()
		waitFor(t, 10*time.Second, "the server to see the umount and exit", func() bool {
			var st control.Status
			e.okJSON(&st, "status")
			return !st.Server && len(st.Mounts) == 0
		})
	}

	// The link, with ro and noexec: the mount carries both flags.
	r := runNamed(t, helper, nil, "strata:demo", e.mnt, "-o", storeOpt+",ro,noexec,dev,suid")
	if r.code != 0 || r.stdout != "" || r.stderr != "" {
		t.Fatalf("mount.fuse.strata: exit %d, stdout %q, stderr %q; want 0 and silence", r.code, r.stdout, r.stderr)
	}
	opts, fstype, source := mountEntry(t, e.mnt)
	for _, want := range []string{"ro", "nosuid", "nodev", "noexec", "noatime"} {
		if !strings.Contains(","+opts+",", ","+want+",") {
			t.Errorf("mount options %q lack %s", opts, want)
		}
	}
	if fstype != "fuse.strata" || source != "strata:demo" {
		t.Errorf("mount type and source: got %s %s, want fuse.strata strata:demo", fstype, source)
	}
	if got := readFile(t, filepath.Join(e.mnt, "a.txt")); got != "hello" {
		t.Errorf("a.txt: got %q, want hello", got)
	}
	if err := exec.Command(filepath.Join(e.mnt, "run.sh")).Run(); !errors.Is(err, os.ErrPermission) {
		t.Errorf("running a script from a noexec mount: got %v, want permission denied", err)
	}
	if err := os.WriteFile(filepath.Join(e.mnt, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("create in a ro mount: got %v, want EROFS", err)
	}
	// A second mount of the mounted sandbox fails as mount(8) fails.
	r = runNamed(t, helper, nil, "strata:demo", e.mnt2, "-o", storeOpt)
	if r.code != mountExitFailure || !strings.Contains(r.stderr, "already mounted") || e.isMounted(e.mnt2) {
		t.Errorf("second mount: exit %d, stderr %q; want %d, 'already mounted', nothing at %s", r.code, r.stderr, mountExitFailure, e.mnt2)
	}
	// mount -o remount,rw MOUNTPOINT: the kernel's flags change, nosuid,
	// nodev and noexec stay; the server still serves the sandbox
	// read-only.
	r = runNamed(t, helper, nil, "strata:demo", e.mnt, "-o", "rw,nosuid,nodev,noexec,noatime,remount,user_id=0,group_id=0,default_permissions,max_read=1048576")
	if r.code != 0 {
		t.Fatalf("remount rw: exit %d, stderr %q", r.code, r.stderr)
	}
	opts, _, _ = mountEntry(t, e.mnt)
	if !strings.HasPrefix(opts, "rw,") || !strings.Contains(opts, "nosuid,nodev,noexec") {
		t.Errorf("options after remount,rw: %q, want rw with nosuid, nodev and noexec", opts)
	}
	if err := os.WriteFile(filepath.Join(e.mnt, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("create after remount,rw of a sandbox served read-only: got %v, want EROFS", err)
	}
	r = runNamed(t, helper, nil, "strata:demo", e.dir, "-o", "remount,ro")
	if r.code != mountExitFailure || !strings.Contains(r.stderr, "not a strata mount") {
		t.Errorf("remount of a directory that is no mount: exit %d, stderr %q", r.code, r.stderr)
	}
	if err := unix.Unmount(e.mnt, 0); err != nil {
		t.Fatalf("umount %s: %v", e.mnt, err)
	}
	// What the server answers right after umount(2) returned sees the
	// mount gone, though umount does not wait for the server.
	var st control.Status
	e.okJSON(&st, "status")
	if len(st.Mounts) != 0 {
		t.Errorf("status right after umount: %+v, want no mounts", st.Mounts)
	}
	serverGone()

	// Through mount.fuse3, which finds strata in the PATH and adds dev
	// and suid; -v says what was mounted.
	mountFuse3, err := exec.LookPath("mount.fuse3")
	if err != nil {
		for _, p := range []string{"/sbin/mount.fuse3", "/usr/sbin/mount.fuse3"} {
			if _, serr := os.Stat(p); serr == nil {
				mountFuse3, err = p, nil
			}
		}
	}
	if err != nil {
		t.Log("mount.fuse3 is not installed (Debian: fuse3); its route is not tested")
	} else {
		path := "PATH=" + filepath.Dir(strataBin) + ":" + os.Getenv("PATH")
		r = runNamed(t, mountFuse3, []string{path}, "strata:demo", e.mnt, "-t", "fuse.strata", "-o", storeOpt+",allow_other")
		if r.code != 0 {
			t.Fatalf("mount.fuse3: exit %d, stderr %q", r.code, r.stderr)
		}
		opts, _, _ := mountEntry(t, e.mnt)
		if !strings.HasPrefix(opts, "rw,") || strings.Contains(opts, "noexec") {
			t.Errorf("mount options %q: want rw and exec", opts)
		}
		writeFile(t, filepath.Join(e.mnt, "new.txt"), "through mount.fuse3")
		// Remounted read-only and back: the kernel refuses writes, then
		// takes them again.
		for _, mode := range []string{"ro", "rw"} {
			if r := runNamed(t, helper, nil, "strata:demo", e.mnt, "-o", "remount,"+mode); r.code != 0 {
				t.Fatalf("remount %s: exit %d, stderr %q", mode, r.code, r.stderr)
			}
			err := os.WriteFile(filepath.Join(e.mnt, "new.txt"), []byte("through mount.fuse3"), 0o644)
			if mode == "ro" && !errors.Is(err, unix.EROFS) || mode == "rw" && err != nil {
				t.Errorf("write after remount,%s: %v", mode, err)
			}
			// status and sandbox show say what the kernel now does.
			var st control.Status
			e.okJSON(&st, "status")
			var sb control.Sandbox
			e.okJSON(&sb, "sandbox", "show", "demo")
			if len(st.Mounts) != 1 || st.Mounts[0].ReadOnly != (mode == "ro") || sb.ReadOnly != (mode == "ro") {
				t.Errorf("after remount,%s: status %+v, sandbox show read_only=%v", mode, st.Mounts, sb.ReadOnly)
			}
		}
		if out, err := exec.Command(filepath.Join(e.mnt, "run.sh")).Output(); err != nil || string(out) != "ran\n" {
			t.Errorf("run.sh: got %q, %v; want ran", out, err)
		}
		var st control.Status
		e.okJSON(&st, "status")
		if len(st.Mounts) != 1 || !st.Mounts[0].AllowOther || st.Mounts[0].ReadOnly {
			t.Errorf("status: got %+v, want one writable mount with allow_other", st.Mounts)
		}
		if err := unix.Unmount(e.mnt, 0); err != nil {
			t.Fatalf("umount %s: %v", e.mnt, err)
		}
		// umount, then mount again at once, as test harnesses do: the
		// mount waits for the server to be done with the last one.
		for i := 0; i < 10; i++ {
			r := runNamed(t, helper, nil, "strata:demo", e.mnt, "-o", storeOpt)
			if r.code != 0 {
				t.Fatalf("mount %d right after umount: exit %d, stderr %q", i, r.code, r.stderr)
			}
			writeFile(t, filepath.Join(e.mnt, fmt.Sprintf("cycle%d", i)), strings.Repeat("x", 1<<20))
			if err := unix.Unmount(e.mnt, 0); err != nil {
				t.Fatalf("umount %d: %v", i, err)
			}
		}
		serverGone()
		// Unmounting by umount(2) kept what was written, as strata
		// unmount does.
		r = runNamed(t, helper, nil, "strata:demo", e.mnt, "-v", "-o", storeOpt+",ro")
		if r.code != 0 || !strings.Contains(r.stdout, "mounted demo at "+e.mnt+" read-only") {
			t.Fatalf("mount.fuse.strata -v: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
		}
		if got := readFile(t, filepath.Join(e.mnt, "new.txt")); got != "through mount.fuse3" {
			t.Errorf("new.txt after umount and mount: got %q", got)
		}
		e.ok("unmount", "demo")
	}

	// Failures: one line, mount(8)'s codes, nothing mounted.
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"strata:nope", e.mnt, "-o", storeOpt}, mountExitFailure, "sandbox nope: not found"},
		{[]string{"strata:demo", filepath.Join(e.dir, "missing"), "-o", storeOpt}, mountExitFailure, "missing"},
		{[]string{"strata:demo", e.mnt, "-o", storeOpt + ",sync"}, mountExitUsage, `mount option "sync"`},
		{[]string{"strata:demo"}, mountExitUsage, "want SOURCE and MOUNTPOINT"},
	} {
		r := runNamed(t, helper, nil, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.msg) || !strings.HasPrefix(r.stderr, "strata: ") {
			t.Errorf("mount.fuse.strata %q: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.msg)
		}
		if e.isMounted(e.mnt) {
			t.Fatalf("mount.fuse.strata %q failed but left %s mounted", tc.args, e.mnt)
		}
	}
	// -f checks and mounts nothing.
	if r := runNamed(t, helper, nil, "-f", "strata:demo", e.mnt, "-o", storeOpt); r.code != 0 || e.isMounted(e.mnt) {
		t.Errorf("mount.fuse.strata -f: exit %d, mounted %v; want 0 and nothing mounted", r.code, e.isMounted(e.mnt))
	}
}
