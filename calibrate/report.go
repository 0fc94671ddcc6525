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

// SizeReport compares picks at one (collective, size) that the sweeps measured.
type SizeReport struct {
	Coll  string `json:"coll"`
	Bytes int64  `json:"bytes"`
	// Best is the sweep (pin) with the least measured time, MeasuredUS that time.
	Best       string  `json:"best"`
	MeasuredUS float64 `json:"measured_us"`
	// Picks of the prior and the fitted model, with their predicted time, the measured time of the
	// pick (0 when no sweep measured the picked cell) and the regret (pick/best - 1; -1 unknown).
	Prior    Pick `json:"prior"`
	Fitted   Pick `json:"fitted"`
	Baseline Pick `json:"ring_simple"` // fixed Ring/Simple
}

// Pick is one model's choice at a size.
type Pick struct {
	Cell       string  `json:"cell"`
	PredUS     float64 `json:"pred_us"`
	MeasuredUS float64 `json:"measured_us"`
	Regret     float64 `json:"regret"`
}

// Prior names the prior of a fit or an evaluation: the node table, and the overlay applied over it
// ("" when none: the table alone, calibrate's default).
type Prior struct {
	Table   string `json:"table"`
	Overlay string `json:"overlay"`
}

// String is the report's line for the prior: "cpu.toml (the base table, no overlay)" or "cpu.toml
// with the overlay FILE (--prior)".
func (p Prior) String() string {
	if p.Overlay == "" {
		return p.Table + " (the base table, no overlay)"
	}
	return p.Table + " with the overlay " + p.Overlay + " (--prior)"
}

// Report is what calibrate prints after a fit.
type Report struct {
	// Prior is what the fit started from and the report's "prior" columns price with (set by the
	// caller; BuildReport leaves it empty).
	Prior Prior `json:"prior"`
	Nodes int   `json:"nodes"`
	// RanksPerNode is the ranks per node of the shape the values were fitted at (Nodes x
	// RanksPerNode; set by the caller, 0: not said).
	RanksPerNode int `json:"ranks_per_node"`
	// Half is the half of the sweeps' rows that was fitted and scored: HalfInPlace or
	// HalfOutOfPlace (the caller sets it, as it chose Points' half).
	Half  string       `json:"half"`
	Sizes []SizeReport `json:"sizes"`
	// Crossovers: where the measured best changes (between two measured sizes) and where the
	// prior's and the fitted model's picks change (on a 1/16-octave grid over the measured range).
	Crossovers []Crossover `json:"crossovers"`
	Params     []ParamJSON `json:"params"`
	// Corrections are the fitted per-bucket bandwidth factors (none: not written).
	Corrections []CorrectionJSON `json:"corrections,omitempty"`
	Points      []PointJSON      `json:"points"`
	MedianRel   float64          `json:"median_rel"` // fit points
	MaxRel      float64          `json:"max_rel"`
	// Regret summaries over the sizes where the pick's time was measured.
	PriorRegretMedian  float64 `json:"prior_regret_median"`
	PriorRegretMax     float64 `json:"prior_regret_max"`
	FittedRegretMedian float64 `json:"fitted_regret_median"`
	FittedRegretMax    float64 `json:"fitted_regret_max"`
	PriorRegretSizes   int     `json:"prior_regret_sizes"` // sizes the prior's regret is over
	FittedRegretSizes  int     `json:"fitted_regret_sizes"`
	// Holdout: |pred/meas - 1| on the held-out points (none: 0 points).
	HoldoutPoints int     `json:"holdout_points"`
	HoldoutMedian float64 `json:"holdout_median_rel"`
	HoldoutMax    float64 `json:"holdout_max_rel"`
}

// Crossover is one change of pick of a collective.
type Crossover struct {
	Coll   string `json:"coll"`
	Source string `json:"source"` // "measured", "prior" or "fitted"
	// The change happens in (Lo, Hi]: for the models Hi is the first size of the new pick.
	Lo   int64  `json:"lo"`
	Hi   int64  `json:"hi"`
	From string `json:"from"`
	To   string `json:"to"`
}

// ParamJSON is a Param for JSON.
type ParamJSON struct {
	Cell       string  `json:"cell"`
	Kind       string  `json:"kind"`
	Prior      float64 `json:"prior"`
	Value      float64 `json:"value"`
	Sigma      float64 `json:"sigma"`
	Identified bool    `json:"identified"`
}

// CorrectionJSON is one fitted bucket correction: the factor written to the node table at Bucket
// (sizes [BytesLo, BytesHi)), the prior's factor there and the fitted multiplier on it.
type CorrectionJSON struct {
	Cell    string  `json:"cell"`
	Bucket  int     `json:"bucket"`
	BytesLo int64   `json:"bytes_lo"`
	BytesHi int64   `json:"bytes_hi"`
	Prior   float64 `json:"prior"`
	Mult    float64 `json:"mult"`
	Factor  float64 `json:"factor"`
	Sigma   float64 `json:"sigma"`
	Points  int     `json:"points"`
}

// AddCorrections lists fitted bucket corrections in the report.
func (rep *Report) AddCorrections(cs []BucketCorrection) {
	for _, c := range cs {
		rep.Corrections = append(rep.Corrections, CorrectionJSON{Cell: c.Cell.String(), Bucket: c.Bucket,
			BytesLo: int64(64) << c.Bucket, BytesHi: int64(64) << (c.Bucket + 1),
			Prior: c.Prior, Mult: c.Mult, Factor: c.Factor, Sigma: c.Sigma, Points: c.Points})
	}
}

// PointJSON is one point's residual.
type PointJSON struct {
	File   string  `json:"file"`
	Line   int     `json:"line"`
	Pin    string  `json:"pin"`
	Bytes  int64   `json:"bytes"`
	MeasUS float64 `json:"measured_us"`
	PredUS float64 `json:"pred_us"`
	Cell   string  `json:"cell"`
	LogErr float64 `json:"log_err"`
}

func pinLabel(p Point) string {
	a, pr := p.Algo, p.Proto
	if a == "" {
		a = "*"
	}
	if pr == "" {
		pr = "*"
	}
	return a + "/" + pr
}

// BuildReport compares the prior and fitted planners on the measured points. holdout are points
// not used by the fit (their prediction error is reported separately; nil for none), predicted by
// priced, the fitted model's menus with every cell the points' pins allow priced (PricedMenus
// over the fitted configuration); nil takes Menus(fitted).
func BuildReport(ctx context.Context, nodes int, prior, fitted *planner.Planner, priced map[costmodel.Coll]*planner.Menu, res *FitResult, pts, holdout []Point) (*Report, error) {
	rep := &Report{Nodes: nodes, MedianRel: res.MedianRel, MaxRel: res.MaxRel}
	for _, p := range res.Params {
		rep.Params = append(rep.Params, ParamJSON{p.Cell.String(), p.Kind, p.Prior, p.Value, p.Sigma, p.Identified})
	}
	for _, r := range res.Residuals {
		rep.Points = append(rep.Points, PointJSON{r.File, r.Line, pinLabel(r.Point), r.Bytes, r.TimeUS, r.PredUS, r.Cell.String(), r.LogErr})
	}
	all := append(append([]Point(nil), pts...), holdout...)
	type key struct {
		c costmodel.Coll
		n int64
	}
	by := map[key][]Point{}
	var keys []key
	for _, p := range all {
		k := key{p.Coll, p.Bytes}
		if _, ok := by[k]; !ok {
			keys = append(keys, k)
		}
		by[k] = append(by[k], p)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].c != keys[j].c {
			return keys[i].c < keys[j].c
		}
		return keys[i].n < keys[j].n
	})
	// attained is the envelope cell the fit attributes each fitted point to.
	type at struct {
		file string
		line int
	}
	attained := map[at]Cell{}
	for _, r := range res.Residuals {
		attained[at{r.File, r.Line}] = r.Cell
	}
	// measuredFor is the measured time of a cell at a size: a pinned point's time, else the time of
	// an envelope point whose fitted minimum is that cell (NCCL then ran that cell, as far as the
	// fit can tell).
	measuredFor := func(ps []Point, c Cell) float64 {
		for _, p := range ps {
			if p.Pinned() && p.Cells[0] == c {
				return p.TimeUS
			}
		}
		for _, p := range ps {
			if a, ok := attained[at{p.File, p.Line}]; ok && !p.Pinned() && a == c {
				return p.TimeUS
			}
		}
		return 0
	}
	var pr, fr []float64
	for _, k := range keys {
		ps := by[k]
		best := ps[0]
		for _, p := range ps[1:] {
			if p.TimeUS < best.TimeUS {
				best = p
			}
		}
		sr := SizeReport{Coll: k.c.String(), Bytes: k.n, Best: pinLabel(best), MeasuredUS: best.TimeUS}
		cls := planner.Class{Coll: k.c, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
		pick := func(pl *planner.Planner) (Pick, error) {
			plan, err := pl.Explain(ctx, cls, k.n)
			if err != nil {
				return Pick{}, err
			}
			c := Cell{k.c, plan.Algo, plan.Proto}
			pk := Pick{Cell: c.String(), PredUS: float64(plan.TimeUS), MeasuredUS: measuredFor(ps, c), Regret: -1}
			if pk.MeasuredUS > 0 {
				pk.Regret = pk.MeasuredUS/best.TimeUS - 1
			}
			return pk, nil
		}
		var err error
		if sr.Prior, err = pick(prior); err != nil {
			return nil, err
		}
		if sr.Fitted, err = pick(fitted); err != nil {
			return nil, err
		}
		rs := Cell{k.c, costmodel.Ring, costmodel.Simple}
		sr.Baseline = Pick{Cell: rs.String(), MeasuredUS: measuredFor(ps, rs), Regret: -1}
		if m, err := fitted.Prepare(ctx, cls); err == nil {
			sr.Baseline.PredUS = float64(m.Menu().Time(costmodel.Ring, costmodel.Simple, k.n))
		}
		if sr.Baseline.MeasuredUS > 0 {
			sr.Baseline.Regret = sr.Baseline.MeasuredUS/best.TimeUS - 1
		}
		if sr.Prior.Regret >= 0 {
			pr = append(pr, sr.Prior.Regret)
		}
		if sr.Fitted.Regret >= 0 {
			fr = append(fr, sr.Fitted.Regret)
		}
		rep.Sizes = append(rep.Sizes, sr)
	}
	for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
		var lo, hi int64
		var prev *SizeReport
		for i := range rep.Sizes {
			sr := &rep.Sizes[i]
			if sr.Coll != c.String() {
				continue
			}
			if lo == 0 {
				lo = sr.Bytes
			}
			hi = sr.Bytes
			if prev != nil && prev.Best != sr.Best {
				rep.Crossovers = append(rep.Crossovers, Crossover{c.String(), "measured", prev.Bytes, sr.Bytes, prev.Best, sr.Best})
			}
			prev = sr
		}
		if lo == 0 {
			continue
		}
		cls := planner.Class{Coll: c, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
		for _, m := range []struct {
			name string
			pl   *planner.Planner
		}{{"prior", prior}, {"fitted", fitted}} {
			pr, err := m.pl.Prepare(ctx, cls)
			if err != nil {
				return nil, err
			}
			last, lastN := "", int64(0)
			for n := lo; n <= hi; n += max(1, n/16) {
				plan, err := pr.Explain(n)
				if err != nil {
					return nil, err
				}
				cur := Cell{c, plan.Algo, plan.Proto}.String()
				if last != "" && cur != last {
					rep.Crossovers = append(rep.Crossovers, Crossover{c.String(), m.name, lastN, n, last, cur})
				}
				last, lastN = cur, n
			}
		}
	}
	rep.PriorRegretMedian, rep.PriorRegretMax = median(pr), maxOf(pr)
	rep.FittedRegretMedian, rep.FittedRegretMax = median(fr), maxOf(fr)
	rep.PriorRegretSizes, rep.FittedRegretSizes = len(pr), len(fr)
	if len(holdout) > 0 {
		fm := priced
		if fm == nil {
			var err error
			if fm, err = Menus(ctx, fitted); err != nil {
				return nil, err
			}
		}
		var rel []float64
		for _, p := range holdout {
			best := math.Inf(1)
			for _, c := range p.Cells {
				if t := fm[c.Coll].Time(c.Algo, c.Proto, p.Bytes); t >= 0 {
					best = math.Min(best, float64(t))
				}
			}
			rel = append(rel, math.Abs(best/p.TimeUS-1))
		}
		rep.HoldoutPoints, rep.HoldoutMedian, rep.HoldoutMax = len(rel), median(rel), maxOf(rel)
	}
	return rep, nil
}

// WriteText prints the report as tables.
func (rep *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if rep.Prior.Table != "" {
		fmt.Fprintf(tw, "prior: %s\n", rep.Prior)
	}
	if rep.Half != "" {
		fmt.Fprintf(tw, "fitted and scored: the %s half of every row\n", rep.Half)
	}
	if rep.Prior.Table != "" || rep.Half != "" {
		fmt.Fprintln(tw)
	}
	shape := plural(rep.Nodes, "node")
	if rep.RanksPerNode > 0 {
		shape = Shape{rep.Nodes, rep.RanksPerNode}.String()
	}
	fmt.Fprintf(tw, "parameters (%s)\ncell\tkind\tprior\tfitted\tsigma\tstatus\n", shape)
	for _, p := range rep.Params {
		st := "fitted"
		if !p.Identified {
			st = "held at prior (data do not identify it)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4g\t%.4g\t%.2g\t%s\n", p.Cell, p.Kind, p.Prior, p.Value, p.Sigma, st)
	}
	if len(rep.Corrections) > 0 {
		fmt.Fprintf(tw, "\nbandwidth corrections (per log2 bucket; written to [corrections], every node count)\ncell\tbucket\tbytes\tprior factor\tmultiplier\tfactor\tsigma\tpoints\n")
		for _, c := range rep.Corrections {
			fmt.Fprintf(tw, "%s\t%d\t%d..%d\t%.3g\t%.3f\t%.3f\t%.2g\t%d\n", c.Cell, c.Bucket, c.BytesLo, c.BytesHi-1, c.Prior, c.Mult, c.Factor, c.Sigma, c.Points)
		}
	}
	fmt.Fprintf(tw, "\npoints\nfile:line\tpin\tbytes\tmeasured us\tpredicted us\tcell\tlog err\n")
	for _, p := range rep.Points {
		fmt.Fprintf(tw, "%s:%d\t%s\t%d\t%.4g\t%.4g\t%s\t%+.3f\n", p.File, p.Line, p.Pin, p.Bytes, p.MeasUS, p.PredUS, p.Cell, p.LogErr)
	}
	reg := func(x float64) string {
		if x < 0 {
			return "-"
		}
		return fmt.Sprintf("%.3f", x)
	}
	fmt.Fprintf(tw, "\nper size\ncoll\tbytes\tbest (measured us)\tprior pick (pred/meas us, regret)\tfitted pick\tring/simple\n")
	for _, s := range rep.Sizes {
		pk := func(p Pick) string {
			return fmt.Sprintf("%s (%.4g/%s, %s)", p.Cell, p.PredUS, measured(p.MeasuredUS), reg(p.Regret))
		}
		fmt.Fprintf(tw, "%s\t%d\t%s (%.4g)\t%s\t%s\t%s\n", s.Coll, s.Bytes, s.Best, s.MeasuredUS, pk(s.Prior), pk(s.Fitted), pk(s.Baseline))
	}
	fmt.Fprintf(tw, "\ncrossovers\ncoll\tsource\tbetween bytes\tfrom\tto\n")
	for _, c := range rep.Crossovers {
		fmt.Fprintf(tw, "%s\t%s\t%d..%d\t%s\t%s\n", c.Coll, c.Source, c.Lo, c.Hi, c.From, c.To)
	}
	fmt.Fprintf(tw, "\nfit |pred/meas-1|: median %.3f max %.3f over %d points\n", rep.MedianRel, rep.MaxRel, len(rep.Points))
	fmt.Fprintf(tw, "regret (over the %d/%d sizes where the pick was measured): prior median %.3f max %.3f; fitted median %.3f max %.3f\n",
		rep.PriorRegretSizes, rep.FittedRegretSizes, rep.PriorRegretMedian, rep.PriorRegretMax, rep.FittedRegretMedian, rep.FittedRegretMax)
	if rep.HoldoutPoints > 0 {
		fmt.Fprintf(tw, "holdout |pred/meas-1|: median %.3f max %.3f over %d points\n", rep.HoldoutMedian, rep.HoldoutMax, rep.HoldoutPoints)
	}
	return tw.Flush()
}

// measured prints a measured time, "-" for one no sweep measured (0).
func measured(us float64) string {
	if us <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.4g", us)
}
