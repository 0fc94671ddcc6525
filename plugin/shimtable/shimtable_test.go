package shimtable

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

func compileH100(t testing.TB) *Table {
	t.Helper()
	n, err := tables.Load("h100")
	require.NoError(t, err)
	tb, err := Compile(context.Background(), Request{Node: n, Nodes: []int{1, 2, 4}, Constants: true})
	require.NoError(t, err)
	return tb
}

// TestLookupMatchesPlanner: for every block, collective and pipe-op count, at interval edges and at
// random sizes, the table's first plan is the planner's pick for that topology (float32 sum).
func TestLookupMatchesPlanner(t *testing.T) {
	tb := compileH100(t)
	require.Len(t, tb.Blocks, 6, "1, 2, 4 nodes x (8, 1) ranks per node")
	n, err := tables.Load("h100")
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(5, 6))
	for _, b := range tb.Blocks {
		tp, err := blockTopology(n, b.NNodes, b.NRanks/b.NNodes)
		require.NoError(t, err)
		pl, err := planner.New(&tp, planner.Config{})
		require.NoError(t, err)
		for c := 0; c < 5; c++ {
			for p := b.MinPipeOps; p <= b.MaxPipeOps; p++ {
				cls := planner.Class{Coll: costmodel.Coll(c), Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: p}
				pr, err := pl.Prepare(context.Background(), cls)
				require.NoError(t, err)
				sizes := []int64{0, 1, 4096, 1 << 20, 1 << 30}
				for _, s := range b.Classes[c][p-1].Starts {
					sizes = append(sizes, s, s+1, max(0, s-1))
				}
				for i := 0; i < 200; i++ {
					sizes = append(sizes, int64(math.Exp2(rng.Float64()*36)))
				}
				for _, s := range sizes {
					want, err := pr.Ranked(s, tb.K)
					require.NoError(t, err)
					got := tb.Lookup(b.NNodes, b.NRanks, c, p, s)
					require.Len(t, got, len(want), "%d nodes %d ranks coll %d pipe %d size %d", b.NNodes, b.NRanks, c, p, s)
					assert.Equal(t, int(want[0].Algo), got[0].Algo, "size %d", s)
					assert.Equal(t, int(want[0].Proto), got[0].Proto, "size %d", s)
					assert.Equal(t, want[0].ChunkBytes, got[0].Chunk, "size %d", s)
				}
			}
		}
	}
	assert.Nil(t, tb.Lookup(3, 24, 4, 1, 100), "no block")
	assert.Nil(t, tb.Lookup(1, 8, 4, 5, 100), "pipe ops outside the compiled range")
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	tb := compileH100(t)
	data, err := tb.Encode()
	require.NoError(t, err)
	back, err := Decode(data)
	require.NoError(t, err)
	assert.Equal(t, tb, back)
	assert.Equal(t, "h100", back.Name)
	require.NotNil(t, back.Constants)
	assert.Equal(t, 6.8, back.Constants[0], "baseLatencies[Tree][LL]")
	assert.Equal(t, 20.9, back.Constants[21+2*21+5*3+2], "hwLatencies[NET][NVLSTree][Simple]")
	assert.Equal(t, 80.0, back.Constants[NumConstants-1], "perChMaxNVLSTreeBws[3][2]")
	// The one-rank-per-node blocks have no NVLink domain wider than a GPU.
	for _, b := range back.Blocks {
		if b.NRanks == b.NNodes {
			assert.Equal(t, [3]int{b.NRanks, 1, 1}, [3]int{b.NVLDomains, b.MinRanksPerNVL, b.MaxRanksPerNVL})
		} else {
			assert.Equal(t, [3]int{b.NNodes, 8, 8}, [3]int{b.NVLDomains, b.MinRanksPerNVL, b.MaxRanksPerNVL})
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	tb := compileH100(t)
	good, err := tb.Encode()
	require.NoError(t, err)
	mut := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	reseal := func(b []byte) []byte { binary.LittleEndian.PutUint64(b[24:], Checksum(b)); return b }
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "truncated"},
		{"short", good[:40], "truncated"},
		{"cut", good[:len(good)-8], "header says"},
		{"magic", mut(func(b []byte) []byte { b[0] = 'X'; return b }), "bad magic"},
		{"version", mut(func(b []byte) []byte { b[8] = 2; return b }), "version 2"},
		{"checksum", mut(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }), "checksum"},
		{"csv", []byte("# NCCL tuner config\nallreduce,0,65536,tree,simple,2,1,-1,-1,1\n"), "NCCL example-tuner CSV"},
		{"block overrun", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[32:], 1<<20); return reseal(b) }), "overrun"},
		{"bad K", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[36:], 9); return reseal(b) }), "K 9"},
		{"class offset", mut(func(b []byte) []byte { binary.LittleEndian.PutUint32(b[64+16:], uint32(len(b))); return reseal(b) }), "class directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.data)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestCompileErrors(t *testing.T) {
	n, err := tables.Load("h100")
	require.NoError(t, err)
	ctx := context.Background()
	for _, req := range []Request{
		{},
		{Node: n, K: 9},
		{Node: n, MaxPipeOps: 65},
		{Node: n, RanksPerNode: []int{9}},
		{Node: n, Nodes: []int{1, 1}},
	} {
		_, err := Compile(ctx, req)
		assert.Error(t, err, "%+v", req)
	}
	tp, err := capabilities.FromNode(n, 2)
	require.NoError(t, err)
	tb, err := Compile(ctx, Request{Topology: &tp, MaxPipeOps: 1, K: 2})
	require.NoError(t, err)
	require.Len(t, tb.Blocks, 1)
	assert.Equal(t, "topology", tb.Name)
	assert.Nil(t, tb.Constants)
}

func BenchmarkCompileH100Grid(b *testing.B) {
	n, err := tables.Load("h100")
	require.NoError(b, err)
	for i := 0; i < b.N; i++ {
		if _, err := Compile(context.Background(), Request{Node: n}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCompileOverlayEveryShape: a node table with a fitted overlay compiles every block of its
// default grid; in a block whose shape makes the fitted cells illegal (one rank: no model) they
// are skipped and listed, not an error (it failed with "1 nodes x 1 ranks: ... override of
// Broadcast/RING/LL: the cell is not usable").
func TestCompileOverlayEveryShape(t *testing.T) {
	n, err := tables.Load("cpu")
	require.NoError(t, err)
	require.NotNil(t, n.Fit)
	fitted, oneNode := 0, 0 // the overlay's cells at 1 x 2 and at one node, from the table
	for _, c := range n.Fit.Cell {
		if c.Nodes == 1 {
			oneNode++
			if c.RanksPerNode == 2 {
				fitted++
			}
		}
	}
	require.Positive(t, fitted)
	require.Greater(t, oneNode, fitted, "the overlay has cells of another one-node shape (1 x 4)")
	tb, err := Compile(context.Background(), Request{Node: n})
	require.NoError(t, err)
	require.Len(t, tb.Blocks, 2*len(DefaultNodes()), "(2, 1) ranks per node x 1..1024 nodes")
	got := map[[2]int]BlockOverlay{}
	for _, b := range tb.Overlays {
		got[[2]int{b.NNodes, b.NRanks}] = b
		assert.Equal(t, "cpu.fit.toml", b.Overlay.File)
	}
	require.Len(t, got, len(tb.Blocks), "every block's planner had the overlay")
	assert.Equal(t, fitted, got[[2]int{1, 2}].Overlay.Applied, "2 ranks on one node: every fitted cell applies")
	assert.Empty(t, got[[2]int{1, 2}].Overlay.Skipped)
	one := got[[2]int{1, 1}].Overlay
	assert.Zero(t, one.Applied)
	require.Len(t, one.Skipped, oneNode, "one rank: no cell applies (none was fitted at 1 x 1: every one-node cell is named)")
	for _, s := range one.Skipped {
		assert.Equal(t, "single rank: NCCL builds no model (n_ranks = 1)", s.Reason)
	}
	assert.Equal(t, planner.Overlay{File: "cpu.fit.toml"}, got[[2]int{1024, 2048}].Overlay, "1024 nodes: no cell fitted there")
	// 2 nodes of 2: the cells fitted at that shape apply; those fitted at 2 x 1 are skipped, named.
	at2x2 := 0
	for _, c := range n.Fit.Cell {
		if c.Nodes == 2 && c.RanksPerNode == 2 {
			at2x2++
		}
	}
	two := got[[2]int{2, 4}].Overlay
	assert.Equal(t, at2x2, two.Applied, "2 x 2: the cells fitted there apply")
	for _, s := range two.Skipped {
		assert.Contains(t, []string{"fitted at 2 x 1 (nodes x ranks per node), this is 2 x 2", "PAT auto: needs one rank per node"}, s.Reason)
	}
	// Lookups in the one-rank block give NCCL's only plan there, Ring/Simple.
	plans := tb.Lookup(1, 1, int(costmodel.AllReduce), 1, 1<<20)
	require.NotEmpty(t, plans)
	assert.Equal(t, [2]int{int(costmodel.Ring), int(costmodel.Simple)}, [2]int{plans[0].Algo, plans[0].Proto})
}
