package capabilities

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEnumNames(t *testing.T) {
	// NCCL's indices and names (reference §0).
	assert.Equal(t, []string{"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"},
		[]string{Broadcast.String(), Reduce.String(), AllGather.String(), ReduceScatter.String(), AllReduce.String()})
	var logs, envs []string
	for a := Algo(0); a < NumAlgos; a++ {
		logs, envs = append(logs, a.String()), append(envs, a.EnvName())
	}
	assert.Equal(t, []string{"TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"}, logs)
	assert.Equal(t, []string{"Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"}, envs)
	assert.Equal(t, "SIMPLE", Simple.String())
	assert.Equal(t, "Simple", Simple.EnvName())
	assert.Equal(t, "LL128", LL128.EnvName())
	for _, s := range []string{Coll(7).String(), Algo(-1).String(), Algo(9).EnvName(), Proto(3).String(),
		Proto(5).EnvName(), Op(9).String(), Dtype(40).String(), PathType(20).String(), CPUArch(7).String(),
		CPUVendor(9).String(), NetDeviceType(4).String()} {
		assert.Contains(t, s, "(", "out-of-range values print their number")
	}
	assert.Equal(t, "undefined", VendorUndefined.String())
	assert.Equal(t, "arm", ArchARM.String())
	assert.Equal(t, "unpack", NetUnpack.String())
	assert.Equal(t, "PXN", PathPXN.String())
	assert.Equal(t, "premulsum", PreMulSum.String())
	assert.Equal(t, "bfloat16", Bfloat16.String())
}

func TestParseEnums(t *testing.T) {
	for in, want := range map[string]Coll{"allreduce": AllReduce, "all_reduce": AllReduce, "AllGather": AllGather,
		" broadcast ": Broadcast, "reduce_scatter": ReduceScatter, "REDUCE": Reduce} {
		got, err := ParseColl(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]Algo{"tree": Tree, "COLLNET_DIRECT": CollNetDirect, "collnetchain": CollNetChain,
		"nvls_tree": NVLSTree, "NVLSTree": NVLSTree, "pat": PAT} {
		got, err := ParseAlgo(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]Proto{"ll": LL, "LL128": LL128, "simple": Simple} {
		got, err := ParseProto(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]Op{"sum": Sum, "PROD": Prod, "min": Min, "max": Max, "avg": Avg, "premulsum": PreMulSum, "mulsum": PreMulSum} {
		got, err := ParseOp(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]Dtype{"half": Float16, "float": Float32, "double": Float64, "f8e4m3": Fp8E4M3,
		"f8e5m2": Fp8E5M2, "bfloat16": Bfloat16, "uint64": Uint64, "int8": Int8} {
		got, err := ParseDtype(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for in, want := range map[string]PathType{"loc": PathLOC, "NVB": PathNVB, "dis": PathDIS} {
		got, err := ParsePathType(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	a, err := ParseCPUArch("power")
	require.NoError(t, err)
	assert.Equal(t, ArchPower, a)
	v, err := ParseCPUVendor("zhaoxin")
	require.NoError(t, err)
	assert.Equal(t, VendorZhaoxin, v)
	n, err := ParseNetDeviceType("cuda")
	require.NoError(t, err)
	assert.Equal(t, NetCUDA, n)

	for _, f := range []func() error{
		func() error { _, err := ParseColl("alltoall"); return err },
		func() error { _, err := ParseAlgo("mesh"); return err },
		func() error { _, err := ParseProto("LL64"); return err },
		func() error { _, err := ParseOp("xor"); return err },
		func() error { _, err := ParseDtype("int4"); return err },
		func() error { _, err := ParsePathType("NVX"); return err },
		func() error { _, err := ParseCPUArch("riscv"); return err },
		func() error { _, err := ParseCPUVendor("via"); return err },
		func() error { _, err := ParseNetDeviceType("rdma"); return err },
	} {
		assert.Error(t, f())
	}
}

func TestDtypeFacts(t *testing.T) {
	sizes := map[Dtype]int{Int8: 1, Uint8: 1, Fp8E4M3: 1, Fp8E5M2: 1, Float16: 2, Bfloat16: 2, Int32: 4,
		Uint32: 4, Float32: 4, Int64: 8, Uint64: 8, Float64: 8}
	for d, s := range sizes {
		assert.Equal(t, s, d.Size(), d.String())
	}
	assert.True(t, Float16.IsFloat())
	assert.True(t, Fp8E5M2.IsFloat())
	assert.False(t, Uint64.IsFloat())
	assert.True(t, Fp8E4M3.IsFP8())
	assert.False(t, Bfloat16.IsFP8())
}

func TestTopologyHelpers(t *testing.T) {
	tp := s1Topology(t)
	assert.Equal(t, 8.0, tp.PPN())
	for cc, want := range map[int]int{70: 0, 80: 1, 89: 1, 90: 2, 100: 3, 120: 3} {
		tp.MinCompCap = cc
		assert.Equal(t, want, tp.CompCapIndex(), cc)
	}
	for nodes, want := range map[int]int{1: 0, 2: 1, 3: 2, 4: 2, 64: 2} {
		tp.NNodes = nodes
		assert.Equal(t, want, tp.ScaleIndex(), nodes)
	}
	g := &tp.Graphs
	assert.Same(t, &g.Tree, g.For(PAT))
	assert.Same(t, &g.NVLS, g.For(NVLSTree))
	assert.Same(t, &g.CollNetChain, g.For(CollNetChain))
	assert.Same(t, &g.CollNetDirect, g.For(CollNetDirect))
	assert.Same(t, &g.Ring, g.For(Ring))

	strong := Env{Algo: Setting{Value: "ring", Source: SourceFlag}}
	strong.Overlay(Env{Algo: Setting{Value: "tree", Source: SourceTopology}, Proto: Setting{Value: "ll", Source: SourceTopology}})
	assert.Equal(t, "ring", strong.Algo.Value)
	assert.Equal(t, SourceTopology, strong.Proto.Source)
	assert.Nil(t, strong.Var("NCCL_BOGUS"))
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Topology)
		want string
	}{
		{func(t *Topology) { t.NNodes = 0 }, "n_nodes"},
		{func(t *Topology) { t.NRanks = 0 }, "n_ranks"},
		{func(t *Topology) { t.MaxCompCap = 80 }, "max_comp_cap"},
		{func(t *Topology) { t.MaxTreePattern = 0 }, "max_tree_pattern"},
		{func(t *Topology) { t.NVSCount = -1 }, "nvs_count"},
		{func(t *Topology) { t.LocalRanks = 9 }, "local_ranks"},
		{func(t *Topology) { t.CommNChannels = 65 }, "comm_n_channels"},
		{func(t *Topology) { t.Graphs.Ring.NChannels = 65 }, "graphs.ring.n_channels"},
		{func(t *Topology) { t.Graphs.Tree.BwInter = -1 }, "graphs.tree"},
		{func(t *Topology) { t.Graphs.NVLS.LatencyInter = inf() }, "graphs.nvls"},
	} {
		tp := s1Topology(t)
		tc.edit(&tp)
		assert.ErrorContains(t, tp.Validate(), tc.want)
	}
}

func inf() float64 {
	z := 0.0
	return 1 / z
}

// TestLL128GateAndPAT covers the gate's rules one by one at this package's level.
func TestLL128GateAndPAT(t *testing.T) {
	tp := s1Topology(t)
	assert.Empty(t, ll128Gate(&tp, AllReduce, Ring, true))
	tp.Graphs.Ring.TypeInter = PathSYS
	assert.Contains(t, ll128Gate(&tp, AllReduce, Ring, true), "type_inter SYS > PXN")
	tp = s1Topology(t)
	tp.MinCompCap, tp.MaxCompCap = 80, 90
	assert.Contains(t, ll128Gate(&tp, AllReduce, Ring, true), "mixed")
	tp.MinCompCap, tp.MaxCompCap = 60, 60
	assert.Contains(t, ll128Gate(&tp, AllReduce, Ring, true), "< 70")
	tp = s1Topology(t)
	tp.NRanks, tp.CUDARTVersion = 2, 11080
	assert.Contains(t, ll128Gate(&tp, AllReduce, Ring, true), "11.8")
	assert.Empty(t, ll128Gate(&tp, AllGather, Ring, true), "the 11.8 rule is AllReduce-only")
	assert.Empty(t, ll128Gate(&tp, AllReduce, Tree, true), "the 11.8 rule is Ring-only")

	tp = s1Topology(t)
	tp.NNodes, tp.NRanks, tp.MaxLocalRanks, tp.LocalRanks = 4, 4, 1, 1
	on, why, err := PATEnabled(&tp)
	require.NoError(t, err)
	assert.True(t, on, why)
	tp.NetDeviceType = NetCUDA
	on, why, _ = PATEnabled(&tp)
	assert.False(t, on)
	assert.Contains(t, why, "not host")
	tp.Env.PATEnable = Setting{Value: "1", Source: SourceFlag}
	on, _, _ = PATEnabled(&tp)
	assert.True(t, on, "an explicit value other than 2 is used as is")
	tp.Env.PATEnable = Setting{Value: "0", Source: SourceFlag}
	on, why, _ = PATEnabled(&tp)
	assert.False(t, on)
	assert.Contains(t, why, "NCCL_PAT_ENABLE=0")
	tp.MinCompCap = 50
	on, why, _ = PATEnabled(&tp)
	assert.False(t, on)
	assert.Contains(t, why, ">= 60")
}
