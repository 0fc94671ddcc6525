package wire

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeParker is a Parker whose bell the test rings; it records what the waits asked of it.
type fakeParker struct {
	mu     sync.Mutex
	ch     chan struct{}
	pokes  atomic.Int64
	arms   atomic.Int64
	after  time.Duration
	armedT atomic.Int64 // Nanotime of the first arm
}

func (p *fakeParker) Poke() { p.pokes.Add(1) }

func (p *fakeParker) Bell() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		p.ch = make(chan struct{})
	}
	p.arms.Add(1)
	p.armedT.CompareAndSwap(0, Nanotime())
	return p.ch
}

func (p *fakeParker) ParkAfter() time.Duration { return p.after }

func (p *fakeParker) ring() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch != nil {
		close(p.ch)
		p.ch = nil
	}
}

func testCtl() *Ctl {
	var abort uint64
	return &Ctl{Rank: 0, N: 2, Abort: &abort, AbortError: func(uint64) error { return ErrAborted }}
}

// TestParkedWait: a wait on a transport that offers a bell pokes the transport's poller once, at
// its first unsuccessful poll; yields for the transport's ParkAfter, not the engine's millisecond,
// before it arms the bell; and returns once the word is stored and the bell rung.
func TestParkedWait(t *testing.T) {
	p := &fakeParker{after: 100 * time.Microsecond}
	w := NewWaiter(testCtl(), context.Background(), false, false)
	w.Park = p
	var word uint64
	start := Nanotime()
	done := make(chan error, 1)
	go func() { done <- w.WaitGE(&word, 1, 1) }()
	deadline := time.Now().Add(5 * time.Second)
	for p.arms.Load() == 0 {
		require.True(t, time.Now().Before(deadline), "the wait never armed the bell")
		time.Sleep(50 * time.Microsecond)
	}
	armedAfter := time.Duration(p.armedT.Load() - start)
	assert.GreaterOrEqual(t, armedAfter, p.after, "armed before ParkAfter")
	assert.Less(t, armedAfter, yieldTime, "armed only after the engine's whole yield phase: ParkAfter ignored")
	atomic.StoreUint64(&word, 1)
	p.ring()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("the parked wait did not return after the store and the ring")
	}
	assert.Equal(t, int64(1), p.pokes.Load(), "pokes")
}

// TestParkedWaitSeesAbort: a parked wait still ends when the communicator is aborted without a
// ring (the block is bounded by the sleep phase's back-off).
func TestParkedWaitSeesAbort(t *testing.T) {
	p := &fakeParker{after: time.Microsecond}
	c := testCtl()
	w := NewWaiter(c, context.Background(), false, false)
	w.Park = p
	var word uint64
	done := make(chan error, 1)
	go func() { done <- w.WaitGE(&word, 1, 1) }()
	deadline := time.Now().Add(5 * time.Second)
	for p.arms.Load() == 0 {
		require.True(t, time.Now().Before(deadline), "the wait never armed the bell")
		time.Sleep(50 * time.Microsecond)
	}
	time.Sleep(2 * time.Millisecond) // parked, its timer expired several times (the bell stays armed)
	assert.Equal(t, int64(1), p.arms.Load(), "a bell that was not rung is armed once")
	c.SetAbort(AbortClosed)
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrAborted)
	case <-time.After(5 * time.Second):
		t.Fatal("the parked wait did not see the abort")
	}
}

// TestWaiterCopy: a waiter copied for another goroutine shares neither its armed bell nor its
// timer (two goroutines resetting one timer would race), and From keeps the target's timer.
func TestWaiterCopy(t *testing.T) {
	var w Waiter
	w.bell, w.timer = make(chan struct{}), time.NewTimer(time.Hour)
	defer w.timer.Stop()
	v := w.Copy()
	assert.Nil(t, v.bell)
	assert.Nil(t, v.timer)
	var u Waiter
	u.timer = time.NewTimer(time.Hour)
	defer u.timer.Stop()
	mine := u.timer
	u.From(&w)
	assert.Same(t, mine, u.timer)
	assert.Nil(t, u.bell)
}

// TestShortParkAfterReadsTheClock: a wait with a Park reads the clock at every poll, so a
// ParkAfter of a few microseconds ends the yield phase at the first poll past it, not at the
// next clockPolls-th (16 sched_yields where processes outnumber the cores).
func TestShortParkAfterReadsTheClock(t *testing.T) {
	p := &fakeParker{after: time.Nanosecond}
	w := NewWaiter(testCtl(), context.Background(), true, false)
	w.Park = p
	armedAt := -1
	for i := 0; i < 4*clockPolls && armedAt < 0; i++ {
		require.NoError(t, w.Idle(i, 1))
		if p.arms.Load() > 0 {
			armedAt = i
		}
	}
	require.GreaterOrEqual(t, armedAt, 0, "never armed")
	assert.Less(t, armedAt, clockPolls/2, "armed at poll %d", armedAt)
}
