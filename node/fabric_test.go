package node

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/tables"
)

// TestFabricComposition: a fabric composed onto the h100 node table reaches the cost model at 2 and
// 16 nodes as reference/nccl-costmodel.md §2-§3 say, by hand from the fabric's numbers.
//
// testdata/latency-fabric.toml: 4 NICs of 100 Gb/s (one net device each: 12.5 GB/s), type PXB,
// latency_inter 7.5 us. h100's multi-node graphs: 8 channels, ring/tree bw_intra 20, NVLS bw_intra
// 40, type_intra NVL; cc 90, x86 Intel, 8 GPUs per node.
//
//	bw_inter (every graph) = min(bw_intra, 12.5 x 4 / max(4, 8)) = 6.25 GB/s
//
// Ring AllReduce Simple, 16 nodes (128 ranks, nsteps 254, nInter 2 x 15 = 30):
//
//	bw  = bwInter (nNodes > 2) = 6.25; busBw = 8 x 6.25 = 50; algBw = 50 x 128/254
//	lat = base 8.4 + (254-30) x max(hwLat[NVLINK][Ring][Simple] 3.4, netOvh 1.0 x 3)
//	      + 30 x (hwLat[NET][Ring][Simple] 14.0 + 7.5 + 7.5)  = 8.4 + 761.6 + 870 = 1640
//
// Ring AllReduce Simple, 2 nodes: bw = bwIntra (nNodes <= 2) = 20, busBw 160, algBw 160 x 16/30;
// lat = 8.4 + (30-2) x 3.4 + 2 x 29 = 161.6.
//
// NVLSTree AllReduce Simple, 2 nodes: intraBw = 40 x 0.85 x 7/8 x 2 = 59.5; interBw = 6.25 x 2
// (NVLSTree, nNodes <= 2) = 12.5; perChMaxNVLSTreeBw[cc90][N2] = 57.7; bw = 12.5, busBw = 100,
// algBw = 100 x 16/30. lat = 0 + hwLat[NVLINK][NVLSTree][Simple] 25
// + 2 x log2(2) x (hwLat[NET][NVLSTree][Simple] 20.9 + 15) = 25 + 71.8 = 96.8.
func TestFabricComposition(t *testing.T) {
	n, err := tables.LoadBase("h100")
	require.NoError(t, err)
	f, err := tables.LoadFabricFile("testdata/latency-fabric.toml")
	require.NoError(t, err)
	c, err := tables.WithFabric(n, f)
	require.NoError(t, err)

	type cell struct {
		algo    costmodel.Algo
		bw, lat float64
	}
	for _, tc := range []struct {
		nodes int
		cells []cell
	}{
		{16, []cell{{costmodel.Ring, 50.0 * 128 / 254, 8.4 + 224*3.4 + 30*(14.0+15)}}},
		{2, []cell{
			{costmodel.Ring, 160.0 * 16 / 30, 8.4 + 28*3.4 + 2*(14.0+15)},
			{costmodel.NVLSTree, 100.0 * 16 / 30, 25 + 2*(20.9+15)},
		}},
	} {
		tp, err := capabilities.FromNode(c, tc.nodes)
		require.NoError(t, err)
		assert.Equal(t, capabilities.PathPXB, tp.Graphs.Ring.TypeInter, "%d nodes", tc.nodes)
		assert.InDelta(t, 6.25, tp.Graphs.Ring.BwInter, 1e-12)
		assert.InDelta(t, 7.5, tp.Graphs.NVLS.LatencyInter, 1e-12)
		k := costmodel.DefaultConstants()
		tab, err := costmodel.Build(&tp, &k)
		require.NoError(t, err)
		for _, want := range tc.cells {
			got := tab.BW[costmodel.AllReduce][want.algo][costmodel.Simple]
			assert.InEpsilon(t, want.bw, float64(got), 1e-5, "%d nodes %v bw", tc.nodes, want.algo)
			lat := tab.Lat[costmodel.AllReduce][want.algo][costmodel.Simple]
			assert.InEpsilon(t, want.lat, float64(lat), 1e-5, "%d nodes %v lat", tc.nodes, want.algo)
		}
	}

	// One node: the fabric changes nothing.
	tp1, err := capabilities.FromNode(c, 1)
	require.NoError(t, err)
	base1, err := capabilities.FromNode(n, 1)
	require.NoError(t, err)
	assert.Equal(t, base1, tp1)
}

// TestFabricNetDeviceType: gcp-tcpx's unpack net device applies above one node only.
func TestFabricNetDeviceType(t *testing.T) {
	n, err := tables.LoadBase("h100")
	require.NoError(t, err)
	f, err := tables.LoadFabric("gcp-tcpx")
	require.NoError(t, err)
	c, err := tables.WithFabric(n, f)
	require.NoError(t, err)
	for nodes, want := range map[int]capabilities.NetDeviceType{1: capabilities.NetHost, 2: capabilities.NetUnpack, 16: capabilities.NetUnpack} {
		tp, err := capabilities.FromNode(c, nodes)
		require.NoError(t, err)
		assert.Equal(t, want, tp.NetDeviceType, "%d nodes", nodes)
	}
}
