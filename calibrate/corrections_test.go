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
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
)

// dipCells are the cells whose true bandwidth dips (x dipFactor) in two buckets each, on top of the
// prior's own factors (treeCorrectionFactor for Tree): buckets where the bandwidth term is most of
// the time (Ring/LL: 1..4 MiB; Tree/LL128: 4..16 MiB, where treeCorrectionFactor is .8 and .9).
var dipCells = map[Cell][]int{
	{costmodel.AllReduce, costmodel.Ring, costmodel.LL}:    {14, 15},
	{costmodel.AllReduce, costmodel.Tree, costmodel.LL128}: {16, 17},
}

const dipFactor = 0.5

// dipTruth is the truth planner of the recovery test (prior x truthFactors) with the dips: the
// buckets of dips, their bandwidth x factor.
func dipTruth(t *testing.T, topo *capabilities.Topology, prior map[costmodel.Coll]*planner.Menu, dips map[Cell][]int, factor float64) (*planner.Planner, *correction.Factors) {
	t.Helper()
	f := *correction.Default(topo)
	for c, dipBuckets := range dips {
		row := make([]float64, correction.NumBuckets)
		for b := range row {
			row[b] = float64(f.Factor(c.Coll, c.Algo, c.Proto, correction.BucketStart(b)))
			for _, d := range dipBuckets {
				if b == d {
					row[b] *= factor
				}
			}
		}
		require.NoError(t, f.Set(c.Coll, c.Algo, c.Proto, row, correction.SourceTable))
	}
	var cells []planner.CellOverride
	for c, tf := range truthFactors {
		mc := prior[c.Coll].Cells[c.Algo][c.Proto]
		cells = append(cells, planner.CellOverride{Coll: c.Coll, Algo: c.Algo, Proto: c.Proto,
			LatUS: float32(float64(mc.LatUS) * tf[0]), BWGBps: float32(float64(mc.BWGBps) * tf[1])})
	}
	pl, err := planner.New(topo, planner.Config{Cells: cells, Factors: &f})
	require.NoError(t, err)
	return pl, &f
}

// sweepsPerOctave builds one pinned sweep per true cell, 8 B .. 1 GiB with perOctave sizes per
// octave, the true time times lognormal noise.
func sweepsPerOctave(t *testing.T, truth *planner.Planner, nodes, perOctave int, noise float64, seed int64) []*Sweep {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	return sweepsWith(t, truth, nodes, perOctave, func(Cell, int, int64) float64 { return noise * rng.NormFloat64() })
}

// sweepsWith builds one pinned sweep per true cell, 8 B .. 1 GiB with perOctave sizes per octave,
// the true time times exp(noise(cell, k, bytes)) at the k-th size.
func sweepsWith(t *testing.T, truth *planner.Planner, nodes, perOctave int, noise func(c Cell, k int, n int64) float64) []*Sweep {
	t.Helper()
	m, err := truth.Prepare(context.Background(), planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	require.NoError(t, err)
	algo := map[costmodel.Algo]string{costmodel.Tree: "Tree", costmodel.Ring: "Ring", costmodel.NVLSTree: "NVLSTree"}
	var out []*Sweep
	for _, c := range sortedCells(truthFactors) {
		s := &Sweep{File: "synth-" + c.String(), Line: 1, Coll: c.Coll, CollKnown: true, Nodes: nodes,
			Pin: Pin{Algo: algo[c.Algo], Proto: c.Proto.String(), Source: pinSourceManif}}
		for k := 0; k <= 27*perOctave; k++ {
			n := int64(math.Round(8*math.Pow(2, float64(k)/float64(perOctave))/4)) * 4
			tm := float64(m.Menu().Time(c.Algo, c.Proto, n)) * math.Exp(noise(c, k, n))
			s.Rows = append(s.Rows, Row{Line: k + 2, Bytes: n, Count: n / 4, OOP: Half{TimeUS: tm, Valid: true}, IP: Half{TimeUS: tm, Valid: true}})
		}
		out = append(out, s)
	}
	return out
}

func TestFitCorrectedRecoversBucketDips(t *testing.T) {
	ctx := context.Background()
	topo := loadTopo(t, "s2.toml")
	_, prior := priorOf(t, &topo)
	truth, truthF := dipTruth(t, &topo, prior, dipCells, dipFactor)
	isDip := func(c Cell, b int) bool {
		for _, db := range dipCells[c] {
			if b == db {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		perOctave int
		seed      int64
	}{{4, 1}, {4, 2}, {4, 3}, {2, 1}, {2, 2}, {2, 3}, {1, 1}, {1, 2}, {1, 3}} {
		t.Run(fmt.Sprintf("perOctave%d/seed%d", tc.perOctave, tc.seed), func(t *testing.T) {
			sweeps := sweepsPerOctave(t, truth, topo.NNodes, tc.perOctave, 0.03, tc.seed)
			pts, probs := pointsOf(t, sweeps, &topo)
			require.Empty(t, probs)
			cf, err := FitCorrected(ctx, &topo, planner.Config{}, pts, FitOptions{}, CorrectionOptions{})
			require.NoError(t, err)
			found := map[Cell]map[int]bool{}
			for _, bc := range cf.Corrections {
				want := float64(truthF.Factor(bc.Cell.Coll, bc.Cell.Algo, bc.Cell.Proto, correction.BucketStart(bc.Bucket)))
				t.Logf("%s bucket %d: prior %.3g mult %.3f factor %.3f ± %.2g (true %.3f, %+.1f%%) points %d loss %.1f -> %.1f",
					bc.Cell, bc.Bucket, bc.Prior, bc.Mult, bc.Factor, bc.Sigma, want, 100*(bc.Factor/want-1), bc.Points, bc.LossBefore, bc.LossAfter)
				assert.True(t, isDip(bc.Cell, bc.Bucket), "%s bucket %d corrected (x%.3f) but has no dip", bc.Cell, bc.Bucket, bc.Mult)
				if tc.perOctave >= 2 {
					assert.InDelta(t, 1, bc.Factor/want, 0.10, "%s bucket %d", bc.Cell, bc.Bucket)
				} else {
					// One point per bucket: 3% noise over a bandwidth share of ~0.6 is ~5% on the
					// factor; hold it to 3 of its own sigmas.
					assert.InDelta(t, want, bc.Factor, 3*bc.Sigma, "%s bucket %d", bc.Cell, bc.Bucket)
				}
				if found[bc.Cell] == nil {
					found[bc.Cell] = map[int]bool{}
				}
				found[bc.Cell][bc.Bucket] = true
			}
			for d, bs := range dipCells {
				for _, b := range bs {
					assert.True(t, found[d][b], "%s bucket %d: dip not found", d, b)
				}
			}
			// Everywhere else the fitted factors are the prior's.
			for _, c := range sortedCells(truthFactors) {
				for b := 0; b < correction.NumBuckets; b++ {
					if isDip(c, b) {
						continue
					}
					n := correction.BucketStart(b)
					assert.Equal(t, prior[c.Coll].Factor(c.Algo, c.Proto, n), cf.Factors.Factor(c.Coll, c.Algo, c.Proto, n), "%s bucket %d", c, b)
				}
			}
			// The fitted cells stay close to the truth.
			for _, p := range cf.Params {
				f := truthFactors[p.Cell]
				mc := prior[p.Cell.Coll].Cells[p.Cell.Algo][p.Cell.Proto]
				want := float64(mc.LatUS) * f[0]
				if p.Kind == "bw_gbps" {
					want = float64(mc.BWGBps) * f[1]
				}
				t.Logf("%s %s: fitted %.4g true %.4g (%+.1f%%)", p.Cell, p.Kind, p.Value, want, 100*(p.Value/want-1))
			}
			t.Logf("median rel %.3f max %.3f", cf.MedianRel, cf.MaxRel)
		})
	}
}

// TestFitCorrectionsFindsAKneeRun: a CPU's cache knee, as the cpu table's NVLS AllReduce showed at
// 1 x 2 (bandwidth halved from 1 MiB up, one point per log2 bucket, each 3.3-4.8 sigma of a spread
// of 0.18): Tree/LL's bandwidth is halved in buckets 18-21, where its time is bandwidth, and every
// other point of every cell is off by exp(+-0.13) in turn (a spread of 1.4826 x 0.13 = 0.19). Each
// knee bucket alone is about 3.6 sigma (log 2 over 0.19), short of a lone point's 5, so the rule
// of single buckets writes none of them; as a run of 4 neighbours leaning the same way (Stouffer:
// 4 x 3.6 / 2 = 7.2) all four are written, near 0.5 each, and nothing else is.
func TestFitCorrectionsFindsAKneeRun(t *testing.T) {
	ctx := context.Background()
	topo := loadTopo(t, "s2.toml")
	_, prior := priorOf(t, &topo)
	knee := Cell{costmodel.AllReduce, costmodel.Tree, costmodel.LL}
	kneeBuckets := []int{18, 19, 20, 21}
	truth, truthF := dipTruth(t, &topo, prior, map[Cell][]int{knee: kneeBuckets}, 0.5)
	sweeps := sweepsWith(t, truth, topo.NNodes, 1, func(c Cell, k int, n int64) float64 {
		if b := correction.Bucket(n); c == knee && b >= kneeBuckets[0] && b <= kneeBuckets[len(kneeBuckets)-1] {
			return 0
		}
		return 0.13 * float64(1-2*(k%2))
	})
	pts, probs := pointsOf(t, sweeps, &topo)
	require.Empty(t, probs)
	for _, tc := range []struct {
		name string
		opt  CorrectionOptions
		want []int
	}{
		{"runs", CorrectionOptions{}, kneeBuckets},
		{"single buckets only", CorrectionOptions{RunLen: 1 << 10}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf, err := FitCorrected(ctx, &topo, planner.Config{}, pts, FitOptions{}, tc.opt)
			require.NoError(t, err)
			var got []int
			for _, bc := range cf.Corrections {
				want := float64(truthF.Factor(bc.Cell.Coll, bc.Cell.Algo, bc.Cell.Proto, correction.BucketStart(bc.Bucket)))
				t.Logf("%s bucket %d: factor %.3f ± %.2g (true %.3f)", bc.Cell, bc.Bucket, bc.Factor, bc.Sigma, want)
				require.Equal(t, knee, bc.Cell, "bucket %d", bc.Bucket)
				assert.InDelta(t, 1, bc.Factor/want, 0.15, "bucket %d", bc.Bucket)
				got = append(got, bc.Bucket)
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFitCorrectionsNoneWithoutDips(t *testing.T) {
	ctx := context.Background()
	topo := loadTopo(t, "s2.toml")
	_, prior := priorOf(t, &topo)
	truth := truthPlanner(t, &topo, prior)
	for seed := int64(1); seed <= 10; seed++ {
		for _, po := range []int{1, 2, 4} {
			pts, _ := pointsOf(t, sweepsPerOctave(t, truth, topo.NNodes, po, 0.03, seed), &topo)
			cf, err := FitCorrected(ctx, &topo, planner.Config{}, pts, FitOptions{}, CorrectionOptions{})
			require.NoError(t, err)
			for _, bc := range cf.Corrections {
				t.Errorf("seed %d perOctave %d: %s bucket %d corrected x%.3f without a dip", seed, po, bc.Cell, bc.Bucket, bc.Mult)
			}
		}
	}
}

// TestFitDownWeightsNoisyPoints: spikes (x1.6) on a quarter of a cell's bandwidth-bound points pull
// the fit less when those rows carry a high -I per-iteration CV.
func TestFitDownWeightsNoisyPoints(t *testing.T) {
	topo := loadTopo(t, "s2.toml")
	_, prior := priorOf(t, &topo)
	truth := truthPlanner(t, &topo, prior)
	c := Cell{costmodel.AllReduce, costmodel.Ring, costmodel.LL}
	wantBW := float64(prior[c.Coll].Cells[c.Algo][c.Proto].BWGBps) * truthFactors[c][1]
	bwErr := func(cv float64) float64 {
		sw := sweepsPerOctave(t, truth, topo.NNodes, 2, 0.01, 1)
		for _, s := range sw {
			if s.Pin.Algo != "Ring" || s.Pin.Proto != c.Proto.String() {
				continue
			}
			for i := range s.Rows {
				if s.Rows[i].Bytes >= 1<<20 && i%4 == 0 {
					s.Rows[i].IP.TimeUS *= 1.6
					s.Rows[i].IP.IterCVPct = cv
				}
			}
		}
		pts, _ := pointsOf(t, sw, &topo)
		res, err := Fit(prior, pts, FitOptions{})
		require.NoError(t, err)
		return math.Abs(res.Fitted[c][1]/wantBW - 1)
	}
	plain, weighted := bwErr(0), bwErr(60)
	t.Logf("Ring/LL bandwidth error: spikes unflagged %.2f%%, flagged CV 60%% %.2f%%", 100*plain, 100*weighted)
	assert.Less(t, weighted, plain)
}
