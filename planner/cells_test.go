package planner

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
)

func TestConfigCellsOverrideAfterBuild(t *testing.T) {
	topo, err := capabilities.LoadTopology("../capabilities/testdata/topology/s2.toml")
	require.NoError(t, err)
	cls := Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
	pl, err := New(&topo, Config{})
	require.NoError(t, err)
	before, err := pl.Explain(context.Background(), cls, 1<<20)
	require.NoError(t, err)
	require.False(t, before.Algo == costmodel.Ring && before.Proto == costmodel.LL)

	// Ring/LL at 1 us and 10 TB/s beats everything.
	pl, err = New(&topo, Config{Cells: []CellOverride{{Coll: costmodel.AllReduce, Algo: costmodel.Ring, Proto: costmodel.LL, LatUS: 1, BWGBps: 10000}}})
	require.NoError(t, err)
	after, err := pl.Explain(context.Background(), cls, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, costmodel.Ring, after.Algo)
	assert.Equal(t, costmodel.LL, after.Proto)
	assert.Equal(t, float32(1), after.Explain.Cells[costmodel.Ring][costmodel.LL].LatUS)
}

// TestConfigCellsIllegalHereAreSkipped: a fitted cell the model left unusable for the topology and
// env is not applied and not an error: it stays illegal, the planner lists it with the model's
// reason, and every plan and DecisionTable carries that. Only values and indices out of range are
// errors. (An illegal cell was an error: "override of AllReduce/TREE/LL: the cell is not usable".)
func TestConfigCellsIllegalHereAreSkipped(t *testing.T) {
	s2, err := capabilities.LoadTopology("../capabilities/testdata/topology/s2.toml")
	require.NoError(t, err)
	ringOnly := s2
	ringOnly.Env.Algo = capabilities.Setting{Value: "Ring", Source: capabilities.SourceFlag}
	one := s2
	one.NNodes, one.NRanks, one.LocalRanks, one.MaxLocalRanks = 1, 1, 1, 1
	require.NoError(t, one.Validate())
	k := costmodel.DefaultConstants()
	model, err := costmodel.Build(&s2, &k)
	require.NoError(t, err)
	collnetWhy := model.Reason[costmodel.AllReduce][costmodel.CollNetDirect][costmodel.Simple]
	require.NotEmpty(t, collnetWhy, "s2 leaves CollNetDirect unusable")

	ringLL := CellOverride{Coll: costmodel.AllReduce, Algo: costmodel.Ring, Proto: costmodel.LL, LatUS: 1, BWGBps: 10000}
	treeLL := CellOverride{Coll: costmodel.AllReduce, Algo: costmodel.Tree, Proto: costmodel.LL, LatUS: 1, BWGBps: 10000}
	collnet := CellOverride{Coll: costmodel.AllReduce, Algo: costmodel.CollNetDirect, Proto: costmodel.Simple, LatUS: 1, BWGBps: 1}
	sk := func(o CellOverride, why string) SkippedCell {
		return SkippedCell{Coll: o.Coll, Algo: o.Algo, Proto: o.Proto, Reason: why}
	}
	cls := Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
	for _, tc := range []struct {
		name     string
		topo     *capabilities.Topology
		cells    []CellOverride
		want     Overlay
		wantNote string
	}{
		{"a cell the table never enables", &s2, []CellOverride{ringLL, collnet},
			Overlay{File: "x.fit.toml", Applied: 1, Skipped: []SkippedCell{sk(collnet, collnetWhy)}},
			"1 cell not applied: AllReduce/COLLNET_DIRECT/SIMPLE (" + collnetWhy + ")"},
		{"an env filter", &ringOnly, []CellOverride{treeLL, ringLL},
			Overlay{File: "x.fit.toml", Applied: 1, Skipped: []SkippedCell{sk(treeLL, `disabled by NCCL_ALGO="Ring" (flag)`)}},
			`1 cell not applied: AllReduce/TREE/LL (disabled by NCCL_ALGO="Ring" (flag))`},
		{"one rank", &one, []CellOverride{treeLL, ringLL},
			Overlay{File: "x.fit.toml", Skipped: []SkippedCell{sk(treeLL, "single rank: NCCL builds no model (n_ranks = 1)"),
				sk(ringLL, "single rank: NCCL builds no model (n_ranks = 1)")}},
			"2 cells not applied: AllReduce/TREE/LL, AllReduce/RING/LL (single rank: NCCL builds no model (n_ranks = 1))"},
		{"every cell applies", &s2, []CellOverride{ringLL}, Overlay{File: "x.fit.toml", Applied: 1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := New(tc.topo, Config{Cells: tc.cells, Overlay: "x.fit.toml"})
			require.NoError(t, err)
			assert.Equal(t, &tc.want, pl.Overlay())
			assert.Equal(t, tc.wantNote, pl.Overlay().Note())
			plan, err := pl.Explain(context.Background(), cls, 1<<20)
			require.NoError(t, err)
			assert.Equal(t, &tc.want, plan.Explain.Overlay)
			for _, s := range tc.want.Skipped {
				c := plan.Explain.Cells[s.Algo][s.Proto]
				assert.False(t, c.Fitted, s.Name())
				assert.Equal(t, float32(-1), c.ModelTimeUS, "%s stays illegal", s.Name())
			}
			dt, err := pl.Compile(context.Background(), cls)
			require.NoError(t, err)
			assert.Equal(t, &tc.want, dt.Overlay)
		})
	}

	pl, err := New(&s2, Config{})
	require.NoError(t, err)
	assert.Nil(t, pl.Overlay(), "no cells, no overlay")
	for _, tc := range []struct {
		cell CellOverride
		want string
	}{
		{CellOverride{Coll: costmodel.NumColls, Algo: costmodel.Ring, Proto: costmodel.LL, LatUS: 1, BWGBps: 1}, "planner: fitted cell (5, 1, 0): out of range"},
		{CellOverride{Coll: costmodel.AllReduce, Algo: costmodel.Ring, Proto: costmodel.LL, LatUS: -1, BWGBps: 1}, "latency -1 must be finite"},
	} {
		_, err := New(&s2, Config{Cells: []CellOverride{tc.cell}})
		assert.ErrorContains(t, err, tc.want)
	}
}
