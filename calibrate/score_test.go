package calibrate

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
)

// Cells of AllReduce that the hand-made runs below allow.
var (
	arRingLL     = Cell{costmodel.AllReduce, costmodel.Ring, costmodel.LL}
	arRingLL128  = Cell{costmodel.AllReduce, costmodel.Ring, costmodel.LL128}
	arRingSimple = Cell{costmodel.AllReduce, costmodel.Ring, costmodel.Simple}
	arTreeLL     = Cell{costmodel.AllReduce, costmodel.Tree, costmodel.LL}
	arTreeLL128  = Cell{costmodel.AllReduce, costmodel.Tree, costmodel.LL128}
	arTreeSimple = Cell{costmodel.AllReduce, costmodel.Tree, costmodel.Simple}
	ringCells    = []Cell{arRingLL, arRingLL128, arRingSimple}
	treeCells    = []Cell{arTreeLL, arTreeLL128, arTreeSimple}
	freeCells    = []Cell{arRingLL, arRingLL128, arRingSimple, arTreeLL, arTreeLL128, arTreeSimple}
)

// run builds one point of a hand-made run.
func run(file, algo, proto string, cells []Cell, bytes int64, us float64) Point {
	return Point{File: file, Line: 10, Run: file + ":1", Coll: costmodel.AllReduce, Bytes: bytes, TimeUS: us,
		Cells: cells, Algo: algo, Proto: proto}
}

// scoringRuns: an algorithm-only Ring run, an algorithm-only Tree run, a Ring/Simple run and two
// repeats of a free run, at three sizes (times in us):
//
//	bytes    ring  tree  ring/simple  free  free (repeat)
//	1024       10     8            -     9            7.5
//	4096       20     -           25    18              -
//	1 MiB     100    80            -     -              -
func scoringRuns() []Point {
	return []Point{
		run("ring.txt", "Ring", "", ringCells, 1024, 10),
		run("tree.txt", "Tree", "", treeCells, 1024, 8),
		run("free.txt", "", "", freeCells, 1024, 9),
		run("free2.txt", "", "", freeCells, 1024, 7.5),
		run("ring.txt", "Ring", "", ringCells, 4096, 20),
		run("ringsimple.txt", "Ring", "Simple", []Cell{arRingSimple}, 4096, 25),
		run("free.txt", "", "", freeCells, 4096, 18),
		run("ring.txt", "Ring", "", ringCells, 1<<20, 100),
		run("tree.txt", "Tree", "", treeCells, 1<<20, 80),
	}
}

// TestSizeRunsMeasure: the fastest run is the best; a cell is measured by its exact run, else by
// the partial run that allows it (a proxy), never by a free run; repeats of the free run keep the
// faster.
func TestSizeRunsMeasure(t *testing.T) {
	srs := GroupRuns(scoringRuns())
	require.Len(t, srs, 3)
	type want struct {
		run   string
		us    float64
		proxy bool
		ok    bool
	}
	tests := []struct {
		bytes    int64
		best     string
		bestUS   float64
		def      want
		measured map[Cell]want
	}{
		{1024, "NCCL default", 7.5, want{"free2.txt:1", 7.5, false, true}, map[Cell]want{
			arRingLL:     {"ring.txt:1", 10, true, true},
			arRingSimple: {"ring.txt:1", 10, true, true},
			arTreeSimple: {"tree.txt:1", 8, true, true},
		}},
		{4096, "NCCL default", 18, want{"free.txt:1", 18, false, true}, map[Cell]want{
			arRingLL:     {"ring.txt:1", 20, true, true},
			arRingSimple: {"ringsimple.txt:1", 25, false, true}, // the exact run, not the faster partial one
			arTreeSimple: {},                                    // only the free run allows it
		}},
		{1 << 20, "NCCL_ALGO=Tree", 80, want{}, map[Cell]want{
			arRingLL128: {"ring.txt:1", 100, true, true},
			arTreeLL:    {"tree.txt:1", 80, true, true},
		}},
	}
	for i, tt := range tests {
		sr := srs[i]
		require.Equal(t, tt.bytes, sr.Bytes)
		best := sr.Best()
		assert.Equal(t, tt.best, best.Label(), "best at %d", tt.bytes)
		assert.Equal(t, tt.bestUS, best.TimeUS, "best at %d", tt.bytes)
		d, ok := sr.Default()
		assert.Equal(t, tt.def.ok, ok, "default at %d", tt.bytes)
		if ok {
			assert.Equal(t, tt.def.run, d.Run)
			assert.Equal(t, tt.def.us, d.TimeUS)
		}
		for c, w := range tt.measured {
			r, proxy, ok := sr.Measure(c)
			assert.Equal(t, w.ok, ok, "%s at %d", c, tt.bytes)
			if w.ok {
				assert.Equal(t, w.run, r.Run, "%s at %d", c, tt.bytes)
				assert.Equal(t, w.us, r.TimeUS, "%s at %d", c, tt.bytes)
				assert.Equal(t, w.proxy, proxy, "%s at %d", c, tt.bytes)
			}
		}
	}
}

// TestSizeRunsFewestCells: of two partial runs that allow a cell, the one with fewer legal cells
// measures it (NCCL had less to choose from), whatever their times.
func TestSizeRunsFewestCells(t *testing.T) {
	srs := GroupRuns([]Point{
		run("ring.txt", "Ring", "", ringCells, 64, 5),
		run("ll.txt", "", "LL", []Cell{arRingLL, arTreeLL}, 64, 9),
	})
	require.Len(t, srs, 1)
	r, proxy, ok := srs[0].Measure(arRingLL)
	require.True(t, ok)
	assert.True(t, proxy)
	assert.Equal(t, "NCCL_PROTO=LL", r.Label())
	assert.Equal(t, 9.0, r.TimeUS)
}

// forcedPlanner is a planner over s2 whose NCCL_ALGO/NCCL_PROTO force one pick at every size.
func forcedPlanner(t *testing.T, algo, proto string) *planner.Planner {
	t.Helper()
	topo := loadTopo(t, "s2.toml")
	topo.Env.Algo = capabilities.Setting{Value: algo, Source: capabilities.SourceFlag}
	topo.Env.Proto = capabilities.Setting{Value: proto, Source: capabilities.SourceFlag}
	pl, err := planner.New(&topo, planner.Config{})
	require.NoError(t, err)
	return pl
}

// TestEvaluatePartialAndFree scores scoringRuns with a prior forced to Ring/LL and a "fitted"
// planner forced to Tree/Simple. Before, Evaluate refused it ("no pinned point" but one) and
// scored the one Ring/Simple point alone. By hand (regret = the measuring run's time / the fastest
// run's time - 1):
//
//	bytes  best         prior Ring/LL         fitted Tree/Simple    ring/simple              nccl default
//	1024   free2 7.5    via Ring 10/7.5-1     via Tree 8/7.5-1      via Ring 10/7.5-1        7.5/7.5-1 = 0
//	4096   free 18      via Ring 20/18-1      - (only free allows)  exact 25/18-1            0
//	1 MiB  Tree 80      via Ring 100/80-1     via Tree 80/80-1 = 0  via Ring 100/80-1        - (no free run)
func TestEvaluatePartialAndFree(t *testing.T) {
	ctx := context.Background()
	prior := forcedPlanner(t, "Ring", "LL")
	fitted := forcedPlanner(t, "Tree", "Simple")
	ev, err := Evaluate(ctx, 4, prior, fitted, scoringRuns())
	require.NoError(t, err)
	assert.Equal(t, 1, ev.Points)
	assert.Equal(t, 8, ev.EnvelopePoints)
	require.Len(t, ev.Policies, 4)
	require.Len(t, ev.Sizes, 3)

	type pick struct {
		cell, via string
		regret    float64
	}
	wantSizes := []struct {
		best  string
		picks [4]pick
	}{
		{"NCCL default", [4]pick{
			{"AllReduce/RING/LL", "NCCL_ALGO=Ring", 10/7.5 - 1}, {"AllReduce/TREE/SIMPLE", "NCCL_ALGO=Tree", 8/7.5 - 1},
			{"AllReduce/RING/SIMPLE", "NCCL_ALGO=Ring", 10/7.5 - 1}, {"NCCL default", "", 0}}},
		{"NCCL default", [4]pick{
			{"AllReduce/RING/LL", "NCCL_ALGO=Ring", 20.0/18 - 1}, {"AllReduce/TREE/SIMPLE", "", -1},
			{"AllReduce/RING/SIMPLE", "", 25.0/18 - 1}, {"NCCL default", "", 0}}},
		{"NCCL_ALGO=Tree", [4]pick{
			{"AllReduce/RING/LL", "NCCL_ALGO=Ring", 100.0/80 - 1}, {"AllReduce/TREE/SIMPLE", "NCCL_ALGO=Tree", 0},
			{"AllReduce/RING/SIMPLE", "NCCL_ALGO=Ring", 100.0/80 - 1}, {"NCCL default", "", -1}}},
	}
	for i, ws := range wantSizes {
		s := ev.Sizes[i]
		assert.Equal(t, ws.best, s.Best, "size %d", s.Bytes)
		require.Len(t, s.Picks, 4)
		for j, wp := range ws.picks {
			assert.Equal(t, wp.cell, s.Picks[j].Cell, "size %d policy %s", s.Bytes, ev.Policies[j].Name)
			assert.Equal(t, wp.via, s.Picks[j].Via, "size %d policy %s", s.Bytes, ev.Policies[j].Name)
			assert.InDelta(t, wp.regret, s.Picks[j].Regret, 1e-12, "size %d policy %s", s.Bytes, ev.Policies[j].Name)
		}
	}

	// Summaries: prior regrets {1/3, 1/9, 1/4}, fitted {1/15, 0}, ring/simple {1/3, 7/18, 1/4},
	// nccl default {0, 0}.
	wantPol := []struct {
		name               string
		median, max        float64
		sizes, exact, prox int
	}{
		{"prior", 0.25, 1.0 / 3, 3, 0, 3},
		{"fitted", 1.0 / 30, 1.0 / 15, 2, 0, 2},
		{"ring/simple", 1.0 / 3, 7.0 / 18, 3, 1, 2},
		{"nccl default", 0, 0, 2, 2, 0},
	}
	for i, w := range wantPol {
		p := ev.Policies[i]
		assert.Equal(t, w.name, p.Name)
		assert.InDelta(t, w.median, p.RegretMedian, 1e-12, w.name)
		assert.InDelta(t, w.max, p.RegretMax, 1e-12, w.name)
		assert.InDelta(t, w.max, p.RegretP90, 1e-12, "%s: at 2 or 3 sizes the 90th percentile is the largest", w.name)
		assert.Equal(t, w.sizes, p.RegretSizes, w.name)
		assert.Equal(t, w.exact, p.RegretExactSizes, w.name)
		assert.Equal(t, w.prox, p.RegretProxySizes, w.name)
	}
	// Prediction error: the one exact point is Ring/Simple, the other 8 envelopes. A forced
	// planner prices only its one cell, so the prior (Ring/LL) predicts no exact point and the
	// envelopes of the 3 Ring and 3 free points; the fitted one (Tree/Simple) the 2 Tree and 3 free.
	assert.Equal(t, [2]int{0, 6}, [2]int{ev.Policies[0].CellPoints, ev.Policies[0].EnvPoints})
	assert.Equal(t, [2]int{0, 5}, [2]int{ev.Policies[1].CellPoints, ev.Policies[1].EnvPoints})

	var b bytes.Buffer
	require.NoError(t, ev.WriteText(&b))
	out := b.String()
	assert.Contains(t, out, "AllReduce/RING/LL (")
	assert.Contains(t, out, "0.333) via NCCL_ALGO=Ring")
	assert.Contains(t, out, "NCCL default (7.5, 0.000)")
	assert.Contains(t, out, "prediction error, prior vs fitted: pinned points median")
}

// TestEvaluateFullyPinnedUnchanged: on pinned runs only, Evaluate is what it was: no "nccl
// default" row, no proxy, every regret from the exact run of the pick.
func TestEvaluateFullyPinnedUnchanged(t *testing.T) {
	ctx := context.Background()
	prior := forcedPlanner(t, "Ring", "LL")
	fitted := forcedPlanner(t, "Tree", "Simple")
	pts := []Point{
		run("rl.txt", "Ring", "LL", []Cell{arRingLL}, 64, 12),
		run("rs.txt", "Ring", "Simple", []Cell{arRingSimple}, 64, 30),
		run("ts.txt", "Tree", "Simple", []Cell{arTreeSimple}, 64, 10),
		run("ts2.txt", "Tree", "Simple", []Cell{arTreeSimple}, 64, 11), // a repeat: the faster stays
	}
	ev, err := Evaluate(ctx, 4, prior, fitted, pts)
	require.NoError(t, err)
	require.Len(t, ev.Policies, 3)
	assert.Equal(t, 4, ev.Points)
	assert.Equal(t, 0, ev.EnvelopePoints)
	require.Len(t, ev.Sizes, 1)
	assert.Equal(t, "AllReduce/TREE/SIMPLE", ev.Sizes[0].Best)
	assert.InDelta(t, 12.0/10-1, ev.Sizes[0].Picks[0].Regret, 1e-12)
	assert.InDelta(t, 0, ev.Sizes[0].Picks[1].Regret, 1e-12)
	assert.Equal(t, "ts.txt:1", ev.Sizes[0].Picks[1].Run)
	assert.InDelta(t, 30.0/10-1, ev.Sizes[0].Picks[2].Regret, 1e-12)
	for _, p := range ev.Policies {
		assert.Equal(t, p.RegretSizes, p.RegretExactSizes, p.Name)
		assert.Zero(t, p.RegretProxySizes, p.Name)
	}
}

// TestBestTiesToLowerCell: two exact runs with the same time: the best is the lower (algo, proto)
// index, Tree before Ring (costmodel's order), as Evaluate chose before runs.
func TestBestTiesToLowerCell(t *testing.T) {
	srs := GroupRuns([]Point{
		run("rl.txt", "Ring", "LL", []Cell{arRingLL}, 64, 5),
		run("tl.txt", "Tree", "LL", []Cell{arTreeLL}, 64, 5),
		run("free.txt", "", "", freeCells, 64, 5),
	})
	require.Len(t, srs, 1)
	require.Less(t, costmodel.Tree, costmodel.Ring)
	assert.Equal(t, "AllReduce/TREE/LL", srs[0].Best().Label())
}

// TestRepeatsNeverMixPins: two algorithm-only pins that allow the same cells stay two runs (the
// one with the earlier label measures); two runs of one pin keep the faster; two exact runs of
// one cell, however spelled, are repeats.
func TestRepeatsNeverMixPins(t *testing.T) {
	srs := GroupRuns([]Point{
		run("a.txt", "Ring", "", ringCells, 64, 9),
		run("b.txt", "Ring,CollnetDirect", "", ringCells, 64, 4),
		run("c.txt", "Ring", "", ringCells, 64, 7),
		run("d.txt", "Ring", "LL", []Cell{arRingLL}, 64, 6),
		run("e.txt", "ring", "ll", []Cell{arRingLL}, 64, 5),
	})
	require.Len(t, srs, 1)
	require.Len(t, srs[0].Runs, 3)
	r, proxy, ok := srs[0].Measure(arRingSimple)
	require.True(t, ok)
	assert.True(t, proxy)
	assert.Equal(t, "NCCL_ALGO=Ring", r.Label())
	assert.Equal(t, 7.0, r.TimeUS)
	assert.Equal(t, "c.txt:1", r.Run)
	r, proxy, ok = srs[0].Measure(arRingLL)
	require.True(t, ok)
	assert.False(t, proxy)
	assert.Equal(t, 5.0, r.TimeUS)
	assert.Equal(t, 4.0, srs[0].Best().TimeUS)
}

// TestP90: the 90th percentile by nearest rank is the ceil(0.9 n)-th smallest value: of 1..10 the
// 9th (9), of 1..20 the 18th (18), of 1..11 the 10th (ceil(9.9) = 10), of one value that value.
func TestP90(t *testing.T) {
	seq := func(n int) []float64 {
		var xs []float64
		for i := n; i >= 1; i-- { // unsorted on purpose
			xs = append(xs, float64(i))
		}
		return xs
	}
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{seq(10), 9}, {seq(20), 18}, {seq(11), 10}, {[]float64{0.25}, 0.25}, {nil, 0},
	} {
		assert.Equal(t, tc.want, p90(tc.xs), "%v", tc.xs)
	}
}
