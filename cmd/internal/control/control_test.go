package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// newServer opens a store in a temporary directory and serves it on its
// socket until the test ends.
func newServer(t *testing.T) (*Server, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := layers.Open(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(st, Options{})
	if err := srv.Listen(); err != nil {
		st.Close()
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve() }()
	t.Cleanup(func() {
		srv.Shutdown()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		st.Close()
	})
	base := filepath.Join(dir, "base")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	return srv, base
}

func TestErrorsSurviveTheSocket(t *testing.T) {
	srv, base := newServer(t)
	c, err := Dial(srv.Store().Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.PID() != os.Getpid() {
		t.Errorf("PID: got %d, want %d", c.PID(), os.Getpid())
	}
	var sb Sandbox
	if err := c.Call(OpSandboxCreate, CreateArgs{Name: "demo", Base: base}, &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Name != "demo" || sb.Base != base || sb.BlockSize != layers.DefaultBlockSize {
		t.Fatalf("create: got %+v, want demo over %s", sb, base)
	}
	tests := []struct {
		name string
		op   string
		args any
		want error
		code string
	}{
		{name: "exists", op: OpSandboxCreate, args: CreateArgs{Name: "demo", Base: base}, want: layers.ErrExists, code: "exists"},
		{name: "not found", op: OpSandboxShow, args: NameArgs{Name: "nope"}, want: layers.ErrNotFound, code: "not_found"},
		{name: "relative base", op: OpSandboxCreate, args: CreateArgs{Name: "x", Base: "rel"}, want: layers.ErrInvalid, code: "invalid"},
		{name: "unknown args", op: OpSandboxShow, args: map[string]any{"nmae": "demo"}, want: layers.ErrInvalid, code: "invalid"},
		{name: "not mounted", op: OpUnmount, args: UnmountArgs{Name: "demo"}, want: ErrNotMounted, code: "not_mounted"},
		{name: "unknown op", op: "no.such.op", want: ErrUnknownOp, code: "unknown_op"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := c.Call(tt.op, tt.args, nil)
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want an error that Is %v", err, tt.want)
			}
			var re *RemoteError
			if !errors.As(err, &re) || re.Code != tt.code {
				t.Fatalf("got %#v, want a RemoteError with code %q", err, tt.code)
			}
			// The same op in process fails with the same sentinel.
			if err := srv.Call(tt.op, tt.args, nil); !errors.Is(err, tt.want) {
				t.Fatalf("in process: got %v, want an error that Is %v", err, tt.want)
			}
		})
	}
}

func TestHandleRegistersOps(t *testing.T) {
	srv, _ := newServer(t)
	type echo struct {
		Text string `json:"text"`
	}
	srv.Handle("test.echo", Typed(func(ctx context.Context, a echo) (echo, error) {
		if a.Text == "" {
			return echo{}, layers.ErrInvalid
		}
		return echo{Text: a.Text + "!"}, nil
	}))
	c, err := Dial(srv.Store().Dir())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got echo
	if err := c.Call("test.echo", echo{Text: "hi"}, &got); err != nil || got.Text != "hi!" {
		t.Fatalf("echo: got %+v, %v; want hi!", got, err)
	}
	if err := c.Call("test.echo", echo{}, &got); !errors.Is(err, layers.ErrInvalid) {
		t.Fatalf("empty echo: got %v, want ErrInvalid", err)
	}
}

func TestDialWithoutServer(t *testing.T) {
	dir := t.TempDir()
	if _, err := Dial(dir); !errors.Is(err, ErrNoServer) {
		t.Fatalf("no socket: got %v, want ErrNoServer", err)
	}
	// A socket file that nothing listens on, as a killed server leaves.
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	if _, err := Dial(dir); !errors.Is(err, ErrNoServer) {
		t.Fatalf("stale socket: got %v, want ErrNoServer", err)
	}
	// A server replaces the stale socket, with mode 0600.
	st, err := layers.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := NewServer(st, Options{})
	if err := srv.Listen(); err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	go srv.Serve()
	defer srv.Shutdown()
	fi, err := os.Stat(SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: got %v, want 0600", fi.Mode().Perm())
	}
	c, err := Dial(dir)
	if err != nil {
		t.Fatalf("Dial after Listen: %v", err)
	}
	c.Close()
}

// TestDialServerNotAnswering: a process that listens on the store's
// socket but never answers (a stopped or stuck server) makes Dial fail
// with ErrNotAnswering, naming the process, once PingTimeout is up.
func TestDialServerNotAnswering(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "run"), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: SocketPath(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	held := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(held)
				return
			}
			held <- c // read nothing, answer nothing
		}
	}()
	defer func() {
		ln.Close()
		for c := range held {
			c.Close()
		}
	}()
	old := PingTimeout
	PingTimeout = 200 * time.Millisecond
	defer func() { PingTimeout = old }()
	start := time.Now()
	_, err = Dial(dir)
	if !errors.Is(err, ErrNotAnswering) {
		t.Fatalf("Dial of a silent listener: got %v, want ErrNotAnswering", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Dial took %v with a ping timeout of %v", took, PingTimeout)
	}
	if want := fmt.Sprintf("(pid %d)", os.Getpid()); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q does not name the listening process %s", err, want)
	}
}

func TestExitWhenIdleWaitsForClients(t *testing.T) {
	dir := t.TempDir()
	st, err := layers.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := NewServer(st, Options{ExitWhenIdle: true})
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	go srv.Serve()
	defer srv.Shutdown()
	c, err := Dial(dir)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case <-srv.Done():
		t.Fatal("server exited while a client was connected")
	default:
	}
	c.Close()
	select {
	case <-srv.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("server did not exit within 5s of its last client leaving")
	}
	if _, err := os.Stat(SocketPath(dir)); !os.IsNotExist(err) {
		t.Fatalf("socket after exit: got %v, want it removed", err)
	}
}

func TestParseMountinfo(t *testing.T) {
	tests := []struct {
		name string
		line string
		want MountEntry
		ok   bool
	}{
		{
			name: "fuse",
			line: `120 30 0:52 / /tmp/x/mnt rw,nosuid,nodev,relatime shared:60 - fuse.strata strata:demo rw,user_id=0,group_id=0`,
			want: MountEntry{Mountpoint: "/tmp/x/mnt", FSType: "fuse.strata", Source: "strata:demo", Dev: "0:52", Options: "rw,nosuid,nodev,relatime"}, ok: true,
		},
		{
			name: "escaped space",
			line: `36 35 98:0 / /mnt/my\040dir rw - ext4 /dev/sda1 rw`,
			want: MountEntry{Mountpoint: "/mnt/my dir", FSType: "ext4", Source: "/dev/sda1", Dev: "98:0", Options: "rw"}, ok: true,
		},
		{name: "garbage", line: "not a mountinfo line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseMountinfo(tt.line)
			if ok != tt.ok || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestCheckMountpoint(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		want error
	}{
		{name: "empty dir", path: dir},
		{name: "missing", path: filepath.Join(dir, "nope"), want: layers.ErrNotFound},
		{name: "file", path: file, want: layers.ErrNotDir},
		{name: "mount point", path: "/proc", want: ErrBusy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CheckMountpoint(tt.path)
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}
