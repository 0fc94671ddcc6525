package net

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/internal/wire"
)

// Rank 0's line 0 in the control region: the state word, the watchdog's beat, "waits for".
const (
	line0State = wire.CtrlRankOffset
	line0Beat  = wire.CtrlRankOffset + 8
)

// TestBeatLag: a line 0 whose state word is unchanged (only the watchdog's beat or "waits for"
// moved) goes to the other hosts at most every beatLag, while a change of the state word goes
// out at once and carries the latest beat with it. With the lag made an hour, a flurry of beats
// sends nothing, and the state change still arrives.
func TestBeatLag(t *testing.T) {
	j := startJob(t, 2, 1, engine.Config{Timeout: 10 * time.Second})
	defer j.close()
	h0, h1 := j.hosts[0], j.hosts[1]
	far := func(off int) uint64 { return atomic.LoadUint64(wire.WordAt(h1.ctrl, off)) }
	set := func(off int, v uint64) { atomic.StoreUint64(wire.WordAt(h0.ctrl, off), v) }

	// The default lag: a beat every 100 us for 100 ms sends a handful of lines, not hundreds,
	// and the last beat arrives.
	base, start := h0.ctrlSent.Load(), time.Now()
	var last uint64
	for time.Since(start) < 100*time.Millisecond {
		last++
		set(line0Beat, last)
		time.Sleep(100 * time.Microsecond)
	}
	sent := h0.ctrlSent.Load() - base
	bound := int64(time.Since(start)/beatLag) + 2
	assert.LessOrEqual(t, sent, bound, "%d beats in %v", last, time.Since(start))
	require.Eventually(t, func() bool { return far(line0Beat) == last }, 5*time.Second, time.Millisecond, "the last beat never arrived")

	// An hour's lag: no beat goes out until the state word changes.
	h0.beatLag.Store(int64(time.Hour))
	base = h0.ctrlSent.Load()
	for i := uint64(1); i < 200; i++ {
		set(line0Beat, last+i)
		time.Sleep(100 * time.Microsecond)
	}
	assert.Equal(t, base, h0.ctrlSent.Load(), "beats inside the lag went out")
	assert.Equal(t, last, far(line0Beat))
	set(line0State, 2) // a bit nothing reads (closed is bit 0)
	require.Eventually(t, func() bool { return far(line0State) == 2 }, 5*time.Second, time.Millisecond, "the state change never arrived")
	assert.Equal(t, last+199, far(line0Beat), "the state change's line carries the latest beat")
	set(line0State, 0)
	require.Eventually(t, func() bool { return far(line0State) == 0 }, 5*time.Second, time.Millisecond)
}

// TestQuietControlLine: a line 0 that changes only the beat rings no bell on the far host (no
// parked wait can be waiting for it), while a state change does.
func TestQuietControlLine(t *testing.T) {
	j := startJob(t, 2, 1, engine.Config{Timeout: 10 * time.Second})
	defer j.close()
	h0, h1 := j.hosts[0], j.hosts[1]
	h0.beatLag.Store(0)
	far := func(off int) uint64 { return atomic.LoadUint64(wire.WordAt(h1.ctrl, off)) }
	set := func(off int, v uint64) { atomic.StoreUint64(wire.WordAt(h0.ctrl, off), v) }

	bell := h1.bell.arm()
	set(line0Beat, 12345)
	require.Eventually(t, func() bool { return far(line0Beat) == 12345 }, 5*time.Second, time.Millisecond)
	time.Sleep(20 * time.Millisecond) // a ring would follow the stores at once
	select {
	case <-bell:
		t.Fatal("a beat-only control line rang the bell")
	default:
	}
	set(line0State, 2)
	select {
	case <-bell:
	case <-time.After(5 * time.Second):
		t.Fatal("a state change did not ring the bell")
	}
	set(line0State, 0)
}
