package calibrate

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"text/tabwriter"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
)

// Goals of the closed loop: a fitted planner's median regret and median prediction error on a
// fresh pinned sweep.
const (
	GoalRegret  = 0.05
	GoalPredErr = 0.15
)

// PolicyEval scores one policy on pinned measurements: the regret of its pick per size and its
// prediction error.
type PolicyEval struct {
	Name string `json:"name"`
	// Regret (pick's measured time / best measured time - 1) over the sizes where the pick was
	// measured.
	RegretMedian float64 `json:"regret_median"`
	RegretMax    float64 `json:"regret_max"`
	RegretSizes  int     `json:"regret_sizes"`
	// PickErr: |predicted/measured - 1| of the pick's time, over the same sizes.
	PickErrMedian float64 `json:"pick_err_median"`
	// CellErr: |predicted/measured - 1| over every pinned point the policy predicts (all cells
	// for a model; only Ring/Simple points, predicted by the fitted model, for fixed Ring/Simple).
	CellErrMedian float64 `json:"pred_err_median"`
	CellErrMax    float64 `json:"pred_err_max"`
	CellPoints    int     `json:"pred_points"`
}

// EvalSize is one (collective, size): the best measured pinned cell and each policy's pick.
type EvalSize struct {
	Coll   string  `json:"coll"`
	Bytes  int64   `json:"bytes"`
	Best   string  `json:"best"`
	BestUS float64 `json:"best_us"`
	Picks  []Pick  `json:"picks"` // in Eval.Policies order
}

// Eval is the evaluation of a prior and a fitted planner (and fixed Ring/Simple) against pinned
// sweeps that the fit did not see.
type Eval struct {
	// Prior is what the "prior" policy prices with (set by the caller; Evaluate leaves it empty).
	Prior Prior `json:"prior"`
	Nodes int   `json:"nodes"`
	// RanksPerNode is the ranks per node evaluated at (Nodes x RanksPerNode; set by the caller, 0:
	// not said).
	RanksPerNode int          `json:"ranks_per_node"`
	Points       int          `json:"pinned_points"`
	Sizes        []EvalSize   `json:"sizes"`
	Policies     []PolicyEval `json:"policies"` // prior, fitted, ring/simple
	// GoalMet: the fitted policy's median regret <= GoalRegret and median prediction error <=
	// GoalPredErr.
	GoalMet bool `json:"goal_met"`
}

// Evaluate scores prior, fitted and fixed Ring/Simple on the pinned points of pts (protocol-free
// and free-choice points are ignored: they do not say which cell ran).
func Evaluate(ctx context.Context, nodes int, prior, fitted *planner.Planner, pts []Point) (*Eval, error) {
	pm, err := Menus(ctx, prior)
	if err != nil {
		return nil, err
	}
	fm, err := Menus(ctx, fitted)
	if err != nil {
		return nil, err
	}
	type key struct {
		c costmodel.Coll
		n int64
	}
	by := map[key]map[Cell]float64{}
	var keys []key
	ev := &Eval{Nodes: nodes}
	type pinned struct {
		c Cell
		n int64
		t float64
	}
	var pps []pinned
	for _, p := range pts {
		if !p.Pinned() {
			continue
		}
		k := key{p.Coll, p.Bytes}
		if by[k] == nil {
			by[k] = map[Cell]float64{}
			keys = append(keys, k)
		}
		c := p.Cells[0]
		// Two measurements of one cell at one size (sweeps repeated): keep the faster.
		if t, ok := by[k][c]; !ok || p.TimeUS < t {
			by[k][c] = p.TimeUS
		}
		pps = append(pps, pinned{c, p.Bytes, p.TimeUS})
	}
	ev.Points = len(pps)
	if len(pps) == 0 {
		return nil, fmt.Errorf("calibrate: no pinned point to evaluate")
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].c != keys[j].c {
			return keys[i].c < keys[j].c
		}
		return keys[i].n < keys[j].n
	})
	names := []string{"prior", "fitted", "ring/simple"}
	regrets := make([][]float64, 3)
	pickErr := make([][]float64, 3)
	for _, k := range keys {
		ms := by[k]
		var best Cell
		bt := math.Inf(1)
		for c, t := range ms {
			if t < bt || (t == bt && cellLess(c, best)) {
				best, bt = c, t
			}
		}
		es := EvalSize{Coll: k.c.String(), Bytes: k.n, Best: best.String(), BestUS: bt}
		cls := planner.Class{Coll: k.c, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
		for i := range names {
			var c Cell
			var pred float64
			if i < 2 {
				pl := prior
				if i == 1 {
					pl = fitted
				}
				plan, err := pl.Explain(ctx, cls, k.n)
				if err != nil {
					return nil, err
				}
				c, pred = Cell{k.c, plan.Algo, plan.Proto}, float64(plan.TimeUS)
			} else {
				c = Cell{k.c, costmodel.Ring, costmodel.Simple}
				pred = float64(fm[k.c].Time(c.Algo, c.Proto, k.n))
			}
			pk := Pick{Cell: c.String(), PredUS: pred, Regret: -1}
			if t, ok := ms[c]; ok {
				pk.MeasuredUS = t
				pk.Regret = t/bt - 1
				regrets[i] = append(regrets[i], pk.Regret)
				if pred > 0 {
					pickErr[i] = append(pickErr[i], math.Abs(pred/t-1))
				}
			}
			es.Picks = append(es.Picks, pk)
		}
		ev.Sizes = append(ev.Sizes, es)
	}
	cellErr := make([][]float64, 3)
	for _, p := range pps {
		for i, m := range []map[costmodel.Coll]*planner.Menu{pm, fm} {
			if t := m[p.c.Coll].Time(p.c.Algo, p.c.Proto, p.n); t > 0 {
				cellErr[i] = append(cellErr[i], math.Abs(float64(t)/p.t-1))
			}
		}
		if p.c.Algo == costmodel.Ring && p.c.Proto == costmodel.Simple {
			if t := fm[p.c.Coll].Time(p.c.Algo, p.c.Proto, p.n); t > 0 {
				cellErr[2] = append(cellErr[2], math.Abs(float64(t)/p.t-1))
			}
		}
	}
	for i, name := range names {
		ev.Policies = append(ev.Policies, PolicyEval{Name: name,
			RegretMedian: median(regrets[i]), RegretMax: maxOf(regrets[i]), RegretSizes: len(regrets[i]),
			PickErrMedian: median(pickErr[i]),
			CellErrMedian: median(cellErr[i]), CellErrMax: maxOf(cellErr[i]), CellPoints: len(cellErr[i])})
	}
	f := ev.Policies[1]
	ev.GoalMet = f.RegretSizes > 0 && f.RegretMedian <= GoalRegret && f.CellErrMedian <= GoalPredErr
	return ev, nil
}

// WriteText prints the evaluation: per size, then the summary per policy and the goal.
func (ev *Eval) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if ev.Prior.Table != "" {
		fmt.Fprintf(tw, "prior: %s\n\n", ev.Prior)
	}
	shape := plural(ev.Nodes, "node")
	if ev.RanksPerNode > 0 {
		shape = Shape{ev.Nodes, ev.RanksPerNode}.String()
	}
	fmt.Fprintf(tw, "evaluation on %d pinned points (%s)\ncoll\tbytes\tbest (us)", ev.Points, shape)
	for _, p := range ev.Policies {
		fmt.Fprintf(tw, "\t%s pick (pred/meas us, regret)", p.Name)
	}
	fmt.Fprintln(tw)
	for _, s := range ev.Sizes {
		fmt.Fprintf(tw, "%s\t%d\t%s (%.4g)", s.Coll, s.Bytes, s.Best, s.BestUS)
		for _, p := range s.Picks {
			r := "-"
			if p.Regret >= 0 {
				r = fmt.Sprintf("%.3f", p.Regret)
			}
			fmt.Fprintf(tw, "\t%s (%.4g/%s, %s)", p.Cell, p.PredUS, measured(p.MeasuredUS), r)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "\npolicy\tmedian regret\tmax regret\tsizes\tmedian pick pred err\tmedian pred err\tmax pred err\tpoints\n")
	for _, p := range ev.Policies {
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%d\t%.3f\t%.3f\t%.3f\t%d\n", p.Name, p.RegretMedian, p.RegretMax, p.RegretSizes,
			p.PickErrMedian, p.CellErrMedian, p.CellErrMax, p.CellPoints)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	f := ev.Policies[1]
	verdict := "NOT met"
	if ev.GoalMet {
		verdict = "met"
	}
	_, err := fmt.Fprintf(w, "(ring/simple's prediction error is the fitted model's on the Ring/Simple points)\n"+
		"goal (fitted median regret <= %.0f%%, median prediction error <= %.0f%%): %s (%.1f%%, %.1f%%)\n",
		100*GoalRegret, 100*GoalPredErr, verdict, 100*f.RegretMedian, 100*f.CellErrMedian)
	return err
}
