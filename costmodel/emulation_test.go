package costmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
)

// emulated is one node of 2 CPU ranks at compute capability 60 with an emulated multicast switch:
// an nvls graph of 2 channels of 2.0 GB/s (PHB), a ring of 1 channel of 4.0.
func emulated(e float64) capabilities.Topology {
	return capabilities.Topology{
		NNodes: 1, NRanks: 2, MinCompCap: 60, MaxCompCap: 60,
		CPUArch: capabilities.ArchX86, CPUVendor: capabilities.VendorIntel,
		NVLSSupport: true, MaxTreePattern: 1, NetDeviceType: capabilities.NetHost,
		CommNChannels: 1, NVLSChannels: 1, MaxLocalRanks: 2, LocalRanks: 2, CUDARTVersion: 12080,
		Graphs: capabilities.Graphs{
			Tree: graph(1, 4, 4, capabilities.PathPHB),
			Ring: graph(1, 4, 4, capabilities.PathPHB),
			NVLS: graph(2, 2, 2, capabilities.PathPHB),
		},
		Emulated: capabilities.Emulation{MulticastSwitch: true, NVLSEfficiency: e},
	}
}

// TestEmulatedNVLSEfficiency: an emulated switch's nvls_efficiency replaces nvlsEfficiency[0] = 0
// (compute capability 60), which prices NVLS at bandwidth 0. By hand, e = 0.8 on 2 ranks: per
// channel 2.0 x 0.8 x (2-1)/2 = 0.8 GB/s; AllReduce doubles it (1.6 < bw_inter 2.0), busBw = 2 x 1.6
// = 3.2 and algBw = 3.2 x 2/(2(2-1)) = 3.2; AllGather takes (ppn-1)/ppn = 1/2 of 0.8, busBw 2 x 0.4
// = 0.8, with no busBw->algBw ratio for a non-ring AllGather: 0.8. The latency is hwLat[PCI][NVLS]
// [Simple], NCCL's 0. Ring is untouched: 1 x 4.0 x 2/2 = 4.0 either way.
func TestEmulatedNVLSEfficiency(t *testing.T) {
	none := emulated(0)
	tb, err := mustBuild(&none)
	require.NoError(t, err)
	assert.Zero(t, tb.BW[AllReduce][NVLS][Simple])
	assert.Contains(t, tb.Reason[AllReduce][NVLS][Simple], "bandwidth 0")

	topo := emulated(0.8)
	tb2, err := mustBuild(&topo)
	require.NoError(t, err)
	assert.InDelta(t, 3.2, tb2.BW[AllReduce][NVLS][Simple], 1e-6)
	assert.InDelta(t, 0.8, tb2.BW[AllGather][NVLS][Simple], 1e-6)
	assert.InDelta(t, 0.8, tb2.BW[ReduceScatter][NVLS][Simple], 1e-6)
	assert.Zero(t, tb2.Lat[AllReduce][NVLS][Simple])
	assert.Empty(t, tb2.Reason[AllReduce][NVLS][Simple])
	assert.InDelta(t, 4.0, tb2.BW[AllReduce][Ring][Simple], 1e-6)
	assert.Equal(t, tb.BW[AllReduce][Ring], tb2.BW[AllReduce][Ring])
	assert.Equal(t, tb.Lat[AllReduce][Ring], tb2.Lat[AllReduce][Ring])

	for _, bad := range []float64{-0.1, 1.5} {
		topo := emulated(bad)
		_, err := mustBuild(&topo)
		assert.ErrorContains(t, err, "emulated.nvls_efficiency: must be 0 < e <= 1", "%v", bad)
	}
}
