package node

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// emulShapes are the (nodes, ranks per node) shapes the legality tests walk: one node of 1..4 ranks
// and of 33 (above NVLS's 32 local ranks for AllGather/ReduceScatter), 2..4 nodes of 1..3.
var emulShapes = [][2]int{{1, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 33}, {2, 1}, {2, 2}, {2, 3}, {3, 1}, {3, 2}, {4, 1}, {4, 2}}

// cpuPlanner is the planner for the cpu table n at nodes x rpn, as every command builds it.
func cpuPlanner(t *testing.T, n *tables.Node, nodes, rpn int) *planner.Planner {
	t.Helper()
	tp, err := capabilities.FromNodeShape(n, nodes, rpn)
	require.NoError(t, err, "%d x %d", nodes, rpn)
	cfg, err := PlannerConfig(n, &tp)
	require.NoError(t, err)
	pl, err := planner.New(&tp, cfg)
	require.NoError(t, err)
	return pl
}

// modelException says why the model and the engine disagree by design on a cell ("" when they must
// agree).
func modelException(c costmodel.Coll, a costmodel.Algo, p costmodel.Proto, n int, dt kernels.Dtype) string {
	reduces := c == costmodel.AllReduce || c == costmodel.Reduce || c == costmodel.ReduceScatter
	switch {
	case n == 1:
		// NCCL builds no model for one rank and prices only Ring/Simple (a local copy); the
		// engine runs any pin it implements on one rank.
		return "one rank"
	case p == costmodel.LL128 && (a == costmodel.Ring || a == costmodel.Tree):
		// The LL128 auto gate keeps NCCL's rule (compute capability 60 < 70, type_intra PHB):
		// the engine runs LL128 when pinned; the model does not price it on this table.
		return "LL128 auto gate"
	case (dt == kernels.Fp8E4M3 || dt == kernels.Fp8E5M2) && reduces:
		// NCCL refuses fp8 reductions below compute capability 90 on every algorithm; the CPU
		// engine reduces fp8 on Ring, Tree and PAT.
		return "fp8 below sm_90"
	}
	return ""
}

// TestCPUTableLegalityIsTheEngines: on the cpu table (base and with its fitted overlay), for every
// collective x algorithm x protocol x (nodes, ranks per node) x dtype x op, the planner's menu
// finds the cell legal (no reason, bandwidth > 0) exactly where engine.PinError is nil. The
// exceptions by design are modelException's, each checked to be a real disagreement (the model
// refuses, the engine runs). NVLS, NVLS_TREE, PAT and CollNet are legal where the engine runs them.
func TestCPUTableLegalityIsTheEngines(t *testing.T) {
	base, err := tables.LoadBase("cpu")
	require.NoError(t, err)
	withOverlay, err := tables.Load("cpu")
	require.NoError(t, err)
	require.NotEmpty(t, withOverlay.Overlay)
	legalNew := map[string]int{} // new paths' legal cells, by "algo nodes x rpn"
	for _, tc := range []struct {
		name string
		n    *tables.Node
	}{{"base", base}, {"overlay", withOverlay}} {
		for _, sh := range emulShapes {
			nodes, rpn := sh[0], sh[1]
			nRanks := nodes * rpn
			pl := cpuPlanner(t, tc.n, nodes, rpn)
			for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
				for dt := kernels.Dtype(0); dt < kernels.NumDtypes; dt++ {
					for op := kernels.Op(0); op < kernels.NumOps; op++ {
						m, err := pl.Menu(planner.Class{Coll: c, Op: capabilities.Op(op), Dtype: capabilities.Dtype(dt), PipeOps: 1})
						require.NoError(t, err)
						for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
							for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
								cell := m.Cells[a][p]
								model := cell.Reason == "" && cell.BWGBps > 0
								pinErr := engine.PinError(c, a, p, nRanks, rpn, dt, op)
								eng := pinErr == nil
								what := fmt.Sprintf("%s: %v/%v/%v %v %v at %d x %d: model %q, engine %v",
									tc.name, c, a, p, dt, op, nodes, rpn, cell.Reason, pinErr)
								if why := modelException(c, a, p, nRanks, dt); why != "" {
									if model != eng {
										assert.True(t, eng && !model, "exception %q is the model refusing what the engine runs: %s", why, what)
									}
									continue
								}
								if !assert.Equal(t, eng, model, what) {
									continue
								}
								if model && (a == costmodel.NVLS || a == costmodel.NVLSTree || a == costmodel.PAT) && tc.name == "base" {
									legalNew[fmt.Sprintf("%v %d x %d", a, nodes, rpn)]++
								}
							}
						}
					}
				}
			}
		}
	}
	// The new paths are legal where the engine runs them (the shapes calibrate sweeps), and only
	// there: NVLS in one node of 2 or more, NVLS_TREE on 2 or more nodes of 2 or more, PAT at one
	// rank per node on 2 or more nodes.
	for _, want := range []string{"NVLS 1 x 2", "NVLS 1 x 3", "NVLS 1 x 4", "NVLS 1 x 33",
		"NVLS_TREE 2 x 2", "NVLS_TREE 2 x 3", "NVLS_TREE 3 x 2", "NVLS_TREE 4 x 2",
		"PAT 2 x 1", "PAT 3 x 1", "PAT 4 x 1"} {
		assert.Positive(t, legalNew[want], want)
	}
	assert.Len(t, legalNew, 11, "no other shape has a legal new path: %v", legalNew)
}

// withoutEmulation returns a copy of the cpu table n without what the emulation adds: no
// [emulation], no nvls or collnet graphs or nvls_channels, no collnet_support, no [constants] rows
// for NVLS, NVLS_TREE and CollNet (the table has no other constants). That is the table as it was
// before the emulated paths.
func withoutEmulation(t *testing.T, n *tables.Node) *tables.Node {
	t.Helper()
	c := *n
	c.Emulation = nil
	c.Scale = map[string]tables.Scale{}
	for k, s := range n.Scale {
		s.NVLSChannels = 0
		g := map[string]tables.Graph{}
		for name, gr := range s.Graphs {
			if name != "nvls" && name != "collnet_direct" && name != "collnet_chain" {
				g[name] = gr
			}
		}
		s.Graphs = g
		c.Scale[k] = s
	}
	c.Node.CollNetSupport = nil
	require.NotNil(t, n.Constants)
	require.Equal(t, []string{"collnet_chain", "collnet_direct"}, keysOf(n.Constants.BaseLatencies))
	require.Equal(t, []string{"pci"}, keysOf(n.Constants.HWLatencies))
	require.Equal(t, []string{"nvls", "nvls_tree"}, keysOf(n.Constants.HWLatencies["pci"]))
	k := *n.Constants
	k.HWLatencies, k.BaseLatencies = nil, nil
	require.Equal(t, tables.Constants{}, k, "no other constant")
	c.Constants = nil
	return &c
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestEmulationKeepsRingAndTree: the emulation keys change no Ring or Tree price of the cpu table:
// at every (nodes, ranks per node) shape, for every collective and protocol, the latency, the
// bandwidth, the reason and the time at 8 B..1 GiB (the plateau and ceilings included) are those of
// the table without them, and so are the compute capability and the LL128 auto gate's verdicts.
func TestEmulationKeepsRingAndTree(t *testing.T) {
	n, err := tables.LoadBase("cpu")
	require.NoError(t, err)
	require.NotNil(t, n.Emulation)
	require.True(t, n.Emulation.MulticastSwitch)
	old := withoutEmulation(t, n)
	for _, sh := range emulShapes {
		nodes, rpn := sh[0], sh[1]
		pNew, pOld := cpuPlanner(t, n, nodes, rpn), cpuPlanner(t, old, nodes, rpn)
		assert.Equal(t, pOld.Topology().MinCompCap, pNew.Topology().MinCompCap)
		for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
			cls := planner.Class{Coll: c, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
			mNew, err := pNew.Menu(cls)
			require.NoError(t, err)
			mOld, err := pOld.Menu(cls)
			require.NoError(t, err)
			for _, a := range []costmodel.Algo{costmodel.Ring, costmodel.Tree} {
				for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
					what := fmt.Sprintf("%v/%v/%v at %d x %d", c, a, p, nodes, rpn)
					assert.Equal(t, mOld.Cells[a][p], mNew.Cells[a][p], what)
					for b := int64(8); b <= 1<<30; b *= 8 {
						assert.Equal(t, mOld.Time(a, p, b), mNew.Time(a, p, b), "%s at %d B", what, b)
					}
				}
			}
		}
	}
}

// TestReducingNetworkLegality: on a test table that declares an emulated reducing network
// (testdata/emulated-collnet.toml), CollNet is legal as collnet_enable = true makes it: at 2 nodes
// of 2, CollNetDirect and CollNetChain AllReduce with Simple for the (op, dtype) pairs of
// collnet_support, not LL or LL128, not prod; multi-node NVLS (which NCCL runs only with CollNet)
// stays off on an emulated network, which does not run it; CollNetDirect needs the emulated switch
// (nvs_count is 0); without reducing_network every CollNet cell is off. The cpu table declares the
// network (the engine's aggregation endpoint), so its CollNet cells are legal.
func TestReducingNetworkLegality(t *testing.T) {
	n, err := tables.LoadFile("testdata/emulated-collnet.toml")
	require.NoError(t, err)
	noSwitch := *n
	noSwitch.Emulation = &tables.Emulation{ReducingNetwork: true}
	noNet := *n
	noNet.Emulation = &tables.Emulation{MulticastSwitch: true, NVLSEfficiency: 0.5}
	cpu, err := tables.LoadBase("cpu")
	require.NoError(t, err)
	const (
		legal             = ""
		notEnable         = "CollNet not enabled (collnet_enable = false)"
		noNVLSOverCollNet = "multi-node NVLS: the emulated reducing network does not run NVLS over CollNet"
	)
	sumF32 := [2]int{int(capabilities.Sum), int(capabilities.Float32)}
	prodF32 := [2]int{int(capabilities.Prod), int(capabilities.Float32)}
	maxI32 := [2]int{int(capabilities.Max), int(capabilities.Int32)}
	for _, tc := range []struct {
		name  string
		n     *tables.Node
		nodes int
		a     costmodel.Algo
		p     costmodel.Proto
		opDt  [2]int
		want  string
	}{
		{"direct", n, 2, costmodel.CollNetDirect, costmodel.Simple, sumF32, legal},
		{"chain", n, 2, costmodel.CollNetChain, costmodel.Simple, sumF32, legal},
		{"direct max int32", n, 2, costmodel.CollNetDirect, costmodel.Simple, maxI32, legal},
		{"direct LL", n, 2, costmodel.CollNetDirect, costmodel.LL, sumF32, "COLLNET_DIRECT is Simple only"},
		{"chain LL128", n, 2, costmodel.CollNetChain, costmodel.LL128, sumF32, "COLLNET_CHAIN is Simple only"},
		{"direct prod", n, 2, costmodel.CollNetDirect, costmodel.Simple, prodF32, "CollNet plugin does not reduce prod:float32"},
		// NCCL runs multi-node NVLS over CollNet; the engine's emulated network does not.
		{"multi-node NVLS", n, 2, costmodel.NVLS, costmodel.Simple, sumF32, noNVLSOverCollNet},
		{"multi-node NVLS prod", n, 2, costmodel.NVLS, costmodel.Simple, prodF32, "NVLS does not reduce prod on float32"},
		{"direct without the switch", &noSwitch, 2, costmodel.CollNetDirect, costmodel.Simple, sumF32, "CollNetDirect needs an NVSwitch (nvs_count = 0)"},
		{"chain without the switch", &noSwitch, 2, costmodel.CollNetChain, costmodel.Simple, sumF32, legal},
		{"direct without the network", &noNet, 2, costmodel.CollNetDirect, costmodel.Simple, sumF32, notEnable},
		{"chain without the network", &noNet, 2, costmodel.CollNetChain, costmodel.Simple, sumF32, notEnable},
		{"multi-node NVLS without the network", &noNet, 2, costmodel.NVLS, costmodel.Simple, sumF32, "multi-node NVLS needs CollNet support: " + notEnable},
		{"cpu direct", cpu, 2, costmodel.CollNetDirect, costmodel.Simple, sumF32, legal},
		{"cpu chain", cpu, 2, costmodel.CollNetChain, costmodel.Simple, sumF32, legal},
		{"cpu direct prod", cpu, 2, costmodel.CollNetDirect, costmodel.Simple, prodF32, "CollNet plugin does not reduce prod:float32"},
		{"cpu multi-node NVLS", cpu, 2, costmodel.NVLS, costmodel.Simple, sumF32, noNVLSOverCollNet},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl := cpuPlanner(t, tc.n, tc.nodes, 0)
			m, err := pl.Menu(planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Op(tc.opDt[0]), Dtype: capabilities.Dtype(tc.opDt[1]), PipeOps: 1})
			require.NoError(t, err)
			c := m.Cells[tc.a][tc.p]
			assert.Equal(t, tc.want, c.Reason)
			if tc.want == legal {
				assert.Positive(t, c.BWGBps)
				assert.Positive(t, m.Time(tc.a, tc.p, 1<<20))
			}
		})
	}
	// The test table's graphs, the compute capability, LL128's gate stay the host's.
	tp, err := capabilities.FromNode(n, 2)
	require.NoError(t, err)
	assert.Equal(t, 0, tp.NVSCount)
	assert.Equal(t, 60, tp.MinCompCap)
	assert.True(t, tp.CollNetEnable && tp.NVLSSupport)
	assert.Equal(t, capabilities.Emulation{MulticastSwitch: true, NVLSEfficiency: 0.5, ReducingNetwork: true}, tp.Emulated)
}
