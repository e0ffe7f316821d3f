package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/strata-sandbox/strata/checkpoint"
	"github.com/strata-sandbox/strata/fs"
	"github.com/strata-sandbox/strata/layers"
)

// Handler serves one op: it decodes args (possibly empty) and returns a
// result that encodes to JSON. Its error's sentinel becomes the response's
// code (see ErrorCode).
type Handler func(ctx context.Context, args json.RawMessage) (any, error)

// Typed adapts a function of decoded arguments to a Handler: args are
// decoded into an A (unknown fields are refused) and the R returned is the
// result.
func Typed[A, R any](fn func(ctx context.Context, args A) (R, error)) Handler {
	return func(ctx context.Context, raw json.RawMessage) (any, error) {
		var a A
		if len(raw) > 0 && string(raw) != "null" {
			if err := decodeStrict(raw, &a); err != nil {
				return nil, coded(layers.ErrInvalid, fmt.Sprintf("bad arguments: %v", err))
			}
		}
		return fn(ctx, a)
	}
}

// Options say how a Server behaves.
type Options struct {
	// ExitWhenIdle shuts the server down once it serves no mount and no
	// client is connected: when its last mount goes away, when the last
	// client hangs up, and IdleGrace after Serve began.
	ExitWhenIdle bool
	// IdleGrace, with ExitWhenIdle: how long a new server waits for its
	// first mount. Zero: no limit.
	IdleGrace time.Duration
	// Logger receives one line per mount, unmount and failure; nil: none.
	Logger *log.Logger
	// FS are the options of every mount.
	FS fs.Options
	// Retention is how often a serving server applies RetentionPolicy to
	// the sandboxes it serves (retention.go); zero: never.
	Retention time.Duration
	// RetentionPolicy is the policy Retention applies; zero:
	// checkpoint.DefaultPolicy.
	RetentionPolicy checkpoint.Policy
}

// Server owns an open store and serves its mounts. It runs ops in process
// (Call) and, once Listen was called, for other processes over the store's
// socket (Serve).
type Server struct {
	store *layers.Store
	opts  Options
	log   *log.Logger
	pid   int

	hmu      sync.RWMutex // protects handlers
	handlers map[string]Handler

	// opMu serialises the ops that change the set of mounts: mount,
	// unmount, sandbox.rm, shutdown. Lock order: opMu, then mu.
	opMu sync.Mutex

	mu      sync.Mutex // protects every field below
	mounts  map[string]*liveMount
	ln      *net.UnixListener
	conns   map[net.Conn]struct{}
	busy    int // requests being served over the socket
	closing bool

	shutdownOnce sync.Once
	done         chan struct{}
}

// liveMount is one mount the server serves.
type liveMount struct {
	m    *fs.Mount
	info MountInfo
	gone chan struct{} // closed once the mount is gone and its view closed
	err  error         // of closing the view; read after gone is closed
	// lingers: settle waited in vain for the end of this mount, gone from
	// the mount table (a lazy umount whose files are still open); it is
	// not waited for again.
	lingers atomic.Bool
}

// NewServer returns a server of the open store st, with the built-in ops
// registered. The server does not close the store: its owner does, after
// Shutdown.
func NewServer(st *layers.Store, o Options) *Server {
	lg := o.Logger
	if lg == nil {
		lg = log.New(io.Discard, "", 0)
	}
	s := &Server{
		store: st, opts: o, log: lg, pid: os.Getpid(),
		handlers: map[string]Handler{},
		mounts:   map[string]*liveMount{},
		conns:    map[net.Conn]struct{}{},
		done:     make(chan struct{}),
	}
	s.Handle(OpPing, Typed(s.ping))
	s.Handle(OpShutdown, Typed(s.shutdownOp))
	s.Handle(OpStatus, Typed(s.status))
	s.Handle(OpSandboxCreate, Typed(s.sandboxCreate))
	s.Handle(OpSandboxList, Typed(s.sandboxList))
	s.Handle(OpSandboxShow, Typed(s.sandboxShow))
	s.Handle(OpSandboxRemove, Typed(s.sandboxRemove))
	s.Handle(OpMount, Typed(s.mount))
	s.Handle(OpUnmount, Typed(s.unmount))
	s.registerCheckpointOps()
	s.registerPlanOps()
	s.Handle(OpFsck, Typed(s.fsck))
	return s
}

// Handle registers (or replaces) the handler of op.
func (s *Server) Handle(op string, h Handler) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.handlers[op] = h
}

// Store is the store the server owns.
func (s *Server) Store() *layers.Store { return s.store }

// Mount returns the live mount of a sandbox.
func (s *Server) Mount(name string) (*fs.Mount, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lm, ok := s.mounts[name]
	if !ok {
		return nil, false
	}
	return lm.m, true
}

// Exclusive runs fn while no mount, unmount or sandbox.rm can run, so that
// the mount an op looked up with Mount stays while fn uses it (a user's
// umount can still end it). fn must not call ops that take the same lock
// (mount, unmount, sandbox.rm, shutdown).
func (s *Server) Exclusive(fn func() error) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	return fn()
}

// Mounts lists the live mounts, by sandbox name.
func (s *Server) Mounts() []MountInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mountsLocked()
}

func (s *Server) mountsLocked() []MountInfo {
	out := make([]MountInfo, 0, len(s.mounts))
	for _, lm := range s.mounts {
		out = append(out, lm.info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Sandbox < out[j].Sandbox })
	return out
}

// Done is closed when the server has shut down.
func (s *Server) Done() <-chan struct{} { return s.done }

// Call runs op in this process, as a request over the socket would: args
// and result go through JSON, and the handler's error is returned as is.
func (s *Server) Call(op string, args, result any) error {
	if err := checkUTF8(args); err != nil {
		return err
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return err
	}
	res, err := s.dispatch(context.Background(), op, raw)
	if err != nil {
		return err
	}
	if result == nil {
		return nil
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, result)
}

// Close does nothing: an in-process server is shut down with Shutdown.
// It lets a Server stand where a Client does.
func (s *Server) Close() error { return nil }

func (s *Server) dispatch(ctx context.Context, op string, args json.RawMessage) (any, error) {
	s.hmu.RLock()
	h := s.handlers[op]
	s.hmu.RUnlock()
	if h == nil {
		return nil, coded(ErrUnknownOp, fmt.Sprintf("unknown op %q", op))
	}
	return h(ctx, args)
}

// Listen starts listening on the store's socket, replacing a stale socket
// file that nothing listens on.
func (s *Server) Listen() error {
	path := SocketPath(s.store.Dir())
	if _, err := os.Lstat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return fmt.Errorf("control socket %s: another server listens on it", path)
		}
		if err := os.Remove(path); err != nil {
			return fmt.Errorf("control socket %s: remove stale socket: %w", path, err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return fmt.Errorf("control socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	s.mu.Lock()
	s.ln = ln
	s.mu.Unlock()
	return nil
}

// Serve answers requests on the socket until the server shuts down.
func (s *Server) Serve() error {
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln == nil {
		return errors.New("control: Serve before Listen")
	}
	if s.opts.ExitWhenIdle && s.opts.IdleGrace > 0 {
		t := time.AfterFunc(s.opts.IdleGrace, s.exitIfIdle)
		defer t.Stop()
	}
	if s.opts.Retention > 0 {
		// Waited for before Serve returns: its owner closes the store then.
		retained := make(chan struct{})
		go func() {
			defer close(retained)
			s.retentionLoop()
		}()
		defer func() { <-retained }()
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing || errors.Is(err, net.ErrClosed) {
				break
			}
			s.log.Printf("accept: %v", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		go s.serveConn(c)
	}
	<-s.done
	return nil
}

// maxLine bounds one request line.
const maxLine = 4 << 20

func (s *Server) serveConn(c net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
		s.exitIfIdle()
	}()
	r := bufio.NewReaderSize(c, 64<<10)
	for {
		line, err := readLine(r)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Printf("read request: %v", err)
			}
			return
		}
		s.mu.Lock()
		closing := s.closing
		if !closing {
			s.busy++
		}
		s.mu.Unlock()
		if closing {
			b, _ := json.Marshal(Response{Error: ErrShuttingDown.Error(), Code: ErrorCode(ErrShuttingDown)})
			if _, err := c.Write(append(b, '\n')); err != nil {
				return
			}
			continue
		}
		resp := s.answer(c, line)
		b, _ := json.Marshal(resp)
		_, werr := c.Write(append(b, '\n'))
		s.mu.Lock()
		s.busy--
		s.mu.Unlock()
		if werr != nil {
			return
		}
	}
}

func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, chunk...)
		if len(line) > maxLine {
			return nil, fmt.Errorf("request over %d bytes", maxLine)
		}
		if !isPrefix {
			return line, nil
		}
	}
}

// connKey is the context key under which a request's handler finds the
// connection it came on (absent for Call in process).
type connKey struct{}

func (s *Server) answer(c net.Conn, line []byte) Response {
	var req Request
	if err := json.Unmarshal(line, &req); err != nil {
		return Response{Error: fmt.Sprintf("bad request: %v", err), Code: "invalid"}
	}
	ctx := context.WithValue(context.Background(), connKey{}, c)
	res, err := s.dispatch(ctx, req.Op, req.Args)
	if err != nil {
		return Response{Error: err.Error(), Code: ErrorCode(err)}
	}
	b, err := json.Marshal(res)
	if err != nil {
		return Response{Error: fmt.Sprintf("%s: encode result: %v", req.Op, err), Code: CodeInternal}
	}
	return Response{OK: true, Result: b}
}

// Shutdown unmounts every sandbox (detaching those still busy), stops
// listening, lets the requests in flight finish and closes the
// connections. It does not close the store. It is safe to call more than
// once and from any goroutine but a handler's.
func (s *Server) Shutdown() {
	s.shutdownOnce.Do(func() {
		s.stopMounts()
		s.mu.Lock()
		ln := s.ln
		s.mu.Unlock()
		if ln != nil {
			ln.Close()
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
			s.mu.Lock()
			busy := s.busy
			s.mu.Unlock()
			if busy == 0 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		close(s.done)
	})
}

// stopMounts refuses new mounts and unmounts every live one. A mount that
// stays busy is detached; one whose server loop does not end in time has
// its view closed anyway, so that what was written is in the store.
func (s *Server) stopMounts() []MountInfo {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.mu.Lock()
	s.closing = true
	lms := make([]*liveMount, 0, len(s.mounts))
	for _, lm := range s.mounts {
		lms = append(lms, lm)
	}
	s.mu.Unlock()
	var out []MountInfo
	for _, lm := range lms {
		if err := lm.m.Unmount(); err != nil {
			s.log.Printf("unmount %s: %v; detaching it", lm.info.Mountpoint, err)
			if err := detach(lm.info.Mountpoint); err != nil {
				s.log.Printf("%v", err)
			}
		}
		select {
		case <-lm.gone:
		case <-time.After(5 * time.Second):
			s.log.Printf("mount %s still busy; closing its view", lm.info.Mountpoint)
			if err := lm.m.View().Close(); err != nil {
				s.log.Printf("close %s: %v", lm.info.Sandbox, err)
			}
		}
		out = append(out, lm.info)
	}
	return out
}

// exitIfIdle shuts the server down, if it is to exit when idle, once it
// serves no mount and no client is connected: a client that has a
// connection open may still ask for a mount.
func (s *Server) exitIfIdle() {
	if !s.opts.ExitWhenIdle {
		return
	}
	s.mu.Lock()
	idle := len(s.mounts) == 0 && len(s.conns) == 0 && !s.closing
	if idle {
		s.closing = true // no mount may sneak in now
	}
	s.mu.Unlock()
	if idle {
		s.log.Printf("no mounts and no clients left; exiting")
		go s.Shutdown()
	}
}

// exitAfterAnswer is called by a handler over the socket that may have
// left the server without mounts. If the server is to exit when idle, has
// no mount left and the requesting client is its only one, the server
// exits: it refuses new requests at once and shuts down once the answer
// is out. It reports whether the server is exiting (also when it already
// was), so that the client can wait until the store is free.
func (s *Server) exitAfterAnswer(ctx context.Context) bool {
	if !s.opts.ExitWhenIdle {
		return false
	}
	c, viaSocket := ctx.Value(connKey{}).(net.Conn)
	s.mu.Lock()
	_, mine := s.conns[c]
	wasClosing := s.closing
	exit := viaSocket && mine && len(s.conns) == 1 && len(s.mounts) == 0 && !wasClosing
	if exit {
		s.closing = true // no mount may sneak in now
	}
	s.mu.Unlock()
	if exit {
		s.log.Printf("no mounts left and no other clients; exiting")
		// Shutdown waits for the answer in flight to be written.
		go s.Shutdown()
	}
	return exit || wasClosing
}

func (s *Server) saveRecordLocked() {
	if err := writeRecord(s.store.Dir(), s.mountsLocked()); err != nil {
		s.log.Printf("record mounts: %v", err)
	}
}

// watch waits for a mount to go away, by unmount or by anyone's umount,
// and then closes its view.
func (s *Server) watch(lm *liveMount) {
	lm.m.Wait()
	lm.err = lm.m.View().Close()
	name := lm.info.Sandbox
	s.mu.Lock()
	if s.mounts[name] == lm {
		delete(s.mounts, name)
	}
	s.saveRecordLocked()
	idle := len(s.mounts) == 0
	s.mu.Unlock()
	if lm.err != nil {
		s.log.Printf("unmounted %s from %s: close: %v", name, lm.info.Mountpoint, lm.err)
	} else {
		s.log.Printf("unmounted %s from %s", name, lm.info.Mountpoint)
	}
	close(lm.gone)
	if idle {
		s.exitIfIdle()
	}
}

// settleWait bounds how long an answer waits for the end of a mount that
// was unmounted behind the server's back.
var settleWait = 2 * time.Second

// settle waits for the mounts the kernel's mount table no longer lists
// (unmounted by umount(8), not by strata unmount) to be over: flushed,
// closed and dropped from the records. umount returns before that, so
// without it a status, a listing or a mount of the same sandbox that comes
// right after would still find the sandbox mounted.
func (s *Server) settle() {
	s.mu.Lock()
	live := make([]*liveMount, 0, len(s.mounts))
	for _, lm := range s.mounts {
		live = append(live, lm)
	}
	s.mu.Unlock()
	if len(live) == 0 {
		return
	}
	table, err := Mounts()
	if err != nil {
		return // the records stand as they are
	}
	in := map[string]bool{}
	for _, e := range table {
		if e.FSType == "fuse.strata" {
			in[e.Mountpoint] = true
		}
	}
	deadline := time.NewTimer(settleWait)
	defer deadline.Stop()
	for _, lm := range live {
		if in[lm.info.Mountpoint] || lm.lingers.Load() {
			continue
		}
		select {
		case <-lm.gone:
		case <-deadline.C:
			lm.lingers.Store(true)
			return
		}
	}
}

// isBusy reports whether an unmount failed because the mount is in use.
func isBusy(err error) bool { return errors.Is(err, syscall.EBUSY) }
