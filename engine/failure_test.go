package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/kernels"
)

// settleGoroutines waits (bounded) for the goroutine count to come back to at most want.
func settleGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > want {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines leaked: %d, want at most %d\n%s", got, want, buf[:runtime.Stack(buf, true)])
	}
}

// TestMismatch: ranks that disagree on a call all get the same *MismatchError naming the field,
// within a bounded time, and the communicator is aborted (data of the call may have moved).
func TestMismatch(t *testing.T) {
	type call struct {
		coll  costmodel.Coll
		count int
		dt    kernels.Dtype
		op    kernels.Op
		root  int
	}
	ar := call{costmodel.AllReduce, 1000, kernels.Float32, kernels.Sum, 0}
	cases := []struct {
		name  string
		field string
		odd   func(c call) call // the call of the odd rank
	}{
		{"count", "count", func(c call) call { c.count++; return c }},
		{"dtype", "dtype", func(c call) call { c.dt = kernels.Int32; return c }},
		{"op", "op", func(c call) call { c.op = kernels.Max; return c }},
		{"collective", "collective", func(c call) call { c.coll = costmodel.Reduce; return c }},
		{"root", "root", func(c call) call { c.coll, c.root = costmodel.Broadcast, 1; return c }},
		{"count zero", "count", func(c call) call { c.count = 0; return c }},
	}
	for _, tc := range cases {
		for _, n := range []int{2, 5} {
			for _, odd := range []int{0, n - 1} {
				t.Run(fmt.Sprintf("%s/n%d/odd%d", tc.name, n, odd), func(t *testing.T) {
					base := ar
					if tc.name == "root" {
						base.coll = costmodel.Broadcast
					}
					comms, err := NewInProcess(n, Config{Buffers: tinyBuffers()})
					require.NoError(t, err)
					defer closeAll(comms)
					do := func(c *Comm, k call) error {
						buf := make([]byte, k.count*8*n+8)
						switch k.coll {
						case costmodel.Reduce:
							return c.Reduce(bg, buf, buf, k.count, k.dt, k.op, k.root)
						case costmodel.Broadcast:
							return c.Broadcast(bg, buf, buf, k.count, k.dt, k.root)
						}
						return c.AllReduce(bg, buf, buf, k.count, k.dt, k.op)
					}
					errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
						k := base
						if r == odd {
							k = tc.odd(base)
						}
						return do(c, k)
					})
					var first *MismatchError
					for r, err := range errs {
						var me *MismatchError
						require.ErrorAs(t, err, &me, "rank %d", r)
						assert.ErrorIs(t, err, ErrMismatch)
						assert.Equal(t, tc.field, me.Field, "rank %d: %v", r, err)
						if first == nil {
							first = me
						}
						assert.Equal(t, first, me, "every rank reports the same mismatch")
					}
					// Aborted: every later call fails, naming the reason.
					errs = runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error { return do(c, ar) })
					for r, err := range errs {
						var ae *AbortError
						require.ErrorAs(t, err, &ae, "rank %d after the mismatch", r)
						assert.Equal(t, wire.AbortReasons[abortDisagree], ae.Reason)
					}
				})
			}
		}
	}
}

// TestMismatchedPlan: ranks whose plans differ (here one rank pins another protocol) fail with a
// mismatch instead of running incompatible wire formats.
func TestMismatchedPlan(t *testing.T) {
	comms, err := NewInProcess(3, Config{Buffers: tinyBuffers(), Override: Pin(costmodel.Ring, costmodel.LL)})
	require.NoError(t, err)
	defer closeAll(comms)
	comms[1].SetOverride(Pin(costmodel.Ring, costmodel.Simple))
	errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		b := make([]byte, 400)
		return c.AllReduce(bg, b, b, 100, kernels.Float32, kernels.Sum)
	})
	for r, err := range errs {
		var me *MismatchError
		require.ErrorAs(t, err, &me, "rank %d", r)
		assert.Equal(t, "protocol", me.Field)
	}
}

// TestRejected: an invalid argument on one rank is ErrInvalid there and ErrRejected on the others,
// never a hang, and aborts the communicator; a call every rank finds invalid leaves it usable.
func TestRejected(t *testing.T) {
	comms, err := NewInProcess(4, Config{Buffers: tinyBuffers()})
	require.NoError(t, err)
	defer closeAll(comms)
	errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		b := make([]byte, 400)
		if r == 2 {
			b = b[:396] // one element short
		}
		return c.AllReduce(bg, b, b, 100, kernels.Float32, kernels.Sum)
	})
	for r, err := range errs {
		if r == 2 {
			assert.ErrorIs(t, err, ErrInvalid)
		} else {
			assert.ErrorIs(t, err, ErrRejected, "rank %d", r)
		}
	}
	errs = runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		b := make([]byte, 8)
		return c.AllReduce(bg, b, b, 2, kernels.Float32, kernels.Sum)
	})
	for r, err := range errs {
		assert.ErrorIs(t, err, ErrAborted, "rank %d after the rejection", r)
	}

	// Invalid on every rank: each reports its own ErrInvalid, and no data moved.
	comms2, err := NewInProcess(4, Config{Buffers: tinyBuffers()})
	require.NoError(t, err)
	defer closeAll(comms2)
	errs = runRanks(t, comms2, 10*time.Second, func(r int, c *Comm) error {
		return c.Broadcast(bg, nil, make([]byte, 8), 2, kernels.Float32, 7)
	})
	for _, err := range errs {
		assert.ErrorIs(t, err, ErrInvalid)
	}
	errs = runRanks(t, comms2, 10*time.Second, func(r int, c *Comm) error {
		b := []byte{1, 0, 0, 0}
		return c.AllReduce(bg, b, b, 1, kernels.Int32, kernels.Sum)
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d after a call every rank rejected", r)
	}
}

// TestCancelWhileWaiting: ranks wait for a rank that never joins; cancelling one rank's context
// ends every rank's call with an error (the canceller's context error, the others' ErrAborted), the
// communicator stays aborted, and no goroutine is left behind.
func TestCancelWhileWaiting(t *testing.T) {
	before := runtime.NumGoroutine()
	const n = 4
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(bg)
	time.AfterFunc(30*time.Millisecond, cancel)
	errs := runRanks(t, comms[1:], 10*time.Second, func(r int, c *Comm) error {
		b := make([]byte, 4000)
		if r == 0 { // comms[1]
			return c.AllReduce(ctx, b, b, 1000, kernels.Float32, kernels.Sum)
		}
		return c.AllReduce(bg, b, b, 1000, kernels.Float32, kernels.Sum)
	})
	assert.ErrorIs(t, errs[0], context.Canceled)
	for _, err := range errs[1:] {
		var ae *AbortError
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, 1, ae.Rank)
	}
	// The rank that never joined finds the communicator aborted.
	assert.ErrorIs(t, comms[0].AllReduce(bg, make([]byte, 4000), make([]byte, 4000), 1000, kernels.Float32, kernels.Sum), ErrAborted)
	closeAll(comms)
	settleGoroutines(t, before)
}

// TestCancelDuringData cancels every rank in the middle of a long AllReduce (tiny FIFOs, a large
// buffer): every rank returns promptly with an error and no goroutine is left.
func TestCancelDuringData(t *testing.T) {
	for _, algo := range []costmodel.Algo{costmodel.Ring, costmodel.Tree} {
		for _, proto := range protos {
			t.Run(algo.String()+"/"+proto.String(), func(t *testing.T) {
				before := runtime.NumGoroutine()
				const n = 5
				cfg := Config{Buffers: tinyBuffers(), Override: Pin(algo, proto), RanksPerNode: 2}
				cfg.Override.Channels = 3
				comms, err := NewInProcess(n, cfg)
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(bg)
				time.AfterFunc(20*time.Millisecond, cancel)
				const count = 1 << 22 // far more than 20 ms of work through 16-byte slots
				start := time.Now()
				errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
					b := make([]byte, count*4)
					return c.AllReduce(ctx, b, b, count, kernels.Float32, kernels.Sum)
				})
				elapsed := time.Since(start)
				for r, err := range errs {
					require.Error(t, err, "rank %d", r)
					assert.True(t, errors.Is(err, context.Canceled) || errors.Is(err, ErrAborted), "rank %d: %v", r, err)
				}
				assert.Less(t, elapsed, 5*time.Second)
				closeAll(comms)
				settleGoroutines(t, before)
			})
		}
	}
}

// TestCloseWhileWaiting: closing a rank whose collective waits for a peer ends that collective
// with ErrClosed and aborts the others; closing a rank that is idle makes the peers waiting for it
// fail with ErrPeerClosed.
func TestCloseWhileWaiting(t *testing.T) {
	before := runtime.NumGoroutine()
	const n = 3
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers()})
	require.NoError(t, err)
	// Rank 0 never joins; rank 1 is closed while its AllReduce waits.
	time.AfterFunc(30*time.Millisecond, func() { comms[1].Close() })
	errs := runRanks(t, comms[1:], 10*time.Second, func(r int, c *Comm) error {
		b := make([]byte, 400)
		return c.AllReduce(bg, b, b, 100, kernels.Float32, kernels.Sum)
	})
	assert.ErrorIs(t, errs[0], ErrClosed)
	assert.ErrorIs(t, errs[1], ErrAborted)
	assert.ErrorIs(t, comms[1].AllReduce(bg, nil, nil, 0, kernels.Float32, kernels.Sum), ErrClosed)
	closeAll(comms)

	// Idle close: rank 2 closes without joining; the others get ErrPeerClosed.
	comms, err = NewInProcess(n, Config{Buffers: tinyBuffers()})
	require.NoError(t, err)
	time.AfterFunc(30*time.Millisecond, func() { comms[2].Close() })
	errs = runRanks(t, comms[:2], 10*time.Second, func(r int, c *Comm) error {
		b := make([]byte, 400)
		return c.AllReduce(bg, b, b, 100, kernels.Float32, kernels.Sum)
	})
	for _, err := range errs {
		assert.ErrorIs(t, err, ErrPeerClosed)
	}
	closeAll(comms)
	settleGoroutines(t, before)
}

// TestCloseAfterUse: ranks that finish a call and close one after another never disturb a slower
// rank still finishing the same call.
func TestCloseAfterUse(t *testing.T) {
	before := runtime.NumGoroutine()
	for iter := 0; iter < 20; iter++ {
		comms, err := NewInProcess(5, Config{Buffers: tinyBuffers(), Override: Pin(costmodel.Ring, costmodel.LL)})
		require.NoError(t, err)
		errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
			b := make([]byte, 4*999)
			err := c.AllReduce(bg, b, b, 999, kernels.Float32, kernels.Sum)
			c.Close()
			return err
		})
		for r, err := range errs {
			require.NoError(t, err, "iteration %d rank %d", iter, r)
		}
	}
	settleGoroutines(t, before)
}

// TestAbort: a rank's Abort ends the calls of the ranks waiting for it, naming it.
func TestAbort(t *testing.T) {
	before := runtime.NumGoroutine()
	comms, err := NewInProcess(4, Config{Buffers: tinyBuffers()})
	require.NoError(t, err)
	time.AfterFunc(30*time.Millisecond, func() { comms[2].Abort() })
	errs := runRanks(t, []*Comm{comms[0], comms[1], comms[3]}, 10*time.Second, func(r int, c *Comm) error {
		b := make([]byte, 400)
		return c.AllReduce(bg, b, b, 100, kernels.Float32, kernels.Sum)
	})
	for _, err := range errs {
		var ae *AbortError
		require.ErrorAs(t, err, &ae)
		assert.Equal(t, 2, ae.Rank)
		assert.Equal(t, "aborted", ae.Reason)
	}
	// A launcher's abort: the word stored in the control region.
	comms2, err := NewInProcess(2, Config{Buffers: tinyBuffers()})
	require.NoError(t, err)
	ctrl, err := comms2[0].tr.Region(transport.CtrlRegion, wire.CtrlSize(2))
	require.NoError(t, err)
	time.AfterFunc(30*time.Millisecond, func() { atomic.CompareAndSwapUint64(wire.WordAt(ctrl, CtrlAbortOffset), 0, AbortWord(1)) })
	err = comms2[0].AllReduce(bg, make([]byte, 8), make([]byte, 8), 2, kernels.Float32, kernels.Sum)
	var ae *AbortError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 1, ae.Rank)
	closeAll(comms)
	closeAll(comms2)
	settleGoroutines(t, before)
}
