//go:build unix

package net

import (
	"context"
	"encoding/binary"
	"fmt"
	stdnet "net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/bootstrap"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/shm"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// procJob is a job of rank processes emulated in one test process: each host has its own shm job
// (a distinct job name, so hosts share nothing but sockets), and each rank two handles of its own
// on it (separate mappings of the host's segments): one for its proxy (StartRank), one for its
// engine rank. j.hosts is by rank.
type procJob struct {
	*job
	proxies []*shm.ShmTransport
	locks   []*shm.JobLock
	closed  bool
}

func startProcJob(t *testing.T, hosts, perHost int, cfg engine.Config, opts ...func(*Setup)) *procJob {
	t.Helper()
	return startProcJobWith(t, hosts, perHost, cfg, func(_ int, s *Setup) {
		for _, o := range opts {
			o(s)
		}
	})
}

// startProcJobWith is startProcJob with opt(r, &setup) for each rank r.
func startProcJobWith(t *testing.T, hosts, perHost int, cfg engine.Config, opt func(r int, s *Setup)) *procJob {
	t.Helper()
	n := hosts * perHost
	cfg.RanksPerNode = perHost
	if cfg.Buffers == (planner.Buffers{}) {
		cfg.Buffers = tiny
	}
	pj := &procJob{job: &job{hosts: make([]*Host, n), comms: make([]*engine.Comm, n)}, proxies: make([]*shm.ShmTransport, n)}
	for k := 0; k < hosts; k++ {
		lock, err := shm.CreateJobLock(transport.NewJobID(os.Getpid()))
		require.NoError(t, err)
		pj.locks = append(pj.locks, lock)
	}
	ranks := make([]*shm.ShmTransport, n)
	for r := 0; r < n; r++ {
		var err error
		pj.proxies[r], err = shm.NewShmTransport(pj.locks[r/perHost].Job())
		require.NoError(t, err)
		ranks[r], err = shm.NewShmTransport(pj.locks[r/perHost].Job())
		require.NoError(t, err)
	}
	lns, peers := listeners(t, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := Setup{Ranks: n, RanksPerHost: perHost, Listener: lns[r], Peers: peers, Layout: LayoutOf(cfg.Buffers), Timeout: 3 * time.Second}
			opt(r, &s)
			pj.hosts[r], errs[r] = StartRank(context.Background(), r, s, pj.proxies[r])
		}()
	}
	wg.Wait()
	for r := range lns {
		lns[r].Close()
		require.NoError(t, errs[r], "rank %d", r)
	}
	for r := 0; r < n; r++ {
		tr, err := pj.hosts[r].Rank(r, ranks[r])
		require.NoError(t, err)
		pj.comms[r], err = engine.New(r, n, tr, cfg)
		require.NoError(t, err)
	}
	return pj
}

// close closes the ranks, their proxies, the proxies' shm handles and the hosts' job locks, and
// checks that no segment of any host is left.
func (pj *procJob) close(t testing.TB) {
	if pj.closed {
		return
	}
	pj.closed = true
	pj.job.close()
	for _, p := range pj.proxies {
		assert.NoError(t, p.Close())
	}
	for _, l := range pj.locks {
		assert.NoError(t, l.Close())
		assert.Empty(t, shm.ShmFiles(l.Job()), "job %s's segments", l.Job())
	}
}

// TestCollectivesAcrossRankProcesses: 2 and 3 hosts x 2 rank processes (each with its own shm
// handles and proxy), the five collectives, Ring and Tree AllReduce, LL, LL128 and Simple pinned,
// against sums computed in the test (checkAll); also with 2 data sockets cut into 16-byte pieces.
func TestCollectivesAcrossRankProcesses(t *testing.T) {
	type shape struct{ hosts, perHost, sockets int }
	shapes := []shape{{2, 2, 0}, {3, 2, 0}, {2, 2, 2}}
	counts := []int{0, 1, 13, 61, 1531}
	if testing.Short() {
		shapes, counts = shapes[:2], []int{1, 61, 1531}
	}
	for _, sh := range shapes {
		for _, p := range []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple} {
			t.Run(fmt.Sprintf("hosts=%d/per=%d/sockets=%d/%v", sh.hosts, sh.perHost, sh.sockets, p), func(t *testing.T) {
				pj := startProcJob(t, sh.hosts, sh.perHost, engine.Config{Timeout: 10 * time.Second}, striped(sh.sockets))
				defer pj.close(t)
				for _, count := range counts {
					checkAll(t, pj.job, len(pj.comms), count, p)
				}
			})
		}
	}
}

// TestRankProcessCopiesOnlyItsConnections: 2 hosts x 2 rank processes, one ring channel
// 0->1->2->3->0. Rank 1's proxy copies only 1->2 and rank 2's only 1->2, rank 3's and rank 0's
// only 3->0; ranks 0 and 2 send nothing, and each sender's TCP payload is what its engine wrote
// into the crossing FIFO (ChannelStats.WireBytes).
func TestRankProcessCopiesOnlyItsConnections(t *testing.T) {
	for _, p := range []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple} {
		t.Run(p.String(), func(t *testing.T) {
			pj := startProcJob(t, 2, 2, engine.Config{Timeout: 10 * time.Second})
			defer pj.close(t)
			const count = 1000
			errs := pj.each(func(r int, c *engine.Comm) error {
				c.SetOverride(engine.Override{Algo: costmodel.Ring, PinAlgo: true, Proto: p, PinProto: true, Channels: 1})
				return c.AllReduce(context.Background(), i32(inputs(r, count)), make([]byte, 4*count), count, kernels.Int32, kernels.Sum)
			})
			for r := range errs {
				require.NoError(t, errs[r], "rank %d", r)
			}
			want := map[int]connKey{0: {0, 3, 0}, 1: {0, 1, 2}, 2: {0, 1, 2}, 3: {0, 3, 0}}
			for r, h := range pj.hosts {
				h.mu.Lock()
				keys := make([]connKey, 0, len(h.conns))
				for k := range h.conns {
					keys = append(keys, k)
				}
				h.mu.Unlock()
				assert.Equal(t, []connKey{want[r]}, keys, "rank %d's proxy", r)
				if r == 1 || r == 3 {
					st := pj.comms[r].Stats()
					require.Len(t, st, 1)
					require.Positive(t, st[0].WireBytes)
					assert.Equal(t, int64(st[0].WireBytes), h.SentBytes(), "rank %d", r)
				} else {
					assert.Zero(t, h.SentBytes(), "rank %d receives only", r)
				}
			}
		})
	}
}

// TestLostRankProcess: 2 hosts x 2 rank processes in an AllReduce loop; one rank process dies (its
// links close without a goodbye: the host's applier, rank 2, or not, rank 3), closes its proxy
// with its rank open, or the link between ranks 1 and 2 is cut. Every other rank returns within
// 10 s an abort naming the lost rank (for the cut link, one of its two ends), including the lost
// rank's host-mate, which hears of it only through the other host.
// kill emulates a killed rank process: its links close without a goodbye, and it writes nothing
// more into its host's shared memory (cut alone would let its readers, failing on their closed
// sockets, abort the host naming a rank that is not lost).
func kill(h *Host) {
	h.s.proc.killed.Store(true)
	h.cut()
}

func TestLostRankProcess(t *testing.T) {
	for _, tc := range []struct {
		name   string
		victim int // the rank that stops calling; -1: none
		lost   func(pj *procJob)
		names  []int // the ranks the abort may name
	}{
		{"applier killed", 2, func(pj *procJob) { kill(pj.hosts[2]) }, []int{2}},
		{"rank killed", 3, func(pj *procJob) { kill(pj.hosts[3]) }, []int{3}},
		{"proxy closed early", 3, func(pj *procJob) { pj.hosts[3].Close() }, []int{3}},
		{"link cut", -1, func(pj *procJob) {
			h := pj.hosts[1]
			h.mu.Lock()
			h.links[2].close()
			h.mu.Unlock()
		}, []int{1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			pj := startProcJob(t, 2, 2, engine.Config{Timeout: 20 * time.Second})
			defer pj.close(t)
			const count = 4096
			n := len(pj.comms)
			errs := make([]error, n)
			ended := make([]time.Time, n)
			calls := make(chan struct{}, 64)
			var wg sync.WaitGroup
			for r := 0; r < n; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c := pj.comms[r]
					c.SetOverride(engine.Pin(costmodel.Ring, costmodel.Simple))
					for i := 0; i < 100000 && (r != tc.victim || i < 5); i++ {
						if errs[r] = c.AllReduce(context.Background(), i32(inputs(r, count)), make([]byte, 4*count), count, kernels.Int32, kernels.Sum); errs[r] != nil {
							break
						}
						if r == 0 {
							select {
							case calls <- struct{}{}:
							default:
							}
						}
					}
					ended[r] = time.Now()
				}()
			}
			for i := 0; i < 5; i++ {
				select {
				case <-calls:
				case <-time.After(10 * time.Second):
					t.Fatal("rank 0 did not finish 5 calls in 10 s")
				}
			}
			lost := time.Now()
			tc.lost(pj)
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("ranks still running 15 s after the loss")
			}
			for r := 0; r < n; r++ {
				if r == tc.victim {
					continue
				}
				require.Error(t, errs[r], "rank %d", r)
				assert.ErrorIs(t, errs[r], engine.ErrAborted, "rank %d", r)
				named := false
				for _, q := range tc.names {
					named = named || strings.Contains(errs[r].Error(), fmt.Sprintf("rank %d: lost: the net transport's link to its host failed", q))
				}
				assert.True(t, named, "rank %d: %v names none of ranks %v", r, errs[r], tc.names)
				took := ended[r].Sub(lost)
				assert.Less(t, took, 10*time.Second, "rank %d", r)
				t.Logf("rank %d: after %v: %v", r, took, errs[r])
			}
			pj.close(t)
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

// TestRankProcessBadSetup: bad fields are errors naming them; rank processes whose shapes differ,
// a rank started twice, and a Host per host among rank processes are refused at set-up.
func TestRankProcessBadSetup(t *testing.T) {
	local := transport.NewInProcess().Rank()
	t.Run("fields", func(t *testing.T) {
		lns, addrs := listeners(t, 1)
		defer lns[0].Close()
		good := Setup{Ranks: 2, RanksPerHost: 1, Listener: lns[0], Peers: []string{addrs[0], "127.0.0.1:1"}}
		for _, tc := range []struct {
			name string
			rank int
			edit func(*Setup)
			want string
		}{
			{"peers by host", 0, func(s *Setup) { s.Ranks, s.RanksPerHost = 4, 2 }, "Peers has 2 addresses: a rank process wants one per rank (4)"},
			{"rank", 2, func(*Setup) {}, "rank 2 of 2"},
			{"per host", 0, func(s *Setup) { s.RanksPerHost = 0 }, "2 ranks at 0 per host"},
			{"empty peer", 0, func(s *Setup) { s.Peers = []string{addrs[0], ""} }, "Peers[1] is empty"},
			{"listener", 0, func(s *Setup) { s.Listener = nil }, "nil listener"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := good
				tc.edit(&s)
				_, err := StartRank(context.Background(), tc.rank, s, local)
				require.Error(t, err)
				assert.ErrorIs(t, err, wire.ErrInvalid)
				assert.Contains(t, err.Error(), tc.want)
			})
		}
	})

	// starts runs every start at once and returns their errors, closing what started.
	starts := func(fs ...func() (*Host, error)) []error {
		errs := make([]error, len(fs))
		var wg sync.WaitGroup
		for i, f := range fs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var h *Host
				h, errs[i] = f()
				if h != nil {
					h.Close()
				}
			}()
		}
		wg.Wait()
		return errs
	}
	const timeout = time.Second
	t.Run("ranks per host differ", func(t *testing.T) {
		lns, addrs := listeners(t, 4)
		defer func() {
			for _, l := range lns {
				l.Close()
			}
		}()
		// Rank 0 thinks 2 per host (it waits for ranks 2 and 3), rank 2 thinks 1 per host.
		errs := starts(
			func() (*Host, error) {
				return StartRank(context.Background(), 0, Setup{Ranks: 4, RanksPerHost: 2, Listener: lns[0], Peers: addrs, Timeout: timeout}, local)
			},
			func() (*Host, error) {
				return StartRank(context.Background(), 2, Setup{Ranks: 4, RanksPerHost: 1, Listener: lns[2], Peers: addrs, Timeout: timeout}, local)
			})
		require.Error(t, errs[0])
		assert.ErrorIs(t, errs[0], wire.ErrConfig)
		assert.Contains(t, errs[0].Error(), "rank 2 (host 1) has 4 ranks at 1 per host, rank 0 (host 0) has 4 at 2")
		assert.Error(t, errs[1], "rank 2 cannot reach rank 1")
	})
	t.Run("a rank twice", func(t *testing.T) {
		lns, addrs := listeners(t, 4) // the fourth: the second process of rank 1
		defer func() {
			for _, l := range lns {
				l.Close()
			}
		}()
		rank1 := func(ln stdnet.Listener) func() (*Host, error) {
			return func() (*Host, error) {
				return StartRank(context.Background(), 1, Setup{Ranks: 3, RanksPerHost: 1, Listener: ln, Peers: addrs[:3], Timeout: timeout}, local)
			}
		}
		errs := starts(
			func() (*Host, error) {
				return StartRank(context.Background(), 0, Setup{Ranks: 3, RanksPerHost: 1, Listener: lns[0], Peers: addrs[:3], Timeout: timeout}, local)
			},
			rank1(lns[1]), rank1(lns[3]))
		require.Error(t, errs[0])
		assert.ErrorIs(t, errs[0], wire.ErrConfig)
		assert.Contains(t, errs[0].Error(), "rank 1 dialled twice (socket 0): two processes run rank 1")
	})
	for _, tc := range []struct {
		name       string
		procRank   int  // the rank process's rank; the other host runs Start
		hostSees   bool // the Host reports it (it accepts: the lower index), else the rank process
		wantSubstr string
	}{
		{"host dials a rank process", 0, false, "host 1 dialled with one Host for all of its ranks (Start), this is a rank process (StartRank)"},
		{"rank process dials a host", 1, true, "rank 1 dialled as a rank process (StartRank), this host runs one Host for all of its ranks (Start)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lns, addrs := listeners(t, 2)
			defer func() {
				for _, l := range lns {
					l.Close()
				}
			}()
			other := 1 - tc.procRank
			errs := starts(
				func() (*Host, error) {
					return StartRank(context.Background(), tc.procRank, Setup{Ranks: 2, RanksPerHost: 1, Listener: lns[tc.procRank], Peers: addrs, Timeout: timeout}, local)
				},
				func() (*Host, error) {
					return Start(context.Background(), Setup{Host: other, Ranks: 2, RanksPerHost: 1, Listener: lns[other], Peers: addrs, Timeout: timeout}, local)
				})
			// errs[0] is the rank process's, errs[1] the host's; the lower (accepting) one names the other.
			got := errs[0]
			if tc.hostSees {
				got = errs[1]
			}
			require.Error(t, got)
			assert.ErrorIs(t, got, wire.ErrConfig)
			assert.Contains(t, got.Error(), tc.wantSubstr)
		})
	}
	t.Run("another rank's transport", func(t *testing.T) {
		pj := startProcJob(t, 2, 2, engine.Config{})
		defer pj.close(t)
		_, err := pj.hosts[0].Rank(0, transport.NewInProcess().Rank())
		require.NoError(t, err)
		_, err = pj.hosts[0].Rank(1, transport.NewInProcess().Rank())
		assert.ErrorContains(t, err, "rank 1 is not this rank process's (rank 0)")
		_, err = pj.hosts[0].Rank(2, transport.NewInProcess().Rank())
		assert.ErrorContains(t, err, "rank 2 is not on host 0")
	})
}

// TestControlLineToNonApplier: a control line sent to a rank process that is not its host's
// applier (a second writer of the line) ends that link with an error naming the applier, and
// aborts. Ranks 0 and 1 are host 0 (rank 0 applies); a hand-made rank 2 dials both and sends
// rank 1 one of its control lines.
func TestControlLineToNonApplier(t *testing.T) {
	lns, addrs := listeners(t, 3)
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	lock, err := shm.CreateJobLock(transport.NewJobID(os.Getpid()))
	require.NoError(t, err)
	defer lock.Close()
	hosts := make([]*Host, 2)
	locals := make([]*shm.ShmTransport, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if locals[r], errs[r] = shm.NewShmTransport(lock.Job()); errs[r] != nil {
				return
			}
			hosts[r], errs[r] = StartRank(context.Background(), r, Setup{Ranks: 3, RanksPerHost: 2, Listener: lns[r], Peers: addrs, Timeout: 3 * time.Second}, locals[r])
		}()
	}
	socks := make([]stdnet.Conn, 2)
	for r := 0; r < 2; r++ {
		c, err := stdnet.DialTimeout("tcp", addrs[r], 3*time.Second)
		require.NoError(t, err)
		defer c.Close()
		var b [helloBytes]byte
		binary.LittleEndian.PutUint64(b[0:], helloMagicProc)
		binary.LittleEndian.PutUint64(b[8:], 2)
		binary.LittleEndian.PutUint64(b[16:], 3)
		binary.LittleEndian.PutUint64(b[24:], 2)
		binary.LittleEndian.PutUint64(b[32:], wire.ConnLayout{}.Word())
		_, err = c.Write(b[:])
		require.NoError(t, err)
		socks[r] = c
	}
	wg.Wait()
	for r := range errs {
		require.NoError(t, errs[r], "rank %d", r)
		defer locals[r].Close()
		defer hosts[r].Close()
	}
	var f [headerBytes + wire.LineBytes]byte
	f[0] = fCtrl
	binary.LittleEndian.PutUint32(f[8:], 2) // from rank 2
	binary.LittleEndian.PutUint32(f[16:], uint32(wire.CtrlRankOffset+2*wire.CtrlRankSize))
	binary.LittleEndian.PutUint32(f[20:], wire.LineBytes)
	_, err = socks[1].Write(f[:])
	require.NoError(t, err)
	deadline := time.Now().Add(5 * time.Second)
	for hosts[1].Err() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	require.Error(t, hosts[1].Err())
	assert.Contains(t, hosts[1].Err().Error(), "control line of rank 2 sent to rank 1: rank 0 applies host 0's control lines")
	assert.Equal(t, wire.AbortWord(2, wire.AbortHostLost), atomic.LoadUint64(wire.WordAt(hosts[1].ctrl, wire.CtrlAbortOffset)), "the host's abort word names rank 2")
	assert.NoError(t, hosts[0].Err(), "rank 0, the applier, would have taken the line")
}

// TestOneControlWriterPerHost: 3 hosts x 2 rank processes, the five collectives: every control
// line a rank process applied came from another host's rank, and only each host's lowest rank
// (its applier) applied any; each applier applied lines of every rank of the other hosts. So each
// (remote rank's line, host) had exactly one writer.
func TestOneControlWriterPerHost(t *testing.T) {
	pj := startProcJob(t, 3, 2, engine.Config{Timeout: 10 * time.Second})
	defer pj.close(t)
	checkAll(t, pj.job, len(pj.comms), 61, costmodel.LL)
	for r, h := range pj.hosts {
		from := h.s.proc.applied()
		if r%2 != 0 {
			assert.Empty(t, from, "rank %d is not its host's applier", r)
			continue
		}
		var want []int
		for q := range pj.hosts {
			if q/2 != r/2 {
				want = append(want, q)
			}
		}
		assert.Equal(t, want, from, "ranks whose lines applier %d applied", r)
	}
}

// TestRankProcessCleanClose: host 0's rank processes close (Comm, then proxy) while host 1's
// ranks are open and idle, and the control lines saying they closed reach host 1's applier (rank
// 2) 100 ms after the goodbyes reach rank 3. Nobody is aborted, then or after the heartbeats
// (every Timeout/4 = 250 ms) found host 0's sockets closed: a goodbye carries the closing rank's
// state word, because rank 3 cannot read it in its host's copy yet, and a link that said a clean
// goodbye fails no more.
func TestRankProcessCleanClose(t *testing.T) {
	pj := startProcJobWith(t, 2, 2, engine.Config{Timeout: 20 * time.Second}, func(r int, s *Setup) {
		s.Timeout = time.Second
		if r == 2 {
			s.Delay = 100 * time.Millisecond
		}
	})
	defer pj.close(t)
	const count = 13
	errs := pj.each(func(r int, c *engine.Comm) error {
		return c.AllReduce(context.Background(), i32(inputs(r, count)), make([]byte, 4*count), count, kernels.Int32, kernels.Sum)
	})
	for r := range errs {
		require.NoError(t, errs[r], "rank %d", r)
	}
	for r := 0; r < 2; r++ {
		require.NoError(t, pj.comms[r].Close())
		require.NoError(t, pj.hosts[r].Close())
	}
	time.Sleep(1500 * time.Millisecond) // the delayed lines and goodbyes are in, and 5 heartbeats went
	for r := 2; r < 4; r++ {
		assert.NoError(t, pj.hosts[r].Err(), "rank %d", r)
	}
	assert.Zero(t, atomic.LoadUint64(wire.WordAt(pj.hosts[3].ctrl, wire.CtrlAbortOffset)), "host 1's abort word")
}

// TestHostCleanClose: the same with one Host per host: host 0 closes (its rank, then its Host)
// while host 1's rank is open and idle; host 1's heartbeats then find host 0's sockets closed
// (a broken pipe within two of them), which must not abort host 1.
func TestHostCleanClose(t *testing.T) {
	j := startJob(t, 2, 1, engine.Config{}, func(s *Setup) { s.Timeout = time.Second })
	defer j.close()
	const count = 13
	errs := j.each(func(r int, c *engine.Comm) error {
		return c.AllReduce(context.Background(), i32(inputs(r, count)), make([]byte, 4*count), count, kernels.Int32, kernels.Sum)
	})
	for r := range errs {
		require.NoError(t, errs[r], "rank %d", r)
	}
	require.NoError(t, j.comms[0].Close())
	require.NoError(t, j.hosts[0].Close())
	time.Sleep(1500 * time.Millisecond)
	assert.NoError(t, j.hosts[1].Err())
	assert.Zero(t, atomic.LoadUint64(wire.WordAt(j.hosts[1].ctrl, wire.CtrlAbortOffset)), "host 1's abort word")
}

func TestRankPlacementOf(t *testing.T) {
	p, err := RankPlacementOf(roster([]int{0, 1}, []int{2, 3}, []int{4}), 3)
	require.NoError(t, err)
	assert.Equal(t, Placement{Host: 1, RanksPerHost: 2, Peers: []string{"a:0", "a:1", "b:0", "b:1", "c:0"}}, p)
	for _, tc := range []struct {
		name string
		r    bootstrap.Roster
		edit func(*bootstrap.Roster)
		want string
	}{
		{"uneven", roster([]int{0}, []int{1, 2}), nil, "node b has 2 ranks, node a has 1"},
		{"no address", roster([]int{0, 1}, []int{2, 3}), func(r *bootstrap.Roster) { r.Records[3].Endpoint.Addrs = nil }, "rank 3 (node b) advertised no address"},
		{"empty address", roster([]int{0, 1}, []int{2, 3}), func(r *bootstrap.Roster) { r.Records[1].Endpoint.Addrs = []string{""} }, "rank 1 (node a) advertised no address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.edit != nil {
				tc.edit(&tc.r)
			}
			_, err := RankPlacementOf(tc.r, 0)
			assert.ErrorIs(t, err, wire.ErrInvalid)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
