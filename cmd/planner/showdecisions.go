package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/profile"
	"github.com/collplan/collplan/report"
)

// shownDecision is one (collective, dtype, size, cell) of a TUNING log or a profiler dump: what
// NCCL ran there, how often (and, from a dump, how long), and what collplan's planner picks for the
// same call, both cells priced by the planner's model.
type shownDecision struct {
	Coll    string `json:"coll"`
	Dtype   string `json:"dtype"`
	PipeOps int    `json:"pipe_ops"`
	// Bytes is NCCL's count x element size (what TUNING lines print); ModelBytes the model's size
	// (x ranks for AllGather and ReduceScatter), the one the planner was asked at.
	Bytes      int64  `json:"bytes"`
	ModelBytes int64  `json:"model_bytes"`
	Calls      int    `json:"calls"`
	Line       int    `json:"first_line"`
	NCCLAlgo   string `json:"nccl_algo"`
	NCCLProto  string `json:"nccl_proto"`
	// ChannelLo and ChannelHi are NCCL's channel{Lo..Hi} (TUNING 2.24+; from a dump 0 and
	// nChannels-1); null in older formats.
	ChannelLo *int `json:"channel_lo"`
	ChannelHi *int `json:"channel_hi"`
	// NCCLTimeUS is NCCL's own predicted time (TUNING 2.20-2.23); null otherwise.
	NCCLTimeUS *float64 `json:"nccl_time_us"`
	// MeasuredUS is the median measured time of the calls (a dump's kernel channels' GPU span);
	// null for a TUNING log, or when no call of the row was timed.
	MeasuredUS *float64   `json:"measured_us"`
	NCCLCellUS report.F32 `json:"nccl_cell_model_time_us"`
	PickAlgo   string     `json:"pick_algo"`
	PickProto  string     `json:"pick_proto"`
	PickUS     report.F32 `json:"pick_model_time_us"`
	Channels   int        `json:"pick_channels"`
	Agree      bool       `json:"agree"`
	// Note says why the planner could not price the call (NCCL's cell illegal in the model, say).
	Note string `json:"note,omitempty"`
}

// shownLog is planner show-decisions --json.
type shownLog struct {
	Source    string            `json:"source"` // the log or dump file
	Kind      string            `json:"kind"`   // "tuning-log" or "profiler-dump"
	Format    string            `json:"format"` // the TUNING format, or "profiler vN schema M"
	Topology  string            `json:"topology"`
	NRanks    int               `json:"n_ranks"`
	Op        string            `json:"op"`
	NCCL      string            `json:"nccl,omitempty"` // --nccl: the release whose model prices collplan's picks
	Process   string            `json:"process"`
	Processes int               `json:"processes_logged"`
	Calls     int               `json:"calls"`
	Agree     int               `json:"calls_agreeing"`
	Skipped   []skippedDecision `json:"skipped"`
	Rows      []shownDecision   `json:"rows"`
}

// skippedDecision is a logged decision collplan cannot price, and why.
type skippedDecision struct {
	Line   int    `json:"line"`
	Reason string `json:"reason"`
}

// observation is one call NCCL made, from a TUNING line or a dump's collective.
type observation struct {
	line       int
	coll       capabilities.Coll
	dtype      capabilities.Dtype
	pipeOps    int
	bytes      int64 // NCCL's count x element size
	modelBytes int64
	algo       capabilities.Algo
	proto      capabilities.Proto
	chLo, chHi int     // -1 when not given
	ncclTimeUS float64 // -1 when not given
	ns         *uint64 // measured duration; nil when not timed
}

func runShowDecisions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("show-decisions", stderr, false)
	logFile := c.fs.String("log", "", "NCCL's log with TUNING lines (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING)")
	dumpFile := c.fs.String("dump", "", "a profiler dump of collplan's NCCL profiler plugin (docs/profile-dump.md)")
	asJSON := c.fs.Bool("json", false, "print one JSON object")
	s, cls, pl, help, err := c.parse(args)
	if help || err != nil {
		return err
	}
	given := map[string]bool{}
	c.fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var out *shownLog
	var obs []observation
	switch {
	case (*logFile == "") == (*dumpFile == ""):
		return usagef("give one of --log (a TUNING log) or --dump (a profiler dump)")
	case *logFile != "":
		out, obs, err = readTuningLog(*logFile, s, cls, given["coll"])
	default:
		out, obs, err = readDump(*dumpFile, s, cls, given["dtype"])
	}
	if err != nil {
		return err
	}
	if err := price(ctx, out, obs, pl, cls); err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return out.writeText(stdout)
}

func newShown(src, kind string, s *setup, cls planner.Class) *shownLog {
	return &shownLog{Source: src, Kind: kind, Topology: s.Source, NRanks: s.Topo.NRanks, Op: cls.Op.String(), NCCL: s.ReleaseName(),
		Skipped: []skippedDecision{}, Rows: []shownDecision{}}
}

// readTuningLog reads the TUNING decisions of one process (the lowest rank the launcher tagged,
// else the first process in the log: every rank of a communicator logs the same decisions).
// collGiven: --coll names the collective of the 2.20-2.22 lines, which name none.
func readTuningLog(file string, s *setup, cls planner.Class, collGiven bool) (*shownLog, []observation, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, usagef("--log: %v", err)
	}
	defer f.Close()
	decs, _, err := calibrate.ParseTuning(file, f)
	var probs calibrate.Problems
	if err != nil && !errors.As(err, &probs) {
		return nil, nil, fmt.Errorf("--log %s: %w", file, err)
	}
	if len(decs) == 0 {
		return nil, nil, usagef("--log %s: no TUNING decision lines (run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING)", file)
	}
	out := newShown(file, "tuning-log", s, cls)
	// Lines that look like TUNING output but do not parse are listed, as calibrate nccl-log lists
	// them; the decisions that did parse are still shown.
	for _, p := range probs {
		out.Skipped = append(out.Skipped, skippedDecision{Line: p.Line, Reason: "unreadable: " + p.Msg})
	}
	procs := map[string]bool{}
	chosen, best := "", -1
	for i := range decs {
		p := process(&decs[i])
		if !procs[p] {
			procs[p] = true
			if chosen == "" || (decs[i].Rank >= 0 && (best < 0 || decs[i].Rank < best)) {
				chosen, best = p, decs[i].Rank
			}
		}
	}
	out.Process, out.Processes = chosen, len(procs)
	var obs []observation
	for i := range decs {
		d := &decs[i]
		if process(d) != chosen {
			continue
		}
		out.Format = d.Format
		if !d.CollKnown && d.CollName == "" && collGiven {
			d.Coll, d.CollKnown = cls.Coll, true
		}
		if !d.CollKnown {
			reason := "the 2.20-2.22 format names no collective (--coll names the one the log ran)"
			if d.CollName != "" {
				reason = d.CollName + " is not a modelled collective"
			}
			out.Skipped = append(out.Skipped, skippedDecision{Line: d.Line, Reason: reason})
			continue
		}
		n := d.Bytes
		if d.Coll == capabilities.AllGather || d.Coll == capabilities.ReduceScatter {
			n *= int64(s.Topo.NRanks)
		}
		obs = append(obs, observation{line: d.Line, coll: d.Coll, dtype: cls.Dtype, pipeOps: cls.PipeOps, bytes: d.Bytes,
			modelBytes: n, algo: d.Algo, proto: d.Proto, chLo: d.ChannelLo, chHi: d.ChannelHi, ncclTimeUS: d.TimeUS})
	}
	return out, obs, nil
}

// readDump reads a profiler dump: every collective it recorded, with its dtype, pipelined ops and
// measured time; the communicator must have the topology's rank count.
func readDump(file string, s *setup, cls planner.Class, dtypeGiven bool) (*shownLog, []observation, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, nil, usagef("--dump: %v", err)
	}
	defer f.Close()
	d, err := profile.Read(f, file)
	if err != nil {
		return nil, nil, usagef("--dump: %v", err)
	}
	h := d.Header
	if h.NRanks != s.Topo.NRanks || h.NNodes != s.Topo.NNodes {
		return nil, nil, usagef("--dump %s: the communicator has %d ranks on %d nodes; %s has %d on %d (give the job's --node and --nodes)",
			file, h.NRanks, h.NNodes, s.Source, s.Topo.NRanks, s.Topo.NNodes)
	}
	if dtypeGiven {
		return nil, nil, usagef("--dtype: a dump names each collective's dtype; --dtype applies to --log")
	}
	out := newShown(file, "profiler-dump", s, cls)
	out.Format = fmt.Sprintf("profiler v%d schema %d", h.Profiler, h.Schema)
	out.Process, out.Processes = fmt.Sprintf("rank %d (%s:%d, comm %s)", h.Rank, h.Host, h.PID, h.CommID), 1
	var obs []observation
	for _, c := range d.Colls {
		coll, err1 := capabilities.ParseColl(c.Coll)
		algo, err2 := capabilities.ParseAlgo(c.Algo)
		proto, err3 := capabilities.ParseProto(c.Proto)
		dt, err4 := ncclDtype(c.Datatype)
		if err := errors.Join(err1, err2, err3, err4); err != nil || c.Bytes > math.MaxInt64 {
			out.Skipped = append(out.Skipped, skippedDecision{Line: c.Line,
				Reason: fmt.Sprintf("%s %s/%s %s: not a modelled call", c.Coll, c.Algo, c.Proto, c.Datatype)})
			continue
		}
		pipe := 1
		if c.NumPipeOps != nil {
			pipe = *c.NumPipeOps
		}
		nccl := int64(c.Count) * int64(dt.Size())
		obs = append(obs, observation{line: c.Line, coll: coll, dtype: dt, pipeOps: pipe, bytes: nccl, modelBytes: int64(c.Bytes),
			algo: algo, proto: proto, chLo: 0, chHi: c.NChannels - 1, ncclTimeUS: -1, ns: c.Ns})
	}
	return out, obs, nil
}

// ncclDtype maps NCCL's datatype name (ncclFloat32, ncclBfloat16, ncclFloat8e4m3) to collplan's.
func ncclDtype(name string) (capabilities.Dtype, error) {
	s, ok := strings.CutPrefix(name, "nccl")
	if !ok {
		return 0, fmt.Errorf("datatype %q is not NCCL's", name)
	}
	s = strings.ToLower(s)
	if rest, ok := strings.CutPrefix(s, "float8"); ok {
		s = "fp8" + rest
	}
	return capabilities.ParseDtype(s)
}

// price groups the observations by (collective, dtype, pipelined ops, size, NCCL's cell) and asks
// the planner at each group's model size.
func price(ctx context.Context, out *shownLog, obs []observation, pl *planner.Planner, cls planner.Class) error {
	type key struct {
		coll   capabilities.Coll
		dtype  capabilities.Dtype
		pipe   int
		bytes  int64
		algo   capabilities.Algo
		proto  capabilities.Proto
		lo, hi int
	}
	rows := map[key]int{} // index into out.Rows
	times := map[int][]uint64{}
	preps := map[planner.Class]*planner.Prepared{}
	for _, o := range obs {
		out.Calls++
		k := key{o.coll, o.dtype, o.pipeOps, o.modelBytes, o.algo, o.proto, o.chLo, o.chHi}
		i, ok := rows[k]
		if !ok {
			r, err := priceOne(ctx, out.Source, o, pl, cls, preps)
			if err != nil {
				return err
			}
			i = len(out.Rows)
			rows[k] = i
			out.Rows = append(out.Rows, r)
		} else {
			out.Rows[i].Calls++
		}
		if out.Rows[i].Agree {
			out.Agree++
		}
		if o.ns != nil {
			times[i] = append(times[i], *o.ns)
		}
	}
	for i, ns := range times {
		m := profile.MedianUS(ns)
		out.Rows[i].MeasuredUS = &m
	}
	slices.SortStableFunc(out.Rows, func(a, b shownDecision) int {
		if c := strings.Compare(a.Coll, b.Coll); c != 0 {
			return c
		}
		if c := strings.Compare(a.Dtype, b.Dtype); c != 0 {
			return c
		}
		switch {
		case a.ModelBytes < b.ModelBytes:
			return -1
		case a.ModelBytes > b.ModelBytes:
			return 1
		}
		return a.PipeOps - b.PipeOps
	})
	slices.SortStableFunc(out.Skipped, func(a, b skippedDecision) int { return a.Line - b.Line })
	return nil
}

// priceOne is the row of observation o: the planner's pick at o's model size for o's class, and
// NCCL's cell priced beside it.
func priceOne(ctx context.Context, src string, o observation, pl *planner.Planner, cls planner.Class, preps map[planner.Class]*planner.Prepared) (shownDecision, error) {
	c := cls
	c.Coll, c.Dtype, c.PipeOps = o.coll, o.dtype, o.pipeOps
	pr := preps[c]
	if pr == nil {
		var err error
		if pr, err = prepare(ctx, pl, c); err != nil {
			return shownDecision{}, fmt.Errorf("%s:%d: %w", src, o.line, err)
		}
		preps[c] = pr
	}
	r := shownDecision{Coll: o.coll.String(), Dtype: o.dtype.String(), PipeOps: o.pipeOps, Bytes: o.bytes, ModelBytes: o.modelBytes,
		Calls: 1, Line: o.line, NCCLAlgo: o.algo.String(), NCCLProto: o.proto.String()}
	if o.chLo >= 0 {
		lo, hi := o.chLo, o.chHi
		r.ChannelLo, r.ChannelHi = &lo, &hi
	}
	if o.ncclTimeUS >= 0 {
		t := o.ncclTimeUS
		r.NCCLTimeUS = &t
	}
	p, err := pr.Explain(o.modelBytes)
	if err != nil {
		r.Note = err.Error()
		return r, nil
	}
	cell := p.Explain.Cells[o.algo][o.proto]
	r.NCCLCellUS = report.F32(cell.TimeUS)
	if cell.TimeUS < 0 {
		r.Note = "NCCL's cell is not legal in collplan's model here"
		if cell.Reason != "" {
			r.Note += ": " + cell.Reason
		}
	}
	r.PickAlgo, r.PickProto, r.PickUS, r.Channels = p.Algo.String(), p.Proto.String(), report.F32(p.TimeUS), p.Channels
	r.Agree = p.Algo == o.algo && p.Proto == o.proto
	return r, nil
}

func (l *shownLog) writeText(w io.Writer) error {
	procs := "1 process logged them"
	if l.Processes != 1 {
		procs = fmt.Sprintf("%d processes logged them; each logs the same decisions", l.Processes)
	}
	what := "NCCL " + l.Format + " TUNING decisions"
	if l.Kind == "profiler-dump" {
		what, procs = "collectives ("+l.Format+")", "measured by collplan's profiler"
	}
	priced := ""
	if l.NCCL != "" {
		priced = ", priced by NCCL " + l.NCCL + "'s model"
	}
	fmt.Fprintf(w, "%s: %s of %s (%s), priced on %s (%d ranks)%s, op %s\n", l.Source, what, l.Process, procs, l.Topology, l.NRanks, priced, l.Op)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "coll\tdtype\tbytes\tcalls\tNCCL ran\tchannels\tNCCL's us\tmeasured us\tits model us\tcollplan picks\tmodel us\tratio\t")
	for _, r := range l.Rows {
		ch, nt, mt := "-", "-", "-"
		if r.ChannelLo != nil {
			ch = fmt.Sprintf("%d..%d", *r.ChannelLo, *r.ChannelHi)
		}
		if r.NCCLTimeUS != nil {
			nt = fmt.Sprintf("%.2f", *r.NCCLTimeUS)
		}
		if r.MeasuredUS != nil {
			mt = fmt.Sprintf("%.2f", *r.MeasuredUS)
		}
		pick, ratio := r.PickAlgo+"/"+r.PickProto, "-"
		if r.Agree {
			pick = "same"
		}
		if r.NCCLCellUS > 0 && r.PickUS > 0 {
			ratio = fmt.Sprintf("%.3f", float64(r.PickUS)/float64(r.NCCLCellUS))
		}
		cellUS := "-"
		if r.NCCLCellUS >= 0 && r.Note == "" {
			cellUS = fmt.Sprintf("%.2f", float64(r.NCCLCellUS))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s/%s\t%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t\n", r.Coll, r.Dtype, bytesize.Format(r.Bytes), r.Calls,
			r.NCCLAlgo, r.NCCLProto, ch, nt, mt, cellUS, pick, float64(r.PickUS), ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	pct := 0.0
	if l.Calls > 0 {
		pct = 100 * float64(l.Agree) / float64(l.Calls)
	}
	fmt.Fprintf(w, "%s, %d (%.1f %%) where collplan picks what NCCL ran; ratio: collplan's pick over NCCL's cell, both priced by collplan's model\n",
		report.Plural(l.Calls, "call"), l.Agree, pct)
	for _, s := range l.Skipped {
		fmt.Fprintf(w, "skipped %s:%d: %s\n", l.Source, s.Line, s.Reason)
	}
	for _, r := range l.Rows {
		if r.Note != "" {
			fmt.Fprintf(w, "note %s:%d: %s\n", l.Source, r.Line, r.Note)
		}
	}
	return nil
}

// process names the process a decision came from: the launcher's rank when tagged, else NCCL's
// host:pid and device.
func process(d *calibrate.Decision) string {
	switch {
	case d.Rank >= 0:
		return fmt.Sprintf("rank %d", d.Rank)
	case d.Host != "" || d.PID >= 0:
		return fmt.Sprintf("%s:%d [%d]", d.Host, d.PID, d.Dev)
	}
	return "untagged"
}
