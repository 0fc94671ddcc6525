package capabilities

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func s1Topology(t *testing.T) Topology {
	t.Helper()
	tp, err := LoadTopology("testdata/topology/s1.toml")
	require.NoError(t, err)
	return tp
}

func TestEnabledForcedDisables(t *testing.T) {
	tp := s1Topology(t)
	m, err := Enabled(&tp)
	require.NoError(t, err)
	for c := Coll(0); c < NumColls; c++ {
		assert.Contains(t, m.Reason[c][NVLSTree][Simple], "more than one node")
		assert.Contains(t, m.Reason[c][CollNetDirect][Simple], "collnet_enable")
		assert.Contains(t, m.Reason[c][CollNetChain][LL], "collnet_enable")
		assert.True(t, m.Legal(c, NVLS, Simple), "single-node NVLS needs no CollNet")
		assert.True(t, m.Legal(c, Ring, LL128), "NVL/PIX on sm_90 passes the LL128 gate")
	}
	tp.NNodes, tp.NRanks = 2, 16
	m, err = Enabled(&tp)
	require.NoError(t, err)
	assert.Contains(t, m.Reason[AllReduce][NVLS][Simple], "multi-node NVLS")
	assert.True(t, m.Legal(AllReduce, NVLSTree, Simple))

	tp.CollNetEnable = true
	tp.NVSCount = 0
	m, err = Enabled(&tp)
	require.NoError(t, err)
	assert.Contains(t, m.Reason[AllReduce][CollNetDirect][Simple], "NVSwitch")
	assert.Contains(t, m.Reason[AllReduce][CollNetChain][Simple], "collnet_chain_support")
	assert.True(t, m.Legal(AllReduce, NVLS, Simple))
}

// TestEnabledEnv: env matrices off, forced disables win over env, user LL128 skips the gate.
func TestEnabledEnv(t *testing.T) {
	tp := s1Topology(t)
	tp.Env.Algo = Setting{Value: "allreduce:nvlstree,ring", Source: SourceFlag}
	tp.Env.Proto = Setting{Value: "^LL", Source: SourceProcess}
	tp.Graphs.Ring.TypeIntra = PathSYS // would gate LL128 in auto mode
	m, err := Enabled(&tp)
	require.NoError(t, err)
	assert.Contains(t, m.Reason[AllReduce][Tree][Simple], `NCCL_ALGO="allreduce:nvlstree,ring" (flag)`)
	assert.Contains(t, m.Reason[AllReduce][NVLSTree][Simple], "more than one node", "forced disable beats env")
	assert.True(t, m.Legal(AllReduce, Ring, LL128), "user LL128 skips the hardware gate")
	assert.Contains(t, m.Reason[AllReduce][Ring][LL], `NCCL_PROTO="^LL" (process)`)
	assert.True(t, m.Legal(Broadcast, Tree, Simple), "other functions keep defaults")
}

func TestSupport(t *testing.T) {
	tp := s1Topology(t)
	rows := Support(&tp, AllReduce, Sum, Float32)
	assert.Empty(t, rows[NVLS])
	assert.Contains(t, rows[CollNetDirect], "collnet_enable")

	for _, tc := range []struct {
		c    Coll
		op   Op
		dt   Dtype
		algo Algo
		want string // "" when legal
	}{
		{AllReduce, Sum, Float64, NVLS, ""},
		{AllReduce, Max, Float32, NVLS, "NVLS does not reduce max on float32"},
		{AllReduce, Max, Bfloat16, NVLS, ""},
		{AllReduce, Min, Int32, NVLSTree, ""},
		{AllReduce, Prod, Int32, NVLS, "prod"},
		{AllReduce, Avg, Float16, NVLS, "avg"},
		{AllReduce, Sum, Int8, NVLS, "int8"},
		{AllReduce, Sum, Uint8, NVLS, "uint8"},
		{AllGather, Prod, Int8, NVLS, ""}, // AllGather ignores the op check
		{ReduceScatter, Avg, Float32, PAT, "PAT ReduceScatter does not support avg"},
		{ReduceScatter, PreMulSum, Float32, PAT, "premulsum"},
		{ReduceScatter, Sum, Float32, PAT, ""},
		{AllGather, Avg, Float32, PAT, ""},
	} {
		got := Support(&tp, tc.c, tc.op, tc.dt)[tc.algo]
		if tc.want == "" {
			assert.Empty(t, got, "%v %v %v %v", tc.c, tc.op, tc.dt, tc.algo)
		} else {
			assert.Contains(t, got, tc.want, "%v %v %v %v", tc.c, tc.op, tc.dt, tc.algo)
		}
	}

	// fp8 reductions need sm_90; AllGather does not reduce.
	tp.MinCompCap, tp.MaxCompCap = 80, 80
	assert.Contains(t, Support(&tp, AllReduce, Sum, Fp8E4M3)[Ring], "fp8 reductions")
	assert.Empty(t, Support(&tp, AllGather, Sum, Fp8E5M2)[Ring])

	// NVLS beyond 32 local ranks: only AllReduce.
	tp = s1Topology(t)
	tp.LocalRanks, tp.MaxLocalRanks = 36, 36
	assert.Contains(t, Support(&tp, AllGather, Sum, Float32)[NVLS], "32 local ranks")
	assert.Empty(t, Support(&tp, AllReduce, Sum, Float32)[NVLS])
	tp.NVLSSupport = false
	assert.Contains(t, Support(&tp, AllReduce, Sum, Float32)[NVLS], "nvls_support")
}

func TestSupportCollNet(t *testing.T) {
	tp := s1Topology(t)
	tp.NNodes, tp.NRanks = 2, 16
	tp.CollNetEnable = true
	tp.CollNetSupport = []OpDtype{{Sum, Float32}, {Max, Int32}}
	rows := Support(&tp, AllReduce, Avg, Float32) // avg counts as sum for CollNet ...
	assert.Empty(t, rows[CollNetDirect])
	assert.Contains(t, rows[NVLS], "avg", "... but not for NVLS")
	assert.Empty(t, Support(&tp, AllReduce, Sum, Float32)[NVLS])
	rows = Support(&tp, AllReduce, Sum, Float16)
	assert.Contains(t, rows[CollNetChain], "CollNet plugin does not reduce sum:float16")
	assert.Contains(t, rows[NVLS], "multi-node NVLS needs CollNet support")
	assert.Empty(t, Support(&tp, AllGather, Sum, Float16)[CollNetDirect], "AllGather does not consult the matrix")
	assert.Empty(t, Support(&tp, Reduce, Max, Int32)[CollNetDirect])
	tp.MaxLocalRanks, tp.LocalRanks = 9, 9
	assert.Contains(t, Support(&tp, AllReduce, Sum, Float32)[CollNetDirect], "at most 8 local ranks")
}

func TestPATEnabled(t *testing.T) {
	tp := s1Topology(t)
	on, why, err := PATEnabled(&tp)
	require.NoError(t, err)
	assert.False(t, on)
	assert.Contains(t, why, "one rank per node")
	tp.Env.PATEnable = Setting{Value: "bad", Source: SourceFlag}
	_, _, err = PATEnabled(&tp)
	assert.ErrorContains(t, err, "NCCL_PAT_ENABLE")
}

func TestEnvInt(t *testing.T) {
	v, err := EnvInt(Setting{}, "X", 7)
	require.NoError(t, err)
	assert.Equal(t, 7, v)
	v, err = EnvInt(Setting{Value: " 0x10 ", Source: SourceProcess}, "X", 7)
	require.NoError(t, err)
	assert.Equal(t, 16, v)
	_, err = EnvInt(Setting{Value: "1.5", Source: SourceProcess}, "X", 7)
	assert.ErrorContains(t, err, `X="1.5" (process)`)
}
