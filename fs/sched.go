package fs

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// How a mount keeps the Go runtime's system monitor (sysmon) quiet.
//
// go-fuse serves a mount with reader goroutines that spend their lives in
// system calls: a blocking read(2) of /dev/fuse, a pread of a base file or
// of a layer's data, the writev of the reply. A Go thread in a system call
// keeps its P. sysmon takes a P back from such a thread (and hands it to
// another) when no P is left idle, or when the P has not been through the
// scheduler for 10 ms, which a reader that never parks never does. Every
// such retake makes sysmon poll every 20 us for the next millisecond, and
// the reader comes back from its call on an idle P whose last schedule
// sysmon saw long ago, so sysmon takes that one at its next tick as well.
// Cold random 4 KiB reads of a base file (20,000 preads through a mount,
// perf stat of the server) cost 2.9-3.1 context switches and 35-44 us of
// CPU a read, against 1.7 and 20-23 us for fuse-overlayfs; sysmon's
// thread alone switched 18,800 times.
//
// So mounts add Ps for a server's readers (withReaderProcs), which leaves
// idle Ps while they wait, and the goroutine serving a request passes
// through the scheduler every couple of milliseconds (yieldFS). Together
// they took the server to 2.0 switches and 26-27 us a read, and the 20,000
// reads from 1.43 s to 1.17 s (fuse-overlayfs: 1.15 s); either alone did
// not (docs/bench.md).

// yieldEvery is how often, at most, a request's goroutine yields. Any
// interval well under sysmon's 10 ms does; each yield may wake an idle
// thread to look for work, which is why it is not done on every request.
const yieldEvery = 2 * time.Millisecond

var lastYield atomic.Int64

// yieldSometimes passes the calling goroutine through the scheduler if no
// request has done so for yieldEvery, so that the P it runs on counts as
// having scheduled. It tells whether it did.
func yieldSometimes() bool {
	now := time.Now().UnixNano()
	last := lastYield.Load()
	if now-last < int64(yieldEvery) || !lastYield.CompareAndSwap(last, now) {
		return false
	}
	runtime.Gosched()
	return true
}

// yieldFS calls yieldSometimes before the requests a busy mount serves
// most; the others go straight through.
type yieldFS struct {
	fuse.RawFileSystem
}

func (y yieldFS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	yieldSometimes()
	return y.RawFileSystem.Lookup(cancel, header, name, out)
}

func (y yieldFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	yieldSometimes()
	return y.RawFileSystem.GetAttr(cancel, in, out)
}

func (y yieldFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	yieldSometimes()
	return y.RawFileSystem.Statx(cancel, in, out)
}

func (y yieldFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	yieldSometimes()
	return y.RawFileSystem.Open(cancel, in, out)
}

func (y yieldFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	yieldSometimes()
	return y.RawFileSystem.Create(cancel, in, name, out)
}

func (y yieldFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	yieldSometimes()
	return y.RawFileSystem.Read(cancel, in, buf)
}

func (y yieldFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	yieldSometimes()
	return y.RawFileSystem.Write(cancel, in, data)
}

func (y yieldFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	yieldSometimes()
	return y.RawFileSystem.Writev(cancel, in, data)
}

func (y yieldFS) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) fuse.Status {
	yieldSometimes()
	return y.RawFileSystem.Unlink(cancel, header, name)
}

func (y yieldFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	yieldSometimes()
	return y.RawFileSystem.Flush(cancel, in)
}

func (y yieldFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	yieldSometimes()
	y.RawFileSystem.Release(cancel, in)
}

func (y yieldFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	yieldSometimes()
	return y.RawFileSystem.ReadDirPlus(cancel, in, out)
}

// procsMu guards GOMAXPROCS while mounts raise it and give it back,
// procsMounts, how many mounts are served with it raised, and procsBase,
// what it was before the first of them.
var (
	procsMu     sync.Mutex
	procsMounts int
	procsBase   int
)

// userProcs tells whether GOMAXPROCS was set by the user, whose choice
// stands.
var userProcs = os.Getenv("GOMAXPROCS") != ""

// goFuseReaders is how many goroutines a go-fuse server may have blocked
// in read(2) of /dev/fuse at once: go-fuse allows GOMAXPROCS of them,
// clamped to 2..16, when the server is made, plus the one that finds the
// count reached.
func goFuseReaders(procs int) int {
	return min(max(procs, 2), 16) + 1
}

// withReaderProcs makes a go-fuse server with newServer and, while any
// mount made so is served, keeps GOMAXPROCS at what it was before the
// first plus the readers one server may block, so that those do not take
// the Ps that requests and the rest of the process run on. It returns the
// server and what gives the Ps back, for when the server is gone. Once
// the last mount has given them back, the runtime's own default (which
// follows the CPU limit) is in force again, unless the value before was
// another one, set by the program. A GOMAXPROCS the user set is left
// alone.
//
// The Ps are added once, not per mount: a daemon serving many sandboxes
// would otherwise run with dozens of Ps on a few CPUs, and the garbage
// collector gives a quarter of GOMAXPROCS dedicated mark workers. go-fuse
// sizes each server's reader pool by GOMAXPROCS, so each server is made
// with it at the base value.
func withReaderProcs(newServer func() (*fuse.Server, error)) (*fuse.Server, func(), error) {
	if userProcs {
		server, err := newServer()
		return server, func() {}, err
	}
	procsMu.Lock()
	defer procsMu.Unlock()
	if procsMounts == 0 {
		procsBase = runtime.GOMAXPROCS(0)
	} else {
		runtime.GOMAXPROCS(procsBase)
	}
	server, err := newServer()
	if err == nil {
		procsMounts++
	}
	if procsMounts > 0 {
		runtime.GOMAXPROCS(procsBase + goFuseReaders(procsBase))
	}
	if err != nil {
		return nil, func() {}, err
	}
	var once sync.Once
	return server, func() {
		once.Do(func() {
			procsMu.Lock()
			defer procsMu.Unlock()
			if procsMounts--; procsMounts > 0 {
				return
			}
			runtime.SetDefaultGOMAXPROCS()
			if runtime.GOMAXPROCS(0) != procsBase {
				runtime.GOMAXPROCS(procsBase)
			}
		})
	}, nil
}
