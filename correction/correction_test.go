package correction

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/tables"
)

func TestBucket(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want int
	}{{0, -1}, {63, -1}, {64, 0}, {127, 0}, {128, 1}, {4096, 6}, {1 << 20, 14}, {512 << 20, 23}, {1 << 30, 24}} {
		assert.Equal(t, tc.want, Bucket(tc.n), tc.n)
	}
	assert.Equal(t, int64(64), BucketStart(0))
	assert.Equal(t, int64(512<<20), BucketStart(23))
}

// TestDefault checks reference §6's table where it is applied: Tree AllReduce for buckets 0..22
// only, NVLSTree AllReduce on cc >= 100 x86 for 0..23, nothing else.
func TestDefault(t *testing.T) {
	hopper := capabilities.Topology{MinCompCap: 90, CPUArch: capabilities.ArchX86}
	f := Default(&hopper)
	ar, tree := costmodel.AllReduce, costmodel.Tree
	assert.Equal(t, float32(1.0), f.Factor(ar, tree, costmodel.LL, 63), "below 64 B")
	assert.Equal(t, float32(0.9), f.Factor(ar, tree, costmodel.LL, 1024))        // LL bucket 4
	assert.Equal(t, float32(0.6), f.Factor(ar, tree, costmodel.LL128, 1<<20))    // LL128 bucket 14
	assert.Equal(t, float32(0.9), f.Factor(ar, tree, costmodel.Simple, 64))      // Simple bucket 0
	assert.Equal(t, float32(0.7), f.Factor(ar, tree, costmodel.Simple, 16<<20))  // Simple bucket 18
	assert.Equal(t, float32(1.0), f.Factor(ar, tree, costmodel.Simple, 512<<20)) // bucket 23: Tree uncorrected
	assert.Equal(t, float32(1.0), f.Factor(ar, tree, costmodel.Simple, 1<<30))
	assert.Equal(t, float32(1.0), f.Factor(ar, costmodel.NVLSTree, costmodel.Simple, 1<<20), "Hopper NVLSTree")
	assert.Equal(t, float32(1.0), f.Factor(costmodel.AllGather, tree, costmodel.LL, 1024))
	assert.Equal(t, SourceNCCL, f.Source(ar, tree, costmodel.LL))
	assert.Equal(t, SourceNone, f.Source(ar, costmodel.Ring, costmodel.LL))

	bw := capabilities.Topology{MinCompCap: 100, CPUArch: capabilities.ArchX86}
	f = Default(&bw)
	assert.Equal(t, float32(0.5), f.Factor(ar, costmodel.NVLSTree, costmodel.Simple, 1<<20))
	assert.Equal(t, float32(0.9), f.Factor(ar, costmodel.NVLSTree, costmodel.Simple, 512<<20), "NVLSTree reads bucket 23")
	arm := capabilities.Topology{MinCompCap: 100, CPUArch: capabilities.ArchARM}
	assert.Equal(t, float32(1.0), Default(&arm).Factor(ar, costmodel.NVLSTree, costmodel.Simple, 1<<20))

	var none *Factors
	assert.Equal(t, float32(1), none.Factor(ar, tree, costmodel.LL, 1024))
	assert.Equal(t, SourceNone, none.Source(ar, tree, costmodel.LL))
}

func TestSetAndApply(t *testing.T) {
	var f Factors
	require.NoError(t, f.Set(costmodel.AllGather, costmodel.Ring, costmodel.Simple, []float64{0.5, 0.75}, SourceTable))
	assert.Equal(t, float32(0.5), f.Factor(costmodel.AllGather, costmodel.Ring, costmodel.Simple, 64))
	assert.Equal(t, float32(0.75), f.Factor(costmodel.AllGather, costmodel.Ring, costmodel.Simple, 200))
	assert.Equal(t, float32(1), f.Factor(costmodel.AllGather, costmodel.Ring, costmodel.Simple, 4096))
	assert.ErrorContains(t, f.Set(costmodel.AllGather, costmodel.Ring, costmodel.Simple, []float64{0}, SourceTable), "factor 0")
	assert.ErrorContains(t, f.Set(costmodel.AllGather, costmodel.Ring, costmodel.Simple, make([]float64, 25), SourceTable), "at most 24")

	n := &tables.Node{File: "x.toml", Corrections: &tables.Corrections{Cell: []tables.CorrectionCell{
		{Coll: "allreduce", Algo: "ring", Proto: "ll", Factors: []float64{2}},
	}}}
	require.NoError(t, f.Apply(n, 1, 8))
	assert.Equal(t, float32(2), f.Factor(costmodel.AllReduce, costmodel.Ring, costmodel.LL, 100))
	assert.Equal(t, SourceTable, f.Source(costmodel.AllReduce, costmodel.Ring, costmodel.LL))
	n.Corrections.Cell[0].Algo = "bogus"
	assert.ErrorContains(t, f.Apply(n, 1, 8), "x.toml: corrections.cell[0]")
	require.NoError(t, f.Apply(nil, 1, 8))
}

// TestApplyPerShape: a row with a shape applies at that shape only, over the cell's row without
// one, whichever comes first in the table; other shapes get the shape-less row.
func TestApplyPerShape(t *testing.T) {
	n := &tables.Node{File: "x.toml", Corrections: &tables.Corrections{Cell: []tables.CorrectionCell{
		{Coll: "allreduce", Algo: "nvls", Proto: "simple", Nodes: 1, RanksPerNode: 2, Factors: []float64{1, 0.5}},
		{Coll: "allreduce", Algo: "nvls", Proto: "simple", Factors: []float64{3}},
		{Coll: "allgather", Algo: "ring", Proto: "simple", Nodes: 2, RanksPerNode: 1, Factors: []float64{0.25}},
	}}}
	for _, tc := range []struct {
		nodes, rpn      int
		nvls64, nvls128 float32
		ag              float32
	}{
		{1, 2, 1, 0.5, 1}, // the 1 x 2 row replaces the shape-less one
		{1, 4, 3, 1, 1},   // no row of this shape: the shape-less row
		{2, 1, 3, 1, 0.25},
		{2, 2, 3, 1, 1},
	} {
		var f Factors
		require.NoError(t, f.Apply(n, tc.nodes, tc.rpn))
		assert.Equal(t, tc.nvls64, f.Factor(costmodel.AllReduce, costmodel.NVLS, costmodel.Simple, 64), "%+v", tc)
		assert.Equal(t, tc.nvls128, f.Factor(costmodel.AllReduce, costmodel.NVLS, costmodel.Simple, 128), "%+v", tc)
		assert.Equal(t, tc.ag, f.Factor(costmodel.AllGather, costmodel.Ring, costmodel.Simple, 64), "%+v", tc)
	}
}
