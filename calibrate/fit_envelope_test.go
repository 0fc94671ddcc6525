package calibrate

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// nvswitchCase is a synthetic 8-GPU NVSwitch node (tables/h100.toml, 1 node) whose truth is the
// prior but for two cells: Ring/Simple (lat 30 us, bw 250 GB/s: faster than the prior's 56 us,
// 182.9 GB/s) and NVLS/Simple (lat 20 us, bw 450 GB/s: much faster than its prior 182.9 GB/s).
// A Ring/Simple-pinned sweep measures Ring/Simple; a free sweep measures the least true time (at
// large sizes NVLS, as on a real NVSwitch node).
type nvswitchCase struct {
	topo   capabilities.Topology
	prior  *planner.Planner
	menus  map[costmodel.Coll]*planner.Menu
	sizes  []int64
	ring   []float64 // Ring/Simple-pinned sweep
	free   []float64 // free sweep
	truthT func(c Cell, n int64) float64
}

var (
	ringSimple = Cell{costmodel.AllReduce, costmodel.Ring, costmodel.Simple}
	nvlsSimple = Cell{costmodel.AllReduce, costmodel.NVLS, costmodel.Simple}
)

var (
	truthRingLat, truthRingBW = 30.0, 250.0
	truthNVLSLat, truthNVLSBW = 80.0, 625.0
)

func newNVSwitchCase(t *testing.T) *nvswitchCase {
	t.Helper()
	ctx := context.Background()
	node, err := tables.Load("h100")
	require.NoError(t, err)
	topo, err := capabilities.FromNode(node, 1)
	require.NoError(t, err)
	require.Equal(t, 8, topo.NRanks)
	prior, err := planner.New(&topo, planner.Config{})
	require.NoError(t, err)
	menus, err := PricedMenus(ctx, &topo, planner.Config{})
	require.NoError(t, err)
	m := menus[costmodel.AllReduce]
	k := &nvswitchCase{topo: topo, prior: prior, menus: menus}
	// time = lat + bytes/bw (bw in GB/s = 1000 bytes/us): the correction factor of both changed
	// cells is 1 on this node (checked), so the model's time is exactly this.
	lin := func(lat, bw float64, n int64) float64 { return lat + float64(n)/(1000*bw) }
	k.truthT = func(c Cell, n int64) float64 {
		switch c {
		case ringSimple:
			return lin(truthRingLat, truthRingBW, n)
		case nvlsSimple:
			return lin(truthNVLSLat, truthNVLSBW, n)
		}
		return float64(m.Time(c.Algo, c.Proto, n))
	}
	legal := legalCells(m)
	require.Contains(t, legal, nvlsSimple)
	for n := int64(8); n <= 1<<30; n *= 2 {
		for _, c := range []Cell{ringSimple, nvlsSimple} {
			require.Equal(t, float32(1), m.Factor(c.Algo, c.Proto, n), "%s factor at %d B", c, n)
		}
		k.sizes = append(k.sizes, n)
		k.ring = append(k.ring, k.truthT(ringSimple, n))
		best := math.Inf(1)
		for _, c := range legal {
			best = math.Min(best, k.truthT(c, n))
		}
		k.free = append(k.free, best)
	}
	return k
}

func (k *nvswitchCase) sweeps() []*Sweep {
	ring := &Sweep{File: "ring-simple.txt", Line: 1, Coll: costmodel.AllReduce, CollKnown: true, Nodes: 1,
		Pin: Pin{Algo: "Ring", Proto: "Simple", Source: pinSourceManif}}
	free := &Sweep{File: "free.txt", Line: 1, Coll: costmodel.AllReduce, CollKnown: true, Nodes: 1}
	for i, n := range k.sizes {
		ring.Rows = append(ring.Rows, Row{Line: i + 2, Bytes: n, Count: n / 4, IP: Half{TimeUS: k.ring[i], Valid: true}})
		free.Rows = append(free.Rows, Row{Line: i + 2, Bytes: n, Count: n / 4, IP: Half{TimeUS: k.free[i], Valid: true}})
	}
	return []*Sweep{ring, free}
}

func paramOf(t *testing.T, res *FitResult, c Cell, kind string) Param {
	t.Helper()
	for _, p := range res.Params {
		if p.Cell == c && p.Kind == kind {
			return p
		}
	}
	require.Failf(t, "no parameter", "%s %s", c, kind)
	return Param{}
}

// TestFitFreeSweepDoesNotMovePinnedCell is the regression of issue 12 item 5: a free sweep whose
// large sizes NVLS ran (faster than Ring/Simple's own pinned sweep) must not raise Ring/Simple's
// bandwidth, and the fitted planner must not pick Ring/Simple where the free run was faster.
func TestFitFreeSweepDoesNotMovePinnedCell(t *testing.T) {
	ctx := context.Background()
	k := newNVSwitchCase(t)
	pts, probs := pointsOf(t, k.sweeps(), &k.topo)
	require.Empty(t, probs)
	res, err := Fit(k.menus, pts, FitOptions{})
	require.NoError(t, err)

	// Hand derivation from the pinned sweep's data: its two largest sizes n1 < n2 give
	// bw = (n2 - n1) / (1000 (t2 - t1)) GB/s (time = lat + bytes/bw), and lat = t1 - n1/(1000 bw).
	last := len(k.sizes) - 1
	n1, n2 := float64(k.sizes[last-1]), float64(k.sizes[last])
	wantBW := (n2 - n1) / (1000 * (k.ring[last] - k.ring[last-1]))
	wantLat := k.ring[last-1] - n1/(1000*wantBW)
	require.InDelta(t, truthRingBW, wantBW, 1e-6*truthRingBW) // the derivation recovers what was generated
	require.InDelta(t, truthRingLat, wantLat, 0.01)
	bw := paramOf(t, res, ringSimple, "bw_gbps")
	lat := paramOf(t, res, ringSimple, "lat_us")
	t.Logf("Ring/Simple: bw %.4g (want %.4g), lat %.4g (want %.4g)", bw.Value, wantBW, lat.Value, wantLat)
	assert.InDelta(t, 1, bw.Value/wantBW, 0.01, "Ring/Simple bw %.4g GB/s, its own sweep says %.4g", bw.Value, wantBW)
	assert.InDelta(t, 1, lat.Value/wantLat, 0.05, "Ring/Simple lat %.4g us, its own sweep says %.4g", lat.Value, wantLat)

	fitted, err := planner.New(&k.topo, planner.Config{Cells: res.Overrides()})
	require.NoError(t, err)
	cls := planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
	for i, n := range k.sizes {
		plan, err := fitted.Explain(ctx, cls, n)
		require.NoError(t, err)
		pick := Cell{costmodel.AllReduce, plan.Algo, plan.Proto}
		regret := k.truthT(pick, n)/k.free[i] - 1 // the pick's true time against the best
		if k.free[i] < k.ring[i]/1.03 {           // faster by more than the 3 % noise margin
			assert.NotEqual(t, ringSimple, pick, "%d B: the free run (%.4g us) beat Ring/Simple's own sweep (%.4g us)", n, k.free[i], k.ring[i])
		}
		assert.Less(t, regret, 0.05, "%d B: fitted pick %s, true regret %.3f", n, pick, regret)
	}
}

// TestFitEnvelopeOnlyCellIsInferred: in the NVSwitch case NVLS/Simple is constrained by the free
// sweep alone. It is Inferred, never Identified, with a sigma of at least the prior's spread (a
// factor e on the log scale: Sigma >= Value), and the overlay tags its values inferred, while
// Ring/Simple, which its own pinned sweep measured, is Identified and tagged measured. The fitted
// NVLS bandwidth is the free sweep's: hand-derived from the two largest free sizes (NVLS wins
// there), bw = (n2 - n1) / (1000 (t2 - t1)).
func TestFitEnvelopeOnlyCellIsInferred(t *testing.T) {
	k := newNVSwitchCase(t)
	pts, probs := pointsOf(t, k.sweeps(), &k.topo)
	require.Empty(t, probs)
	res, err := Fit(k.menus, pts, FitOptions{})
	require.NoError(t, err)
	require.Empty(t, res.Problems)

	for _, kind := range []string{"lat_us", "bw_gbps"} {
		nv := paramOf(t, res, nvlsSimple, kind)
		assert.True(t, nv.Inferred, "NVLS/Simple %s", kind)
		assert.False(t, nv.Identified, "NVLS/Simple %s: an envelope alone never identifies a cell", kind)
		assert.False(t, nv.Measured)
		assert.GreaterOrEqual(t, nv.Sigma, nv.Value, "NVLS/Simple %s: sigma at least the prior's spread", kind)
		rs := paramOf(t, res, ringSimple, kind)
		assert.True(t, rs.Identified && rs.Measured && !rs.Inferred, "Ring/Simple %s: %+v", kind, rs)
	}
	assert.True(t, res.InferredCell(nvlsSimple))
	assert.False(t, res.MeasuredCell(nvlsSimple))
	assert.True(t, res.MeasuredCell(ringSimple))
	last := len(k.sizes) - 1
	wantBW := float64(k.sizes[last]-k.sizes[last-1]) / (1000 * (k.free[last] - k.free[last-1]))
	require.InDelta(t, truthNVLSBW, wantBW, 1e-6*truthNVLSBW)
	assert.InDelta(t, 1, res.Fitted[nvlsSimple][1]/wantBW, 0.02, "NVLS/Simple bw %.4g, the free sweep says %.4g", res.Fitted[nvlsSimple][1], wantBW)

	var b bytes.Buffer
	require.NoError(t, WriteOverlay(&b, res, OverlayInput{Nodes: 1, Date: "2026-12-02"}))
	base, err := tables.Load("h100")
	require.NoError(t, err)
	n, err := tables.ApplyOverlay(base, "h100.fit.toml", b.Bytes())
	require.NoError(t, err, b.String())
	seen := map[string]bool{}
	for i, c := range n.Fit.Cell {
		key := c.Algo + "/" + c.Proto
		for _, f := range []string{"lat_us", "bw_gbps", "lat_sigma", "bw_sigma", "points"} {
			src := n.Sources[fmt.Sprintf("fit.cell[%d].%s", i, f)]
			switch key {
			case "nvls/simple":
				assert.Equal(t, inferredTag, src, "%s %s", key, f)
			case "ring/simple":
				assert.Equal(t, "measured", src, "%s %s", key, f)
			default: // the free sweep alone: never measured
				assert.NotEqual(t, "measured", src, "%s %s", key, f)
			}
		}
		seen[key] = true
	}
	assert.True(t, seen["nvls/simple"] && seen["ring/simple"], "cells written: %v", seen)
}

// TestFitKeepsBestStart: truth Ring/Simple 30 us, 150 GB/s and NVLS/Simple 200 us, 225 GB/s. From
// the prior the envelope stage lands in a worse local minimum than from twice the prior's
// bandwidths; the fit keeps the lowest loss of its starts.
func TestFitKeepsBestStart(t *testing.T) {
	defer func(a, b, c, d float64) { truthRingLat, truthRingBW, truthNVLSLat, truthNVLSBW = a, b, c, d }(truthRingLat, truthRingBW, truthNVLSLat, truthNVLSBW)
	truthRingLat, truthRingBW, truthNVLSLat, truthNVLSBW = 30, 150, 200, 225
	k := newNVSwitchCase(t)
	pts, _ := pointsOf(t, k.sweeps(), &k.topo)
	res, err := Fit(k.menus, pts, FitOptions{})
	require.NoError(t, err)
	require.Len(t, res.Starts, len(startFactors))
	for i, st := range res.Starts {
		t.Logf("start %d: bw x%g, loss %.6g", i, st.BWFactor, st.Loss)
		assert.Equal(t, startFactors[i], st.BWFactor)
		assert.GreaterOrEqual(t, st.Loss, res.Starts[res.BestStart].Loss*(1-startTieRel))
	}
	assert.Less(t, res.Starts[res.BestStart].Loss, res.Starts[0].Loss, "the prior's start is the worse local minimum here")

	// Deterministic: the same fit again keeps the same start with the same loss.
	again, err := Fit(k.menus, pts, FitOptions{})
	require.NoError(t, err)
	assert.Equal(t, res.Starts, again.Starts)
	assert.Equal(t, res.BestStart, again.BestStart)
}

// TestScreenEnvelope: a measured cell leaves an envelope point's candidates when its own pinned
// time there (log-log interpolated between measured sizes: at 2000 B between 10 us at 1000 B and
// 40 us at 4000 B, sqrt(10*40) = 20 us) exceeds the point's time by more than 3 %; outside the
// measured range nothing is dropped; a point left with no candidate is a problem naming its line.
func TestScreenEnvelope(t *testing.T) {
	a := Cell{costmodel.AllReduce, costmodel.Ring, costmodel.Simple}
	b := Cell{costmodel.AllReduce, costmodel.NVLS, costmodel.Simple}
	pinned := []Point{
		{File: "ring", Line: 2, Bytes: 1000, TimeUS: 12, Cells: []Cell{a}},
		{File: "ring", Line: 3, Bytes: 1000, TimeUS: 10, Cells: []Cell{a}}, // repeated: the fastest counts
		{File: "ring", Line: 4, Bytes: 4000, TimeUS: 40, Cells: []Cell{a}},
	}
	for _, tc := range []struct {
		name   string
		bytes  int64
		timeUS float64
		cells  []Cell
		want   []Cell // nil: a problem
	}{
		{"slower by more than the margin", 2000, 19, []Cell{a, b}, []Cell{b}},
		{"within the margin", 2000, 19.5, []Cell{a, b}, []Cell{a, b}},
		{"at a measured size", 1000, 9.5, []Cell{a, b}, []Cell{b}},
		{"repeated size: the fastest", 1000, 9.8, []Cell{a, b}, []Cell{a, b}},
		{"outside the measured range", 8000, 1, []Cell{a}, []Cell{a}},
		{"below the measured range", 500, 1, []Cell{a}, []Cell{a}},
		{"unmeasured cell", 2000, 1, []Cell{b}, []Cell{b}},
		{"no candidate left", 2000, 10, []Cell{a}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := []Point{{File: "free", Line: 7, Bytes: tc.bytes, TimeUS: tc.timeUS, Cells: tc.cells}}
			out, _, probs := screenEnvelope(env, pinned)
			if tc.want == nil {
				assert.Empty(t, out)
				require.Len(t, probs, 1)
				assert.Equal(t, "free", probs[0].File)
				assert.Equal(t, 7, probs[0].Line)
				assert.Contains(t, probs[0].Msg, "AllReduce/RING/SIMPLE 20 us")
				return
			}
			assert.Empty(t, probs)
			require.Len(t, out, 1)
			assert.Equal(t, tc.want, out[0].Cells)
		})
	}
}

// TestFitEnvelopePointWithNoCandidate: an envelope point (Ring, protocol free) whose every allowed
// cell (Ring/LL, Ring/Simple) its own pinned sweep measured slower is a problem of the fit, not a
// fitted point.
func TestFitEnvelopePointWithNoCandidate(t *testing.T) {
	k := newNVSwitchCase(t)
	pts, probs := pointsOf(t, k.sweeps()[:1], &k.topo) // the Ring/Simple sweep alone
	require.Empty(t, probs)
	ringLL := Cell{costmodel.AllReduce, costmodel.Ring, costmodel.LL}
	i := len(pts) - 1
	n := pts[i].Bytes
	pts = append(pts, Point{File: "ring-ll.txt", Line: 5, Coll: costmodel.AllReduce, Bytes: n, Cells: []Cell{ringLL},
		TimeUS: float64(k.menus[costmodel.AllReduce].Time(ringLL.Algo, ringLL.Proto, n))})
	bad := Point{File: "ring-proto-free.txt", Line: 9, Coll: costmodel.AllReduce, Bytes: n, TimeUS: pts[i].TimeUS / 2,
		Cells: []Cell{ringLL, ringSimple}, Algo: "Ring"}
	res, err := Fit(k.menus, append(pts, bad), FitOptions{})
	require.NoError(t, err)
	require.Len(t, res.Problems, 1)
	assert.Equal(t, "ring-proto-free.txt:9", fmt.Sprintf("%s:%d", res.Problems[0].File, res.Problems[0].Line))
	assert.Contains(t, res.Problems[0].Msg, "AllReduce/RING/LL")
	assert.Contains(t, res.Problems[0].Msg, "AllReduce/RING/SIMPLE")
	assert.Len(t, res.Residuals, len(pts), "the point is not fitted")
	assert.Empty(t, res.Starts, "no envelope point left: no envelope stage")
}

// TestReportUnmeasuredPicks: the report of the NVSwitch fit lists the fitted planner's picks of
// cells no pinned sweep measured (NVLS/Simple at the large sizes, inferred from the free sweep),
// never Ring/Simple, and the envelope stage's starts.
func TestReportUnmeasuredPicks(t *testing.T) {
	ctx := context.Background()
	k := newNVSwitchCase(t)
	pts, _ := pointsOf(t, k.sweeps(), &k.topo)
	res, err := Fit(k.menus, pts, FitOptions{})
	require.NoError(t, err)
	fitted, err := planner.New(&k.topo, planner.Config{Cells: res.Overrides()})
	require.NoError(t, err)
	rep, err := BuildReport(ctx, 1, k.prior, fitted, nil, nil, res, pts, nil)
	require.NoError(t, err)
	var lines []string
	for _, u := range rep.UnmeasuredPicks {
		assert.NotEqual(t, ringSimple.String(), u.Cell)
		lines = append(lines, u.String())
	}
	assert.Contains(t, lines, "unmeasured pick: AllReduce/NVLS/SIMPLE at 1 GiB, inferred from the free sweep")
	assert.Less(t, rep.FittedRegretMax, 0.05)
	require.Len(t, rep.Starts, len(startFactors))

	var b bytes.Buffer
	require.NoError(t, rep.WriteText(&b))
	txt := b.String()
	// Runs of sizes are one line. NVLS's truth beats Ring/Simple's when 80 + n/625e3 < 30 + n/250e3,
	// n > 50 / (1/250e3 - 1/625e3) = 20.8e6 B: from 32 MiB, 6 sizes to 1 GiB.
	assert.Contains(t, txt, "unmeasured pick: AllReduce/NVLS/SIMPLE at 32 MiB .. 1 GiB (6 sizes), inferred from the free sweep\n")
	assert.Contains(t, txt, "envelope fit: 3 starts")
	assert.Contains(t, txt, "(kept)")
	assert.Contains(t, txt, "inferred (envelope sweeps only; no pinned sweep measured it)")
}

// TestFitResidualsInPointOrder: the residuals follow the points' order (pinned and envelope
// interleaved as given), whatever stage fitted each.
func TestFitResidualsInPointOrder(t *testing.T) {
	k := newNVSwitchCase(t)
	pts, _ := pointsOf(t, k.sweeps(), &k.topo)
	var mixed []Point // ring, free, ring, free, ...
	half := len(pts) / 2
	for i := 0; i < half; i++ {
		mixed = append(mixed, pts[i], pts[half+i])
	}
	res, err := Fit(k.menus, mixed, FitOptions{})
	require.NoError(t, err)
	require.Len(t, res.Residuals, len(mixed))
	for i, r := range res.Residuals {
		assert.Equal(t, mixed[i].File, r.File, "residual %d", i)
		assert.Equal(t, mixed[i].Line, r.Line, "residual %d", i)
	}
}

// TestUnmeasuredLines: runs of consecutive measured sizes with the same cell, source and prior pick
// share a line; a measured size between two breaks the run.
func TestUnmeasuredLines(t *testing.T) {
	u := func(at int, n int64, cell, prior string) UnmeasuredPick {
		return UnmeasuredPick{Coll: "AllReduce", Bytes: n, Cell: cell, Source: "inferred from the free sweep", PriorPick: prior, at: at}
	}
	ll, nv := "AllReduce/RING/LL", "AllReduce/NVLS/SIMPLE"
	got := unmeasuredLines([]UnmeasuredPick{
		u(0, 8, ll, ""), u(1, 16, ll, ""), u(2, 32, ll, ""), // a run
		u(4, 128, ll, ""),                    // size 64 (index 3) was a measured pick
		u(5, 256, ll, nv), u(6, 512, ll, nv), // another prior pick
		u(7, 1024, nv, ""),
	})
	assert.Equal(t, []string{
		"unmeasured pick: AllReduce/RING/LL at 8 B .. 32 B (3 sizes), inferred from the free sweep",
		"unmeasured pick: AllReduce/RING/LL at 128 B, inferred from the free sweep",
		"unmeasured pick: AllReduce/RING/LL at 256 B .. 512 B (2 sizes), inferred from the free sweep; the prior picks AllReduce/NVLS/SIMPLE there",
		"unmeasured pick: AllReduce/NVLS/SIMPLE at 1 KiB, inferred from the free sweep",
	}, got)
}
