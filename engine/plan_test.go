package engine

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// cpuTable compiles the planner's AllReduce decision table for the CPU node table on 4 nodes of 2
// ranks: Tree/LL at the smallest sizes, then Ring/LL on 1 and 2 channels, then Ring/Simple.
func cpuTable(t *testing.T, coll costmodel.Coll) *planner.DecisionTable {
	return cpuTableAt(t, coll, true)
}

// cpuTableAt compiles the cpu table's DecisionTable for coll at 4 nodes; without emulated, the
// table's [emulation] is dropped, so that only Ring, Tree and PAT are legal (the menu before the
// table declared its multicast switch).
func cpuTableAt(t *testing.T, coll costmodel.Coll, emulated bool) *planner.DecisionTable {
	node, err := tables.Load("cpu")
	require.NoError(t, err)
	require.NotNil(t, node.Emulation, "the cpu table declares what the engine emulates")
	if !emulated {
		node.Emulation = nil
	}
	topo, err := capabilities.FromNode(node, 4)
	require.NoError(t, err)
	pl, err := planner.New(&topo, planner.Config{})
	require.NoError(t, err)
	dt, err := pl.Compile(context.Background(), planner.Class{Coll: coll, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	require.NoError(t, err)
	return dt
}

// TestPlannerInTheLoop: a communicator given the planner's DecisionTable runs each call on the
// table's plan for its size (algorithm, protocol, channels; chunk and slice as the planner sized
// them, fitted to the connection buffers), and gets the right answer on every plan: every plan the
// table holds up to 1 MiB runs. With the table's emulated switch and network NVLS_TREE or CollNet
// is among them; without them, Tree/LL and Ring/Simple, and Ring/Simple's chunk at 4 MiB is NCCL's
// default.
func TestPlannerInTheLoop(t *testing.T) {
	for _, emulated := range []bool{false, true} {
		t.Run(fmt.Sprintf("emulated=%v", emulated), func(t *testing.T) { plannerInTheLoop(t, emulated) })
	}
}

func plannerInTheLoop(t *testing.T, emulated bool) {
	table := cpuTableAt(t, costmodel.AllReduce, emulated)
	const n = 8
	cfg := Config{RanksPerNode: 2, Tables: []*planner.DecisionTable{table}}
	if emulated { // the table picks CollNet too: the job needs its aggregation endpoint
		ep, err := collnet.ListenCollNet("127.0.0.1:0")
		require.NoError(t, err)
		defer ep.Close()
		cfg.CollNet.Addr = ep.Addr()
	}
	comms, err := NewInProcess(n, cfg)
	require.NoError(t, err)
	defer closeAll(comms)
	seen, inTable := map[planner.Decision]bool{}, map[planner.Decision]bool{}
	for _, e := range table.Entries() {
		if e.Lo > 1<<20 {
			break
		}
		for _, nBytes := range []int64{e.Lo, (e.Lo + min(e.Hi, 1<<20)) / 2} {
			count := int(nBytes / 4)
			if count == 0 {
				continue
			}
			want := table.Lookup(int64(count * 4))
			inTable[planner.Decision{Algo: want.Algo, Proto: want.Proto}] = true
			outs := make([][]byte, n)
			errs := runRanks(t, comms, 30*time.Second, func(r int, c *Comm) error {
				send := make([]byte, count*4)
				fillInput(send, kernels.Float32, kernels.Sum, 3, r, 0, count)
				outs[r] = make([]byte, count*4)
				return c.AllReduce(bg, send, outs[r], count, kernels.Float32, kernels.Sum)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d at %d bytes", r, count*4)
			}
			got := comms[0].LastPlan()
			assert.Equal(t, want.Algo, got.Algo, "%d bytes", count*4)
			assert.Equal(t, want.Proto, got.Proto, "%d bytes", count*4)
			assert.Equal(t, want.Channels, got.Channels, "%d bytes", count*4)
			assert.LessOrEqual(t, got.ChunkBytes, want.ChunkBytes, "%d bytes", count*4)
			seen[planner.Decision{Algo: got.Algo, Proto: got.Proto}] = true
			ins := make([][]byte, n)
			for r := range ins {
				ins[r] = make([]byte, count*4)
				fillInput(ins[r], kernels.Float32, kernels.Sum, 3, r, 0, count)
			}
			for i := 0; i < count; i++ {
				if err := checkElem(kernels.Float32, kernels.Sum, outs[n-1][i*4:], ins, i*4, nil); err != nil {
					t.Fatalf("%d bytes, element %d: %v", count*4, i, err)
				}
			}
		}
	}
	assert.Equal(t, inTable, seen, "every plan of the table up to 1 MiB ran")
	assert.True(t, seen[planner.Decision{Algo: costmodel.Tree, Proto: costmodel.LL}], "the table's Tree/LL plan ran")
	if emulated {
		assert.True(t, seen[planner.Decision{Algo: costmodel.NVLSTree, Proto: costmodel.Simple}] ||
			seen[planner.Decision{Algo: costmodel.CollNetChain, Proto: costmodel.Simple}] ||
			seen[planner.Decision{Algo: costmodel.CollNetDirect, Proto: costmodel.Simple}], "an emulated path of the table ran")
		return
	}
	assert.True(t, seen[planner.Decision{Algo: costmodel.Ring, Proto: costmodel.Simple}], "the table's Ring/Simple plan ran")

	// The NCCL defaults: Ring/Simple runs NCCL's 2 MiB chunk in 512 KiB steps.
	big := 1 << 20
	runRanks(t, comms, 30*time.Second, func(r int, c *Comm) error {
		b := make([]byte, big*4)
		return c.AllReduce(bg, b, b, big, kernels.Float32, kernels.Sum)
	})
	got := comms[0].LastPlan()
	got.Threads = 0 // the planner's, unused by the engine
	assert.Equal(t, planner.Decision{Algo: costmodel.Ring, Proto: costmodel.Simple, Channels: 2, ChunkBytes: 2 << 20, SliceBytes: 512 << 10}, got)
}

// TestOverridePins: an override pins the algorithm and protocol over the table's choice, with the
// engine's chunk for the pinned cell; a pinned channel count wins too.
func TestOverridePins(t *testing.T) {
	table := cpuTable(t, costmodel.AllReduce)
	cfg := Config{RanksPerNode: 2, Tables: []*planner.DecisionTable{table}, Override: Pin(costmodel.Tree, costmodel.LL128)}
	cfg.Override.Channels = 3
	comms, err := NewInProcess(4, cfg)
	require.NoError(t, err)
	defer closeAll(comms)
	count := 1 << 18
	errs := runRanks(t, comms, 30*time.Second, func(r int, c *Comm) error {
		b := make([]byte, count*4)
		return c.AllReduce(bg, b, b, count, kernels.Float32, kernels.Sum)
	})
	for _, err := range errs {
		require.NoError(t, err)
	}
	got := comms[0].LastPlan()
	assert.Equal(t, costmodel.Tree, got.Algo)
	assert.Equal(t, costmodel.LL128, got.Proto)
	assert.Equal(t, 3, got.Channels)
	// One LL128 slot's payload: 4915200/8/128*120.
	assert.Equal(t, int64(576000), got.ChunkBytes)
}

// TestNotImplemented: plans the engine cannot run are refused on every rank with
// ErrNotImplemented ("not implemented in the engine"), without a hang.
func TestNotImplemented(t *testing.T) {
	type tc struct {
		coll costmodel.Coll
		algo costmodel.Algo
	}
	// (CollNet runs since issue 13 item 3: TestCollNetInvalid has its refusals.)
	cases := []tc{{costmodel.AllGather, costmodel.Tree}, {costmodel.Broadcast, costmodel.Tree}}
	for _, k := range cases {
		t.Run(fmt.Sprintf("%v/%v", k.coll, k.algo), func(t *testing.T) {
			plan := func(costmodel.Coll, int64) planner.Decision {
				return planner.Decision{Algo: k.algo, Proto: costmodel.Simple, Channels: 2}
			}
			comms, err := NewInProcess(3, Config{Buffers: tinyBuffers(), Plan: plan})
			require.NoError(t, err)
			defer closeAll(comms)
			errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				if k.coll == costmodel.AllGather {
					return c.AllGather(bg, make([]byte, 40), make([]byte, 120), 10, kernels.Float32)
				}
				if k.coll == costmodel.Broadcast {
					b := make([]byte, 40)
					return c.Broadcast(bg, b, b, 10, kernels.Float32, 0)
				}
				b := make([]byte, 40)
				return c.AllReduce(bg, b, b, 10, kernels.Float32, kernels.Sum)
			})
			for r, err := range errs {
				require.ErrorIs(t, err, ErrNotImplemented, "rank %d", r)
				assert.Contains(t, err.Error(), "not implemented in the engine")
			}
			pinErr := PinError(k.coll, k.algo, costmodel.Simple, 3, 0, kernels.Float32, kernels.Sum)
			require.ErrorIs(t, pinErr, ErrNotImplemented)
			assert.Contains(t, errs[0].Error(), pinErr.Error(), "PinError and the call")
		})
	}
}

// TestPinErrorRuns: PinError is nil for the pins the engine runs (each such call is run by the
// matrix tests).
func TestPinErrorRuns(t *testing.T) {
	for _, tc := range []struct {
		coll   costmodel.Coll
		algo   costmodel.Algo
		n, rpn int
	}{
		{costmodel.AllReduce, costmodel.Ring, 3, 0}, {costmodel.Broadcast, costmodel.Ring, 2, 1},
		{costmodel.AllReduce, costmodel.Tree, 4, 2}, {costmodel.AllGather, costmodel.PAT, 5, 1},
		{costmodel.ReduceScatter, costmodel.NVLS, 4, 0}, {costmodel.AllReduce, costmodel.NVLSTree, 6, 3},
	} {
		assert.NoError(t, PinError(tc.coll, tc.algo, costmodel.Simple, tc.n, tc.rpn, kernels.Float32, kernels.Sum), "%+v", tc)
	}
	require.ErrorIs(t, PinError(costmodel.AllReduce, costmodel.Ring, costmodel.Simple, 0, 0, kernels.Float32, kernels.Sum), ErrInvalid, "0 ranks")
	require.ErrorIs(t, PinError(costmodel.AllReduce, costmodel.Ring, costmodel.Proto(7), 2, 0, kernels.Float32, kernels.Sum), ErrInvalid, "protocol 7")
}

// TestPlanFuncBytes: the PlanFunc sees NCCL's model byte count (x n for AllGather and
// ReduceScatter).
func TestPlanFuncBytes(t *testing.T) {
	var got [costmodel.NumColls]int64
	plan := func(c costmodel.Coll, nBytes int64) planner.Decision {
		got[c] = nBytes // every rank writes the same value; read after the calls
		return planner.Decision{Algo: costmodel.Ring, Proto: costmodel.LL, Channels: 1}
	}
	comms, err := NewInProcess(1, Config{Plan: plan})
	require.NoError(t, err)
	defer closeAll(comms)
	c := comms[0]
	b := make([]byte, 400)
	require.NoError(t, c.AllGather(bg, b[:40], b, 10, kernels.Float32))
	require.NoError(t, c.ReduceScatter(bg, b, b[:40], 10, kernels.Float32, kernels.Sum))
	require.NoError(t, c.AllReduce(bg, b, b, 10, kernels.Float64, kernels.Sum))
	assert.Equal(t, int64(40), got[costmodel.AllGather])
	assert.Equal(t, int64(40), got[costmodel.ReduceScatter])
	assert.Equal(t, int64(80), got[costmodel.AllReduce])
}

// TestPinAlgoSimpleOnly is the regression test of a pinned algorithm that NCCL runs with Simple
// only, under a plan that chose LL: it runs with Simple, as NCCL_ALGO does (NCCL's LL and LL128
// cells of NVLS, NVLS_TREE, CollNet and PAT have no bandwidth, so the tuner picks Simple). Before,
// the plan's LL was kept and every rank refused the call with ErrInvalid ("NVLS with LL").
func TestPinAlgoSimpleOnly(t *testing.T) {
	for _, tc := range []struct {
		algo   costmodel.Algo
		coll   costmodel.Coll
		n, rpn int
	}{
		{costmodel.NVLS, costmodel.AllReduce, 2, 0},
		{costmodel.NVLSTree, costmodel.AllReduce, 4, 2},
		{costmodel.PAT, costmodel.AllGather, 3, 1},
		{costmodel.CollNetChain, costmodel.AllReduce, 4, 2},
		{costmodel.CollNetDirect, costmodel.AllReduce, 4, 2},
	} {
		t.Run(tc.algo.String(), func(t *testing.T) {
			plan := func(costmodel.Coll, int64) planner.Decision {
				return planner.Decision{Algo: costmodel.Ring, Proto: costmodel.LL, Channels: 1}
			}
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: tc.rpn, Plan: plan, Override: Override{Algo: tc.algo, PinAlgo: true}}
			cfg.CollNet.Addr = testCollNetAddr(t)
			comms, err := NewInProcess(tc.n, cfg)
			require.NoError(t, err)
			defer closeAll(comms)
			const count = 10
			errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
				if tc.coll == costmodel.AllGather {
					return c.AllGather(bg, make([]byte, 4*count), make([]byte, 4*count*tc.n), count, kernels.Float32)
				}
				b := make([]byte, 4*count)
				return c.AllReduce(bg, b, b, count, kernels.Float32, kernels.Sum)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			got := comms[0].LastPlan()
			assert.Equal(t, tc.algo, got.Algo)
			assert.Equal(t, costmodel.Simple, got.Proto)
		})
	}
}

// TestTableOfAnotherClass is the regression test of a call whose class (op, dtype) has no table of
// its own, planned from its collective's table for another class whose pick the call cannot run:
// collbench's bookkeeping AllReduce (the slowest rank's time, float64 max) on a table for float32
// sum that picks NVLS (the shipped cpu overlay's pick at 1 x 2 for small calls; here NCCL_ALGO=NVLS
// makes it the only pick). NVLS does not reduce float64 max (NCCL's nvlsSupport), so every rank
// refused the call with ErrInvalid. Now the call runs on the engine's default, Ring/Simple, and a
// call whose pick it can run still takes the table's: float64 sum runs NVLS.
func TestTableOfAnotherClass(t *testing.T) {
	node, err := tables.Load("cpu")
	require.NoError(t, err)
	node.Node.GPUsPerNode = 2
	topo, err := capabilities.FromNode(node, 1)
	require.NoError(t, err)
	topo.Env.Algo = capabilities.Setting{Value: "NVLS", Source: capabilities.SourceFlag}
	pl, err := planner.New(&topo, planner.Config{})
	require.NoError(t, err)
	table, err := pl.Compile(bg, planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	require.NoError(t, err)
	require.Equal(t, costmodel.NVLS, table.Lookup(8).Algo, "precondition: the table picks NVLS")

	comms, err := NewInProcess(2, Config{Tables: []*planner.DecisionTable{table}})
	require.NoError(t, err)
	defer closeAll(comms)
	for _, tc := range []struct {
		op   kernels.Op
		want costmodel.Algo
	}{{kernels.Max, costmodel.Ring}, {kernels.Sum, costmodel.NVLS}} {
		outs := make([][]byte, 2)
		errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
			outs[r] = make([]byte, 8)
			binary.LittleEndian.PutUint64(outs[r], math.Float64bits(float64(r+2)))
			return c.AllReduce(bg, outs[r], outs[r], 1, kernels.Float64, tc.op)
		})
		for r, err := range errs {
			require.NoError(t, err, "%v: rank %d", tc.op, r)
		}
		want := 3.0 // max(2, 3)
		if tc.op == kernels.Sum {
			want = 5 // 2 + 3
		}
		for r := range outs {
			assert.Equal(t, want, math.Float64frombits(binary.LittleEndian.Uint64(outs[r])), "%v: rank %d", tc.op, r)
		}
		assert.Equal(t, tc.want, comms[0].LastPlan().Algo, "%v", tc.op)
	}
}
