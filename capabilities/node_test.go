package capabilities

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/tables"
)

// testNode is a hand-built H100-like node table whose scales hold the §13 S1 (one node) and S2
// (four nodes) graphs, and a made-up two-node scale.
func testNode() *tables.Node {
	g := func(nCh int, bwIntra, bwInter float64, typeIntra string, same bool) tables.Graph {
		return tables.Graph{NChannels: nCh, BwIntra: bwIntra, BwInter: bwInter, TypeIntra: typeIntra,
			TypeInter: "PIX", SameChannels: same}
	}
	return &tables.Node{
		Name: "h100",
		File: "h100.toml",
		Node: tables.NodeInfo{
			GPU: "H100", GPUsPerNode: 8, ComputeCapability: 90, CPUArch: "x86", CPUVendor: "intel",
			NVSCount: 4, NVLSSupport: true,
		},
		Scale: map[string]tables.Scale{
			"1": {CommNChannels: 32, NVLSChannels: 16, Graphs: map[string]tables.Graph{
				"tree": g(16, 20, 20, "NVL", true),
				"ring": g(16, 20, 20, "NVL", true),
				"nvls": g(8, 40, 40, "NVL", false),
			}},
			"2": {CommNChannels: 16, NVLSChannels: 16, Graphs: map[string]tables.Graph{
				"tree": g(8, 20, 12.5, "nvl", true),
				"ring": g(8, 20, 12.5, "nvl", true),
			}},
			"4": {CommNChannels: 16, NVLSChannels: 16, Graphs: map[string]tables.Graph{
				"tree": g(8, 20, 12.5, "NVL", true),
				"ring": g(8, 20, 12.5, "NVL", true),
				"nvls": g(8, 40, 25, "NVL", false),
			}},
		},
	}
}

func TestFromNodeScenarios(t *testing.T) {
	got, err := FromNode(testNode(), 1)
	require.NoError(t, err)
	assert.Equal(t, topoS1, got, "one node is §13 S1")

	got, err = FromNode(testNode(), 4)
	require.NoError(t, err)
	assert.Equal(t, topoS2, got, "four nodes are §13 S2")

	for _, nNodes := range []int{3, 5, 64} {
		got, err = FromNode(testNode(), nNodes)
		require.NoError(t, err)
		want := topoS2
		want.NNodes, want.NRanks = nNodes, 8*nNodes
		assert.Equal(t, want, got, "%d nodes read scale 4", nNodes)
	}

	got, err = FromNode(testNode(), 2)
	require.NoError(t, err)
	assert.Equal(t, 2, got.NNodes)
	assert.Equal(t, 16, got.NRanks)
	assert.Equal(t, sameChannelsGraph(8, 20, 12.5, PathNVL), got.Graphs.Ring, "two nodes read scale 2")
	assert.Equal(t, Graph{}, got.Graphs.NVLS, "an absent graph is all zeros")
}

func TestFromNodeFields(t *testing.T) {
	n := testNode()
	n.Node = tables.NodeInfo{
		GPUsPerNode: 4, ComputeCapability: 100, CPUArch: "arm", CPUVendor: "undefined",
		NVSCount: 2, NVLSSupport: true, NetDeviceType: "unpack", CUDARTVersion: 12090, MaxTreePattern: 2,
		CollNetEnable: true, CollNetChainSupport: true, CollNetHeadsNum: 3, CollNetDirectNHeads: 1,
		CollNetSupport: []string{"sum:float32", "min:int8"},
	}
	n.Scale["2"] = tables.Scale{CommNChannels: 8, Graphs: map[string]tables.Graph{
		"collnet_direct": {NChannels: 2, BwIntra: 10, BwInter: 5, TypeIntra: "", TypeInter: "NET", LatencyInter: 3},
		"collnet_chain":  {NChannels: 1},
	}}
	got, err := FromNode(n, 2)
	require.NoError(t, err)
	want := Topology{
		NNodes: 2, NRanks: 8, MinCompCap: 100, MaxCompCap: 100, CPUArch: ArchARM, CPUVendor: VendorUndefined,
		NVSCount: 2, CollNetEnable: true, CollNetChainSupport: true, CollNetHeadsNum: 3, CollNetDirectNHeads: 1,
		CollNetSupport: []OpDtype{{Sum, Float32}, {Min, Int8}},
		NVLSSupport:    true, MaxTreePattern: 2, NetDeviceType: NetUnpack, CommNChannels: 8,
		MaxLocalRanks: 4, LocalRanks: 4, CUDARTVersion: 12090,
		Graphs: Graphs{
			CollNetDirect: Graph{NChannels: 2, BwIntra: 10, BwInter: 5, TypeIntra: PathLOC, TypeInter: PathNET, LatencyInter: 3},
			CollNetChain:  Graph{NChannels: 1},
		},
	}
	assert.Equal(t, want, got)
}

func TestFromNodeNameFallback(t *testing.T) {
	n := testNode()
	n.File = ""
	_, err := FromNode(n, 0)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "capabilities: h100.toml: "), "got %v", err)

	n.Name = ""
	_, err = FromNode(n, 0)
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(err.Error(), "capabilities: node table: "), "got %v", err)

	_, err = FromNode(nil, 1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "capabilities: ")
}

func TestFromNodeErrors(t *testing.T) {
	tests := []struct {
		name   string
		nNodes int
		edit   func(n *tables.Node)
		want   []string
	}{
		{"zero nodes", 0, nil, []string{"nNodes must be at least 1, got 0"}},
		{"negative nodes", -3, nil, []string{"nNodes must be at least 1, got -3"}},
		{"no GPUs", 1, func(n *tables.Node) { n.Node.GPUsPerNode = 0 }, []string{"node.gpus_per_node: must be at least 1, got 0"}},
		{"no compute capability", 1, func(n *tables.Node) { n.Node.ComputeCapability = 0 }, []string{"node.compute_capability: must be positive"}},
		{"too many ranks", math.MaxInt32, nil, []string{"too many ranks", "node.gpus_per_node"}},
		{"bad cpu_arch", 1, func(n *tables.Node) { n.Node.CPUArch = "sparc" }, []string{`node.cpu_arch: unknown cpu_arch "sparc"`}},
		{"empty cpu_arch", 1, func(n *tables.Node) { n.Node.CPUArch = "" }, []string{`node.cpu_arch: unknown cpu_arch ""`}},
		{"bad cpu_vendor", 1, func(n *tables.Node) { n.Node.CPUVendor = "via" }, []string{`node.cpu_vendor: unknown cpu_vendor "via"`}},
		{"bad net_device_type", 1, func(n *tables.Node) { n.Node.NetDeviceType = "gpu" }, []string{`node.net_device_type: unknown net_device_type "gpu"`}},
		{"bad max_tree_pattern", 1, func(n *tables.Node) { n.Node.MaxTreePattern = 4 }, []string{"node.max_tree_pattern: must be 1..3, got 4"}},
		{"bad collnet entry", 1, func(n *tables.Node) { n.Node.CollNetSupport = []string{"sum:float32", "sumfloat32"} }, []string{`node.collnet_support[1]: want "op:dtype", got "sumfloat32"`}},
		{"bad collnet dtype", 1, func(n *tables.Node) { n.Node.CollNetSupport = []string{"sum:f32"} }, []string{`node.collnet_support[0]: unknown dtype "f32"`}},
		{"missing scale 1", 1, func(n *tables.Node) { delete(n.Scale, "1") }, []string{"scale.1: missing, needed for 1 node(s)"}},
		{"missing scale 2", 2, func(n *tables.Node) { delete(n.Scale, "2") }, []string{"scale.2: missing"}},
		{"missing scale 4", 3, func(n *tables.Node) { delete(n.Scale, "4") }, []string{"scale.4: missing, needed for 3 node(s)"}},
		{"nil scales", 1, func(n *tables.Node) { n.Scale = nil }, []string{"scale.1: missing"}},
		{"unknown graph", 1, func(n *tables.Node) {
			n.Scale["1"].Graphs["pat"] = tables.Graph{}
			n.Scale["1"].Graphs["nvls_tree"] = tables.Graph{}
		}, []string{`unknown graph "scale.1.graphs.nvls_tree", "scale.1.graphs.pat"`}},
		{"bad type_intra", 1, func(n *tables.Node) {
			g := n.Scale["1"].Graphs["ring"]
			g.TypeIntra = "NVLINK"
			n.Scale["1"].Graphs["ring"] = g
		}, []string{`scale.1.graphs.ring.type_intra: unknown path type "NVLINK"`}},
		{"bad type_inter", 1, func(n *tables.Node) {
			g := n.Scale["1"].Graphs["nvls"]
			g.TypeInter = "IB"
			n.Scale["1"].Graphs["nvls"] = g
		}, []string{`scale.1.graphs.nvls.type_inter: unknown path type "IB"`}},
		{"infinite bandwidth", 1, func(n *tables.Node) {
			g := n.Scale["1"].Graphs["tree"]
			g.BwInter = math.Inf(1)
			n.Scale["1"].Graphs["tree"] = g
		}, []string{"scale.1.graphs.tree.bw_inter: want a finite number >= 0, got +Inf"}},
		{"negative latency", 1, func(n *tables.Node) {
			g := n.Scale["1"].Graphs["tree"]
			g.LatencyInter = -1
			n.Scale["1"].Graphs["tree"] = g
		}, []string{"scale.1.graphs.tree.latency_inter: want a finite number >= 0, got -1"}},
		{"validate", 1, func(n *tables.Node) {
			s := n.Scale["1"]
			s.CommNChannels = 65
			n.Scale["1"] = s
		}, []string{"comm_n_channels: NCCL allows at most 64 channels, got 65"}},
		{"validate graph channels", 1, func(n *tables.Node) {
			g := n.Scale["1"].Graphs["ring"]
			g.NChannels = -1
			n.Scale["1"].Graphs["ring"] = g
		}, []string{"graphs.ring.n_channels: must be 0..64, got -1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := testNode()
			if tt.edit != nil {
				tt.edit(n)
			}
			got, err := FromNode(n, tt.nNodes)
			require.Error(t, err)
			assert.Equal(t, Topology{}, got)
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, "capabilities: h100.toml: "), "got %q", msg)
			for _, w := range tt.want {
				assert.Contains(t, msg, w)
			}
		})
	}
}

func TestNodeScaleKey(t *testing.T) {
	for n, want := range map[int]string{1: "1", 2: "2", 3: "4", 4: "4", 1024: "4"} {
		assert.Equal(t, want, NodeScaleKey(n), "NodeScaleKey(%d)", n)
	}
}
