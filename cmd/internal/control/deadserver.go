package control

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A server killed (kill -9) while one of its threads waits in the kernel
// cannot finish dying. The thread is sending the kernel an invalidation
// (a rollback's), which waits for a directory lock; the lock's holder is
// a process waiting for an answer from the server, which will never come.
// The stuck thread keeps the process's descriptors open, so the FUSE
// connections are not aborted, the store stays locked and the socket
// keeps taking connections that nobody answers. Aborting the connections
// (fusectl) answers the waiting processes with ENOTCONN, the lock is
// released, the thread returns and the process ends.

// deadServerWait bounds how long Dial waits for such a server to end once
// its connections are aborted.
var deadServerWait = 3 * time.Second

// killedStuck reports whether pid is a process whose main thread has
// exited (a zombie) while other threads of it remain: killed, but not
// able to finish dying.
func killedStuck(pid int) bool {
	state, threads := procState(pid)
	return state == 'Z' && threads > 1
}

// procState is process pid's state letter (of its main thread, 0 when
// there is no such process) and how many threads it has.
func procState(pid int) (byte, int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0, 0
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return b[i+2], 0
	}
	return b[i+2], len(tasks)
}

// abortRecordedMounts aborts the FUSE connections of the mounts the
// store's record lists that the kernel still has, and returns how many it
// aborted.
func abortRecordedMounts(storeDir string) int {
	ms, err := readRecord(storeDir)
	if err != nil || len(ms) == 0 {
		return 0
	}
	live, err := Mounts()
	if err != nil {
		return 0
	}
	n := 0
	for _, m := range ms {
		for _, e := range live {
			if e.is(m) && abortConnection(e.Dev) == nil {
				n++
			}
		}
	}
	return n
}

// fusectlDir is where the kernel lists FUSE connections.
const fusectlDir = "/sys/fs/fuse/connections"

// abortConnection aborts the FUSE connection of the mount on device dev
// ("0:57": connection 57).
func abortConnection(dev string) error {
	_, minor, ok := strings.Cut(dev, ":")
	if !ok || minor == "" || strings.ContainsAny(minor, "/.") {
		return fmt.Errorf("device %q: %w", dev, os.ErrInvalid)
	}
	abort := filepath.Join(fusectlDir, minor, "abort")
	if _, err := os.Stat(abort); errors.Is(err, os.ErrNotExist) {
		// The control file system is not mounted (systemd mounts it at
		// boot; containers and small machines may not). Only root may.
		if err := unix.Mount("fusectl", fusectlDir, "fusectl", 0, ""); err != nil {
			return fmt.Errorf("mount %s: %w", fusectlDir, err)
		}
	}
	return os.WriteFile(abort, []byte("1"), 0)
}

// waitGone waits up to d for process pid to be gone, or to be a zombie
// with no thread left, which holds nothing any more (its parent has not
// collected it yet).
func waitGone(pid int, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if state, threads := procState(pid); state == 0 || state == 'Z' && threads <= 1 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}
