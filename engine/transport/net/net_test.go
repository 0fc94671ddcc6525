package net

import (
	"context"
	"encoding/binary"
	"fmt"
	stdnet "net"
	"runtime"
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

// Tiny buffers: LL 4 lines (32 B) per slot, LL128 2 lines (240 B), Simple 64 B, so a call of a
// few KiB wraps every FIFO many times.
var tiny = planner.Buffers{LL: 8 * 16 * 4, LL128: 8 * 128 * 2, Simple: 8 * 64}

type job struct {
	hosts []*Host
	comms []*engine.Comm
}

// startJob makes hosts x perHost ranks: each host's ranks share an in-process transport, the
// hosts talk over loopback TCP.
func startJob(t testing.TB, hosts, perHost int, cfg engine.Config, opts ...func(*Setup)) *job {
	t.Helper()
	n := hosts * perHost
	cfg.RanksPerNode = perHost
	if cfg.Buffers == (planner.Buffers{}) {
		cfg.Buffers = tiny
	}
	b := cfg.Buffers.WithDefaults()
	layout := wire.ConnLayout{LLBytes: int(b.LL), LL128Bytes: int(b.LL128), SimpleBytes: int(b.Simple)}
	lns := make([]stdnet.Listener, hosts)
	peers := make([]string, hosts)
	for i := range lns {
		l, err := stdnet.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		lns[i], peers[i] = l, l.Addr().String()
	}
	j := &job{hosts: make([]*Host, hosts), comms: make([]*engine.Comm, n)}
	locals := make([]*transport.InProcess, hosts)
	errs := make([]error, hosts)
	var wg sync.WaitGroup
	for i := range lns {
		locals[i] = transport.NewInProcess()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := Setup{Host: i, Ranks: n, RanksPerHost: perHost, Listener: lns[i], Peers: peers, Layout: layout, Timeout: 3 * time.Second}
			for _, o := range opts {
				o(&s)
			}
			j.hosts[i], errs[i] = Start(context.Background(), s, locals[i].Rank())
		}(i)
	}
	wg.Wait()
	for i := range lns {
		lns[i].Close()
		require.NoError(t, errs[i])
	}
	for r := 0; r < n; r++ {
		tr, err := j.hosts[r/perHost].Rank(r, locals[r/perHost].Rank())
		require.NoError(t, err)
		j.comms[r], err = engine.New(r, n, tr, cfg)
		require.NoError(t, err)
	}
	return j
}

func (j *job) close() {
	for _, c := range j.comms {
		c.Close()
	}
	for _, h := range j.hosts {
		h.Close()
	}
}

// each runs f on every rank concurrently and returns their errors.
func (j *job) each(f func(r int, c *engine.Comm) error) []error {
	errs := make([]error, len(j.comms))
	var wg sync.WaitGroup
	for r, c := range j.comms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[r] = f(r, c) }()
	}
	wg.Wait()
	return errs
}

func i32(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// input is rank r's element i: small distinct integers, so int32 sums are exact.
func input(r, i int) int32 { return int32(r*1000 + i%977 + 1) }

func inputs(r, count int) []int32 {
	v := make([]int32, count)
	for i := range v {
		v[i] = input(r, i)
	}
	return v
}

// striped stripes every payload above InlineBytes over n data sockets in pieces of at least 16
// bytes, so the tiny buffers' frames (LL 32 B, Simple 64 B, LL128 up to 240 B) are cut: a LL128
// line's 128 bytes then arrive over two or more sockets; below InlineBytes they stay on the
// control socket, so both paths run.
func striped(n int) func(*Setup) {
	return func(s *Setup) { s.Sockets, s.ChunkBytes = n, 16 }
}

func TestCollectivesAcrossHosts(t *testing.T) {
	type shape struct{ hosts, perHost, sockets int }
	// Sockets 0 (every payload on the control socket), 1, 2 and 4 data sockets per link.
	shapes := []shape{{2, 2, 0}, {3, 1, 0}, {3, 2, 0}, {2, 2, 1}, {2, 2, 2}, {3, 1, 4}, {2, 2, 4}}
	protos := []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple}
	counts := []int{0, 1, 13, 61, 1531} // 1531 int32 = 6124 B: not a multiple of 8, 120 or 64; wraps every FIFO >= 3 times
	for _, sh := range shapes {
		for _, p := range protos {
			t.Run(fmt.Sprintf("hosts=%d/per=%d/sockets=%d/%v", sh.hosts, sh.perHost, sh.sockets, p), func(t *testing.T) {
				j := startJob(t, sh.hosts, sh.perHost, engine.Config{Timeout: 10 * time.Second}, striped(sh.sockets))
				defer j.close()
				n := len(j.comms)
				for _, count := range counts {
					checkAll(t, j, n, count, p)
				}
			})
		}
	}
}

func checkAll(t *testing.T, j *job, n, count int, p costmodel.Proto) {
	ctx := context.Background()
	sum := make([]int32, count)
	for r := 0; r < n; r++ {
		for i := range sum {
			sum[i] += input(r, i)
		}
	}
	for _, algo := range []costmodel.Algo{costmodel.Ring, costmodel.Tree} {
		outs := make([][]byte, n)
		errs := j.each(func(r int, c *engine.Comm) error {
			c.SetOverride(engine.Pin(algo, p))
			outs[r] = make([]byte, 4*count)
			return c.AllReduce(ctx, i32(inputs(r, count)), outs[r], count, kernels.Int32, kernels.Sum)
		})
		for r := range errs {
			require.NoError(t, errs[r], "AllReduce %v count %d rank %d", algo, count, r)
			assert.Equal(t, i32(sum), outs[r], "AllReduce %v count %d rank %d", algo, count, r)
		}
	}
	ring := engine.Pin(costmodel.Ring, p)
	// AllGather: rank r's block is its inputs.
	var gathered []int32
	for r := 0; r < n; r++ {
		gathered = append(gathered, inputs(r, count)...)
	}
	outs := make([][]byte, n)
	errs := j.each(func(r int, c *engine.Comm) error {
		c.SetOverride(ring)
		outs[r] = make([]byte, 4*count*n)
		return c.AllGather(ctx, i32(inputs(r, count)), outs[r], count, kernels.Int32)
	})
	for r := range errs {
		require.NoError(t, errs[r], "AllGather count %d rank %d", count, r)
		assert.Equal(t, i32(gathered), outs[r], "AllGather count %d rank %d", count, r)
	}
	// ReduceScatter: rank r gets block r of the sum of everyone's n*count inputs.
	full := make([]int32, n*count)
	for r := 0; r < n; r++ {
		for i, v := range inputs(r, n*count) {
			full[i] += v
		}
	}
	errs = j.each(func(r int, c *engine.Comm) error {
		c.SetOverride(ring)
		outs[r] = make([]byte, 4*count)
		return c.ReduceScatter(ctx, i32(inputs(r, n*count)), outs[r], count, kernels.Int32, kernels.Sum)
	})
	for r := range errs {
		require.NoError(t, errs[r], "ReduceScatter count %d rank %d", count, r)
		assert.Equal(t, i32(full[r*count:(r+1)*count]), outs[r], "ReduceScatter count %d rank %d", count, r)
	}
	root := n - 1
	errs = j.each(func(r int, c *engine.Comm) error {
		c.SetOverride(ring)
		outs[r] = make([]byte, 4*count)
		return c.Broadcast(ctx, i32(inputs(r, count)), outs[r], count, kernels.Int32, root)
	})
	for r := range errs {
		require.NoError(t, errs[r], "Broadcast count %d rank %d", count, r)
		assert.Equal(t, i32(inputs(root, count)), outs[r], "Broadcast count %d rank %d", count, r)
	}
	root = n / 2
	errs = j.each(func(r int, c *engine.Comm) error {
		c.SetOverride(ring)
		outs[r] = make([]byte, 4*count)
		return c.Reduce(ctx, i32(inputs(r, count)), outs[r], count, kernels.Int32, kernels.Sum, root)
	})
	for r := range errs {
		require.NoError(t, errs[r], "Reduce count %d rank %d", count, r)
	}
	assert.Equal(t, i32(sum), outs[root], "Reduce count %d root %d", count, root)
}

// TestOnlyCrossHostConnectionsUseTCP: 2 hosts x 2 ranks, one ring channel 0->1->2->3->0. Only
// 1->2 (host 0 to host 1) and 3->0 (host 1 to host 0) cross; the proxies copy nothing else, and
// the bytes each host sends are exactly what its crossing sender wrote into the FIFO (the engine's
// own count, ChannelStats.WireBytes: LL and LL128 lines with flags and padding, Simple's payload).
// Were 0->1 or 2->3 copied too, each host would send about twice as much.
func TestOnlyCrossHostConnectionsUseTCP(t *testing.T) {
	for _, p := range []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple} {
		t.Run(p.String(), func(t *testing.T) {
			j := startJob(t, 2, 2, engine.Config{Timeout: 10 * time.Second})
			defer j.close()
			const count = 1000
			errs := j.each(func(r int, c *engine.Comm) error {
				c.SetOverride(engine.Override{Algo: costmodel.Ring, PinAlgo: true, Proto: p, PinProto: true, Channels: 1})
				return c.AllReduce(context.Background(), i32(inputs(r, count)), make([]byte, 4*count), count, kernels.Int32, kernels.Sum)
			})
			for r := range errs {
				require.NoError(t, errs[r], "rank %d", r)
			}
			for hi, h := range j.hosts {
				h.mu.Lock()
				for k := range h.conns {
					assert.NotEqual(t, h.HostOf(int(k.from)), h.HostOf(int(k.to)), "host %d copies same-host connection %s", hi, k.name())
				}
				assert.Len(t, h.conns, 2, "host %d: one crossing connection out, one in", hi)
				h.mu.Unlock()
				sender := 2*hi + 1 // rank 1 sends to 2, rank 3 to 0
				st := j.comms[sender].Stats()
				require.Len(t, st, 1)
				want := int64(st[0].WireBytes)
				require.Positive(t, want)
				assert.Equal(t, want, h.SentBytes(), "host %d", hi)
			}
		})
	}
}

// TestLostHost: while every rank runs AllReduce in a loop, host 2 vanishes (its sockets close
// without a goodbye, or it closes its transport with its rank open). Every other rank returns
// within 10 s an abort naming rank 2 (the lost host's first rank), and no goroutine is left.
func TestLostHost(t *testing.T) {
	for _, how := range []string{"cut", "close"} {
		t.Run(how, func(t *testing.T) {
			before := runtime.NumGoroutine()
			j := startJob(t, 3, 1, engine.Config{})
			const count = 4096
			var wg sync.WaitGroup
			errs := make([]error, 3)
			took := make([]time.Duration, 3)
			started := make(chan struct{}, 3)
			var lost time.Time
			var lostMu sync.Mutex
			for r := 0; r < 2; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := j.comms[r]
					c.SetOverride(engine.Pin(costmodel.Ring, costmodel.Simple))
					started <- struct{}{}
					for i := 0; i < 100000; i++ {
						if errs[r] = c.AllReduce(context.Background(), i32(inputs(r, count)), make([]byte, 4*count), count, kernels.Int32, kernels.Sum); errs[r] != nil {
							break
						}
					}
					lostMu.Lock()
					took[r] = time.Since(lost)
					lostMu.Unlock()
				}()
			}
			// Rank 2 runs a few calls, then its host goes.
			c2 := j.comms[2]
			c2.SetOverride(engine.Pin(costmodel.Ring, costmodel.Simple))
			<-started
			<-started
			for i := 0; i < 5; i++ {
				require.NoError(t, c2.AllReduce(context.Background(), i32(inputs(2, count)), make([]byte, 4*count), count, kernels.Int32, kernels.Sum))
			}
			lostMu.Lock()
			lost = time.Now()
			lostMu.Unlock()
			if how == "cut" {
				j.hosts[2].cut()
			} else {
				j.hosts[2].Close()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("ranks 0 and 1 still running 15 s after host 2 went")
			}
			for r := 0; r < 2; r++ {
				require.Error(t, errs[r], "rank %d", r)
				assert.ErrorIs(t, errs[r], engine.ErrAborted, "rank %d", r)
				assert.Contains(t, errs[r].Error(), "rank 2: lost: the net transport's link to its host failed", "rank %d", r)
				assert.Less(t, took[r], 10*time.Second, "rank %d", r)
				t.Logf("rank %d: %v after %v", r, errs[r], took[r])
			}
			for hi := 0; hi < 2; hi++ {
				require.Error(t, j.hosts[hi].Err())
				assert.Contains(t, j.hosts[hi].Err().Error(), "lost host 2")
			}
			j.close()
			deadline := time.Now().Add(5 * time.Second)
			for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if !assert.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines left") {
				buf := make([]byte, 1<<16)
				t.Logf("%s", buf[:runtime.Stack(buf, true)])
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	l, err := stdnet.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	local := transport.NewInProcess().Rank()
	good := Setup{Host: 0, Ranks: 4, RanksPerHost: 2, Listener: l, Peers: []string{l.Addr().String(), "127.0.0.1:1"}}
	for _, tc := range []struct {
		name string
		edit func(*Setup)
		want string
	}{
		{"host", func(s *Setup) { s.Host = 2 }, "host 2 of 2"},
		{"ranks", func(s *Setup) { s.Ranks = 5 }, "5 ranks at 2 per host do not make 2 hosts"},
		{"per host", func(s *Setup) { s.RanksPerHost = 0 }, "4 ranks at 0 per host"},
		{"listener", func(s *Setup) { s.Listener = nil }, "nil listener"},
		{"timeout", func(s *Setup) { s.Timeout = -time.Second }, "Timeout -1s"},
		{"colocated", func(s *Setup) { s.Colocated = -1 }, "Colocated -1: want 0..65536 (COLLPLAN_NET_COLOCATED)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good
			tc.edit(&s)
			_, err := Start(context.Background(), s, local)
			require.Error(t, err)
			assert.ErrorIs(t, err, wire.ErrInvalid)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	t.Run("dial times out", func(t *testing.T) {
		s := good
		s.Host, s.Timeout = 1, 300*time.Millisecond
		s.Peers = []string{"127.0.0.1:1", l.Addr().String()} // nobody listens on port 1
		t0 := time.Now()
		_, err := Start(context.Background(), s, local)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "dial host 0 at 127.0.0.1:1")
		assert.Less(t, time.Since(t0), 3*time.Second)
	})
	t.Run("accept times out", func(t *testing.T) {
		s := good
		s.Timeout = 300 * time.Millisecond
		_, err := Start(context.Background(), s, local)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "accept (0 of 1 sockets from the hosts above joined)")
	})
}

func TestRanksPerNodeMustMatchHosts(t *testing.T) {
	j := startJob(t, 2, 1, engine.Config{})
	defer j.close()
	tr, err := j.hosts[0].Rank(0, transport.NewInProcess().Rank())
	require.NoError(t, err)
	_, err = engine.New(0, 2, tr, engine.Config{RanksPerNode: 2, Buffers: tiny})
	require.Error(t, err)
	assert.ErrorIs(t, err, engine.ErrConfig)
	assert.Contains(t, err.Error(), "Config.RanksPerNode is 2, the transport has 1 ranks per host")
	_, err = j.hosts[0].Rank(1, transport.NewInProcess().Rank())
	assert.ErrorContains(t, err, "rank 1 is not on host 0")
}

// TestLayoutMismatch: two hosts whose connection layouts differ refuse each other at set-up.
func TestLayoutMismatch(t *testing.T) {
	lns := make([]stdnet.Listener, 2)
	peers := make([]string, 2)
	for i := range lns {
		l, err := stdnet.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		lns[i], peers[i] = l, l.Addr().String()
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := wire.ConnLayout{LLBytes: 512, LL128Bytes: 2048, SimpleBytes: 512 * (i + 1)}
			var h *Host
			h, errs[i] = Start(context.Background(), Setup{Host: i, Ranks: 2, RanksPerHost: 1, Listener: lns[i], Peers: peers,
				Layout: l, Timeout: time.Second}, transport.NewInProcess().Rank())
			if h != nil {
				h.Close()
			}
		}()
	}
	wg.Wait()
	require.Error(t, errs[0], "host 0 accepts and checks")
	assert.ErrorIs(t, errs[0], engine.ErrConfig)
	assert.Contains(t, errs[0].Error(), "host 1's connection layout")
	assert.Contains(t, errs[0].Error(), "differs from host 0's (512, 2048, 512 bytes of LL, LL128, Simple")
}
