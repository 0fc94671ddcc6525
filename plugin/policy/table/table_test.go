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
