package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/report"
)

// shownDecision is one size of one collective of a TUNING log: what NCCL ran there, how often,
// and what collplan's planner picks for the same call, both priced by the planner's model.
type shownDecision struct {
	Coll string `json:"coll"`
	// Bytes is NCCL's printed count x element size; ModelBytes the model's size (x ranks for
	// AllGather and ReduceScatter), the one the planner was asked at.
	Bytes      int64  `json:"bytes"`
	ModelBytes int64  `json:"model_bytes"`
	Calls      int    `json:"calls"`
	Line       int    `json:"first_line"`
	NCCLAlgo   string `json:"nccl_algo"`
	NCCLProto  string `json:"nccl_proto"`
	// ChannelLo and ChannelHi are NCCL's channel{Lo..Hi} (2.24+); null in older formats.
	ChannelLo *int `json:"channel_lo"`
	ChannelHi *int `json:"channel_hi"`
	// NCCLTimeUS is NCCL's own predicted time (2.20-2.23 formats); null in 2.24+.
	NCCLTimeUS *float64   `json:"nccl_time_us"`
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
	Log       string            `json:"log"`
	Format    string            `json:"format"`
	Topology  string            `json:"topology"`
	NRanks    int               `json:"n_ranks"`
	Dtype     string            `json:"dtype"`
	Op        string            `json:"op"`
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

func runShowDecisions(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("show-decisions", stderr, false)
	logFile := c.fs.String("log", "", "NCCL's log with TUNING lines (NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING)")
	asJSON := c.fs.Bool("json", false, "print one JSON object")
	s, cls, pl, help, err := c.parse(args)
	if help || err != nil {
		return err
	}
	if *logFile == "" {
		return usagef("--log: give the NCCL log to read")
	}
	f, err := os.Open(*logFile)
	if err != nil {
		return usagef("--log: %v", err)
	}
	defer f.Close()
	decs, _, err := calibrate.ParseTuning(*logFile, f)
	var probs calibrate.Problems
	if err != nil && !errors.As(err, &probs) {
		return fmt.Errorf("--log %s: %w", *logFile, err)
	}
	collGiven := false
	c.fs.Visit(func(f *flag.Flag) { collGiven = collGiven || f.Name == "coll" })
	if collGiven {
		// The 2.20-2.22 format names no collective: --coll says which one the log ran.
		for i := range decs {
			if d := &decs[i]; !d.CollKnown && d.CollName == "" {
				d.Coll, d.CollKnown = cls.Coll, true
			}
		}
	}
	out, err := showDecisions(ctx, s, pl, cls, *logFile, decs)
	if err != nil {
		return err
	}
	// Lines that look like TUNING output but do not parse are listed, as calibrate nccl-log lists
	// them; the decisions that did parse are still shown.
	for _, p := range probs {
		out.Skipped = append(out.Skipped, skippedDecision{Line: p.Line, Reason: "unreadable: " + p.Msg})
	}
	slices.SortStableFunc(out.Skipped, func(a, b skippedDecision) int { return a.Line - b.Line })
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return out.writeText(stdout)
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

// showDecisions prices every logged decision of one process (the lowest rank, else the first
// process in the log: every rank of a communicator logs the same decisions) with pl.
func showDecisions(ctx context.Context, s *setup, pl *planner.Planner, cls planner.Class, file string, decs []calibrate.Decision) (*shownLog, error) {
	out := &shownLog{Log: file, Topology: s.Source, NRanks: s.Topo.NRanks, Dtype: cls.Dtype.String(), Op: cls.Op.String(),
		Skipped: []skippedDecision{}, Rows: []shownDecision{}}
	if len(decs) == 0 {
		return nil, usagef("--log %s: no TUNING decision lines (run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING)", file)
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
	type key struct {
		coll  capabilities.Coll
		bytes int64
		algo  capabilities.Algo
		proto capabilities.Proto
		lo    int
	}
	rows := map[key]int{} // index into out.Rows
	preps := map[capabilities.Coll]*planner.Prepared{}
	for i := range decs {
		d := &decs[i]
		if process(d) != chosen {
			continue
		}
		out.Format = d.Format
		if !d.CollKnown {
			reason := "the 2.20-2.22 format names no collective (--coll names the one the log ran)"
			if d.CollName != "" {
				reason = d.CollName + " is not a modelled collective"
			}
			out.Skipped = append(out.Skipped, skippedDecision{Line: d.Line, Reason: reason})
			continue
		}
		out.Calls++
		k := key{d.Coll, d.Bytes, d.Algo, d.Proto, d.ChannelLo}
		if i, ok := rows[k]; ok {
			r := &out.Rows[i]
			r.Calls++
			if r.Agree {
				out.Agree++
			}
			continue
		}
		pr := preps[d.Coll]
		if pr == nil {
			c := cls
			c.Coll = d.Coll
			var err error
			if pr, err = prepare(ctx, pl, c); err != nil {
				return nil, fmt.Errorf("--log %s:%d: %w", file, d.Line, err)
			}
			preps[d.Coll] = pr
		}
		n := d.Bytes
		if d.Coll == capabilities.AllGather || d.Coll == capabilities.ReduceScatter {
			n *= int64(s.Topo.NRanks)
		}
		r := &shownDecision{Coll: d.Coll.String(), Bytes: d.Bytes, ModelBytes: n, Calls: 1, Line: d.Line,
			NCCLAlgo: d.Algo.String(), NCCLProto: d.Proto.String()}
		if d.ChannelLo >= 0 {
			lo, hi := d.ChannelLo, d.ChannelHi
			r.ChannelLo, r.ChannelHi = &lo, &hi
		}
		if d.TimeUS >= 0 {
			t := d.TimeUS
			r.NCCLTimeUS = &t
		}
		p, err := pr.Explain(n)
		if err != nil {
			r.Note = err.Error()
		} else {
			cell := p.Explain.Cells[d.Algo][d.Proto]
			r.NCCLCellUS = report.F32(cell.TimeUS)
			if cell.TimeUS < 0 {
				r.Note = "NCCL's cell is not legal in collplan's model here"
				if cell.Reason != "" {
					r.Note += ": " + cell.Reason
				}
			}
			r.PickAlgo, r.PickProto, r.PickUS, r.Channels = p.Algo.String(), p.Proto.String(), report.F32(p.TimeUS), p.Channels
			r.Agree = p.Algo == d.Algo && p.Proto == d.Proto
		}
		if r.Agree {
			out.Agree++
		}
		rows[k] = len(out.Rows)
		out.Rows = append(out.Rows, *r)
	}
	slices.SortStableFunc(out.Rows, func(a, b shownDecision) int {
		if c := strings.Compare(a.Coll, b.Coll); c != 0 {
			return c
		}
		switch {
		case a.ModelBytes < b.ModelBytes:
			return -1
		case a.ModelBytes > b.ModelBytes:
			return 1
		}
		return 0
	})
	return out, nil
}

func (l *shownLog) writeText(w io.Writer) error {
	procs := "1 process logged them"
	if l.Processes != 1 {
		procs = fmt.Sprintf("%d processes logged them; each logs the same decisions", l.Processes)
	}
	fmt.Fprintf(w, "%s: NCCL %s TUNING decisions of %s (%s), priced on %s (%d ranks) as %s %s\n",
		l.Log, l.Format, l.Process, procs, l.Topology, l.NRanks, l.Dtype, l.Op)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "coll\tbytes\tcalls\tNCCL ran\tchannels\tNCCL's us\tits model us\tcollplan picks\tmodel us\tratio\t")
	for _, r := range l.Rows {
		ch, nt := "-", "-"
		if r.ChannelLo != nil {
			ch = fmt.Sprintf("%d..%d", *r.ChannelLo, *r.ChannelHi)
		}
		if r.NCCLTimeUS != nil {
			nt = fmt.Sprintf("%.2f", *r.NCCLTimeUS)
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
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s/%s\t%s\t%s\t%s\t%s\t%.2f\t%s\t\n", r.Coll, bytesize.Format(r.Bytes), r.Calls,
			r.NCCLAlgo, r.NCCLProto, ch, nt, cellUS, pick, float64(r.PickUS), ratio)
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
		fmt.Fprintf(w, "skipped %s:%d: %s\n", l.Log, s.Line, s.Reason)
	}
	for _, r := range l.Rows {
		if r.Note != "" {
			fmt.Fprintf(w, "note %s:%d: %s\n", l.Log, r.Line, r.Note)
		}
	}
	return nil
}
