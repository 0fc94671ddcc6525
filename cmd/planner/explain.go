package main

import (
	"context"
	"encoding/json"
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

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("explain", stderr, true)
	asJSON := c.fs.Bool("json", false, "print one JSON object")
	s, cls, pl, help, err := c.parse(args)
	if help || err != nil {
		return err
	}
	n, err := parseBytes("--bytes", c.cf.bytes)
	if err != nil {
		return err
	}
	pr, err := prepare(ctx, pl, cls)
	if err != nil {
		return err
	}
	plan, err := pr.Explain(n)
	if err != nil {
		return usageError{err}
	}
	out := newPlanJSON(s, plan)
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return writeExplain(stdout, out)
}

// f32 prints a float32 exactly (as the float64 it converts to), so that rounding it to NCCL's
// printed precision gives NCCL's digits; non-finite values print as null.
type f32 float32

func (v f32) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, float64(v), 'g', -1, 64), nil
}

type settingJSON struct {
	Value  string `json:"value"`
	Source string `json:"source"`
}

type cellJSON struct {
	Algo        string `json:"algo"`
	Proto       string `json:"proto"`
	LatUS       f32    `json:"lat_us"`
	BWGBps      f32    `json:"bw_gbps"`
	Correction  f32    `json:"correction"`
	CorrSource  string `json:"correction_source,omitempty"`
	ModelTimeUS f32    `json:"model_time_us"`
	TimeUS      f32    `json:"time_us"`
	Reason      string `json:"reason"`
	Chosen      bool   `json:"chosen,omitempty"`
	tuned       bool
}

type queryJSON struct {
	Topology string `json:"topology"`
	NNodes   int    `json:"n_nodes"`
	NRanks   int    `json:"n_ranks"`
	Coll     string `json:"coll"`
	Bytes    int64  `json:"bytes"`
	Op       string `json:"op"`
	Dtype    string `json:"dtype"`
	PipeOps  int    `json:"pipe_ops"`
	RegBuff  bool   `json:"reg_buff"`
}

type planJSON struct {
	Query      queryJSON              `json:"query"`
	Algo       string                 `json:"algo"`
	Proto      string                 `json:"proto"`
	TimeUS     f32                    `json:"time_us"`
	Forced     bool                   `json:"forced"`
	ForcedBy   string                 `json:"forced_by,omitempty"`
	Channels   int                    `json:"channels"`
	Threads    int                    `json:"threads"`
	Warps      int                    `json:"warps"`
	ChunkBytes int64                  `json:"chunk_bytes"`
	SliceBytes int64                  `json:"slice_bytes"`
	Env        map[string]settingJSON `json:"env"`
	Tuner      string                 `json:"tuner"`
	TunerNote  string                 `json:"tuner_note,omitempty"`
	Edits      []string               `json:"edits"`
	Menu       []cellJSON             `json:"menu"`
	Estimated  []string               `json:"estimated_inputs"`
	// Overlay is the node table's fitted overlay as applied here; null when none applied.
	Overlay *overlayJSON `json:"overlay"`
	// Fabric is the fabric table composed into the node table (--fabric); null when none.
	Fabric *fabricJSON `json:"fabric"`
	// Assumed is what the topology took for granted: gpus per node and the scale of its graphs.
	Assumed assumedJSON `json:"assumed"`
	forcing planner.Forcing
	// noOverlay says why a node table applied none ("none", "none (--no-overlay)"); "" otherwise.
	noOverlay string
}

// fabricJSON names the fabric table that gave the inter-node inputs and whether it applied (it
// does only above one node).
type fabricJSON struct {
	Name    string `json:"name"`
	File    string `json:"file"`
	Applied bool   `json:"applied"`
	text    string
}

// assumedJSON says what a topology took for granted: its ranks per node and their source (table,
// flag or topology), and the [scale.N] whose graphs it used, standing in for the node count's own
// when the table has none (scale_stands_in); scale is "" for a topology file.
type assumedJSON struct {
	GPUsPerNode       int    `json:"gpus_per_node"`
	GPUsPerNodeSource string `json:"gpus_per_node_source"`
	Scale             string `json:"scale"`
	ScaleStandsIn     bool   `json:"scale_stands_in"`
	Graphs            string `json:"graphs"`
	gpnText           string
}

// overlayJSON says which overlay applied and which of its fitted cells did not, and why.
type overlayJSON struct {
	File     string        `json:"file"`
	Embedded bool          `json:"embedded"`
	Applied  int           `json:"applied"`
	Skipped  []skippedJSON `json:"skipped"`
	text     string
}

type skippedJSON struct {
	Cell   string `json:"cell"`
	Reason string `json:"reason"`
}

func newOverlayJSON(ov *planner.Overlay, embedded bool) *overlayJSON {
	if ov == nil || ov.File == "" {
		return nil
	}
	out := &overlayJSON{File: ov.File, Embedded: embedded, Applied: ov.Applied, Skipped: []skippedJSON{},
		text: describeOverlay(ov, embedded)}
	for _, c := range ov.Skipped {
		out.Skipped = append(out.Skipped, skippedJSON{Cell: c.Name(), Reason: c.Reason})
	}
	return out
}

func newPlanJSON(s *setup, p *planner.Plan) *planJSON {
	out := &planJSON{
		Query: queryJSON{Topology: s.source, NNodes: s.topo.NNodes, NRanks: s.topo.NRanks,
			Coll: p.Class.Coll.String(), Bytes: p.Bytes, Op: p.Class.Op.String(), Dtype: p.Class.Dtype.String(),
			PipeOps: p.Class.PipeOps, RegBuff: p.Class.RegBuff},
		Algo: p.Algo.String(), Proto: p.Proto.String(), TimeUS: f32(p.TimeUS),
		Forced: p.Forced != planner.NotForced, ForcedBy: forcedBy(p.Forced), forcing: p.Forced,
		Channels: p.Channels, Threads: p.Threads, Warps: p.Threads / 32,
		ChunkBytes: p.ChunkBytes, SliceBytes: p.SliceBytes,
		Env: map[string]settingJSON{}, Tuner: p.Explain.Tuner, TunerNote: p.Explain.TunerNote,
		Edits: []string{}, Estimated: s.estimated, Overlay: newOverlayJSON(p.Explain.Overlay, s.embedded),
		Assumed: assumedJSON{GPUsPerNode: s.assumed.gpn, GPUsPerNodeSource: s.assumed.gpnSource, Scale: s.assumed.scale,
			ScaleStandsIn: s.assumed.standsIn, Graphs: s.assumed.graphs, gpnText: s.assumed.gpnText},
	}
	if out.Tuner == "" {
		out.Tuner = "none"
	}
	if s.fabric != nil {
		out.Fabric = &fabricJSON{Name: s.fabric.Name, File: s.fabric.File, Applied: s.topo.NNodes > 1,
			text: fabricLine(s.fabric, s.topo.NNodes)}
	}
	if out.Overlay == nil && s.node != nil {
		out.noOverlay = "none"
		if s.noOverlay {
			out.noOverlay = "none (--no-overlay)"
		}
	}
	if out.Estimated == nil {
		out.Estimated = []string{}
	}
	for _, name := range capabilities.EnvVars {
		if v := s.topo.Env.Var(name); v.IsSet() {
			out.Env[name] = settingJSON{Value: v.Value, Source: string(v.Source)}
		}
	}
	for _, e := range p.Explain.Edits {
		out.Edits = append(out.Edits, e.String())
	}
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for pr := costmodel.Proto(0); pr < costmodel.NumProtos; pr++ {
			c := p.Explain.Cells[a][pr]
			cj := cellJSON{Algo: a.String(), Proto: pr.String(), LatUS: f32(c.LatUS), BWGBps: f32(c.BWGBps),
				Correction: f32(c.Correction), CorrSource: string(c.CorrectionSource),
				ModelTimeUS: f32(c.ModelTimeUS), TimeUS: f32(c.TimeUS), Reason: c.Reason,
				Chosen: a == p.Algo && pr == p.Proto, tuned: c.TimeUS != c.ModelTimeUS}
			if cj.TimeUS < 0 && cj.Reason == "" {
				cj.Reason = "disabled by the tuner"
			}
			out.Menu = append(out.Menu, cj)
		}
	}
	return out
}

func num(v f32, illegal bool) string {
	if illegal || math.IsNaN(float64(v)) {
		return "-"
	}
	return strconv.FormatFloat(float64(v), 'f', 2, 32)
}

// writeExplain prints the plan like a database EXPLAIN: the pick, then every cell.
func writeExplain(w io.Writer, p *planJSON) error {
	q := p.Query
	fmt.Fprintf(w, "%s of %d bytes (%s), %s %s, pipe ops %d, on %s (%s, %d ranks)\n",
		q.Coll, q.Bytes, bytesize.Format(q.Bytes), q.Dtype, q.Op, q.PipeOps, q.Topology, plural(q.NNodes, "node"), q.NRanks)
	fmt.Fprintf(w, "-> %s/%s  %s us%s  channels %d  threads %d (%d warps)  chunk %d B  slice %d B\n",
		p.Algo, p.Proto, num(p.TimeUS, false), forcedNote(p.forcing), p.Channels, p.Threads, p.Warps, p.ChunkBytes, p.SliceBytes)
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

// forcedBy is the JSON forced_by of a plan: "env", "tuner", or "" when it won on cost.
func forcedBy(f planner.Forcing) string {
	switch f {
	case planner.ForcedByEnv:
		return "env"
	case planner.ForcedByTuner:
		return "tuner"
	}
	return ""
}

// forcedNote is the text mark of a forced pick, after a space: " (forced by the tuner)", or ""
// when it won on cost.
func forcedNote(f planner.Forcing) string {
	if f == planner.NotForced {
		return ""
	}
	return " (forced by " + f.String() + ")"
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
