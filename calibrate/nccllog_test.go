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

// TestInitCompleteRanks: init.cc's "%s comm %p rank %d nranks %d cudaDev %d [nvmlDev %d] busId %lx
// commId 0x%llx - Init COMPLETE" (funcName ncclCommInitRank, ncclCommInitRankConfig, ...; no
// funcName before 2.19) states the communicator's ranks. A log without the "comm ... nRanks ...
// nNodes" line (NCCL_DEBUG_SUBSYS without INIT's topology lines, or an excerpt) still gives its
// ranks from it; the comm line, where there is one, wins.
func TestInitCompleteRanks(t *testing.T) {
	for _, tc := range []struct {
		name, log       string
		ranks, line     int
		commLine, nodes int
	}{
		{name: "2.27, ncclCommInitRank", ranks: 16, line: 2,
			log: "h:1:1 [0] NCCL INFO NCCL version 2.27.5+cuda12.9\n" +
				"h:1:1 [4] NCCL INFO ncclCommInitRank comm 0x5635705dda90 rank 4 nranks 16 cudaDev 4 nvmlDev 4 busId 9a000 commId 0x221dee7fa4558566 - Init COMPLETE\n" +
				"h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x55a0be47d620 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x221dee7fa4558566 - Init COMPLETE\n"},
		{name: "2.30, ncclCommInitRankConfig", ranks: 8, line: 1,
			log: "[1,0]<stdout>:[2025-06-11 10:02:03] h:51230:51290 [0] NCCL INFO ncclCommInitRankConfig comm 0x55d0c8a3e2a0 rank 0 nranks 8 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x9f3c2b1a7d6e5f40 - Init COMPLETE\n"},
		{name: "before 2.19, no funcName nor nvmlDev", ranks: 1, line: 1,
			log: "7b6059672f82:104:104 [0] NCCL INFO comm 0x564d4af51740 rank 0 nranks 1 cudaDev 0 busId 170 - Init COMPLETE\n"},
		{name: "the comm line wins", ranks: 16, line: 2, commLine: 1, nodes: 2,
			log: "h:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0\n" +
				"h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 commId 0x2 - Init COMPLETE\n"},
		{name: "a later communicator's is not the first's", ranks: 2, line: 1,
			log: "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x2 - Init COMPLETE\n" +
				"h:1:1 [0] NCCL INFO ncclCommSplit comm 0x3 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 18000 commId 0x4 - Init COMPLETE\n"},
		{name: "Init START is not the end of init", ranks: 0, line: 0,
			log: "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x2 - Init START\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg, err := ParseNCCLLog("x.log", strings.NewReader(tc.log))
			require.NoError(t, err)
			c := lg.Comm
			assert.Equal(t, [5]int{tc.ranks, tc.line, tc.commLine, tc.nodes, tc.ranks},
				[5]int{c.InitRanks, c.InitLine, c.CommLine, c.NNodes, max(c.NRanks, c.InitRanks)})
		})
	}

	// Without the comm line, a topology file's n_ranks is the Init COMPLETE line's, not the count of
	// GRAPH sources (here the 16 ranks of graph_2n8g_tagged.log's GRAPH lines, said to be 32).
	raw, err := os.ReadFile(filepath.Join("testdata", "graphs", "graph_2n8g_tagged.log"))
	require.NoError(t, err)
	log := string(raw) + "[1,0]<stdout>:gpu-a01:2200:2260 [0] NCCL INFO ncclCommInitRank comm 0x1 rank 0 nranks 32 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x2 - Init COMPLETE\n"
	lg, err := ParseNCCLLog("x.log", strings.NewReader(log))
	require.NoError(t, err)
	data, est, err := lg.TopologyFile()
	require.NoError(t, err)
	assert.NotContains(t, est, "n_ranks")
	assert.Contains(t, est, "n_nodes", "the Init COMPLETE line does not give the nodes")
	topo, err := capabilities.DecodeTopology("x.log", data)
	require.NoError(t, err)
	assert.Equal(t, [3]int{32, 2, 16}, [3]int{topo.NRanks, topo.NNodes, topo.MaxLocalRanks}, "32 ranks on the GRAPH lines' 2 hosts")
}
