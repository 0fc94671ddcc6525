package correction

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
)

// TestForRelease: reference §14 "treeCorrectionFactor". On cc 100 x86, NVLSTree AllReduce takes
// the table from 2.29 (Simple bucket 14, 1 MiB: 0.5) and is uncorrected before; Tree is corrected
// in every release (LL128 bucket 14: 0.6); a row a node table set survives.
func TestForRelease(t *testing.T) {
	bw := capabilities.Topology{MinCompCap: 100, CPUArch: capabilities.ArchX86}
	ar, nt := costmodel.AllReduce, costmodel.NVLSTree
	for _, tc := range []struct {
		rel  string
		want float32
		src  Source
	}{{"2.28.9", 1, SourceNone}, {"2.29", 0.5, SourceNCCL}, {"2.30", 0.5, SourceNCCL}} {
		r, err := costmodel.ParseRelease(tc.rel)
		require.NoError(t, err)
		f := Default(&bw).ForRelease(r)
		assert.Equal(t, tc.want, f.Factor(ar, nt, costmodel.Simple, 1<<20), tc.rel)
		assert.Equal(t, tc.src, f.Source(ar, nt, costmodel.Simple), tc.rel)
		assert.Equal(t, float32(0.6), f.Factor(ar, costmodel.Tree, costmodel.LL128, 1<<20), tc.rel)
	}
	r, err := costmodel.ParseRelease("2.28")
	require.NoError(t, err)
	f := Default(&bw)
	require.NoError(t, f.Set(ar, nt, costmodel.LL, []float64{0.25}, SourceTable))
	g := f.ForRelease(r)
	assert.Equal(t, float32(0.25), g.Factor(ar, nt, costmodel.LL, 64), "a table's row stays")
	assert.Equal(t, float32(0.5), f.Factor(ar, nt, costmodel.Simple, 1<<20), "the original is not changed")
	assert.Same(t, f, f.ForRelease(costmodel.Release{}))
}
