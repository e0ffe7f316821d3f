package layers

import (
	"sync"
	"sync/atomic"
)

// Fault injection, for tests of callers' error handling.
//
// The error paths of the packages above layers (a checkpoint or rollback
// whose own table writes fail inside the transaction that moves a head)
// cannot be reached with a healthy store. A test installs a fault function
// on one Store; the Txn operations that touch the callers' tables (Get,
// Set, Delete, Scan), the layer pins (Pin, Unpin) and the reads of layer
// and sandbox records callers make (see FaultFunc) ask it first and fail
// with its error. Nothing is installed by default, and then each of those
// operations costs one atomic load and a nil check.

// FaultFunc decides whether one transactional operation fails: op is
// "get", "set", "delete", "scan", "pin" or "unpin", key the key, prefix or
// layer it names; or one of the reads callers make of the store's own
// records: "layer" (Txn.Layer) and "blocks" (Txn.LayerUsage) with the
// layer, "layers" (Store.Layers) and "stack" (Store.Stack) with the
// sandbox, "usage" (Store.LayerUsage) with the layer, "sandboxes"
// (Store.Sandboxes) with "", "compare" (Store.Compare) with the sandbox;
// or "datasync" with the sandbox: a data sync of a live view (a freeze, a
// repoint, a Sync), as a failing disk would fail it. A nil result lets the
// operation go ahead.
type FaultFunc func(op, key string) error

// faultTable maps stores to their fault functions; it is replaced, never
// changed in place, so that readers need no lock.
type faultTable map[*Store]FaultFunc

var (
	faultsMu sync.Mutex                 // serialises installs and restores
	faults   atomic.Pointer[faultTable] // nil while no store has a fault
)

// InjectFault makes f decide, until restore is called, whether each
// transactional operation of this store on the callers' tables and pins
// fails (see FaultFunc). It is for tests of callers' error handling, and
// replaces any fault function installed before on the store; restore
// removes it.
func (s *Store) InjectFault(f FaultFunc) (restore func()) {
	setFault(s, f)
	var once sync.Once
	return func() { once.Do(func() { setFault(s, nil) }) }
}

func setFault(s *Store, f FaultFunc) {
	faultsMu.Lock()
	defer faultsMu.Unlock()
	next := faultTable{}
	if cur := faults.Load(); cur != nil {
		for k, v := range *cur {
			next[k] = v
		}
	}
	if f == nil {
		delete(next, s)
	} else {
		next[s] = f
	}
	if len(next) == 0 {
		faults.Store(nil)
		return
	}
	faults.Store(&next)
}

// fault is the injected error, if any, for op on key in this transaction.
func (t *Txn) fault(op, key string) error { return t.s.fault(op, key) }

// fault is the injected error, if any, for op on key in this store.
func (s *Store) fault(op, key string) error {
	tab := faults.Load()
	if tab == nil {
		return nil
	}
	if f := (*tab)[s]; f != nil {
		return f(op, key)
	}
	return nil
}
