package calibrate

import (
	"context"
	"fmt"
	"io"
	"math"
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

// PolicyEval scores one policy on measured runs: the regret of its pick per size and its
// prediction error.
type PolicyEval struct {
	Name string `json:"name"`
	// Regret (the measured time of the run that measures the pick / the fastest run's time - 1)
	// over the sizes where a run measured the pick: RegretExactSizes by an exact run on the pick,
	// RegretProxySizes by a partial run whose pin allows it (SizeRuns.Measure). For "nccl default"
	// the pick is the free run itself, counted as exact.
	RegretMedian float64 `json:"regret_median"`
	// RegretP90 is the 90th percentile by nearest rank: the ceil(0.9 n)-th smallest of the n
	// sizes' regrets (issue 13's goal: <= 10 %).
	RegretP90        float64 `json:"regret_p90"`
	RegretMax        float64 `json:"regret_max"`
	RegretSizes      int     `json:"regret_sizes"`
	RegretExactSizes int     `json:"regret_exact_sizes"`
	RegretProxySizes int     `json:"regret_proxy_sizes"`
	// PickErr: |predicted/measured - 1| of the pick's time, over the sizes an exact run measured it.
	PickErrMedian float64 `json:"pick_err_median"`
	// CellErr: |predicted/measured - 1| over every exact point the policy predicts (all cells for
	// a model; only Ring/Simple points, predicted by the fitted model, for fixed Ring/Simple).
	CellErrMedian float64 `json:"pred_err_median"`
	CellErrMax    float64 `json:"pred_err_max"`
	CellPoints    int     `json:"pred_points"`
	// EnvErr: |envelope/measured - 1| over every partial and free point, the envelope being the
	// model's least time over the cells the point's pin allows (models only).
	EnvErrMedian float64 `json:"env_err_median"`
	EnvErrMax    float64 `json:"env_err_max"`
	EnvPoints    int     `json:"env_points"`
}

// EvalSize is one (collective, size): the fastest run and each policy's pick.
type EvalSize struct {
	Coll  string `json:"coll"`
	Bytes int64  `json:"bytes"`
	// Best is the fastest run's label (RunTime.Label), BestRun its sweep ("file:line").
	Best    string  `json:"best"`
	BestRun string  `json:"best_run"`
	BestUS  float64 `json:"best_us"`
	Picks   []Pick  `json:"picks"` // in Eval.Policies order
}

// Policy names of an Eval, in Eval.Policies order ("nccl default" only where a free run exists).
const (
	PolicyPrior       = "prior"
	PolicyFitted      = "fitted"
	PolicyRingSimple  = "ring/simple"
	PolicyNCCLDefault = "nccl default"
)

// Eval is the evaluation of a prior and a fitted planner (and fixed Ring/Simple, and NCCL's
// default where free runs exist) against sweeps that the fit did not see.
type Eval struct {
	// Prior is what the "prior" policy prices with (set by the caller; Evaluate leaves it empty).
	Prior Prior `json:"prior"`
	Nodes int   `json:"nodes"`
	// RanksPerNode is the ranks per node evaluated at (Nodes x RanksPerNode; set by the caller, 0:
	// not said).
	RanksPerNode int `json:"ranks_per_node"`
	// Points: exact points (one legal cell); EnvelopePoints: partial and free ones.
	Points         int          `json:"pinned_points"`
	EnvelopePoints int          `json:"envelope_points"`
	Sizes          []EvalSize   `json:"sizes"`
	Policies       []PolicyEval `json:"policies"` // prior, fitted, ring/simple[, nccl default]
	// GoalMet: the fitted policy's median regret <= GoalRegret and median prediction error <=
	// GoalPredErr (on the exact points; on the envelope points where there is no exact one).
	GoalMet bool `json:"goal_met"`
}

// Evaluate scores prior, fitted and fixed Ring/Simple, and NCCL's default (the free runs, where
// any), on pts. A size's best is its fastest run (GroupRuns); a pick is priced by the one run that
// measures it (SizeRuns.Measure: exact, else a partial run as a proxy, never a free one), so no
// regret borrows a time across runs. Exact points are predicted by their cell, partial and free
// ones by the envelope of the cells their pin allows.
func Evaluate(ctx context.Context, nodes int, prior, fitted *planner.Planner, pts []Point) (*Eval, error) {
	if len(pts) == 0 {
		return nil, fmt.Errorf("calibrate: no measured point to evaluate")
	}
	pm, err := Menus(ctx, prior)
	if err != nil {
		return nil, err
	}
	fm, err := Menus(ctx, fitted)
	if err != nil {
		return nil, err
	}
	ev := &Eval{Nodes: nodes}
	hasFree := false
	for _, p := range pts {
		switch RunKindOf(p) {
		case RunExact:
			ev.Points++
		case RunFree:
			hasFree = true
			ev.EnvelopePoints++
		default:
			ev.EnvelopePoints++
		}
	}
	names := []string{PolicyPrior, PolicyFitted, PolicyRingSimple}
	if hasFree {
		names = append(names, PolicyNCCLDefault)
	}
	n := len(names)
	regrets, pickErr := make([][]float64, n), make([][]float64, n)
	exact, proxied := make([]int, n), make([]int, n)
	for _, sr := range GroupRuns(pts) {
		best := sr.Best()
		bt := best.TimeUS
		es := EvalSize{Coll: sr.Coll.String(), Bytes: sr.Bytes, Best: best.Label(), BestRun: best.Run, BestUS: bt}
		cls := planner.Class{Coll: sr.Coll, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
		for i, name := range names {
			if name == PolicyNCCLDefault {
				pk := Pick{Cell: "NCCL default", Regret: -1}
				if d, ok := sr.Default(); ok {
					pk.MeasuredUS, pk.Run, pk.Regret = d.TimeUS, d.Run, d.TimeUS/bt-1
					regrets[i] = append(regrets[i], pk.Regret)
					exact[i]++
				}
				es.Picks = append(es.Picks, pk)
				continue
			}
			var c Cell
			var pred float64
			if i < 2 {
				pl := prior
				if i == 1 {
					pl = fitted
				}
				plan, err := pl.Explain(ctx, cls, sr.Bytes)
				if err != nil {
					return nil, err
				}
				c, pred = Cell{sr.Coll, plan.Algo, plan.Proto}, float64(plan.TimeUS)
			} else {
				c = Cell{sr.Coll, costmodel.Ring, costmodel.Simple}
				pred = float64(fm[sr.Coll].Time(c.Algo, c.Proto, sr.Bytes))
			}
			pk := Pick{Cell: c.String(), PredUS: pred, Regret: -1}
			if r, proxy, ok := sr.Measure(c); ok {
				pk.MeasuredUS, pk.Run, pk.Regret = r.TimeUS, r.Run, r.TimeUS/bt-1
				regrets[i] = append(regrets[i], pk.Regret)
				if proxy {
					pk.Via = r.Label()
					proxied[i]++
				} else {
					exact[i]++
					if pred > 0 {
						pickErr[i] = append(pickErr[i], math.Abs(pred/r.TimeUS-1))
					}
				}
			}
			es.Picks = append(es.Picks, pk)
		}
		ev.Sizes = append(ev.Sizes, es)
	}
	cellErr, envErr := make([][]float64, n), make([][]float64, n)
	for _, p := range pts {
		for i, m := range []map[costmodel.Coll]*planner.Menu{pm, fm} {
			if RunKindOf(p) != RunExact {
				if t, ok := envelopeOf(m, p); ok {
					envErr[i] = append(envErr[i], math.Abs(t/p.TimeUS-1))
				}
				continue
			}
			c := p.PinCells()[0]
			if t := m[c.Coll].Time(c.Algo, c.Proto, p.Bytes); t > 0 {
				cellErr[i] = append(cellErr[i], math.Abs(float64(t)/p.TimeUS-1))
			}
		}
		if c := p.PinCells()[0]; RunKindOf(p) == RunExact && c.Algo == costmodel.Ring && c.Proto == costmodel.Simple {
			if t := fm[c.Coll].Time(c.Algo, c.Proto, p.Bytes); t > 0 {
				cellErr[2] = append(cellErr[2], math.Abs(float64(t)/p.TimeUS-1))
			}
		}
	}
	for i, name := range names {
		ev.Policies = append(ev.Policies, PolicyEval{Name: name,
			RegretMedian: median(regrets[i]), RegretP90: p90(regrets[i]), RegretMax: maxOf(regrets[i]), RegretSizes: len(regrets[i]),
			RegretExactSizes: exact[i], RegretProxySizes: proxied[i],
			PickErrMedian: median(pickErr[i]),
			CellErrMedian: median(cellErr[i]), CellErrMax: maxOf(cellErr[i]), CellPoints: len(cellErr[i]),
			EnvErrMedian: median(envErr[i]), EnvErrMax: maxOf(envErr[i]), EnvPoints: len(envErr[i])})
	}
	f := ev.Policies[1]
	predErr, predN := f.CellErrMedian, f.CellPoints
	if predN == 0 {
		predErr, predN = f.EnvErrMedian, f.EnvPoints
	}
	ev.GoalMet = f.RegretSizes > 0 && f.RegretMedian <= GoalRegret && predN > 0 && predErr <= GoalPredErr
	return ev, nil
}

// envelopeOf is a model's prediction for a point whose pin allows several cells: the least time
// over those cells that the menus price (false when they price none).
func envelopeOf(m map[costmodel.Coll]*planner.Menu, p Point) (float64, bool) {
	best := math.Inf(1)
	for _, c := range p.PinCells() {
		if t := m[c.Coll].Time(c.Algo, c.Proto, p.Bytes); t > 0 {
			best = math.Min(best, float64(t))
		}
	}
	return best, !math.IsInf(best, 1)
}

// goalPredErr is the prediction error the goal is judged on: the fitted policy's on exact
// points, or on envelope points where there is no exact one.
func (ev *Eval) goalPredErr() float64 {
	f := ev.Policies[1]
	if f.CellPoints == 0 {
		return f.EnvErrMedian
	}
	return f.CellErrMedian
}

// WriteText prints the evaluation: per size, then the summary per policy, the prior's and the
// fit's prediction errors side by side, and the goal.
func (ev *Eval) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if ev.Prior.Table != "" {
		fmt.Fprintf(tw, "prior: %s\n\n", ev.Prior)
	}
	shape := plural(ev.Nodes, "node")
	if ev.RanksPerNode > 0 {
		shape = Shape{ev.Nodes, ev.RanksPerNode}.String()
	}
	fmt.Fprintf(tw, "evaluation on %d pinned points and %d envelope points (algorithm-only, protocol-only or free runs) (%s)\ncoll\tbytes\tbest (us)",
		ev.Points, ev.EnvelopePoints, shape)
	for _, p := range ev.Policies {
		if p.Name == PolicyNCCLDefault {
			fmt.Fprintf(tw, "\t%s (meas us, regret)", p.Name)
			continue
		}
		fmt.Fprintf(tw, "\t%s pick (pred/meas us, regret)", p.Name)
	}
	fmt.Fprintln(tw)
	for _, s := range ev.Sizes {
		fmt.Fprintf(tw, "%s\t%d\t%s (%.4g)", s.Coll, s.Bytes, s.Best, s.BestUS)
		for i, p := range s.Picks {
			r := "-"
			if p.Regret >= 0 {
				r = fmt.Sprintf("%.3f", p.Regret)
			}
			if i < len(ev.Policies) && ev.Policies[i].Name == PolicyNCCLDefault {
				fmt.Fprintf(tw, "\t%s (%s, %s)", p.Cell, measured(p.MeasuredUS), r)
				continue
			}
			via := ""
			if p.Via != "" {
				via = " via " + p.Via
			}
			fmt.Fprintf(tw, "\t%s (%.4g/%s, %s)%s", p.Cell, p.PredUS, measured(p.MeasuredUS), r, via)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "\npolicy\tmedian regret\tp90 regret\tmax regret\tsizes\texact\tproxied\tmedian pick pred err\tmedian pred err\tmax pred err\tpoints\tmedian envelope err\tmax envelope err\tenvelope points\n")
	// A statistic over no point, or a prediction error of a policy that predicts nothing (NCCL's
	// default run), prints "-", not 0.
	stat := func(v float64, n int) string {
		if n == 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", v)
	}
	for _, p := range ev.Policies {
		picks := p.RegretExactSizes
		if p.Name == PolicyNCCLDefault {
			picks = 0
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%d\n", p.Name,
			stat(p.RegretMedian, p.RegretSizes), stat(p.RegretP90, p.RegretSizes), stat(p.RegretMax, p.RegretSizes), p.RegretSizes,
			p.RegretExactSizes, p.RegretProxySizes, stat(p.PickErrMedian, picks),
			stat(p.CellErrMedian, p.CellPoints), stat(p.CellErrMax, p.CellPoints), p.CellPoints,
			stat(p.EnvErrMedian, p.EnvPoints), stat(p.EnvErrMax, p.EnvPoints), p.EnvPoints)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	pr, f := ev.Policies[0], ev.Policies[1]
	verdict := "NOT met"
	if ev.GoalMet {
		verdict = "met"
	}
	_, err := fmt.Fprintf(w, "(ring/simple's prediction error is the fitted model's on the Ring/Simple points; "+
		"a proxied pick is measured by a partial run whose pin allows it, NCCL choosing within the run; "+
		"a free run is NCCL's default and measures no pick)\n"+
		"prediction error, prior vs fitted: pinned points median %.3f vs %.3f (%d points); envelope points median %.3f vs %.3f (%d points)\n"+
		"goal (fitted median regret <= %.0f%%, median prediction error <= %.0f%%): %s (%.1f%%, %.1f%%; regret over %d sizes, %d by proxy; prediction error on the %s points)\n",
		pr.CellErrMedian, f.CellErrMedian, f.CellPoints, pr.EnvErrMedian, f.EnvErrMedian, f.EnvPoints,
		100*GoalRegret, 100*GoalPredErr, verdict, 100*f.RegretMedian, 100*ev.goalPredErr(),
		f.RegretSizes, f.RegretProxySizes, map[bool]string{true: "pinned", false: "envelope"}[f.CellPoints > 0])
	return err
}
