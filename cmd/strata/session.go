package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/strata-sandbox/strata/cmd/internal/control"
	"github.com/strata-sandbox/strata/layers"
)

// session is what a command talks to: the store's server over its socket,
// or the store opened in this process when nothing serves it. Both run the
// same handlers.
type session interface {
	Call(op string, args, result any) error
	Close() error
}

// localSession runs ops on the store opened in this process.
type localSession struct {
	*control.Server
	st *layers.Store
}

func (l *localSession) Close() error { return l.st.Close() }

// lockWait is how long a command waits for a store that another process
// holds for a moment (a server starting or exiting, a short command).
const lockWait = time.Second

// reach returns a client of the store's server or, when nothing serves the
// store, the store opened in this process. Exactly one is non-nil.
func (g *globals) reach() (*control.Client, *layers.Store, error) {
	deadline := time.Now().Add(lockWait)
	for {
		c, err := control.Dial(g.store)
		if err == nil {
			return c, nil, nil
		}
		if !errors.Is(err, control.ErrNoServer) {
			return nil, nil, err
		}
		st, err := layers.Open(g.store)
		if err == nil {
			return nil, st, nil
		}
		if !errors.Is(err, layers.ErrLocked) || time.Now().After(deadline) {
			return nil, nil, err
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// connect returns a session on the store.
func (g *globals) connect() (session, error) {
	c, st, err := g.reach()
	if err != nil {
		return nil, err
	}
	if c != nil {
		return c, nil
	}
	return &localSession{Server: control.NewServer(st, control.Options{}), st: st}, nil
}

// serverStartTimeout bounds how long mount waits for a new server.
const serverStartTimeout = 10 * time.Second

// serverLog is where a background server writes its log.
func (g *globals) serverLog() string { return filepath.Join(g.store, "run", "server.log") }

// startServer starts a detached server of the store (`strata __serve`, in
// its own session, its output in STORE/run/server.log) and returns a client
// once it answers. If another process's server won the race for the store,
// the client is of that one.
func (g *globals) startServer() (*control.Client, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(g.serverLog()), 0o700); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	logf, err := os.OpenFile(g.serverLog(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	cmd := exec.Command(exe, "--store", g.store, serveCommandName)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	logf.Close()
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(serverStartTimeout)
	for {
		if c, err := control.Dial(g.store); err == nil {
			return c, nil
		}
		select {
		case werr := <-exited:
			// Another process's server may have won the race for the
			// store; it listens within moments.
			for grace := time.Now().Add(2 * time.Second); time.Now().Before(grace); time.Sleep(20 * time.Millisecond) {
				if c, err := control.Dial(g.store); err == nil {
					return c, nil
				}
			}
			if werr == nil {
				// It found itself idle (a client came and went first).
				return nil, fmt.Errorf("server exited early: %w", control.ErrShuttingDown)
			}
			return nil, fmt.Errorf("server exited (%v): %s", werr, lastLine(g.serverLog()))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("server did not answer within %v; see %s", serverStartTimeout, g.serverLog())
		}
	}
}

// lastLine is the last non-empty line of a file, for error messages.
func lastLine(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "see " + path
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "hint:") {
			last = l
		}
	}
	if last == "" {
		return "see " + path
	}
	return last
}
