package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// TestNVLSTreeAllReduceRuns is the regression test of issue 13 item 2: an NVLSTree-pinned
// AllReduce on 2 virtual nodes of 2 ranks was refused with ErrNotImplemented. Each rank r
// contributes r+1 in every element, so the sum over n ranks is n(n+1)/2 (hand derivation).
func TestNVLSTreeAllReduceRuns(t *testing.T) {
	const n, count = 4, 1000
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers(), RanksPerNode: 2, Override: Pin(costmodel.NVLSTree, costmodel.Simple)})
	require.NoError(t, err)
	defer closeAll(comms)
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
}

// checkNVLSTreeConns: an NVLS_TREE job maps connections only between ranks of the same local
// index in different nodes (the heads' trees), and, when wrap, every multicast object carried
// 3+ times NCCL_STEPS steps.
func checkNVLSTreeConns(t *testing.T, comms []*Comm, wrap bool) {
	t.Helper()
	for _, c := range comms {
		rpn := c.topo.rpn
		for k := range c.eps {
			assert.Equal(t, k.from%rpn, k.to%rpn, "rank %d: connection %v between different local ranks", c.rank, k)
			assert.NotEqual(t, k.from/rpn, k.to/rpn, "rank %d: connection %v inside a node", c.rank, k)
		}
		if !wrap {
			continue
		}
		for ch, g := range c.nvls {
			if g != nil {
				assert.GreaterOrEqual(t, g.Step, uint64(3*NCCLSteps), "rank %d channel %d: multicast object carried %d steps", c.rank, ch, g.Step)
			}
		}
	}
}

// nvlsTreeShapes are the (n, RanksPerNode) of the NVLS_TREE rows: n = 4..9 in at least 2 virtual
// nodes of 2 or 3 ranks, where the node size divides n.
var nvlsTreeShapes = [][2]int{{4, 2}, {6, 2}, {6, 3}, {8, 2}, {9, 3}}

// TestNVLSTreeMatrix is the correctness matrix's NVLS_TREE rows: AllReduce pinned to
// NVLSTree/Simple, a pairwise covering set over every dtype/op NVLS admits, the shapes above, the
// four sizes (0, 1 element, 13 elements: not a multiple of a chunk, and a size that wraps every
// multicast object's slots and every tree connection 3+ times), in place or not, 1-3 channels and
// both alignments, checked against the brute-force oracle.
func TestNVLSTreeMatrix(t *testing.T) {
	dos := nvlsDtOps()
	axes := []int{len(dos), len(nvlsTreeShapes), 4, 2, 3, 2}
	rows := pairwise(axes, 17)
	start := time.Now()
	for _, row := range rows {
		sh := nvlsTreeShapes[row[1]]
		m := matrixCase{ca: collAlgo{costmodel.AllReduce, costmodel.NVLSTree}, proto: costmodel.Simple, do: dos[row[0]], n: sh[0], rpn: sh[1],
			size: row[2], inPlace: row[3] == 1, channels: row[4] + 1, misalign: row[5]}
		t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
	}
	t.Logf("%d cases in %v", len(rows), time.Since(start))
}

// TestNVLSTreeCoreProduct runs the full product of NVLS_TREE's structural axes (the shapes, the
// four sizes, in place or not), cycling through the dtype/op pairs, the channel counts and the
// alignments. (Skipped with -short: the pairwise rows cover it there.)
func TestNVLSTreeCoreProduct(t *testing.T) {
	if testing.Short() {
		t.Skip("the pairwise rows cover it in -short")
	}
	dos := nvlsDtOps()
	k := 0
	for _, sh := range nvlsTreeShapes {
		for size := sizeZero; size <= sizeWrap; size++ {
			for _, inPlace := range []bool{false, true} {
				m := matrixCase{ca: collAlgo{costmodel.AllReduce, costmodel.NVLSTree}, proto: costmodel.Simple, do: dos[k%len(dos)], n: sh[0], rpn: sh[1],
					size: size, inPlace: inPlace, channels: 1 + k%3, misalign: k % 2}
				k++
				t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
			}
		}
	}
}

// TestNVLSTreeInvalid: an NVLS_TREE plan NCCL would not run is ErrInvalid on every rank, names the
// reason, and leaves the communicator usable.
func TestNVLSTreeInvalid(t *testing.T) {
	f32, i32 := kernels.Float32, kernels.Int32
	const topo = "virtual nodes of the same size, at least 2 ranks each"
	runInvalidCases(t, costmodel.NVLSTree, []invalidCase{
		{"allgather", 4, 2, costmodel.AllGather, costmodel.Simple, f32, kernels.Sum, "NVLS_TREE for AllGather"},
		{"reducescatter", 4, 2, costmodel.ReduceScatter, costmodel.Simple, f32, kernels.Sum, "NVLS_TREE for ReduceScatter"},
		{"broadcast", 4, 2, costmodel.Broadcast, costmodel.Simple, f32, kernels.Sum, "NVLS_TREE for Broadcast"},
		{"reduce", 4, 2, costmodel.Reduce, costmodel.Simple, f32, kernels.Sum, "NVLS_TREE for Reduce"},
		{"LL", 4, 2, costmodel.AllReduce, costmodel.LL, f32, kernels.Sum, "Simple only"},
		{"LL128", 4, 2, costmodel.AllReduce, costmodel.LL128, f32, kernels.Sum, "Simple only"},
		{"one node", 4, 0, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, topo},
		{"one rank per node", 4, 1, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, topo},
		{"unequal nodes", 5, 2, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, topo},
		{"float avg", 4, 2, costmodel.AllReduce, costmodel.Simple, f32, kernels.Avg, "float32 avg"},
		{"int avg", 4, 2, costmodel.AllReduce, costmodel.Simple, i32, kernels.Avg, "int32 avg"},
		{"float max", 6, 3, costmodel.AllReduce, costmodel.Simple, f32, kernels.Max, "float32 max"},
		{"float64 min", 4, 2, costmodel.AllReduce, costmodel.Simple, kernels.Float64, kernels.Min, "float64 min"},
		{"prod", 4, 2, costmodel.AllReduce, costmodel.Simple, i32, kernels.Prod, "int32 prod"},
		{"int8 sum", 4, 2, costmodel.AllReduce, costmodel.Simple, kernels.Int8, kernels.Sum, "int8 sum"},
		{"premulsum", 4, 2, costmodel.AllReduce, costmodel.Simple, f32, kernels.PreMulSum, "float32 premulsum"},
	})
}

// TestNVLSTreeBytes counts, per rank and channel, what moves through the multicast objects and
// what through point-to-point connections. Hand derivation: n = 6 in 3 virtual nodes of 2 ranks,
// 1000 float32 on 2 channels of 500 elements (roundUp(1000/2, 4)). The step per head is
// min(NVLSChunk, Simple/NCCL_STEPS) = 512/8 = 64 bytes (tinyBuffers), 16 elements, so a step is 2
// shares of 16 elements: 15 full steps of 32 elements, then 20 elements cut into shares of
// roundUp(10, 4) = 12 and 8. So on each channel head 0 owns B0 = 15*64 + 12*4 = 1008 bytes in
// 16 steps and head 1 owns B1 = 15*64 + 8*4 = 992 bytes in 16 steps.
//
// The double binary tree over 3 nodes (NCCL's ncclGetBtree, worked by hand): tree 0 is the chain
// 0 -> 2 -> 1 (node 0 the root, 2 its child, 1 the child of 2); tree 1, the mirror shifted by one
// for an odd count, is 1 -> 0 -> 2. A node's tree degree (parent plus children) is then 1, 1, 2 in
// tree 0 (channel 0) and 2, 1, 1 in tree 1 (channel 1). Head h of a node moves its share once over
// each of its tree links each way, so per channel:
//   - WireBytes = PayloadBytes = RecvBytes = degree * B_h, Steps = degree * 16;
//   - LdReduceBytes = StBytes = B_h (the head ld_reduces and st's its share, whatever its place in
//     the tree);
//   - no connection inside a node, and none between different local ranks.
func TestNVLSTreeBytes(t *testing.T) {
	const n, rpn, count = 6, 2, 1000
	cfg := Config{Buffers: tinyBuffers(), RanksPerNode: rpn, Override: Pin(costmodel.NVLSTree, costmodel.Simple)}
	cfg.Override.Channels = 2
	comms, err := NewInProcess(n, cfg)
	require.NoError(t, err)
	defer closeAll(comms)
	errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		return c.AllReduce(bg, make([]byte, 4*count), make([]byte, 4*count), count, kernels.Float32, kernels.Sum)
	})
	share := [rpn]uint64{1008, 992}
	degree := [2][3]uint64{{1, 1, 2}, {2, 1, 1}} // [tree][node]
	for r, c := range comms {
		require.NoError(t, errs[r], "rank %d", r)
		st := c.Stats()
		require.Len(t, st, 2, "rank %d", r)
		node, h := r/rpn, r%rpn
		for ch, s := range st {
			d, b := degree[ch][node], share[h]
			assert.Equal(t, ChannelStats{Steps: d * 16, PayloadBytes: d * b, WireBytes: d * b, RecvBytes: d * b, LdReduceBytes: b, StBytes: b},
				s, "rank %d channel %d", r, ch)
		}
	}
	checkNVLSTreeConns(t, comms, false)
}

// TestNVLSTreeChunk checks the NVLS_TREE chunk against calcCollChunking's rule worked by hand
// (reference §10): chunk = min(step, 64 KiB on 4+ nodes), then 256K, 128K, 64K and 32K when
// nBytes < 32, 16, 4 and 1 times ops*chunk, ops = nHeads = RanksPerNode (one channel per work
// piece), each only while the chunk is larger.
//   - 2 nodes of 2, NVLSChunk 512 KiB (the step: a default Simple slot is 512 KiB too), ops = 2:
//     32 MiB stays 512K (not < 32*2*512K = 32M); 16 MiB < 32M gives 256K, not < 16*2*256K = 8M;
//     4 MiB < 8M gives 128K, not < 4*2*128K = 1M; 512 KiB < 1M gives 64K, not < 1*2*64K = 128K;
//     64 KiB < 128K gives 32K.
//   - 4 nodes of 2, the default 128 KiB step, capped at 64K: 1 MiB and 128 KiB stay 64K (the
//     thresholds above 64K do not apply; 128K is not < 1*2*64K); 64 KiB gives 32K.
//   - a planned chunk is kept (capped at the step).
func TestNVLSTreeChunk(t *testing.T) {
	for _, tc := range []struct {
		n, rpn int
		nvls   int64
		bytes  int
		want   int64
	}{
		{4, 2, 512 << 10, 32 << 20, 512 << 10},
		{4, 2, 512 << 10, 16 << 20, 256 << 10},
		{4, 2, 512 << 10, 4 << 20, 128 << 10},
		{4, 2, 512 << 10, 512 << 10, 64 << 10},
		{4, 2, 512 << 10, 64 << 10, 32 << 10},
		{8, 2, 0, 1 << 20, 64 << 10},
		{8, 2, 0, 128 << 10, 64 << 10},
		{8, 2, 0, 64 << 10, 32 << 10},
	} {
		cfg := Config{RanksPerNode: tc.rpn, Override: Pin(costmodel.NVLSTree, costmodel.Simple)}
		cfg.Buffers.NVLSChunk = tc.nvls
		comms, err := NewInProcess(tc.n, cfg)
		require.NoError(t, err)
		p, err := comms[0].resolve(costmodel.AllReduce, kernels.Float32, kernels.Sum, tc.bytes/4)
		closeAll(comms)
		require.NoError(t, err)
		assert.Equal(t, tc.want, p.ChunkBytes, "n %d rpn %d NVLSChunk %d, %d bytes", tc.n, tc.rpn, tc.nvls, tc.bytes)
		assert.Equal(t, int(tc.want)/4, p.chunkElems)
	}
	planned := func(costmodel.Coll, int64) planner.Decision {
		return planner.Decision{Algo: costmodel.NVLSTree, Proto: costmodel.Simple, Channels: 2, ChunkBytes: 48 << 10}
	}
	pc, err := NewInProcess(4, Config{RanksPerNode: 2, Plan: planned})
	require.NoError(t, err)
	defer closeAll(pc)
	p, err := pc[0].resolve(costmodel.AllReduce, kernels.Float32, kernels.Sum, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, int64(48<<10), p.ChunkBytes, "the plan's chunk")
}

// TestNVLSTreeFailures: NVLS_TREE's waits (on the multicast objects' counters and on the tree
// connections) are the engine's: a rank that never joins is found by the watchdog, every live
// rank naming it, whichever member or tree peer it waited for; and cancelling every rank in the
// middle of a long call (tiny buffers) returns promptly on every rank with an error.
func TestNVLSTreeFailures(t *testing.T) {
	const n, rpn = 6, 2
	t.Run("watchdog", func(t *testing.T) {
		const absent = 3
		cfg := Config{Buffers: tinyBuffers(), RanksPerNode: rpn, Timeout: 300 * time.Millisecond, Override: Pin(costmodel.NVLSTree, costmodel.Simple)}
		comms, err := NewInProcess(n, cfg)
		require.NoError(t, err)
		defer closeAll(comms)
		live := append(append([]*Comm(nil), comms[:absent]...), comms[absent+1:]...)
		errs := runRanks(t, live, 10*time.Second, func(_ int, c *Comm) error {
			b := make([]byte, 4096)
			return c.AllReduce(bg, b, b, 1024, kernels.Float32, kernels.Sum)
		})
		for i, err := range errs {
			var ae *AbortError
			require.ErrorAs(t, err, &ae, "live rank %d", live[i].Rank())
			assert.Equal(t, absent, ae.Rank, "rank %d: %v", live[i].Rank(), err)
			assert.True(t, ae.Lost)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		cfg := Config{Buffers: tinyBuffers(), RanksPerNode: rpn, Override: Pin(costmodel.NVLSTree, costmodel.Simple)}
		cfg.Override.Channels = 3
		comms, err := NewInProcess(n, cfg)
		require.NoError(t, err)
		defer closeAll(comms)
		ctx, cancel := context.WithCancel(bg)
		time.AfterFunc(20*time.Millisecond, cancel)
		const count = 1 << 22 // far more than 20 ms of work through 64-byte steps
		start := time.Now()
		errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
			b := make([]byte, count*4)
			return c.AllReduce(ctx, b, b, count, kernels.Float32, kernels.Sum)
		})
		for r, err := range errs {
			require.Error(t, err, "rank %d", r)
			assert.True(t, errors.Is(err, context.Canceled) || errors.Is(err, ErrAborted), "rank %d: %v", r, err)
		}
		assert.Less(t, time.Since(start), 5*time.Second)
	})
}

// TestNVLSTreeSequence runs a sequence of AllReduce calls on one communicator of 6 ranks in 3
// nodes of 2: NVLS_TREE on 1-3 channels interleaved with Tree (whose node heads, local rank 0,
// share the tree connections of NVLS_TREE's head 0) and Ring, so the multicast objects' and
// the connections' step counters carry on across calls and algorithms. Values (int32, hand
// derivation): rank r's element i is 1000r+i, summed over n ranks n*i+1000n(n-1)/2.
func TestNVLSTreeSequence(t *testing.T) {
	const n = 6
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers(), RanksPerNode: 2})
	require.NoError(t, err)
	defer closeAll(comms)
	le := binary.LittleEndian
	seq := []struct {
		algo  costmodel.Algo
		ch    int
		count int
	}{
		{costmodel.NVLSTree, 2, 3001},
		{costmodel.Tree, 2, 777},
		{costmodel.NVLSTree, 1, 17},
		{costmodel.Ring, 3, 500},
		{costmodel.NVLSTree, 3, 4000},
		{costmodel.Tree, 3, 1234},
		{costmodel.NVLSTree, 2, 5},
		{costmodel.NVLSTree, 3, 9999},
	}
	for k, sc := range seq {
		o := Pin(sc.algo, costmodel.Simple)
		o.Channels = sc.ch
		outs := make([][]byte, n)
		errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
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
