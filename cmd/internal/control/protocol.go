// Package control serves a store's mounts and lets other processes drive it.
//
// One process at a time holds a store (layers.Open takes an exclusive
// lock). When sandboxes are mounted, that process is a Server: it owns the
// *layers.Store, serves every mount of the store, and answers requests on
// the unix socket STORE/run/strata.sock (mode 0600). The protocol, one JSON
// document per line in each direction, is described in docs/control.md.
//
// When nothing serves the store, a command opens the store itself and runs
// the very same handlers in process: NewServer without Listen, then Call.
package control

import (
	"encoding/json"
	"path/filepath"
	"time"

	"github.com/strata-sandbox/strata/layers"
)

// SocketName is the control socket's file name in the store's run directory.
const SocketName = "strata.sock"

// SocketPath is the control socket of the store in storeDir.
func SocketPath(storeDir string) string { return filepath.Join(storeDir, "run", SocketName) }

// Request is one line a client sends.
type Request struct {
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
}

// Response is the one line the server answers a request with.
type Response struct {
	OK     bool            `json:"ok"`
	Error  string          `json:"error,omitempty"`
	Code   string          `json:"code,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Op names of the built-in handlers.
const (
	OpPing          = "ping"
	OpShutdown      = "shutdown"
	OpStatus        = "status"
	OpSandboxCreate = "sandbox.create"
	OpSandboxList   = "sandbox.list"
	OpSandboxShow   = "sandbox.show"
	OpSandboxRemove = "sandbox.rm"
	OpMount         = "mount"
	OpUnmount       = "unmount"
)

// CreateArgs are the arguments of sandbox.create. Base must be absolute.
type CreateArgs struct {
	Name      string `json:"name"`
	Base      string `json:"base"`
	BlockSize int    `json:"block_size,omitempty"`
}

// NameArgs name one sandbox (sandbox.show, sandbox.rm, status).
type NameArgs struct {
	Name string `json:"name"`
}

// GCArgs are the arguments of gc: Name, if set, must name a sandbox;
// Dedup adds a dedup pass (layers.Store.Dedup).
type GCArgs struct {
	Name  string `json:"name"`
	Dedup bool   `json:"dedup,omitempty"`
}

// MountArgs are the arguments of mount. Mountpoint must be absolute.
type MountArgs struct {
	Name       string `json:"name"`
	Mountpoint string `json:"mountpoint"`
	ReadOnly   bool   `json:"read_only,omitempty"`
	AllowOther bool   `json:"allow_other,omitempty"`
	NoExec     bool   `json:"no_exec,omitempty"`
}

// UnmountArgs name the mount to take down: by sandbox name, else by its
// absolute mountpoint. Either may be empty.
type UnmountArgs struct {
	Name       string `json:"name,omitempty"`
	Mountpoint string `json:"mountpoint,omitempty"`
}

// Sandbox is a sandbox and whether it is mounted (sandbox.create,
// sandbox.list).
type Sandbox struct {
	layers.SandboxInfo
	Mounted    bool   `json:"mounted"`
	Mountpoint string `json:"mountpoint,omitempty"`
	ReadOnly   bool   `json:"read_only,omitempty"`
}

// SandboxDetail is what sandbox.show returns: a sandbox and its stack.
type SandboxDetail struct {
	Sandbox
	Layers []layers.LayerInfo `json:"layers"`
}

// MountInfo describes one live mount (mount, unmount, status).
type MountInfo struct {
	Sandbox    string    `json:"sandbox"`
	Mountpoint string    `json:"mountpoint"`
	ReadOnly   bool      `json:"read_only"`
	AllowOther bool      `json:"allow_other"`
	NoExec     bool      `json:"no_exec,omitempty"`
	PID        int       `json:"pid"`
	Since      time.Time `json:"since"`
	// Stale is set by unmount when the mount's server had died and the
	// mount was only detached.
	Stale bool `json:"stale,omitempty"`
}

// UnmountResult is unmount's result: the mount, gone and flushed, and
// whether its server exits now that it serves nothing. A client that wants
// the store free when it returns waits for the server's process to end.
type UnmountResult struct {
	MountInfo
	ServerExits bool `json:"server_exits,omitempty"`
}

// Ping is ping's result.
type Ping struct {
	PID   int    `json:"pid"`
	Store string `json:"store"`
}

// Status is status's result. Server says whether a server process serves
// the store (false when the command opened the store itself).
type Status struct {
	Store   string      `json:"store"`
	Server  bool        `json:"server"`
	PID     int         `json:"pid,omitempty"`
	Mounts  []MountInfo `json:"mounts"`
	Sandbox *Sandbox    `json:"sandbox,omitempty"`
}
