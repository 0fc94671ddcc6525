package calibrate

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
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
	rep, err := BuildReport(ctx, 4, pl, pl, nil, res, pts, nil)
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
}
