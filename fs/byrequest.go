package fs

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// byRequest hands a value from a raw request, which go-fuse's node API
// does not pass on, to the node or handle that serves it: keyed by the
// request's cancel channel, which is the request's own while it is served
// and reaches the node in its fuse.Context. killprivFS, umaskFS and
// reviveFS use it.
type byRequest[T any] struct {
	vals sync.Map     // cancel channel -> T
	n    atomic.Int32 // entries in vals: most requests look no further
}

// set keeps v for the request of cancel until the returned func runs.
func (b *byRequest[T]) set(cancel <-chan struct{}, v T) (unset func()) {
	b.n.Add(1)
	b.vals.Store(cancel, v)
	return func() {
		b.vals.Delete(cancel)
		b.n.Add(-1)
	}
}

// get is the value kept for the request of ctx, if any.
func (b *byRequest[T]) get(ctx context.Context) (T, bool) {
	var zero T
	if b.n.Load() == 0 {
		return zero, false
	}
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return zero, false
	}
	v, ok := b.vals.Load(fc.Cancel)
	if !ok {
		return zero, false
	}
	return v.(T), true
}

// put keeps v for the request of ctx, the other way round from set: the
// node hands it to the raw request's wrapper, which takes it afterwards.
func (b *byRequest[T]) put(ctx context.Context, v T) {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return
	}
	if _, loaded := b.vals.Swap(fc.Cancel, v); !loaded {
		b.n.Add(1)
	}
}

// take removes and returns what put kept for the request of cancel; it
// costs one atomic load when nothing is kept.
func (b *byRequest[T]) take(cancel <-chan struct{}) (T, bool) {
	var zero T
	if b.n.Load() == 0 {
		return zero, false
	}
	v, ok := b.vals.LoadAndDelete(cancel)
	if !ok {
		return zero, false
	}
	b.n.Add(-1)
	return v.(T), true
}
