package engine

import (
	"encoding/binary"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// TestNVLSAllReduceRuns is the regression test of issue 13 item 1: an NVLS-pinned AllReduce was
// refused with ErrNotImplemented. Each rank r contributes r+1 in every element, so the sum over n
// ranks is n(n+1)/2 (hand derivation).
func TestNVLSAllReduceRuns(t *testing.T) {
	const n, count = 4, 1000
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers(), Override: Pin(costmodel.NVLS, costmodel.Simple)})
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

// nvlsDtOps are the dtype/op pairs NVLS reduces (NCCL's ncclNvlsSupported, reference §9): sum on
// the 32- and 64-bit integers, float16, bfloat16, float32 and float64; min and max on all of
// those but float32 and float64.
func nvlsDtOps() []dtOp {
	var out []dtOp
	for _, dt := range []kernels.Dtype{kernels.Int32, kernels.Uint32, kernels.Int64, kernels.Uint64,
		kernels.Float16, kernels.Bfloat16, kernels.Float32, kernels.Float64} {
		out = append(out, dtOp{dt, kernels.Sum})
	}
	for _, dt := range []kernels.Dtype{kernels.Int32, kernels.Uint32, kernels.Int64, kernels.Uint64,
		kernels.Float16, kernels.Bfloat16} {
		out = append(out, dtOp{dt, kernels.Min}, dtOp{dt, kernels.Max})
	}
	return out
}

// TestNVLSMatrix is the correctness matrix's NVLS rows: AllReduce, AllGather and ReduceScatter
// pinned to NVLS/Simple in one virtual node, a pairwise covering set over every dtype/op NVLS
// admits, n = 2..9, the four sizes (0, 1 element, 13 elements, and a size that wraps every
// multicast object's slots 3+ times), in place or not, 1-3 channels and both alignments, checked
// against the brute-force oracle.
func TestNVLSMatrix(t *testing.T) {
	cas := []collAlgo{{costmodel.AllReduce, costmodel.NVLS}, {costmodel.AllGather, costmodel.NVLS}, {costmodel.ReduceScatter, costmodel.NVLS}}
	dos := nvlsDtOps()
	ns := []int{2, 3, 4, 5, 6, 7, 8, 9}
	if testing.Short() {
		ns = []int{2, 3, 5, 9}
	}
	axes := []int{len(cas), len(dos), len(ns), 4, 2, 3, 2}
	rows := pairwise(axes, 13)
	start := time.Now()
	for _, row := range rows {
		m := matrixCase{ca: cas[row[0]], proto: costmodel.Simple, do: dos[row[1]], n: ns[row[2]], rpn: 0,
			size: row[3], inPlace: row[4] == 1, channels: row[5] + 1, misalign: row[6]}
		t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
	}
	t.Logf("%d cases in %v", len(rows), time.Since(start))
}

// TestNVLSCoreProduct runs the full product of NVLS's structural axes (collective, n = 2..9, the
// four sizes, in place or not), cycling through the dtype/op pairs, the channel counts and the
// alignments.
func TestNVLSCoreProduct(t *testing.T) {
	dos := nvlsDtOps()
	k := 0
	for _, coll := range []costmodel.Coll{costmodel.AllReduce, costmodel.AllGather, costmodel.ReduceScatter} {
		for n := 2; n <= 9; n++ {
			for size := sizeZero; size <= sizeWrap; size++ {
				for _, inPlace := range []bool{false, true} {
					m := matrixCase{ca: collAlgo{coll, costmodel.NVLS}, proto: costmodel.Simple, do: dos[k%len(dos)], n: n,
						size: size, inPlace: inPlace, channels: 1 + k%3, misalign: k % 2}
					k++
					t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
				}
			}
		}
	}
}

// TestNVLSInvalid: an NVLS plan NCCL would not run is ErrInvalid on every rank (never a hang),
// names the reason, and leaves the communicator usable (every rank rejected the call): a Ring
// AllReduce afterwards succeeds.
func TestNVLSInvalid(t *testing.T) {
	f32, i8 := kernels.Float32, kernels.Int8
	cases := []invalidCase{
		{"broadcast", 3, 0, costmodel.Broadcast, costmodel.Simple, f32, kernels.Sum, "NVLS for Broadcast"},
		{"reduce", 3, 0, costmodel.Reduce, costmodel.Simple, f32, kernels.Sum, "NVLS for Reduce"},
		{"LL", 3, 0, costmodel.AllReduce, costmodel.LL, f32, kernels.Sum, "Simple only"},
		{"LL128", 3, 0, costmodel.AllGather, costmodel.LL128, f32, kernels.Sum, "Simple only"},
		{"one rank", 1, 0, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, "at least 2"},
		{"two nodes", 4, 2, costmodel.AllReduce, costmodel.Simple, f32, kernels.Sum, "2 virtual nodes"},
		{"float avg", 3, 0, costmodel.AllReduce, costmodel.Simple, f32, kernels.Avg, "float32 avg"},
		{"int avg", 3, 0, costmodel.AllReduce, costmodel.Simple, kernels.Int32, kernels.Avg, "int32 avg"},
		{"float max", 3, 0, costmodel.AllReduce, costmodel.Simple, f32, kernels.Max, "float32 max"},
		{"float64 min", 2, 0, costmodel.ReduceScatter, costmodel.Simple, kernels.Float64, kernels.Min, "float64 min"},
		{"prod", 3, 0, costmodel.AllReduce, costmodel.Simple, kernels.Int32, kernels.Prod, "int32 prod"},
		{"int8 sum", 3, 0, costmodel.ReduceScatter, costmodel.Simple, i8, kernels.Sum, "int8 sum"},
		{"fp8 sum", 2, 0, costmodel.AllReduce, costmodel.Simple, kernels.Fp8E4M3, kernels.Sum, "fp8e4m3 sum"},
		{"premulsum", 3, 0, costmodel.AllReduce, costmodel.Simple, f32, kernels.PreMulSum, "float32 premulsum"},
	}
	runInvalidCases(t, costmodel.NVLS, cases)
}

// invalidCase is a call on n ranks in virtual nodes of rpn (0: one node) that the pinned
// algorithm must refuse with ErrInvalid, with an error containing want.
type invalidCase struct {
	name  string
	n     int
	rpn   int
	coll  costmodel.Coll
	proto costmodel.Proto
	dt    kernels.Dtype
	op    kernels.Op
	want  string
}

// runInvalidCases runs each case pinned to algo and proto: ErrInvalid on every rank (never a
// hang), the same error, naming the reason; and the communicator stays usable (every rank rejected
// the call): a Ring AllReduce afterwards succeeds.
func runInvalidCases(t *testing.T, algo costmodel.Algo, cases []invalidCase) {
	f32 := kernels.Float32
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			comms, err := NewInProcess(tc.n, Config{Buffers: tinyBuffers(), RanksPerNode: tc.rpn, Override: Pin(algo, tc.proto)})
			require.NoError(t, err)
			defer closeAll(comms)
			const count = 10
			es := tc.dt.Size()
			errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				op := tc.op
				if op == kernels.PreMulSum {
					scalar := make([]byte, es)
					kernels.SetValue(tc.dt, scalar, 0.5)
					var err error
					if op, err = c.RedOpCreatePreMulSum(scalar, tc.dt); err != nil {
						return err
					}
				}
				big := make([]byte, tc.n*count*es)
				switch tc.coll {
				case costmodel.AllGather:
					return c.AllGather(bg, big[r*count*es:(r+1)*count*es], big, count, tc.dt)
				case costmodel.ReduceScatter:
					return c.ReduceScatter(bg, big, big[r*count*es:(r+1)*count*es], count, tc.dt, op)
				case costmodel.Broadcast:
					return c.Broadcast(bg, big, big, count, tc.dt, 0)
				case costmodel.Reduce:
					return c.Reduce(bg, big, big, count, tc.dt, op, 0)
				}
				return c.AllReduce(bg, big[:count*es], big[:count*es], count, tc.dt, op)
			})
			for r, err := range errs {
				require.ErrorIs(t, err, ErrInvalid, "rank %d", r)
				assert.Contains(t, err.Error(), tc.want, "rank %d", r)
				assert.Equal(t, errs[0].Error(), err.Error(), "rank %d: not the same error as rank 0", r)
			}
			// A launcher's check before any rank starts says the same (PinError).
			pinErr := PinError(tc.coll, algo, tc.proto, tc.n, tc.rpn, tc.dt, tc.op)
			require.ErrorIs(t, pinErr, ErrInvalid)
			assert.Contains(t, errs[0].Error(), pinErr.Error(), "PinError and the call")
			errs = runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				c.SetOverride(Override{})
				b := make([]byte, 4*count)
				return c.AllReduce(bg, b, b, count, f32, kernels.Sum)
			})
			for r, err := range errs {
				assert.NoError(t, err, "rank %d: the call after the rejected one", r)
			}
		})
	}
}

// TestNVLSBytes counts, per rank, what moves through the multicast object and what through
// point-to-point connections. Hand derivation for one virtual node of n ranks and count elements
// of es bytes (per rank for AllGather and ReduceScatter), whatever the channels and steps:
//   - AllReduce: each element is ld_reduced and st'd by exactly one rank (the head of its share),
//     so the ranks together ld_reduce and st count*es bytes each;
//   - AllGather: each rank st's its own block, count*es bytes, and ld_reduces nothing;
//   - ReduceScatter: each rank ld_reduces its own block, count*es bytes, and st's nothing;
//   - nothing moves point to point: no step, payload, wire or receive bytes, and no connection is
//     mapped.
func TestNVLSBytes(t *testing.T) {
	const n, count = 4, 1000 // float32; 4000 bytes per rank: 16 tiny steps of 4 x 64 bytes
	for _, coll := range []costmodel.Coll{costmodel.AllReduce, costmodel.AllGather, costmodel.ReduceScatter} {
		t.Run(coll.String(), func(t *testing.T) {
			cfg := Config{Buffers: tinyBuffers(), Override: Pin(costmodel.NVLS, costmodel.Simple)}
			cfg.Override.Channels = 2
			comms, err := NewInProcess(n, cfg)
			require.NoError(t, err)
			defer closeAll(comms)
			errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				one, all := make([]byte, 4*count), make([]byte, 4*n*count)
				switch coll {
				case costmodel.AllGather:
					return c.AllGather(bg, one, all, count, kernels.Float32)
				case costmodel.ReduceScatter:
					return c.ReduceScatter(bg, all, one, count, kernels.Float32, kernels.Sum)
				}
				return c.AllReduce(bg, one, make([]byte, 4*count), count, kernels.Float32, kernels.Sum)
			})
			var ld, st uint64
			for r, c := range comms {
				require.NoError(t, errs[r], "rank %d", r)
				var tot ChannelStats
				for _, s := range c.Stats() {
					tot.Add(s)
				}
				assert.Zero(t, tot.Steps, "rank %d: point-to-point steps", r)
				assert.Zero(t, tot.PayloadBytes, "rank %d: point-to-point payload", r)
				assert.Zero(t, tot.WireBytes, "rank %d: point-to-point wire bytes", r)
				assert.Zero(t, tot.RecvBytes, "rank %d: point-to-point receives", r)
				assert.Empty(t, c.eps, "rank %d: connections mapped", r)
				switch coll {
				case costmodel.AllGather:
					assert.Equal(t, uint64(4*count), tot.StBytes, "rank %d st", r)
					assert.Zero(t, tot.LdReduceBytes, "rank %d ldReduce", r)
				case costmodel.ReduceScatter:
					assert.Equal(t, uint64(4*count), tot.LdReduceBytes, "rank %d ldReduce", r)
					assert.Zero(t, tot.StBytes, "rank %d st", r)
				default:
					assert.Equal(t, tot.LdReduceBytes, tot.StBytes, "rank %d: every reduced share is stored", r)
				}
				ld += tot.LdReduceBytes
				st += tot.StBytes
			}
			if coll == costmodel.AllReduce {
				assert.Equal(t, uint64(4*count), ld, "ldReduce bytes over the ranks")
				assert.Equal(t, uint64(4*count), st, "st bytes over the ranks")
			}
		})
	}
}

// TestNVLSChunkConfig: an NVLS chunk that is not a positive multiple of 8 bytes up to 1 GiB is
// ErrInvalid at New, naming the field (a negative one used to reach the region's size).
func TestNVLSChunkConfig(t *testing.T) {
	for _, v := range []int64{-8, 12, 2 << 30} {
		b := tinyBuffers()
		b.NVLSChunk = v
		_, err := NewInProcess(2, Config{Buffers: b, Override: Pin(costmodel.NVLS, costmodel.Simple)})
		require.ErrorIs(t, err, ErrInvalid, "NVLSChunk %d", v)
		assert.Contains(t, err.Error(), "NVLSChunk", "NVLSChunk %d", v)
	}
}

// TestNVLSSequence runs a sequence of calls on one communicator, NVLS AllReduce, AllGather and
// ReduceScatter on 1-3 channels interleaved with Ring calls, so the multicast objects' step
// counters carry on across calls and collectives as a connection's do. Values (int32, hand
// derivation): rank r's element i of an AllReduce is 1000r+i, summed over n ranks n*i+1000n(n-1)/2;
// an AllGather's block j element i is 1000j+i; rank r's ReduceScatter input element k (of n*count)
// is 1000r+k, so block b element i sums to n(b*count+i)+1000n(n-1)/2.
func TestNVLSSequence(t *testing.T) {
	const n = 4
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers()})
	require.NoError(t, err)
	defer closeAll(comms)
	le := binary.LittleEndian
	fill := func(b []byte, base int) {
		for i := 0; i < len(b)/4; i++ {
			le.PutUint32(b[4*i:], uint32(base+i))
		}
	}
	type call struct {
		coll  costmodel.Coll
		algo  costmodel.Algo
		ch    int
		count int
	}
	seq := []call{
		{costmodel.AllReduce, costmodel.NVLS, 2, 3001},
		{costmodel.AllGather, costmodel.NVLS, 1, 777},
		{costmodel.AllReduce, costmodel.Ring, 2, 500},
		{costmodel.ReduceScatter, costmodel.NVLS, 3, 1234},
		{costmodel.AllReduce, costmodel.NVLS, 1, 17},
		{costmodel.ReduceScatter, costmodel.NVLS, 1, 5},
		{costmodel.AllGather, costmodel.NVLS, 3, 4000},
		{costmodel.AllReduce, costmodel.NVLS, 3, 9999},
	}
	off := 1000 * n * (n - 1) / 2
	for k, sc := range seq {
		o := Pin(sc.algo, costmodel.Simple)
		o.Channels = sc.ch
		outs := make([][]byte, n)
		errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
			c.SetOverride(o)
			switch sc.coll {
			case costmodel.AllGather:
				in := make([]byte, 4*sc.count)
				fill(in, 1000*r)
				outs[r] = make([]byte, 4*n*sc.count)
				return c.AllGather(bg, in, outs[r], sc.count, kernels.Int32)
			case costmodel.ReduceScatter:
				in := make([]byte, 4*n*sc.count)
				fill(in, 1000*r)
				outs[r] = make([]byte, 4*sc.count)
				return c.ReduceScatter(bg, in, outs[r], sc.count, kernels.Int32, kernels.Sum)
			}
			outs[r] = make([]byte, 4*sc.count)
			fill(outs[r], 1000*r)
			return c.AllReduce(bg, outs[r], outs[r], sc.count, kernels.Int32, kernels.Sum)
		})
		for r := 0; r < n; r++ {
			require.NoError(t, errs[r], "call %d rank %d", k, r)
			nel := len(outs[r]) / 4
			for i := 0; i < nel; i++ {
				var want int
				switch sc.coll {
				case costmodel.AllGather:
					want = 1000*(i/sc.count) + i%sc.count
				case costmodel.ReduceScatter:
					want = n*(r*sc.count+i) + off
				default:
					want = n*i + off
				}
				if got := int(int32(le.Uint32(outs[r][4*i:]))); got != want {
					t.Fatalf("call %d (%v %v, %d channels) rank %d element %d: %d, want %d", k, sc.coll, sc.algo, sc.ch, r, i, got, want)
				}
			}
		}
	}
}

// TestNVLSWatchdog: a rank that never joins an NVLS call is found by the watchdog, as for the
// other algorithms: every live rank's call ends with an *AbortError naming it (the multicast
// object's waits are the engine's).
func TestNVLSWatchdog(t *testing.T) {
	const n, absent = 3, 1
	cfg := Config{Buffers: tinyBuffers(), Timeout: 300 * time.Millisecond, Override: Pin(costmodel.NVLS, costmodel.Simple)}
	comms, err := NewInProcess(n, cfg)
	require.NoError(t, err)
	defer closeAll(comms)
	live := []*Comm{comms[0], comms[2]}
	errs := runRanks(t, live, 10*time.Second, func(_ int, c *Comm) error {
		b := make([]byte, 4096)
		return c.AllReduce(bg, b, b, 1024, kernels.Float32, kernels.Sum)
	})
	for i, err := range errs {
		var ae *AbortError
		require.ErrorAs(t, err, &ae, "live rank %d", live[i].Rank())
		assert.Equal(t, absent, ae.Rank, "rank %d: %v", live[i].Rank(), err)
	}
}

// nvlsSteps is the NVLS steps c has run so far, over its channels' multicast objects (no
// connection carries them, so ChannelStats.Steps does not count them).
func nvlsSteps(c *Comm) uint64 {
	var s uint64
	for _, g := range c.nvls {
		if g != nil {
			s += g.Step
		}
	}
	return s
}

// TestNVLSNoAllocationPerStep: an NVLS call allocates the same whatever the number of steps.
func TestNVLSNoAllocationPerStep(t *testing.T) {
	const n = 3
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers(), Override: Pin(costmodel.NVLS, costmodel.Simple)})
	require.NoError(t, err)
	defer closeAll(comms)
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = make([]byte, 40000*4)
	}
	runs, large := 20, 40000
	if testing.Short() {
		runs, large = 5, 10000
	}
	assertNoAllocationPerStep(t, comms, nvlsSteps, runs, 500, large, func(count int) {
		errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
			return c.AllReduce(bg, bufs[r], bufs[r], count, kernels.Float32, kernels.Sum)
		})
		for _, err := range errs {
			require.NoError(t, err)
		}
	})
}

// TestNVLSLayout checks the region's layout against a hand derivation for 2 members and 64-byte
// steps: line 0 the layout word, lines 1-6 the counters (member 0's posted, reduced, done, then
// member 1's), data from byte 7*128 = 896; a slot is 2 heads x 64 = 128 bytes, a buffer 8 slots =
// 1024 bytes, each member an up and a down buffer (NCCL's 2 x buffSize x nHeads per rank).
func TestNVLSLayout(t *testing.T) {
	l := NVLSLayout{Members: 2, StepBytes: 64}
	assert.Equal(t, 128, l.SlotBytes())
	assert.Equal(t, 1024, l.BufferBytes())
	assert.Equal(t, []int{896, 1920, 2944, 3968}, []int{l.UpOffset(0), l.DownOffset(0), l.UpOffset(1), l.DownOffset(1)})
	assert.Equal(t, 896+4*1024, l.Size())
	assert.Equal(t, []int{128, 256, 384, 512, 640, 768}, []int{
		l.CounterOffset(0, NVLSPosted), l.CounterOffset(0, NVLSReduced), l.CounterOffset(0, NVLSDone),
		l.CounterOffset(1, NVLSPosted), l.CounterOffset(1, NVLSReduced), l.CounterOffset(1, NVLSDone)})
	assert.Equal(t, "nvls/0/3", NVLSRegion(0, 3))
}

// TestNVLSChunk checks the NVLS chunk against calcCollChunking's rule worked by hand, with NCCL's
// default buffers (nvlsChunkSize 128 KiB, under a 512 KiB Simple slot) on 4 ranks (ops = 4):
//   - 64 MiB: not below 64*4*128K = 32 MiB: 128 KiB;
//   - 16 MiB: below 32 MiB: 64 KiB; not below 8*4*64K = 2 MiB: 64 KiB;
//   - 1 MiB: 64 KiB; below 2 MiB: 32 KiB; not below 2*4*32K = 256 KiB: 32 KiB;
//   - 100 KiB: 64 KiB, 32 KiB, below 256 KiB: 16 KiB;
//   - AllGather of 256 KiB per rank is 1 MiB of model bytes: 32 KiB.
//
// A chunk from the plan is kept, capped at the step.
func TestNVLSChunk(t *testing.T) {
	comms, err := NewInProcess(4, Config{Override: Pin(costmodel.NVLS, costmodel.Simple)})
	require.NoError(t, err)
	defer closeAll(comms)
	c := comms[0]
	for _, tc := range []struct {
		coll  costmodel.Coll
		bytes int
		want  int64
	}{
		{costmodel.AllReduce, 64 << 20, 128 << 10},
		{costmodel.AllReduce, 16 << 20, 64 << 10},
		{costmodel.AllReduce, 1 << 20, 32 << 10},
		{costmodel.AllReduce, 100 << 10, 16 << 10},
		{costmodel.AllGather, 256 << 10, 32 << 10},
	} {
		p, err := c.resolve(tc.coll, kernels.Float32, kernels.Sum, tc.bytes/4)
		require.NoError(t, err)
		assert.Equal(t, tc.want, p.ChunkBytes, "%v of %d bytes", tc.coll, tc.bytes)
		assert.Equal(t, int(tc.want)/4, p.chunkElems)
	}
	planned := func(costmodel.Coll, int64) planner.Decision {
		return planner.Decision{Algo: costmodel.NVLS, Proto: costmodel.Simple, Channels: 2, ChunkBytes: 48 << 10}
	}
	pc, err := NewInProcess(2, Config{Plan: planned})
	require.NoError(t, err)
	defer closeAll(pc)
	p, err := pc[0].resolve(costmodel.AllReduce, kernels.Float32, kernels.Sum, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, int64(48<<10), p.ChunkBytes, "the plan's chunk")
}
