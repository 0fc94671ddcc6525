package engine

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/kernels"
)

// TestWatchdog: ranks whose call waits on a rank that never joins it (stopped, hung, busy
// elsewhere) abort after the timeout, every one naming that rank, whichever rank each of them
// was waiting for directly (the ring passes through live ranks that wait too). Without a timeout
// the same call waits (checked for a second, then the ranks are closed).
func TestWatchdog(t *testing.T) {
	for _, tc := range []struct {
		n, absent int
		algo      costmodel.Algo
	}{{2, 1, costmodel.Ring}, {3, 0, costmodel.Ring}, {4, 2, costmodel.Ring}, {5, 4, costmodel.Tree}} {
		t.Run(fmt.Sprintf("n%d/absent%d/%v", tc.n, tc.absent, tc.algo), func(t *testing.T) {
			cfg := Config{Buffers: tinyBuffers(), Timeout: 300 * time.Millisecond, Override: Pin(tc.algo, costmodel.Simple)}
			comms, err := NewInProcess(tc.n, cfg)
			require.NoError(t, err)
			defer closeAll(comms)
			live := make([]*Comm, 0, tc.n-1)
			for r, c := range comms {
				if r != tc.absent {
					live = append(live, c)
				}
			}
			start := time.Now()
			errs := runRanks(t, live, 10*time.Second, func(_ int, c *Comm) error {
				b := make([]byte, 4096)
				return c.AllReduce(bg, b, b, 1024, kernels.Float32, kernels.Sum)
			})
			took := time.Since(start)
			for i, err := range errs {
				var ae *AbortError
				require.ErrorAs(t, err, &ae, "live rank %d", live[i].Rank())
				assert.ErrorIs(t, err, ErrAborted)
				assert.Equal(t, tc.absent, ae.Rank, "rank %d: %v", live[i].Rank(), err)
				assert.True(t, ae.Lost)
				assert.Contains(t, ae.Error(), fmt.Sprintf("communicator aborted: rank %d: it stopped moving data", tc.absent))
			}
			assert.GreaterOrEqual(t, took, 300*time.Millisecond, "not before the timeout")
			t.Logf("aborted after %s", took.Round(time.Millisecond))
		})
	}
	t.Run("off", func(t *testing.T) {
		comms, err := NewInProcess(2, Config{Buffers: tinyBuffers()})
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			b := make([]byte, 64)
			done <- comms[0].AllReduce(bg, b, b, 16, kernels.Float32, kernels.Sum)
		}()
		select {
		case err := <-done:
			t.Fatalf("the call returned without its peer and without a watchdog: %v", err)
		case <-time.After(time.Second):
		}
		closeAll(comms)
		assert.ErrorIs(t, <-done, ErrClosed)
	})
}

// TestWatchdogConfig: a negative timeout is refused.
func TestWatchdogConfig(t *testing.T) {
	_, err := NewInProcess(2, Config{Timeout: -time.Second})
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "Timeout -1s")
}

// joinAll joins n ranks over loopback, each from its own goroutine.
func joinAll(t *testing.T, n int) []*Session {
	t.Helper()
	addr, err := launch.FreeLoopbackAddr()
	require.NoError(t, err)
	ss := make([]*Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range ss {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ss[r], errs[r] = Join(context.Background(), r, n, addr, 7, "", 5*time.Second)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	return ss
}

// drop ends session s's connections the way a dying process does: no goodbye.
func (s *Session) drop() {
	for _, c := range s.conns {
		if c != nil {
			c.(*net.TCPConn).SetLinger(0)
			c.Close()
		}
	}
}

// TestSessionLostPeer: when a rank's rendezvous connections end without a goodbye (its process
// died), the communicator is aborted on every rank naming it, also when it happened before the
// communicator was attached; a rank that closes cleanly aborts nothing.
func TestSessionLostPeer(t *testing.T) {
	for _, tc := range []struct{ n, lost int }{{2, 1}, {3, 0}, {4, 2}} {
		t.Run(fmt.Sprintf("n%d/lost%d", tc.n, tc.lost), func(t *testing.T) {
			ss := joinAll(t, tc.n)
			defer func() {
				for _, s := range ss {
					s.Close()
				}
			}()
			comms, err := NewInProcess(tc.n, Config{Buffers: tinyBuffers()})
			require.NoError(t, err)
			defer closeAll(comms)
			for r, s := range ss {
				if r != tc.lost {
					s.Attach(comms[r])
				}
			}
			ss[tc.lost].drop()
			deadline := time.Now().Add(5 * time.Second)
			for comms[0].Aborted() == nil && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			err = comms[(tc.lost+1)%tc.n].Aborted()
			var ae *AbortError
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, tc.lost, ae.Rank)
			assert.True(t, ae.Lost)
			assert.Contains(t, err.Error(), "lost: its rendezvous connection ended without a goodbye")
			// A waiting call sees it.
			b := make([]byte, 64)
			assert.ErrorIs(t, comms[(tc.lost+1)%tc.n].AllReduce(bg, b, b, 16, kernels.Float32, kernels.Sum), ErrAborted)
		})
	}
	t.Run("before attach", func(t *testing.T) {
		ss := joinAll(t, 2)
		defer ss[0].Close()
		ss[1].drop()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, ok := ss[0].Lost(); ok || time.Now().After(deadline) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		comms, err := NewInProcess(2, Config{})
		require.NoError(t, err)
		defer closeAll(comms)
		ss[0].Attach(comms[0])
		var ae *AbortError
		require.ErrorAs(t, comms[0].Aborted(), &ae)
		assert.Equal(t, 1, ae.Rank)
	})
	t.Run("clean close", func(t *testing.T) {
		ss := joinAll(t, 3)
		comms, err := NewInProcess(3, Config{})
		require.NoError(t, err)
		defer closeAll(comms)
		for r, s := range ss {
			s.Attach(comms[r])
		}
		var wg sync.WaitGroup
		for _, s := range ss {
			wg.Add(1)
			go func() { defer wg.Done(); s.Close() }()
		}
		wg.Wait()
		time.Sleep(50 * time.Millisecond)
		for r, c := range comms {
			assert.NoError(t, c.Aborted(), "rank %d", r)
		}
	})
	t.Run("closed comm is not touched", func(t *testing.T) {
		ss := joinAll(t, 2)
		defer ss[0].Close()
		comms, err := NewInProcess(2, Config{})
		require.NoError(t, err)
		ss[0].Attach(comms[0])
		closeAll(comms) // detaches
		ss[1].drop()
		time.Sleep(50 * time.Millisecond)
		_, lost := ss[0].Lost()
		assert.True(t, lost, "the loss is still recorded")
	})
}
