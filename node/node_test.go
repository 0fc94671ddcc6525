package node

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// TestPlannerConfig: what testdata/fitted.toml says reaches the planner's configuration: its one
// changed constant (the rest NCCL's), its correction factors on top of NCCL's tree factors, and
// only the fitted cells of the node count priced.
func TestPlannerConfig(t *testing.T) {
	n, err := tables.LoadFile("testdata/fitted.toml")
	require.NoError(t, err)
	for _, tc := range []struct {
		nodes int
		cells []planner.CellOverride
	}{
		{1, []planner.CellOverride{{Coll: costmodel.AllReduce, Algo: costmodel.Ring, Proto: costmodel.LL, LatUS: 0.75, BWGBps: 3.5}}},
		{2, []planner.CellOverride{{Coll: costmodel.AllReduce, Algo: costmodel.Ring, Proto: costmodel.Simple, LatUS: 9, BWGBps: 40}}},
		{4, nil},
	} {
		tp, err := capabilities.FromNode(n, tc.nodes)
		require.NoError(t, err)
		cfg, err := PlannerConfig(n, &tp)
		require.NoError(t, err)
		assert.Equal(t, tc.cells, cfg.Cells, "%d nodes", tc.nodes)

		require.NotNil(t, cfg.Constants)
		want := costmodel.DefaultConstants()
		want.BaseLat[costmodel.Ring] = [costmodel.NumProtos]float64{1.5, 2.5, 3.5}
		assert.Equal(t, want, *cfg.Constants)

		require.NotNil(t, cfg.Factors)
		assert.Equal(t, float32(0.5), cfg.Factors.Factor(costmodel.AllGather, costmodel.Ring, costmodel.Simple, 64), "bucket 0")
		assert.Equal(t, float32(0.25), cfg.Factors.Factor(costmodel.AllGather, costmodel.Ring, costmodel.Simple, 128), "bucket 1")
		assert.Equal(t, float32(1), cfg.Factors.Factor(costmodel.AllReduce, costmodel.Ring, costmodel.Simple, 64))
		// NCCL's treeCorrectionFactor for Tree/LL at bucket 0 is 1.0 and at bucket 4 (1 KiB) 0.9
		// (reference §6): the defaults are still there beside the table's.
		assert.Equal(t, float32(0.9), cfg.Factors.Factor(costmodel.AllReduce, costmodel.Tree, costmodel.LL, 1024))
	}

	cfg, err := PlannerConfig(nil, nil)
	require.NoError(t, err)
	assert.Equal(t, planner.Config{}, cfg, "no table, the planner's defaults")
}

// TestPlannerConfigNamesTheOverlay: the configuration names the overlay the table applied, and a
// planner over it skips the fitted cells an env pin makes illegal instead of failing: with
// NCCL_PROTO=Simple every LL cell of the shipped cpu overlay (read from the table) is skipped.
func TestPlannerConfigNamesTheOverlay(t *testing.T) {
	n, err := tables.Load("cpu")
	require.NoError(t, err)
	base, err := tables.LoadBase("cpu")
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		n       *tables.Node
		overlay string
	}{
		{"with the overlay", n, "cpu.fit.toml"},
		{"the base table", base, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp, err := capabilities.FromNode(tc.n, 1)
			require.NoError(t, err)
			tp.Env.Proto = capabilities.Setting{Value: "Simple", Source: capabilities.SourceProcess}
			cfg, err := PlannerConfig(tc.n, &tp)
			require.NoError(t, err)
			assert.Equal(t, tc.overlay, cfg.Overlay)
			pl, err := planner.New(&tp, cfg)
			require.NoError(t, err)
			if tc.overlay == "" {
				assert.Nil(t, pl.Overlay())
				return
			}
			// At 1 x 2 (the table's gpus_per_node): that shape's LL cells are disabled by the env;
			// the cells fitted at 1 x 4 are left out (this shape has its own).
			var want []string
			shape := 0
			for _, c := range tc.n.Fit.Cell {
				if c.Nodes == 1 && c.RanksPerNode == tc.n.Node.GPUsPerNode {
					shape++
					if c.Proto == "ll" {
						want = append(want, c.Coll+"/"+c.Algo+"/"+c.Proto)
					}
				}
			}
			require.NotEmpty(t, want)
			assert.Len(t, cfg.Cells, shape)
			var got []string
			for _, s := range pl.Overlay().Skipped {
				got = append(got, strings.ToLower(s.Coll.String()+"/"+s.Algo.String()+"/"+s.Proto.String()))
				assert.Equal(t, `disabled by NCCL_PROTO="Simple" (process)`, s.Reason)
			}
			assert.Equal(t, want, got)
			assert.Equal(t, len(cfg.Cells)-len(want), pl.Overlay().Applied)
		})
	}
}

// TestFitCellShape: a fitted cell applies at the shape it was fitted at only. The table has
// gpus_per_node 8; one cell says ranks_per_node = 4, one says nothing (fitted at the table's 8). At
// 1 x 8 the second applies and the first is left out; at 1 x 4 (FromNodeShape) the first applies
// and the second is left out. At 1 x 2, where no cell was fitted, both are skipped with a note
// naming both shapes.
func TestFitCellShape(t *testing.T) {
	n, err := tables.LoadBase("h100")
	require.NoError(t, err)
	require.Equal(t, 8, n.Node.GPUsPerNode)
	n.Fit = &tables.Fit{Cell: []tables.FitCell{
		{Coll: "allreduce", Algo: "ring", Proto: "simple", Nodes: 1, RanksPerNode: 4, LatUS: 9, BWGBps: 40, Points: 3},
		{Coll: "allreduce", Algo: "ring", Proto: "ll", Nodes: 1, LatUS: 5, BWGBps: 10, Points: 3},
	}}
	for _, tc := range []struct {
		rpn     int
		applied int
		skipped []string // names, then reasons
	}{
		{8, 1, nil},
		{4, 1, nil},
		{2, 0, []string{"AllReduce/RING/SIMPLE", "fitted at 1 x 4 (nodes x ranks per node), this is 1 x 2",
			"AllReduce/RING/LL", "fitted at 1 x 8 (nodes x ranks per node), this is 1 x 2"}},
	} {
		tp, err := capabilities.FromNodeShape(n, 1, tc.rpn)
		require.NoError(t, err)
		require.Equal(t, tc.rpn, tp.LocalRanks)
		require.Equal(t, tc.rpn, tp.NRanks)
		cfg, err := PlannerConfig(n, &tp)
		require.NoError(t, err)
		pl, err := planner.New(&tp, cfg)
		require.NoError(t, err)
		ov := pl.Overlay()
		require.NotNil(t, ov)
		assert.Equal(t, tc.applied, ov.Applied, "%d ranks per node", tc.rpn)
		var got []string
		for _, s := range ov.Skipped {
			got = append(got, s.Name(), s.Reason)
		}
		assert.Equal(t, tc.skipped, got, "%d ranks per node", tc.rpn)
		if tc.applied == 1 {
			want := map[int]string{8: "AllReduce/RING/LL", 4: "AllReduce/RING/SIMPLE"}[tc.rpn]
			assert.Len(t, cfg.Cells, 1)
			assert.Equal(t, want, "AllReduce/"+cfg.Cells[0].Algo.String()+"/"+cfg.Cells[0].Proto.String())
		}
	}
}
