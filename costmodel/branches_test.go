package costmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
)

// Hand-derived vectors for the branches §13's scenarios do not reach. Each expected number is
// worked from reference §1-§6 in the comment beside it; none comes from running this code.

type cellWant struct {
	c        Coll
	a        Algo
	p        Proto
	lat, bw  float64
	zeroBW   bool   // bandwidth must be 0 (the cell is off) ...
	reasonIn string // ... for a reason containing this
}

func checkCells(t *testing.T, topo capabilities.Topology, want []cellWant) *Table {
	t.Helper()
	tb, err := mustBuild(&topo)
	require.NoError(t, err)
	for _, w := range want {
		name := w.c.String() + " " + w.a.String() + "/" + w.p.String()
		assert.InDelta(t, w.lat, tb.Lat[w.c][w.a][w.p], 1e-3, name+" lat")
		if w.zeroBW {
			assert.Zero(t, tb.BW[w.c][w.a][w.p], name+" bw")
			assert.Contains(t, tb.Reason[w.c][w.a][w.p], w.reasonIn, name+" reason")
			continue
		}
		assert.InDelta(t, w.bw, tb.BW[w.c][w.a][w.p], 1e-3+w.bw*2e-6, name+" bw")
		assert.Empty(t, tb.Reason[w.c][w.a][w.p], name+" reason")
	}
	return tb
}

// collNet is 2 nodes x 8 GPUs, cc 90, Intel, with CollNet (SHARP-like): CollNetDirect graph nCh 4
// bw 30/12, CollNetChain graph nCh 4 bw 24/12, both NVL; 8 heads; the plugin reduces sum:float32 and
// has iallgather.
func collNet() capabilities.Topology {
	t := s2()
	t.NNodes, t.NRanks = 2, 16
	t.CollNetEnable, t.CollNetChainSupport = true, true
	t.CollNetHeadsNum, t.CollNetDirectNHeads = 8, 8
	t.CollNetPluginIAllGather = true
	t.CollNetSupport = []capabilities.OpDtype{{Op: capabilities.Sum, Dtype: capabilities.Float32}}
	t.Graphs.CollNetDirect = graph(4, 30, 12, capabilities.PathNVL)
	t.Graphs.CollNetChain = graph(4, 24, 12, capabilities.PathNVL)
	return t
}

func TestCollNet(t *testing.T) {
	checkCells(t, collNet(), []cellWant{
		// CollNetDirect AllReduce Simple: bw = bwIntra 30 (CollNet reads intra); busBw = 4*30 = 120;
		// f = ppn/nCh = 8/4 = 2, f -= (2-1)/2 -> 1.5; busBw = 120/1.5 = 80; cc >= 90: *0.85 = 68;
		// ratio 0.5 -> 34.
		// lat = 0 + 2*(min(1, 8-1)*hwLat[NVLINK][CND][Simple] 3.7 + (8-1)*0.4) + hwLat[NET][CND][Simple] 31
		//     = 2*(3.7 + 2.8) + 31 = 44.
		{c: AllReduce, a: CollNetDirect, p: Simple, lat: 44, bw: 34},
		// CollNetDirect LL: busBw = 0 (CollNet is Simple only); latency kept: 2*(0 + 2.8) + 0 = 5.6
		// (addendum 5's 5.6 for ppn 8).
		{c: AllReduce, a: CollNetDirect, p: LL, lat: 5.6, zeroBW: true, reasonIn: "Simple only"},
		// CollNetChain AllReduce Simple: busBw = 4*24 = 96; ratio 0.5 -> 48.
		// lat = 0 + 2*(8-1)*hwLat[NVLINK][CNC][Simple] 2.8 + hwLat[NET][CNC][Simple] 30 = 39.2 + 30 = 69.2.
		{c: AllReduce, a: CollNetChain, p: Simple, lat: 69.2, bw: 48},
		// CollNetDirect AllGather Simple: busBw = ppn*min(bwIntra 30, bwInter 12*0.9 = 10.8) = 86.4,
		// not scaled by nCh; the plugin has iallgather, CollNet is on, 8 local ranks <= 8 heads; AllGather
		// keeps busBw (no ratio). Latency as for AllReduce: 44.
		{c: AllGather, a: CollNetDirect, p: Simple, lat: 44, bw: 86.4},
		// ReduceScatter: no ireducescatter in the plugin -> 0 (step 10).
		{c: ReduceScatter, a: CollNetDirect, p: Simple, lat: 44, zeroBW: true, reasonIn: "ireducescatter"},
		// NVLS AllGather across 2 nodes: step 10 holds for NVLS too; the plugin has iallgather, so
		// it stays: NVLS graph nCh 8, bwIntra 40*0.85*7/8 = 29.75, *(ppn-1)/ppn = 26.03125;
		// interBw 25; bw = 25; busBw = 200; no ratio for AllGather. lat = intraLat 25 + interLat 18 = 43.
		{c: AllGather, a: NVLS, p: Simple, lat: 43, bw: 200},
	})
}

func TestCollNetChainUnsupported(t *testing.T) {
	topo := collNet()
	topo.CollNetChainSupport = false
	checkCells(t, topo, []cellWant{
		{c: AllReduce, a: CollNetChain, p: Simple, lat: 69.2, zeroBW: true, reasonIn: "collnet_chain_support"},
	})
}

// pat is 4 nodes x 1 GPU (ppn 1), cc 90, host net device: PAT's auto rule holds. Tree (PAT's
// graph) and Ring: nCh 4, bwIntra 0, bwInter 10, typeIntra LOC (one GPU per node), typeInter NET.
func pat() capabilities.Topology {
	t := s1()
	t.NNodes, t.NRanks, t.MaxLocalRanks, t.LocalRanks = 4, 4, 1, 1
	t.NVLSSupport, t.NVSCount, t.CommNChannels, t.NVLSChannels = false, 0, 8, 0
	g := capabilities.Graph{NChannels: 4, BwInter: 10, TypeIntra: capabilities.PathLOC,
		TypeInter: capabilities.PathNET, SameChannels: true}
	t.Graphs = capabilities.Graphs{Tree: g, Ring: g}
	return t
}

func TestPAT(t *testing.T) {
	tb := checkCells(t, pat(), []cellWant{
		// PAT AllGather Simple: bw = bwInter 10 (4 nodes > 2); busBw = 4*10 = 40; *0.75 = 30; no ratio.
		// lat = base 8.0 + log2i(4)*(interLat/3.5) + nRanks*2.8, with interLat = hwLat[NET][Tree][Simple]
		// = 14 (ppn 1) -> 8 + 2*4 + 11.2 = 27.2.
		{c: AllGather, a: PAT, p: Simple, lat: 27.2, bw: 30},
		{c: ReduceScatter, a: PAT, p: Simple, lat: 27.2, bw: 30},
		// Ring AllGather LL: busBw = 40 -> min(llMaxBws[0][2] 20.4, 20) = 20; ratio 4/3 -> 26.667.
		// lat = 6.6; intra (LOC -> PCI) Ring LL 1.0, net overhead 1.0 -> 1.0; nsteps 3 = nInter 3;
		// interLat = hwLat[NET][Tree][LL] = 5 (ppn 1) -> 6.6 + 0 + 3*5 = 21.6.
		{c: AllGather, a: Ring, p: LL, lat: 21.6, bw: 80.0 / 3},
		// Ring AllGather Simple: busBw 40, ratio 4/3 -> 53.333; lat = 8.4 + 3*14 = 50.4.
		{c: AllGather, a: Ring, p: Simple, lat: 50.4, bw: 160.0 / 3},
		// LL128 gated: typeInter NET > PXN.
		{c: AllGather, a: Ring, p: LL128, lat: 14 + 3*8.5, zeroBW: true, reasonIn: "type_inter NET"},
		// PAT has no AllReduce; PAT LL is not modelled.
		{c: AllReduce, a: PAT, p: Simple, lat: 0, zeroBW: true, reasonIn: "no AllReduce"},
		{c: AllGather, a: PAT, p: LL, lat: 0, zeroBW: true, reasonIn: "Simple only"},
	})
	// Crossovers worked by hand: PAT beats Ring/LL above 5.6/(1/26667 - 1/30000) = 1.344 MB and
	// Ring/Simple below 23.2/(1/30000 - 1/53333) = 1.591 MB. At 1.5 MiB:
	// PAT 27.2 + 1572864/30000 = 79.63; Ring/LL 21.6 + 1572864/26666.7 = 80.58; Ring/Simple
	// 50.4 + 1572864/53333.3 = 79.89.
	n := int64(1572864)
	assert.InDelta(t, 79.6288, tb.Time(AllGather, PAT, Simple, n, 1, 1), 1e-3)
	assert.InDelta(t, 80.5824, tb.Time(AllGather, Ring, LL, n, 1, 1), 1e-3)
	assert.InDelta(t, 79.8912, tb.Time(AllGather, Ring, Simple, n, 1, 1), 1e-3)
}

func TestPATRules(t *testing.T) {
	topo := pat()
	topo.NRanks = 8 // ppn 2: auto mode needs one rank per node
	topo.MaxLocalRanks, topo.LocalRanks = 2, 2
	checkCells(t, topo, []cellWant{{c: AllGather, a: PAT, p: Simple, zeroBW: true, reasonIn: "one rank per node"}})

	topo = pat()
	topo.NetDeviceType = capabilities.NetUnpack
	checkCells(t, topo, []cellWant{{c: AllGather, a: PAT, p: Simple, zeroBW: true, reasonIn: "not host"}})

	topo.Env.PATEnable = capabilities.Setting{Value: "1", Source: capabilities.SourceFlag}
	checkCells(t, topo, []cellWant{{c: AllGather, a: PAT, p: Simple, lat: 27.2, bw: 30}})

	topo = pat()
	topo.Env.PATEnable = capabilities.Setting{Value: "0", Source: capabilities.SourceProcess}
	checkCells(t, topo, []cellWant{{c: AllGather, a: PAT, p: Simple, zeroBW: true, reasonIn: "NCCL_PAT_ENABLE=0"}})

	topo = pat()
	topo.MinCompCap, topo.MaxCompCap = 50, 50
	checkCells(t, topo, []cellWant{{c: AllGather, a: PAT, p: Simple, zeroBW: true, reasonIn: ">= 60"}})
}

// hosts2 is 2 nodes x 8 GPUs, cc 80, ring/tree nCh 8 bwIntra 20 bwInter 12, NVL/PIX.
func hosts2(arch capabilities.CPUArch, vendor capabilities.CPUVendor) capabilities.Topology {
	t := s1()
	t.NNodes, t.NRanks, t.MinCompCap, t.MaxCompCap = 2, 16, 80, 80
	t.CPUArch, t.CPUVendor = arch, vendor
	t.NVLSSupport, t.NVLSChannels, t.CommNChannels = false, 0, 16
	t.Graphs = capabilities.Graphs{Tree: graph(8, 20, 12, capabilities.PathNVL), Ring: graph(8, 20, 12, capabilities.PathNVL)}
	return t
}

func TestHosts(t *testing.T) {
	// AMD x86, 2 nodes: llMaxBws row 1 (AMD), column N2: 22.5; net overhead 2.0.
	// Ring AllReduce LL: bw = bwIntra 20 (2 nodes); busBw = 160 -> min(22.5, 80) = 22.5;
	// ratio 16/30 -> 12.0. lat = 6.6 + (30-2)*max(0.6, 2.0) + 2*2.7 = 6.6 + 56 + 5.4 = 68.0.
	// Ring AllReduce Simple: lat = 8.4 + 28*max(3.4, 3*2.0) + 2*14 = 8.4 + 168 + 28 = 204.4;
	// busBw 160 -> ratio 16/30 -> 85.333.
	checkCells(t, hosts2(capabilities.ArchX86, capabilities.VendorAMD), []cellWant{
		{c: AllReduce, a: Ring, p: LL, lat: 68.0, bw: 12.0},
		{c: AllReduce, a: Ring, p: Simple, lat: 204.4, bw: 160.0 * 16 / 30},
	})
	// Intel x86 and ARM (vendor undefined, NCCL's -1): row 0, N2: 39.0; net overhead 1.0.
	// Ring LL: min(39, 80) = 39 * 16/30 = 20.8; lat = 6.6 + 28*1.0 + 5.4 = 40.0.
	// Simple: 8.4 + 28*max(3.4, 3.0) + 28 = 131.6.
	for _, h := range []struct {
		arch   capabilities.CPUArch
		vendor capabilities.CPUVendor
	}{{capabilities.ArchX86, capabilities.VendorIntel}, {capabilities.ArchARM, capabilities.VendorUndefined}} {
		checkCells(t, hosts2(h.arch, h.vendor), []cellWant{
			{c: AllReduce, a: Ring, p: LL, lat: 40.0, bw: 20.8},
			{c: AllReduce, a: Ring, p: Simple, lat: 131.6, bw: 160.0 * 16 / 30},
		})
	}
	// Mixed vendors read row 1 like AMD, but the net overhead is 1.0 (only x86 AMD gets 2.0).
	checkCells(t, hosts2(capabilities.ArchX86, capabilities.VendorMixed), []cellWant{
		{c: AllReduce, a: Ring, p: LL, lat: 40.0, bw: 12.0},
	})
	// NCCL_NET_OVERHEAD=3000 (ns) -> 3.0 us: LL lat = 6.6 + 28*3 + 5.4 = 96.0.
	topo := hosts2(capabilities.ArchX86, capabilities.VendorIntel)
	topo.Env.NetOverhead = capabilities.Setting{Value: "3000", Source: capabilities.SourceProcess}
	checkCells(t, topo, []cellWant{{c: AllReduce, a: Ring, p: LL, lat: 96.0, bw: 20.8}})

	// POWER, one node: hwLat[PCI][Tree][Simple] takes hwLat[PCI][Ring][Simple] = 5.7, so S3's Tree
	// Simple latency 8.4 + 2*3*4.0 = 32.4 becomes 8.4 + 2*3*5.7 = 42.6. Bandwidth is unchanged (11.04).
	p := s3()
	p.CPUArch, p.CPUVendor = capabilities.ArchPower, capabilities.VendorUndefined
	checkCells(t, p, []cellWant{{c: AllReduce, a: Tree, p: Simple, lat: 42.6, bw: 11.04}})
}

func TestTreePattern3(t *testing.T) {
	topo := s2()
	topo.MaxTreePattern = capabilities.PatternTree
	checkCells(t, topo, []cellWant{
		// Tree Simple: busBw = 8*12.5 = 100 -> min(92, 8*36.0) = 92 -> *0.85 = 78.2 -> *0.5 = 39.1.
		{c: AllReduce, a: Tree, p: Simple, lat: 120.4, bw: 39.1},
		// Tree LL: 92/3.8 = 24.21 -> min(llMaxBws[0][2] 20.4) = 20.4 -> *0.85 = 17.34 -> *0.5 = 8.67.
		{c: AllReduce, a: Tree, p: LL, lat: 35.2, bw: 8.67},
	})
}

func TestLatencyInter(t *testing.T) {
	topo := s2()
	topo.Graphs.Tree.LatencyInter, topo.Graphs.Ring.LatencyInter = 5, 5
	checkCells(t, topo, []cellWant{
		// Tree LL: interLat = 5.0 + 5 = 10; lat = 6.8 + 2*(7*0.6 + log2i(4)*10) = 6.8 + 48.4 = 55.2.
		{c: AllReduce, a: Tree, p: LL, lat: 55.2, bw: 10.2},
		// Tree Simple: interLat = 14 + 5 + 5 (the flush) = 24; lat = 8.4 + 2*(7*4.0 + 2*24) = 160.4.
		{c: AllReduce, a: Tree, p: Simple, lat: 160.4, bw: 46.0},
		// Ring LL: interLat 2.7 + 5 = 7.7; lat = 6.6 + 56*max(0.6, 1.0) + 6*7.7 = 108.8.
		{c: AllReduce, a: Ring, p: LL, lat: 108.8, bw: 10.529},
	})
}

func TestSameChannelsFalse(t *testing.T) {
	topo := s1()
	topo.Graphs.Ring.SameChannels = false
	checkCells(t, topo, []cellWant{
		// Broadcast Ring, nsteps = n = 8 steps: LL 6.6 + 8*0.6 = 11.4; LL128 14.0 + 8*1.9 = 29.2;
		// Simple uses hwLat[NVLINK][Tree][Simple] 4.0: 8.4 + 8*4.0 = 40.4. Bandwidths as S1.
		{c: Broadcast, a: Ring, p: LL, lat: 11.4, bw: 141.0},
		{c: Broadcast, a: Ring, p: LL128, lat: 29.2, bw: 294.4},
		{c: Broadcast, a: Ring, p: Simple, lat: 40.4, bw: 320.0},
		{c: Reduce, a: Ring, p: Simple, lat: 40.4, bw: 320.0},
	})
}

func TestLL128ForcedByEnv(t *testing.T) {
	// S3 gates LL128 off (PXB > NVB). NCCL_PROTO=^LL sets LL128 to 1 (user), skipping the gate.
	topo := s3()
	topo.Env.Proto = capabilities.Setting{Value: "^LL", Source: capabilities.SourceFlag}
	checkCells(t, topo, []cellWant{
		// Ring LL128: busBw = 2*12 = 24 -> min(24*0.92 = 22.08, 2*20) = 22.08 -> ratio 4/6 = 14.72;
		// lat = 14.0 + 6*hwLat[PCI][Ring][LL128] 2.5 = 29.0.
		{c: AllReduce, a: Ring, p: LL128, lat: 29.0, bw: 14.72},
		// Tree LL128: min(22.08, 2*24.0) = 22.08 -> one node: *7/9 = 17.1733 (< 2*20) -> *0.5 = 8.5867;
		// lat = 14.0 + 2*(3*1.9) = 25.4.
		{c: AllReduce, a: Tree, p: LL128, lat: 25.4, bw: 22.08 * 7 / 9 / 2},
		// LL is off by the env, its latency kept (S3's 12.60).
		{c: AllReduce, a: Ring, p: LL, lat: 12.6, zeroBW: true, reasonIn: "NCCL_PROTO"},
	})
	// Auto mode gates it, naming the rule.
	checkCells(t, s3(), []cellWant{{c: AllReduce, a: Ring, p: LL128, lat: 29.0, zeroBW: true, reasonIn: "type_intra PXB"}})
}

func TestLL128Gates(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*capabilities.Topology)
		want string // "" when LL128 stays on
	}{
		{"cudart 11.8 two-rank ring", func(t *capabilities.Topology) {
			t.NRanks, t.LocalRanks, t.MaxLocalRanks, t.CUDARTVersion = 2, 2, 2, 11080
		}, "CUDA runtime 11.8"},
		{"mixed below 90", func(t *capabilities.Topology) { t.MinCompCap, t.MaxCompCap = 80, 86 }, "mixed"},
		{"mixed from 90 allowed (2.30)", func(t *capabilities.Topology) { t.MinCompCap, t.MaxCompCap = 90, 100 }, ""},
		{"volta-", func(t *capabilities.Topology) { t.MinCompCap, t.MaxCompCap = 60, 60 }, "< 70"},
		{"PXN allowed with C2C on sm_90", func(t *capabilities.Topology) { t.Graphs.Ring.TypeInter = capabilities.PathPXN }, ""},
		{"PXN refused without C2C", func(t *capabilities.Topology) {
			t.Graphs.Ring.TypeInter = capabilities.PathPXN
			t.Env.LL128C2C = capabilities.Setting{Value: "0", Source: capabilities.SourceProcess}
		}, "type_inter PXN > PXB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo := s1()
			tc.edit(&topo)
			tb, err := mustBuild(&topo)
			require.NoError(t, err)
			if tc.want == "" {
				assert.Greater(t, tb.BW[AllReduce][Ring][LL128], float32(0))
				return
			}
			assert.Zero(t, tb.BW[AllReduce][Ring][LL128])
			assert.Contains(t, tb.Reason[AllReduce][Ring][LL128], tc.want)
		})
	}
}

func TestNVLSTreeBlackwell(t *testing.T) {
	// 2 nodes x 8 GPUs, cc 100, NVLS graph nCh 8 bw 40/25:
	// intraBw = 40*0.74*7/8 = 25.9, AllReduce *2 = 51.8; interBw = 25*2 (NVLSTree, <= 2 nodes) = 50;
	// bw = min(51.8, 50, perChMaxNVLSTreeBws[3][1] 96) = 50; busBw = 400; ratio 16/30 -> 213.333.
	// lat = 0 + intraLat (NVL) 25 + 2*log2i(2)*hwLat[NET][NVLSTree][Simple] 20.9 = 66.8.
	topo := s2()
	topo.NNodes, topo.NRanks, topo.MinCompCap, topo.MaxCompCap = 2, 16, 100, 100
	tb := checkCells(t, topo, []cellWant{{c: AllReduce, a: NVLSTree, p: Simple, lat: 66.8, bw: 6400.0 / 30}})
	// Time at 1 MiB with the correction planner supplies (bucket 14, Simple 0.5):
	// 66.8 + 1048576/(1000*213.333*0.5) = 76.6304.
	assert.InDelta(t, 76.6304, tb.Time(AllReduce, NVLSTree, Simple, 1<<20, 1, 0.5), 1e-3)
}

func TestFP8Penalty(t *testing.T) {
	assert.Equal(t, float32(1024*3), FP8Penalty(3, Ring, capabilities.Fp8E4M3, 9))
	assert.Equal(t, float32(-1024), FP8Penalty(-1, Ring, capabilities.Fp8E5M2, 32))
	assert.Equal(t, float32(3), FP8Penalty(3, Ring, capabilities.Fp8E4M3, 8), "8 ranks: no penalty")
	assert.Equal(t, float32(3), FP8Penalty(3, Tree, capabilities.Fp8E4M3, 32), "not a ring")
	assert.Equal(t, float32(3), FP8Penalty(3, Ring, capabilities.Bfloat16, 32), "not fp8")
}

func TestPipeOps(t *testing.T) {
	topo := s1()
	tb, err := mustBuild(&topo)
	require.NoError(t, err)
	// latCount: Ring 9, others ceil(9/8) = 2.
	// Ring LL: 15.0*9 + 4096/80571.4 = 135.0508; Tree LL: 15.2*2 + 4096/(38736.8*0.7) = 30.5511.
	assert.InDelta(t, 135.0508, tb.Time(AllReduce, Ring, LL, 4096, 9, 1), 1e-3)
	assert.InDelta(t, 30.5511, tb.Time(AllReduce, Tree, LL, 4096, 9, 0.7), 1e-3)
	assert.InDelta(t, 15.2*2+4096/38736.8, tb.Time(AllReduce, Tree, LL, 4096, 16, 1), 1e-3)
	assert.InDelta(t, 15.2*3+4096/38736.8, tb.Time(AllReduce, Tree, LL, 4096, 17, 1), 1e-3)
}

func TestRingPlateau(t *testing.T) {
	// S2 Ring Simple AllReduce: plateau from nBytes/(16*32) >= 64, i.e. 32768 bytes: lat 282.8*1.4.
	topo := s2()
	tb, err := mustBuild(&topo)
	require.NoError(t, err)
	bw := 51.6129
	assert.InDelta(t, 282.8+32767/(1000*bw), tb.Time(AllReduce, Ring, Simple, 32767, 1, 1), 1e-3)
	assert.InDelta(t, 282.8*1.4+32768/(1000*bw), tb.Time(AllReduce, Ring, Simple, 32768, 1, 1), 1e-3)
	// Below sm_80 the factor is 1.9.
	topo.MinCompCap, topo.MaxCompCap = 70, 70
	tb, err = mustBuild(&topo)
	require.NoError(t, err)
	lat := float64(tb.Lat[AllReduce][Ring][Simple])
	assert.InDelta(t, lat*1.9+1e6/(1000*float64(tb.BW[AllReduce][Ring][Simple])), tb.Time(AllReduce, Ring, Simple, 1e6, 1, 1), 1e-2)
	// One node: no plateau.
	one := s1()
	tb, err = mustBuild(&one)
	require.NoError(t, err)
	assert.InDelta(t, 56.0+1e6/(1000*182.857), tb.Time(AllReduce, Ring, Simple, 1e6, 1, 1), 1e-3)
}

func TestConstantsApplyAndNVLSSkips(t *testing.T) {
	// An NVLS graph with one channel is not modelled (lat and bw stay 0).
	topo := s1()
	topo.Graphs.NVLS.NChannels = 1
	checkCells(t, topo, []cellWant{{c: AllReduce, a: NVLS, p: Simple, lat: 0, zeroBW: true, reasonIn: "fewer than 2"}})
}
