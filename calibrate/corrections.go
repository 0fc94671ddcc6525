package calibrate

import (
	"context"
	"math"
	"sort"
	"strconv"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// Per-bucket bandwidth corrections (NCCL's treeCorrectionFactor idea): after the per-cell (lat, bw)
// fit, a fitted cell whose pinned points in one log2 size bucket (correction.Bucket) keep a
// consistent residual that the alpha-beta form cannot follow gets a bandwidth multiplier for that
// bucket. The multiplier is fitted in one dimension on the robust loss (soft-L1 on log time,
// regularised toward 1), bounded to [MinFactor, MaxFactor], and kept only when it is significant.

// Bounds of a fitted bucket multiplier.
const (
	MinFactor = 0.2
	MaxFactor = 5.0
)

// CorrectionOptions tune FitCorrections; zero values take the defaults.
type CorrectionOptions struct {
	// Z is the significance a bucket's multiplier needs (|log m| / sigma). Default 4: a fit tests
	// every bucket of every cell, a few hundred tests, so 3 sigma lets noise through.
	Z float64
	// MinEffect is the smallest |log m| written (default 0.05: 5%).
	MinEffect float64
	// SingleZ and SingleEffect are the stricter thresholds of a bucket with one point. Defaults 5
	// and 0.15.
	SingleZ, SingleEffect float64
	// MinSensitivity is the smallest mean share of the bandwidth term in the predicted time of a
	// bucket's points: below it the time is latency-bound and a bandwidth factor is not the fix.
	// Default 0.2.
	MinSensitivity float64
	// RunLen and RunZ: a run of at least RunLen neighbouring buckets of one cell, leaning the same
	// way at RunZ or more each, is written when its combined significance reaches SingleZ.
	// Defaults 3 and 2.
	RunLen int
	RunZ   float64
	// SigmaFloor bounds the per-cell robust residual spread from below. Default 0.01.
	SigmaFloor float64
}

func (o CorrectionOptions) withDefaults() CorrectionOptions {
	if o.Z <= 0 {
		o.Z = 4
	}
	if o.MinEffect <= 0 {
		o.MinEffect = 0.05
	}
	if o.SingleZ <= 0 {
		o.SingleZ = 5
	}
	if o.SingleEffect <= 0 {
		o.SingleEffect = 0.15
	}
	if o.MinSensitivity <= 0 {
		o.MinSensitivity = 0.2
	}
	if o.SigmaFloor <= 0 {
		o.SigmaFloor = 0.01
	}
	if o.RunLen <= 0 {
		o.RunLen = 3
	}
	if o.RunZ <= 0 {
		o.RunZ = 2
	}
	return o
}

// BucketCorrection is one fitted bandwidth factor of a cell at one size bucket.
type BucketCorrection struct {
	Cell   Cell
	Bucket int // correction.Bucket: [64*2^Bucket, 64*2^(Bucket+1)) bytes
	// Prior is the prior's factor there (treeCorrectionFactor for Tree AllReduce, else 1); Mult the
	// fitted multiplier on it; Factor = Prior*Mult is what the node table gets.
	Prior, Mult, Factor float64
	Sigma               float64 // 1-sigma of Factor
	Points              int
	// LossBefore and LossAfter are the bucket's robust loss (soft-L1 units) without and with Mult.
	LossBefore, LossAfter float64
}

// bucketPoint is what the 1-D bucket fit needs of one point: t(m) = lat + bwTerm/m.
type bucketPoint struct {
	lat, bwTerm, meas, w float64 // w: the point's weight (Point.weight)
}

// FitCorrections fits per-bucket bandwidth multipliers of the fitted cells of res, on their pinned
// points, against menus (the menus res was fitted over: their factors are the starting point).
// A bucket gets a multiplier when its points lean on bandwidth (MinSensitivity), the multiplier is
// large enough (MinEffect; SingleEffect for a lone point), most points sit on its side, it at least
// halves the bucket's robust loss, and it is significant against the cell's robust residual spread:
// alone (Z; SingleZ for a lone point), or as one of a run of neighbouring buckets (RunLen, RunZ)
// whose combined significance reaches SingleZ. Buckets without one are not listed.
func FitCorrections(menus map[costmodel.Coll]*planner.Menu, res *FitResult, pts []Point, opt CorrectionOptions) []BucketCorrection {
	o := opt.withDefaults()
	s := FitOptions{}.withDefaults().LossScale
	type key struct {
		c Cell
		b int
	}
	groups := map[key][]bucketPoint{}
	resid := map[Cell][]float64{}
	for _, p := range pts {
		if !p.Pinned() {
			continue
		}
		c := p.Cells[0]
		v, ok := res.Fitted[c]
		if !ok {
			continue
		}
		b := correction.Bucket(p.Bytes)
		m := menus[c.Coll]
		lat := v[0] * latMult(m, c, p.Bytes)
		bwTerm := float64(p.Bytes) / (1000 * float64(m.Factor(c.Algo, c.Proto, p.Bytes))) / v[1]
		resid[c] = append(resid[c], math.Log((lat+bwTerm)/p.TimeUS))
		if b < 0 || b >= correction.NumBuckets {
			continue
		}
		groups[key{c, b}] = append(groups[key{c, b}], bucketPoint{lat, bwTerm, p.TimeUS, p.weight()})
	}
	// Robust spread (MAD about the median) of each cell's residuals, and of all pinned residuals: a
	// cell's bucket is judged against the larger, so that a cell whose residuals happen to be tight
	// does not make noise look significant.
	mad := func(rs []float64) float64 {
		med := median(rs)
		dev := make([]float64, len(rs))
		for i, r := range rs {
			dev[i] = math.Abs(r - med)
		}
		return 1.4826 * median(dev)
	}
	var all []float64
	for _, rs := range resid {
		all = append(all, rs...)
	}
	global := mad(all)
	spread := map[Cell]float64{}
	for c, rs := range resid {
		spread[c] = math.Max(o.SigmaFloor, math.Max(global, mad(rs)))
	}
	var keys []key
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].c != keys[j].c {
			return cellLess(keys[i].c, keys[j].c)
		}
		return keys[i].b < keys[j].b
	})
	// Each bucket's candidate multiplier and its significance; which are written is decided after,
	// since a run of neighbouring buckets can carry what one bucket alone cannot.
	type candidate struct {
		k             key
		lm, z, sigma  float64
		before, after float64
		n             int
	}
	var cands []candidate
	for _, k := range keys {
		g := groups[k]
		var sens, sw2 float64
		for _, bp := range g {
			w := bp.bwTerm / (bp.lat + bp.bwTerm)
			sens += w
			sw2 += w * w
		}
		sens /= float64(len(g))
		if sens < o.MinSensitivity {
			continue
		}
		loss := func(lm float64) float64 {
			m := math.Exp(lm)
			var l float64
			for _, bp := range g {
				r := math.Log((bp.lat+bp.bwTerm/m)/bp.meas) / s
				l += bp.w * 2 * (math.Sqrt(1+r*r) - 1)
			}
			return l
		}
		pen := func(lm float64) float64 { return lm * lm } // prior sigma 1 on log m
		lm := minimize1D(func(x float64) float64 { return loss(x) + pen(x) }, math.Log(MinFactor), math.Log(MaxFactor))
		before, after := loss(0), loss(lm)
		sigma := spread[k.c] / math.Sqrt(sw2)
		eff := o.MinEffect
		if len(g) == 1 {
			eff = o.SingleEffect
		} else {
			// Consistency: most points must sit on the side the multiplier corrects.
			same := 0
			for _, bp := range g {
				if r := math.Log((bp.lat + bp.bwTerm) / bp.meas); (r < 0) == (lm < 0) {
					same++
				}
			}
			if 3*same < 2*len(g) {
				continue
			}
		}
		if math.Abs(lm) < eff || after > 0.5*before {
			continue
		}
		cands = append(cands, candidate{k, lm, math.Abs(lm) / sigma, sigma, before, after, len(g)})
	}
	// A bucket is written when it is significant alone (Z; SingleZ for a lone point), or when it is
	// one of a run of at least RunLen neighbouring buckets of its cell that lean the same way, each at
	// RunZ or more, whose combined significance (Stouffer: the sum of z over the square root of the
	// run's length) reaches SingleZ. A cache knee on CPUs (bandwidth halving from 1 MiB up, one
	// point per bucket at factor-2 sweeps, each 3-4 sigma) is such a run; noise rarely is.
	keep := make([]bool, len(cands))
	for i, c := range cands {
		z := o.Z
		if c.n == 1 {
			z = o.SingleZ
		}
		keep[i] = c.z >= z
	}
	next := func(a, b candidate) bool { // b continues a's run: the next bucket of a's cell, the same way
		return b.k.c == a.k.c && b.k.b == a.k.b+1 && (b.lm < 0) == (a.lm < 0) && b.z >= o.RunZ
	}
	for i := 0; i < len(cands); {
		j := i + 1
		if cands[i].z >= o.RunZ {
			sum := cands[i].z
			for ; j < len(cands) && next(cands[j-1], cands[j]); j++ {
				sum += cands[j].z
			}
			if j-i >= o.RunLen && sum/math.Sqrt(float64(j-i)) >= o.SingleZ {
				for q := i; q < j; q++ {
					keep[q] = true
				}
			}
		}
		i = j
	}
	var out []BucketCorrection
	for i, c := range cands {
		if !keep[i] {
			continue
		}
		m := menus[c.k.c.Coll]
		prior := float64(m.Factor(c.k.c.Algo, c.k.c.Proto, correction.BucketStart(c.k.b)))
		mult := math.Exp(c.lm)
		out = append(out, BucketCorrection{Cell: c.k.c, Bucket: c.k.b, Prior: prior, Mult: mult, Factor: prior * mult,
			Sigma: prior * mult * c.sigma, Points: c.n, LossBefore: c.before, LossAfter: c.after})
	}
	return out
}

// minimize1D minimises f on [lo, hi]: a grid, then golden-section search around the best node.
func minimize1D(f func(float64) float64, lo, hi float64) float64 {
	const n = 64
	best, bx := math.Inf(1), 0.0
	for i := 0; i <= n; i++ {
		x := lo + (hi-lo)*float64(i)/n
		if v := f(x); v < best {
			best, bx = v, x
		}
	}
	step := (hi - lo) / n
	a, b := math.Max(lo, bx-step), math.Min(hi, bx+step)
	const gr = 0.6180339887498949
	c, d := b-gr*(b-a), a+gr*(b-a)
	fc, fd := f(c), f(d)
	for i := 0; i < 60; i++ {
		if fc < fd {
			b, d, fd = d, c, fc
			c = b - gr*(b-a)
			fc = f(c)
		} else {
			a, c, fc = c, d, fd
			d = a + gr*(b-a)
			fd = f(d)
		}
	}
	x := (a + b) / 2
	if f(x) > best {
		return bx
	}
	return x
}

// CorrectedFit is a cell fit with per-bucket bandwidth corrections.
type CorrectedFit struct {
	*FitResult
	Corrections []BucketCorrection
	// Factors are the prior's factors with the corrected cells' rows replaced: what a planner over
	// the fitted model uses (planner.Config.Factors).
	Factors *correction.Factors
}

// maxCorrectionRounds bounds the alternation of cell fit and bucket fit.
const maxCorrectionRounds = 3

// FitCorrected fits the cells (Fit) over the prior planner of topo and cfg (no Cells overrides;
// priced as PricedMenus prices them, so that a pin that lifts the LL128 gate has its prior values),
// then the per-bucket corrections (FitCorrections), then refits the cells with those corrections
// applied, alternating until the set of corrected buckets settles (at most 3 rounds). The
// corrections are always relative to cfg's own factors (correction.Default when nil).
func FitCorrected(ctx context.Context, topo *capabilities.Topology, cfg planner.Config, pts []Point, opt FitOptions, copt CorrectionOptions) (*CorrectedFit, error) {
	cfg.Cells = nil
	base := cfg.Factors
	if base == nil {
		base = correction.Default(topo)
	}
	cfg.Factors = base
	priced := pricedTopology(topo) // every cell Points can give a point, priced (PricedMenus)
	pl, err := planner.New(&priced, cfg)
	if err != nil {
		return nil, err
	}
	menus0, err := Menus(ctx, pl)
	if err != nil {
		return nil, err
	}
	res, err := Fit(menus0, pts, opt)
	if err != nil {
		return nil, err
	}
	out := &CorrectedFit{FitResult: res, Factors: base}
	var prevSig string
	for round := 0; round < maxCorrectionRounds; round++ {
		corr := FitCorrections(menus0, out.FitResult, pts, copt)
		sig := correctionSignature(corr)
		if len(corr) == 0 && round == 0 {
			return out, nil
		}
		f, err := applyCorrections(base, menus0, corr)
		if err != nil {
			return nil, err
		}
		out.Corrections, out.Factors = corr, f
		if sig == prevSig {
			break
		}
		prevSig = sig
		cfg.Factors = f
		pl, err := planner.New(&priced, cfg)
		if err != nil {
			return nil, err
		}
		menus, err := Menus(ctx, pl)
		if err != nil {
			return nil, err
		}
		r, err := Fit(menus, pts, opt)
		if err != nil {
			return nil, err
		}
		out.FitResult = r
	}
	return out, nil
}

func correctionSignature(cs []BucketCorrection) string {
	var b []byte
	for _, c := range cs {
		b = append(b, c.Cell.String()...)
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(c.Bucket), 10)
		b = append(b, ';')
	}
	return string(b)
}

// applyCorrections returns a copy of base with the rows of the corrected cells replaced by the
// prior's row times the fitted multipliers.
func applyCorrections(base *correction.Factors, menus map[costmodel.Coll]*planner.Menu, cs []BucketCorrection) (*correction.Factors, error) {
	f := *base
	for _, row := range correctionRows(menus, cs) {
		c, a, p := row.cell.Coll, row.cell.Algo, row.cell.Proto
		if err := f.Set(c, a, p, row.factors, correction.SourceTable); err != nil {
			return nil, err
		}
	}
	return &f, nil
}

type correctionRow struct {
	cell    Cell
	factors []float64
}

// correctionRows are the full 24-bucket rows of the corrected cells: the prior's factor (the menus'
// factor at each bucket) times the fitted multiplier where one was fitted.
func correctionRows(menus map[costmodel.Coll]*planner.Menu, cs []BucketCorrection) []correctionRow {
	var rows []correctionRow
	idx := map[Cell]int{}
	for _, bc := range cs {
		i, ok := idx[bc.Cell]
		if !ok {
			m := menus[bc.Cell.Coll]
			r := make([]float64, correction.NumBuckets)
			for b := range r {
				r[b] = float64(m.Factor(bc.Cell.Algo, bc.Cell.Proto, correction.BucketStart(b)))
			}
			i = len(rows)
			idx[bc.Cell] = i
			rows = append(rows, correctionRow{cell: bc.Cell, factors: r})
		}
		rows[i].factors[bc.Bucket] = roundFactor(bc.Factor)
	}
	return rows
}

// roundFactor keeps 4 significant digits (what the node table is written with).
func roundFactor(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 4, 64), 64)
	return v
}

// TableCorrections merges the rows fitted at nodes x rpn into a node table's [corrections] cells
// (existing: the table's own rows and the rows an earlier overlay fitted at other shapes): each
// fitted row is tagged with its shape, so that it applies there only, and replaces an existing row
// of its cell at that shape; every other existing row is kept. A fitted row carries the prior's
// factors (menus) outside its fitted buckets, since at its shape it replaces the cell's shape-less
// row whole. The result is in the existing order, new rows last.
func TableCorrections(existing []tables.CorrectionCell, menus map[costmodel.Coll]*planner.Menu, cs []BucketCorrection, nodes, rpn int) []tables.CorrectionCell {
	out := append([]tables.CorrectionCell(nil), existing...)
	for _, row := range correctionRows(menus, cs) {
		tc := tables.CorrectionCell{Coll: tableColl[row.cell.Coll], Algo: tableAlgo[row.cell.Algo], Proto: tableProto[row.cell.Proto],
			Nodes: nodes, RanksPerNode: rpn, Factors: row.factors}
		replaced := false
		for i, e := range out {
			if sameRow(e, tc) {
				out[i], replaced = tc, true
			}
		}
		if !replaced {
			out = append(out, tc)
		}
	}
	return out
}

// MergeCorrections is the prior's [corrections] rows (the table's, or a --prior overlay's) with an
// earlier overlay's rows of other shapes (OverlayCorrections) added where the prior has no row of
// that cell at that shape.
func MergeCorrections(prior, keep []tables.CorrectionCell) []tables.CorrectionCell {
	out := append([]tables.CorrectionCell(nil), prior...)
	for _, k := range keep {
		dup := false
		for _, e := range out {
			dup = dup || sameRow(e, k)
		}
		if !dup {
			out = append(out, k)
		}
	}
	return out
}

// sameRow reports whether two [corrections] rows are of one cell at one shape (or both without one).
func sameRow(a, b tables.CorrectionCell) bool {
	return sameCell(a, b) && a.Nodes == b.Nodes && a.RanksPerNode == b.RanksPerNode
}

func sameCell(a, b tables.CorrectionCell) bool {
	pa, ea := capabilities.ParseAlgo(a.Algo)
	pb, eb := capabilities.ParseAlgo(b.Algo)
	qa, fa := capabilities.ParseProto(a.Proto)
	qb, fb := capabilities.ParseProto(b.Proto)
	ca, ga := capabilities.ParseColl(a.Coll)
	cb, gb := capabilities.ParseColl(b.Coll)
	if ea != nil || eb != nil || fa != nil || fb != nil || ga != nil || gb != nil {
		return a.Coll == b.Coll && a.Algo == b.Algo && a.Proto == b.Proto
	}
	return pa == pb && qa == qb && ca == cb
}
