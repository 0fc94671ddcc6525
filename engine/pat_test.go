package engine

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/algorithm"
	"github.com/collplan/collplan/engine/transport/shm"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// TestPATAllGatherRuns is the regression test of issue 13 item 4: the cost model prices PAT at one
// rank per node, so a plan naming it must run; before pat.go the engine refused it with
// ErrNotImplemented.
func TestPATAllGatherRuns(t *testing.T) {
	const n, count = 4, 10
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers(), RanksPerNode: 1, Override: Pin(costmodel.PAT, costmodel.Simple)})
	require.NoError(t, err)
	defer closeAll(comms)
	recvs := make([][]byte, n)
	errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		send := make([]byte, count*4)
		for i := range send {
			send[i] = byte(r*100 + i)
		}
		recvs[r] = make([]byte, n*count*4)
		return c.AllGather(bg, send, recvs[r], count, kernels.Float32)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for r := range recvs {
		for p := 0; p < n; p++ {
			for i := 0; i < count*4; i++ {
				require.Equal(t, byte(p*100+i), recvs[r][p*count*4+i], "rank %d block %d byte %d", r, p, i)
			}
		}
	}
}

// TestPATConnections: a PAT call maps only the connections its schedule uses (per channel, one to
// and one from each power-of-two distance below n), made by the call itself, and a Ring call
// made afterwards adds only the ring's.
func TestPATConnections(t *testing.T) {
	type conn struct{ ch, from, to int }
	cases := []struct {
		coll costmodel.Coll
		rank int
		want []conn // channels 0 and 1, n = 5 (distances 1, 2, 4)
	}{
		// AllGather sends to rank-2^d, receives from rank+2^d: rank 0 to 4, 3, 1 and from 1, 2, 4.
		{costmodel.AllGather, 0, []conn{{0, 0, 4}, {0, 0, 3}, {0, 0, 1}, {0, 1, 0}, {0, 2, 0}, {0, 4, 0}}},
		// rank 2 to 1, 0, 3 and from 3, 4, 1.
		{costmodel.AllGather, 2, []conn{{0, 2, 1}, {0, 2, 0}, {0, 2, 3}, {0, 3, 2}, {0, 4, 2}, {0, 1, 2}}},
		// ReduceScatter sends to rank+2^d, receives from rank-2^d: rank 0 to 1, 2, 4, from 4, 3, 1.
		{costmodel.ReduceScatter, 0, []conn{{0, 0, 1}, {0, 0, 2}, {0, 0, 4}, {0, 4, 0}, {0, 3, 0}, {0, 1, 0}}},
	}
	for _, k := range cases {
		t.Run(fmt.Sprintf("%v-rank%d", k.coll, k.rank), func(t *testing.T) {
			const n, count = 5, 40
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: 1, Override: Pin(costmodel.PAT, costmodel.Simple)}
			cfg.Override.Channels = 2
			comms, err := NewInProcess(n, cfg)
			require.NoError(t, err)
			defer closeAll(comms)
			for r := range comms {
				require.Empty(t, comms[r].eps, "rank %d: connections before any call", r)
			}
			errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				big, one := make([]byte, n*count*4), make([]byte, count*4)
				if k.coll == costmodel.AllGather {
					return c.AllGather(bg, one, big, count, kernels.Float32)
				}
				return c.ReduceScatter(bg, big, one, count, kernels.Float32, kernels.Sum)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			want := map[conn]bool{}
			for _, c := range k.want {
				want[c] = true
				want[conn{1, c.from, c.to}] = true
			}
			got := map[conn]bool{}
			for key := range comms[k.rank].eps {
				got[conn{key.ch, key.from, key.to}] = true
			}
			assert.Equal(t, want, got)
			for r, c := range comms {
				assert.Len(t, c.eps, 2*2*algorithm.PATDims(n), "rank %d", r)
			}
		})
	}
}

// TestPATInvalid: PAT pinned where NCCL would not run it is ErrInvalid on every rank, with the
// same message, without a hang; the communicator still runs a valid PAT call afterwards.
func TestPATInvalid(t *testing.T) {
	type tc struct {
		name  string
		rpn   int
		proto costmodel.Proto
		coll  costmodel.Coll
		dt    kernels.Dtype
		op    kernels.Op
		want  string
	}
	cases := []tc{
		{"AllReduce", 1, costmodel.Simple, costmodel.AllReduce, kernels.Float32, kernels.Sum, "AllGather and ReduceScatter only"},
		{"Broadcast", 1, costmodel.Simple, costmodel.Broadcast, kernels.Float32, 0, "AllGather and ReduceScatter only"},
		{"Reduce", 1, costmodel.Simple, costmodel.Reduce, kernels.Float32, kernels.Sum, "AllGather and ReduceScatter only"},
		{"rpn2", 2, costmodel.Simple, costmodel.AllGather, kernels.Float32, 0, "2 ranks per node"},
		{"one-node", 0, costmodel.Simple, costmodel.ReduceScatter, kernels.Float32, kernels.Sum, "4 ranks per node"},
		{"LL", 1, costmodel.LL, costmodel.AllGather, kernels.Float32, 0, "Simple only"},
		{"LL128", 1, costmodel.LL128, costmodel.ReduceScatter, kernels.Float32, kernels.Sum, "Simple only"},
		{"avg-float", 1, costmodel.Simple, costmodel.ReduceScatter, kernels.Float32, kernels.Avg, "PreMulSum or SumPostDiv"},
		{"avg-int", 1, costmodel.Simple, costmodel.ReduceScatter, kernels.Int32, kernels.Avg, "PreMulSum or SumPostDiv"},
		{"premulsum", 1, costmodel.Simple, costmodel.ReduceScatter, kernels.Float32, kernels.PreMulSum, "PreMulSum or SumPostDiv"},
	}
	for _, k := range cases {
		t.Run(k.name, func(t *testing.T) {
			const n, count = 4, 10
			comms, err := NewInProcess(n, Config{Buffers: tinyBuffers(), RanksPerNode: k.rpn, Override: Pin(costmodel.PAT, k.proto)})
			require.NoError(t, err)
			defer closeAll(comms)
			call := func(c *Comm, coll costmodel.Coll, op kernels.Op) error {
				big, one := make([]byte, n*count*4), make([]byte, count*4)
				switch coll {
				case costmodel.AllGather:
					return c.AllGather(bg, one, big, count, k.dt)
				case costmodel.ReduceScatter:
					return c.ReduceScatter(bg, big, one, count, k.dt, op)
				case costmodel.AllReduce:
					return c.AllReduce(bg, one, one, count, k.dt, op)
				case costmodel.Broadcast:
					return c.Broadcast(bg, one, one, count, k.dt, 0)
				}
				return c.Reduce(bg, one, one, count, k.dt, op, 0)
			}
			errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				op := k.op
				if op == kernels.PreMulSum {
					s := make([]byte, 4)
					var err error
					if op, err = c.RedOpCreatePreMulSum(s, k.dt); err != nil {
						return err
					}
				}
				return call(c, k.coll, op)
			})
			for r, err := range errs {
				require.ErrorIs(t, err, ErrInvalid, "rank %d", r)
				assert.Contains(t, err.Error(), k.want, "rank %d", r)
				assert.Equal(t, errs[0].Error(), err.Error(), "rank %d", r)
			}
			// A launcher's check before any rank starts says the same (PinError).
			pinErr := PinError(k.coll, costmodel.PAT, k.proto, n, k.rpn, k.dt, k.op)
			require.ErrorIs(t, pinErr, ErrInvalid)
			assert.Contains(t, errs[0].Error(), pinErr.Error(), "PinError and the call")
			if k.rpn != 1 {
				return
			}
			// Every rank rejected the call: the communicator is not aborted.
			for _, c := range comms {
				c.SetOverride(Pin(costmodel.PAT, costmodel.Simple))
			}
			errs = runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				return call(c, costmodel.ReduceScatter, kernels.Sum)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
		})
	}
}

// TestPATNoAllocationPerStep: a PAT call allocates the same whatever the number of FIFO steps it
// takes (the connections, schedules and accumulators are made by the first call).
func TestPATNoAllocationPerStep(t *testing.T) {
	for _, coll := range []costmodel.Coll{costmodel.AllGather, costmodel.ReduceScatter} {
		t.Run(coll.String(), func(t *testing.T) {
			const n = 5
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: 1, Override: Pin(costmodel.PAT, costmodel.Simple)}
			comms, err := NewInProcess(n, cfg)
			require.NoError(t, err)
			defer closeAll(comms)
			const large = 8000
			big, one := make([][]byte, n), make([][]byte, n)
			for r := range big {
				big[r], one[r] = make([]byte, n*large*4), make([]byte, large*4)
			}
			assertNoAllocationPerStep(t, comms, rankSteps, 5, 100, large, func(count int) {
				errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
					if coll == costmodel.AllGather {
						return c.AllGather(bg, one[r], big[r], count, kernels.Float32)
					}
					return c.ReduceScatter(bg, big[r], one[r], count, kernels.Float32, kernels.Sum)
				})
				for _, err := range errs {
					require.NoError(t, err)
				}
			})
		})
	}
}

// TestPATChunk: NCCL's PAT chunk (calcCollChunking): the Simple slot (4 MiB / 8 = 512 KiB by
// default), halved while chunk*nCh*32 (AllGather) or *16 (ReduceScatter) exceeds the model bytes,
// floor 64 KiB; the planner's chunk when it gives one, capped at the slot. Hand-derived:
//   - AllGather, 2 channels, 1 MiB: 512K*64 = 32M > 1M, 256K*64 = 16M, 128K*64 = 8M: all > 1M,
//     so 64 KiB (the floor stops the halving).
//   - AllGather, 2 channels, 64 MiB: 512K*64 = 32M <= 64M: 512 KiB.
//   - ReduceScatter, 2 channels, 8 MiB: 512K*32 = 16M > 8M; 256K*32 = 8M, not > 8M: 256 KiB.
//   - ReduceScatter, 2 channels, 16 MiB: 512K*32 = 16M, not > 16M: 512 KiB.
//   - AllGather, 1 channel, 3 MiB: 512K*32 = 16M > 3M, 256K*32 = 8M > 3M, 128K*32 = 4M > 3M,
//     64K: 64 KiB.
func TestPATChunk(t *testing.T) {
	const slot = 4 << 20 / 8
	cases := []struct {
		coll         costmodel.Coll
		nCh          int
		nBytes, want int64
		planned      int64
	}{
		{costmodel.AllGather, 2, 1 << 20, 64 << 10, 0},
		{costmodel.AllGather, 2, 64 << 20, 512 << 10, 0},
		{costmodel.ReduceScatter, 2, 8 << 20, 256 << 10, 0},
		{costmodel.ReduceScatter, 2, 16 << 20, 512 << 10, 0},
		{costmodel.AllGather, 1, 3 << 20, 64 << 10, 0},
		{costmodel.AllGather, 1, 3 << 20, 128 << 10, 128 << 10}, // the planner's
		{costmodel.AllGather, 1, 3 << 20, 512 << 10, 1 << 20},   // capped at the slot
	}
	for _, k := range cases {
		assert.Equal(t, k.want, patChunk(k.coll, k.nBytes, slot, k.planned, k.nCh, 4), "%+v", k)
	}
	// Through a communicator with NCCL's buffers: the plan as run (chunk = step) for 2 ranks of
	// 256 Ki float32 each (2 MiB model bytes, AllGather on 2 channels: 512K*64 > 2M, 256K*64 > 2M,
	// 128K*64 = 8M > 2M, so 64 KiB).
	const n, count = 2, 256 << 10
	cfg := Config{RanksPerNode: 1, Override: Pin(costmodel.PAT, costmodel.Simple)}
	cfg.Override.Channels = 2
	comms, err := NewInProcess(n, cfg)
	require.NoError(t, err)
	defer closeAll(comms)
	errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		return c.AllGather(bg, make([]byte, count*4), make([]byte, n*count*4), count, kernels.Float32)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	got := comms[0].LastPlan()
	assert.Equal(t, costmodel.PAT, got.Algo)
	assert.Equal(t, int64(64<<10), got.ChunkBytes)
	assert.Equal(t, int64(64<<10), got.SliceBytes)
}

// TestPATShm: PAT over the shared-memory transport (each rank its own ShmTransport over the same
// job's files, as in separate processes), ReduceScatter then AllGather on 5 ranks, checked against
// closed forms (checkRSAG).
func TestPATShm(t *testing.T) {
	const n, count = 5, 300
	job := newJob(t)
	comms := make([]*Comm, n)
	for r := range comms {
		tr, err := shm.NewShmTransport(job)
		require.NoError(t, err)
		cfg := Config{Buffers: tinyBuffers(), RanksPerNode: 1, Override: Pin(costmodel.PAT, costmodel.Simple)}
		cfg.Override.Channels = 2
		comms[r], err = New(r, n, tr, cfg)
		require.NoError(t, err)
	}
	defer closeAll(comms)
	checkRSAG(t, comms, count, nil)
	for r := 0; r < n; r++ {
		assert.Equal(t, costmodel.PAT, comms[r].LastPlan().Algo)
	}
}

// checkRSAG runs a ReduceScatter then an AllGather of count int32 elements per rank on comms and
// checks them against closed forms: rank r's ReduceScatter input element j is 7r + j, so element
// i of rank r's result is the sum over q of (7q + r*count + i) = 7*n(n-1)/2 + n*(r*count + i);
// AllGather's block of rank p holds 1000p + i. before, when set, runs first on every rank.
func checkRSAG(t *testing.T, comms []*Comm, count int, before func(c *Comm)) {
	t.Helper()
	n := len(comms)
	rs, ag := make([][]byte, n), make([][]byte, n)
	errs := runRanks(t, comms, 20*time.Second, func(r int, c *Comm) error {
		if before != nil {
			before(c)
		}
		in := make([]byte, 4*n*count)
		for j := 0; j < n*count; j++ {
			binary.LittleEndian.PutUint32(in[4*j:], uint32(7*r+j))
		}
		rs[r] = make([]byte, 4*count)
		if err := c.ReduceScatter(bg, in, rs[r], count, kernels.Int32, kernels.Sum); err != nil {
			return err
		}
		one := make([]byte, 4*count)
		for i := 0; i < count; i++ {
			binary.LittleEndian.PutUint32(one[4*i:], uint32(1000*r+i))
		}
		ag[r] = make([]byte, 4*n*count)
		return c.AllGather(bg, one, ag[r], count, kernels.Int32)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for r := 0; r < n; r++ {
		for i := 0; i < count; i++ {
			require.Equal(t, uint32(7*n*(n-1)/2+n*(r*count+i)), binary.LittleEndian.Uint32(rs[r][4*i:]), "rank %d element %d", r, i)
		}
		for p := 0; p < n; p++ {
			for i := 0; i < count; i++ {
				require.Equal(t, uint32(1000*p+i), binary.LittleEndian.Uint32(ag[r][4*(p*count+i):]), "rank %d block %d element %d", r, p, i)
			}
		}
	}
}

// TestPATPlanned: a plan that names PAT (Config.Plan, as a planner table does at one rank per
// node) runs with the planner's chunk, capped at the slot.
func TestPATPlanned(t *testing.T) {
	const n, count = 3, 100
	plan := func(costmodel.Coll, int64) planner.Decision {
		return planner.Decision{Algo: costmodel.PAT, Proto: costmodel.Simple, Channels: 1, ChunkBytes: 32, SliceBytes: 32}
	}
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers(), RanksPerNode: 1, Plan: plan})
	require.NoError(t, err)
	defer closeAll(comms)
	outs := make([][]byte, n)
	errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		in := make([]byte, 4*count)
		for i := 0; i < count; i++ {
			binary.LittleEndian.PutUint32(in[4*i:], uint32(1000*r+i))
		}
		outs[r] = make([]byte, 4*n*count)
		return c.AllGather(bg, in, outs[r], count, kernels.Int32)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for r := 0; r < n; r++ {
		for p := 0; p < n; p++ {
			for i := 0; i < count; i++ {
				require.Equal(t, uint32(1000*p+i), binary.LittleEndian.Uint32(outs[r][4*(p*count+i):]), "rank %d block %d element %d", r, p, i)
			}
		}
	}
	got := comms[0].LastPlan()
	assert.Equal(t, costmodel.PAT, got.Algo)
	assert.Equal(t, int64(32), got.ChunkBytes, "the planner's chunk, below the 64-byte slot")
	// 100 elements of 4 bytes in 32-byte chunks: 13 chunks, 2 transfers each (n-1) per rank.
	assert.Equal(t, uint64(13*2), comms[0].Stats()[0].Steps)
}

// TestPATSharesConnections: PAT and Ring calls alternate on one communicator. PAT's distance-1
// connections are ring connections too (AllGather's rank -> rank-1 is a backward ring's, odd
// channels; ReduceScatter's rank -> rank+1 a forward ring's), so both algorithms use the same
// FIFOs and counters in turn; every result is checked against closed forms (checkRSAG).
func TestPATSharesConnections(t *testing.T) {
	const n = 6
	comms, err := NewInProcess(n, Config{Buffers: tinyBuffers(), RanksPerNode: 1})
	require.NoError(t, err)
	defer closeAll(comms)
	run := func(algo costmodel.Algo, channels, count int) {
		t.Helper()
		ov := Pin(algo, costmodel.Simple)
		ov.Channels = channels
		checkRSAG(t, comms, count, func(c *Comm) { c.SetOverride(ov) })
	}
	for _, count := range []int{1, 37, 500} {
		for _, channels := range []int{2, 3} {
			run(costmodel.Ring, channels, count)
			run(costmodel.PAT, channels, count)
		}
	}
	run(costmodel.Ring, 1, 77)
	// Rank 0's connections, per channel (3): PAT AllGather sends to -1, -2, -4 = +2 and receives
	// from +1, +2, +4 = -2; ReduceScatter the reverse; so it sends to and receives from +-1 and +-2:
	// 8 endpoints. The ring's (to +1 and from -1, or backwards) are among them: 24 in all.
	assert.Len(t, comms[0].eps, 24)
}

// TestPATLargeN: PAT beyond the matrix's n <= 9, where the trees are 5 levels deep (n = 16, 17,
// 31: ReduceScatter keeps an accumulator per level), against closed forms (checkRSAG).
func TestPATLargeN(t *testing.T) {
	for _, n := range []int{16, 17, 31} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			const count = 45
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: 1, Override: Pin(costmodel.PAT, costmodel.Simple)}
			cfg.Override.Channels = 2
			comms, err := NewInProcess(n, cfg)
			require.NoError(t, err)
			defer closeAll(comms)
			checkRSAG(t, comms, count, nil)
		})
	}
}
