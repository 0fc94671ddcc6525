package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/internal/configfile"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/report"
)

// diffSideFlags are one side's flags of planner diff.
type diffSideFlags struct {
	table, overlay, tuner, tunerConfig string
	noOverlay                          bool
}

// runDiff is planner diff: two node tables or overlays, or one table under two tuners; every
// collective and node count where the pick changed, the size bands and the predicted time ratio.
func runDiff(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("diff", stderr)
	var a, b diffSideFlags
	for _, sd := range []struct {
		p    *diffSideFlags
		name string
	}{{&a, "a"}, {&b, "b"}} {
		fs.StringVar(&sd.p.table, sd.name, "", "side "+strings.ToUpper(sd.name)+": node table, an embedded NAME or a FILE.toml"+map[string]string{"a": " (required)", "b": " (default: the same as --a)"}[sd.name])
		fs.StringVar(&sd.p.overlay, sd.name+"-overlay", "", "side "+strings.ToUpper(sd.name)+": a fitted overlay FILE applied to the table instead of its own")
		fs.BoolVar(&sd.p.noOverlay, sd.name+"-no-overlay", false, "side "+strings.ToUpper(sd.name)+": the table alone, without its fitted overlay")
		fs.StringVar(&sd.p.tuner, sd.name+"-tuner", "none", "side "+strings.ToUpper(sd.name)+": tuner plugin, none, a NAME or a PATH")
		fs.StringVar(&sd.p.tunerConfig, sd.name+"-tuner-config", "", "side "+strings.ToUpper(sd.name)+": the tuner's configuration file")
	}
	colls := fs.String("coll", "all", "collectives, comma-separated, or all")
	dtype := fs.String("dtype", "float32", "element type")
	op := fs.String("op", "sum", "reduction op")
	pipeOps := fs.Int("pipe-ops", 1, "numPipeOps")
	minS := fs.String("min", "8", "smallest size")
	maxS := fs.String("max", "16G", "largest size")
	nodes := fs.String("nodes", "", "node counts, comma-separated (default 1, 2, 4 ... 4096 and the tables' scales)")
	fabric := fs.String("fabric", "", "fabric table (an embedded name or a FILE.toml) composed into both tables above 1 node")
	gpn := fs.Int("gpus-per-node", 0, "ranks per node for both tables instead of their gpus_per_node")
	algo := fs.String("algo", "", "NCCL_ALGO filter for both sides")
	proto := fs.String("proto", "", "NCCL_PROTO filter for both sides")
	asJSON := fs.Bool("json", false, "print the diff as one JSON object (the answer of POST /v1/diff)")
	node := fs.String("node", "", "the node table of both sides (an embedded NAME or a FILE.toml), for an upgrade check: the same as --a")
	ncclA := fs.String("nccl", "", "side A priced by this NCCL release's model ("+costmodel.SupportedReleases+"; default 2.30.7)")
	ncclB := fs.String("to", "", "side B priced by this NCCL release's model (default 2.30.7): planner diff --nccl 2.28 --to 2.30 --node h100 is the upgrade check")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *node != "" {
		if a.table != "" || b.table != "" {
			return usagef("--node names the table of both sides: give it or --a/--b, not both")
		}
		a.table = *node
	}
	if a.table == "" {
		return usagef("--a (or --node) is required")
	}
	var rels [2]costmodel.Release
	var err error
	if rels[0], err = parseRelease("--nccl", *ncclA); err != nil {
		return err
	}
	if rels[1], err = parseRelease("--to", *ncclB); err != nil {
		return err
	}
	if *ncclA != "" || *ncclB != "" { // a release diff names both sides' releases
		for i := range rels {
			if rels[i].IsZero() {
				rels[i] = costmodel.Latest
			}
		}
	}
	if b.table == "" {
		b.table = a.table
	}
	opt, err := diffOptions(*colls, *dtype, *op, *pipeOps, *minS, *maxS)
	if err != nil {
		return err
	}
	var sides [2]report.Side
	for i, sd := range []*diffSideFlags{&a, &b} {
		label := string(rune('A' + i))
		if sd.overlay != "" && sd.noOverlay {
			return usagef("--%s-overlay and --%s-no-overlay: give one", strings.ToLower(label), strings.ToLower(label))
		}
		var data []byte
		if sd.overlay != "" {
			if data, err = configfile.Read(sd.overlay); err != nil {
				return usagef("--%s-overlay: %v", strings.ToLower(label), err)
			}
		}
		n, name, err := report.SideTable(sd.table, sd.noOverlay, sd.overlay, data)
		if err != nil {
			return usagef("--%s: %v", strings.ToLower(label), err)
		}
		if n, _, err = withFabric(n, *fabric); err != nil {
			return err
		}
		tc, err := plugin.Open(plugin.Spec{Name: sd.tuner, Config: sd.tunerConfig}, io.Discard)
		if err != nil {
			return usagef("--%s-tuner: %v", strings.ToLower(label), err)
		}
		if tc != nil {
			openTuners.add(tc)
			name += " under tuner " + tc.Name()
		}
		if !rels[i].IsZero() {
			name += " (NCCL " + rels[i].String() + ")"
		}
		sides[i] = report.Side{Spec: report.Spec{Node: n.Name, Loaded: n, GPUsPerNode: *gpn, GPUsPerNodeGiven: *gpn != 0,
			Algo: *algo, Proto: *proto, Release: rels[i]}, Tuner: tc, Label: name}
	}
	if *nodes != "" {
		if opt.NodeCounts, err = intList("--nodes", *nodes); err != nil {
			return err
		}
	} else {
		opt.NodeCounts = report.DefaultNodeCounts(sides[0].Spec.Loaded, sides[1].Spec.Loaded)
	}
	d, err := report.NewDiff(ctx, sides[0], sides[1], opt)
	if err != nil {
		return usageError{err}
	}
	for _, r := range d.Rows {
		for i, pol := range []string{r.PolicyA, r.PolicyB} {
			if sides[i].Tuner != nil && pol != sides[i].Tuner.Name() && r.Error == "" {
				return usagef("tuner %s (side %c) failed for %s at %d nodes: the diff would score the built-in policy under its name",
					sides[i].Tuner.Name(), 'A'+i, r.Coll, r.Nodes)
			}
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	}
	return writeDiff(stdout, d)
}

// diffOptions parses the class and size flags of diff.
func diffOptions(colls, dtype, op string, pipeOps int, minS, maxS string) (report.DiffOptions, error) {
	var opt report.DiffOptions
	cls, err := parseClass("allreduce", op, dtype, pipeOps, false)
	if err != nil {
		return opt, err
	}
	opt.Class = cls
	if strings.EqualFold(colls, "all") {
		for c := capabilities.Coll(0); c < capabilities.NumColls; c++ {
			opt.Colls = append(opt.Colls, c)
		}
	} else {
		for _, s := range strings.Split(colls, ",") {
			c, err := capabilities.ParseColl(s)
			if err != nil {
				return opt, usagef("--coll: %v", err)
			}
			opt.Colls = append(opt.Colls, c)
		}
	}
	if opt.Min, err = parseBytes("--min", minS); err != nil {
		return opt, err
	}
	if opt.Max, err = parseBytes("--max", maxS); err != nil {
		return opt, err
	}
	if opt.Min < 1 || opt.Max < opt.Min {
		return opt, usagef("--min %d and --max %d: want 1 <= min <= max", opt.Min, opt.Max)
	}
	return opt, nil
}

// writeDiff prints the diff: one line per band where the picks differ.
func writeDiff(w io.Writer, d *report.Diff) error {
	fmt.Fprintf(w, "A = %s\nB = %s\n%s %s, pipe ops %d, %s .. %s\n", d.A, d.B, d.Dtype, d.Op, d.PipeOps,
		bytesize.Format(d.Min), bytesize.Format(d.Max))
	fmt.Fprintf(w, "the pick changed at %d of %d (collective, node count) pairs\n", d.Changed, d.Compared)
	if len(d.Rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "coll\tnodes\tranks A/B\tsizes\tA pick\tB pick\tB/A time\t")
	for _, r := range d.Rows {
		if r.Error != "" {
			fmt.Fprintf(tw, "%s\t%d\t%d/%d\t\t%s\t\t\t\n", r.Coll, r.Nodes, r.NRanksA, r.NRanksB, r.Error)
			continue
		}
		for _, b := range r.Bands {
			fmt.Fprintf(tw, "%s\t%d\t%d/%d\t%s .. %s\t%s\t%s\t%s .. %s\t\n", r.Coll, r.Nodes, r.NRanksA, r.NRanksB,
				bytesize.Format(b.Lo), bytesize.Format(b.Hi), b.A, b.B, ratioText(b.RatioLo), ratioText(b.RatioHi))
		}
	}
	return tw.Flush()
}

func ratioText(v report.F32) string {
	b, _ := v.MarshalJSON()
	if string(b) == "null" {
		return "-"
	}
	return fmt.Sprintf("%.3f", float32(v))
}
