package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// progress shows that long work is under way: one line on stderr with the
// time spent so far, rewritten in place and erased when the work is done.
// Following the CLI contract it shows only on a terminal: when stdout and
// stderr both are one; a pipe or a file gets nothing from it.
type progress struct {
	w    io.Writer
	msg  string
	stop chan struct{}
	done chan struct{}
}

// progressTick is how often the line is rewritten.
const progressTick = 250 * time.Millisecond

// startProgress shows msg until Stop, if stdout and stderr are terminals.
func (g *globals) startProgress(msg string) *progress {
	p := &progress{w: g.stderr, msg: msg}
	if !isTerminal(g.stdout) || !isTerminal(g.stderr) {
		return p
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.run()
	return p
}

func (p *progress) run() {
	defer close(p.done)
	start := time.Now()
	t := time.NewTicker(progressTick)
	defer t.Stop()
	for {
		fmt.Fprintf(p.w, "\r\033[K%s (%ds)", p.msg, int(time.Since(start).Seconds()))
		select {
		case <-p.stop:
			// Erase the line: what follows starts at column 0 on a clean line.
			fmt.Fprint(p.w, "\r\033[K")
			return
		case <-t.C:
		}
	}
}

// Stop erases the progress line; it returns once the line is gone.
func (p *progress) Stop() {
	if p.stop == nil {
		return
	}
	close(p.stop)
	<-p.done
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
