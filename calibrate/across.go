package calibrate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
)

// AtNodes is one node count's share of a fit across node counts: the topology at that count, the
// prior configuration that prices it, and the points measured there.
type AtNodes struct {
	Nodes  int
	Topo   *capabilities.Topology
	Cfg    planner.Config // the prior; its Cells are ignored
	Points []Point
}

// Kinds of the parameters of a fit across node counts, in a cell's parameter order.
const (
	KindBaseLat  = "base_lat"   // multiplier of the cell's base latency (NCCL's baseLat)
	KindIntraLat = "intra_lat"  // multiplier of its intra-node hop latencies (hwLat NVLINK or PCI)
	KindInterLat = "inter_lat"  // multiplier of its inter-node hop latencies (hwLat NET)
	KindBW1      = "bw_1node"   // multiplier of its bandwidth on one node
	KindBW2      = "bw_2nodes"  // on two nodes (NCCL prices them with the graphs' bwIntra)
	KindBWMulti  = "bw_3+nodes" // on three nodes or more (NCCL prices them with bwInter)
	paramsAcross = 6
)

var kindsAcross = [paramsAcross]string{KindBaseLat, KindIntraLat, KindInterLat, KindBW1, KindBW2, KindBWMulti}

// bwGroup is the bandwidth parameter (index into a cell's parameters) that applies at nodes:
// NCCL's tuning prices one node and two nodes with the graphs' bwIntra and more nodes with bwInter
// (reference §2: bw = nNodes <= 2 ? bwIntra : bwInter), and two nodes already cross the network, so
// each of the three regimes has a multiplier of its own.
func bwGroup(nodes int) int {
	switch {
	case nodes <= 1:
		return 3
	case nodes == 2:
		return 4
	}
	return 5
}

// split is one cell's prior latency at one node count split into the parts the constants give
// it, and its prior bandwidth: lat = rest + base + intra + inter (us), where base, intra and inter
// are what NCCL's baseLat, intra-node hwLat and NET hwLat contribute (each measured as the drop in
// the model's latency when that constant is zeroed) and rest is the remainder (the graph's
// latencyInter, CollNet's per-rank term, PAT's per-rank term).
type split struct {
	rest, base, intra, inter float64
	bw                       float64
}

// latency is the cell's latency with the three parts scaled by exp(theta[0..2]), floored at minLat.
func (s split) latency(theta []float64) float64 {
	return math.Max(minLat, s.rest+s.base*math.Exp(theta[0])+s.intra*math.Exp(theta[1])+s.inter*math.Exp(theta[2]))
}

// splitCells splits the prior latency of every cell of topo priced with cfg (PricedMenus), by
// pricing it again with NCCL's baseLat, the intra-node hwLat rows and the NET hwLat row zeroed in
// turn. Latency is affine in those constants (reference §3) except for the multi-node ring's floor
// of its intra-node step at the net overhead; there the split is the linearisation at the prior.
func splitCells(ctx context.Context, topo *capabilities.Topology, cfg planner.Config) (map[costmodel.Coll]*planner.Menu, map[Cell]split, error) {
	cfg.Cells = nil
	k := costmodel.DefaultConstants()
	if cfg.Constants != nil {
		k = *cfg.Constants
	}
	menus, err := PricedMenus(ctx, topo, cfg)
	if err != nil {
		return nil, nil, err
	}
	zeroed := func(edit func(*costmodel.Constants)) (map[costmodel.Coll]*planner.Menu, error) {
		kk := k
		edit(&kk)
		c := cfg
		c.Constants = &kk
		return PricedMenus(ctx, topo, c)
	}
	noBase, err := zeroed(func(c *costmodel.Constants) { c.BaseLat = [costmodel.NumAlgos][costmodel.NumProtos]float64{} })
	if err != nil {
		return nil, nil, err
	}
	noIntra, err := zeroed(func(c *costmodel.Constants) {
		c.HWLat[costmodel.HWNVLink] = [costmodel.NumAlgos][costmodel.NumProtos]float64{}
		c.HWLat[costmodel.HWPCI] = [costmodel.NumAlgos][costmodel.NumProtos]float64{}
	})
	if err != nil {
		return nil, nil, err
	}
	noInter, err := zeroed(func(c *costmodel.Constants) {
		c.HWLat[costmodel.HWNet] = [costmodel.NumAlgos][costmodel.NumProtos]float64{}
	})
	if err != nil {
		return nil, nil, err
	}
	out := map[Cell]split{}
	for coll, m := range menus {
		for _, c := range legalCells(m) {
			lat := float64(m.Cells[c.Algo][c.Proto].LatUS)
			s := split{bw: float64(m.Cells[c.Algo][c.Proto].BWGBps)}
			s.base = lat - float64(noBase[coll].Cells[c.Algo][c.Proto].LatUS)
			s.intra = lat - float64(noIntra[coll].Cells[c.Algo][c.Proto].LatUS)
			s.inter = lat - float64(noInter[coll].Cells[c.Algo][c.Proto].LatUS)
			s.rest = lat - s.base - s.intra - s.inter
			out[c] = s
		}
	}
	return menus, out, nil
}

// AcrossParam is one parameter of a fit across node counts: a multiplier of one part of a cell's
// prior latency or of its bandwidth in one regime (Kind*).
type AcrossParam struct {
	Cell Cell
	Kind string
	// Mult is the fitted multiplier (1 when not identified); Sigma its 1-sigma spread (0 when not
	// identified).
	Mult, Sigma float64
	// Identified: the data constrain it more than the prior does; the others stay at 1.
	Identified bool
}

// AcrossFit is a fit of one set of parameters to sweeps at several node counts.
type AcrossFit struct {
	Nodes  []int // the node counts fitted, ascending
	Points int
	Params []AcrossParam
	// Residuals are the fitted points' predictions, each at its own node count.
	Residuals []Residual
	// MedianRel and MaxRel summarise |pred/meas - 1| over them.
	MedianRel, MaxRel float64
	Iter              int
	opt               FitOptions
	cells             []Cell
	x                 []float64 // log multipliers, paramsAcross per cell
}

// acrossPoint is one point with, per envelope cell, what its prediction needs.
type acrossPoint struct {
	Point
	ci     []int     // cell index
	sp     []split   // the cell's split at the point's node count
	mult   []float64 // latency multiplier of costmodel.Time
	bytesF []float64 // bytes / (1000 * correction factor)
	group  int       // bandwidth parameter
}

type acrossModel struct {
	pts   []acrossPoint
	opt   FitOptions
	free  []bool
	cells []Cell
}

// prepareAcross splits every shape's cells and turns its points into acrossPoints; cells are
// indexed in idx (added as met, sorted by the caller).
func prepareAcross(ctx context.Context, shapes []AtNodes, idx map[Cell]int) ([]acrossPoint, error) {
	var out []acrossPoint
	for _, sh := range shapes {
		menus, splits, err := splitCells(ctx, sh.Topo, sh.Cfg)
		if err != nil {
			return nil, fmt.Errorf("calibrate: %d nodes: %w", sh.Nodes, err)
		}
		for _, p := range sh.Points {
			ap := acrossPoint{Point: p, group: bwGroup(sh.Nodes)}
			m := menus[p.Coll]
			for _, c := range p.Cells {
				s, ok := splits[c]
				if !ok || !(s.bw > 0) {
					return nil, fmt.Errorf("calibrate: %s:%d: %s has no prior bandwidth at %d nodes", p.File, p.Line, c, sh.Nodes)
				}
				i, ok := idx[c]
				if !ok {
					i = len(idx)
					idx[c] = i
				}
				ap.ci = append(ap.ci, i)
				ap.sp = append(ap.sp, s)
				ap.mult = append(ap.mult, latMult(m, c, p.Bytes))
				ap.bytesF = append(ap.bytesF, float64(p.Bytes)/(1000*float64(m.Factor(c.Algo, c.Proto, p.Bytes))))
			}
			out = append(out, ap)
		}
	}
	return out, nil
}

// time is envelope cell k's predicted time of point p under x.
func (p *acrossPoint) time(x []float64, k int) float64 {
	th := x[paramsAcross*p.ci[k]:]
	return p.sp[k].latency(th)*p.mult[k] + p.bytesF[k]/(p.sp[k].bw*math.Exp(th[p.group]))
}

// predict is the point's prediction: the minimum over its cells, or with a finite sharpness the
// smooth minimum on log time that the loss uses.
func (p *acrossPoint) predict(x []float64, sharp float64) float64 {
	best := math.Inf(1)
	for k := range p.ci {
		best = math.Min(best, p.time(x, k))
	}
	if math.IsInf(sharp, 1) || len(p.ci) == 1 {
		return best
	}
	var sum float64
	for k := range p.ci {
		sum += math.Exp(-sharp * (math.Log(p.time(x, k)) - math.Log(best)))
	}
	return best * math.Exp(-math.Log(sum)/sharp)
}

// grad is the analytic gradient of loss: for point i, d loss / d log pred_i = w_i 2 r/sqrt(1+r^2)/s
// (r = log(pred_i/meas_i)/s); d log pred / d log t_k is the soft minimum's weight of cell k; and
// d log t_k / d x is mult*part*e^x/t_k for a latency multiplier (0 where the latency is floored) and
// -(bytes/bw)/t_k for the bandwidth multiplier of the point's regime.
func (md *acrossModel) grad(g, x []float64) {
	for j := range g {
		g[j] = 0
	}
	s, sh := md.opt.LossScale, md.opt.Sharpness
	var w []float64
	for i := range md.pts {
		p := &md.pts[i]
		pred := p.predict(x, sh)
		r := math.Log(pred/p.TimeUS) / s
		dl := p.weight() * 2 * r / math.Sqrt(1+r*r) / s
		w = w[:0]
		var sum float64
		for k := range p.ci {
			e := 1.0
			if len(p.ci) > 1 {
				e = math.Exp(-sh * (math.Log(p.time(x, k)) - math.Log(pred)))
			}
			w = append(w, e)
			sum += e
		}
		for k, ci := range p.ci {
			th := x[paramsAcross*ci:]
			t := p.time(x, k)
			c := dl * w[k] / sum / t
			sp := p.sp[k]
			if sp.rest+sp.base*math.Exp(th[0])+sp.intra*math.Exp(th[1])+sp.inter*math.Exp(th[2]) > minLat {
				for q, part := range [3]float64{sp.base, sp.intra, sp.inter} {
					g[paramsAcross*ci+q] += c * p.mult[k] * part * math.Exp(th[q])
				}
			}
			g[paramsAcross*ci+p.group] -= c * p.bytesF[k] / (sp.bw * math.Exp(th[p.group]))
		}
	}
	ps := md.opt.PriorSigma
	for j, v := range x {
		g[j] += 2 * v / (ps * ps)
	}
}

func (md *acrossModel) loss(x []float64) float64 {
	s := md.opt.LossScale
	var l float64
	for i := range md.pts {
		p := &md.pts[i]
		r := math.Log(p.predict(x, md.opt.Sharpness)/p.TimeUS) / s
		l += p.weight() * 2 * (math.Sqrt(1+r*r) - 1)
	}
	ps := md.opt.PriorSigma
	for _, v := range x {
		l += v * v / (ps * ps)
	}
	return l
}

// FitAcross fits, to points measured at several node counts, one set of multipliers per cell on
// the parts of NCCL's model that node counts share: the cell's base latency, its intra-node and
// inter-node hop latencies (the model multiplies them by the hop counts of each node count), and
// its bandwidth in each of the three regimes of bwGroup. The fitted model prices every node count,
// measured or not (AcrossFit.Cells). Parameters the data do not identify (their data curvature is
// below the prior's, as in Fit) stay at the prior.
//
// Loss, prior and envelopes are Fit's: the soft-L1 of log(pred/meas), a Gaussian prior of spread
// opt.PriorSigma on each log multiplier, the smooth minimum over an envelope's cells.
func FitAcross(ctx context.Context, shapes []AtNodes, opt FitOptions) (*AcrossFit, error) {
	opt = opt.withDefaults()
	idx := map[Cell]int{}
	pts, err := prepareAcross(ctx, shapes, idx)
	if err != nil {
		return nil, err
	}
	if len(pts) == 0 {
		return nil, errors.New("calibrate: no points to fit across node counts")
	}
	cells := make([]Cell, len(idx))
	for c, i := range idx {
		cells[i] = c
	}
	sort.Slice(cells, func(i, j int) bool { return cellLess(cells[i], cells[j]) })
	for i, c := range cells {
		idx[c] = i
	}
	// Re-index the points to the sorted order.
	if pts, err = prepareAcross(ctx, shapes, idx); err != nil {
		return nil, err
	}
	md := &acrossModel{pts: pts, opt: opt, cells: cells}
	n := paramsAcross * len(cells)
	md.free = make([]bool, n)
	for i := range md.free {
		md.free[i] = true
	}
	x, iter, err := md.optimize(ctx, make([]float64, n))
	if err != nil {
		return nil, err
	}
	curv := md.dataCurvature(x)
	priorH := 2 / (opt.PriorSigma * opt.PriorSigma)
	ident := make([]bool, n)
	held := false
	for j := range ident {
		ident[j] = curv[j] > priorH
		held = held || !ident[j]
	}
	if held {
		md.free = ident
		x0 := make([]float64, n)
		for j := range x0 {
			if ident[j] {
				x0[j] = x[j]
			}
		}
		var it int
		if x, it, err = md.optimize(ctx, x0); err != nil {
			return nil, err
		}
		iter += it
	}
	f := &AcrossFit{Points: len(pts), Iter: iter, opt: opt, cells: cells, x: x}
	for _, sh := range shapes {
		if len(sh.Points) > 0 {
			f.Nodes = append(f.Nodes, sh.Nodes)
		}
	}
	sort.Ints(f.Nodes)
	// Spread: from the diagonal of the data curvature plus the prior's, scaled by the residual
	// variance (as Fit's covariance for the loss's quadratic core); the diagonal ignores the
	// correlations and so understates the spread of correlated parameters.
	var ss float64
	var rel []float64
	for i := range pts {
		p := &pts[i]
		pred, k := math.Inf(1), 0
		for kk := range p.ci {
			if t := p.time(x, kk); t < pred {
				pred, k = t, kk
			}
		}
		r := math.Log(pred / p.TimeUS)
		ss += r * r
		rel = append(rel, math.Abs(pred/p.TimeUS-1))
		f.Residuals = append(f.Residuals, Residual{Point: p.Point, PredUS: pred, Cell: p.Cells[k], LogErr: r})
	}
	f.MedianRel, f.MaxRel = median(rel), maxOf(rel)
	nFree := 0
	for _, id := range ident {
		if id {
			nFree++
		}
	}
	sigma2 := ss / float64(max(1, len(pts)-nFree))
	curv = md.dataCurvature(x)
	s := opt.LossScale
	for ci, c := range cells {
		for k, kind := range kindsAcross {
			j := paramsAcross*ci + k
			p := AcrossParam{Cell: c, Kind: kind, Mult: 1, Identified: ident[j]}
			if ident[j] {
				p.Mult = math.Exp(x[j])
				h := curv[j] + priorH
				p.Sigma = p.Mult * math.Sqrt(2*sigma2/(s*s)/h)
			}
			f.Params = append(f.Params, p)
		}
	}
	return f, nil
}

func (md *acrossModel) optimize(ctx context.Context, x0 []float64) ([]float64, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	x, it, err := minimizeFree(md.free, x0, md.loss, md.grad, 1e-8, 2000)
	if err != nil {
		return nil, 0, fmt.Errorf("calibrate: fit across node counts: %w", err)
	}
	return x, it, nil
}

// dataCurvature is the Gauss-Newton diagonal of the data part of the loss: per parameter, the sum
// over points of weight * 2 * (d log pred / d x_j)^2 / s^2, the derivative by central differences.
func (md *acrossModel) dataCurvature(x []float64) []float64 {
	h := make([]float64, len(x))
	s := md.opt.LossScale
	const step = 1e-5
	xx := append([]float64(nil), x...)
	for i := range md.pts {
		p := &md.pts[i]
		seen := map[int]bool{}
		for _, ci := range p.ci {
			if seen[ci] {
				continue
			}
			seen[ci] = true
			for k := 0; k < paramsAcross; k++ {
				j := paramsAcross*ci + k
				xx[j] = x[j] + step
				up := math.Log(p.predict(xx, md.opt.Sharpness))
				xx[j] = x[j] - step
				dn := math.Log(p.predict(xx, md.opt.Sharpness))
				xx[j] = x[j]
				d := (up - dn) / (2 * step)
				h[j] += p.weight() * 2 * d * d / (s * s)
			}
		}
	}
	return h
}

// Cells prices every cell the fit has parameters for at the node count of topo (priced with the
// prior cfg): lat = rest + base*m_base + intra*m_intra + inter*m_inter, bw = prior bw * m_bw of the
// node count's regime. Cells illegal at that count are left out.
func (f *AcrossFit) Cells(ctx context.Context, topo *capabilities.Topology, cfg planner.Config) (map[Cell][2]float64, error) {
	_, splits, err := splitCells(ctx, topo, cfg)
	if err != nil {
		return nil, err
	}
	out := map[Cell][2]float64{}
	g := bwGroup(topo.NNodes)
	for ci, c := range f.cells {
		s, ok := splits[c]
		if !ok {
			continue
		}
		th := f.x[paramsAcross*ci : paramsAcross*(ci+1)]
		if !f.touches(ci, g) {
			continue // nothing fitted applies here: the prior stands
		}
		out[c] = [2]float64{s.latency(th), s.bw * math.Exp(th[g])}
	}
	return out, nil
}

// touches reports whether any identified parameter of cell ci applies in bandwidth regime g.
func (f *AcrossFit) touches(ci, g int) bool {
	for k := 0; k < paramsAcross; k++ {
		if f.Params[paramsAcross*ci+k].Identified && (k < 3 || k == g) {
			return true
		}
	}
	return false
}

// PredictionError scores the fit and the prior on one shape's points (not necessarily fitted):
// medians of |pred/meas - 1|.
func (f *AcrossFit) PredictionError(ctx context.Context, sh AtNodes) (fitted, prior float64, n int, err error) {
	idx := map[Cell]int{}
	for i, c := range f.cells {
		idx[c] = i
	}
	// Cells the fit has no parameter for are priced at the prior (appended, zero multipliers).
	pts, err := prepareAcross(ctx, []AtNodes{sh}, idx)
	if err != nil {
		return 0, 0, 0, err
	}
	x := append([]float64(nil), f.x...)
	for len(x) < paramsAcross*len(idx) {
		x = append(x, 0)
	}
	zero := make([]float64, len(x))
	var fe, pe []float64
	for i := range pts {
		p := &pts[i]
		fe = append(fe, math.Abs(p.predict(x, math.Inf(1))/p.TimeUS-1))
		pe = append(pe, math.Abs(p.predict(zero, math.Inf(1))/p.TimeUS-1))
	}
	return median(fe), median(pe), len(pts), nil
}

// At is the fit priced at the node count of topo (with the prior cfg) as a FitResult, which the
// overlay writer takes: the cells (Cells), each cell's latency and bandwidth as parameters
// (identified when any of its latency multipliers is, or its regime's bandwidth multiplier), and
// the residuals of every fitted point, at its own node count.
func (f *AcrossFit) At(ctx context.Context, topo *capabilities.Topology, cfg planner.Config) (*FitResult, error) {
	_, splits, err := splitCells(ctx, topo, cfg)
	if err != nil {
		return nil, err
	}
	cells, err := f.Cells(ctx, topo, cfg)
	if err != nil {
		return nil, err
	}
	res := &FitResult{Fitted: cells, Residuals: f.Residuals, MedianRel: f.MedianRel, MaxRel: f.MaxRel, Iter: f.Iter}
	g := bwGroup(topo.NNodes)
	for ci, c := range f.cells {
		v, ok := cells[c]
		if !ok {
			continue
		}
		s := splits[c]
		ps := f.Params[paramsAcross*ci : paramsAcross*(ci+1)]
		parts := [3]float64{s.base, s.intra, s.inter}
		var latID bool
		var latVar float64
		for k := 0; k < 3; k++ {
			if ps[k].Identified {
				latID = true
				d := parts[k] * ps[k].Sigma // d lat / d mult * sigma(mult)
				latVar += d * d
			}
		}
		res.Params = append(res.Params,
			Param{Cell: c, Kind: "lat_us", Prior: s.rest + s.base + s.intra + s.inter, Value: v[0], Sigma: math.Sqrt(latVar), Identified: latID},
			Param{Cell: c, Kind: "bw_gbps", Prior: s.bw, Value: v[1], Sigma: s.bw * ps[g].Sigma, Identified: ps[g].Identified})
	}
	return res, nil
}
