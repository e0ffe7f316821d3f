package layers

import (
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// FreezeFunc records, in the transaction that freezes a layer, what the
// caller keeps about it (a checkpoint). frozen is the layer just sealed,
// next the new empty active layer above it.
type FreezeFunc func(tx *Txn, frozen, next string) error

// Freeze seals a sandbox's active layer and opens a new, empty one above it,
// in one transaction that also runs fn. Written data is made durable first,
// so a checkpoint holds everything written before it. Whether or not the
// sandbox is mounted (has a live view in this process), the cost does not
// depend on the size of the workspace, only on what was written since the
// last seal.
func (s *Store) Freeze(name string, fn FreezeFunc) (frozen, next string, err error) {
	s.mu.Lock()
	v := s.views[name]
	s.mu.Unlock()
	if v != nil {
		return v.freeze(fn)
	}
	next = NewID()
	err = s.update(func(txn *badger.Txn) error {
		var err error
		frozen, err = freezeTxn(txn, name, next)
		if err != nil {
			return err
		}
		return fn(&Txn{txn: txn, s: s}, frozen, next)
	})
	if err == nil {
		err = s.Sync()
	}
	return frozen, next, err
}

func freezeTxn(txn *badger.Txn, name, next string) (string, error) {
	var info SandboxInfo
	if err := getJSON(txn, keySandbox(name), &info); err != nil {
		return "", fmt.Errorf("sandbox %s: %w", name, err)
	}
	var top LayerInfo
	if err := getJSON(txn, keyLayer(info.Head), &top); err != nil {
		return "", fmt.Errorf("layer %s: %w", info.Head, err)
	}
	if top.State != StateActive {
		return "", fmt.Errorf("layer %s is %s: %w", top.ID, top.State, ErrCorrupt)
	}
	top.State = StateFrozen
	if err := putJSON(txn, keyLayer(top.ID), top); err != nil {
		return "", err
	}
	nl := LayerInfo{ID: next, Sandbox: name, Parent: top.ID, State: StateActive, Created: time.Now().UTC()}
	if err := putJSON(txn, keyLayer(next), nl); err != nil {
		return "", err
	}
	info.Head = next
	return top.ID, putJSON(txn, keySandbox(name), info)
}

// quiesce stops the view's writers, seals and commits everything, and
// makes it durable; it returns with ioMu and mu held.
func (v *View) quiesce() error {
	v.ioMu.Lock()
	v.mu.Lock()
	if v.closed {
		return ErrClosed
	}
	if v.ro {
		return ErrReadOnly
	}
	if err := v.sealLocked(); err != nil {
		return err
	}
	if f := v.files[v.activeLayer()]; f != nil {
		if err := f.Sync(); err != nil {
			return fmt.Errorf("sync data: %w", mapOSErr(err))
		}
	}
	return v.commit()
}

func (v *View) release() {
	v.mu.Unlock()
	v.ioMu.Unlock()
}

func (v *View) freeze(fn FreezeFunc) (frozen, next string, err error) {
	defer v.release()
	if err := v.quiesce(); err != nil {
		return "", "", err
	}
	next = NewID()
	err = v.s.update(func(txn *badger.Txn) error {
		var err error
		frozen, err = freezeTxn(txn, v.info.Name, next)
		if err != nil {
			return err
		}
		return fn(&Txn{txn: txn, s: v.s}, frozen, next)
	})
	if err == nil {
		// A checkpoint makes everything before it durable.
		err = v.s.Sync()
	}
	if err != nil {
		return "", "", err
	}
	v.punchLocked(v.files[v.activeLayer()], v.takeFreedLocked())
	// Caches stay valid in content, but they name the old active layer as
	// the one being written: rebuild them lazily over the new stack.
	stack := append([]string{next}, v.stack...)
	if err := v.setStackLocked(stack); err != nil {
		return "", "", err
	}
	return frozen, next, nil
}

// RepointFunc records, in the transaction that moves a sandbox's head, what
// the caller keeps about the move. left are the layers of the old stack that
// the new one does not contain (they are now archived, top first); joined
// are the archived layers the new stack brings back.
type RepointFunc func(tx *Txn, left, joined []string, next string) error

// Repoint moves a sandbox's head to a new empty active layer over parent, a
// frozen or archived layer, in one transaction that also runs fn. The old
// active layer is sealed and archived with the other layers that leave the
// stack, so nothing is lost and the move can be undone. A live view in this
// process switches to the new stack before Repoint returns; the caller then
// tells the kernel (fs.Mount.Invalidate).
func (s *Store) Repoint(name, parent string, fn RepointFunc) (next string, err error) {
	s.mu.Lock()
	v := s.views[name]
	s.mu.Unlock()
	if v != nil {
		defer v.release()
		if err := v.quiesce(); err != nil {
			return "", err
		}
	}
	next = NewID()
	var stack []string
	err = s.update(func(txn *badger.Txn) error {
		old, err := stackOf(txn, name)
		if err != nil {
			return err
		}
		var pl LayerInfo
		if err := getJSON(txn, keyLayer(parent), &pl); err != nil {
			return fmt.Errorf("layer %s: %w", parent, err)
		}
		if pl.State == StateActive {
			return fmt.Errorf("layer %s is the active layer: %w", parent, ErrInvalid)
		}
		newChain, err := chainOf(txn, parent)
		if err != nil {
			return err
		}
		in := map[string]bool{}
		for _, id := range newChain {
			in[id] = true
		}
		was := map[string]bool{}
		var left, joined []string
		for _, id := range old {
			was[id] = true
			if in[id] {
				continue
			}
			left = append(left, id)
			if err := setLayerState(txn, id, StateArchived); err != nil {
				return err
			}
		}
		for _, id := range newChain {
			var l LayerInfo
			if err := getJSON(txn, keyLayer(id), &l); err != nil {
				return err
			}
			if l.State == StateArchived {
				joined = append(joined, id)
				if err := setLayerState(txn, id, StateFrozen); err != nil {
					return err
				}
			}
		}
		nl := LayerInfo{ID: next, Sandbox: name, Parent: parent, State: StateActive, Created: time.Now().UTC()}
		if err := putJSON(txn, keyLayer(next), nl); err != nil {
			return err
		}
		var info SandboxInfo
		if err := getJSON(txn, keySandbox(name), &info); err != nil {
			return err
		}
		info.Head = next
		if err := putJSON(txn, keySandbox(name), info); err != nil {
			return err
		}
		stack = append([]string{next}, newChain...)
		return fn(&Txn{txn: txn, s: s}, left, joined, next)
	})
	if err == nil {
		err = s.Sync()
	}
	if err != nil {
		return "", err
	}
	if v != nil {
		v.punchLocked(v.files[v.activeLayer()], v.takeFreedLocked())
		if err := v.setStackLocked(stack); err != nil {
			return "", err
		}
		v.epoch++
	}
	return next, nil
}

func setLayerState(txn *badger.Txn, id, state string) error {
	var l LayerInfo
	if err := getJSON(txn, keyLayer(id), &l); err != nil {
		return fmt.Errorf("layer %s: %w", id, err)
	}
	l.State = state
	return putJSON(txn, keyLayer(id), l)
}

// SetLayerState changes a layer's state inside a transaction (prune and
// fork use it). An active layer cannot be changed this way.
func (t *Txn) SetLayerState(id, state string) error {
	var l LayerInfo
	if err := getJSON(t.txn, keyLayer(id), &l); err != nil {
		return fmt.Errorf("layer %s: %w", id, err)
	}
	if l.State == StateActive {
		return fmt.Errorf("layer %s: %w", id, ErrInvalid)
	}
	return setLayerState(t.txn, id, state)
}

// Layer reads a layer record inside a transaction.
func (t *Txn) Layer(id string) (LayerInfo, error) {
	var l LayerInfo
	if err := getJSON(t.txn, keyLayer(id), &l); err != nil {
		return LayerInfo{}, fmt.Errorf("layer %s: %w", id, err)
	}
	return l, nil
}

// Sandbox reads a sandbox record inside a transaction.
func (t *Txn) Sandbox(name string) (SandboxInfo, error) {
	var info SandboxInfo
	if err := getJSON(t.txn, keySandbox(name), &info); err != nil {
		return SandboxInfo{}, fmt.Errorf("sandbox %s: %w", name, err)
	}
	return info, nil
}

// LayerUsage counts the blocks a layer holds and the files they belong to.
// A block is the sandbox's block size at most (less on a sparse tail).
func (s *Store) LayerUsage(id string) (blocks int64, files int, err error) {
	prefix := prefixLayerTable(tBlock, id)
	var last []byte
	err = s.view(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != len(prefix)+17 {
				return fmt.Errorf("block key %q: %w", k, ErrCorrupt)
			}
			blocks++
			if ino := k[len(prefix) : len(prefix)+8]; string(ino) != string(last) {
				files++
				last = append(last[:0], ino...)
			}
		}
		return nil
	})
	return blocks, files, err
}

// OpenSnapshot opens a read-only view of the stack whose top is layer
// (frozen or archived) of sandbox name: what the sandbox looked like when
// that layer was frozen. It does not count as the sandbox's live view.
// With layer "" it shows the sandbox's base alone, as it is now.
func (s *Store) OpenSnapshot(name, layer string) (*View, error) {
	var info SandboxInfo
	var stack []string
	err := s.view(func(txn *badger.Txn) error {
		if err := getJSON(txn, keySandbox(name), &info); err != nil {
			return fmt.Errorf("sandbox %s: %w", name, err)
		}
		if layer == "" {
			// A layer id no record names: an empty layer over the base.
			stack = []string{"base-" + NewID()}
			return nil
		}
		var err error
		stack, err = chainOf(txn, layer)
		return err
	})
	if err != nil {
		return nil, err
	}
	base, err := openBase(info.Base)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", name, err)
	}
	v := &View{
		s: s, info: info, ro: true, bs: int64(info.BlockSize), base: base,
		origins:  map[uint64]string{RootIno: ""},
		bparent:  map[uint64]uint64{},
		opens:    map[uint64]int{},
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
		snapshot: true,
	}
	if err := v.setStackLocked(stack); err != nil {
		base.close()
		return nil, err
	}
	close(v.stopped)
	return v, nil
}

// LiveView returns the sandbox's open view in this process, or nil.
func (s *Store) LiveView(name string) *View {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.views[name]
}

// Fork creates sandbox name over the frozen layer of another sandbox: it
// shares that layer and everything below it, and copies no data.
func (s *Store) Fork(name, layer string) (SandboxInfo, error) {
	if !ValidName(name) {
		return SandboxInfo{}, fmt.Errorf("sandbox name %q: %w", name, ErrInvalid)
	}
	var info SandboxInfo
	err := s.update(func(txn *badger.Txn) error {
		var old SandboxInfo
		if err := getJSON(txn, keySandbox(name), &old); err == nil {
			return fmt.Errorf("sandbox %s: %w", name, ErrExists)
		}
		var l LayerInfo
		if err := getJSON(txn, keyLayer(layer), &l); err != nil {
			return fmt.Errorf("layer %s: %w", layer, err)
		}
		if l.State == StateActive {
			return fmt.Errorf("layer %s is active: %w", layer, ErrInvalid)
		}
		var from SandboxInfo
		if err := getJSON(txn, keySandbox(l.Sandbox), &from); err != nil {
			return fmt.Errorf("sandbox %s of layer %s: %w", l.Sandbox, layer, err)
		}
		now := time.Now().UTC()
		info = SandboxInfo{Name: name, Base: from.Base, BlockSize: from.BlockSize, Head: NewID(), Created: now}
		if err := putJSON(txn, keyLayer(info.Head), LayerInfo{ID: info.Head, Sandbox: name, Parent: layer, State: StateActive, Created: now}); err != nil {
			return err
		}
		return putJSON(txn, keySandbox(name), info)
	})
	return info, err
}

// Layers lists the layers of a sandbox's stack (top first) and, with
// archived, the archived layers the sandbox created.
func (s *Store) Layers(name string, archived bool) ([]LayerInfo, error) {
	var out []LayerInfo
	err := s.view(func(txn *badger.Txn) error {
		stack, err := stackOf(txn, name)
		if err != nil {
			return err
		}
		for _, id := range stack {
			var l LayerInfo
			if err := getJSON(txn, keyLayer(id), &l); err != nil {
				return err
			}
			out = append(out, l)
		}
		if !archived {
			return nil
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte{tLayer, '/'}, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var l LayerInfo
			if err := it.Item().Value(func(b []byte) error { return jsonUnmarshal(b, &l) }); err != nil {
				return err
			}
			if l.Sandbox == name && l.State == StateArchived {
				out = append(out, l)
			}
		}
		return nil
	})
	return out, err
}
