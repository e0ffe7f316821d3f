package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/strata-sandbox/strata/fs"
	"github.com/strata-sandbox/strata/layers"
)

func decodeStrict(raw json.RawMessage, v any) error {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	return d.Decode(v)
}

type empty struct{}

func (s *Server) ping(ctx context.Context, _ empty) (Ping, error) {
	return Ping{PID: s.pid, Store: s.store.Dir()}, nil
}

// shutdownOp unmounts everything and answers; the listener and the
// connections are closed once the answer is out.
func (s *Server) shutdownOp(ctx context.Context, _ empty) ([]MountInfo, error) {
	out := s.stopMounts()
	go s.Shutdown()
	if out == nil {
		out = []MountInfo{}
	}
	return out, nil
}

func (s *Server) listening() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ln != nil
}

func (s *Server) status(ctx context.Context, a NameArgs) (Status, error) {
	s.settle()
	st := Status{Store: s.store.Dir(), Server: s.listening(), Mounts: []MountInfo{}}
	if st.Server {
		st.PID = s.pid
	}
	for _, m := range s.Mounts() {
		if a.Name == "" || m.Sandbox == a.Name {
			st.Mounts = append(st.Mounts, m)
		}
	}
	withKernelFlags(st.Mounts)
	if a.Name != "" {
		sb, err := s.sandbox(a.Name)
		if err != nil {
			return Status{}, err
		}
		st.Sandbox = &sb
	}
	return st, nil
}

// withMount adds a sandbox's mount, if any, to its record.
func (s *Server) withMount(info layers.SandboxInfo) Sandbox {
	return s.withMounts([]layers.SandboxInfo{info})[0]
}

// withMounts adds each sandbox's mount, if any, to its record. The
// kernel's mount table, for the flags a remount changed, is read once,
// and not while the server's lock is held.
func (s *Server) withMounts(infos []layers.SandboxInfo) []Sandbox {
	out := make([]Sandbox, len(infos))
	var ms []MountInfo
	var at []int // out's index of each of ms
	s.mu.Lock()
	for i, info := range infos {
		out[i] = Sandbox{SandboxInfo: info}
		if lm, ok := s.mounts[info.Name]; ok {
			ms, at = append(ms, lm.info), append(at, i)
		}
	}
	s.mu.Unlock()
	if len(ms) > 0 {
		withKernelFlags(ms)
	}
	for j, m := range ms {
		sb := &out[at[j]]
		sb.Mounted, sb.Mountpoint, sb.ReadOnly = true, m.Mountpoint, m.ReadOnly
	}
	return out
}

func (s *Server) sandbox(name string) (Sandbox, error) {
	s.settle()
	info, err := s.store.Sandbox(name)
	if err != nil {
		return Sandbox{}, err
	}
	return s.withMount(info), nil
}

func (s *Server) sandboxCreate(ctx context.Context, a CreateArgs) (Sandbox, error) {
	if !filepath.IsAbs(a.Base) {
		return Sandbox{}, coded(layers.ErrInvalid, fmt.Sprintf("base %q is not an absolute path", a.Base))
	}
	st, err := os.Stat(a.Base)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return Sandbox{}, coded(layers.ErrNotFound, fmt.Sprintf("base %s does not exist", a.Base))
	case err != nil:
		return Sandbox{}, fmt.Errorf("base %s: %w", a.Base, err)
	case !st.IsDir():
		return Sandbox{}, coded(layers.ErrNotDir, fmt.Sprintf("base %s is not a directory", a.Base))
	}
	info, err := s.store.CreateSandbox(a.Name, a.Base, a.BlockSize)
	if err != nil {
		return Sandbox{}, err
	}
	return s.withMount(info), nil
}

func (s *Server) sandboxList(ctx context.Context, _ empty) ([]Sandbox, error) {
	s.settle()
	infos, err := s.store.Sandboxes()
	if err != nil {
		return nil, err
	}
	return s.withMounts(infos), nil
}

func (s *Server) sandboxShow(ctx context.Context, a NameArgs) (SandboxDetail, error) {
	sb, err := s.sandbox(a.Name)
	if err != nil {
		return SandboxDetail{}, err
	}
	stack, err := s.store.Stack(a.Name)
	if err != nil {
		return SandboxDetail{}, err
	}
	d := SandboxDetail{Sandbox: sb, Layers: make([]layers.LayerInfo, 0, len(stack))}
	for _, id := range stack {
		l, err := s.store.Layer(id)
		if err != nil {
			return SandboxDetail{}, err
		}
		d.Layers = append(d.Layers, l)
	}
	return d, nil
}

func (s *Server) sandboxRemove(ctx context.Context, a NameArgs) (Sandbox, error) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	sb, err := s.sandbox(a.Name)
	if err != nil {
		return Sandbox{}, err
	}
	if sb.Mounted {
		return Sandbox{}, coded(layers.ErrMounted, fmt.Sprintf("sandbox %s is mounted at %s", a.Name, sb.Mountpoint))
	}
	// The checkpoint and archive records go with the sandbox.
	if err := s.checkpoints().RemoveSandbox(a.Name); err != nil {
		return Sandbox{}, err
	}
	return sb, nil
}

func (s *Server) mount(ctx context.Context, a MountArgs) (MountInfo, error) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	info, err := s.mountLocked(a)
	if err != nil {
		s.log.Printf("mount %s at %s: %v", a.Name, a.Mountpoint, err)
	}
	return info, err
}

func (s *Server) mountLocked(a MountArgs) (MountInfo, error) {
	s.settle()
	s.mu.Lock()
	closing := s.closing
	lm := s.mounts[a.Name]
	s.mu.Unlock()
	if closing {
		return MountInfo{}, ErrShuttingDown
	}
	if !filepath.IsAbs(a.Mountpoint) {
		return MountInfo{}, coded(layers.ErrInvalid, fmt.Sprintf("mountpoint %q is not an absolute path", a.Mountpoint))
	}
	if _, err := s.store.Sandbox(a.Name); err != nil {
		return MountInfo{}, err
	}
	if lm != nil {
		return MountInfo{}, coded(layers.ErrMounted, fmt.Sprintf("sandbox %s is already mounted at %s", a.Name, lm.info.Mountpoint))
	}
	if err := CheckFuseDevice(a.AllowOther); err != nil {
		return MountInfo{}, err
	}
	mp, err := CheckMountpoint(a.Mountpoint)
	if err != nil {
		return MountInfo{}, err
	}
	v, err := s.store.OpenView(a.Name, a.ReadOnly)
	if err != nil {
		return MountInfo{}, err
	}
	o := s.opts.FS
	o.AllowOther = a.AllowOther
	o.NoExec = a.NoExec
	m, err := fs.New(mp, v, o)
	if err != nil {
		v.Close()
		return MountInfo{}, err
	}
	lm = &liveMount{m: m, gone: make(chan struct{}), info: MountInfo{
		Sandbox: a.Name, Mountpoint: mp, ReadOnly: a.ReadOnly, AllowOther: a.AllowOther, NoExec: a.NoExec,
		PID: s.pid, Since: time.Now().UTC(),
	}}
	s.mu.Lock()
	s.mounts[a.Name] = lm
	s.saveRecordLocked()
	s.mu.Unlock()
	go s.watch(lm)
	s.log.Printf("mounted %s at %s", a.Name, mp)
	return lm.info, nil
}

func (s *Server) unmount(ctx context.Context, a UnmountArgs) (UnmountResult, error) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.settle()
	s.mu.Lock()
	lm := s.mounts[a.Name]
	if lm == nil && a.Mountpoint != "" {
		for _, m := range s.mounts {
			if m.info.Mountpoint == a.Mountpoint {
				lm = m
			}
		}
	}
	s.mu.Unlock()
	if lm == nil {
		what := a.Name
		if what == "" {
			what = a.Mountpoint
		}
		return UnmountResult{}, coded(ErrNotMounted, fmt.Sprintf("%s is not mounted", what))
	}
	if err := lm.m.Unmount(); err != nil {
		if isBusy(err) {
			return UnmountResult{}, coded(ErrBusy, fmt.Sprintf("mountpoint %s is busy: files are open or a process works in it", lm.info.Mountpoint))
		}
		return UnmountResult{}, err
	}
	<-lm.gone
	if lm.err != nil {
		return UnmountResult{}, lm.err
	}
	return UnmountResult{MountInfo: lm.info, ServerExits: s.exitAfterAnswer(ctx)}, nil
}
