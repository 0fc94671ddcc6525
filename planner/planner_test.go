package planner

import (
	"bufio"
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
)

// topo loads one of the §13 topology files kept with the capabilities package.
func topo(t testing.TB, name string) *capabilities.Topology {
	t.Helper()
	tp, err := capabilities.LoadTopology("../capabilities/testdata/topology/" + name + ".toml")
	require.NoError(t, err)
	return &tp
}

func newPlanner(t testing.TB, tp *capabilities.Topology, tuner Tuner) *Planner {
	t.Helper()
	pl, err := New(tp, Config{Tuner: tuner})
	require.NoError(t, err)
	return pl
}

func class(c costmodel.Coll) Class {
	return Class{Coll: c, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
}

// TestPicksS13 reproduces every pick of reference §13: algorithm, protocol, time to 0.01 us,
// nMaxChannels and nWarps.
func TestPicksS13(t *testing.T) {
	f, err := os.Open("testdata/picks.txt")
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fs := strings.Fields(line)
		require.Len(t, fs, 8, line)
		c, err := capabilities.ParseColl(fs[1])
		require.NoError(t, err)
		size, _ := strconv.ParseInt(fs[2], 10, 64)
		want, _ := strconv.ParseFloat(fs[5], 64)
		ch, _ := strconv.Atoi(fs[6])
		warps, _ := strconv.Atoi(fs[7])
		pl := newPlanner(t, topo(t, fs[0]), nil)
		p, err := pl.Explain(context.Background(), class(c), size)
		require.NoError(t, err, line)
		assert.Equal(t, fs[3], p.Algo.String(), line)
		assert.Equal(t, fs[4], p.Proto.String(), line)
		assert.InDelta(t, want, p.TimeUS, 0.005, line)
		assert.Equal(t, ch, p.Channels, line)
		assert.Equal(t, warps, p.Threads/32, line)
		n++
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, 24, n)
}

// TestChunkDefaults checks §10's defaults: Ring/Simple AllReduce 2 MiB chunk / 1 MiB slice, LL
// 32 KiB, LL128 576000 B (one 64 MiB call on S1 with NCCL_ALGO/NCCL_PROTO pinning each cell).
func TestChunkDefaults(t *testing.T) {
	for _, tc := range []struct {
		algo, proto  string
		chunk, slice int64
	}{
		{"ring", "simple", 2 << 20, 1 << 20},
		{"ring", "ll", 32 << 10, 32 << 10},
		{"ring", "ll128", 576000, 576000},
		{"tree", "simple", 512 << 10, 512 << 10},
	} {
		tp := topo(t, "s1")
		tp.Env.Algo = capabilities.Setting{Value: tc.algo, Source: capabilities.SourceFlag}
		tp.Env.Proto = capabilities.Setting{Value: tc.proto, Source: capabilities.SourceFlag}
		p, err := newPlanner(t, tp, nil).Explain(context.Background(), class(costmodel.AllReduce), 64<<20)
		require.NoError(t, err)
		assert.Equal(t, tc.chunk, p.ChunkBytes, tc.algo+"/"+tc.proto)
		assert.Equal(t, tc.slice, p.SliceBytes, tc.algo+"/"+tc.proto)
	}
}

// TestNoAlgorithm: NCCL_ALGO=nvls on a machine without NVLS leaves nothing; the error says what
// NCCL says, naming the variable and its source.
func TestNoAlgorithm(t *testing.T) {
	tp := topo(t, "s3")
	tp.Env.Algo = capabilities.Setting{Value: "nvls", Source: capabilities.SourceTopology}
	_, err := newPlanner(t, tp, nil).Explain(context.Background(), class(costmodel.AllReduce), 1<<20)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no algorithm/protocol available for function AllReduce with datatype float32")
	assert.Contains(t, err.Error(), "NCCL_ALGO was set to nvls (topology)")
}

// TestSingleRank: only Ring/Simple at time 0.
func TestSingleRank(t *testing.T) {
	tp := topo(t, "s3")
	tp.NRanks, tp.MaxLocalRanks, tp.LocalRanks = 1, 1, 1
	p, err := newPlanner(t, tp, nil).Explain(context.Background(), class(costmodel.AllReduce), 1<<20)
	require.NoError(t, err)
	assert.Equal(t, costmodel.Ring, p.Algo)
	assert.Equal(t, costmodel.Simple, p.Proto)
	assert.Zero(t, p.TimeUS)
	assert.Equal(t, float32(-1), p.Explain.Cells[costmodel.Ring][costmodel.LL].TimeUS)
	assert.Contains(t, p.Explain.Cells[costmodel.Tree][costmodel.LL].Reason, "single rank")
}

// TestFP8 (hand-derived on S2, 1 GiB AllReduce): fp8 excludes NVLS (§9), and the deep-ring rule
// multiplies Ring by 1024, so Tree/Simple wins: 120.4 + 2^30/(1000*46.0) = 23462.65 us (bucket
// log2i(2^24) = 24 is past the correction table). The menu shows Ring/Simple's penalised cost:
// (282.8*1.4 + 2^30/51612.9) * 1024 = 21706913.
func TestFP8(t *testing.T) {
	cls := Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Fp8E4M3, PipeOps: 1}
	p, err := newPlanner(t, topo(t, "s2"), nil).Explain(context.Background(), cls, 1<<30)
	require.NoError(t, err)
	assert.Equal(t, "TREE/SIMPLE", p.Algo.String()+"/"+p.Proto.String())
	assert.InDelta(t, 120.4+float64(1<<30)/46000, p.TimeUS, 0.01)
	ring := (282.8*1.4 + float64(1<<30)/51612.903) * 1024
	assert.InDelta(t, ring, p.Explain.Cells[costmodel.Ring][costmodel.Simple].TimeUS, ring*1e-5)
	assert.Contains(t, p.Explain.Cells[costmodel.NVLSTree][costmodel.Simple].Reason, "NVLS does not reduce")
	// Not legal at all below sm_90.
	_, err = newPlanner(t, topo(t, "s3"), nil).Explain(context.Background(), cls, 1<<20)
	assert.ErrorContains(t, err, "no algorithm/protocol")
}

// TestPipeOpsPick (hand-derived on S1, 4 KiB AllReduce, 9 pipelined ops): Ring pays 9 latencies,
// the rest ceil(9/8) = 2, so Tree/LL wins: 15.2*2 + 4096/(1000*38.737*0.7) = 30.55 us, against Ring/LL
// 15.0*9 + 4096/80571 = 135.05 and NVLS 25*2 + 4096/182857 = 50.02.
func TestPipeOpsPick(t *testing.T) {
	cls := class(costmodel.AllReduce)
	cls.PipeOps = 9
	p, err := newPlanner(t, topo(t, "s1"), nil).Explain(context.Background(), cls, 4096)
	require.NoError(t, err)
	assert.Equal(t, "TREE/LL", p.Algo.String()+"/"+p.Proto.String())
	assert.InDelta(t, 30.551, p.TimeUS, 0.005)
}

func TestClassErrors(t *testing.T) {
	pl := newPlanner(t, topo(t, "s1"), nil)
	for _, cls := range []Class{
		{Coll: 9, PipeOps: 1}, {Coll: costmodel.AllReduce, Op: 99, PipeOps: 1},
		{Coll: costmodel.AllReduce, Dtype: 99, PipeOps: 1}, {Coll: costmodel.AllReduce},
	} {
		_, err := pl.Explain(context.Background(), cls, 1)
		assert.Error(t, err)
	}
	_, err := pl.Explain(context.Background(), class(costmodel.AllReduce), -1)
	assert.ErrorContains(t, err, "negative")
	_, err = New(topo(t, "s1"), Config{Buffers: Buffers{Simple: 100}})
	assert.ErrorContains(t, err, "simple buffer")
}

// fixedTuner answers with fixed intervals, or an error.
type fixedTuner struct {
	ivs   []Interval
	err   error
	calls int
}

func (f *fixedTuner) Name() string { return "fixed" }
func (f *fixedTuner) Tune(_ context.Context, _ *Request) ([]Interval, error) {
	f.calls++
	return f.ivs, f.err
}

func TestTunerEdits(t *testing.T) {
	ctx := context.Background()
	cls := class(costmodel.AllReduce)
	ringLL := Cell{costmodel.Ring, costmodel.LL}
	treeLL := Cell{costmodel.Tree, costmodel.LL}
	nvls := Cell{costmodel.NVLS, costmodel.Simple}
	for _, tc := range []struct {
		name     string
		edits    []Edit
		size     int64
		want     Cell
		channels int
		chunk    int64
	}{
		// S1 at 1 MiB picks Ring/LL (28.01) over NVLS (30.73).
		{"none", nil, 1 << 20, ringLL, 32, 32 << 10},
		{"force", []Edit{{Kind: Force, Cell: nvls}}, 1 << 20, nvls, 16, 32 << 10},
		{"disable", []Edit{{Kind: Disable, Cell: ringLL}}, 1 << 20, nvls, 16, 32 << 10},
		// +3 us on Ring/LL: 31.01 > NVLS 30.73.
		{"add", []Edit{{Kind: AddCost, Cell: ringLL, Value: 3}}, 1 << 20, nvls, 16, 32 << 10},
		{"scale", []Edit{{Kind: ScaleCost, Cell: nvls, Value: 0.5}}, 1 << 20, nvls, 16, 32 << 10},
		// Two forced cells tie at 0: the lower (algo, proto) wins, Tree before Ring.
		{"tie", []Edit{{Kind: Force, Cell: ringLL}, {Kind: Force, Cell: treeLL}}, 1 << 20, treeLL, 32, 32 << 10},
		{"channels", []Edit{{Kind: Channels, Value: 7}}, 1 << 20, ringLL, 7, 32 << 10},
		// A tuner chunk is rounded down to the LL grain (16) and clamped to the 32 KiB ceiling.
		{"chunk", []Edit{{Kind: Chunk, Value: 5000}}, 1 << 20, ringLL, 32, 4992},
		{"chunk clamp", []Edit{{Kind: Chunk, Value: 1 << 20}}, 1 << 20, ringLL, 32, 32 << 10},
		// Outside the interval nothing changes.
		{"outside", []Edit{{Kind: Force, Cell: nvls}}, 1 << 30, nvls, 16, 128 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tu := &fixedTuner{ivs: []Interval{{Lo: 1 << 20, Hi: 2 << 20, Edits: tc.edits}}}
			pl := newPlanner(t, topo(t, "s1"), tu)
			p, err := pl.Explain(ctx, cls, tc.size)
			require.NoError(t, err)
			assert.Equal(t, tc.want, Cell{p.Algo, p.Proto})
			assert.Equal(t, tc.channels, p.Channels)
			assert.Equal(t, tc.chunk, p.ChunkBytes)
			assert.Empty(t, p.Explain.TunerNote)
			assert.Equal(t, "fixed", p.Explain.Tuner)
			assert.Equal(t, 1, tu.calls)
		})
	}
}

// TestTunerFallback: errors and invalid answers fall back to the built-in policy and say why.
func TestTunerFallback(t *testing.T) {
	collnet := Cell{costmodel.CollNetDirect, costmodel.Simple}
	for _, tc := range []struct {
		name string
		tu   *fixedTuner
		want string
	}{
		{"error", &fixedTuner{err: errors.New("plugin crashed")}, "plugin crashed"},
		{"revive illegal", &fixedTuner{ivs: []Interval{{Lo: 0, Hi: 10, Edits: []Edit{{Kind: Force, Cell: collnet}}}}}, "cannot enable"},
		{"nan", &fixedTuner{ivs: []Interval{{Lo: 0, Hi: 10, Edits: []Edit{{Kind: AddCost, Cell: Cell{costmodel.Ring, costmodel.LL}, Value: nan()}}}}}, "not finite"},
		{"overlap", &fixedTuner{ivs: []Interval{{Lo: 0, Hi: 10}, {Lo: 5, Hi: 20}}}, "overlaps"},
		{"empty", &fixedTuner{ivs: []Interval{{Lo: 10, Hi: 10}}}, "empty"},
		{"channels", &fixedTuner{ivs: []Interval{{Lo: 0, Hi: 10, Edits: []Edit{{Kind: Channels, Value: 65}}}}}, "channels"},
		{"chunk", &fixedTuner{ivs: []Interval{{Lo: 0, Hi: 10, Edits: []Edit{{Kind: Chunk, Value: 1.5}}}}}, "chunk"},
		{"kind", &fixedTuner{ivs: []Interval{{Lo: 0, Hi: 10, Edits: []Edit{{Kind: 42}}}}}, "unknown edit kind"},
		{"cell", &fixedTuner{ivs: []Interval{{Lo: 0, Hi: 10, Edits: []Edit{{Kind: Force, Cell: Cell{9, 0}}}}}}, "out of range"},
		{"scale", &fixedTuner{ivs: []Interval{{Lo: 0, Hi: 10, Edits: []Edit{{Kind: ScaleCost, Cell: Cell{costmodel.Ring, costmodel.LL}, Value: -2}}}}}, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := newPlanner(t, topo(t, "s1"), tc.tu).Explain(context.Background(), class(costmodel.AllReduce), 8)
			require.NoError(t, err)
			assert.Equal(t, "RING/LL", p.Algo.String()+"/"+p.Proto.String())
			assert.Contains(t, p.Explain.TunerNote, "using the built-in policy")
			assert.Contains(t, p.Explain.TunerNote, tc.want)
			assert.Empty(t, p.Explain.Edits)
		})
	}
}

func nan() float64 {
	var z float64
	return z / z
}
