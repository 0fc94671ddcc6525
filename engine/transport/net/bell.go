package net

import (
	"sync"
	"sync/atomic"
)

// bell wakes the ranks' parked waits (wire.Parker) after a reader stored a frame into this host's
// regions. arm returns a channel that the next ring closes; ring costs one atomic load while
// nobody is armed, which is the reader's common case when the ranks spin or yield.
//
// No wake-up is lost: a wait arms, then polls its word once more, then blocks; a reader stores the
// word, then rings. Both sides' atomics are sequentially consistent, so either the poll sees the
// store or the ring sees the arm.
type bell struct {
	armed atomic.Bool
	mu    sync.Mutex
	ch    chan struct{}
}

func (b *bell) arm() <-chan struct{} {
	b.mu.Lock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	ch := b.ch
	b.armed.Store(true)
	b.mu.Unlock()
	return ch
}

func (b *bell) ring() {
	if !b.armed.Load() {
		return
	}
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.armed.Store(false)
	b.mu.Unlock()
}
