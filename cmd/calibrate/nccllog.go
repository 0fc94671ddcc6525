package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/outpath"
	"github.com/collplan/collplan/planner"
)

const ncclLogDoc = `usage: calibrate nccl-log LOG [--json] [--topology-out FILE] [--check-decisions]

Reads an NCCL log (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH,TUNING; launcher prefixes and
nccl-tests output around it are fine): the TUNING decisions in the three formats NCCL has printed
(2.20-2.22 "N Bytes -> Algo I proto J time T", 2.23 with the collective, 2.24+ "COLL: N Bytes ->
Algo NAME proto NAME channel{Lo..Hi}={A..B}"), the model table rank 0 prints at init, and the GRAPH
lines of the first communicator with the facts of its init lines.

--topology-out FILE writes those as a topology file (the schema of design/topology-example.toml):
each input the log gives names its line, and an input it lacks takes a default tagged "estimate",
which planner explain --topology FILE lists: compute capability 90 (unless nccl-tests' rank lines
name a known GPU), cpu_arch x86, cpu_vendor intel, net_device_type host, nvs_count 4 with an NVLS
graph (else 0), latency_inter 0, and without the comm and channels lines the ranks, nodes and
channels the GRAPH lines imply (comm_n_channels = min(64, 2 x ring channels)); the ranks of the
first "... nranks N ... - Init COMPLETE" line are not an estimate. A log without GRAPH lines gives no
topology, so neither --topology-out nor --check-decisions (exit status 2).
--check-decisions prices each distinct decision with the planner over that topology (float32 sum,
one pipe op: the log names neither dtype nor op; AllGather and ReduceScatter lines print per-rank
bytes, which the model's nBytes multiplies by the ranks) and prints whether it picks the logged
cell, and how the logged model table agrees with the planner's cell by cell.
`

// ncclLogJSON is nccl-log --json's object.
type ncclLogJSON struct {
	File      string              `json:"file"`
	Comm      calibrate.CommFacts `json:"comm"`
	Decisions []decisionJSON      `json:"decisions"`
	Table     *tableJSON          `json:"model_table"`
	Graphs    []graphJSON         `json:"graph_lines"`
	// Topology is the topology file's text (--topology-out or --check-decisions), Estimated its
	// keys tagged "estimate".
	Topology  string      `json:"topology,omitempty"`
	Estimated []string    `json:"estimated_inputs,omitempty"`
	Checks    []checkJSON `json:"decision_checks,omitempty"`
	Cells     []cellJSON  `json:"model_table_checks,omitempty"`
	Problems  []string    `json:"problems"`
}

type decisionJSON struct {
	Line      int     `json:"line"`
	Rank      int     `json:"rank"`
	Format    string  `json:"format"`
	Coll      string  `json:"coll"`
	Bytes     int64   `json:"bytes"`
	Algo      string  `json:"algo"`
	Proto     string  `json:"proto"`
	ChannelLo int     `json:"channel_lo"`
	ChannelHi int     `json:"channel_hi"`
	TimeUS    float64 `json:"time_us"`
	Timestamp string  `json:"timestamp,omitempty"`
}

// graphJSON is one GRAPH line: which graph of which communicator of which rank, and its search result.
type graphJSON struct {
	Line         int     `json:"line"`
	Rank         int     `json:"rank"`
	Host         string  `json:"host"`
	Dev          int     `json:"dev"`
	Pattern      int     `json:"pattern"`
	Graph        string  `json:"graph"`
	Comm         int     `json:"comm"`
	NChannels    int     `json:"n_channels"`
	BwIntra      float64 `json:"bw_intra"`
	BwInter      float64 `json:"bw_inter"`
	TypeIntra    string  `json:"type_intra"`
	TypeInter    string  `json:"type_inter"`
	SameChannels bool    `json:"same_channels"`
}

type tableJSON struct {
	Line       int        `json:"line"`
	Incomplete bool       `json:"incomplete"`
	Cells      []cellJSON `json:"cells"`
}

type cellJSON struct {
	Cell         string  `json:"cell"`
	LatUS        float64 `json:"lat_us"`
	BWGBps       float64 `json:"bw_gbps"`
	MaxThreads   int     `json:"max_threads,omitempty"`
	PlannerLatUS float64 `json:"planner_lat_us,omitempty"`
	PlannerBW    float64 `json:"planner_bw_gbps,omitempty"`
	Agree        *bool   `json:"agree,omitempty"`
}

type checkJSON struct {
	Line      int     `json:"line"`
	Count     int     `json:"count"`
	Coll      string  `json:"coll"`
	Bytes     int64   `json:"bytes"`
	NBytes    int64   `json:"model_bytes"`
	Logged    string  `json:"logged"`
	Planned   string  `json:"planned,omitempty"`
	PlannedUS float64 `json:"planned_us,omitempty"`
	Agree     bool    `json:"agree"`
	Skipped   string  `json:"skipped,omitempty"`
}

// runNCCLLog is calibrate nccl-log.
func runNCCLLog(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("calibrate nccl-log", flag.ContinueOnError)
	fs.SetOutput(stderr)
	asJSON := fs.Bool("json", false, "print everything as one JSON object")
	topoOut := fs.String("topology-out", "", "write the log's first communicator as a topology file")
	check := fs.Bool("check-decisions", false, "price each distinct decision with the planner over the log's topology and print the agreement")
	path, help, err := parseSub(fs, args, "calibrate nccl-log", ncclLogDoc, "LOG", stdout)
	if help || err != nil {
		return err
	}
	if err := outpath.File("--topology-out", *topoOut); err != nil {
		return usageError{err}
	}
	f, err := os.Open(path)
	if err != nil {
		return usageError{fmt.Errorf("calibrate: %w", err)}
	}
	defer f.Close()
	lg, err := calibrate.ParseNCCLLog(path, f)
	if err != nil {
		return usageError{err}
	}
	out := ncclLogJSON{File: path, Comm: lg.Comm, Graphs: []graphJSON{}, Decisions: []decisionJSON{}, Problems: []string{}}
	for _, g := range lg.Graphs {
		out.Graphs = append(out.Graphs, graphJSON{Line: g.Line, Rank: g.Rank, Host: g.Host, Dev: g.Dev, Pattern: g.Pattern,
			Graph: g.Graph, Comm: g.Comm, NChannels: g.NChannels, BwIntra: g.BwIntra, BwInter: g.BwInter,
			TypeIntra: g.TypeIntra, TypeInter: g.TypeInter, SameChannels: g.SameChannels})
	}
	for _, d := range lg.Decisions {
		out.Decisions = append(out.Decisions, decisionOf(d))
	}
	if t := lg.Table; t != nil {
		out.Table = &tableJSON{Line: t.Line, Incomplete: t.Incomplete, Cells: tableCells(t)}
	}
	for _, p := range lg.Problems {
		out.Problems = append(out.Problems, p.Error())
	}
	var topo capabilities.Topology
	if *topoOut != "" || *check {
		data, est, err := lg.TopologyFile()
		if err != nil {
			return usagef("%s: no topology file from this log (its GRAPH lines, NCCL_DEBUG_SUBSYS=GRAPH, give the graphs): %s", path, oneLine(err))
		}
		out.Topology, out.Estimated = string(data), est
		if topo, err = capabilities.DecodeTopology(path, data); err != nil {
			return err
		}
		if *topoOut != "" {
			if err := os.WriteFile(*topoOut, data, 0o644); err != nil {
				return err
			}
		}
	}
	var checks []calibrate.DecisionCheck
	var cells []calibrate.CellCheck
	if *check {
		pl, err := planner.New(&topo, planner.Config{})
		if err != nil {
			return usagef("%s: the log's topology: %v", path, err)
		}
		if checks, err = calibrate.CheckDecisions(ctx, pl, lg.Decisions); err != nil {
			return err
		}
		for _, c := range checks {
			out.Checks = append(out.Checks, checkOf(c))
		}
		if lg.Table != nil {
			cells = calibrate.CheckModelTable(pl, lg.Table)
			for _, c := range cells {
				agree := c.Agree
				out.Cells = append(out.Cells, cellJSON{Cell: c.Cell.String(), LatUS: c.LoggedLatUS, BWGBps: c.LoggedBWGBps,
					PlannerLatUS: c.LatUS, PlannerBW: c.BWGBps, Agree: &agree})
			}
		}
	}
	if *asJSON {
		return writeJSON(stdout, out)
	}
	return writeNCCLLog(stdout, lg, &out, *topoOut, *check, checks, cells)
}

func decisionOf(d calibrate.Decision) decisionJSON {
	return decisionJSON{Line: d.Line, Rank: d.Rank, Format: d.Format, Coll: d.CollName, Bytes: d.Bytes,
		Algo: d.Algo.String(), Proto: d.Proto.String(), ChannelLo: d.ChannelLo, ChannelHi: d.ChannelHi,
		TimeUS: d.TimeUS, Timestamp: d.Timestamp}
}

func checkOf(c calibrate.DecisionCheck) checkJSON {
	j := checkJSON{Line: c.Line, Count: c.Count, Coll: c.CollName, Bytes: c.Bytes, NBytes: c.NBytes,
		Logged: c.Algo.String() + "/" + c.Proto.String(), Agree: c.Agree, Skipped: c.Skipped}
	if c.Skipped == "" {
		j.Planned = c.Planned.Algo.String() + "/" + c.Planned.Proto.String()
		j.PlannedUS = c.PlannedUS
	}
	return j
}

// tableCells lists the model table's cells that are not 0/0.
func tableCells(t *calibrate.ModelTable) []cellJSON {
	var out []cellJSON
	for c := capabilities.Coll(0); c < capabilities.NumColls; c++ {
		for _, a := range t.Algos {
			for p := capabilities.Proto(0); p < capabilities.NumProtos; p++ {
				lat, bw := t.LatUS[c][a][p], t.BwGBps[c][a][p]
				if lat == 0 && bw == 0 {
					continue
				}
				out = append(out, cellJSON{Cell: calibrate.Cell{Coll: c, Algo: a, Proto: p}.String(), LatUS: lat, BWGBps: bw,
					MaxThreads: t.MaxThreads[a][p]})
			}
		}
	}
	return out
}

// writeNCCLLog prints nccl-log's text.
func writeNCCLLog(w io.Writer, lg *calibrate.NCCLLog, out *ncclLogJSON, topoOut string, check bool,
	checks []calibrate.DecisionCheck, cells []calibrate.CellCheck) error {
	c := lg.Comm
	var facts []string
	if c.VersionLine != 0 {
		facts = append(facts, fmt.Sprintf("NCCL %s (line %d)", c.NCCLVersion, c.VersionLine))
	}
	if c.CommLine != 0 {
		facts = append(facts, fmt.Sprintf("%d ranks on %s, %d local (line %d)", c.NRanks, nodesWord(c.NNodes), c.LocalRanks, c.CommLine))
	}
	if c.CommLine == 0 && c.InitLine != 0 {
		facts = append(facts, fmt.Sprintf("%d ranks (Init COMPLETE, line %d)", c.InitRanks, c.InitLine))
	}
	if c.ChannelsLine != 0 {
		facts = append(facts, fmt.Sprintf("%d coll channels, %d nvls channels (line %d)", c.CollChannels, c.NVLSChannels, c.ChannelsLine))
	}
	if c.AlgoLine != 0 {
		facts = append(facts, fmt.Sprintf("NCCL_ALGO=%s (line %d)", c.Algo, c.AlgoLine))
	}
	if c.ProtoLine != 0 {
		facts = append(facts, fmt.Sprintf("NCCL_PROTO=%s (line %d)", c.Proto, c.ProtoLine))
	}
	if c.GPULine != 0 {
		facts = append(facts, fmt.Sprintf("%s (line %d)", c.GPUName, c.GPULine))
	}
	if len(facts) == 0 {
		facts = append(facts, "no init lines")
	}
	fmt.Fprintf(w, "%s: %s\n", lg.File, strings.Join(facts, ", "))

	formats := map[string]int{}
	for _, d := range lg.Decisions {
		formats[d.Format]++
	}
	var fl []string
	for _, f := range []string{calibrate.Format224, calibrate.Format223, calibrate.Format220} {
		if formats[f] > 0 {
			fl = append(fl, fmt.Sprintf("%d in the %s format", formats[f], f))
		}
	}
	fmt.Fprintf(w, "\nTUNING decisions: %d", len(lg.Decisions))
	if len(fl) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(fl, ", "))
	}
	fmt.Fprintln(w)
	if len(lg.Decisions) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  line\trank\tcoll\tbytes\talgo\tproto\tchannels\tNCCL us\t")
		for _, d := range lg.Decisions {
			rank, ch, t, coll := "-", "-", "-", d.CollName
			if d.Rank >= 0 {
				rank = fmt.Sprint(d.Rank)
			}
			if d.ChannelLo >= 0 {
				ch = fmt.Sprintf("%d..%d", d.ChannelLo, d.ChannelHi)
			}
			if d.TimeUS >= 0 {
				t = fmt.Sprintf("%.2f", d.TimeUS)
			}
			if coll == "" {
				coll = "-"
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t\n", d.Line, rank, coll, d.Bytes, d.Algo, d.Proto, ch, t)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	if t := lg.Table; t != nil {
		var algos []string
		for _, a := range t.Algos {
			algos = append(algos, a.String())
		}
		note := ""
		if t.Incomplete {
			note = ", incomplete"
		}
		fmt.Fprintf(w, "\nmodel table (line %d; %s%s; cells that are 0/0 left out):\n", t.Line, strings.Join(algos, " "), note)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  cell\tlat us\tbw GB/s\tmax threads\t")
		for _, cj := range out.Table.Cells {
			fmt.Fprintf(tw, "  %s\t%.1f\t%.1f\t%d\t\n", cj.Cell, cj.LatUS, cj.BWGBps, cj.MaxThreads)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(w, "\nmodel table: none (NCCL prints it at init under NCCL_DEBUG_SUBSYS=TUNING)")
	}

	graphs := map[string]bool{}
	srcs := map[string]bool{}
	for _, g := range lg.Graphs {
		if g.Comm == 0 && g.Graph != "" {
			graphs[g.Graph] = true
			srcs[fmt.Sprintf("%d|%s|%d|%d", g.Rank, g.Host, g.PID, g.Dev)] = true
		}
	}
	var gl []string
	for _, n := range []string{calibrate.GraphTree, calibrate.GraphRing, calibrate.GraphCollNetDirect, calibrate.GraphCollNetChain, calibrate.GraphNVLS} {
		if graphs[n] {
			gl = append(gl, n)
		}
	}
	if len(lg.Graphs) == 0 {
		fmt.Fprint(w, "\nGRAPH lines: none (NCCL_DEBUG_SUBSYS=GRAPH prints them)")
	} else {
		fmt.Fprintf(w, "\nGRAPH lines: %d (first communicator: %s from %d ranks)", len(lg.Graphs), orNone(gl), len(srcs))
	}
	switch {
	case topoOut != "":
		fmt.Fprintf(w, " -> topology %s", topoOut)
	case !check && len(lg.Graphs) > 0:
		fmt.Fprint(w, "; --topology-out FILE writes them as a topology file")
	}
	fmt.Fprintln(w)
	if out.Topology != "" {
		fmt.Fprintf(w, "estimated inputs (not in the log): %s\n", orNone(out.Estimated))
	}

	if check {
		fmt.Fprintln(w, "\ndecisions against the planner over the log's topology (float32 sum, pipe ops 1):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  line\tcount\tcoll\tbytes\tmodel bytes\tNCCL\tplanner\tplanner us\t")
		agree, checked := 0, 0
		for _, c := range checks {
			planned, us, coll := "-", "-", c.CollName
			if coll == "" {
				coll = "-"
			}
			mark := ""
			if c.Skipped != "" {
				mark = "not checked: " + c.Skipped
			} else {
				checked++
				planned, us = c.Planned.Algo.String()+"/"+c.Planned.Proto.String(), fmt.Sprintf("%.2f", c.PlannedUS)
				if c.Agree {
					agree++
					mark = "agree"
				} else {
					mark = "DIFFER"
				}
			}
			fmt.Fprintf(tw, "  %d\t%d\t%s\t%d\t%d\t%s/%s\t%s\t%s\t%s\n", c.Line, c.Count, coll, c.Bytes, c.NBytes,
				c.Algo, c.Proto, planned, us, mark)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(w, "the planner picks NCCL's cell at %d of %d distinct decisions (%d not checked)\n", agree, checked, len(checks)-checked)
		if lg.Table != nil {
			ok := 0
			var differ []string
			for _, c := range cells {
				if c.Agree {
					ok++
				} else {
					differ = append(differ, fmt.Sprintf("%s %.1f/%.1f vs %.2f/%.2f", c.Cell, c.LoggedLatUS, c.LoggedBWGBps, c.LatUS, c.BWGBps))
				}
			}
			fmt.Fprintf(w, "model table: %d of %d usable cells agree with the planner's to the printed precision\n", ok, len(cells))
			for _, d := range differ {
				fmt.Fprintf(w, "  differ: %s (NCCL lat/bw vs planner)\n", d)
			}
		}
	}
	if len(lg.Problems) > 0 {
		fmt.Fprintln(w, "\nlines not read:")
		for _, p := range lg.Problems {
			fmt.Fprintf(w, "  %s\n", p.Error())
		}
	}
	return nil
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func nodesWord(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// oneLine words an error on one line: a package's "calibrate: " prefix dropped, the lines of a
// Problems list joined with "; ".
func oneLine(err error) string {
	return strings.ReplaceAll(strings.TrimPrefix(err.Error(), "calibrate: "), "\n", "; ")
}
