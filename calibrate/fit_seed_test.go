package calibrate

import (
	"bufio"
	"context"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// seedCSV is a verbatim copy of shared/data/seed/h200-2n4n-tree-vs-ring.csv.
const seedCSV = "testdata/fit/h200-2n4n-tree-vs-ring.csv"

// seedSweeps reads the seed CSV (bytes, tree_2n_us, ring_2n_us, tree_4n_us, ring_4n_us; in-place
// times, algorithm pinned, protocol free) into two sweeps per node count: Tree and Ring.
func seedSweeps(t *testing.T, nodes int) []*Sweep {
	t.Helper()
	f, err := os.Open(seedCSV)
	require.NoError(t, err)
	defer f.Close()
	col := map[int][2]int{2: {1, 2}, 4: {3, 4}}[nodes]
	var sw [2]*Sweep
	for i, algo := range []string{"Tree", "Ring"} {
		sw[i] = &Sweep{File: seedCSV, Line: 1, Coll: costmodel.AllReduce, CollKnown: true, Nodes: nodes, Pin: Pin{Algo: algo, Source: pinSourceManif}}
	}
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, "bytes") {
			continue
		}
		fs := strings.Split(l, ",")
		require.Len(t, fs, 5, "line %d", line)
		n, err := strconv.ParseInt(fs[0], 10, 64)
		require.NoError(t, err)
		for i := range sw {
			v, err := strconv.ParseFloat(fs[col[i]], 64)
			require.NoError(t, err)
			sw[i].Rows = append(sw[i].Rows, Row{Line: line, Bytes: n, Count: n / 4, IP: Half{TimeUS: v, Valid: true}})
		}
	}
	require.NoError(t, sc.Err())
	return sw[:]
}

// envelope is the least time over an algorithm's legal protocols.
func envelope(m *planner.Menu, a costmodel.Algo, n int64) float64 {
	best := math.Inf(1)
	for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
		if t := m.Time(a, p, n); t >= 0 {
			best = math.Min(best, float64(t))
		}
	}
	return best
}

// handover is the first size (on a 1/64-octave grid from 64 KiB) from which Ring's envelope beats
// Tree's.
func handover(m *planner.Menu) int64 {
	for n := int64(64 << 10); n <= 1<<31; n += n / 64 {
		if envelope(m, costmodel.Ring, n) < envelope(m, costmodel.Tree, n) {
			return n
		}
	}
	return -1
}

func TestFitSeedTreeRingHandover(t *testing.T) {
	ctx := context.Background()
	node, err := tables.Load("h200")
	require.NoError(t, err)
	got := map[int]int64{}
	for _, nodes := range []int{2, 4} {
		topo, err := capabilities.FromNode(node, nodes)
		require.NoError(t, err)
		prior, err := planner.New(&topo, planner.Config{})
		require.NoError(t, err)
		menus, err := Menus(ctx, prior)
		require.NoError(t, err)
		pts, probs := pointsOf(t, seedSweeps(t, nodes), &topo)
		require.Empty(t, probs)
		res, err := Fit(menus, pts, FitOptions{})
		require.NoError(t, err)
		for _, p := range res.Params {
			t.Logf("%d nodes: %s %s prior %.4g fitted %.4g ± %.2g identified %v", nodes, p.Cell, p.Kind, p.Prior, p.Value, p.Sigma, p.Identified)
		}
		for _, r := range res.Residuals {
			t.Logf("%d nodes: %s %d B: meas %.0f pred %.1f (%s)", nodes, r.Algo, r.Bytes, r.TimeUS, r.PredUS, r.Cell)
		}
		fitted, err := planner.New(&topo, planner.Config{Cells: res.Overrides()})
		require.NoError(t, err)
		fm, err := Menus(ctx, fitted)
		require.NoError(t, err)
		got[nodes] = handover(fm[costmodel.AllReduce])
		t.Logf("%d nodes: prior handover %d B, fitted %d B (%.1f MiB); median |rel err| %.3f max %.3f",
			nodes, handover(menus[costmodel.AllReduce]), got[nodes], float64(got[nodes])/(1<<20), res.MedianRel, res.MaxRel)
	}
	assert.True(t, got[2] >= 1<<20 && got[2] <= 25<<20, "2 nodes: handover %d B, want 1..25 MiB", got[2])
	assert.True(t, got[4] >= 16<<20 && got[4] <= 64<<20, "4 nodes: handover %d B, want 16..64 MiB", got[4])
	assert.Greater(t, got[4], got[2])
}
