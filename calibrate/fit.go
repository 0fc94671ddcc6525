package calibrate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"

	"gonum.org/v1/gonum/diff/fd"
	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
)

// Cell names one (collective, algorithm, protocol) cell of the cost model.
type Cell struct {
	Coll  costmodel.Coll
	Algo  costmodel.Algo
	Proto costmodel.Proto
}

func (c Cell) String() string { return fmt.Sprintf("%s/%s/%s", c.Coll, c.Algo, c.Proto) }

// Point is one measured time: the time of one call of Bytes with whichever of Cells NCCL chose.
// A fully pinned sweep gives one cell; a protocol-free or free-choice sweep gives every legal cell
// its pin allows, and the model's prediction is the minimum over them (an envelope).
type Point struct {
	File   string
	Line   int
	Coll   costmodel.Coll
	Bytes  int64
	TimeUS float64
	Cells  []Cell
	// Pin is the sweep's NCCL_ALGO/NCCL_PROTO ("" free), for reports.
	Algo, Proto string
	// Run names the sweep the point comes from ("file:line" of its first line): the scoring never
	// prices one run's pick with another run's time (GroupRuns).
	Run string
	// IterCVPct is the row's -I per-iteration coefficient of variation (%; 0 when not printed): a
	// noisy point weighs less in the fit (weight).
	IterCVPct float64
	// Allowed, when set, are the cells the sweep's pin allows, and Cells the one the fit credits the
	// point to (PointOptions.Credit = CreditModel); scoring reads the pin's cells (PinCells).
	Allowed []Cell
}

// PinCells are the cells the point's pin allows: Allowed where the fit credits the point to one of
// them, else Cells.
func (p Point) PinCells() []Cell {
	if p.Allowed != nil {
		return p.Allowed
	}
	return p.Cells
}

// cvRef is the per-iteration CV (%) at which a point's weight in the fit halves.
const cvRef = 10.0

// weight is a point's weight in the fit: 1 without -I statistics, 1/(1+(cv/cvRef)^2) with them.
func (p Point) weight() float64 {
	if !(p.IterCVPct > 0) {
		return 1
	}
	r := p.IterCVPct / cvRef
	return 1 / (1 + r*r)
}

// Pinned reports whether the point measures exactly one cell.
func (p Point) Pinned() bool { return len(p.Cells) == 1 }

// Halves of a table row (PointOptions.Half).
const (
	HalfInPlace    = "in-place"
	HalfOutOfPlace = "out-of-place"
)

// ParseHalf reads a half's name: "ip" or "in-place", "oop" or "out-of-place".
func ParseHalf(s string) (string, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "ip", HalfInPlace:
		return HalfInPlace, nil
	case "oop", HalfOutOfPlace:
		return HalfOutOfPlace, nil
	}
	return "", fmt.Errorf("half %q: want oop or ip", s)
}

// PointOptions choose what Points takes of each row; the zero value takes the defaults.
type PointOptions struct {
	// Half is the half of each row that is fitted: HalfInPlace (the default), as PyTorch runs its
	// collectives (the output buffer is the input buffer), or HalfOutOfPlace. The other half is not
	// used, even where the chosen one is invalid: one fit measures one kind of call.
	Half string
	// Credit says what a point of a sweep whose pin allows several cells measures: CreditEnvelope
	// (the default) the fastest of them, whichever that is; CreditModel the cell NCCL's model picks
	// among them at that size (the fastest by the prior's menus: NCCL ran its own pick, and the base
	// table reproduces NCCL's model where it describes the machine, which calibrate nccl-log
	// --check-decisions checks against a TUNING log).
	Credit string
}

// Credits of PointOptions.Credit.
const (
	CreditEnvelope = "envelope"
	CreditModel    = "model"
)

// sourceSweep is the env source of a sweep's pin in the planners that decide its legal cells.
const sourceSweep capabilities.Source = "sweep"

// Points turns sweeps into fit points for topology topo, whose prior configuration is cfg: the
// chosen half (PointOptions.Half) of every row where that half is valid and the size positive,
// with the cells the sweep's pin allows.
//
// The cells a pin allows are the cells NCCL makes legal with that NCCL_ALGO/NCCL_PROTO: those a
// planner over topo with the pin as its env finds legal (planner.Menu: the §5 enables, the forced
// disables and the LL128 auto gate of capabilities.Enabled, then capabilities.Support), which is
// what planner explain --algo/--proto shows. So an explicit NCCL_PROTO that names LL128 makes LL128
// legal where its auto gate would not, as in NCCL (reference §5; tuning.cc resolves LL128's auto
// value 2 through the hardware checks, and a value the user set skips them).
//
// Sweeps of another node count than topo's, of no known collective, or whose pin allows no legal
// cell are skipped with a problem. The error is for a context that ends.
func Points(ctx context.Context, sweeps []*Sweep, topo *capabilities.Topology, cfg planner.Config, opt PointOptions) ([]Point, []Problem, error) {
	half := opt.Half
	if half == "" {
		half = HalfInPlace
	}
	if _, err := ParseHalf(half); err != nil {
		return nil, nil, fmt.Errorf("calibrate: %w", err)
	}
	switch opt.Credit {
	case "", CreditEnvelope, CreditModel:
	default:
		return nil, nil, fmt.Errorf("calibrate: credit %q: want %s or %s", opt.Credit, CreditEnvelope, CreditModel)
	}
	cfg.Cells = nil // overrides change no cell's legality
	type pinKey struct{ algo, proto string }
	legal := map[pinKey]map[costmodel.Coll]*planner.Menu{}
	pinMenus := func(pin Pin) (map[costmodel.Coll]*planner.Menu, error) {
		k := pinKey{pin.Algo, pin.Proto}
		if m, ok := legal[k]; ok {
			return m, nil
		}
		t := *topo
		t.Env.Algo, t.Env.Proto = capabilities.Setting{}, capabilities.Setting{}
		if pin.Algo != "" {
			t.Env.Algo = capabilities.Setting{Value: pin.Algo, Source: sourceSweep}
		}
		if pin.Proto != "" {
			t.Env.Proto = capabilities.Setting{Value: pin.Proto, Source: sourceSweep}
		}
		pl, err := planner.New(&t, cfg)
		if err != nil {
			return nil, err
		}
		m, err := Menus(ctx, pl)
		if err != nil {
			return nil, err
		}
		legal[k] = m
		return m, nil
	}
	var pts []Point
	var probs []Problem
	for _, s := range sweeps {
		skip := func(format string, args ...any) {
			probs = append(probs, Problem{File: s.File, Line: s.Line, Msg: "sweep not fitted: " + fmt.Sprintf(format, args...)})
		}
		if !s.CollKnown {
			skip("%s", msgNoColl)
			continue
		}
		if s.Nodes != 0 && s.Nodes != topo.NNodes {
			skip("it ran on %d nodes, the fit is for %d", s.Nodes, topo.NNodes)
			continue
		}
		menus, err := pinMenus(s.Pin)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			skip("%v", err)
			continue
		}
		m := menus[s.Coll]
		if m == nil {
			skip("no model for %s", s.Coll)
			continue
		}
		cells := legalCells(m)
		if len(cells) == 0 {
			skip("NCCL_ALGO=%q NCCL_PROTO=%q allows no legal cell of %s", s.Pin.Algo, s.Pin.Proto, s.Coll)
			continue
		}
		run := fmt.Sprintf("%s:%d", s.File, s.Line)
		noIP := 0
		for _, r := range s.Rows {
			h := r.IP
			if half == HalfOutOfPlace {
				h = r.OOP
			} else if r.OOPOnly {
				noIP++
			}
			if !h.Valid || r.Bytes <= 0 {
				continue
			}
			p := Point{File: s.File, Line: r.Line, Coll: s.Coll, Bytes: r.Bytes, TimeUS: h.TimeUS,
				Cells: cells, Algo: s.Pin.Algo, Proto: s.Pin.Proto, Run: run, IterCVPct: h.IterCVPct}
			if opt.Credit == CreditModel && len(cells) > 1 {
				p.Allowed, p.Cells = cells, []Cell{modelPick(m, cells, r.Bytes)}
			}
			pts = append(pts, p)
		}
		if noIP > 0 {
			probs = append(probs, Problem{File: s.File, Line: s.Rows[0].Line, Msg: fmt.Sprintf(
				"%s not fitted: the run printed the out-of-place half only, and the %s half is fitted (give --half oop)", plural(noIP, "row"), half)})
		}
	}
	return pts, probs, nil
}

// modelPick is the cell of cells that menu m prices fastest at nBytes (the first of equals, in
// cells' order): the pick of NCCL's model among the cells a pin allows, without a tuner.
func modelPick(m *planner.Menu, cells []Cell, nBytes int64) Cell {
	best, bt := cells[0], float32(math.Inf(1))
	for _, c := range cells {
		if t := m.Time(c.Algo, c.Proto, nBytes); t > 0 && t < bt {
			best, bt = c, t
		}
	}
	return best
}

// legalCells lists the legal cells of a menu (a legal reason and a positive bandwidth).
func legalCells(m *planner.Menu) []Cell {
	c := m.Class.Coll
	var out []Cell
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			if m.Cells[a][p].Reason == "" && m.Cells[a][p].BWGBps > 0 {
				out = append(out, Cell{c, a, p})
			}
		}
	}
	return out
}

// sourcePriced is the env source of the NCCL_PROTO that PricedMenus sets.
const sourcePriced capabilities.Source = "calibrate: every protocol priced"

// pricedTopology returns t with NCCL's LL128 auto gate lifted where t's env leaves NCCL_PROTO unset,
// as an explicit NCCL_PROTO naming every protocol lifts it (reference §5): the cells a sweep's pin
// can make legal are all priced, with the values NCCL gives them then. No pin can enable anything
// else: NCCL_ALGO only restricts, and LL128 is the only protocol with an automatic rule.
func pricedTopology(t *capabilities.Topology) capabilities.Topology {
	u := *t
	if !u.Env.Proto.IsSet() {
		u.Env.Proto = capabilities.Setting{Value: "LL,LL128,Simple", Source: sourcePriced}
	}
	return u
}

// PricedMenus prices every collective over topo and cfg (as Menus) with the LL128 auto gate lifted
// (pricedTopology): the prior values of every cell that Points can give a sweep, which Fit needs.
// A legal cell has the same values as in the menus of a planner over topo itself; which cells a
// sweep measures is Points' decision, not these menus'.
func PricedMenus(ctx context.Context, topo *capabilities.Topology, cfg planner.Config) (map[costmodel.Coll]*planner.Menu, error) {
	t := pricedTopology(topo)
	pl, err := planner.New(&t, cfg)
	if err != nil {
		return nil, err
	}
	return Menus(ctx, pl)
}

// FitOptions tune the fit; zero values take the defaults.
type FitOptions struct {
	// PriorSigma is the prior's spread on log(lat) and log(bw): the regularisation toward the prior
	// table. Default 1 (a factor e).
	PriorSigma float64
	// LossScale is the soft-L1 scale on log(pred/meas): residuals below it count as squares, above it
	// linearly. Default 0.05.
	LossScale float64
	// Sharpness of the smooth minimum over an envelope's cells (on log time). Default 200.
	Sharpness float64
}

func (o FitOptions) withDefaults() FitOptions {
	if o.PriorSigma <= 0 {
		o.PriorSigma = 1
	}
	if o.LossScale <= 0 {
		o.LossScale = 0.05
	}
	if o.Sharpness <= 0 {
		o.Sharpness = 200
	}
	return o
}

// Param is one fitted parameter: a cell's latency or bandwidth.
type Param struct {
	Cell  Cell
	Kind  string  // "lat_us" or "bw_gbps"
	Prior float64 // the prior table's value
	Value float64 // fitted (the prior when not identified)
	Sigma float64 // 1-sigma uncertainty, same unit; 0 when not identified
	// Identified is true when pinned points (a sweep that measured this cell alone) constrain the
	// parameter more than the prior does. Inferred is true when envelope points alone (partial or
	// free sweeps, where NCCL chose among several cells) constrain it: a value the envelope implies,
	// never a measurement of the cell, with a sigma of at least the prior's spread. A parameter
	// neither identified nor inferred is held at the prior.
	Identified, Inferred bool
	// Measured is true when a pinned point measured the cell.
	Measured bool
}

// Residual is one point's fit: prediction and log error.
type Residual struct {
	Point
	PredUS float64
	Cell   Cell    // the envelope cell the prediction takes (the point's only cell when pinned)
	LogErr float64 // log(pred/meas)
}

// FitResult is a fitted model for one topology.
type FitResult struct {
	Params    []Param
	Residuals []Residual
	// Fitted maps every cell that has a fitted parameter to its (lat, bw).
	Fitted map[Cell][2]float64
	// MedianRel and MaxRel summarise |pred/meas - 1| over the points.
	MedianRel, MaxRel float64
	// Sigma2 is the residual variance of log(pred/meas) (degrees of freedom corrected).
	Sigma2 float64
	Iter   int
	// Starts are the starting points of the envelope stage (none without envelope points), in the
	// order tried; BestStart indexes the one kept (the lowest loss).
	Starts    []Start
	BestStart int
	// Problems are envelope points not fitted: every cell they allow was measured slower by its
	// own pinned sweep than the point's time (Fit).
	Problems []Problem
}

// MeasuredCell reports whether a pinned point of the fit measured c.
func (r *FitResult) MeasuredCell(c Cell) bool {
	for _, p := range r.Params {
		if p.Cell == c && p.Measured {
			return true
		}
	}
	return false
}

// InferredCell reports whether c's fitted value was inferred from envelope points alone.
func (r *FitResult) InferredCell(c Cell) bool {
	for _, p := range r.Params {
		if p.Cell == c && p.Inferred {
			return true
		}
	}
	return false
}

// model holds what the loss needs: points, the free parameters and the prior.
type model struct {
	menus  map[costmodel.Coll]*planner.Menu
	nnodes int
	pts    []Point
	opt    FitOptions
	cells  []Cell       // cells with parameters, in order
	idx    map[Cell]int // cell -> index into cells
	prior  [][2]float64 // per cell (lat, bw) center of the prior (lat floored at minLat)
	free   []bool       // per parameter (2 per cell): optimised
	mult   [][]float64  // per point, per envelope cell: latency multiplier
	bytesF [][]float64  // per point, per envelope cell: bytes / (1000 * factor)
	ci     [][]int      // per point, per envelope cell: index into cells
}

// minLat is the latency floor of the prior center: a cell whose model latency is 0 is given this
// much, so that log(lat) exists.
const minLat = 0.1

// envelopeMargin is the noise margin of the stage-2 screen (Fit): a measured cell is dropped from
// an envelope point's candidates when its own pinned sweep measured it slower than the point's time
// by more than this fraction (NCCL cannot have run it there).
const envelopeMargin = 0.03

// startFactors are the bandwidth factors, on the prior of every envelope-only cell, that the
// stage-2 fit starts from (Fit): the prior itself first, then half and twice its bandwidths.
var startFactors = []float64{1, 0.5, 2}

// startTieRel is how much lower (relatively) a later start's loss must be to replace an earlier
// one: starts that converge to the same minimum differ in the last digits, and the earlier start
// (the prior first) is kept for them.
const startTieRel = 1e-6

// Start is one starting point of the envelope stage of a fit and the loss it converged to.
type Start struct {
	// BWFactor multiplies the prior bandwidth of every envelope-only cell at the start (1: the
	// prior itself).
	BWFactor float64
	Loss     float64
}

// Fit fits the latency and bandwidth of the cells the points measure, for the topology of menus
// (the prior: one menu per collective from a planner without overrides), in two stages:
//
//  1. The pinned points (Point.Pinned) alone. The cells they measure are the measured cells; a
//     parameter the data identify (its data curvature above the prior's) is Identified, the others
//     are held at the prior.
//  2. The envelope points (partial and free sweeps). From each point's candidate cells every
//     measured cell is dropped that its own pinned sweep measured, at that size (log-log
//     interpolated between its neighbouring measured sizes), slower than the point's time by more
//     than envelopeMargin: NCCL cannot have run it there. A point left with no candidate is a
//     Problem, not fitted. Measured cells are fixed at their stage-1 values: a pinned sweep
//     measures its cell directly, and an envelope point that a measured cell still explains can
//     only confirm it (the cell's measurement there is no slower than the point); moving it would
//     let a free run rewrite a measurement. The other cells (envelope-only) are fitted from each
//     of startFactors and the lowest loss kept; one the data constrain is Inferred, never
//     Identified, with a sigma of at least the prior's spread (PriorSigma on the log scale).
//
// Cells no point measures keep the prior and are not listed; Fitted holds the identified and the
// inferred cells.
func Fit(menus map[costmodel.Coll]*planner.Menu, pts []Point, opt FitOptions) (*FitResult, error) {
	if len(pts) == 0 {
		return nil, errors.New("calibrate: no points to fit")
	}
	opt = opt.withDefaults()
	var pinned, env []Point
	var pinnedAt, envAt []int // their indexes in pts
	for i, p := range pts {
		if p.Pinned() {
			pinned, pinnedAt = append(pinned, p), append(pinnedAt, i)
		} else {
			env, envAt = append(env, p), append(envAt, i)
		}
	}
	res := &FitResult{Fitted: map[Cell][2]float64{}}
	var rel []float64
	var ss float64
	nFree := 0
	fixed := map[Cell][2]float64{} // measured cells: their stage-1 log offsets
	var order []int                // per residual, its point's index in pts
	addResiduals := func(md *model, x []float64, at []int) {
		order = append(order, at...)
		for i := range md.pts {
			pred, k := md.predict(x, i, math.Inf(1))
			p := md.pts[i]
			r := Residual{Point: p, PredUS: pred, Cell: p.Cells[k], LogErr: math.Log(pred / p.TimeUS)}
			res.Residuals = append(res.Residuals, r)
			rel = append(rel, math.Abs(pred/p.TimeUS-1))
			ss += r.LogErr * r.LogErr
		}
	}
	if len(pinned) > 0 {
		md, err := newModel(menus, pinned, opt)
		if err != nil {
			return nil, err
		}
		st, err := md.fitStage(nil, []float64{1})
		if err != nil {
			return nil, err
		}
		res.Iter += st.iter
		addResiduals(md, st.x, pinnedAt)
		nFree += st.nIdent()
		for ci, c := range md.cells {
			fixed[c] = [2]float64{st.x[2*ci], st.x[2*ci+1]}
			res.addParams(md, ci, st, false)
		}
	}
	env, kept, probs := screenEnvelope(env, pinned)
	for k, i := range kept {
		kept[k] = envAt[i]
	}
	res.Problems = probs
	if len(env) > 0 {
		md, err := newModel(menus, env, opt)
		if err != nil {
			return nil, err
		}
		st, err := md.fitStage(fixed, startFactors)
		if err != nil {
			return nil, err
		}
		res.Iter += st.iter
		res.Starts, res.BestStart = st.starts, st.best
		addResiduals(md, st.x, kept)
		nFree += st.nIdent()
		for ci, c := range md.cells {
			if _, ok := fixed[c]; !ok {
				res.addParams(md, ci, st, true)
			}
		}
	}
	if len(res.Residuals) == 0 {
		return nil, fmt.Errorf("calibrate: no point left to fit: %w", Problems(probs))
	}
	sort.SliceStable(res.Params, func(i, j int) bool { return cellLess(res.Params[i].Cell, res.Params[j].Cell) })
	rs := make([]Residual, len(pts))
	has := make([]bool, len(pts))
	for k, i := range order {
		rs[i], has[i] = res.Residuals[k], true
	}
	res.Residuals = res.Residuals[:0]
	for i := range rs {
		if has[i] {
			res.Residuals = append(res.Residuals, rs[i])
		}
	}
	res.Sigma2 = ss / float64(max(1, len(res.Residuals)-nFree))
	res.MedianRel, res.MaxRel = median(rel), maxOf(rel)
	return res, nil
}

// addParams appends the two parameters of md's cell ci as stage st fitted them, and the cell to
// Fitted when either is identified (stage 1) or inferred (envelope, stage 2).
func (r *FitResult) addParams(md *model, ci int, st *stageFit, envelope bool) {
	c := md.cells[ci]
	mc := md.menus[c.Coll].Cells[c.Algo][c.Proto]
	x := st.x
	lat, bw := md.prior[ci][0]*math.Exp(x[2*ci]), md.prior[ci][1]*math.Exp(x[2*ci+1])
	for k, kind := range []string{"lat_us", "bw_gbps"} {
		j := 2*ci + k
		v, pv := lat, float64(mc.LatUS)
		if k == 1 {
			v, pv = bw, float64(mc.BWGBps)
		}
		p := Param{Cell: c, Kind: kind, Prior: pv, Value: v, Measured: !envelope}
		switch {
		case !st.ident[j]:
			p.Value = pv
		case envelope:
			p.Inferred = true
			p.Sigma = v * math.Max(math.Sqrt(math.Max(0, st.cov[j])), md.opt.PriorSigma)
		default:
			p.Identified = true
			p.Sigma = v * math.Sqrt(math.Max(0, st.cov[j]))
		}
		r.Params = append(r.Params, p)
	}
	if st.ident[2*ci] || st.ident[2*ci+1] {
		l := lat
		if !st.ident[2*ci] {
			l = float64(mc.LatUS)
		}
		r.Fitted[c] = [2]float64{l, bw}
	}
}

// screenEnvelope drops from each envelope point's candidates the cells that a pinned point
// measured slower than the point's time by more than envelopeMargin, at the point's size or
// log-log interpolated between the two measured sizes around it (outside a cell's measured range
// nothing is dropped: there is no measurement to go by). Points left with no candidate are returned
// as problems instead; kept indexes env for each point returned.
func screenEnvelope(env, pinned []Point) (out []Point, kept []int, probs []Problem) {
	// Per measured cell, the fastest pinned time at each measured size, by size.
	type meas struct {
		n int64
		t float64
	}
	by := map[Cell][]meas{}
	for _, p := range pinned {
		c := p.Cells[0]
		ms := by[c]
		found := false
		for i := range ms {
			if ms[i].n == p.Bytes {
				ms[i].t, found = math.Min(ms[i].t, p.TimeUS), true
			}
		}
		if !found {
			ms = append(ms, meas{p.Bytes, p.TimeUS})
		}
		by[c] = ms
	}
	for _, ms := range by {
		sort.Slice(ms, func(i, j int) bool { return ms[i].n < ms[j].n })
	}
	timeAt := func(c Cell, n int64) (float64, bool) {
		ms := by[c]
		k := sort.Search(len(ms), func(i int) bool { return ms[i].n >= n })
		switch {
		case k == len(ms):
			return 0, false
		case ms[k].n == n:
			return ms[k].t, true
		case k == 0:
			return 0, false
		}
		a, b := ms[k-1], ms[k]
		f := math.Log(float64(n)/float64(a.n)) / math.Log(float64(b.n)/float64(a.n))
		return math.Exp(math.Log(a.t) + f*math.Log(b.t/a.t)), true
	}
	for i, p := range env {
		var keep []Cell
		var why []string
		for _, c := range p.Cells {
			if t, ok := timeAt(c, p.Bytes); ok && t > p.TimeUS*(1+envelopeMargin) {
				why = append(why, fmt.Sprintf("%s %.4g us", c, t))
				continue
			}
			keep = append(keep, c)
		}
		if len(keep) == 0 {
			probs = append(probs, Problem{File: p.File, Line: p.Line, Msg: fmt.Sprintf(
				"point not fitted: %d B in %.4g us (NCCL_ALGO=%q NCCL_PROTO=%q), but every cell it allows was measured slower by its own pinned sweep (%s; margin %.0f%%)",
				p.Bytes, p.TimeUS, p.Algo, p.Proto, strings.Join(why, ", "), 100*envelopeMargin)})
			continue
		}
		p.Cells = keep
		out, kept = append(out, p), append(kept, i)
	}
	return out, kept, probs
}

// newModel builds the loss of pts over the prior menus: one (lat, bw) pair per cell the points
// name.
func newModel(menus map[costmodel.Coll]*planner.Menu, pts []Point, opt FitOptions) (*model, error) {
	md := &model{menus: menus, pts: pts, opt: opt, idx: map[Cell]int{}}
	for _, p := range pts {
		for _, c := range p.Cells {
			if _, ok := md.idx[c]; !ok {
				md.idx[c] = len(md.cells)
				md.cells = append(md.cells, c)
			}
		}
	}
	sort.Slice(md.cells, func(i, j int) bool { return cellLess(md.cells[i], md.cells[j]) })
	for i, c := range md.cells {
		md.idx[c] = i
		if menus[c.Coll] == nil || !(menus[c.Coll].Cells[c.Algo][c.Proto].BWGBps > 0) {
			return nil, fmt.Errorf("calibrate: %s has no prior bandwidth in the menus (price them with PricedMenus)", c)
		}
		mc := menus[c.Coll].Cells[c.Algo][c.Proto]
		md.prior = append(md.prior, [2]float64{math.Max(float64(mc.LatUS), minLat), float64(mc.BWGBps)})
	}
	for _, p := range pts {
		m := menus[p.Coll]
		var mu, bf []float64
		var ci []int
		for _, c := range p.Cells {
			mu = append(mu, latMult(m, c, p.Bytes))
			bf = append(bf, float64(p.Bytes)/(1000*float64(m.Factor(c.Algo, c.Proto, p.Bytes))))
			ci = append(ci, md.idx[c])
		}
		md.mult, md.bytesF, md.ci = append(md.mult, mu), append(md.bytesF, bf), append(md.ci, ci)
	}
	return md, nil
}

// stageFit is one stage of Fit: the parameters (log offsets from the prior), which of them the
// data identify (fixed ones are false), their variances and the starts tried.
type stageFit struct {
	x      []float64
	ident  []bool
	cov    []float64
	iter   int
	starts []Start
	best   int
}

func (st *stageFit) nIdent() int {
	n := 0
	for _, f := range st.ident {
		if f {
			n++
		}
	}
	return n
}

// fitStage minimises md's loss with the cells of fixed held at their given log offsets and the
// others free, from each bandwidth factor of starts (on the free cells' prior bandwidths), keeping
// the lowest loss (the earliest within startTieRel). The free parameters the data do not identify (data
// curvature below the prior's) are then held at the prior and the rest refitted.
func (md *model) fitStage(fixed map[Cell][2]float64, starts []float64) (*stageFit, error) {
	n := 2 * len(md.cells)
	base := make([]float64, n)
	free := make([]bool, n)
	for ci, c := range md.cells {
		if v, ok := fixed[c]; ok {
			base[2*ci], base[2*ci+1] = v[0], v[1]
			continue
		}
		free[2*ci], free[2*ci+1] = true, true
	}
	st := &stageFit{ident: make([]bool, n), cov: make([]float64, n)}
	var x []float64
	bestLoss := math.Inf(1)
	for k, f := range starts {
		x0 := append([]float64(nil), base...)
		for j := 1; j < n; j += 2 {
			if free[j] {
				x0[j] = math.Log(f)
			}
		}
		md.free = free
		xk, it, err := md.optimize(x0)
		if err != nil {
			return nil, err
		}
		st.iter += it
		l := md.loss(xk)
		st.starts = append(st.starts, Start{BWFactor: f, Loss: l})
		if l < bestLoss*(1-startTieRel) {
			bestLoss, x, st.best = l, xk, k
		}
	}
	// Identification: the data's curvature against the prior's, per free parameter; a bandwidth
	// also needs a point in its bandwidth regime (bwReachMin).
	dataH := md.dataCurvature(x)
	reach := md.bandwidthReach(x)
	priorH := 2 / (md.opt.PriorSigma * md.opt.PriorSigma)
	anyHeld := false
	for j := range st.ident {
		st.ident[j] = free[j] && dataH[j] > priorH && (j%2 == 0 || reach[j/2] >= bwReachMin)
		if free[j] && !st.ident[j] {
			anyHeld = true
		}
	}
	if anyHeld {
		md.free = st.ident
		x0 := append([]float64(nil), base...)
		for j := range x0 {
			if st.ident[j] {
				x0[j] = x[j]
			}
		}
		var it int
		var err error
		if x, it, err = md.optimize(x0); err != nil {
			return nil, err
		}
		st.iter += it
	}
	st.x = x
	var ss float64
	for i := range md.pts {
		pred, _ := md.predict(x, i, math.Inf(1))
		r := math.Log(pred / md.pts[i].TimeUS)
		ss += r * r
	}
	sigma2 := ss / float64(max(1, len(md.pts)-st.nIdent()))
	cov, err := md.covariance(x, st.ident, sigma2)
	if err != nil {
		return nil, err
	}
	st.cov = cov
	return st, nil
}

func cellLess(a, b Cell) bool {
	if a.Coll != b.Coll {
		return a.Coll < b.Coll
	}
	if a.Algo != b.Algo {
		return a.Algo < b.Algo
	}
	return a.Proto < b.Proto
}

// latMult is the latency multiplier of costmodel.Time at one pipe op: 1.4 (1.9 below sm_80) for
// multi-node Ring/Simple AllReduce on the ring plateau, else 1.
func latMult(m *planner.Menu, c Cell, nBytes int64) float64 {
	tb := m.Table()
	if c.Algo == costmodel.Ring && c.Proto == costmodel.Simple && tb.NNodes > 1 && c.Coll == costmodel.AllReduce &&
		tb.CommNChannels > 0 && nBytes/int64(tb.CommNChannels*tb.NRanks) >= 64 {
		if tb.MinCompCap < 80 {
			return 1.9
		}
		return 1.4
	}
	return 1
}

// predict returns point i's predicted time under parameters x and the envelope cell that attains
// it. sharp is the soft minimum's sharpness on log time (+Inf: the hard minimum).
func (md *model) predict(x []float64, i int, sharp float64) (float64, int) {
	best, bk := math.Inf(1), 0
	for k, ci := range md.ci[i] {
		t := md.cellTime(x, i, k, ci)
		if t < best {
			best, bk = t, k
		}
	}
	if math.IsInf(sharp, 1) || len(md.ci[i]) == 1 {
		return best, bk
	}
	// soft min on log t: -1/s log sum exp(-s (log t_k - log best))
	var sum float64
	for k, ci := range md.ci[i] {
		sum += math.Exp(-sharp * (math.Log(md.cellTime(x, i, k, ci)) - math.Log(best)))
	}
	return best * math.Exp(-math.Log(sum)/sharp), bk
}

func (md *model) cellTime(x []float64, i, k, ci int) float64 {
	lat := md.prior[ci][0] * math.Exp(x[2*ci])
	bw := md.prior[ci][1] * math.Exp(x[2*ci+1])
	return lat*md.mult[i][k] + md.bytesF[i][k]/bw
}

// loss is the soft-L1 loss of the log errors plus the prior's quadratic penalty.
func (md *model) loss(x []float64) float64 {
	s := md.opt.LossScale
	var l float64
	for i, p := range md.pts {
		pred, _ := md.predict(x, i, md.opt.Sharpness)
		r := math.Log(pred/p.TimeUS) / s
		l += p.weight() * 2 * (math.Sqrt(1+r*r) - 1)
	}
	ps := md.opt.PriorSigma
	for _, v := range x {
		l += v * v / (ps * ps)
	}
	return l
}

// grad is the analytic gradient of loss.
func (md *model) grad(g, x []float64) {
	for i := range g {
		g[i] = 0
	}
	s, sh := md.opt.LossScale, md.opt.Sharpness
	w := make([]float64, 0, 8)
	for i, p := range md.pts {
		pred, _ := md.predict(x, i, sh)
		r := math.Log(pred/p.TimeUS) / s
		dl := p.weight() * 2 * r / math.Sqrt(1+r*r) / s // d loss / d log pred
		// weights of the soft min: softmax(-sh log t_k)
		w = w[:0]
		var sum float64
		for k, ci := range md.ci[i] {
			e := math.Exp(-sh * (math.Log(md.cellTime(x, i, k, ci)) - math.Log(pred)))
			w = append(w, e)
			sum += e
		}
		for k, ci := range md.ci[i] {
			t := md.cellTime(x, i, k, ci)
			lat := md.prior[ci][0] * math.Exp(x[2*ci]) * md.mult[i][k]
			wk := w[k] / sum
			g[2*ci] += dl * wk * lat / t
			g[2*ci+1] += dl * wk * -(t - lat) / t
		}
	}
	ps := md.opt.PriorSigma
	for j, v := range x {
		g[j] += 2 * v / (ps * ps)
	}
}

// optimize minimises the loss over the free parameters from x0 (the others stay at x0's values).
func (md *model) optimize(x0 []float64) ([]float64, int, error) {
	x, it, err := minimizeFree(md.free, x0, md.loss, md.grad, 1e-9, 5000)
	if err != nil {
		return nil, 0, fmt.Errorf("calibrate: fit: %w", err)
	}
	return x, it, nil
}

// minimizeFree minimises loss (with its gradient grad, over the whole vector) with BFGS over the
// parameters free marks, the others held at x0's values; it returns the whole vector and the
// iterations. A line search that cannot improve further at a tiny gradient is a converged fit.
func minimizeFree(free []bool, x0 []float64, loss func([]float64) float64, grad func(g, x []float64),
	gradTol float64, maxIter int) ([]float64, int, error) {
	var freeIdx []int
	for j, f := range free {
		if f {
			freeIdx = append(freeIdx, j)
		}
	}
	full := append([]float64(nil), x0...)
	if len(freeIdx) == 0 {
		return full, 0, nil
	}
	expand := func(y []float64) []float64 {
		x := append([]float64(nil), full...)
		for k, j := range freeIdx {
			x[j] = y[k]
		}
		return x
	}
	gfull := make([]float64, len(full))
	prob := optimize.Problem{
		Func: func(y []float64) float64 { return loss(expand(y)) },
		Grad: func(g, y []float64) {
			grad(gfull, expand(y))
			for k, j := range freeIdx {
				g[k] = gfull[j]
			}
		},
	}
	y0 := make([]float64, len(freeIdx))
	for k, j := range freeIdx {
		y0[k] = x0[j]
	}
	r, err := optimize.Minimize(prob, y0, &optimize.Settings{GradientThreshold: gradTol, MajorIterations: maxIter}, &optimize.BFGS{})
	if err != nil && r == nil {
		return nil, 0, err
	}
	return expand(r.X), r.MajorIterations, nil
}

// dataCurvature is the diagonal of the data part of the loss Hessian (Gauss-Newton, on the smooth
// loss): how strongly the points pin each parameter.
func (md *model) dataCurvature(x []float64) []float64 {
	h := make([]float64, len(x))
	s := md.opt.LossScale
	md.eachCellTerm(x, func(i, ci int, wk, t, lat float64) {
		pw := md.pts[i].weight()
		ja, jb := wk*lat/t, wk*(t-lat)/t
		h[2*ci] += pw * 2 * ja * ja / (s * s)
		h[2*ci+1] += pw * 2 * jb * jb / (s * s)
	})
	return h
}

// eachCellTerm calls f for every candidate cell ci of every point i at x, with wk the cell's share
// of the point's soft minimum, t the cell's predicted time and lat its latency term.
func (md *model) eachCellTerm(x []float64, f func(i, ci int, wk, t, lat float64)) {
	sh := md.opt.Sharpness
	var w []float64
	for i := range md.pts {
		pred, _ := md.predict(x, i, sh)
		var sum float64
		w = w[:0]
		for k, ci := range md.ci[i] {
			w = append(w, math.Exp(-sh*(math.Log(md.cellTime(x, i, k, ci))-math.Log(pred))))
			sum += w[k]
		}
		for k, ci := range md.ci[i] {
			t := md.cellTime(x, i, k, ci)
			f(i, ci, w[k]/sum, t, md.prior[ci][0]*math.Exp(x[2*ci])*md.mult[i][k])
		}
	}
}

// bwReachMin is the least share of a point's time that its cell's bandwidth term must reach, at the
// fitted values, for the data to identify that bandwidth. Points that all sit where the latency
// dominates (a plateau of small sizes) say nothing of the bandwidth beyond them, however many there
// are: their curvature can add up past the prior's while every one of them is best fitted by an
// ever larger bandwidth, which the planner would then extrapolate to every size (the closed loop's
// seeds 3 and 8, cmd/calibrate's TestClosedLoopSeeds: Tree/LL measured on a plateau only, then
// picked up to 256 MiB at 3.9x the best cell's time). Such a bandwidth is held at the prior.
const bwReachMin = 0.5

// bandwidthReach is, per cell, the largest share of a point's predicted time that the cell's
// bandwidth term takes at x (weighted by the cell's share of the point's soft minimum).
func (md *model) bandwidthReach(x []float64) []float64 {
	reach := make([]float64, len(md.cells))
	md.eachCellTerm(x, func(_, ci int, wk, t, lat float64) {
		reach[ci] = math.Max(reach[ci], wk*(t-lat)/t)
	})
	return reach
}

// covariance returns the variance of each identified parameter (log scale): the inverse of the
// loss Hessian (finite differences) over the identified parameters, scaled to the residual
// variance (for the loss's quadratic core, cov = 2 sigma^2/s^2 H^-1).
func (md *model) covariance(x []float64, ident []bool, sigma2 float64) ([]float64, error) {
	var idx []int
	for j, f := range ident {
		if f {
			idx = append(idx, j)
		}
	}
	out := make([]float64, len(x))
	if len(idx) == 0 {
		return out, nil
	}
	y := make([]float64, len(idx))
	for k, j := range idx {
		y[k] = x[j]
	}
	f := func(y []float64) float64 {
		xx := append([]float64(nil), x...)
		for k, j := range idx {
			xx[j] = y[k]
		}
		return md.loss(xx)
	}
	var h mat.SymDense
	fd.Hessian(&h, f, y, &fd.Settings{Formula: fd.Central, Step: 1e-4})
	var inv mat.Dense
	if err := inv.Inverse(&h); err != nil {
		var ce mat.Condition
		if !errors.As(err, &ce) {
			return nil, fmt.Errorf("calibrate: fit: the loss Hessian is singular: %w", err)
		}
	}
	s := md.opt.LossScale
	scale := 2 * sigma2 / (s * s)
	for k, j := range idx {
		out[j] = inv.At(k, k) * scale
	}
	return out, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// p90 is the 90th percentile of xs by nearest rank: the ceil(0.9 n)-th smallest of n values
// (0 for none).
func p90(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[(9*len(s)+9)/10-1]
}

func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = math.Max(m, x)
	}
	return m
}

// Menus prices every collective on a planner with the class nccl-tests measures by default (sum,
// float32, one pipe op, unregistered buffers): the prior (or fitted) model a fit and a report use.
func Menus(ctx context.Context, pl *planner.Planner) (map[costmodel.Coll]*planner.Menu, error) {
	out := map[costmodel.Coll]*planner.Menu{}
	for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
		pr, err := pl.Prepare(ctx, planner.Class{Coll: c, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
		if err != nil {
			return nil, err
		}
		out[c] = pr.Menu()
	}
	return out, nil
}

// Overrides are the fitted cells as planner overrides.
func (r *FitResult) Overrides() []planner.CellOverride {
	var out []planner.CellOverride
	for _, c := range r.cellsSorted() {
		v := r.Fitted[c]
		out = append(out, planner.CellOverride{Coll: c.Coll, Algo: c.Algo, Proto: c.Proto, LatUS: float32(v[0]), BWGBps: float32(v[1])})
	}
	return out
}

func (r *FitResult) cellsSorted() []Cell {
	cs := make([]Cell, 0, len(r.Fitted))
	for c := range r.Fitted {
		cs = append(cs, c)
	}
	sort.Slice(cs, func(i, j int) bool { return cellLess(cs[i], cs[j]) })
	return cs
}
