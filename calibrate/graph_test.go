package calibrate

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/collplan/collplan/capabilities"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func parseGraphsFile(t *testing.T, name string) (string, []GraphLine, error) {
	t.Helper()
	path := filepath.Join("testdata", "graphs", name)
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	gs, err := ParseGraphs(path, f)
	return path, gs, err
}

// The expectations below were read off the fixture files by hand.
func TestParseGraphs2Nodes(t *testing.T) {
	path, gs, err := parseGraphsFile(t, "graph_2n8g_tagged.log")
	require.NoError(t, err)
	require.Len(t, gs, 51, "16 ranks × ring, tree, nvls, and 3 lines of a second communicator")
	assert.Equal(t, GraphLine{File: path, Line: 1, Pattern: 4, CrossNic: 0, NChannels: 8, BwIntra: 20, BwInter: 12.5,
		TypeIntra: "NVL", TypeInter: "PIX", SameChannels: true, Graph: GraphRing, Comm: 0, Host: "gpu-a01",
		PID: 2200, Dev: 0, Rank: 0, sourceOrdinal: 0}, gs[0])
	// Line 23: rank 11's ring has the lowest bwIntra.
	assert.Equal(t, 23, gs[11].Line)
	assert.Equal(t, 18.0, gs[11].BwIntra)
	assert.Equal(t, 11, gs[11].Rank)
	count := map[string]int{}
	for _, g := range gs {
		if g.Comm == 0 {
			count[g.Graph]++
		}
	}
	assert.Equal(t, map[string]int{GraphRing: 16, GraphTree: 16, GraphNVLS: 16}, count)
	last := gs[len(gs)-3:]
	for _, g := range last {
		assert.Equal(t, 1, g.Comm, "line %d belongs to a second communicator", g.Line)
	}
	assert.Equal(t, []string{GraphRing, GraphTree, GraphRing}, []string{last[0].Graph, last[1].Graph, last[2].Graph})

	graphs, names, err := TopologyGraphs(gs)
	require.NoError(t, err)
	assert.Equal(t, []string{GraphTree, GraphRing, GraphNVLS}, names)
	assert.Equal(t, capabilities.Graphs{
		Tree: capabilities.Graph{NChannels: 8, BwIntra: 20, BwInter: 12.5, TypeIntra: capabilities.PathNVL,
			TypeInter: capabilities.PathPIX, SameChannels: false},
		Ring: capabilities.Graph{NChannels: 8, BwIntra: 18, BwInter: 12.5, TypeIntra: capabilities.PathNVL,
			TypeInter: capabilities.PathPXB, SameChannels: true},
		NVLS: capabilities.Graph{NChannels: 8, BwIntra: 40, BwInter: 25, TypeIntra: capabilities.PathNVL,
			TypeInter: capabilities.PathPIX, SameChannels: false},
	}, graphs)

	var b strings.Builder
	require.NoError(t, WriteTopologyGraphs(&b, gs))
	want := `# From the NCCL GRAPH lines of testdata/graphs/graph_2n8g_tagged.log (16 sources): the minimum of n_channels, bandwidths and
# same_channels and the maximum of the path types over the ranks, as init.cc combines them;
# ring and tree share the smaller channel count. latency_inter is not logged: 0, the usual value.

[graphs.tree]
n_channels = 8
bw_intra = 20.0
bw_inter = 12.5
type_intra = "NVL"
type_inter = "PIX"
latency_inter = 0.0
same_channels = false

[graphs.ring]
n_channels = 8
bw_intra = 18.0
bw_inter = 12.5
type_intra = "NVL"
type_inter = "PXB"
latency_inter = 0.0
same_channels = true

[graphs.nvls]
n_channels = 8
bw_intra = 40.0
bw_inter = 25.0
type_intra = "NVL"
type_inter = "PIX"
latency_inter = 0.0
same_channels = false
`
	assert.Equal(t, want, b.String())

	// The fragment completes a topology file that capabilities decodes to the same graphs.
	head := "n_nodes = 2\nn_ranks = 16\nmin_comp_cap = 90\nmax_comp_cap = 90\ncpu_arch = \"x86\"\n" +
		"cpu_vendor = \"intel\"\nnvs_count = 4\nnvls_support = true\ncomm_n_channels = 16\nnvls_channels = 16\n" +
		"max_local_ranks = 8\n"
	topo, err := capabilities.DecodeTopology("h100-2n.toml", []byte(head+b.String()))
	require.NoError(t, err)
	assert.Equal(t, graphs, topo.Graphs)
}

func TestParseGraphsSpeedAndErrors(t *testing.T) {
	path, gs, err := parseGraphsFile(t, "graph_1n4g_speed.log")
	ps := problemsOf(t, err)
	require.Len(t, ps, 1)
	assert.Equal(t, path+`:9: GRAPH line: nChannels "twelve" is not a count: Pattern 4, crossNic 0, nChannels twelve, speed 21.000000/21.000000, type NVL/PIX, sameChannels 1`, ps[0].Error())
	require.Len(t, gs, 8)
	graphs, names, err := TopologyGraphs(gs)
	require.NoError(t, err)
	assert.Equal(t, []string{GraphTree, GraphRing}, names)
	g := capabilities.Graph{NChannels: 12, BwIntra: 21, BwInter: 21, TypeIntra: capabilities.PathNVL,
		TypeInter: capabilities.PathPIX, SameChannels: true}
	assert.Equal(t, capabilities.Graphs{Tree: g, Ring: g}, graphs)

	path, gs, err = parseGraphsFile(t, "graph_oldest_numeric.log")
	require.NoError(t, err)
	require.Len(t, gs, 2)
	assert.Equal(t, "3", gs[0].TypeIntra)
	assert.Equal(t, 12.0, gs[0].BwIntra)
	_, _, err = TopologyGraphs(gs)
	ps = problemsOf(t, err)
	require.Len(t, ps, 2)
	assert.Equal(t, path+`:1: path types "3"/"" are not names (LOC NVL ... DIS)`, ps[0].Error())
	assert.Equal(t, 2, ps[1].Line)
	assert.Error(t, WriteTopologyGraphs(&strings.Builder{}, gs))
}

func TestParseGraphsInline(t *testing.T) {
	line := func(pat, nch int, ti string) string {
		return "h:1:2 [0] NCCL INFO Pattern " + strconv.Itoa(pat) + ", crossNic 0, nChannels " + strconv.Itoa(nch) +
			", bw 10.000000/5.000000, type " + ti + "/NET, sameChannels 1\n"
	}
	t.Run("order names the graphs", func(t *testing.T) {
		in := line(4, 16, "NVL") + line(3, 12, "NVL") + line(3, 2, "PIX") + line(6, 4, "NVL") + line(5, 8, "NVL") +
			line(4, 4, "NVL") + line(2, 4, "NVL") + line(9, 1, "NVL")
		gs, err := ParseGraphs("g.log", strings.NewReader(in))
		require.NoError(t, err)
		var names []string
		var comms []int
		for _, g := range gs {
			names = append(names, g.Graph)
			comms = append(comms, g.Comm)
		}
		assert.Equal(t, []string{GraphRing, GraphTree, GraphCollNetChain, GraphCollNetDirect, GraphNVLS, GraphRing, GraphTree, ""}, names)
		assert.Equal(t, []int{0, 0, 0, 0, 0, 1, 1, 1}, comms)
		graphs, present, err := TopologyGraphs(gs)
		require.NoError(t, err)
		assert.Equal(t, []string{GraphTree, GraphRing, GraphCollNetDirect, GraphCollNetChain, GraphNVLS}, present)
		assert.Equal(t, 12, graphs.Ring.NChannels, "ring and tree share the smaller count")
		assert.Equal(t, 12, graphs.Tree.NChannels)
		assert.Equal(t, 2, graphs.CollNetChain.NChannels)
		assert.Equal(t, capabilities.PathNET, graphs.CollNetDirect.TypeInter)
	})
	tests := []struct{ in, problem string }{
		{"h:1:2 [0] NCCL INFO Pattern 4, crossNic 0, nChannels 2, type NVL/PIX, sameChannels 1\n", "GRAPH line without bw"},
		{"h:1:2 [0] NCCL INFO Pattern 4, nChannels 2, bw 1/2, sameChannels 1\n", "GRAPH line without type"},
		{"h:1:2 [0] NCCL INFO Pattern 4, nChannels 2, bw 1/x, type NVL/PIX, sameChannels 1\n", `GRAPH line: bandwidths "1/x" are not intra/inter GB/s`},
		{"h:1:2 [0] NCCL INFO Pattern 4, nChannels 2, bw 1/-2, type NVL/PIX, sameChannels 1\n", `GRAPH line: bandwidths "1/-2" are not intra/inter GB/s`},
		{"h:1:2 [0] NCCL INFO Pattern 4, nChannels 2, bw 1/2, type /PIX, sameChannels 1\n", "GRAPH line: empty path type"},
		{"h:1:2 [0] NCCL INFO Pattern -4, nChannels 2, bw 1/2, type NVL/PIX, sameChannels 1\n", `GRAPH line: Pattern "-4" is not a count`},
		{"h:1:2 [0] NCCL INFO Pattern 4, nChannels 2, bw 1/2, type NVL/PIX, sameChannels x\n", `GRAPH line: sameChannels "x" is not a count`},
	}
	for _, tt := range tests {
		_, err := ParseGraphs("g.log", strings.NewReader(tt.in))
		ps := problemsOf(t, err)
		assert.Contains(t, ps[0].Error(), "g.log:1: "+tt.problem, tt.in)
	}
	_, _, err := TopologyGraphs(nil)
	assert.EqualError(t, err, "calibrate: no GRAPH line of a known pattern")
	gs, err := ParseGraphs("g.log", strings.NewReader("h:1:2 [0] NCCL INFO Pattern 4, nChannels 2, bw 1e2/2, type NVL/PIX, sameChannels 0, futureKey 7\n"))
	require.NoError(t, err)
	assert.Equal(t, -1, gs[0].CrossNic)
	assert.Equal(t, 100.0, gs[0].BwIntra)
	assert.False(t, gs[0].SameChannels)
}
