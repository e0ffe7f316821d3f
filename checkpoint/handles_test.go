package checkpoint

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenHandlesAcrossRollback pins down what docs/design.md promises: an
// older handle gets ESTALE for I/O, a new open sees the checkpoint, and a
// working directory inside the sandbox keeps working.
func TestOpenHandlesAcrossRollback(t *testing.T) {
	l := newLive(t, nil)
	l.write("dir/a.txt", "before")
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	l.write("dir/a.txt", "after!")
	f, err := os.OpenFile(filepath.Join(l.mnt, "dir/a.txt"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir, err := os.Open(filepath.Join(l.mnt, "dir"))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	if _, err := l.mgr.Rollback("s", cp.ID); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	if _, err := f.ReadAt(buf, 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("read on old handle: got %v, want ESTALE", err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("write on old handle: got %v, want ESTALE", err)
	}
	if _, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("SEEK_DATA on old handle: got %v, want ESTALE", err)
	}
	other, err := os.Create(filepath.Join(l.mnt, "copy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := unix.CopyFileRange(int(f.Fd()), nil, int(other.Fd()), nil, 4, 0); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("copy_file_range from old handle: got %v, want ESTALE", err)
	}
	// Metadata changes through the old handle fail too: they would land
	// on the checkpoint's file.
	oldFd := int(f.Fd())
	for name, err := range map[string]error{
		"fchmod":       unix.Fchmod(oldFd, 0o600),
		"fchown":       unix.Fchown(oldFd, 1, 1),
		"futimens":     unix.UtimesNanoAt(oldFd, "", []unix.Timespec{{Sec: 1}, {Sec: 1}}, unix.AT_EMPTY_PATH),
		"fsetxattr":    unix.Fsetxattr(oldFd, "user.x", []byte("1"), 0),
		"fremovexattr": unix.Fremovexattr(oldFd, "user.x"),
	} {
		if !errors.Is(err, syscall.ESTALE) {
			t.Errorf("%s on old handle: got %v, want ESTALE", name, err)
		}
	}
	if got, _ := l.read("dir/a.txt"); got != "before" {
		t.Errorf("new open: got %q, want %q", got, "before")
	}
	// By path the kernel finds the file's new inode.
	if err := os.Chmod(filepath.Join(l.mnt, "dir/a.txt"), 0o640); err != nil {
		t.Errorf("chmod by path after the rollback: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(l.mnt, "dir/a.txt")); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after chmod by path: %v, %v", fi, err)
	}
	// The directory handle (as a working directory would) still resolves
	// names, in the checkpoint's tree.
	fd, err := syscall.Openat(int(dir.Fd()), "a.txt", syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatalf("openat through old directory handle: %v", err)
	}
	n, _ := syscall.Read(fd, buf)
	syscall.Close(fd)
	if string(buf[:n]) != "before" {
		t.Errorf("openat through old directory handle reads %q, want %q", buf[:n], "before")
	}
}

// TestSharedMappingAcrossRollback: a shared mapping made before a rollback
// cannot reach the file the rollback brought back. The kernel keeps pages
// and mappings per inode, so while the file kept its kernel inode, the old
// mapping faulted in the pages a new open read, its stores showed in the
// new mapping and were saved by the new open's writeback, and the new
// handle's msync reported the old handle's ESTALE. Now a rolled-back file
// gets a new kernel inode: the old mapping faults (SIGBUS, the page-in
// fails with ESTALE), or at least changes nothing the new one sees.
//
// The mappings live in child processes (mapperChild): a process that
// faults on a mapping of a FUSE file it serves itself can deadlock, the
// fault waiting for the server and the server for the fault, when the Go
// runtime stops the world meanwhile (it did under -race).
func TestSharedMappingAcrossRollback(t *testing.T) {
	l := newLive(t, nil)
	l.write("f", strings.Repeat("\x00", 8192))
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(l.mnt, "f")
	old := startMapper(t, path)
	old.do("map", "ok")
	old.do("write 0 PRE!", "ok")
	old.do("sync", "ok")
	if _, err := l.mgr.Rollback("s", cp.ID); err != nil {
		t.Fatal(err)
	}
	cur := startMapper(t, path)
	cur.do("map", "ok")
	cur.do("read 0 4", "00000000")
	// The old mapping's store: a fault is the expected outcome.
	t.Logf("store through the old mapping: %s", old.ask("write 100 EVIL"))
	cur.do("read 100 4", "00000000")
	cur.do("write 4000 NEW!", "ok")
	cur.do("sync", "ok")
	cur.do("pwrite 6000 pw", "ok")
	cur.do("fsync", "ok")
	// Whatever the old mapping holds goes nowhere, even once it is gone.
	old.close()
	cur.close()
	l.unmount()
	l.mount()
	got, _ := l.read("f")
	want := []byte(strings.Repeat("\x00", 8192))
	copy(want[4000:], "NEW!")
	copy(want[6000:], "pw")
	if got != string(want) {
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("f after a remount differs at %d: %q, want %q (the old mapping's store reached it)", i, got[i:min(i+8, len(got))], want[i:i+8])
			}
		}
	}
}

// mapper drives a child process that maps a file (mapperChild).
type mapper struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startMapper starts a mapper child for path; it ends with the test.
func startMapper(t *testing.T, path string) *mapper {
	t.Helper()
	cmd, in, out := startChild(t, "STRATA_MAPPER_FILE="+path)
	m := &mapper{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(m.close)
	return m
}

// startChild starts this test binary again, running no test, with env
// added (TestMain picks the child's part by it), its stdin and stdout
// piped.
func startChild(t *testing.T, env ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, in, out
}

// ask sends one command and returns the child's answer.
func (m *mapper) ask(line string) string {
	m.t.Helper()
	if _, err := fmt.Fprintln(m.in, line); err != nil {
		m.t.Fatalf("mapper %q: %v", line, err)
	}
	if !m.out.Scan() {
		m.t.Fatalf("mapper %q: no answer (%v)", line, m.out.Err())
	}
	return m.out.Text()
}

// do sends one command and fails unless the answer is want.
func (m *mapper) do(line, want string) {
	m.t.Helper()
	if got := m.ask(line); got != want {
		m.t.Fatalf("mapper %q: got %q, want %q", line, got, want)
	}
}

// close ends the child, letting go of its mapping and file.
func (m *mapper) close() {
	if m.cmd.Process == nil || m.cmd.ProcessState != nil {
		return
	}
	m.in.Close()
	m.cmd.Wait()
}

// mapperChild maps path shared and runs the commands it reads, one per
// line, answering each on a line: map; write OFF TEXT; read OFF N (hex);
// sync (msync); pwrite OFF TEXT; fsync. A fault on the mapping answers
// "fault", a failed call "err: ...".
func mapperChild(path string) {
	debug.SetPanicOnFault(true)
	var f *os.File
	var mem []byte
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		w := strings.Fields(in.Text())
		ans := func() (ans string) {
			defer func() {
				if recover() != nil {
					ans = "fault"
				}
			}()
			var err error
			arg := func(i int) int { n, _ := strconv.Atoi(w[i]); return n }
			switch w[0] {
			case "map":
				if f, err = os.OpenFile(path, os.O_RDWR, 0); err == nil {
					mem, err = unix.Mmap(int(f.Fd()), 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
				}
			case "write":
				copy(mem[arg(1):], w[2])
			case "read":
				return hex.EncodeToString(mem[arg(1) : arg(1)+arg(2)])
			case "sync":
				err = unix.Msync(mem, unix.MS_SYNC)
			case "pwrite":
				_, err = f.WriteAt([]byte(w[2]), int64(arg(1)))
			case "fsync":
				err = f.Sync()
			}
			if err != nil {
				return "err: " + err.Error()
			}
			return "ok"
		}()
		fmt.Println(ans)
	}
}

// TestDeadDirectoryComesBack: a directory removed (or replaced by a
// rename) while a process holds it is dead in the kernel for as long as
// it is held: it lists nothing and finds no name. A rollback that brings
// it back must give the kernel a new inode for it, or the directory reads
// as empty and refuses new entries until the holder lets go (found by an
// agent workload test: a shell sitting in build/ while rm -rf build ran).
func TestDeadDirectoryComesBack(t *testing.T) {
	l := newLive(t, func(base string) {
		os.MkdirAll(filepath.Join(base, "fromBase"), 0o755)
		os.WriteFile(filepath.Join(base, "fromBase/f"), []byte("base"), 0o644)
	})
	l.write("d/file", "data")
	l.write("d/sub/deep", "deep")
	if err := os.Mkdir(filepath.Join(l.mnt, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	cp, err := l.mgr.Create("s", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var holders []*os.File
	defer func() {
		for _, f := range holders {
			f.Close()
		}
	}()
	for _, dir := range []string{"d", "d/sub", "fromBase", "empty"} {
		f, err := os.Open(filepath.Join(l.mnt, dir))
		if err != nil {
			t.Fatal(err)
		}
		holders = append(holders, f)
	}
	for _, dir := range []string{"d", "fromBase"} {
		if err := os.RemoveAll(filepath.Join(l.mnt, dir)); err != nil {
			t.Fatal(err)
		}
	}
	// "empty" is replaced by another directory.
	if err := os.Mkdir(filepath.Join(l.mnt, "other"), 0o755); err != nil {
		t.Fatal(err)
	}
	// (os.Rename refuses to replace a directory; rename(2) does it.)
	if err := syscall.Rename(filepath.Join(l.mnt, "other"), filepath.Join(l.mnt, "empty")); err != nil {
		t.Fatal(err)
	}
	if _, err := l.mgr.Rollback("s", cp.ID); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"d/file": "data", "d/sub/deep": "deep", "fromBase/f": "base"} {
		if got, ok := l.read(rel); got != want {
			t.Errorf("%s after the rollback: %q (found %v), want %q", rel, got, ok, want)
		}
	}
	for _, dir := range []string{"d", "d/sub", "fromBase", "empty"} {
		ents, err := os.ReadDir(filepath.Join(l.mnt, dir))
		if err != nil || (dir == "d" && len(ents) != 2) {
			t.Errorf("listing %s after the rollback: %d entries, %v", dir, len(ents), err)
		}
		if err := os.WriteFile(filepath.Join(l.mnt, dir, "new"), []byte("x"), 0o644); err != nil {
			t.Errorf("creating a file in %s after the rollback: %v", dir, err)
		}
	}
}
