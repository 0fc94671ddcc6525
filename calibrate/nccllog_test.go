package calibrate

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/planner"
)

// TestCheckDecisions: a logged cell the planner does not pick is a disagreement; AllGather's
// per-rank bytes are multiplied by the ranks; lines that name no modelled collective are skipped.
func TestCheckDecisions(t *testing.T) {
	topo := loadTopo(t, "s1.toml")
	pl, err := planner.New(&topo, planner.Config{})
	require.NoError(t, err)
	ds := []Decision{
		{Line: 1, Coll: capabilities.AllReduce, CollKnown: true, CollName: "AllReduce", Bytes: 4096, Algo: capabilities.Tree, Proto: capabilities.LL, Format: Format224},
		{Line: 2, Coll: capabilities.AllGather, CollKnown: true, CollName: "AllGather", Bytes: 8192, Algo: capabilities.Ring, Proto: capabilities.LL, Format: Format223},
		{Line: 3, Bytes: 4096, Algo: capabilities.Ring, Proto: capabilities.LL, Format: Format220},
		{Line: 4, CollName: "SendRecv", Bytes: 4096, Algo: capabilities.Ring, Proto: capabilities.Simple, Format: Format223},
		{Line: 5, Coll: capabilities.AllReduce, CollKnown: true, CollName: "AllReduce", Bytes: 4096, Algo: capabilities.Tree, Proto: capabilities.LL, Format: Format224},
	}
	cs, err := CheckDecisions(context.Background(), pl, ds)
	require.NoError(t, err)
	require.Len(t, cs, 4)
	// §13 S1: 4096 -> RING/LL 15.05; AllGather 64 KiB total -> RING/LL 11.21.
	assert.False(t, cs[0].Agree)
	assert.Equal(t, 2, cs[0].Count)
	assert.Equal(t, Cell{capabilities.AllReduce, capabilities.Ring, capabilities.LL}, cs[0].Planned)
	assert.InDelta(t, 15.05, cs[0].PlannedUS, 0.006)
	assert.True(t, cs[1].Agree)
	assert.Equal(t, int64(65536), cs[1].NBytes)
	assert.InDelta(t, 11.21, cs[1].PlannedUS, 0.006)
	assert.Contains(t, cs[2].Skipped, "names no collective")
	assert.Contains(t, cs[3].Skipped, "SendRecv is not a collective the model prices")
}

// TestTopologyFileDefaults: a log with GRAPH lines only gets every other input from the documented
// defaults, each tagged "estimate"; what it does give is not.
func TestTopologyFileDefaults(t *testing.T) {
	path := filepath.Join("testdata", "graphs", "graph_2n8g_tagged.log")
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	lg, err := ParseNCCLLog(path, f)
	require.NoError(t, err)
	data, est, err := lg.TopologyFile()
	require.NoError(t, err)
	assert.Equal(t, []string{"comm_n_channels", "cpu_arch", "cpu_vendor", "cudart_version", "graphs.nvls.latency_inter",
		"graphs.ring.latency_inter", "graphs.tree.latency_inter", "max_comp_cap", "max_local_ranks", "min_comp_cap",
		"n_nodes", "n_ranks", "net_device_type", "nvls_channels", "nvs_count"}, est)
	topo, err := capabilities.DecodeTopology(path, data)
	require.NoError(t, err)
	// 16 ranks (GRAPH sources) on 2 hosts; ring and tree of 8 channels, so comm_n_channels = 2 x 8;
	// the NVLS graph's 8 channels; 16/2 local ranks.
	assert.Equal(t, [6]int{2, 16, 90, 16, 8, 8}, [6]int{topo.NNodes, topo.NRanks, topo.MinCompCap, topo.CommNChannels, topo.NVLSChannels, topo.MaxLocalRanks})
	assert.Equal(t, 1, topo.MaxTreePattern, "the tree graph's pattern")
	assert.Equal(t, 8, topo.Graphs.Ring.NChannels)
	assert.Equal(t, 18.0, topo.Graphs.Ring.BwIntra, "the minimum over ranks")
	assert.Equal(t, capabilities.PathPXB, topo.Graphs.Ring.TypeInter, "the maximum over ranks")
	assert.True(t, topo.NVLSSupport, "the NVLS graph has channels")
	assert.Contains(t, string(data), `cpu_arch = "x86"`)
}

func TestCompCapOf(t *testing.T) {
	for name, want := range map[string]int{"NVIDIA H100 80GB HBM3": 90, "NVIDIA H200": 90, "NVIDIA GH200 480GB": 90,
		"NVIDIA A100-SXM4-80GB": 80, "NVIDIA L40S": 89, "Tesla V100-SXM2-32GB": 70, "NVIDIA B200": 100,
		"NVIDIA A10": 86, "NVIDIA RTX 6000 Ada Generation": 89} {
		got, ok := CompCapOf(name)
		assert.True(t, ok, name)
		assert.Equal(t, want, got, name)
	}
	_, ok := CompCapOf("Radeon Instinct MI300X")
	assert.False(t, ok)
	_, ok = CompCapOf(strings.Repeat(" ", 3))
	assert.False(t, ok)
}
