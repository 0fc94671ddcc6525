package costmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/tables"
)

func TestConstantsApply(t *testing.T) {
	k := DefaultConstants()
	require.NoError(t, k.Apply(nil))
	require.NoError(t, k.Apply(&tables.Constants{
		BaseLatencies: map[string][]float64{"ring": {1, 2, 3}},
		HWLatencies:   map[string]map[string][]float64{"net": {"nvls": {0, 0, 24}}},
		LLMaxBws:      [][]float64{{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}},
	}))
	assert.Equal(t, [NumProtos]float64{1, 2, 3}, k.BaseLat[Ring])
	assert.Equal(t, 6.8, k.BaseLat[Tree][LL], "untouched rows keep NCCL's value")
	assert.Equal(t, 24.0, k.HWLat[HWNet][NVLS][Simple])
	assert.Equal(t, [3]float64{10, 11, 12}, k.LLMaxBws[3])
	assert.Equal(t, 36.7, k.PerChMaxRingLL128Bws[2][0])

	for _, tc := range []struct {
		c    tables.Constants
		want string
	}{
		{tables.Constants{BaseLatencies: map[string][]float64{"mesh": {1, 2, 3}}}, "base_latencies.mesh"},
		{tables.Constants{BaseLatencies: map[string][]float64{"tree": {1, 2}}}, "base_latencies.tree"},
		{tables.Constants{HWLatencies: map[string]map[string][]float64{"usb": {}}}, "hw_latencies.usb"},
		{tables.Constants{HWLatencies: map[string]map[string][]float64{"pci": {"mesh": {1, 2, 3}}}}, "hw_latencies.pci.mesh"},
		{tables.Constants{HWLatencies: map[string]map[string][]float64{"pci": {"tree": {1}}}}, "hw_latencies.pci.tree"},
		{tables.Constants{PerChMaxTreeBws: [][]float64{{1, 2, 3}}}, "want 4 rows"},
		{tables.Constants{PerChMaxNVLSTreeBws: [][]float64{{1}, {1}, {1}, {1}}}, "per_ch_max_nvls_tree_bws[0]"},
	} {
		k := DefaultConstants()
		assert.ErrorContains(t, k.Apply(&tc.c), tc.want)
	}
}
