package calibrate

import (
	"context"
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
