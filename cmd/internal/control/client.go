package control

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Client talks to the server of one store over its socket. It is safe for
// concurrent use; requests are sent one at a time.
type Client struct {
	mu   sync.Mutex // protects conn and r, and keeps one request in flight
	conn net.Conn
	r    *bufio.Reader
	ping Ping
}

// Dial connects to the server of the store in storeDir and pings it. It
// fails with ErrNoServer when nothing listens on the store's socket (no
// socket file, or a stale one that a dead server left) or the server is
// shutting down. While the client is connected, a server that exits when
// idle stays.
func Dial(storeDir string) (*Client, error) {
	path := SocketPath(storeDir)
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%s: %w", path, ErrNoServer)
		}
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	cl := &Client{conn: c, r: bufio.NewReaderSize(c, 64<<10)}
	// A server that is stopped or stuck still has its socket listening,
	// and the kernel completes the connection for it: without a deadline
	// every command would wait for it forever.
	if err := c.SetDeadline(time.Now().Add(PingTimeout)); err != nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s: %w", path, err)
	}
	err = cl.Call(OpPing, nil, &cl.ping)
	if err == nil {
		err = c.SetDeadline(time.Time{})
	}
	if err != nil {
		pid := peerPID(c)
		c.Close()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded) && pid > 0 && killedStuck(pid):
			if n := abortRecordedMounts(storeDir); n > 0 && waitGone(pid, deadServerWait) {
				return nil, fmt.Errorf("%s: %w (its server, pid %d, was killed while stuck in the kernel; %d FUSE connections aborted)", path, ErrNoServer, pid, n)
			}
			return nil, fmt.Errorf("%s: %w: the server (pid %d) was killed but a thread of it is stuck in the kernel", path, ErrNotAnswering, pid)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return nil, fmt.Errorf("%s: %w: the server (pid %d) did not answer within %v", path, ErrNotAnswering, pid, PingTimeout)
		case errors.Is(err, ErrShuttingDown) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
			return nil, fmt.Errorf("%s: %w", path, ErrNoServer)
		}
		return nil, err
	}
	return cl, nil
}

// PingTimeout bounds how long Dial waits for the server's first answer. A
// live server answers a ping from the connection's own goroutine, whatever
// else it is doing, in well under a second.
var PingTimeout = 5 * time.Second

// peerPID is the process at the other end of a unix socket (the one that
// listens), or 0 when the kernel does not say.
func peerPID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	rc, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = rc.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

// PID is the server's process id.
func (c *Client) PID() int { return c.ping.PID }

// Call sends op with args (nil for none) and decodes the result into result
// (nil to drop it). A failed op returns a *RemoteError, which errors.Is
// matches against the sentinel of its code.
func (c *Client) Call(op string, args, result any) error {
	req := Request{Op: op}
	if err := checkUTF8(args); err != nil {
		return err
	}
	if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return err
		}
		req.Args = b
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := c.conn.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("%s: send: %w", op, err)
	}
	line, err := readLine(c.r)
	if err != nil {
		return fmt.Errorf("%s: no answer from the server: %w", op, err)
	}
	var resp Response
	if err := json.Unmarshal(line, &resp); err != nil {
		return fmt.Errorf("%s: bad answer from the server: %w", op, err)
	}
	if !resp.OK {
		return &RemoteError{Code: resp.Code, Msg: resp.Error}
	}
	if result != nil && len(resp.Result) > 0 {
		if err := json.Unmarshal(resp.Result, result); err != nil {
			return fmt.Errorf("%s: decode result: %w", op, err)
		}
	}
	return nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
