package costmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
)

// Vectors for NCCL's model by release. Every expected number is worked by hand in the comment
// beside it from the release's rule or constant as reference §14 states it or as tuning.cc at the
// release's tag shows it (Rules and Constants name which), never from running this code.

func mustRelease(t *testing.T, s string) Release {
	t.Helper()
	r, err := ParseRelease(s)
	require.NoError(t, err, s)
	return r
}

// buildRelease builds topo as release s does, with the release's own default constants.
func buildRelease(t *testing.T, topo capabilities.Topology, s string) *Table {
	t.Helper()
	r := mustRelease(t, s)
	k := r.Constants()
	tb, err := BuildFor(&topo, &k, r)
	require.NoError(t, err, s)
	return tb
}

func TestParseRelease(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"2.26", "2.26.2"}, {"2.19", "2.19.3"}, {"2.28", "2.28.3"}, {"2.28.9", "2.28.9"},
		{"v2.28.9-1", "2.28.9"}, {" 2.30 ", "2.30.7"}, {"2.30.7", "2.30.7"}, {"master", "master"},
		{"MASTER", "master"}, {"2.21.0", "2.21.0"},
	} {
		r, err := ParseRelease(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, r.String(), tc.in)
	}
	for _, bad := range []string{"", "2", "2.18", "2.31", "3.0", "1.30", "2.x", "2.26.-1", "2.26.1.1", "latest"} {
		_, err := ParseRelease(bad)
		require.Error(t, err, bad)
		assert.Contains(t, err.Error(), "2.19 .. 2.30", bad)
	}
	assert.Equal(t, "2.30.7", Release{}.String())
	assert.True(t, Release{}.IsZero())
	assert.False(t, Latest.IsZero())
}

// TestRulesByRelease checks each §14 row's boundary: the last release with the old rule and the
// first with the new one.
func TestRulesByRelease(t *testing.T) {
	old, b25 := []int{70, 80, 90}, []int{70, 80, 90, 100, 120}
	for _, tc := range []struct {
		rel                                                   string
		llQuarter, ll128PPN, patternGraph, oldNVLS, nvlsTCorr bool
		mixedCC, perFunc, chunkShrink                         bool
		pat, maxCC, batch, tuner                              int
		interAll, ppn1Tree, gatherRatio                       bool
		ll128CCs                                              []int
	}{
		{"2.19", true, true, true, true, false, false, false, true, 0, 2, 9, 4, true, false, true, old},
		{"2.20", true, true, true, true, false, false, false, false, 0, 2, 9, 4, true, false, true, old},
		{"2.21", false, true, true, true, false, false, false, false, 0, 2, 9, 4, true, false, true, old},
		{"2.22", false, true, true, true, false, false, false, false, 0, 2, 8, 4, true, false, true, old},
		{"2.23", false, false, true, true, false, false, false, false, 1, 2, 8, 4, false, true, false, old},
		{"2.24", false, false, true, true, false, false, true, false, 2, 2, 8, 4, false, true, false, old},
		{"2.25", false, false, true, true, false, false, true, false, 2, 3, 8, 4, false, true, false, b25},
		{"2.26", false, false, false, true, false, false, true, false, 2, 3, 8, 4, false, true, false, b25},
		{"2.27", false, false, false, true, false, false, true, false, 2, 3, 8, 4, false, true, false, b25},
		{"2.28", false, false, false, false, false, false, true, false, 3, 3, 8, 5, false, true, false, b25},
		{"2.29", false, false, false, false, true, false, true, false, 3, 3, 8, 5, false, true, false, b25},
		{"2.30", false, false, false, false, true, true, true, false, 3, 3, 8, 6, false, true, false, nil},
		{"master", false, false, false, false, true, true, true, false, 3, 3, 8, 7, false, true, false, nil},
	} {
		ru := mustRelease(t, tc.rel).Rules()
		assert.Equal(t, tc.llQuarter, ru.RingLLQuarter, tc.rel)
		assert.Equal(t, tc.ll128PPN, ru.RingLL128LowPPN, tc.rel)
		assert.Equal(t, tc.patternGraph, ru.TreePatternFromGraph, tc.rel)
		assert.Equal(t, tc.oldNVLS, ru.NVLSBeforeEfficiency, tc.rel)
		assert.Equal(t, tc.nvlsTCorr, ru.NVLSTreeCorrection, tc.rel)
		assert.Equal(t, tc.mixedCC, ru.LL128MixedCompCap, tc.rel)
		assert.Equal(t, tc.perFunc, ru.EnvPerFunction, tc.rel)
		assert.Equal(t, tc.chunkShrink, ru.TreeSimpleChunkShrink, tc.rel)
		assert.Equal(t, tc.pat, ru.PAT, tc.rel)
		assert.Equal(t, tc.maxCC, ru.MaxCompCapIndex, tc.rel)
		assert.Equal(t, tc.batch, ru.LatBatch, tc.rel)
		assert.Equal(t, tc.tuner, ru.TunerAPI, tc.rel)
		assert.Equal(t, tc.interAll, ru.RingInterAllNodes, tc.rel)
		assert.Equal(t, tc.ppn1Tree, ru.InterLatPPN1Tree, tc.rel)
		assert.Equal(t, tc.gatherRatio, ru.NVLSGatherRatio, tc.rel)
		assert.Equal(t, tc.ll128CCs, ru.LL128CompCaps, tc.rel)
	}
	assert.Equal(t, Latest.Rules(), Release{}.Rules())
}

// TestConstantsByRelease checks the constants §14 lists as changed, at each boundary; Latest's
// are DefaultConstants exactly.
func TestConstantsByRelease(t *testing.T) {
	assert.Equal(t, DefaultConstants(), Latest.Constants())
	assert.Equal(t, DefaultConstants(), Release{}.Constants())
	assert.Equal(t, DefaultConstants(), mustRelease(t, "master").Constants())
	type treeSimple struct{ base, nvl, pci, net float64 }
	for _, tc := range []struct {
		rel       string
		tree      treeSimple
		nvlsNVL   float64 // hw NVLink NVLS and NVLSTree Simple
		nvlsTNet  float64 // hw NET NVLSTree Simple
		patBase   float64
		bwTreeN2  float64 // perChMaxTreeBws[3][1]
		nvlsTN4   float64 // perChMaxNVLSTreeBws[3][2]
		llMaxBwN1 float64 // llMaxBws[3][0]
		hopperLL  float64 // llMaxBws[2][0]
	}{
		// 2.19-2.20: llMaxBws' Hopper row is Ampere's (87.7), so the (unused) 2x row is 175.4.
		{"2.19", treeSimple{0, 28, 28, 28}, 23, 14, 0, 2 * 41.4, 2 * 45.5, 2 * 87.7, 87.7},
		{"2.20", treeSimple{0, 28, 28, 28}, 23, 14, 0, 2 * 41.4, 2 * 45.5, 2 * 87.7, 87.7},
		{"2.21", treeSimple{0, 28, 28, 28}, 25, 14, 0, 2 * 41.4, 2 * 45.5, 2 * 141.0, 141},
		{"2.22", treeSimple{0, 28, 28, 28}, 25, 14, 0, 2 * 41.4, 2 * 45.5, 2 * 141.0, 141},
		{"2.23", treeSimple{8.4, 4, 4, 14}, 25, 14, 0, 2 * 41.4, 2 * 45.5, 2 * 141.0, 141},
		{"2.24", treeSimple{8.4, 4, 4, 14}, 25, 14, 0, 2 * 41.4, 2 * 45.5, 2 * 141.0, 141},
		{"2.27", treeSimple{8.4, 4, 4, 14}, 25, 14, 0, 2 * 41.4, 2 * 45.5, 2 * 141.0, 141},
		{"2.28.3", treeSimple{8.4, 4, 4, 14}, 25, 14, 8, 42.8, 43.1, 282.0, 141},
		{"2.28.8", treeSimple{8.4, 4, 4, 14}, 25, 14, 8, 42.8, 43.1, 282.0, 141},
		{"2.28.9", treeSimple{8.4, 4, 4, 14}, 25, 20.9, 8, 42.8, 43.1, 282.0, 141},
		{"2.29", treeSimple{8.4, 4, 4, 14}, 25, 20.9, 8, 42.8, 43.8, 282.0, 141},
		{"2.30", treeSimple{8.4, 4, 4, 14}, 25, 20.9, 8, 42.8, 80.0, 282.0, 141},
	} {
		k := mustRelease(t, tc.rel).Constants()
		assert.Equal(t, tc.tree, treeSimple{k.BaseLat[Tree][Simple], k.HWLat[HWNVLink][Tree][Simple],
			k.HWLat[HWPCI][Tree][Simple], k.HWLat[HWNet][Tree][Simple]}, tc.rel)
		assert.Equal(t, tc.nvlsNVL, k.HWLat[HWNVLink][NVLS][Simple], tc.rel)
		assert.Equal(t, tc.nvlsNVL, k.HWLat[HWNVLink][NVLSTree][Simple], tc.rel)
		assert.Equal(t, tc.nvlsTNet, k.HWLat[HWNet][NVLSTree][Simple], tc.rel)
		assert.Equal(t, tc.patBase, k.BaseLat[PAT][Simple], tc.rel)
		assert.InDelta(t, tc.bwTreeN2, k.PerChMaxTreeBws[3][1], 1e-9, tc.rel)
		assert.InDelta(t, tc.nvlsTN4, k.PerChMaxNVLSTreeBws[3][2], 1e-9, tc.rel)
		assert.InDelta(t, tc.llMaxBwN1, k.LLMaxBws[3][0], 1e-9, tc.rel)
		assert.InDelta(t, tc.hopperLL, k.LLMaxBws[2][0], 1e-9, tc.rel)
	}
}

// TestLatestUnchanged: the 2.30.7 release (given, zero or master) builds the same table as Build.
func TestLatestUnchanged(t *testing.T) {
	for _, name := range []string{"S1", "S2", "S3"} {
		topo := scenario(name)
		want, err := mustBuild(&topo)
		require.NoError(t, err)
		for _, rel := range []string{"2.30", "2.30.7", "master"} {
			got := buildRelease(t, topo, rel)
			assert.Equal(t, want.Lat, got.Lat, name+" "+rel)
			assert.Equal(t, want.BW, got.BW, name+" "+rel)
			assert.Equal(t, want.Reason, got.Reason, name+" "+rel)
		}
	}
}

// relCell is one cell's expected latency and bandwidth at one release.
type relCell struct {
	rel     string
	c       Coll
	a       Algo
	p       Proto
	lat, bw float64
	off     string // when not "": the cell is off (bw 0) for a reason containing this
}

func checkRelease(t *testing.T, topo capabilities.Topology, want []relCell) {
	t.Helper()
	for _, w := range want {
		tb := buildRelease(t, topo, w.rel)
		name := w.rel + " " + w.c.String() + " " + w.a.String() + "/" + w.p.String()
		if w.off != "" {
			assert.Zero(t, tb.BW[w.c][w.a][w.p], name)
			assert.Contains(t, tb.Reason[w.c][w.a][w.p], w.off, name)
			continue
		}
		assert.InDelta(t, w.lat, tb.Lat[w.c][w.a][w.p], 1e-3, name+" lat")
		assert.InDelta(t, w.bw, tb.BW[w.c][w.a][w.p], 1e-3+w.bw*2e-6, name+" bw")
		assert.Empty(t, tb.Reason[w.c][w.a][w.p], name)
	}
}

// TestRingLLByRelease: §14 "Ring LL bw factor" and tuning.cc's llMaxBws Hopper row. S1 (1 node x
// 8, cc 90, ring nCh 16 x 20 GB/s): busBw 320; llMaxBws[2][0] is 87.7 in 2.20 (Ampere's), 141
// from 2.21.
func TestRingLLByRelease(t *testing.T) {
	checkRelease(t, s1(), []relCell{
		// 2.20: AllReduce x1/4 = 80 (< 87.7), ratio 8/14 -> 45.714; lat 6.6 + 14*0.6 = 15.0.
		{rel: "2.20", c: AllReduce, a: Ring, p: LL, lat: 15.0, bw: 80.0 * 8 / 14},
		// 2.20: Reduce x1/4 = 80, ratio 8/8 -> 80; Broadcast (one node) x1/3 = 106.667, capped at
		// 87.7; lat 6.6 + 0.6.
		{rel: "2.20", c: Reduce, a: Ring, p: LL, lat: 7.2, bw: 80},
		{rel: "2.20", c: Broadcast, a: Ring, p: LL, lat: 7.2, bw: 87.7},
		// 2.20: AllGather x1/3 = 106.667 -> 87.7, ratio 8/7 -> 100.229.
		{rel: "2.20", c: AllGather, a: Ring, p: LL, lat: 6.6 + 7*0.6, bw: 87.7 * 8 / 7},
		// 2.21: x0.5 = 160 -> min(141, 160) = 141; ratio 8/14 -> 80.571 (reference §13 S1).
		{rel: "2.21", c: AllReduce, a: Ring, p: LL, lat: 15.0, bw: 141.0 * 8 / 14},
		{rel: "2.21", c: Broadcast, a: Ring, p: LL, lat: 7.2, bw: 141},
	})
}

// TestRingLL128ByRelease: §14 "Ring LL128 factor" on 4 nodes x 1 GPU (ppn 1 < 2): ring nCh 4,
// bwInter 10, typeIntra LOC, typeInter PXB (the LL128 gate passes). busBw = 4*10 = 40; the ceiling
// 4*perChMaxRingLL128Bws[2][2] = 146.8 does not bind.
func TestRingLL128ByRelease(t *testing.T) {
	topo := pat()
	topo.Graphs.Ring.TypeInter = capabilities.PathPXB
	checkRelease(t, topo, []relCell{
		// 2.22: x0.7 = 28, ratio 4/3 -> 37.333; lat 14 + 3 inter steps * Ring's own NET LL128 4.0
		// = 26 (Rules.InterLatPPN1Tree is 2.23+).
		{rel: "2.22", c: AllGather, a: Ring, p: LL128, lat: 26, bw: 28.0 * 4 / 3},
		// 2.23: x0.92 = 36.8, ratio 4/3 -> 49.067; lat 14 + 3 * hwLat[NET][Tree][LL128] 8.5 = 39.5.
		{rel: "2.23", c: AllGather, a: Ring, p: LL128, lat: 39.5, bw: 36.8 * 4 / 3},
	})
	// ppn 8 (reference §13 S2, 79.20/94.97): 0.92 in both releases: bwInter 12.5 (4 nodes),
	// busBw 8*12.5 = 100 * 0.92 = 92, ratio 32/31.
	checkRelease(t, s2(), []relCell{
		{rel: "2.22", c: AllGather, a: Ring, p: LL128, lat: 79.2, bw: 92.0 * 32 / 31},
		{rel: "2.23", c: AllGather, a: Ring, p: LL128, lat: 79.2, bw: 92.0 * 32 / 31},
	})
}

// TestTreeSimpleLatencyByRelease: §14 "Tree Simple latency" on S3 (1 node x 4, PCI class, ppn 4):
// lat = base + 2*(3*hw[PCI][Tree][Simple]).
func TestTreeSimpleLatencyByRelease(t *testing.T) {
	checkRelease(t, s3(), []relCell{
		// 2.22: 0 + 2*3*28 = 168.
		{rel: "2.22", c: AllReduce, a: Tree, p: Simple, lat: 168, bw: 11.04},
		// 2.23: 8.4 + 2*3*4 = 32.4 (reference §13 S3). bw: 2*12 = 24 *0.92 = 22.08 (ceiling 2*24.0
		// = 48) * 0.5 = 11.04.
		{rel: "2.23", c: AllReduce, a: Tree, p: Simple, lat: 32.4, bw: 11.04},
	})
	// S2 (4 nodes, NVL): 2.22: 0 + 2*(7*28 + 2*28) = 504; 2.23: 8.4 + 2*(7*4 + 2*14) = 120.4 (§13).
	checkRelease(t, s2(), []relCell{
		{rel: "2.22", c: AllReduce, a: Tree, p: Simple, lat: 504, bw: 46},
		{rel: "2.23", c: AllReduce, a: Tree, p: Simple, lat: 120.4, bw: 46},
	})
}

// TestNVLSByRelease: §14 "NVLS model", "hw NVLINK NVLS / NVLSTree" and "hw NET NVLSTree".
func TestNVLSByRelease(t *testing.T) {
	// S1, one node, NVLS graph nCh 8, bw 40/40.
	checkRelease(t, s1(), []relCell{
		// 2.20: bw = min(40, 40) = 40, busBw 320, ratio 5/6 -> 266.667; lat = hw NVL NVLS 23.
		{rel: "2.20", c: AllReduce, a: NVLS, p: Simple, lat: 23, bw: 320.0 * 5 / 6},
		// 2.21 and 2.27: the same bandwidth, lat 25.
		{rel: "2.21", c: AllReduce, a: NVLS, p: Simple, lat: 25, bw: 320.0 * 5 / 6},
		{rel: "2.27", c: AllReduce, a: NVLS, p: Simple, lat: 25, bw: 320.0 * 5 / 6},
		// 2.27 AllGather: bw 40, busBw 320, not converted (no ratio for non-Ring AllGather).
		{rel: "2.27", c: AllGather, a: NVLS, p: Simple, lat: 25, bw: 320},
		// 2.28: the nvlsEfficiency model, reference §13 S1: 182.86 and AllGather 208.25.
		{rel: "2.28", c: AllReduce, a: NVLS, p: Simple, lat: 25, bw: 182.857},
		{rel: "2.28", c: AllGather, a: NVLS, p: Simple, lat: 25, bw: 208.25},
	})
	// S2, 4 nodes: NVLS graph nCh 8, bwIntra 40, bwInter 25.
	checkRelease(t, s2(), []relCell{
		// 2.20: bw = min(40, 25/2) = 12.5 (above 2 nodes), busBw 100, x5/6 = 83.333;
		// lat = 0 + 23 + 2*log2i(4)*14 = 79.
		{rel: "2.20", c: AllReduce, a: NVLSTree, p: Simple, lat: 79, bw: 250.0 / 3},
		// 2.27: lat = 25 + 4*14 = 81.
		{rel: "2.27", c: AllReduce, a: NVLSTree, p: Simple, lat: 81, bw: 250.0 / 3},
		// 2.28.3: the efficiency model (§13 S2: 103.23), lat still 25 + 4*14 = 81.
		{rel: "2.28.3", c: AllReduce, a: NVLSTree, p: Simple, lat: 81, bw: 103.226},
		// 2.28.9: lat 25 + 4*20.9 = 108.6 (§13 S2).
		{rel: "2.28.9", c: AllReduce, a: NVLSTree, p: Simple, lat: 108.6, bw: 103.226},
	})
}

// TestPATByRelease: §14 "PAT" on 4 nodes x 1 GPU (TestPAT's topology: busBw 4*10 = 40, lat terms
// 2*14/3.5 + 4*2.8 = 19.2).
func TestPATByRelease(t *testing.T) {
	checkRelease(t, pat(), []relCell{
		{rel: "2.22", c: AllGather, a: PAT, p: Simple, off: "no PAT"},
		// 2.23: x0.85 = 34; lat assigned 8 + 19.2 = 27.2 (base latency 0).
		{rel: "2.23", c: AllGather, a: PAT, p: Simple, lat: 27.2, bw: 34},
		{rel: "2.23", c: ReduceScatter, a: PAT, p: Simple, lat: 27.2, bw: 34},
		// 2.24: x0.75 = 30; base 8.0 + 19.2 = 27.2.
		{rel: "2.24", c: AllGather, a: PAT, p: Simple, lat: 27.2, bw: 30},
	})
	// 2.23-2.27 assign the latency, ignoring a base latency a tuner set; 2.28 adds it.
	topo := pat()
	for _, tc := range []struct {
		rel string
		lat float64
	}{{"2.23", 27.2}, {"2.24", 27.2}, {"2.27", 27.2}, {"2.28", 10 + 19.2}} {
		r := mustRelease(t, tc.rel)
		k := r.Constants()
		k.BaseLat[PAT][Simple] = 10
		tb, err := BuildFor(&topo, &k, r)
		require.NoError(t, err)
		assert.InDelta(t, tc.lat, tb.Lat[AllGather][PAT][Simple], 1e-3, tc.rel)
	}
}

// TestBlackwellByRelease: §14 "Blackwell ceilings". 2 nodes x 8, cc 100, tree nCh 16, bwIntra 50
// (<= 2 nodes reads bwIntra): busBw 800 * 0.92 = 736 against 16 * perChMaxTreeBws[cc][1], then
// Tree/Simple ratio 0.5.
func TestBlackwellByRelease(t *testing.T) {
	topo := s2()
	topo.NNodes, topo.NRanks, topo.MinCompCap, topo.MaxCompCap = 2, 16, 100, 100
	topo.Graphs.Tree = graph(16, 50, 50, capabilities.PathNVL)
	// lat: 8.4 + 2*(7*4.0 + 1*14) = 92.4 in every release from 2.23.
	checkRelease(t, topo, []relCell{
		// 2.24: no Blackwell row, Hopper's 41.4: 662.4 -> 331.2.
		{rel: "2.24", c: AllReduce, a: Tree, p: Simple, lat: 92.4, bw: 331.2},
		// 2.25 and 2.27: 2 x Hopper = 82.8: 1324.8 does not bind, 736 -> 368.
		{rel: "2.25", c: AllReduce, a: Tree, p: Simple, lat: 92.4, bw: 368},
		{rel: "2.27", c: AllReduce, a: Tree, p: Simple, lat: 92.4, bw: 368},
		// 2.28: explicit 42.8: 684.8 -> 342.4.
		{rel: "2.28", c: AllReduce, a: Tree, p: Simple, lat: 92.4, bw: 342.4},
	})
	// NVLSTree N4 ceiling: 4 nodes x 8, cc 100, NVLS graph nCh 8, bwIntra 40, bwInter 50:
	// intraBw = 40*0.74*7/8*2 = 51.8, interBw 50 (4 nodes: no x2); bw = min(51.8, 50, ceiling);
	// busBw = 8*bw, ratio 32/62; lat = 25 + 2*2*20.9 = 108.6 (2.29+).
	topo = s2()
	topo.MinCompCap, topo.MaxCompCap = 100, 100
	topo.Graphs.NVLS = graph(8, 40, 50, capabilities.PathNVL)
	checkRelease(t, topo, []relCell{
		{rel: "2.28.9", c: AllReduce, a: NVLSTree, p: Simple, lat: 108.6, bw: 8 * 43.1 * 32 / 62},
		{rel: "2.29", c: AllReduce, a: NVLSTree, p: Simple, lat: 108.6, bw: 8 * 43.8 * 32 / 62},
		{rel: "2.30", c: AllReduce, a: NVLSTree, p: Simple, lat: 108.6, bw: 8 * 50.0 * 32 / 62},
	})
}

// TestLL128MixedCompCapByRelease: §14 "LL128 mixed compute capability" on S1 with cc 90 and 100
// mixed (min 90): Ring LL128 AllReduce keeps §13's 40.60/168.23 in 2.30 and is gated off in 2.29.
func TestLL128MixedCompCapByRelease(t *testing.T) {
	topo := s1()
	topo.MaxCompCap = 100
	checkRelease(t, topo, []relCell{
		{rel: "2.29", c: AllReduce, a: Ring, p: LL128, off: "2.29 and older need min == max"},
		{rel: "2.30", c: AllReduce, a: Ring, p: LL128, lat: 40.6, bw: 168.229},
	})
}

// TestEnvSyntaxByRelease: §14 "NCCL_ALGO/NCCL_PROTO". 2.24+ reject unknown names and take
// per-function prefixes; 2.23 and older read one flat list and ignore what they do not know.
func TestEnvSyntaxByRelease(t *testing.T) {
	set := func(algo, proto string) capabilities.Topology {
		topo := s1()
		if algo != "" {
			topo.Env.Algo = capabilities.Setting{Value: algo, Source: capabilities.SourceFlag}
		}
		if proto != "" {
			topo.Env.Proto = capabilities.Setting{Value: proto, Source: capabilities.SourceFlag}
		}
		return topo
	}
	build := func(topo capabilities.Topology, rel string) (*Table, error) {
		r := mustRelease(t, rel)
		k := r.Constants()
		return BuildFor(&topo, &k, r)
	}
	// "Tree,bogus": an error in 2.24; Tree alone in 2.23 (bogus ignored), for every function.
	_, err := build(set("Tree,bogus", ""), "2.24")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "bogus")
	tb, err := build(set("Tree,bogus", ""), "2.23")
	require.NoError(t, err)
	assert.NotZero(t, tb.BW[AllReduce][Tree][Simple])
	assert.Zero(t, tb.BW[AllReduce][Ring][Simple])
	assert.Zero(t, tb.BW[AllGather][Ring][Simple], "a flat list applies to every function")
	// "allreduce:tree": 2.24 pins AllReduce to Tree and leaves AllGather alone; 2.23 knows no
	// prefix, matches nothing, and so disables every algorithm.
	tb, err = build(set("allreduce:tree", ""), "2.24")
	require.NoError(t, err)
	assert.Zero(t, tb.BW[AllReduce][Ring][Simple])
	assert.NotZero(t, tb.BW[AllGather][Ring][Simple])
	tb, err = build(set("allreduce:tree", ""), "2.23")
	require.NoError(t, err)
	assert.Zero(t, tb.BW[AllReduce][Tree][Simple])
	assert.Zero(t, tb.BW[AllGather][Ring][Simple])
	// "^PAT" in 2.22 (no PAT name): a ^ list of nothing known leaves every algorithm on.
	tb, err = build(set("^PAT", ""), "2.22")
	require.NoError(t, err)
	assert.NotZero(t, tb.BW[AllReduce][Ring][Simple])
	// NCCL_PROTO="^ll" (case-insensitive, flat): LL off, LL128 user-set (the gate is skipped).
	topo := set("", "^ll")
	topo.Graphs.Ring.TypeIntra = capabilities.PathSYS // would fail the auto gate
	tb, err = build(topo, "2.23")
	require.NoError(t, err)
	assert.Zero(t, tb.BW[AllReduce][Ring][LL])
	assert.NotZero(t, tb.BW[AllReduce][Ring][LL128])
}

// TestLatCountByRelease: §14 "latCount batch". S1 Tree/LL AllReduce (lat 15.2, bw 38.74) at 8
// bytes with 9 pipelined ops: latCount = ceil(9/9) = 1 in 2.21, ceil(9/8) = 2 in 2.22, so the
// times differ by exactly one latency, 15.2 us; Ring's latCount is the op count in both.
func TestLatCountByRelease(t *testing.T) {
	t21, t22 := buildRelease(t, s1(), "2.21"), buildRelease(t, s1(), "2.22")
	d := t22.Time(AllReduce, Tree, LL, 8, 9, 1) - t21.Time(AllReduce, Tree, LL, 8, 9, 1)
	assert.InDelta(t, 15.2, d, 1e-4)
	assert.InDelta(t, 15.2+8/(1000*38.7368), t21.Time(AllReduce, Tree, LL, 8, 9, 1), 1e-4)
	assert.Equal(t, t21.Time(AllReduce, Ring, LL, 8, 9, 1), t22.Time(AllReduce, Ring, LL, 8, 9, 1))
	// 16 ops: ceil(16/9) = 2 = ceil(16/8): no difference.
	assert.Equal(t, t21.Time(AllReduce, Tree, LL, 8, 16, 1), t22.Time(AllReduce, Tree, LL, 8, 16, 1))
}

// TestTreePatternByRelease: §14 "Tree pattern 0.85". A Topology's one tree graph has pattern
// max_tree_pattern, so 2.25 (the graph's pattern) and 2.26 (comm->maxTreePattern) agree: S1 with
// pattern 3 gives Tree/Simple 147.2 * 0.85 = 125.12 in both.
func TestTreePatternByRelease(t *testing.T) {
	topo := s1()
	topo.MaxTreePattern = capabilities.PatternTree
	checkRelease(t, topo, []relCell{
		{rel: "2.25", c: AllReduce, a: Tree, p: Simple, lat: 64.4, bw: 147.2 * 0.85},
		{rel: "2.26", c: AllReduce, a: Tree, p: Simple, lat: 64.4, bw: 147.2 * 0.85},
	})
}

// TestRingInterStepsByRelease: 2.22's 2*nNodes inter-node steps (Rules.RingInterAllNodes). S2 Ring
// LL AllReduce (4 nodes, 32 ranks, nsteps 62): intraLat max(0.6, net overhead 1.0) = 1.0, interLat
// hwLat[NET][Ring][LL] 2.7. 2.22: 6.6 + (62-8)*1.0 + 8*2.7 = 82.2; 2.23: 6.6 + 56*1.0 + 6*2.7 = 78.8
// (reference §13 S2). Bandwidth in both: 8*12.5*0.5 = 50, capped at llMaxBws[0][2] 20.4 (Intel,
// 4 nodes), ratio 32/62 -> 10.529 (§13: 10.53).
func TestRingInterStepsByRelease(t *testing.T) {
	checkRelease(t, s2(), []relCell{
		{rel: "2.22", c: AllReduce, a: Ring, p: LL, lat: 82.2, bw: 20.4 * 32 / 62},
		{rel: "2.23", c: AllReduce, a: Ring, p: LL, lat: 78.8, bw: 20.4 * 32 / 62},
		// AllGather counts nNodes-1 in both: 6.6 + 28*1.0 + 3*2.7 = 42.7 (§13 S2), bw 20.4*32/31.
		{rel: "2.22", c: AllGather, a: Ring, p: LL, lat: 42.7, bw: 20.4 * 32 / 31},
	})
}

// TestInterLatPPN1ByRelease: with one GPU per node, 2.23+ price every algorithm's inter-node hop at
// Tree's NET latency (Rules.InterLatPPN1Tree). 4 nodes x 1 GPU, Ring AllGather LL (3 steps, all
// inter-node): 2.22: 6.6 + 3*2.7 (Ring's own) = 14.7; 2.23: 6.6 + 3*5.0 (Tree's) = 21.6.
func TestInterLatPPN1ByRelease(t *testing.T) {
	checkRelease(t, pat(), []relCell{
		{rel: "2.22", c: AllGather, a: Ring, p: LL, lat: 14.7, bw: 80.0 / 3},
		{rel: "2.23", c: AllGather, a: Ring, p: LL, lat: 21.6, bw: 80.0 / 3},
	})
}

// TestNVLSGatherRatioByRelease: 2.22 converts NVLS AllGather busBw with the 5/6 ratio
// (Rules.NVLSGatherRatio); 2.23 keeps busBw. S1: NVLS graph 8 x min(40, 40) = 320.
func TestNVLSGatherRatioByRelease(t *testing.T) {
	checkRelease(t, s1(), []relCell{
		{rel: "2.22", c: AllGather, a: NVLS, p: Simple, lat: 25, bw: 320.0 * 5 / 6},
		{rel: "2.22", c: ReduceScatter, a: NVLS, p: Simple, lat: 25, bw: 320.0 * 5 / 6},
		{rel: "2.23", c: AllGather, a: NVLS, p: Simple, lat: 25, bw: 320},
	})
}

// TestLL128CompCapsByRelease: the LL128 auto gate's compute capability list (Rules.LL128CompCaps).
// S1's Ring LL128 AllReduce (lat 14 + 14*1.9 = 40.6; busBw 320*0.92 = 294.4 under a ceiling of at
// least 16*20 = 320, ratio 8/14 -> 168.229) at cc 100: off in 2.24 (70, 80, 90), on in 2.25; at cc
// 86: off in 2.29, on in 2.30 (min >= 70).
func TestLL128CompCapsByRelease(t *testing.T) {
	for _, tc := range []struct {
		cc       int
		off, on  string
		wantList string
	}{{100, "2.24", "2.25", "[70 80 90]"}, {86, "2.29", "2.30", "[70 80 90 100 120]"}} {
		topo := s1()
		topo.MinCompCap, topo.MaxCompCap = tc.cc, tc.cc
		checkRelease(t, topo, []relCell{
			{rel: tc.off, c: AllReduce, a: Ring, p: LL128, off: "is not one of " + tc.wantList},
			{rel: tc.on, c: AllReduce, a: Ring, p: LL128, lat: 40.6, bw: 294.4 * 8 / 14},
		})
	}
}
