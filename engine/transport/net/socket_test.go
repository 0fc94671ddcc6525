package net

import (
	"context"
	stdnet "net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestSocketsFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    int
		wantErr string
	}{
		{"unset: NCCL's auto, 0 threads", nil, 0, ""},
		{"per thread alone: still 0 threads", map[string]string{EnvSocksPerThread: "4"}, 0, ""},
		{"1 thread, auto 1 per thread", map[string]string{EnvSocketThreads: "1"}, 1, ""},
		{"2 x 4", map[string]string{EnvSocketThreads: "2", EnvSocksPerThread: "4"}, 8, ""},
		{"-2 is auto", map[string]string{EnvSocketThreads: "-2", EnvSocksPerThread: "-2"}, 0, ""},
		{"16 x 4 = 64", map[string]string{EnvSocketThreads: "16", EnvSocksPerThread: "4"}, 64, ""},
		{"16 x 5 = 80", map[string]string{EnvSocketThreads: "16", EnvSocksPerThread: "5"}, 0, "NCCL_SOCKET_NTHREADS=16 x NCCL_NSOCKS_PERTHREAD=5 = 80 sockets: at most 64"},
		{"17 threads", map[string]string{EnvSocketThreads: "17"}, 0, "NCCL_SOCKET_NTHREADS=17: want 0..16"},
		{"not a number", map[string]string{EnvSocksPerThread: "four"}, 0, `NCCL_NSOCKS_PERTHREAD="four": want an integer`},
		{"negative", map[string]string{EnvSocksPerThread: "-1"}, 0, "NCCL_NSOCKS_PERTHREAD=-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SocketsFromEnv(env(tc.env))
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestDelayFromEnv(t *testing.T) {
	for _, tc := range []struct {
		v       string
		want    time.Duration
		wantErr bool
	}{
		{"", 0, false}, {"0", 0, false}, {"200", 200 * time.Microsecond, false}, {"1000000", time.Second, false},
		{"1000001", 0, true}, {"-5", 0, true}, {"2ms", 0, true}, {"1.5", 0, true},
	} {
		got, err := DelayFromEnv(env(map[string]string{EnvDelay: tc.v}))
		if tc.wantErr {
			require.Error(t, err, "%q", tc.v)
			assert.Contains(t, err.Error(), EnvDelay, "%q", tc.v)
			continue
		}
		require.NoError(t, err, "%q", tc.v)
		assert.Equal(t, tc.want, got, "%q", tc.v)
	}
	got, err := DelayFromEnv(env(nil))
	require.NoError(t, err)
	assert.Zero(t, got, "off by default")
}

// TestStripe: the pieces of a payload, derived by hand from NCCL's rule (tasks of
// max(chunk, ceil(n/sockets)) bytes, sockets in turn across payloads; up to 128 bytes inline).
func TestStripe(t *testing.T) {
	socks := make([]*sock, 4) // control + 3 data sockets
	for i := range socks {
		socks[i] = &sock{}
	}
	type piece struct{ sock, lo, hi int }
	run := func(next *int, n, chunk int) []piece {
		var out []piece
		stripe(socks, next, n, chunk, func(s *sock, lo, hi int) error {
			for i, x := range socks {
				if x == s {
					out = append(out, piece{i, lo, hi})
				}
			}
			return nil
		})
		return out
	}
	next := 0
	assert.Equal(t, []piece{{0, 0, 128}}, run(&next, 128, 16), "inline")
	assert.Equal(t, []piece{{1, 0, 43}, {2, 43, 86}, {3, 86, 129}}, run(&next, 129, 16), "ceil(129/3) = 43")
	assert.Equal(t, []piece{{1, 0, 64}, {2, 64, 128}, {3, 128, 130}}, run(&next, 130, 64), "chunk 64 > ceil(130/3)")
	assert.Equal(t, []piece{{1, 0, 200}}, run(&next, 200, 1000), "one chunk: the turn goes on")
	assert.Equal(t, []piece{{2, 0, 200}}, run(&next, 200, 1000), "next socket")
	next = 0
	assert.Equal(t, []piece{{1, 0, 349526}, {2, 349526, 699052}, {3, 699052, 1 << 20}}, run(&next, 1<<20, MinChunkBytes), "1 MiB over 3: ceil(1048576/3) = 349526")
	one := []*sock{socks[0]}
	var pieces []int
	stripe(one, &next, 1<<20, 16, func(s *sock, lo, hi int) error { pieces = append(pieces, hi-lo); return nil })
	assert.Equal(t, []int{1 << 20}, pieces, "no data sockets: all on the control socket")
}

// TestEverySocketCarries: 2 hosts x 1 rank, 4 data sockets, NCCL's default buffers and chunk:
// a 4 MiB Simple AllReduce (512 KiB slots, tasks of 128 KiB) puts bytes on every data socket of
// both links, and the result is right.
func TestEverySocketCarries(t *testing.T) {
	j := startJob(t, 2, 1, engine.Config{Buffers: planner.DefaultBuffers(), Timeout: 20 * time.Second}, func(s *Setup) { s.Sockets = 4 })
	defer j.close()
	const count = 1 << 20
	sum := make([]int32, count)
	for r := 0; r < 2; r++ {
		for i := range sum {
			sum[i] += input(r, i)
		}
	}
	outs := make([][]byte, 2)
	errs := j.each(func(r int, c *engine.Comm) error {
		c.SetOverride(engine.Pin(costmodel.Ring, costmodel.Simple))
		outs[r] = make([]byte, 4*count)
		return c.AllReduce(context.Background(), i32(inputs(r, count)), outs[r], count, kernels.Int32, kernels.Sum)
	})
	for r := range errs {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, i32(sum), outs[r], "rank %d", r)
	}
	for hi, h := range j.hosts {
		got := h.SocketBytes(1 - hi)
		require.Len(t, got, 5)
		var total int64
		for s := 1; s < 5; s++ {
			assert.Positive(t, got[s], "host %d, data socket %d", hi, s)
			total += got[s]
		}
		assert.Equal(t, h.SentBytes(), total, "host %d: every payload byte of a Simple step went on a data socket", hi)
		t.Logf("host %d: bytes per data socket %v", hi, got[1:])
	}
}

// TestLostSocket: one data socket of the link between hosts 1 and 2 closes (host 2's end) while
// the ranks loop over AllReduce: every rank returns within 10 s the abort naming a lost host,
// as for a lost link. With Simple's 64-byte tiny slots every payload is inline, so the lost
// socket carries only the probes (the idle-socket case); with LL128 it carries data.
func TestLostSocket(t *testing.T) {
	for _, p := range []costmodel.Proto{costmodel.Simple, costmodel.LL128} {
		t.Run(p.String(), func(t *testing.T) { lostSocket(t, p) })
	}
}

func lostSocket(t *testing.T, p costmodel.Proto) {
	j := startJob(t, 3, 1, engine.Config{}, striped(2))
	defer j.close()
	const count = 4096
	var wg sync.WaitGroup
	errs := make([]error, 3)
	started := make(chan struct{}, 3)
	for r := 0; r < 3; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := j.comms[r]
			c.SetOverride(engine.Pin(costmodel.Ring, p))
			for i := 0; i < 100000; i++ {
				if errs[r] = c.AllReduce(context.Background(), i32(inputs(r, count)), make([]byte, 4*count), count, kernels.Int32, kernels.Sum); errs[r] != nil {
					break
				}
				if i == 3 {
					started <- struct{}{}
				}
			}
		}()
	}
	for r := 0; r < 3; r++ {
		<-started
	}
	h2 := j.hosts[2]
	h2.mu.Lock()
	h2.links[1].socks[2].c.Close()
	h2.mu.Unlock()
	t0 := time.Now()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("ranks still running 15 s after a data socket closed")
	}
	took := time.Since(t0)
	assert.Less(t, took, 10*time.Second)
	for r := range errs {
		require.Error(t, errs[r], "rank %d", r)
		assert.ErrorIs(t, errs[r], engine.ErrAborted, "rank %d", r)
		assert.Contains(t, errs[r].Error(), "lost: the net transport's link to its host failed", "rank %d", r)
	}
	// Host 2's own loss is declared once its reader of the link has had writeGrace to find a
	// goodbye (writeFailed); the ranks ended already with the abort host 1 mirrored.
	require.Eventually(t, func() bool { return h2.Err() != nil }, 5*time.Second, 10*time.Millisecond)
	assert.Contains(t, h2.Err().Error(), "lost host 1")
	t.Logf("after %v: %v; host 2: %v", took, errs[0], h2.Err())
}

// TestSocketsMustAgree: hosts with different data socket counts refuse each other at set-up.
func TestSocketsMustAgree(t *testing.T) {
	lns, peers := listeners(t, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h, err := Start(context.Background(), Setup{Host: i, Ranks: 2, RanksPerHost: 1, Listener: lns[i], Peers: peers,
				Layout: LayoutOf(tiny), Timeout: time.Second, Sockets: 2 * i}, newLocal())
			errs[i] = err
			if h != nil {
				h.Close()
			}
		}()
	}
	wg.Wait()
	require.Error(t, errs[0])
	assert.ErrorIs(t, errs[0], wire.ErrConfig)
	assert.Contains(t, errs[0].Error(), "host 1 has 2 data sockets per link, host 0 has 0")
}

// TestDelay: with 200 us injected per frame, an 8-byte Ring AllReduce across 2 hosts (one rank
// each) takes at least 2 x 200 us from the first rank's start to the last rank's end: Ring's two
// hops at 2 ranks each wait for a frame from the other host. The result is right.
func TestDelay(t *testing.T) {
	const delay = 200 * time.Microsecond
	j := startJob(t, 2, 1, engine.Config{Timeout: 10 * time.Second}, func(s *Setup) { s.Delay = delay })
	defer j.close()
	const count = 2 // 8 bytes
	want := i32([]int32{input(0, 0) + input(1, 0), input(0, 1) + input(1, 1)})
	var best time.Duration
	for it := 0; it < 6; it++ {
		outs := make([][]byte, 2)
		start, end := make([]time.Time, 2), make([]time.Time, 2)
		errs := j.each(func(r int, c *engine.Comm) error {
			c.SetOverride(engine.Pin(costmodel.Ring, costmodel.LL))
			outs[r] = make([]byte, 4*count)
			start[r] = time.Now()
			err := c.AllReduce(context.Background(), i32(inputs(r, count)), outs[r], count, kernels.Int32, kernels.Sum)
			end[r] = time.Now()
			return err
		})
		for r := range errs {
			require.NoError(t, errs[r], "rank %d", r)
			assert.Equal(t, want, outs[r], "rank %d", r)
		}
		if it == 0 {
			continue // set-up
		}
		// The call's span, first start to last end: the 8 bytes go from one rank to the other
		// (one delay) and the sum comes back (another); the rank that started second may see
		// only the second hop.
		first, last := start[0], end[0]
		if start[1].Before(first) {
			first = start[1]
		}
		if end[1].After(last) {
			last = end[1]
		}
		span := last.Sub(first)
		assert.GreaterOrEqual(t, span, 2*delay, "call %d (ranks %v, %v)", it, end[0].Sub(start[0]), end[1].Sub(start[1]))
		if best == 0 || span < best {
			best = span
		}
	}
	t.Logf("fastest 8-byte AllReduce with %v injected: %v", delay, best)
}

func listeners(t *testing.T, n int) ([]stdnet.Listener, []string) {
	lns := make([]stdnet.Listener, n)
	peers := make([]string, n)
	for i := range lns {
		l, err := stdnet.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		lns[i], peers[i] = l, l.Addr().String()
	}
	return lns, peers
}

func newLocal() transport.Transport { return transport.NewInProcess().Rank() }
