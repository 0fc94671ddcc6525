package table_test

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin/policy/table"
	"github.com/collplan/collplan/tables"
)

// TestHostDecidesAsTheTable: a host pricing with NCCL's defaults and the table policy as its
// tuner decides as a planner over the fitted table would, at every size tried, while its own
// decisions differ somewhere.
func TestHostDecidesAsTheTable(t *testing.T) {
	p, err := table.Load("testdata/h100.toml")
	require.NoError(t, err)
	require.Equal(t, "h100.fit.toml", p.Node.Overlay[len(p.Node.Overlay)-len("h100.fit.toml"):], "the overlay beside the table is applied")
	base, err := tables.Load("h100")
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, nodes := range []int{1, 2, 4} {
		topo, err := capabilities.FromNode(base, nodes)
		require.NoError(t, err)
		host, err := planner.New(&topo, planner.Config{Tuner: p})
		require.NoError(t, err)
		plain, err := planner.New(&topo, planner.Config{})
		require.NoError(t, err)
		for _, coll := range []costmodel.Coll{costmodel.AllReduce, costmodel.AllGather, costmodel.Broadcast} {
			cls := planner.Class{Coll: coll, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
			req := &planner.Request{Topology: &topo, Class: cls}
			own, err := p.Planner(req)
			require.NoError(t, err)
			want, err := own.Compile(context.Background(), cls)
			require.NoError(t, err)
			got, err := host.Compile(context.Background(), cls)
			require.NoError(t, err)
			require.Empty(t, got.TunerNote)
			def, err := plain.Compile(context.Background(), cls)
			require.NoError(t, err)
			sizes := []int64{0, 1, planner.MaxBytes, 1 << 55}
			for _, b := range want.Boundaries() {
				sizes = append(sizes, b-1, b, b+1)
			}
			for range 2000 {
				sizes = append(sizes, int64(math.Exp2(rng.Float64()*42)))
			}
			differs := false
			for _, n := range sizes {
				require.Equal(t, want.Lookup(n), got.Lookup(n), "%d nodes %s at %d bytes", nodes, coll, n)
				differs = differs || def.Lookup(n) != got.Lookup(n)
			}
			if coll == costmodel.AllReduce {
				assert.True(t, differs, "%d nodes: the fitted table changes no AllReduce decision", nodes)
			}
		}
	}
}

func TestLoadErrors(t *testing.T) {
	_, err := table.Load("")
	assert.ErrorContains(t, err, "no configuration file")
	_, err = table.Load("testdata/missing.toml")
	assert.ErrorContains(t, err, "missing.toml")
}

// TestHostAppliesTheOverlaysFitCells: the table policy applies the [[fit.cell]] entries of the
// overlay beside its table as the host's own planner would (node.PlannerConfig): a fitted
// AllReduce Ring/LL at 1 us and 10 TB/s on one node makes the host pick it at 16 MiB (1 + 16777216 /
// (1000*10000) = 2.68 us, under every other legal cell's latency alone; NCCL picks NVLS there), only at the node count it
// was fitted at; and where the host's env makes the fitted cell illegal (NCCL_ALGO=Tree) the
// policy skips it and still answers (it failed before, or ignored the cell altogether).
func TestHostAppliesTheOverlaysFitCells(t *testing.T) {
	p, err := table.Load("testdata/fitted/h100.toml")
	require.NoError(t, err)
	base, err := tables.Load("h100")
	require.NoError(t, err)
	cls := planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
	for _, tc := range []struct {
		name      string
		nodes     int
		algoEnv   string
		wantAlgo  costmodel.Algo
		wantProto costmodel.Proto
		fitted    bool // the pick is the fitted cell
	}{
		{"1 node: the fitted cell wins", 1, "", costmodel.Ring, costmodel.LL, true},
		{"1 node, NCCL_ALGO=Tree: the fitted cell is skipped", 1, "Tree", costmodel.Tree, 0, false},
		{"2 nodes: not fitted there", 2, "", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := capabilities.FromNode(base, tc.nodes)
			require.NoError(t, err)
			if tc.algoEnv != "" {
				topo.Env.Algo = capabilities.Setting{Value: tc.algoEnv, Source: capabilities.SourceFlag}
			}
			host, err := planner.New(&topo, planner.Config{Tuner: p})
			require.NoError(t, err)
			plain, err := planner.New(&topo, planner.Config{})
			require.NoError(t, err)
			got, err := host.Explain(context.Background(), cls, 16<<20)
			require.NoError(t, err)
			require.Empty(t, got.Explain.TunerNote, "the policy answered")
			def, err := plain.Explain(context.Background(), cls, 16<<20)
			require.NoError(t, err)
			if tc.fitted {
				for a := range def.Explain.Cells {
					for pr, c := range def.Explain.Cells[a] {
						if c.Reason == "" && (costmodel.Algo(a) != costmodel.Ring || costmodel.Proto(pr) != costmodel.LL) {
							require.Greater(t, c.LatUS, float32(2.7), "%v/%v", costmodel.Algo(a), costmodel.Proto(pr))
						}
					}
				}
				assert.Equal(t, [2]int{int(tc.wantAlgo), int(tc.wantProto)}, [2]int{int(got.Algo), int(got.Proto)})
				assert.NotEqual(t, [2]int{int(tc.wantAlgo), int(tc.wantProto)}, [2]int{int(def.Algo), int(def.Proto)}, "NCCL's own pick differs")
				return
			}
			assert.Equal(t, def.Decision, got.Decision, "the overlay's cell does not apply here")
			if tc.algoEnv != "" {
				assert.Equal(t, tc.wantAlgo, got.Algo)
			}
		})
	}
}
