package calibrate

import (
	"context"
	"fmt"
	"math"
	"math/rand"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
)

// truthFactors are the true constants of the recovery test, as factors on the prior's cell: every
// one at least 30% away from 1 (the prior, which is also the fit's start point).
var truthFactors = map[Cell][2]float64{
	{costmodel.AllReduce, costmodel.Ring, costmodel.LL}:         {1.45, 0.68},
	{costmodel.AllReduce, costmodel.Ring, costmodel.LL128}:      {0.62, 1.40},
	{costmodel.AllReduce, costmodel.Ring, costmodel.Simple}:     {1.60, 0.70},
	{costmodel.AllReduce, costmodel.Tree, costmodel.LL}:         {0.65, 1.35},
	{costmodel.AllReduce, costmodel.Tree, costmodel.LL128}:      {1.50, 0.64},
	{costmodel.AllReduce, costmodel.Tree, costmodel.Simple}:     {0.60, 1.50},
	{costmodel.AllReduce, costmodel.NVLSTree, costmodel.Simple}: {0.66, 1.40},
}

func loadTopo(t *testing.T, name string) capabilities.Topology {
	t.Helper()
	topo, err := capabilities.LoadTopology("../capabilities/testdata/topology/" + name)
	require.NoError(t, err)
	return topo
}

// truthPlanner is the prior's planner with the true cells (prior x truthFactors).
// priorOf is the prior of the synthetic tests: NCCL's model of topo, and its menus.
func priorOf(t *testing.T, topo *capabilities.Topology) (*planner.Planner, map[costmodel.Coll]*planner.Menu) {
	t.Helper()
	pl, err := planner.New(topo, planner.Config{})
	require.NoError(t, err)
	menus, err := Menus(context.Background(), pl)
	require.NoError(t, err)
	return pl, menus
}

func truthPlanner(t *testing.T, topo *capabilities.Topology, prior map[costmodel.Coll]*planner.Menu) *planner.Planner {
	t.Helper()
	var cells []planner.CellOverride
	for c, f := range truthFactors {
		mc := prior[c.Coll].Cells[c.Algo][c.Proto]
		require.Empty(t, mc.Reason, c.String())
		cells = append(cells, planner.CellOverride{Coll: c.Coll, Algo: c.Algo, Proto: c.Proto,
			LatUS: float32(float64(mc.LatUS) * f[0]), BWGBps: float32(float64(mc.BWGBps) * f[1])})
	}
	pl, err := planner.New(topo, planner.Config{Cells: cells})
	require.NoError(t, err)
	return pl
}

// synthSweeps builds one pinned sweep per true cell, sizes 8 B .. 1 GiB by factor 2, the true time
// (costmodel through the planner's menu) times lognormal noise of sd noise, seeded.
func synthSweeps(t *testing.T, truth *planner.Planner, nodes, runs int, noise float64, seed int64) []*Sweep {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	m, err := truth.Prepare(context.Background(), planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	require.NoError(t, err)
	var out []*Sweep
	for _, c := range sortedCells(truthFactors) {
		for rep := 0; rep < runs; rep++ {
			s := &Sweep{File: fmt.Sprintf("synth-%s-run%d", c, rep), Line: 1, Coll: c.Coll, CollKnown: true, Nodes: nodes,
				Pin: Pin{Algo: map[costmodel.Algo]string{costmodel.Tree: "Tree", costmodel.Ring: "Ring", costmodel.NVLSTree: "NVLSTree"}[c.Algo], Proto: c.Proto.String(), Source: pinSourceManif}}
			for i, n := 0, int64(8); n <= 1<<30; i, n = i+1, n*2 {
				tm := float64(m.Menu().Time(c.Algo, c.Proto, n))
				require.Greater(t, tm, 0.0, c.String())
				tm *= math.Exp(noise * rng.NormFloat64())
				s.Rows = append(s.Rows, Row{Line: i + 2, Bytes: n, Count: n / 4, OOP: Half{TimeUS: tm, Valid: true}, IP: Half{TimeUS: tm, Valid: true}})
			}
			out = append(out, s)
		}
	}
	return out
}

func sortedCells(m map[Cell][2]float64) []Cell {
	var cs []Cell
	for c := range m {
		cs = append(cs, c)
	}
	for i := range cs {
		for j := i + 1; j < len(cs); j++ {
			if cellLess(cs[j], cs[i]) {
				cs[i], cs[j] = cs[j], cs[i]
			}
		}
	}
	return cs
}

func TestFitRecoversPerturbedCells(t *testing.T) {
	ctx := context.Background()
	// One sweep per cell (28 sizes) must recover every parameter within 5%; the decision table
	// (within 3% of a true crossover) is asserted with four repeated sweeps per cell: with one,
	// seed 7 of 10 misses by one size at 3.05% from the crossover (logged, not asserted).
	type tcase struct {
		topo       string
		runs       int
		seed       int64
		decisionOK bool
	}
	var cases []tcase
	for seed := int64(1); seed <= 10; seed++ {
		cases = append(cases, tcase{"s2.toml", 1, seed, false}, tcase{"s2.toml", 4, seed, true})
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/runs%d/seed%d", tc.topo, tc.runs, tc.seed), func(t *testing.T) {
			topo := loadTopo(t, tc.topo)
			_, prior := priorOf(t, &topo)
			truth := truthPlanner(t, &topo, prior)
			sweeps := synthSweeps(t, truth, topo.NNodes, tc.runs, 0.03, tc.seed)
			pts, probs := pointsOf(t, sweeps, &topo)
			require.Empty(t, probs)
			res, err := Fit(prior, pts, FitOptions{})
			require.NoError(t, err)

			for _, p := range res.Params {
				f, ok := truthFactors[p.Cell]
				require.True(t, ok, p.Cell.String())
				want := float64(prior[p.Cell.Coll].Cells[p.Cell.Algo][p.Cell.Proto].LatUS) * f[0]
				if p.Kind == "bw_gbps" {
					want = float64(prior[p.Cell.Coll].Cells[p.Cell.Algo][p.Cell.Proto].BWGBps) * f[1]
				}
				require.True(t, p.Identified, "%s %s should be identified by a pinned 8 B..1 GiB sweep", p.Cell, p.Kind)
				rel := p.Value/want - 1
				t.Logf("%s %s: prior %.4g true %.4g fitted %.4g ± %.2g (%+.2f%%)", p.Cell, p.Kind, p.Prior, want, p.Value, p.Sigma, 100*rel)
				assert.Less(t, math.Abs(rel), 0.05, "%s %s", p.Cell, p.Kind)
				assert.Greater(t, p.Sigma, 0.0)
			}
			assert.Less(t, res.MedianRel, 0.05)

			// Decision table: equal to the truth's except within 3% of a true crossover.
			fitted, err := planner.New(&topo, planner.Config{Cells: res.Overrides()})
			require.NoError(t, err)
			cls := planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
			type pick struct {
				a costmodel.Algo
				p costmodel.Proto
			}
			at := func(pl *planner.Planner, n int64) pick {
				plan, err := pl.Explain(ctx, cls, n)
				require.NoError(t, err)
				return pick{plan.Algo, plan.Proto}
			}
			var sizes []int64
			for n := int64(64); n <= 1<<30; n = n + max(1, n/64) {
				sizes = append(sizes, n)
			}
			truePick := make([]pick, len(sizes))
			for i, n := range sizes {
				truePick[i] = at(truth, n)
			}
			var crossings []int64
			for i := 1; i < len(sizes); i++ {
				if truePick[i] != truePick[i-1] {
					crossings = append(crossings, sizes[i])
				}
			}
			near := func(n int64) bool {
				for _, x := range crossings {
					if math.Abs(float64(n)/float64(x)-1) <= 0.03 {
						return true
					}
				}
				return false
			}
			bad := 0
			for i, n := range sizes {
				if !near(n) && at(fitted, n) != truePick[i] {
					bad++
					if tc.decisionOK {
						t.Errorf("size %d: fitted picks %v, truth %v", n, at(fitted, n), truePick[i])
					} else {
						t.Logf("size %d: fitted picks %v, truth %v", n, at(fitted, n), truePick[i])
					}
				}
			}
			t.Logf("crossovers %v", crossings)
			t.Logf("%d sizes, %d true crossovers, %d mismatches away from them", len(sizes), len(crossings), bad)
		})
	}
}

// pointsOf is Points over topo with the default options and no prior overrides.
func pointsOf(t *testing.T, sweeps []*Sweep, topo *capabilities.Topology) ([]Point, []Problem) {
	t.Helper()
	pts, probs, err := Points(context.Background(), sweeps, topo, planner.Config{}, PointOptions{})
	require.NoError(t, err)
	return pts, probs
}
