package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin/shimtable"
	"github.com/collplan/collplan/tables"
)

// loopTruth is the simulated device: per legal AllReduce cell of h100 at 1 node x 8 ranks, a
// seeded time that the model's alpha-beta family does not contain: the model's time scaled per
// cell, times a bump over a band of sizes (a Gaussian in log2 size), with a plateau (a floor that
// holds over the small sizes). Regret is computed from this function, never from numbers copied
// into the test.
type loopTruth struct {
	menu  *planner.Menu
	cells []planner.Cell
	scale map[planner.Cell]float64
	bumpA map[planner.Cell]float64 // bump height (fraction)
	bumpM map[planner.Cell]float64 // bump centre, log2 bytes
	floor map[planner.Cell]float64 // plateau, us
}

// newLoopTruth draws the truth; the cells the prior table picks (share: of the workload's sizes)
// are made slower in proportion, so that the truth disagrees with the prior.
func newLoopTruth(rng *rand.Rand, m *planner.Menu, share map[planner.Cell]float64) *loopTruth {
	tr := &loopTruth{menu: m, scale: map[planner.Cell]float64{}, bumpA: map[planner.Cell]float64{},
		bumpM: map[planner.Cell]float64{}, floor: map[planner.Cell]float64{}}
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			if m.Cells[a][p].Reason != "" {
				continue
			}
			c := planner.Cell{Algo: a, Proto: p}
			tr.cells = append(tr.cells, c)
			tr.scale[c] = (0.7 + 0.6*rng.Float64()) * (1 + 2*share[c])
			tr.bumpA[c] = 0.6 * rng.Float64()
			tr.bumpM[c] = 14 + 12*rng.Float64()
			tr.floor[c] = 8 + 30*rng.Float64()
		}
	}
	return tr
}

// us is the cell's true time at n bytes.
func (tr *loopTruth) us(c planner.Cell, n int64) float64 {
	base := float64(tr.menu.Time(c.Algo, c.Proto, n)) * tr.scale[c]
	x := math.Log2(float64(max(n, 1)))
	base *= 1 + tr.bumpA[c]*math.Exp(-(x-tr.bumpM[c])*(x-tr.bumpM[c])/8)
	return math.Max(base, tr.floor[c])
}

// regret is cell c's time over the truth's best legal cell's, minus 1.
func (tr *loopTruth) regret(c planner.Cell, n int64) float64 {
	best := math.Inf(1)
	for _, d := range tr.cells {
		best = math.Min(best, tr.us(d, n))
	}
	return tr.us(c, n)/best - 1
}

// simRank is one rank's tuner: the table's first plan, except that COLLPLAN_EXPLORE's rule (the
// shim's explore_step, README "Exploration that keeps ranks in step") sends every P-th call of a
// band to a runner-up; every plan of the table is legal here (the simulated NCCL marks no cell
// IGNORE). The counters are the rank's own.
type simRank struct {
	tb     *shimtable.Table
	period int // 0: off
	counts map[[2]int64]int
}

func (r *simRank) decide(n int64) shimtable.Plan {
	plans := r.tb.Lookup(1, 8, int(costmodel.AllReduce), 1, n)
	if r.period == 0 || len(plans) < 2 {
		return plans[0]
	}
	cl := r.tb.Blocks[0].Classes[costmodel.AllReduce][0]
	band := int64(0)
	for i, s := range cl.Starts {
		if s <= n {
			band = int64(i)
		}
	}
	key := [2]int64{int64(costmodel.AllReduce), band}
	c := r.counts[key]
	r.counts[key] = c + 1
	if c%r.period != r.period-1 {
		return plans[0]
	}
	return plans[1+(c/r.period)%(len(plans)-1)]
}

// loopSizes is the workload's sizes: 4 KiB to 256 MiB, four per octave, multiples of 4 bytes.
func loopSizes() []int64 {
	var out []int64
	for e := 12.0; e <= 28; e += 0.25 {
		out = append(out, int64(math.Round(math.Pow(2, e)/4))*4)
	}
	return out
}

// runJob runs ranks through the workload (every size reps times, interleaved) and returns each
// rank's decisions and, with dir set, writes each rank's profiler dump of the truth's times (2 %
// noise) in docs/profile-dump.md's schema.
func runJob(t *testing.T, tb *shimtable.Table, tr *loopTruth, ranks, reps, period int, dir string, rng *rand.Rand) [][]shimtable.Plan {
	sizes := loopSizes()
	out := make([][]shimtable.Plan, ranks)
	for r := 0; r < ranks; r++ {
		sr := &simRank{tb: tb, period: period, counts: map[[2]int64]int{}}
		var b strings.Builder
		fmt.Fprintf(&b, `{"type":"header","schema":1,"profiler":6,"host":"sim","pid":%d,"commId":"00000000000000ab","commName":"sim","nNodes":1,"nRanks":8,"rank":%d,"maxBytes":67108864}`+"\n", 100+r, r)
		seq, clock := 0, uint64(1000)
		for rep := 0; rep < reps; rep++ {
			for _, n := range sizes {
				p := sr.decide(n)
				out[r] = append(out[r], p)
				c := planner.Cell{Algo: costmodel.Algo(p.Algo), Proto: costmodel.Proto(p.Proto)}
				ns := uint64(math.Round(tr.us(c, n) * 1000 * (1 + 0.02*(2*rng.Float64()-1))))
				fmt.Fprintf(&b, `{"type":"coll","seq":%d,"coll":"AllReduce","algo":"%s","proto":"%s","nChannels":8,"count":%d,"datatype":"ncclFloat32","bytes":%d,"numPipeOps":1,"kernelChannels":8,"startNs":%d,"ns":%d}`+"\n",
					seq, c.Algo, c.Proto, n/4, n, clock, ns)
				seq++
				clock += ns + 5000
			}
		}
		fmt.Fprintf(&b, `{"type":"end","records":%d,"dropped":{"ringFull":0,"poolFull":0,"cap":0,"io":0,"unfinished":0}}`+"\n", seq)
		if dir != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("sim-%d-00000000000000ab.jsonl", 100+r)), []byte(b.String()), 0o644))
		}
	}
	return out
}

func medianRegret(tb *shimtable.Table, tr *loopTruth) float64 {
	var rs []float64
	for _, n := range loopSizes() {
		p := tb.Lookup(1, 8, int(costmodel.AllReduce), 1, n)[0]
		rs = append(rs, tr.regret(planner.Cell{Algo: costmodel.Algo(p.Algo), Proto: costmodel.Proto(p.Proto)}, n))
	}
	slices.Sort(rs)
	return (rs[len(rs)/2] + rs[(len(rs)-1)/2]) / 2
}

// TestClosedLoopSimulated is issue 17's closed loop on a simulated device (h100, 1 node x 8 ranks,
// AllReduce): job 1 runs the prior table with 5 % exploration on four ranks whose dumps record the
// truth's times; `calibrate --dumps` fits them; the fitted table (shimtable.Compile, what `planner
// compile --table` runs, over the table with the fit beside it) runs job 2. The ranks' tuner is
// the shim's exploration rule reimplemented in Go (simRank): the C library is not loaded, so
// "every rank decided alike" checks the rule's determinism, not the shim's. This seed reaches the
// 2 % goal; TestClosedLoopSeeds asserts the same on eight other truths.

// loopSetup is the loop's shape (h100, 1 node x 8 ranks, AllReduce float32 sum): the shim table
// request, the prior table compiled from it, and the class's menu the truth scales.
func loopSetup(t *testing.T) (shimtable.Request, *shimtable.Table, *planner.Menu) {
	t.Helper()
	base, err := tables.LoadBase("h100")
	require.NoError(t, err)
	req := shimtable.Request{Node: base, Nodes: []int{1}, RanksPerNode: []int{8}, MaxPipeOps: 1}
	prior, err := shimtable.Compile(context.Background(), req)
	require.NoError(t, err)
	tp, err := capabilities.FromNode(base, 1)
	require.NoError(t, err)
	cfg, err := node.PlannerConfig(base, &tp)
	require.NoError(t, err)
	pl, err := planner.New(&tp, cfg)
	require.NoError(t, err)
	m, err := pl.Menu(planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	require.NoError(t, err)
	return req, prior, m
}

func TestClosedLoopSimulated(t *testing.T) {
	req, prior, m := loopSetup(t)
	tr := newLoopTruth(rand.New(rand.NewPCG(2026, 17)), m, priorShare(prior))

	r1 := medianRegret(prior, tr)
	require.Greater(t, r1, 0.10, "the truth must disagree with the prior table (median regret of its picks)")

	next, decisions, cells := closeLoop(t, req, prior, tr, 20)
	for r := 1; r < len(decisions); r++ {
		require.Equal(t, decisions[0], decisions[r], "rank %d decided apart from rank 0", r)
	}
	explored := 0
	for i, d := range decisions[0] {
		if d != prior.Lookup(1, 8, int(costmodel.AllReduce), 1, loopSizes()[i%len(loopSizes())])[0] {
			explored++
		}
	}
	require.Positive(t, explored, "job 1 explored")
	r2 := medianRegret(next, tr)
	// The control: the same loop without exploration measures only the prior's picks.
	ctl, _, ctlCells := closeLoop(t, req, prior, tr, 0)
	t.Logf("median regret against the truth's best cell: job 1 (prior table) %.1f %%, job 2 (fitted, %d cells) %.1f %% (max %.1f %%); without exploration job 2 (%d cells) %.1f %%",
		100*r1, cells, 100*r2, 100*maxRegret(next, tr), ctlCells, 100*medianRegret(ctl, tr))
	assert.LessOrEqual(t, r2, 0.02, "job 2's median regret")
}

// closeLoop runs job 1 on four ranks with exploration period (0: off), fits its dumps with
// calibrate --dumps and compiles the fitted table.
func closeLoop(t *testing.T, req shimtable.Request, prior *shimtable.Table, tr *loopTruth, period int) (*shimtable.Table, [][]shimtable.Plan, int) {
	dir := t.TempDir()
	dumps := filepath.Join(dir, "dumps")
	require.NoError(t, os.Mkdir(dumps, 0o755))
	decisions := runJob(t, prior, tr, 4, 40, period, dumps, rand.New(rand.NewPCG(1, 2)))
	data, err := os.ReadFile("../../tables/h100.toml")
	require.NoError(t, err)
	tableFile := filepath.Join(dir, "h100.toml")
	require.NoError(t, os.WriteFile(tableFile, data, 0o644))
	var out, errb bytes.Buffer
	err = run(context.Background(), []string{"--node", tableFile, "--dumps", dumps, "--out", tables.OverlayPath(tableFile), "--date", "2026-12-02"}, &out, &errb)
	require.NoError(t, err, errb.String())
	fitted, err := tables.LoadFile(tableFile)
	require.NoError(t, err)
	require.NotNil(t, fitted.Fit)
	req.Node = fitted
	next, err := shimtable.Compile(context.Background(), req)
	require.NoError(t, err)
	return next, decisions, len(fitted.Fit.Cell)
}

func maxRegret(tb *shimtable.Table, tr *loopTruth) float64 {
	worst := 0.0
	for _, n := range loopSizes() {
		p := tb.Lookup(1, 8, int(costmodel.AllReduce), 1, n)[0]
		worst = math.Max(worst, tr.regret(planner.Cell{Algo: costmodel.Algo(p.Algo), Proto: costmodel.Proto(p.Proto)}, n))
	}
	return worst
}

// priorShare is, per cell, the share of the workload's sizes the prior table picks it at.
func priorShare(prior *shimtable.Table) map[planner.Cell]float64 {
	share := map[planner.Cell]float64{}
	for _, n := range loopSizes() {
		p := prior.Lookup(1, 8, int(costmodel.AllReduce), 1, n)[0]
		share[planner.Cell{Algo: costmodel.Algo(p.Algo), Proto: costmodel.Proto(p.Proto)}] += 1 / float64(len(loopSizes()))
	}
	return share
}
