package calibrate

import (
	"context"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/planner"
)

// SizeReport compares picks at one (collective, size) that the sweeps measured.
type SizeReport struct {
	Coll  string `json:"coll"`
	Bytes int64  `json:"bytes"`
	// Best is the pin of the run with the least measured time ("Ring/*"), BestRun that run's sweep
	// ("file:line"), MeasuredUS its time.
	Best       string  `json:"best"`
	BestRun    string  `json:"best_run"`
	MeasuredUS float64 `json:"measured_us"`
	// Picks of the prior and the fitted model, with their predicted time, the measured time of the
	// pick (0 when no run measured the picked cell: SizeRuns.Measure) and the regret (pick/best - 1;
	// -1 unknown).
	Prior    Pick `json:"prior"`
	Fitted   Pick `json:"fitted"`
	Baseline Pick `json:"ring_simple"` // fixed Ring/Simple
	// Default is the free run at this size (NCCL's default), nil when there is none.
	Default *Pick `json:"nccl_default,omitempty"`
}

// Pick is one model's choice at a size.
type Pick struct {
	Cell       string  `json:"cell"`
	PredUS     float64 `json:"pred_us"`
	MeasuredUS float64 `json:"measured_us"`
	Regret     float64 `json:"regret"`
	// Run is the sweep ("file:line") whose time MeasuredUS is; Via is that run's pin when it is a
	// partial run (a proxy: NCCL chose within it), "" when an exact run measured the pick.
	Run string `json:"run,omitempty"`
	Via string `json:"via,omitempty"`
}

// Prior names the prior of a fit or an evaluation: the node table, and the overlay applied over it
// ("" when none: the table alone, calibrate's default).
type Prior struct {
	Table   string `json:"table"`
	Overlay string `json:"overlay"`
	// Fabric is the fabric table composed into the prior's inter-node inputs (--fabric), "" for none.
	Fabric string `json:"fabric,omitempty"`
}

// String is the report's line for the prior: "cpu.toml (the base table, no overlay)" or "cpu.toml
// with the overlay FILE (--prior)", followed by ", fabric FILE (inter-node inputs)" with --fabric.
func (p Prior) String() string {
	s := p.Table + " with the overlay " + p.Overlay + " (--prior)"
	if p.Overlay == "" {
		s = p.Table + " (the base table, no overlay)"
	}
	if p.Fabric != "" {
		s += ", fabric " + p.Fabric + " (inter-node inputs above 1 node)"
	}
	return s
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
	Half string `json:"half"`
	// Credit is what the free and partly pinned sweeps' points measured (PointOptions.Credit).
	Credit string       `json:"credit"`
	Sizes  []SizeReport `json:"sizes"`
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
	// Of those sizes, the ones a partial run measured the pick at, as a proxy (Pick.Via).
	PriorRegretProxySizes  int `json:"prior_regret_proxy_sizes"`
	FittedRegretProxySizes int `json:"fitted_regret_proxy_sizes"`
	// NCCL default's regret (the free runs), over the sizes a free run measured.
	DefaultRegretMedian float64 `json:"nccl_default_regret_median"`
	DefaultRegretMax    float64 `json:"nccl_default_regret_max"`
	DefaultRegretSizes  int     `json:"nccl_default_regret_sizes"`
	// Holdout: the fitted model's |pred/meas - 1| on the held-out points (none: 0 points); a
	// point's prediction is its cell's time, or for an algorithm-only, protocol-only or free point
	// the least time over the cells its pin allows (the envelope).
	HoldoutPoints int     `json:"holdout_points"`
	HoldoutMedian float64 `json:"holdout_median_rel"`
	HoldoutMax    float64 `json:"holdout_max_rel"`
	// HoldoutPrior: the prior's error on the same points, beside the fit's.
	HoldoutPriorMedian float64 `json:"holdout_prior_median_rel"`
	HoldoutPriorMax    float64 `json:"holdout_prior_max_rel"`
	// The same split: pinned points (one legal cell) and envelope points.
	HoldoutPinned   HoldoutErr `json:"holdout_pinned"`
	HoldoutEnvelope HoldoutErr `json:"holdout_envelope"`
	// HoldoutRegret is the regret over the held-out sizes only (sizes no fitted point measured):
	// the picks scored on sizes the fit did not see.
	HoldoutRegret HoldoutRegret `json:"holdout_regret"`
	// Starts are the starting points of the fit's envelope stage with their losses, BestStart the
	// one kept (none: no envelope points).
	Starts    []StartJSON `json:"starts,omitempty"`
	BestStart int         `json:"best_start"`
	// NotFitted are the envelope points the fit left out (calibrate.FitResult.Problems).
	NotFitted []string `json:"not_fitted,omitempty"`
	// UnmeasuredPicks are the fitted planner's picks, at the measured sizes, of a cell no pinned
	// sweep measured.
	UnmeasuredPicks []UnmeasuredPick `json:"unmeasured_picks,omitempty"`
}

// StartJSON is one starting point of a fit's envelope stage: the factor on the envelope-only
// cells' prior bandwidths and the loss it converged to.
type StartJSON struct {
	BWFactor float64 `json:"bw_factor"`
	Loss     float64 `json:"loss"`
}

// unmeasuredLines prints the unmeasured picks one line per run of consecutive measured sizes with
// the same collective, cell, source and prior pick: "unmeasured pick: AllReduce/RING/LL at 8 B .. 1 MiB (18 sizes),
// inferred from the free sweep" (as UnmeasuredPick.String for a run of one).
func unmeasuredLines(us []UnmeasuredPick) []string {
	var out []string
	for i := 0; i < len(us); {
		j := i + 1
		for j < len(us) && us[j].at == us[j-1].at+1 && us[j].Coll == us[i].Coll && us[j].Cell == us[i].Cell && us[j].Source == us[i].Source && us[j].PriorPick == us[i].PriorPick {
			j++
		}
		if j == i+1 {
			out = append(out, us[i].String())
		} else {
			out = append(out, fmt.Sprintf("unmeasured pick: %s at %s .. %s (%d sizes), %s%s", us[i].Cell,
				bytesize.Format(us[i].Bytes), bytesize.Format(us[j-1].Bytes), j-i, us[i].Source, us[i].priorNote()))
		}
		i = j
	}
	return out
}

// UnmeasuredPick is a fitted pick at a measured size of a cell that no pinned sweep measured, and
// where its value comes from ("inferred from the free sweep", "the prior: ...").
type UnmeasuredPick struct {
	Coll   string `json:"coll"`
	Bytes  int64  `json:"bytes"`
	Cell   string `json:"cell"`
	Source string `json:"source"`
	// PriorPick is the prior's pick there when it is another cell ("" when the same): with the
	// base table as the prior, the cell NCCL's own model runs in a free sweep, which an envelope
	// cannot tell from the cell the fit credited.
	PriorPick string `json:"prior_pick,omitempty"`
	at        int    // index in Report.Sizes
}

// String is the report's line: "unmeasured pick: AllReduce/NVLS/SIMPLE at 1 GiB, inferred from the
// free sweep".
func (u UnmeasuredPick) String() string {
	return fmt.Sprintf("unmeasured pick: %s at %s, %s%s", u.Cell, bytesize.Format(u.Bytes), u.Source, u.priorNote())
}

// priorNote is "; the prior picks CELL there" when the prior picks another cell, else "".
func (u UnmeasuredPick) priorNote() string {
	if u.PriorPick == "" {
		return ""
	}
	return "; the prior picks " + u.PriorPick + " there"
}

// HoldoutRegret is each policy's regret over the held-out sizes (median, max, sizes counted).
type HoldoutRegret struct {
	Sizes         int     `json:"sizes"`
	PriorMedian   float64 `json:"prior_median"`
	PriorMax      float64 `json:"prior_max"`
	FittedMedian  float64 `json:"fitted_median"`
	FittedMax     float64 `json:"fitted_max"`
	FittedSizes   int     `json:"fitted_sizes"`
	DefaultMedian float64 `json:"nccl_default_median"`
	DefaultMax    float64 `json:"nccl_default_max"`
	DefaultSizes  int     `json:"nccl_default_sizes"`
}

// HoldoutErr is the prior's and the fitted model's |pred/meas - 1| over some held-out points.
type HoldoutErr struct {
	Points       int     `json:"points"`
	FittedMedian float64 `json:"fitted_median_rel"`
	FittedMax    float64 `json:"fitted_max_rel"`
	PriorMedian  float64 `json:"prior_median_rel"`
	PriorMax     float64 `json:"prior_max_rel"`
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
	Inferred   bool    `json:"inferred"`
	Measured   bool    `json:"measured"` // a pinned sweep measured the cell
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
// not used by the fit (their prediction error, the fit's beside the prior's, is reported
// separately; nil for none), predicted by priced and pricedPrior, the fitted and the prior models'
// menus with every cell the points' pins allow priced (PricedMenus over each configuration); nil
// takes Menus(fitted) or Menus(prior).
func BuildReport(ctx context.Context, nodes int, prior, fitted *planner.Planner, priced, pricedPrior map[costmodel.Coll]*planner.Menu, res *FitResult, pts, holdout []Point) (*Report, error) {
	rep := &Report{Nodes: nodes, MedianRel: res.MedianRel, MaxRel: res.MaxRel}
	for _, p := range res.Params {
		rep.Params = append(rep.Params, ParamJSON{p.Cell.String(), p.Kind, p.Prior, p.Value, p.Sigma, p.Identified, p.Inferred, p.Measured})
	}
	for _, st := range res.Starts {
		rep.Starts = append(rep.Starts, StartJSON{st.BWFactor, st.Loss})
	}
	rep.BestStart = res.BestStart
	for _, p := range res.Problems {
		rep.NotFitted = append(rep.NotFitted, p.Error())
	}
	for _, r := range res.Residuals {
		rep.Points = append(rep.Points, PointJSON{r.File, r.Line, pinLabel(r.Point), r.Bytes, r.TimeUS, r.PredUS, r.Cell.String(), r.LogErr})
	}
	all := append(append([]Point(nil), pts...), holdout...)
	// Per size, the fastest run is the best and a pick is priced by the one run that measures it
	// (SizeRuns.Measure: an exact run, else a partial run as a proxy); a free run is NCCL's
	// default and measures no pick, even where the fit attributes its point to the pick's cell.
	var pr, fr, dr []float64
	var hpr, hfr, hdr []float64 // the same over the held-out sizes
	type sizeKey struct {
		c costmodel.Coll
		n int64
	}
	fittedSize := map[sizeKey]bool{}
	for _, p := range pts {
		fittedSize[sizeKey{p.Coll, p.Bytes}] = true
	}
	for _, sr := range GroupRuns(all) {
		held := len(holdout) > 0 && !fittedSize[sizeKey{sr.Coll, sr.Bytes}]
		best := sr.Best()
		bt := best.TimeUS
		out := SizeReport{Coll: sr.Coll.String(), Bytes: sr.Bytes, Best: pinLabel(Point{Algo: best.Algo, Proto: best.Proto}),
			BestRun: best.Run, MeasuredUS: bt}
		cls := planner.Class{Coll: sr.Coll, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
		measure := func(c Cell, pred float64) Pick {
			pk := Pick{Cell: c.String(), PredUS: pred, Regret: -1}
			if r, proxy, ok := sr.Measure(c); ok {
				pk.MeasuredUS, pk.Run, pk.Regret = r.TimeUS, r.Run, r.TimeUS/bt-1
				if proxy {
					pk.Via = r.Label()
				}
			}
			return pk
		}
		var picked Cell // the cell of the last pick
		pick := func(pl *planner.Planner) (Pick, error) {
			plan, err := pl.Explain(ctx, cls, sr.Bytes)
			if err != nil {
				return Pick{}, err
			}
			picked = Cell{sr.Coll, plan.Algo, plan.Proto}
			return measure(picked, float64(plan.TimeUS)), nil
		}
		var err error
		if out.Prior, err = pick(prior); err != nil {
			return nil, err
		}
		if out.Fitted, err = pick(fitted); err != nil {
			return nil, err
		}
		if !res.MeasuredCell(picked) {
			u := UnmeasuredPick{Coll: sr.Coll.String(), Bytes: sr.Bytes, Cell: out.Fitted.Cell, Source: res.unmeasuredSource(picked), at: len(rep.Sizes)}
			if out.Prior.Cell != out.Fitted.Cell {
				u.PriorPick = out.Prior.Cell
			}
			rep.UnmeasuredPicks = append(rep.UnmeasuredPicks, u)
		}
		rs := Cell{sr.Coll, costmodel.Ring, costmodel.Simple}
		var rsPred float64
		if m, err := fitted.Prepare(ctx, cls); err == nil {
			rsPred = float64(m.Menu().Time(costmodel.Ring, costmodel.Simple, sr.Bytes))
		}
		out.Baseline = measure(rs, rsPred)
		if d, ok := sr.Default(); ok {
			out.Default = &Pick{Cell: "NCCL default", MeasuredUS: d.TimeUS, Run: d.Run, Regret: d.TimeUS/bt - 1}
			dr = append(dr, out.Default.Regret)
			if held {
				hdr = append(hdr, out.Default.Regret)
			}
		}
		if out.Prior.Regret >= 0 {
			pr = append(pr, out.Prior.Regret)
			if out.Prior.Via != "" {
				rep.PriorRegretProxySizes++
			}
		}
		if out.Fitted.Regret >= 0 {
			fr = append(fr, out.Fitted.Regret)
			if out.Fitted.Via != "" {
				rep.FittedRegretProxySizes++
			}
		}
		if held {
			if out.Prior.Regret >= 0 {
				hpr = append(hpr, out.Prior.Regret)
			}
			if out.Fitted.Regret >= 0 {
				hfr = append(hfr, out.Fitted.Regret)
			}
			rep.HoldoutRegret.Sizes++
		}
		rep.Sizes = append(rep.Sizes, out)
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
	rep.DefaultRegretMedian, rep.DefaultRegretMax, rep.DefaultRegretSizes = median(dr), maxOf(dr), len(dr)
	h := &rep.HoldoutRegret
	h.PriorMedian, h.PriorMax = median(hpr), maxOf(hpr)
	h.FittedMedian, h.FittedMax, h.FittedSizes = median(hfr), maxOf(hfr), len(hfr)
	h.DefaultMedian, h.DefaultMax, h.DefaultSizes = median(hdr), maxOf(hdr), len(hdr)
	if len(holdout) > 0 {
		fm, pm := priced, pricedPrior
		var err error
		if fm == nil {
			if fm, err = Menus(ctx, fitted); err != nil {
				return nil, err
			}
		}
		if pm == nil {
			if pm, err = Menus(ctx, prior); err != nil {
				return nil, err
			}
		}
		var fAll, pAll, fPin, pPin, fEnv, pEnv []float64
		for _, p := range holdout {
			ft, fok := envelopeOf(fm, p)
			pt, pok := envelopeOf(pm, p)
			pinned := RunKindOf(p) == RunExact
			if fok {
				e := math.Abs(ft/p.TimeUS - 1)
				fAll = append(fAll, e)
				if pinned {
					fPin = append(fPin, e)
				} else {
					fEnv = append(fEnv, e)
				}
			}
			if pok {
				e := math.Abs(pt/p.TimeUS - 1)
				pAll = append(pAll, e)
				if pinned {
					pPin = append(pPin, e)
				} else {
					pEnv = append(pEnv, e)
				}
			}
		}
		rep.HoldoutPoints, rep.HoldoutMedian, rep.HoldoutMax = len(fAll), median(fAll), maxOf(fAll)
		rep.HoldoutPriorMedian, rep.HoldoutPriorMax = median(pAll), maxOf(pAll)
		rep.HoldoutPinned = HoldoutErr{len(fPin), median(fPin), maxOf(fPin), median(pPin), maxOf(pPin)}
		rep.HoldoutEnvelope = HoldoutErr{len(fEnv), median(fEnv), maxOf(fEnv), median(pEnv), maxOf(pEnv)}
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
	if rep.Credit == CreditModel {
		fmt.Fprintf(tw, "free and partly pinned sweeps: each point credited to the cell NCCL's model picks there (--credit model)\n")
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
		switch {
		case p.Inferred:
			st = "inferred (envelope sweeps only; no pinned sweep measured it)"
		case !p.Identified:
			st = "held at prior (data do not identify it)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%.4g\t%.4g\t%.2g\t%s\n", p.Cell, p.Kind, p.Prior, p.Value, p.Sigma, st)
	}
	if len(rep.Corrections) > 0 {
		fmt.Fprintf(tw, "\nbandwidth corrections (per log2 bucket; written to [corrections] at this shape)\ncell\tbucket\tbytes\tprior factor\tmultiplier\tfactor\tsigma\tpoints\n")
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
	hasDefault := rep.DefaultRegretSizes > 0
	fmt.Fprintf(tw, "\nper size\ncoll\tbytes\tbest (measured us)\tprior pick (pred/meas us, regret)\tfitted pick\tring/simple")
	if hasDefault {
		fmt.Fprintf(tw, "\tnccl default (meas us, regret)")
	}
	fmt.Fprintln(tw)
	for _, s := range rep.Sizes {
		pk := func(p Pick) string {
			via := ""
			if p.Via != "" {
				via = " via " + p.Via
			}
			return fmt.Sprintf("%s (%.4g/%s, %s)%s", p.Cell, p.PredUS, measured(p.MeasuredUS), reg(p.Regret), via)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s (%.4g)\t%s\t%s\t%s", s.Coll, s.Bytes, s.Best, s.MeasuredUS, pk(s.Prior), pk(s.Fitted), pk(s.Baseline))
		if hasDefault {
			d := "-"
			if s.Default != nil {
				d = fmt.Sprintf("%.4g, %s", s.Default.MeasuredUS, reg(s.Default.Regret))
			}
			fmt.Fprintf(tw, "\t%s", d)
		}
		fmt.Fprintln(tw)
	}
	fmt.Fprintf(tw, "\ncrossovers\ncoll\tsource\tbetween bytes\tfrom\tto\n")
	for _, c := range rep.Crossovers {
		fmt.Fprintf(tw, "%s\t%s\t%d..%d\t%s\t%s\n", c.Coll, c.Source, c.Lo, c.Hi, c.From, c.To)
	}
	if len(rep.Starts) > 0 {
		fmt.Fprintf(tw, "\nenvelope fit: %d starts (bandwidth factor on the envelope-only cells' prior: loss)", len(rep.Starts))
		for i, st := range rep.Starts {
			fmt.Fprintf(tw, "; x%g: %.6g", st.BWFactor, st.Loss)
			if i == rep.BestStart {
				fmt.Fprint(tw, " (kept)")
			}
		}
		fmt.Fprintln(tw)
	}
	for _, p := range rep.NotFitted {
		fmt.Fprintf(tw, "not fitted: %s\n", p)
	}
	if len(rep.UnmeasuredPicks) > 0 {
		fmt.Fprintln(tw)
	}
	for _, line := range unmeasuredLines(rep.UnmeasuredPicks) {
		fmt.Fprintln(tw, line)
	}
	fmt.Fprintf(tw, "\nfit |pred/meas-1|: median %.3f max %.3f over %d points\n", rep.MedianRel, rep.MaxRel, len(rep.Points))
	fmt.Fprintf(tw, "regret (over the %d/%d sizes where a run measured the pick, %d/%d of them by proxy: \"via\" a partial run, NCCL choosing within it): prior median %.3f max %.3f; fitted median %.3f max %.3f\n",
		rep.PriorRegretSizes, rep.FittedRegretSizes, rep.PriorRegretProxySizes, rep.FittedRegretProxySizes,
		rep.PriorRegretMedian, rep.PriorRegretMax, rep.FittedRegretMedian, rep.FittedRegretMax)
	if hasDefault {
		fmt.Fprintf(tw, "nccl default (the free runs) regret over the %d sizes a free run measured: median %.3f max %.3f\n",
			rep.DefaultRegretSizes, rep.DefaultRegretMedian, rep.DefaultRegretMax)
	}
	if rep.HoldoutPoints > 0 {
		fmt.Fprintf(tw, "holdout |pred/meas-1|: median %.3f max %.3f over %d points (prior: median %.3f max %.3f)\n",
			rep.HoldoutMedian, rep.HoldoutMax, rep.HoldoutPoints, rep.HoldoutPriorMedian, rep.HoldoutPriorMax)
		if h := rep.HoldoutRegret; h.Sizes > 0 {
			fmt.Fprintf(tw, "holdout regret over the %d held-out sizes (%d where a run measured the fitted pick): prior median %.3f max %.3f; fitted median %.3f max %.3f",
				h.Sizes, h.FittedSizes, h.PriorMedian, h.PriorMax, h.FittedMedian, h.FittedMax)
			if h.DefaultSizes > 0 {
				fmt.Fprintf(tw, "; nccl default median %.3f max %.3f", h.DefaultMedian, h.DefaultMax)
			}
			fmt.Fprintln(tw)
		}
		for _, h := range []struct {
			name string
			e    HoldoutErr
		}{{"pinned", rep.HoldoutPinned}, {"envelope", rep.HoldoutEnvelope}} {
			if h.e.Points > 0 {
				fmt.Fprintf(tw, "  on %d %s points: fitted median %.3f max %.3f, prior median %.3f max %.3f\n",
					h.e.Points, h.name, h.e.FittedMedian, h.e.FittedMax, h.e.PriorMedian, h.e.PriorMax)
			}
		}
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

// unmeasuredSource says where the value of c, a cell no pinned point measured, comes from:
// "inferred from the free sweep" (or from the envelope sweeps of the pins that attained it),
// or the prior.
func (r *FitResult) unmeasuredSource(c Cell) string {
	if r.InferredCell(c) {
		pins := map[string]bool{}
		for _, res := range r.Residuals {
			if res.Cell == c && !res.Pinned() {
				pins[pinLabel(res.Point)] = true
			}
		}
		ps := sortedStrings(pins)
		switch {
		case len(ps) == 1 && ps[0] == "*/*":
			return "inferred from the free sweep"
		case len(ps) == 0:
			return "inferred from the envelope sweeps"
		}
		return "inferred from the envelope sweeps pinned " + strings.Join(ps, ", ")
	}
	for _, p := range r.Params {
		if p.Cell == c {
			return "at the prior (the envelope sweeps do not identify it)"
		}
	}
	return "at the prior (no sweep measured it)"
}

func sortedStrings(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
