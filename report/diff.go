package report

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/tables"
)

// Side is one side of a diff: a node table (Spec: Node, Table or Loaded, with its fabric, ranks
// per node, filters, overlay choice and NCCL release, Spec.Release, whose model prices it; Nodes
// is set per node count) and its tuner (nil: none). Label names it in the report.
type Side struct {
	Spec  Spec
	Tuner *plugin.Client
	Label string
}

// DiffOptions is what a diff compares: each collective of Colls in Class's dtype, op and pipe
// ops, over the sizes [Min, Max], at each node count of NodeCounts.
type DiffOptions struct {
	Colls      []capabilities.Coll
	Class      planner.Class
	Min, Max   int64
	NodeCounts []int
}

// Diff is where two sides' picks differ: per collective and node count, the size bands where
// they do, with both picks and the predicted time ratio.
type Diff struct {
	A string `json:"a"`
	B string `json:"b"`
	// NCCLA and NCCLB are the NCCL releases whose models price each side (planner diff --nccl
	// and --to); "" when the side's Spec gives none (2.30.7).
	NCCLA    string    `json:"nccl_a,omitempty"`
	NCCLB    string    `json:"nccl_b,omitempty"`
	Dtype    string    `json:"dtype"`
	Op       string    `json:"op"`
	PipeOps  int       `json:"pipe_ops"`
	Min      int64     `json:"min"`
	Max      int64     `json:"max"`
	Compared int       `json:"compared"` // (collective, node count) pairs compared
	Changed  int       `json:"changed"`  // of which the pick changed somewhere
	Rows     []DiffRow `json:"changes"`
}

// DiffRow is one collective at one node count where the pick changed (or where a side could not
// plan: Error). PolicyA and PolicyB name what made each side's picks: the tuner's name, or
// "builtin" (no tuner, or it failed for this class).
type DiffRow struct {
	Coll    string     `json:"coll"`
	Nodes   int        `json:"nodes"`
	NRanksA int        `json:"n_ranks_a"`
	NRanksB int        `json:"n_ranks_b"`
	PolicyA string     `json:"policy_a"`
	PolicyB string     `json:"policy_b"`
	Bands   []DiffBand `json:"bands"`
	Error   string     `json:"error,omitempty"`
}

// DiffBand is a run of sizes [Lo, Hi] (both included) where A picks A and B picks B. RatioLo and
// RatioHi are B's predicted time of its pick over A's of its pick, at Lo and at Hi (each side's
// own model): below 1, B expects to be faster.
type DiffBand struct {
	Lo      int64  `json:"lo"`
	Hi      int64  `json:"hi"`
	A       string `json:"a"`
	B       string `json:"b"`
	RatioLo F32    `json:"time_ratio_lo"`
	RatioHi F32    `json:"time_ratio_hi"`
}

// DefaultNodeCounts is 1, 2, 4 ... 4096 and the node counts of the given tables' scales.
func DefaultNodeCounts(ns ...*tables.Node) []int {
	var out []int
	for n := 1; n <= 4096; n *= 2 {
		out = append(out, n)
	}
	for _, t := range ns {
		for k := range t.Scale {
			if n, err := strconv.Atoi(k); err == nil && n >= 1 {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// sideAt is one side built at one node count.
type sideAt struct {
	setup *Setup
	pl    *planner.Planner
}

func (sd *Side) at(ctx context.Context, nodes int) (*sideAt, error) {
	sp := sd.Spec
	sp.Nodes, sp.NodesGiven = nodes, true
	s, err := Build(sp, NoEnv)
	if err != nil {
		return nil, err
	}
	pl, err := s.Planner(ctx, sd.Tuner)
	if err != nil {
		return nil, err
	}
	return &sideAt{setup: s, pl: pl}, nil
}

// compiled is one side's class: its decision table, menu and policy.
type compiled struct {
	dt     *planner.DecisionTable
	menu   *planner.Menu
	policy string
}

func (sa *sideAt) compile(ctx context.Context, cls planner.Class) (*compiled, error) {
	pr, err := sa.pl.Prepare(ctx, cls)
	if err != nil {
		return nil, err
	}
	dt, err := pr.Compile()
	if err != nil {
		return nil, err
	}
	return &compiled{dt: dt, menu: pr.Menu(), policy: PolicyOf(pr)}, nil
}

// NewDiff compares a and b: for every collective and node count, the bands of [Min, Max] where
// their picks differ. Building a side that is bad input (its table, a filter) is an error; a
// class a side cannot plan at a node count is a row with Error.
func NewDiff(ctx context.Context, a, b Side, opt DiffOptions) (*Diff, error) {
	d := &Diff{A: a.Label, B: b.Label, Dtype: opt.Class.Dtype.String(), Op: opt.Class.Op.String(), PipeOps: opt.Class.PipeOps,
		Min: opt.Min, Max: opt.Max, Rows: []DiffRow{}, NCCLA: releaseName(a.Spec.Release), NCCLB: releaseName(b.Spec.Release)}
	for _, n := range opt.NodeCounts {
		sa, err := a.at(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("a: %w", err)
		}
		sb, err := b.at(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("b: %w", err)
		}
		for _, coll := range opt.Colls {
			cls := opt.Class
			cls.Coll = coll
			d.Compared++
			row := DiffRow{Coll: coll.String(), Nodes: n, NRanksA: sa.setup.Topo.NRanks, NRanksB: sb.setup.Topo.NRanks, Bands: []DiffBand{}}
			ca, err := sa.compile(ctx, cls)
			if err == nil {
				row.PolicyA = ca.policy
			}
			cb, errB := sb.compile(ctx, cls)
			if errB == nil {
				row.PolicyB = cb.policy
			}
			switch {
			case err != nil:
				row.Error = "a: " + err.Error()
			case errB != nil:
				row.Error = "b: " + errB.Error()
			default:
				row.Bands = diffBands(ca, cb, opt.Min, opt.Max)
			}
			if row.Error != "" || len(row.Bands) > 0 {
				d.Changed++
				d.Rows = append(d.Rows, row)
			}
		}
	}
	return d, nil
}

// diffBands walks the union of both tables' boundaries in [lo, hi]: within a piece both picks
// hold, so one lookup per piece decides.
func diffBands(a, b *compiled, lo, hi int64) []DiffBand {
	cuts := []int64{lo}
	for _, dt := range []*planner.DecisionTable{a.dt, b.dt} {
		for _, x := range dt.Boundaries() {
			if x > lo && x <= hi {
				cuts = append(cuts, x)
			}
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var out []DiffBand
	for i, x := range cuts {
		end := hi
		if i+1 < len(cuts) {
			end = cuts[i+1] - 1
		}
		da, db := a.dt.Lookup(x), b.dt.Lookup(x)
		ca, cb := cellName(da.Algo, da.Proto), cellName(db.Algo, db.Proto)
		if ca == cb {
			continue
		}
		if k := len(out) - 1; k >= 0 && out[k].Hi == x-1 && out[k].A == ca && out[k].B == cb {
			out[k].Hi = end
			continue
		}
		out = append(out, DiffBand{Lo: x, Hi: end, A: ca, B: cb})
	}
	for i := range out {
		bd := &out[i]
		bd.RatioLo = ratio(a, b, bd.Lo)
		bd.RatioHi = ratio(a, b, bd.Hi)
	}
	return out
}

// releaseName is r as the diff names it: "" for the zero value.
func releaseName(r costmodel.Release) string {
	if r.IsZero() {
		return ""
	}
	return r.String()
}

func cellName(a costmodel.Algo, p costmodel.Proto) string { return a.String() + "/" + p.String() }

// ratio is B's predicted time of its pick at n over A's of its pick.
func ratio(a, b *compiled, n int64) F32 {
	da, db := a.dt.Lookup(n), b.dt.Lookup(n)
	ta, tb := a.menu.Time(da.Algo, da.Proto, n), b.menu.Time(db.Algo, db.Proto, n)
	if ta <= 0 {
		return F32(math.NaN()) // no ratio: null in JSON
	}
	return F32(tb / ta)
}
