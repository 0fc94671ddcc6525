package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/planner"
)

// F32 prints a float32 exactly (as the float64 it converts to), so that rounding it to NCCL's
// printed precision gives NCCL's digits; non-finite values print as null.
type F32 float32

// MarshalJSON writes v's shortest float64 form, or null when v is not finite.
func (v F32) MarshalJSON() ([]byte, error) { return v.AppendJSON(nil), nil }

// AppendJSON appends what MarshalJSON returns to b.
func (v F32) AppendJSON(b []byte) []byte {
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, float64(v), 'g', -1, 64)
}

// Setting is one NCCL variable of the plan's environment and where it came from.
type Setting struct {
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Cell is one cell of the priced menu at the plan's size.
type Cell struct {
	Algo        string `json:"algo"`
	Proto       string `json:"proto"`
	LatUS       F32    `json:"lat_us"`
	BWGBps      F32    `json:"bw_gbps"`
	Correction  F32    `json:"correction"`
	CorrSource  string `json:"correction_source,omitempty"`
	ModelTimeUS F32    `json:"model_time_us"`
	TimeUS      F32    `json:"time_us"`
	Reason      string `json:"reason"`
	Chosen      bool   `json:"chosen,omitempty"`
	tuned       bool
}

// Query is what was asked: the topology, its shape and the call.
type Query struct {
	Topology string `json:"topology"`
	NNodes   int    `json:"n_nodes"`
	NRanks   int    `json:"n_ranks"`
	Coll     string `json:"coll"`
	Bytes    int64  `json:"bytes"`
	Op       string `json:"op"`
	Dtype    string `json:"dtype"`
	PipeOps  int    `json:"pipe_ops"`
	RegBuff  bool   `json:"reg_buff"`
	// NCCL is the NCCL release whose model priced the plan (planner explain --nccl), "" when
	// none was given (2.30.7).
	NCCL string `json:"nccl,omitempty"`
}

// Pick is what a plan and a decision both begin with: the query, the chosen cell and its time,
// what forced it, and its sizing.
type Pick struct {
	Query      Query  `json:"query"`
	Algo       string `json:"algo"`
	Proto      string `json:"proto"`
	TimeUS     F32    `json:"time_us"`
	Forced     bool   `json:"forced"`
	ForcedBy   string `json:"forced_by,omitempty"`
	Channels   int    `json:"channels"`
	Threads    int    `json:"threads"`
	Warps      int    `json:"warps"`
	ChunkBytes int64  `json:"chunk_bytes"`
	SliceBytes int64  `json:"slice_bytes"`
}

// newPick is the Pick of decision d at nBytes of class cls on setup su, d's model time t and
// what forced it.
func newPick(su *Setup, cls *planner.Class, nBytes int64, d planner.Decision, t float32, f planner.Forcing) Pick {
	return Pick{Query: Query{Topology: su.Source, NNodes: su.Topo.NNodes, NRanks: su.Topo.NRanks,
		Coll: cls.Coll.String(), Bytes: nBytes, Op: cls.Op.String(), Dtype: cls.Dtype.String(),
		PipeOps: cls.PipeOps, RegBuff: cls.RegBuff, NCCL: su.ReleaseName()},
		Algo: d.Algo.String(), Proto: d.Proto.String(), TimeUS: F32(t),
		Forced: f != planner.NotForced, ForcedBy: ForcedBy(f),
		Channels: d.Channels, Threads: d.Threads, Warps: d.Threads / 32, ChunkBytes: d.ChunkBytes, SliceBytes: d.SliceBytes}
}

// Plan is planner explain --json: the pick, its sizing, the tuner's part, and the whole priced
// menu (README.md lists the fields).
type Plan struct {
	Pick
	Env       map[string]Setting `json:"env"`
	Tuner     string             `json:"tuner"`
	TunerNote string             `json:"tuner_note,omitempty"`
	Edits     []string           `json:"edits"`
	Menu      []Cell             `json:"menu"`
	Estimated []string           `json:"estimated_inputs"`
	// Overlay is the node table's fitted overlay as applied here; null when none applied.
	Overlay *Overlay `json:"overlay"`
	// Fabric is the fabric table composed into the node table (--fabric); null when none.
	Fabric *Fabric `json:"fabric"`
	// Assumed is what the topology took for granted: gpus per node and the scale of its graphs.
	Assumed AssumedJSON `json:"assumed"`
	forcing planner.Forcing
	// noOverlay says why a node table applied none ("none", "none (--no-overlay)"); "" otherwise.
	noOverlay string
}

// Fabric names the fabric table that gave the inter-node inputs and whether it applied (it does
// only above one node).
type Fabric struct {
	Name    string `json:"name"`
	File    string `json:"file"`
	Applied bool   `json:"applied"`
	text    string
}

// AssumedJSON says what a topology took for granted: its ranks per node and their source (table,
// flag or topology), and the [scale.N] whose graphs it used, standing in for the node count's own
// when the table has none (scale_stands_in); scale is "" for a topology file.
type AssumedJSON struct {
	GPUsPerNode       int    `json:"gpus_per_node"`
	GPUsPerNodeSource string `json:"gpus_per_node_source"`
	Scale             string `json:"scale"`
	ScaleStandsIn     bool   `json:"scale_stands_in"`
	Graphs            string `json:"graphs"`
	gpnText           string
}

// Overlay says which overlay applied and which of its fitted cells did not, and why.
type Overlay struct {
	File     string    `json:"file"`
	Embedded bool      `json:"embedded"`
	Applied  int       `json:"applied"`
	Skipped  []Skipped `json:"skipped"`
	text     string
}

// Skipped is a fitted cell that did not apply and why.
type Skipped struct {
	Cell   string `json:"cell"`
	Reason string `json:"reason"`
}

func newOverlay(ov *planner.Overlay, embedded bool) *Overlay {
	if ov == nil || ov.File == "" {
		return nil
	}
	out := &Overlay{File: ov.File, Embedded: embedded, Applied: ov.Applied, Skipped: []Skipped{},
		text: DescribeOverlay(ov, embedded)}
	for _, c := range ov.Skipped {
		out.Skipped = append(out.Skipped, Skipped{Cell: c.Name(), Reason: c.Reason})
	}
	return out
}

// NewPlan is the explain report of plan p on the topology of s.
func NewPlan(s *Setup, p *planner.Plan) *Plan {
	out := &Plan{
		Pick:    newPick(s, &p.Class, p.Bytes, p.Decision, p.TimeUS, p.Forced),
		forcing: p.Forced,
		Env:     map[string]Setting{}, Tuner: p.Explain.Tuner, TunerNote: p.Explain.TunerNote,
		Edits: []string{}, Estimated: s.Estimated, Overlay: newOverlay(p.Explain.Overlay, s.Embedded),
		Assumed: AssumedJSON{GPUsPerNode: s.Assumed.GPN, GPUsPerNodeSource: s.Assumed.GPNSource, Scale: s.Assumed.Scale,
			ScaleStandsIn: s.Assumed.StandsIn, Graphs: s.Assumed.Graphs, gpnText: s.Assumed.GPNText},
	}
	if out.Tuner == "" {
		out.Tuner = "none"
	}
	if s.Fabric != nil {
		out.Fabric = &Fabric{Name: s.Fabric.Name, File: s.Fabric.File, Applied: s.Topo.NNodes > 1,
			text: FabricLine(s.Fabric, s.Topo.NNodes)}
	}
	if out.Overlay == nil && s.Node != nil {
		out.noOverlay = "none"
		if s.NoOverlay {
			out.noOverlay = "none (--no-overlay)"
		}
	}
	if out.Estimated == nil {
		out.Estimated = []string{}
	}
	for _, name := range capabilities.EnvVars {
		if v := s.Topo.Env.Var(name); v.IsSet() {
			out.Env[name] = Setting{Value: v.Value, Source: string(v.Source)}
		}
	}
	for _, e := range p.Explain.Edits {
		out.Edits = append(out.Edits, e.String())
	}
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for pr := costmodel.Proto(0); pr < costmodel.NumProtos; pr++ {
			c := p.Explain.Cells[a][pr]
			cj := Cell{Algo: a.String(), Proto: pr.String(), LatUS: F32(c.LatUS), BWGBps: F32(c.BWGBps),
				Correction: F32(c.Correction), CorrSource: string(c.CorrectionSource),
				ModelTimeUS: F32(c.ModelTimeUS), TimeUS: F32(c.TimeUS), Reason: c.Reason,
				Chosen: a == p.Algo && pr == p.Proto, tuned: c.TimeUS != c.ModelTimeUS}
			if cj.TimeUS < 0 && cj.Reason == "" {
				cj.Reason = "disabled by the tuner"
			}
			out.Menu = append(out.Menu, cj)
		}
	}
	return out
}

// WriteJSON writes p as planner explain --json prints it: one object indented by two spaces, then
// a newline.
func (p *Plan) WriteJSON(w io.Writer) error {
	_, err := w.Write(p.AppendJSON(make([]byte, 0, 8192)))
	return err
}

func num(v F32, illegal bool) string {
	if illegal || math.IsNaN(float64(v)) {
		return "-"
	}
	return strconv.FormatFloat(float64(v), 'f', 2, 32)
}

// WriteText prints the plan like a database EXPLAIN: the pick, then every cell.
func (p *Plan) WriteText(w io.Writer) error {
	q := p.Query
	fmt.Fprintf(w, "%s of %d bytes (%s), %s %s, pipe ops %d, on %s (%s, %d ranks)\n",
		q.Coll, q.Bytes, bytesize.Format(q.Bytes), q.Dtype, q.Op, q.PipeOps, q.Topology, Plural(q.NNodes, "node"), q.NRanks)
	if q.NCCL != "" {
		fmt.Fprintf(w, "   priced by NCCL %s's model (docs/releases.md)\n", q.NCCL)
	}
	fmt.Fprintf(w, "-> %s/%s  %s us%s  channels %d  threads %d (%d warps)  chunk %d B  slice %d B\n",
		p.Algo, p.Proto, num(p.TimeUS, false), ForcedNote(p.forcing), p.Channels, p.Threads, p.Warps, p.ChunkBytes, p.SliceBytes)
	fmt.Fprintf(w, "   tuner: %s", p.Tuner)
	if len(p.Edits) > 0 {
		fmt.Fprintf(w, "; edits here: %s", strings.Join(p.Edits, ", "))
	}
	fmt.Fprintln(w)
	if p.TunerNote != "" {
		fmt.Fprintf(w, "   note: %s\n", p.TunerNote)
	}
	switch {
	case p.Overlay != nil:
		fmt.Fprintf(w, "   overlay: %s\n", p.Overlay.text)
	case p.noOverlay != "":
		fmt.Fprintf(w, "   overlay: %s\n", p.noOverlay)
	}
	if p.Fabric != nil {
		fmt.Fprintf(w, "   fabric: %s\n", p.Fabric.text)
	}
	if p.Assumed.gpnText != "" {
		fmt.Fprintf(w, "   gpus per node: %s\n", p.Assumed.gpnText)
	}
	if p.Assumed.Graphs != "" {
		fmt.Fprintf(w, "   graphs: %s\n", p.Assumed.Graphs)
	}
	for _, name := range capabilities.EnvVars {
		if s, ok := p.Env[name]; ok {
			fmt.Fprintf(w, "   %s=%q (from %s)\n", name, s.Value, s.Source)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\talgo\tproto\tlat_us\tbw_gbps\tcorr\tmodel_us\ttime_us\t\t")
	for _, c := range p.Menu {
		mark := ""
		if c.Chosen {
			mark = "*"
		}
		illegal := c.Reason != "" && c.ModelTimeUS < 0
		note := c.Reason
		if c.tuned && c.Reason == "" {
			note = "edited by the tuner"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\t%s\n", mark, c.Algo, c.Proto,
			num(c.LatUS, false), num(c.BWGBps, illegal), num(c.Correction, illegal),
			num(c.ModelTimeUS, illegal), num(c.TimeUS, c.TimeUS < 0), note)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(p.Estimated) > 0 {
		fmt.Fprintf(w, "\nestimated inputs (no measured or published source): %s\n", strings.Join(p.Estimated, ", "))
	}
	return nil
}

// ForcedBy is the JSON forced_by of a plan: "env", "tuner", or "" when it won on cost.
func ForcedBy(f planner.Forcing) string {
	switch f {
	case planner.ForcedByEnv:
		return "env"
	case planner.ForcedByTuner:
		return "tuner"
	}
	return ""
}

// ForcedNote is the text mark of a forced pick, after a space: " (forced by the tuner)", or ""
// when it won on cost.
func ForcedNote(f planner.Forcing) string {
	if f == planner.NotForced {
		return ""
	}
	return " (forced by " + f.String() + ")"
}
