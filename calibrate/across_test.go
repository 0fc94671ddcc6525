package calibrate

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/diff/fd"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// truthShapes builds, for each node count, the h100 table's topology (the prior) and points
// measured on a "true" machine that differs from the table in ways the model's structure can
// express: NCCL's NET hop latencies 1.8x, base latencies 1.3x, and every graph's bwInter 0.6x (so
// bandwidth falls at three nodes and more, where NCCL prices bwInter). The true times come from the
// planner over that machine, an oracle independent of the fit.
func truthShapes(t *testing.T, nodes []int, cells []Cell) []AtNodes {
	t.Helper()
	ctx := context.Background()
	n, err := tables.Load("h100")
	require.NoError(t, err)
	k := costmodel.DefaultConstants()
	for a := range k.BaseLat {
		for p := range k.BaseLat[a] {
			k.BaseLat[a][p] *= 1.3
			k.HWLat[costmodel.HWNet][a][p] *= 1.8
		}
	}
	var out []AtNodes
	for _, nn := range nodes {
		topo, err := capabilities.FromNode(n, nn)
		require.NoError(t, err)
		truth := topo
		for _, g := range []*capabilities.Graph{&truth.Graphs.Tree, &truth.Graphs.Ring, &truth.Graphs.NVLS} {
			g.BwInter *= 0.6
		}
		tp, err := planner.New(&truth, planner.Config{Constants: &k})
		require.NoError(t, err)
		tm, err := Menus(ctx, tp)
		require.NoError(t, err)
		sh := AtNodes{Nodes: nn, Topo: &topo}
		for _, c := range cells {
			for b := int64(1 << 10); b <= 1<<30; b *= 4 {
				tt := tm[c.Coll].Time(c.Algo, c.Proto, b)
				require.Greater(t, tt, float32(0), "%s at %d nodes", c, nn)
				sh.Points = append(sh.Points, Point{File: "truth", Coll: c.Coll, Bytes: b, TimeUS: float64(tt), Cells: []Cell{c}})
			}
		}
		out = append(out, sh)
	}
	return out
}

// TestFitAcrossPredictsUnmeasuredNodes: fitted at 4 and 8 nodes, the model predicts 16 and 32
// nodes, which it never saw, close to the true machine, where the prior is far off.
func TestFitAcrossPredictsUnmeasuredNodes(t *testing.T) {
	ctx := context.Background()
	ar := costmodel.AllReduce
	cells := []Cell{{ar, costmodel.Ring, costmodel.Simple}, {ar, costmodel.Ring, costmodel.LL},
		{ar, costmodel.Tree, costmodel.Simple}, {ar, costmodel.Tree, costmodel.LL128}}
	shapes := truthShapes(t, []int{4, 8, 16, 32}, cells)
	fit, err := FitAcross(ctx, shapes[:2], FitOptions{})
	require.NoError(t, err)
	assert.Equal(t, []int{4, 8}, fit.Nodes)
	for _, sh := range shapes[2:] {
		fe, pe, n, err := fit.PredictionError(ctx, sh)
		require.NoError(t, err)
		require.Equal(t, len(sh.Points), n)
		t.Logf("%d nodes: median prediction error fitted %.2f%%, prior %.2f%%", sh.Nodes, 100*fe, 100*pe)
		assert.Less(t, fe, 0.02, "%d nodes, fitted", sh.Nodes)
		assert.Greater(t, pe, 0.10, "%d nodes: the prior should be off (else the test proves nothing)", sh.Nodes)
	}
	// The fitted cells at 16 nodes, as the overlay writes them, give the true times.
	cs, err := fit.Cells(ctx, shapes[2].Topo, planner.Config{})
	require.NoError(t, err)
	require.Len(t, cs, len(cells))
}

// TestFitAcrossSplit: a cell's latency split adds up to the model's latency, and the NET part is
// zero on one node and grows with the node count for Ring AllReduce (2 (nNodes-1) NET hops).
func TestFitAcrossSplit(t *testing.T) {
	ctx := context.Background()
	n, err := tables.Load("h100")
	require.NoError(t, err)
	rs := Cell{costmodel.AllReduce, costmodel.Ring, costmodel.Simple}
	k := costmodel.DefaultConstants()
	var prev float64
	for _, nn := range []int{1, 2, 4, 8} {
		topo, err := capabilities.FromNode(n, nn)
		require.NoError(t, err)
		menus, sp, err := splitCells(ctx, &topo, planner.Config{})
		require.NoError(t, err)
		s := sp[rs]
		lat := float64(menus[costmodel.AllReduce].Cells[rs.Algo][rs.Proto].LatUS)
		assert.InDelta(t, lat, s.rest+s.base+s.intra+s.inter, 1e-3)
		assert.InDelta(t, k.BaseLat[costmodel.Ring][costmodel.Simple], s.base, 1e-4, "%d nodes", nn)
		// Reference §3, Ring AllReduce: nInter = 2 (nNodes-1) hops of hwLat[NET][Ring][Simple]
		// (the graph's latencyInter, twice for Simple, is the rest).
		want := float64(2*(nn-1)) * k.HWLat[costmodel.HWNet][costmodel.Ring][costmodel.Simple]
		assert.InDelta(t, want, s.inter, 1e-3, "%d nodes", nn)
		assert.GreaterOrEqual(t, s.inter, prev)
		prev = s.inter
	}
}

// TestFitAcrossGradient: the analytic gradient of the loss agrees with central differences at a
// point away from the prior, on envelope (several-cell) and pinned points.
func TestFitAcrossGradient(t *testing.T) {
	ctx := context.Background()
	ar := costmodel.AllReduce
	cells := []Cell{{ar, costmodel.Ring, costmodel.Simple}, {ar, costmodel.Tree, costmodel.LL128}}
	shapes := truthShapes(t, []int{1, 2, 4}, cells)
	// An envelope point: the 4-node sizes again, over both cells.
	for _, p := range append([]Point(nil), shapes[2].Points...) {
		p.Cells = cells
		shapes[2].Points = append(shapes[2].Points, p)
	}
	idx := map[Cell]int{}
	pts, err := prepareAcross(ctx, shapes, idx)
	require.NoError(t, err)
	md := &acrossModel{pts: pts, opt: FitOptions{}.withDefaults()}
	x := make([]float64, paramsAcross*len(idx))
	for j := range x {
		x[j] = 0.1 * float64(j%5-2)
	}
	g := make([]float64, len(x))
	md.grad(g, x)
	num := make([]float64, len(x))
	fd.Gradient(num, md.loss, x, &fd.Settings{Formula: fd.Central, Step: 1e-6})
	for j := range g {
		assert.InDelta(t, num[j], g[j], 1e-4*math.Max(1, math.Abs(num[j])), "parameter %d", j)
	}
}
