package calibrate

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// TestReportNeverBorrowsAFreeRunsTime: the fit attributes free points to the cell of its
// envelope, but NCCL chose that cell within the free run; the report must not price a pick with
// that run's time. Runs (us), the fitted (and prior) pick forced to Ring/LL:
//
//	bytes  ring/simple  NCCL_ALGO=Ring  free (fit attributes it to Ring/LL)
//	1024            30               -  12
//	4096            40              20  15
//
// By hand: at 1024 no run measures Ring/LL (regret unknown); at 4096 the Ring run does, as a
// proxy: 20/15-1 = 1/3. Ring/Simple: 30/12-1 = 1.5 and 40/15-1 = 5/3.
func TestReportNeverBorrowsAFreeRunsTime(t *testing.T) {
	ctx := context.Background()
	pl := forcedPlanner(t, "Ring", "LL")
	pt := func(file, algo, proto string, cells []Cell, line int, bytes int64, us float64) Point {
		return Point{File: file, Line: line, Coll: costmodel.AllReduce, Bytes: bytes, TimeUS: us, Cells: cells, Algo: algo, Proto: proto}
	}
	free1 := pt("free.txt", "", "", freeCells, 1, 1024, 12)
	free2 := pt("free.txt", "", "", freeCells, 2, 4096, 15)
	pts := []Point{
		pt("rs.txt", "Ring", "Simple", []Cell{arRingSimple}, 1, 1024, 30),
		free1,
		pt("ring.txt", "Ring", "", ringCells, 2, 4096, 20),
		pt("rs.txt", "Ring", "Simple", []Cell{arRingSimple}, 2, 4096, 40),
		free2,
	}
	res := &FitResult{Residuals: []Residual{{Point: free1, Cell: arRingLL}, {Point: free2, Cell: arRingLL}}}
	rep, err := BuildReport(ctx, 4, pl, pl, nil, nil, res, pts, nil)
	require.NoError(t, err)
	require.Len(t, rep.Sizes, 2)
	want := []struct {
		fittedUS, fittedRegret float64
		rsRegret               float64
	}{
		{0, -1, 30.0/12 - 1},
		{20, 20.0/15 - 1, 40.0/15 - 1},
	}
	for i, w := range want {
		s := rep.Sizes[i]
		assert.Equal(t, "AllReduce/RING/LL", s.Fitted.Cell)
		assert.Equal(t, w.fittedUS, s.Fitted.MeasuredUS, "fitted pick at %d", s.Bytes)
		assert.InDelta(t, w.fittedRegret, s.Fitted.Regret, 1e-12, "fitted pick at %d", s.Bytes)
		assert.InDelta(t, w.rsRegret, s.Baseline.Regret, 1e-12, "ring/simple at %d", s.Bytes)
	}
	assert.Equal(t, 1, rep.FittedRegretSizes)
	assert.Equal(t, 1, rep.FittedRegretProxySizes)
	// NCCL default: the free run at both sizes, the fastest there: regret 0.
	require.NotNil(t, rep.Sizes[0].Default)
	assert.Equal(t, 2, rep.DefaultRegretSizes)
	assert.Zero(t, rep.DefaultRegretMax)
}

// TestReportHoldoutPriorBesideFit: the held-out error is reported for the prior beside the fit,
// on pinned and envelope points apart. The prior is forced to Ring/LL and the fit to Ring/Simple,
// so each prices that one cell (rl and rs below, their model times at 1 MiB). Held out: a
// Ring/Simple point measured at 1.25 rs (fit: |rs/1.25rs - 1| = 0.2; the prior prices no cell of
// it) and a free point measured at 2 rl (prior: 0.5; fit: its envelope is rs, |rs/2rl - 1|).
func TestReportHoldoutPriorBesideFit(t *testing.T) {
	ctx := context.Background()
	prior := forcedPlanner(t, "Ring", "LL")
	fitted := forcedPlanner(t, "Ring", "Simple")
	pm, err := Menus(ctx, prior)
	require.NoError(t, err)
	fm, err := Menus(ctx, fitted)
	require.NoError(t, err)
	const n = 1 << 20
	rl := float64(pm[costmodel.AllReduce].Time(costmodel.Ring, costmodel.LL, n))
	rs := float64(fm[costmodel.AllReduce].Time(costmodel.Ring, costmodel.Simple, n))
	require.Positive(t, rl)
	require.Positive(t, rs)
	held := []Point{
		{File: "rs.txt", Line: 1, Coll: costmodel.AllReduce, Bytes: n, TimeUS: 1.25 * rs, Cells: []Cell{arRingSimple}, Algo: "Ring", Proto: "Simple"},
		{File: "free.txt", Line: 1, Coll: costmodel.AllReduce, Bytes: n, TimeUS: 2 * rl, Cells: freeCells},
	}
	rep, err := BuildReport(ctx, 4, prior, fitted, nil, nil, &FitResult{}, nil, held)
	require.NoError(t, err)
	freeFit := math.Abs(rs/(2*rl) - 1)
	assert.Equal(t, 2, rep.HoldoutPoints)
	assert.InDelta(t, (0.2+freeFit)/2, rep.HoldoutMedian, 1e-6)
	assert.InDelta(t, 0.5, rep.HoldoutPriorMedian, 1e-6)
	assert.Equal(t, HoldoutErr{Points: 1, FittedMedian: 0.2, FittedMax: 0.2}, roundErr(rep.HoldoutPinned))
	assert.Equal(t, 1, rep.HoldoutEnvelope.Points)
	assert.InDelta(t, freeFit, rep.HoldoutEnvelope.FittedMedian, 1e-6)
	assert.InDelta(t, 0.5, rep.HoldoutEnvelope.PriorMedian, 1e-6)
}

// roundErr rounds a HoldoutErr's values to 1e-6 (float32 model times).
func roundErr(e HoldoutErr) HoldoutErr {
	r := func(x float64) float64 { return math.Round(x*1e6) / 1e6 }
	return HoldoutErr{e.Points, r(e.FittedMedian), r(e.FittedMax), r(e.PriorMedian), r(e.PriorMax)}
}

// TestReportHoldoutRegret: the regret over the held-out sizes counts those sizes only. At every
// size two exact runs measure the planner's pick and another cell; at fitted sizes both take
// 100 us (regret 0), at held-out sizes the pick takes 200 us and the other cell 100 us (regret 1,
// by hand). The overall regret mixes both; the held-out one is 1 at every held-out size.
func TestReportHoldoutRegret(t *testing.T) {
	ctx := context.Background()
	node, err := tables.Load("h100")
	require.NoError(t, err)
	topo, err := capabilities.FromNode(node, 1)
	require.NoError(t, err)
	pl, err := planner.New(&topo, planner.Config{})
	require.NoError(t, err)
	cls := planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
	label := func(c Cell) (string, string) {
		return strings.ToLower(c.Algo.String()), strings.ToLower(c.Proto.String())
	}
	var pts, held []Point
	for i, n := range []int64{1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 26, 1 << 30} {
		plan, err := pl.Explain(ctx, cls, n)
		require.NoError(t, err)
		pick := Cell{costmodel.AllReduce, plan.Algo, plan.Proto}
		other := Cell{costmodel.AllReduce, costmodel.Ring, costmodel.Simple}
		if pick == other {
			other = Cell{costmodel.AllReduce, costmodel.Ring, costmodel.LL}
		}
		isHeld := i%2 == 1
		pt := 100.0
		if isHeld {
			pt = 200
		}
		pa, pp := label(pick)
		oa, op := label(other)
		add := []Point{
			{File: "pick.txt", Line: i + 1, Coll: costmodel.AllReduce, Bytes: n, TimeUS: pt, Cells: []Cell{pick}, Algo: pa, Proto: pp, Run: "pick.txt:1:" + pick.String()},
			{File: "other.txt", Line: i + 1, Coll: costmodel.AllReduce, Bytes: n, TimeUS: 100, Cells: []Cell{other}, Algo: oa, Proto: op, Run: "other.txt:1:" + other.String()},
		}
		if isHeld {
			held = append(held, add...)
		} else {
			pts = append(pts, add...)
		}
	}
	res := &FitResult{Fitted: map[Cell][2]float64{}}
	rep, err := BuildReport(ctx, 1, pl, pl, nil, nil, res, pts, held)
	require.NoError(t, err)
	h := rep.HoldoutRegret
	assert.Equal(t, 3, h.Sizes)
	assert.Equal(t, 3, h.FittedSizes)
	assert.InDelta(t, 1, h.FittedMedian, 1e-9)
	assert.InDelta(t, 1, h.FittedMax, 1e-9)
	assert.InDelta(t, 1, h.PriorMedian, 1e-9)
	assert.Equal(t, 6, rep.FittedRegretSizes, "the overall regret counts every size")
	assert.InDelta(t, 0.5, rep.FittedRegretMedian, 1e-9, "three 0s and three 1s")
}
