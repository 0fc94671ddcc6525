package engine

import (
	"encoding/binary"
	"io"
	"math"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/kernels"
)

var testEndpoint struct {
	once sync.Once
	ep   *collnet.CollNetEndpoint
	err  error
}

// testCollNetAddr returns the address of an aggregation endpoint this test binary runs on a
// loopback listener (one for every test: the jobs keep them apart).
func testCollNetAddr(t testing.TB) string {
	t.Helper()
	testEndpoint.once.Do(func() {
		testEndpoint.ep, testEndpoint.err = collnet.ListenCollNet("127.0.0.1:0")
	})
	require.NoError(t, testEndpoint.err)
	return testEndpoint.ep.Addr()
}

// TestCollNetAllReduceRuns is the regression test of issue 13 item 3: an AllReduce pinned to
// CollNetDirect or CollNetChain on 2 virtual nodes of 2 ranks was refused with ErrNotImplemented.
// Each rank r contributes r+1 in every element, so the sum over n ranks is n(n+1)/2 (hand
// derivation). Once the ranks close, the endpoint holds nothing of the job.
func TestCollNetAllReduceRuns(t *testing.T) {
	for _, a := range []costmodel.Algo{costmodel.CollNetDirect, costmodel.CollNetChain} {
		t.Run(a.String(), func(t *testing.T) {
			const n, count = 4, 1000
			ep, err := collnet.ListenCollNet("127.0.0.1:0")
			require.NoError(t, err)
			defer ep.Close()
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: 2, Override: Pin(a, costmodel.Simple)}
			cfg.CollNet.Addr = ep.Addr()
			comms, err := NewInProcess(n, cfg)
			require.NoError(t, err)
			defer func() {
				// Closing the ranks says goodbye on every endpoint connection: the job is gone.
				closeAll(comms)
				assert.Eventually(t, func() bool { return ep.Jobs() == 0 }, 5*time.Second, 10*time.Millisecond, "the endpoint still holds the job")
			}()
			outs := make([][]byte, n)
			errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				send := make([]byte, 4*count)
				for i := 0; i < count; i++ {
					binary.LittleEndian.PutUint32(send[4*i:], math.Float32bits(float32(r+1)))
				}
				outs[r] = make([]byte, 4*count)
				return c.AllReduce(bg, send, outs[r], count, kernels.Float32, kernels.Sum)
			})
			for r := range comms {
				require.NoError(t, errs[r], "rank %d", r)
				for i := 0; i < count; i++ {
					if !assert.Equal(t, float32(n*(n+1)/2), math.Float32frombits(binary.LittleEndian.Uint32(outs[r][4*i:])), "rank %d element %d", r, i) {
						break
					}
				}
			}
		})
	}
}

// collNetDtOps are dtype/op pairs the endpoint reduces (collnet.go): sum on each of the 32- and
// 64-bit integers and the 16-, 32- and 64-bit floats, and min, max, avg and PreMulSum (the last
// two sum on the wire) on a signed and an unsigned integer and three floats (-short: one of each
// kind).
func collNetDtOps(short bool) []dtOp {
	var out []dtOp
	for _, dt := range []kernels.Dtype{kernels.Int32, kernels.Uint32, kernels.Int64, kernels.Uint64,
		kernels.Float16, kernels.Bfloat16, kernels.Float32, kernels.Float64} {
		out = append(out, dtOp{dt, kernels.Sum})
	}
	dts := []kernels.Dtype{kernels.Int64, kernels.Uint32, kernels.Float16, kernels.Bfloat16, kernels.Float32}
	if short {
		dts = []kernels.Dtype{kernels.Int32, kernels.Float16}
	}
	for _, op := range []kernels.Op{kernels.Min, kernels.Max, kernels.Avg, kernels.PreMulSum} {
		for _, dt := range dts {
			out = append(out, dtOp{dt, op})
		}
	}
	return out
}

// The (n, RanksPerNode) of the CollNet rows: at least 2 virtual nodes; CollNetDirect's node size
// divides n (at most 8), CollNetChain's need not (its last node is shorter).
var (
	collNetDirectShapes = [][2]int{{2, 1}, {3, 1}, {4, 2}, {5, 1}, {6, 2}, {6, 3}, {7, 1}, {8, 4}, {9, 3}}
	collNetChainShapes  = [][2]int{{2, 1}, {3, 2}, {4, 2}, {5, 2}, {6, 3}, {7, 3}, {8, 4}, {9, 2}, {9, 1}}
)

// checkCollNetWrap: CollNetDirect maps no connection; with wrap, every CollNetDirect region and
// every endpoint connection carried 3+ times NCCL_STEPS steps.
func checkCollNetWrap(t *testing.T, comms []*Comm, a costmodel.Algo, wrap bool) {
	t.Helper()
	for _, c := range comms {
		if a == costmodel.CollNetDirect {
			assert.Empty(t, c.eps, "rank %d: CollNetDirect mapped connections", c.rank)
		}
		if !wrap {
			continue
		}
		for ch, g := range c.cnGroups {
			if g != nil {
				assert.GreaterOrEqual(t, g.Step, uint64(3*NCCLSteps), "rank %d channel %d: region carried %d steps", c.rank, ch, g.Step)
			}
		}
		for k, l := range c.cnLinks {
			assert.GreaterOrEqual(t, l.Sent(), uint64(3*NCCLSteps), "rank %d link %v: %d steps", c.rank, k, l.Sent())
		}
	}
}

// TestCollNetMatrix is the correctness matrix's CollNet rows: AllReduce pinned to CollNetDirect
// and CollNetChain, and AllGather (every dtype) and ReduceScatter pinned to CollNetDirect, with
// Simple, a pairwise covering set over every dtype/op the endpoint admits,
// the shapes above, the four sizes (0, 1 element, 13 elements, and a size that wraps every
// region, connection and endpoint connection 3+ times), in place or not, 1-3 channels and both
// alignments, checked against the brute-force oracle.
func TestCollNetMatrix(t *testing.T) {
	arDos := collNetDtOps(testing.Short())
	var agDos []dtOp
	for dt := kernels.Dtype(0); dt < kernels.NumDtypes; dt++ {
		agDos = append(agDos, dtOp{dt, kernels.Sum})
	}
	start := time.Now()
	for _, ca := range []collAlgo{{costmodel.AllReduce, costmodel.CollNetDirect}, {costmodel.AllReduce, costmodel.CollNetChain},
		{costmodel.AllGather, costmodel.CollNetDirect}, {costmodel.ReduceScatter, costmodel.CollNetDirect}} {
		a, dos := ca.algo, arDos
		if ca.coll == costmodel.AllGather {
			dos = agDos
		}
		shapes := collNetDirectShapes
		if a == costmodel.CollNetChain {
			shapes = collNetChainShapes
		}
		axes := []int{len(dos), len(shapes), 4, 2, 3, 2}
		rows := pairwise(axes, 23)
		for _, row := range rows {
			sh := shapes[row[1]]
			m := matrixCase{ca: ca, proto: costmodel.Simple, do: dos[row[0]], n: sh[0], rpn: sh[1],
				size: row[2], inPlace: row[3] == 1, channels: row[4] + 1, misalign: row[5]}
			t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
		}
	}
	t.Logf("in %v", time.Since(start))
}

// TestCollNetInvalid: a CollNet plan NCCL would not run is ErrInvalid on every rank, names the
// reason, and leaves the communicator usable.
func TestCollNetInvalid(t *testing.T) {
	f32, i32 := kernels.Float32, kernels.Int32
	for _, a := range []costmodel.Algo{costmodel.CollNetDirect, costmodel.CollNetChain} {
		t.Run(a.String(), func(t *testing.T) {
			cases := []invalidCase{
				{"broadcast", 4, 2, costmodel.Broadcast, costmodel.Simple, f32, kernels.Sum, "for Broadcast"},
				{"reduce", 4, 2, costmodel.Reduce, costmodel.Simple, f32, kernels.Sum, "for Reduce"},
				{"LL", 4, 2, costmodel.AllReduce, costmodel.LL, f32, kernels.Sum, "with Simple only"},
				{"LL128", 4, 2, costmodel.AllReduce, costmodel.LL128, f32, kernels.Sum, "with Simple only"},
				{"one-node", 4, 4, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, "2 or more nodes"},
				{"one-node-default", 3, 0, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, "2 or more nodes"},
				{"one-rank", 1, 1, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, "2 or more nodes"},
				{"int8", 4, 2, costmodel.AllReduce, costmodel.Simple, kernels.Int8, kernels.Sum, "the endpoint reduces"},
				{"uint8", 4, 2, costmodel.AllReduce, costmodel.Simple, kernels.Uint8, kernels.Max, "the endpoint reduces"},
				{"fp8", 4, 2, costmodel.AllReduce, costmodel.Simple, kernels.Fp8E4M3, kernels.Sum, "the endpoint reduces"},
				{"fp8-avg", 4, 2, costmodel.AllReduce, costmodel.Simple, kernels.Fp8E5M2, kernels.Avg, "the endpoint reduces"},
				{"prod", 4, 2, costmodel.AllReduce, costmodel.Simple, i32, kernels.Prod, "the endpoint reduces"},
				{"prod-float", 4, 2, costmodel.AllReduce, costmodel.Simple, f32, kernels.Prod, "the endpoint reduces"},
			}
			if a == costmodel.CollNetDirect {
				cases = append(cases,
					// AllGather and ReduceScatter run (the endpoint has iallgather and
					// ireducescatter), under the same rules but the op/dtype matrix, which
					// AllGather skips.
					invalidCase{"allgather-LL", 4, 2, costmodel.AllGather, costmodel.LL, f32, kernels.Sum, "with Simple only"},
					invalidCase{"allgather-one-node", 4, 4, costmodel.AllGather, costmodel.Simple, kernels.Int8, kernels.Sum, "2 or more nodes"},
					invalidCase{"allgather-uneven-nodes", 5, 2, costmodel.AllGather, costmodel.Simple, f32, kernels.Sum, "the same size"},
					invalidCase{"reducescatter-LL128", 4, 2, costmodel.ReduceScatter, costmodel.LL128, f32, kernels.Sum, "with Simple only"},
					invalidCase{"reducescatter-int8", 4, 2, costmodel.ReduceScatter, costmodel.Simple, kernels.Int8, kernels.Sum, "the endpoint reduces"},
					invalidCase{"reducescatter-prod", 4, 2, costmodel.ReduceScatter, costmodel.Simple, f32, kernels.Prod, "the endpoint reduces"},
					invalidCase{"reducescatter-nine-local", 18, 9, costmodel.ReduceScatter, costmodel.Simple, f32, kernels.Sum, "at most 8 local ranks"},
					invalidCase{"uneven-nodes", 5, 2, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, "the same size"},
					invalidCase{"nine-local", 18, 9, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, "at most 8 local ranks"})
			} else {
				cases = append(cases,
					invalidCase{"allgather", 4, 2, costmodel.AllGather, costmodel.Simple, f32, kernels.Sum, "for AllGather"},
					invalidCase{"reducescatter", 4, 2, costmodel.ReduceScatter, costmodel.Simple, f32, kernels.Sum, "for ReduceScatter"})
			}
			runInvalidCases(t, a, cases)
		})
	}
}

// TestCollNetNoEndpoint: a CollNet call without an endpoint configured is ErrConfig on every rank,
// the same error, at once (not a hang), and the communicator stays usable.
func TestCollNetNoEndpoint(t *testing.T) {
	comms, err := NewInProcess(4, Config{Buffers: tinyBuffers(), RanksPerNode: 2, Override: Pin(costmodel.CollNetDirect, costmodel.Simple)})
	require.NoError(t, err)
	defer closeAll(comms)
	errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		b := make([]byte, 40)
		return c.AllReduce(bg, b, b, 10, kernels.Float32, kernels.Sum)
	})
	for r, err := range errs {
		require.ErrorIs(t, err, ErrConfig, "rank %d", r)
		assert.Contains(t, err.Error(), "COLLPLAN_COLLNET_ADDR", "rank %d", r)
		assert.Equal(t, errs[0].Error(), err.Error(), "rank %d", r)
	}
	errs = runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		c.SetOverride(Override{})
		b := make([]byte, 40)
		return c.AllReduce(bg, b, b, 10, kernels.Float32, kernels.Sum)
	})
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

// collNetRows are the (collective, algorithm) rows the engine runs on CollNet.
var collNetRows = []collAlgo{{costmodel.AllReduce, costmodel.CollNetDirect}, {costmodel.AllReduce, costmodel.CollNetChain},
	{costmodel.AllGather, costmodel.CollNetDirect}, {costmodel.ReduceScatter, costmodel.CollNetDirect}}

// collNetCall runs coll on float32 with sum: count elements per rank's block, send of count
// (AllGather) or n*count (ReduceScatter) elements, recv of n*count (AllGather) or count
// (ReduceScatter); AllReduce in place on send.
func collNetCall(c *Comm, coll costmodel.Coll, send, recv []byte, count int) error {
	switch coll {
	case costmodel.AllGather:
		return c.AllGather(bg, send[:4*count], recv, count, kernels.Float32)
	case costmodel.ReduceScatter:
		return c.ReduceScatter(bg, send, recv[:4*count], count, kernels.Float32, kernels.Sum)
	}
	return c.AllReduce(bg, send, send, count, kernels.Float32, kernels.Sum)
}

// TestCollNetEndpointDies: the aggregation endpoint going away in the middle of a call ends the
// call on every rank within 10 s (the heads' connections end and abort the communicator; the other
// ranks see the abort word), and later calls fail at once: for every CollNet row.
func TestCollNetEndpointDies(t *testing.T) {
	for _, ca := range collNetRows {
		a := ca.algo
		t.Run(ca.coll.String()+"-"+a.String(), func(t *testing.T) {
			ep, err := collnet.ListenCollNet("127.0.0.1:0")
			require.NoError(t, err)
			defer ep.Close()
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: 2, Override: Pin(a, costmodel.Simple)}
			cfg.CollNet.Addr = ep.Addr()
			comms, err := NewInProcess(4, cfg)
			require.NoError(t, err)
			defer closeAll(comms)
			count := 1 << 22 // tiny slots: minutes of steps, so the call is running at the close
			if ca.coll != costmodel.AllReduce {
				count = 1 << 20 // blocks of count: 4 MiB per rank
			}
			size := 4 * count
			if ca.coll != costmodel.AllReduce {
				size *= len(comms)
			}
			sends, recvs := make([][]byte, len(comms)), make([][]byte, len(comms))
			for r := range comms { // before the clock starts: every rank is in the call at the close
				sends[r], recvs[r] = make([]byte, size), make([]byte, size)
			}
			closed := make(chan time.Time, 1)
			go func() {
				time.Sleep(200 * time.Millisecond)
				closed <- time.Now()
				ep.Close()
			}()
			errs := runRanks(t, comms, 20*time.Second, func(r int, c *Comm) error {
				return collNetCall(c, ca.coll, sends[r], recvs[r], count)
			})
			assert.Less(t, time.Since(<-closed), 10*time.Second)
			for r, err := range errs {
				require.ErrorIs(t, err, ErrAborted, "rank %d", r)
				assert.Contains(t, err.Error(), "CollNet aggregation endpoint", "rank %d", r)
			}
			errs = runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				b := make([]byte, 40)
				return c.AllReduce(bg, b, b, 10, kernels.Float32, kernels.Sum)
			})
			for r, err := range errs {
				assert.ErrorIs(t, err, ErrAborted, "rank %d: a later call", r)
			}
		})
	}
}

// TestCollNetCoreProduct runs the full product of CollNet's structural axes (each algorithm's
// shapes, the four sizes, in place or not), cycling through the dtype/op pairs, the channel counts
// and the alignments. (Skipped with -short: the pairwise rows cover it there.)
func TestCollNetCoreProduct(t *testing.T) {
	if testing.Short() {
		t.Skip("the pairwise rows cover it in -short")
	}
	dos := collNetDtOps(false)
	k := 0
	start := time.Now()
	for _, a := range []costmodel.Algo{costmodel.CollNetDirect, costmodel.CollNetChain} {
		shapes := collNetDirectShapes
		if a == costmodel.CollNetChain {
			shapes = collNetChainShapes
		}
		for _, sh := range shapes {
			for size := sizeZero; size <= sizeWrap; size++ {
				for _, inPlace := range []bool{false, true} {
					m := matrixCase{ca: collAlgo{costmodel.AllReduce, a}, proto: costmodel.Simple, do: dos[k%len(dos)], n: sh[0], rpn: sh[1],
						size: size, inPlace: inPlace, channels: 1 + k%3, misalign: k % 2}
					k++
					t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
				}
			}
		}
	}
	t.Logf("%d cases in %v", k, time.Since(start))
}

// TestCollNetNoAllocationPerStep: a CollNet call allocates nothing per step, on the ranks or in
// the (in-process) endpoint: as many allocations for a call of many steps as for one of a few.
func TestCollNetNoAllocationPerStep(t *testing.T) {
	for _, ca := range collNetRows {
		a := ca.algo
		t.Run(ca.coll.String()+"-"+a.String(), func(t *testing.T) {
			const n = 4
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: 2, Override: Pin(a, costmodel.Simple)}
			cfg.CollNet.Addr = testCollNetAddr(t)
			comms, err := NewInProcess(n, cfg)
			require.NoError(t, err)
			defer closeAll(comms)
			bufs, outs := make([][]byte, n), make([][]byte, n)
			for r := range bufs {
				bufs[r], outs[r] = make([]byte, n*8000*4), make([]byte, n*8000*4)
			}
			runs := 4
			if testing.Short() {
				runs = 2
			}
			assertNoAllocationPerStep(t, comms, rankSteps, runs, 2000, 8000, func(count int) {
				errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
					per := count
					if ca.coll != costmodel.AllReduce {
						per /= n // as many bytes as AllReduce's: n blocks
					}
					return collNetCall(c, ca.coll, bufs[r], outs[r], per)
				})
				for _, err := range errs {
					require.NoError(t, err)
				}
			})
		})
	}
}

// TestCollNetSequence interleaves CollNetDirect and CollNetChain (which share share 0's endpoint
// connection on each channel: the node's first rank heads it in both) on 1-3 channels with Tree,
// Ring and NVLS_TREE (whose connections the chain shares) on one communicator of 6 ranks in 3
// nodes of 2. Rank r's element i is 1000r+i, so the sum is 6i+15000 (by hand).
func TestCollNetSequence(t *testing.T) {
	const n = 6
	cfg := Config{Buffers: tinyBuffers(), RanksPerNode: 2}
	cfg.CollNet.Addr = testCollNetAddr(t)
	comms, err := NewInProcess(n, cfg)
	require.NoError(t, err)
	defer closeAll(comms)
	le := binary.LittleEndian
	seq := []struct {
		algo  costmodel.Algo
		ch    int
		count int
	}{
		{costmodel.CollNetDirect, 2, 3001},
		{costmodel.CollNetChain, 2, 777},
		{costmodel.Tree, 2, 100},
		{costmodel.CollNetChain, 3, 17},
		{costmodel.CollNetDirect, 1, 1},
		{costmodel.Ring, 3, 500},
		{costmodel.NVLSTree, 3, 400},
		{costmodel.CollNetChain, 1, 4000},
		{costmodel.CollNetDirect, 3, 9999},
		{costmodel.CollNetChain, 2, 5},
	}
	for k, sc := range seq {
		o := Pin(sc.algo, costmodel.Simple)
		o.Channels = sc.ch
		outs := make([][]byte, n)
		errs := runRanks(t, comms, 20*time.Second, func(r int, c *Comm) error {
			c.SetOverride(o)
			outs[r] = make([]byte, 4*sc.count)
			for i := 0; i < sc.count; i++ {
				le.PutUint32(outs[r][4*i:], uint32(1000*r+i))
			}
			return c.AllReduce(bg, outs[r], outs[r], sc.count, kernels.Int32, kernels.Sum)
		})
		for r := 0; r < n; r++ {
			require.NoError(t, errs[r], "call %d rank %d", k, r)
			for i := 0; i < sc.count; i++ {
				if got, want := int(int32(le.Uint32(outs[r][4*i:]))), n*i+1000*n*(n-1)/2; got != want {
					t.Fatalf("call %d (%v, %d channels) rank %d element %d: %d, want %d", k, sc.algo, sc.ch, r, i, got, want)
				}
			}
		}
	}
}

// TestCollNetChunk checks collNetChunk against calcCollChunking's CollNet rules worked by hand, on
// NCCL's default buffers (Simple step 512 KiB; NVLS step min(128 KiB, 512 KiB) = 128 KiB), 4 ranks
// in 2 nodes of 2, 2 channels:
//   - CollNetDirect (nHeads 2, depth 2: ops 4): 1 GiB/(4 x 512 KiB) = 512 >= 128: 512 KiB, capped
//     at 128 KiB. 8 MiB: 4 < 128 halves to 256 KiB (8 < 128), 128 KiB (stop: not above 128 KiB);
//     8 MiB/(4 x 128 KiB) = 16 is not below 16: 128 KiB. 4 MiB: to 128 KiB, then 8 < 16 halves
//     to 64 KiB, and 4 MiB/(4 x 64 KiB) = 16: 64 KiB. 1 MiB: 128 KiB, 64 KiB (1 MiB/256 KiB = 4),
//     then 4 < 16 and above 32 KiB: 32 KiB.
//   - CollNetChain (depth 4/2 = 2; from min(256 KiB, 512 KiB)): 1 GiB/(2 x 256 KiB) = 2048: 256
//     KiB. 16 MiB: 32 < 128 halves to 128 KiB; 16 MiB/256 KiB = 64 >= 16: 128 KiB. 1 MiB: 128 KiB,
//     then 4 < 16: 64 KiB, then 1 MiB/128 KiB = 8 >= 2: 64 KiB. 64 KiB: 128 KiB, 64 KiB, then 0 <
//     2: 32 KiB.
//   - a planned chunk is kept up to the cap: 1 MiB -> 128 KiB (Direct), 100000 -> 100000 (Chain).
//
// With tinyBuffers (Simple step 64 B) both are 64 B whatever the size.
func TestCollNetChunk(t *testing.T) {
	comms, err := NewInProcess(4, Config{RanksPerNode: 2})
	require.NoError(t, err)
	defer closeAll(comms)
	c := comms[0]
	const K, M, G = 1 << 10, 1 << 20, 1 << 30
	for _, tc := range []struct {
		algo            costmodel.Algo
		nBytes, planned int64
		want            int64
	}{
		{costmodel.CollNetDirect, G, 0, 128 * K},
		{costmodel.CollNetDirect, 8 * M, 0, 128 * K},
		{costmodel.CollNetDirect, 4 * M, 0, 64 * K},
		{costmodel.CollNetDirect, M, 0, 32 * K},
		{costmodel.CollNetDirect, 4 * M, M, 128 * K},
		{costmodel.CollNetChain, G, 0, 256 * K},
		{costmodel.CollNetChain, 16 * M, 0, 128 * K},
		{costmodel.CollNetChain, M, 0, 64 * K},
		{costmodel.CollNetChain, 64 * K, 0, 32 * K},
		{costmodel.CollNetChain, M, 100000, 100000},
	} {
		assert.Equal(t, tc.want, c.collNetChunk(tc.algo, tc.nBytes, tc.planned, 2), "%v nBytes %d planned %d", tc.algo, tc.nBytes, tc.planned)
	}
	tiny, err := NewInProcess(4, Config{RanksPerNode: 2, Buffers: tinyBuffers()})
	require.NoError(t, err)
	defer closeAll(tiny)
	for _, a := range []costmodel.Algo{costmodel.CollNetDirect, costmodel.CollNetChain} {
		assert.Equal(t, int64(64), tiny[0].collNetChunk(a, G, 0, 2), "%v", a)
	}
}

// TestCollNetWatchdogStoppedEndpoint: an endpoint that takes the contributions and never answers
// (stopped, or hung) is what the watchdog names, on every rank, when every rank is alive: not a
// rank (before, the heads' watchdog named a live rank, which a Launcher then kills).
func TestCollNetWatchdogStoppedEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	for _, a := range []costmodel.Algo{costmodel.CollNetDirect, costmodel.CollNetChain} {
		t.Run(a.String(), func(t *testing.T) {
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: 2, Override: Pin(a, costmodel.Simple), Timeout: 300 * time.Millisecond}
			cfg.CollNet.Addr = ln.Addr().String()
			comms, err := NewInProcess(4, cfg)
			require.NoError(t, err)
			defer closeAll(comms)
			start := time.Now()
			errs := runRanks(t, comms, 20*time.Second, func(r int, c *Comm) error {
				b := make([]byte, 4000)
				return c.AllReduce(bg, b, b, 1000, kernels.Float32, kernels.Sum)
			})
			t.Logf("every rank failed in %v", time.Since(start))
			for r, err := range errs {
				require.ErrorIs(t, err, ErrAborted, "rank %d", r)
				assert.Contains(t, err.Error(), "waited past the watchdog's timeout for the CollNet aggregation endpoint", "rank %d", r)
				assert.NotContains(t, err.Error(), "stopped moving data", "rank %d", r)
			}
		})
	}
}

// processTransport is the in-process transport seen as another one: the engine treats its ranks as
// processes (osYieldNeeded, spinFits).
type processTransport struct{ transport.Rank }

// TestCollNetWaitsCountEndpoint: with as many rank processes as cores, a CollNet call's waits yield
// the OS thread and do not spin, since the endpoint is one more process that needs a core; other
// calls' waits keep their cores (the engine's rule for ranks that fit).
func TestCollNetWaitsCountEndpoint(t *testing.T) {
	n := runtime.NumCPU()
	shared := transport.NewInProcess().Rank()
	c, err := New(0, n, processTransport{shared}, Config{})
	require.NoError(t, err)
	defer c.Close()
	w := newWaiter(c, bg)
	require.False(t, w.OSYield, "the ranks fit the cores")
	require.True(t, c.spinFits(1))
	c.collNetWaits(&w)
	assert.True(t, w.OSYield, "with the endpoint, the processes outnumber the cores")
	assert.False(t, c.collNetSpinFits(1))
}
