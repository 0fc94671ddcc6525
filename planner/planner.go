// Package planner picks a plan for a collective the way NCCL does: price every (algorithm, protocol)
// cell with the cost model, apply corrections, let a Tuner edit the menu, take the argmin with
// NCCL's tie order, then size channels, threads and chunks. Every Plan carries its explanation (the
// whole priced menu), and DecisionTable compiles a query class into sorted size boundaries for the
// hot path. The planner only prices, asks the tuner and takes the argmin: no I/O.
package planner

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
)

// Class is a query class: everything a decision depends on except the size (the topology is the
// planner's).
type Class struct {
	Coll    costmodel.Coll
	Op      capabilities.Op
	Dtype   capabilities.Dtype
	PipeOps int  // numPipeOps, >= 1
	RegBuff bool // send and receive buffers registered
}

func (c Class) validate() error {
	switch {
	case c.Coll < 0 || c.Coll >= costmodel.NumColls:
		return fmt.Errorf("planner: unknown collective %d", int(c.Coll))
	case c.Op < 0 || c.Op >= capabilities.NumOps:
		return fmt.Errorf("planner: unknown op %d", int(c.Op))
	case c.Dtype < 0 || c.Dtype >= capabilities.NumDtypes:
		return fmt.Errorf("planner: unknown dtype %d", int(c.Dtype))
	case c.PipeOps < 1:
		return fmt.Errorf("planner: pipe ops must be >= 1, got %d", c.PipeOps)
	}
	return nil
}

// Config holds a planner's optional parts. Zero values take NCCL's defaults.
type Config struct {
	// Release is the NCCL release whose model prices the menu (costmodel.Rules); the zero value is
	// costmodel.Latest (2.30.7).
	Release   costmodel.Release
	Constants *costmodel.Constants // nil: Release.Constants() (costmodel.DefaultConstants() for 2.30.7)
	// Factors nil: correction.Default(topology). Either way, a release before 2.29 drops NCCL's
	// NVLSTree rows (correction.Factors.ForRelease).
	Factors *correction.Factors
	Tuner   Tuner   // nil: no edits
	Buffers Buffers // zero: NCCL's buffer sizes
	// Cells replace cells' latency and bandwidth after the model is built (a fitted node table's
	// [[fit.cell]]). A cell the model left unusable for this topology and env (a filter or env pin
	// such as NCCL_ALGO, the communicator's shape, one rank) is not applied: it stays unusable and
	// Planner.Overlay lists it with the model's reason, which every plan's explanation carries.
	Cells []CellOverride
	// Overlay names where Cells (and possibly Constants and Factors) come from, the fitted overlay
	// file, for the explanations; "" for none.
	Overlay string
}

// Overlay is what became of a planner's fitted cells (Config.Cells): the file they came from, how
// many replaced the model's cells, and the ones the model left unusable here.
type Overlay struct {
	File    string        // Config.Overlay
	Applied int           // cells whose latency and bandwidth replaced the model's
	Skipped []SkippedCell // cells not applied, in Config.Cells order
}

// SkippedCell is a fitted cell the planner did not apply, because the model left it unusable for
// this topology and env; Reason is the model's (costmodel.Table.Unusable).
type SkippedCell struct {
	Coll   costmodel.Coll
	Algo   costmodel.Algo
	Proto  costmodel.Proto
	Reason string
}

// Name is the cell as the explanations spell it: "AllReduce/TREE/LL".
func (c SkippedCell) Name() string { return fmt.Sprintf("%s/%s/%s", c.Coll, c.Algo, c.Proto) }

// Note says which cells were not applied and why, grouped by reason in order of first appearance:
// "2 cells not applied: AllReduce/TREE/LL, AllReduce/TREE/SIMPLE (disabled by NCCL_ALGO="Ring"
// (flag))". It is "" when every cell applied (or o is nil).
func (o *Overlay) Note() string {
	if o == nil || len(o.Skipped) == 0 {
		return ""
	}
	var reasons []string
	cells := map[string][]string{}
	for _, c := range o.Skipped {
		if _, ok := cells[c.Reason]; !ok {
			reasons = append(reasons, c.Reason)
		}
		cells[c.Reason] = append(cells[c.Reason], c.Name())
	}
	groups := make([]string, len(reasons))
	for i, r := range reasons {
		groups[i] = fmt.Sprintf("%s (%s)", strings.Join(cells[r], ", "), r)
	}
	return fmt.Sprintf("%s not applied: %s", plural(len(o.Skipped), "cell"), strings.Join(groups, "; "))
}

// clone copies o, so that plans and tables never share its slice with the planner.
func (o *Overlay) clone() *Overlay {
	if o == nil {
		return nil
	}
	c := *o
	c.Skipped = slices.Clone(o.Skipped)
	return &c
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// CellOverride is a fitted latency and bandwidth for one (collective, algorithm, protocol) cell.
type CellOverride struct {
	Coll   costmodel.Coll
	Algo   costmodel.Algo
	Proto  costmodel.Proto
	LatUS  float32 // us
	BWGBps float32 // algorithm bandwidth, GB/s
	// Skip, when not "", says why the cell does not belong here (it was fitted at another shape):
	// it is not applied, and Planner.Overlay lists it with this reason where the model could use
	// the cell, with the model's reason where it could not.
	Skip string
}

// Planner prices and picks plans for one topology. It is safe for concurrent use.
type Planner struct {
	topo    capabilities.Topology
	table   *costmodel.Table
	factors *correction.Factors
	tuner   Tuner
	buffers Buffers
	fitted  [costmodel.NumColls][costmodel.NumAlgos][costmodel.NumProtos]bool // cells priced by cfg.Cells
	overlay *Overlay                                                          // nil: no cfg.Cells and no cfg.Overlay
}

// New builds the cost model for t and returns a planner over it.
func New(t *capabilities.Topology, cfg Config) (*Planner, error) {
	k := cfg.Constants
	if k == nil {
		d := cfg.Release.Constants()
		k = &d
	}
	table, err := costmodel.BuildFor(t, k, cfg.Release)
	if err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	ov, fitted, err := applyCells(table, cfg)
	if err != nil {
		return nil, err
	}
	f := cfg.Factors
	if f == nil {
		f = correction.Default(t)
	}
	f = f.ForRelease(cfg.Release)
	b := cfg.Buffers.WithDefaults()
	if err := b.validate(); err != nil {
		return nil, fmt.Errorf("planner: %w", err)
	}
	return &Planner{topo: *t, table: table, factors: f, tuner: cfg.Tuner, buffers: b, fitted: fitted, overlay: ov}, nil
}

// applyCells replaces the table's cells with cfg.Cells where the model left them usable and lists
// the others as skipped, with the model's reason: a fitted cell never revives an illegal one, and
// never breaks a query that makes it illegal. Only cells out of range or values out of range are
// errors.
func applyCells(table *costmodel.Table, cfg Config) (*Overlay, [costmodel.NumColls][costmodel.NumAlgos][costmodel.NumProtos]bool, error) {
	var fitted [costmodel.NumColls][costmodel.NumAlgos][costmodel.NumProtos]bool
	if len(cfg.Cells) == 0 && cfg.Overlay == "" {
		return nil, fitted, nil
	}
	ov := &Overlay{File: cfg.Overlay}
	for _, o := range cfg.Cells {
		if o.Coll < 0 || o.Coll >= costmodel.NumColls || o.Algo < 0 || o.Algo >= costmodel.NumAlgos || o.Proto < 0 || o.Proto >= costmodel.NumProtos {
			return nil, fitted, fmt.Errorf("planner: fitted cell (%d, %d, %d): out of range", int(o.Coll), int(o.Algo), int(o.Proto))
		}
		why := table.Unusable(o.Coll, o.Algo, o.Proto) // the model's reason first: no shape revives a cell
		if why == "" {
			why = o.Skip
		}
		if why != "" {
			ov.Skipped = append(ov.Skipped, SkippedCell{Coll: o.Coll, Algo: o.Algo, Proto: o.Proto, Reason: why})
			continue
		}
		if err := table.Override(o.Coll, o.Algo, o.Proto, o.LatUS, o.BWGBps); err != nil {
			return nil, fitted, fmt.Errorf("planner: %w", err)
		}
		fitted[o.Coll][o.Algo][o.Proto] = true
		ov.Applied++
	}
	return ov, fitted, nil
}

// Overlay says what became of the fitted cells (Config.Cells): applied, or skipped and why; nil
// when the planner has none and Config.Overlay named none.
func (pl *Planner) Overlay() *Overlay { return pl.overlay.clone() }

// Topology returns the planner's topology.
func (pl *Planner) Topology() *capabilities.Topology { return &pl.topo }

// Table returns the cost model the planner prices with.
func (pl *Planner) Table() *costmodel.Table { return pl.table }

// MenuCell is one priced cell of a query class, before any tuner edit.
type MenuCell struct {
	LatUS  float32 // model latency, us
	BWGBps float32 // model algorithm bandwidth, GB/s, before correction
	Reason string  // why the cell is not legal for this class; "" when it is
	// CorrectionSource says where the cell's bandwidth factors come from ("" for none).
	CorrectionSource correction.Source
	// Fitted: LatUS and BWGBps come from Config.Cells (a fitted overlay), not from the model.
	Fitted bool
}

// Menu is the priced menu of one query class: every cell's model latency and bandwidth with the
// reason it is not legal, and the corrections that scale its bandwidth per size.
type Menu struct {
	Class Class
	Cells [costmodel.NumAlgos][costmodel.NumProtos]MenuCell

	table   *costmodel.Table
	factors *correction.Factors
	// envCell is the one cell NCCL_ALGO and NCCL_PROTO leave, when envPinned.
	envCell   Cell
	envPinned bool
}

// Menu prices a query class.
func (pl *Planner) Menu(cls Class) (*Menu, error) {
	if err := cls.validate(); err != nil {
		return nil, err
	}
	m := &Menu{Class: cls, table: pl.table, factors: pl.factors}
	m.envCell, m.envPinned = envPin(&pl.topo.Env, cls.Coll)
	rows := capabilities.Support(&pl.topo, cls.Coll, cls.Op, cls.Dtype)
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			c := &m.Cells[a][p]
			c.LatUS, c.BWGBps = pl.table.Lat[cls.Coll][a][p], pl.table.BW[cls.Coll][a][p]
			c.CorrectionSource = pl.factors.Source(cls.Coll, a, p)
			c.Fitted = pl.fitted[cls.Coll][a][p]
			switch {
			case pl.topo.NRanks == 1:
				if a != costmodel.Ring || p != costmodel.Simple {
					c.Reason = "single rank: NCCL only prices Ring/Simple (a local copy)"
				}
			case rows[a] != "":
				c.Reason = rows[a]
			default:
				c.Reason = pl.table.Reason[cls.Coll][a][p]
			}
		}
	}
	return m, nil
}

// Factor is the bandwidth correction of a cell at nBytes.
func (m *Menu) Factor(a costmodel.Algo, p costmodel.Proto, nBytes int64) float32 {
	return m.factors.Factor(m.Class.Coll, a, p, nBytes)
}

// Time is the cost NCCL's argmin sees for a cell before the tuner: -1 (or -1024 under the fp8
// penalty) when the cell is not legal, 0 for the single-rank copy, else costmodel's Time with the
// correction, times 1024 for a deep fp8 ring.
func (m *Menu) Time(a costmodel.Algo, p costmodel.Proto, nBytes int64) float32 {
	t := float32(-1)
	switch {
	case m.table.NRanks == 1:
		if a == costmodel.Ring && p == costmodel.Simple {
			t = 0
		}
	case m.Cells[a][p].Reason == "":
		t = m.table.Time(m.Class.Coll, a, p, nBytes, m.Class.PipeOps, m.Factor(a, p, nBytes))
	}
	return costmodel.FP8Penalty(t, a, m.Class.Dtype, m.table.NRanks)
}

// Decision is what the hot path needs from a plan.
type Decision struct {
	Algo       costmodel.Algo
	Proto      costmodel.Proto
	Channels   int // nMaxChannels
	Threads    int // threads per channel (nWarps*32)
	ChunkBytes int64
	SliceBytes int64
}

// Plan is a decision for one size with its predicted time and explanation.
type Plan struct {
	Class Class
	Bytes int64
	Decision
	// TimeUS is the model's predicted time of the chosen cell (its Explain cell's ModelTimeUS:
	// the correction applied, no tuner edit), also when the cell was forced.
	TimeUS float32
	// CostUS is the cost the argmin saw for the chosen cell, after the tuner's edits (0 when a
	// tuner forced it).
	CostUS float32
	// Forced says what pinned the chosen cell, NotForced when it won on cost.
	Forced  Forcing
	Explain Explain
}

// Forcing says what pinned a plan's cell when the argmin did not choose it on cost.
type Forcing int

// What can force a plan.
const (
	NotForced     Forcing = iota
	ForcedByEnv           // NCCL_ALGO and NCCL_PROTO together leave this one cell of the collective
	ForcedByTuner         // the tuner's Force edit, with no later cost edit on the cell
)

var forcingNames = [...]string{"", "NCCL_ALGO/NCCL_PROTO", "the tuner"}

// String names what forced the plan ("" for NotForced), for "forced by ...".
func (f Forcing) String() string {
	if f < 0 || int(f) >= len(forcingNames) {
		return fmt.Sprintf("Forcing(%d)", int(f))
	}
	return forcingNames[f]
}

// Explain is the whole priced menu behind a plan and what the tuner did to it.
type Explain struct {
	Cells [costmodel.NumAlgos][costmodel.NumProtos]CellExplain
	// Tuner names the policy consulted ("" for none); TunerNote says when it misbehaved and the
	// built-in policy was used instead.
	Tuner     string
	TunerNote string
	// Edits are the tuner's edits at this size, in the order applied.
	Edits []Edit
	// Overlay is what became of the fitted cells the planner was given (Planner.Overlay); nil for
	// none.
	Overlay *Overlay
}

// CellExplain is one cell at the plan's size.
type CellExplain struct {
	MenuCell
	Correction  float32 // bandwidth factor at this size
	ModelTimeUS float32 // cost before the tuner (-1 when not legal)
	TimeUS      float32 // cost the argmin saw, after the tuner
}

// policy is a tuner's validated answer for a class, or the fallback.
type policy struct {
	ivs  []Interval
	name string
	note string
	err  error // why the tuner's answer was not used (note says it in a sentence)
}

// edits returns the edits of the interval holding n (nil when none does).
func (po *policy) edits(n int64) []Edit {
	for i := range po.ivs {
		if n >= po.ivs[i].Lo && n < po.ivs[i].Hi {
			return po.ivs[i].Edits
		}
	}
	return nil
}

// policyFor asks the tuner for the class; on error or an invalid answer it falls back to no edits
// and records why.
func (pl *Planner) policyFor(ctx context.Context, m *Menu) *policy {
	if pl.tuner == nil {
		return &policy{}
	}
	po := &policy{name: pl.tuner.Name()}
	ivs, err := pl.tuner.Tune(ctx, &Request{Topology: &pl.topo, Class: m.Class, Menu: m})
	if err == nil {
		err = validate(ivs, m)
	}
	if err != nil {
		po.note = fmt.Sprintf("tuner %s failed, using the built-in policy: %v", po.name, err)
		po.err = err
		return po
	}
	po.ivs = ivs
	return po
}

// costs fills the cost each cell presents to the argmin at n: the menu's time, then the edits.
// Edits never revive a cell below 0.
func costs(m *Menu, n int64, edits []Edit, out *[costmodel.NumAlgos][costmodel.NumProtos]float32) {
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			out[a][p] = m.Time(a, p, n)
		}
	}
	for _, e := range edits {
		t := &out[e.Cell.Algo][e.Cell.Proto]
		switch e.Kind {
		case Disable:
			*t = -1
		case Force:
			if *t >= 0 {
				*t = 0
			}
		case AddCost:
			if *t >= 0 {
				*t = float32(math.Max(0, float64(*t)+e.Value))
			}
		case ScaleCost:
			if *t >= 0 {
				*t = float32(float64(*t) * e.Value)
			}
		}
	}
}

// argmin is NCCL's loop: algorithms outer, protocols inner, accept t >= 0 && t < best from
// best = FLT_MAX, so ties go to the lower (algo, proto). ok is false when nothing is accepted.
func argmin(t *[costmodel.NumAlgos][costmodel.NumProtos]float32) (a costmodel.Algo, p costmodel.Proto, ok bool) {
	best := float32(math.MaxFloat32)
	for ai := costmodel.Algo(0); ai < costmodel.NumAlgos; ai++ {
		for pi := costmodel.Proto(0); pi < costmodel.NumProtos; pi++ {
			if v := t[ai][pi]; v >= 0 && v < best {
				best, a, p, ok = v, ai, pi, true
			}
		}
	}
	return a, p, ok
}

// decide is the whole per-size decision without the explanation.
func (pl *Planner) decide(m *Menu, n int64, edits []Edit) (Decision, float32, error) {
	var t [costmodel.NumAlgos][costmodel.NumProtos]float32
	costs(m, n, edits, &t)
	a, p, ok := argmin(&t)
	if !ok {
		return Decision{}, 0, pl.noAlgorithm(m.Class)
	}
	d := pl.size(m.Class, a, p, n, edits)
	return d, t[a][p], nil
}

// noAlgorithm is NCCL's warning when the argmin accepts nothing, worded as NCCL words it (no
// package prefix: commands wrap it where it happened, "stdin:3: no algorithm/protocol ...").
func (pl *Planner) noAlgorithm(cls Class) error {
	msg := fmt.Sprintf("no algorithm/protocol available for function %s with datatype %s", cls.Coll, cls.Dtype)
	if s := pl.topo.Env.Algo; s.IsSet() {
		msg += fmt.Sprintf(". NCCL_ALGO was set to %s (%s)", s.Value, s.Source)
	}
	if s := pl.topo.Env.Proto; s.IsSet() {
		msg += fmt.Sprintf(". NCCL_PROTO was set to %s (%s)", s.Value, s.Source)
	}
	return fmt.Errorf("%s", msg)
}

// Prepared is a query class priced once and answered by the tuner once; it then plans any size
// without another tuner call.
type Prepared struct {
	pl   *Planner
	menu *Menu
	po   *policy
}

// Prepare prices a class and asks the tuner for it (one call for every size).
func (pl *Planner) Prepare(ctx context.Context, cls Class) (*Prepared, error) {
	m, err := pl.Menu(cls)
	if err != nil {
		return nil, err
	}
	return &Prepared{pl: pl, menu: m, po: pl.policyFor(ctx, m)}, nil
}

// Menu returns the class's priced menu.
func (pr *Prepared) Menu() *Menu { return pr.menu }

// Tuner names the policy consulted ("" for none) and says when it misbehaved.
func (pr *Prepared) Tuner() (name, note string) { return pr.po.name, pr.po.note }

// TunerErr is why the tuner's answer for the class was not used (nil when it was, or when there
// is no tuner): the failure the note describes. Commands that must not fall back (offline queries)
// report it.
func (pr *Prepared) TunerErr() error { return pr.po.err }

// Intervals returns a copy of the tuner's validated answer for the class: its size intervals with
// their edits (none without a tuner, or when the built-in policy replaced a failed one).
func (pr *Prepared) Intervals() []Interval {
	out := make([]Interval, len(pr.po.ivs))
	for i, iv := range pr.po.ivs {
		out[i] = Interval{Lo: iv.Lo, Hi: iv.Hi, Edits: slices.Clone(iv.Edits)}
	}
	return out
}

// Explain plans one size of a class and explains it: the one-interval case of the tuner's answer.
func (pl *Planner) Explain(ctx context.Context, cls Class, nBytes int64) (*Plan, error) {
	pr, err := pl.Prepare(ctx, cls)
	if err != nil {
		return nil, err
	}
	return pr.Explain(nBytes)
}

// Pick is what the hot path needs of a plan: the decision, the model's time of the chosen cell
// and what forced it (Plan's Decision, TimeUS and Forced).
type Pick struct {
	Decision
	TimeUS float32
	Forced Forcing
}

// Pick plans one size without the explanation: the Decision, TimeUS and Forced of Explain's plan,
// allocating nothing. It is the hot path of a service answering many sizes of a prepared class.
func (pr *Prepared) Pick(nBytes int64) (Pick, error) {
	if nBytes < 0 {
		return Pick{}, fmt.Errorf("planner: negative size %d", nBytes)
	}
	m := pr.menu
	edits := pr.po.edits(nBytes)
	d, _, err := pr.pl.decide(m, nBytes, edits)
	if err != nil {
		return Pick{}, err
	}
	return Pick{Decision: d, TimeUS: m.Time(d.Algo, d.Proto, nBytes), Forced: m.forcing(d.Algo, d.Proto, edits)}, nil
}

// Explain plans one size and explains it.
func (pr *Prepared) Explain(nBytes int64) (*Plan, error) {
	if nBytes < 0 {
		return nil, fmt.Errorf("planner: negative size %d", nBytes)
	}
	m := pr.menu
	edits := pr.po.edits(nBytes)
	d, t, err := pr.pl.decide(m, nBytes, edits)
	if err != nil {
		return nil, err
	}
	plan := &Plan{Class: m.Class, Bytes: nBytes, Decision: d, TimeUS: m.Time(d.Algo, d.Proto, nBytes), CostUS: t,
		Forced: m.forcing(d.Algo, d.Proto, edits), Explain: Explain{Tuner: pr.po.name, TunerNote: pr.po.note, Edits: edits, Overlay: pr.pl.Overlay()}}
	var after [costmodel.NumAlgos][costmodel.NumProtos]float32
	costs(m, nBytes, edits, &after)
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			plan.Explain.Cells[a][p] = CellExplain{MenuCell: m.Cells[a][p], Correction: m.Factor(a, p, nBytes),
				ModelTimeUS: m.Time(a, p, nBytes), TimeUS: after[a][p]}
		}
	}
	return plan, nil
}

// forcing says what pinned the chosen cell (a, p): the env when NCCL_ALGO and NCCL_PROTO leave it
// alone in the collective's row, else the tuner when its last cost edit of the cell is a Force.
func (m *Menu) forcing(a costmodel.Algo, p costmodel.Proto, edits []Edit) Forcing {
	if m.envPinned && m.envCell == (Cell{a, p}) {
		return ForcedByEnv
	}
	forced := false
	for _, e := range edits {
		if e.Cell != (Cell{a, p}) {
			continue
		}
		switch e.Kind {
		case Force:
			forced = true
		case Disable, AddCost, ScaleCost:
			forced = false
		}
	}
	if forced {
		return ForcedByTuner
	}
	return NotForced
}

// envPin finds the one cell NCCL_ALGO and NCCL_PROTO leave for coll, when they leave one. The
// values parsed when the model was built, so a parse error only means no pin.
func envPin(env *capabilities.Env, coll costmodel.Coll) (Cell, bool) {
	if !env.Algo.IsSet() && !env.Proto.IsSet() {
		return Cell{}, false
	}
	algoM, err := capabilities.ParseAlgoEnv(env.Algo.Value)
	if err != nil {
		return Cell{}, false
	}
	protoM, err := capabilities.ParseProtoEnv(env.Proto.Value)
	if err != nil {
		return Cell{}, false
	}
	var pin Cell
	n := 0
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			if algoM[coll][a] != 0 && protoM[coll][p] != 0 {
				pin, n = Cell{a, p}, n+1
			}
		}
	}
	return pin, n == 1
}

// Table returns the cost model the menu was priced with.
func (m *Menu) Table() *costmodel.Table { return m.table }
