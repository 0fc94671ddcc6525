package net

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
)

// TestBellLosesNoWakeup: a waiter that arms the bell, polls its word once more and only then
// blocks is always woken by a producer that stores the word and then rings, over many rounds
// of ping-pong between two goroutines on two Ps. A lost wake-up would block a round until the
// test's bound.
func TestBellLosesNoWakeup(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var b bell
	var word, ack atomic.Uint64
	const rounds = 20000
	errs := make(chan error, 1)
	go func() {
		for k := uint64(1); k <= rounds; k++ {
			word.Store(k)
			b.ring()
			deadline := time.Now().Add(5 * time.Second)
			for ack.Load() < k {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("round %d: no ack", k)
					return
				}
				runtime.Gosched()
			}
		}
		errs <- nil
	}()
	for k := uint64(1); k <= rounds; k++ {
		for {
			ch := b.arm()
			if word.Load() >= k {
				break
			}
			select {
			case <-ch:
			case <-time.After(2 * time.Second):
				t.Fatalf("round %d: the bell was not rung after the store (a lost wake-up)", k)
			}
		}
		ack.Store(k)
	}
	require.NoError(t, <-errs)
}

// TestCollectivesParked: with the colocated hosts' ranks outnumbering the cores (Setup.Colocated),
// the ranks' waits park on the host's bell after parkAfter and the readers wait in the poller
// soon: every collective is still exact across hosts, with each protocol.
func TestCollectivesParked(t *testing.T) {
	colocated := func(s *Setup) { s.Colocated = 4 * runtime.NumCPU() }
	for _, sh := range []struct{ hosts, perHost int }{{2, 2}, {3, 1}} {
		for _, p := range []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple} {
			t.Run(fmt.Sprintf("hosts=%d/per=%d/%v", sh.hosts, sh.perHost, p), func(t *testing.T) {
				j := startJob(t, sh.hosts, sh.perHost, engine.Config{Timeout: 10 * time.Second}, colocated)
				defer j.close()
				for _, h := range j.hosts {
					require.True(t, h.parked, "the host does not park")
				}
				for _, count := range []int{0, 1, 61, 1531} {
					checkAll(t, j, len(j.comms), count, p)
				}
			})
		}
	}
}

func TestColocatedFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v       string
		want    int
		wantErr bool
	}{
		{"", 0, false}, {"1", 1, false}, {" 8 ", 8, false}, {"65536", 65536, false},
		{"65537", 0, true}, {"-1", 0, true}, {"two", 0, true}, {"1.5", 0, true},
	} {
		got, err := ColocatedFromEnv(env(map[string]string{EnvColocated: tc.v}))
		if tc.wantErr {
			require.Error(t, err, "%q", tc.v)
			assert.Contains(t, err.Error(), EnvColocated, "%q", tc.v)
			continue
		}
		require.NoError(t, err, "%q", tc.v)
		assert.Equal(t, tc.want, got, "%q", tc.v)
	}
}
