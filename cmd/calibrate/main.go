// Command calibrate fits the cost model's per-cell latency and bandwidth to measured sweeps
// (nccl-tests or collbench output) and writes the fitted overlay NAME.fit.toml that the planner
// applies over the node table, with a report of the fit.
//
//	calibrate --node NAME --sweeps DIR|MANIFEST|FILE [--nodes N] [--gpus-per-node N | --topology FILE] [--half ip|oop] [--out FILE] [--json] [--holdout K]
//	calibrate --node NAME --run [--repeat K] [--quick] ...
//	calibrate list SWEEPS [--json]
//	calibrate nccl-log LOG [--json] [--topology-out FILE] [--check-decisions]
//
// list shows what the fit reads of sweeps, row by row, and why anything is dropped (list.go);
// nccl-log reads NCCL's own log: its TUNING decisions, its model table and its GRAPH lines as a
// topology file (nccllog.go).
//
// Besides the per-cell fit it fits per-bucket bandwidth corrections where the alpha-beta form cannot
// follow the data (calibrate.FitCorrected; --no-corrections to skip) and writes them to the overlay's
// [corrections]. With --run --repeat K each pinned sweep runs K times, in K rounds over all the
// sweeps, and per size the minimum time is kept (the sweep file's preamble and the manifest's
// note say so).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"time"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/internal/cmdline"
	"github.com/collplan/collplan/internal/configfile"
	"github.com/collplan/collplan/internal/outpath"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// usageError marks bad input: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(os.Stderr, err))
}

// exitCode prints err's line to stderr, prefixed "calibrate: " once (the calibrate package's
// errors already start with it), and returns the status: 0 for nil, 2 for bad input, 1 otherwise.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, cmdline.ErrorLine("calibrate", err))
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// doc is the head of -h, above the flags.
const doc = `usage: calibrate --node NAME (--sweeps DIR|MANIFEST|FILE | --dumps DIR|FILE | --run [--quick] | --check DIR) [flags]
       calibrate list SWEEPS [--json]     (what the fit reads of SWEEPS, row by row; list -h)
       calibrate nccl-log LOG [--json] [--topology-out FILE] [--check-decisions]  (nccl-log -h)

Fits the cost model's per-cell latency and bandwidth (and per-bucket bandwidth corrections) to
measured sweeps, nccl-tests or collbench tables, and writes the fitted overlay NAME.fit.toml that
planner, collbench and the tuner plugins apply over the node table, with a report of the fit.
--run measures the sweeps first with collbench (every legal pinned cell and the free choice);
a cell is swept where the prior finds it legal and the engine runs it at the run's shape
(engine.PinError, float sum): Ring and Tree, NVLS on one node (--np 2, or --np 4 --gpus-per-node
4), NVLS_TREE on 2+ nodes of 2+ (--np 4 --gpus-per-node 2), PAT at one rank per node
(--gpus-per-node 1), CollNetDirect (AllReduce, AllGather, ReduceScatter) and CollNetChain
(AllReduce) on 2+ nodes (collbench starts the aggregation endpoint); collbench pins each by
NCCL_ALGO's name;
--dumps reads the profiler dumps of collplan's NCCL plugin (docs/profile-dump.md; a *.jsonl file or
a directory of them, alone or beside --sweeps): each (collective, cell, size) a job ran is a point
of the cell NCCL ran, at its median measured time (the kernel channels' GPU span), so a training
job's own collectives calibrate the next job's table; the dumps fix the fit's shape (their nodes
and ranks), and every dump must be of that one shape.
--check DIR evaluates the overlay at --out against the sweeps in DIR without refitting. Output
paths (--out, --svg, --sweeps-out) are checked before any work.

Scoring (the report, --check): every sweep is one run, pinned or not; a size's best is its fastest
run. A pick is priced by the run pinned on its cell, else by an algorithm-only or protocol-only
run whose pin allows it ("via NCCL_ALGO=Ring", a proxy: NCCL chose within it); a free run is NCCL's
default, scored as the policy "nccl default", and never prices a pick. --check shows the prior's
and the fit's prediction error on pinned points (the cell) and on envelope points (the least time
over the cells a pin allows). The fit and --check read the same --half of every row.

The prior is the node table alone, without the fitted overlay beside it (so --no-overlay is not
needed here), unless --prior names an overlay to apply over it; --fabric NAME|FILE composes a
fabric table into the prior (its inter-node inputs above 1 node, the node table's intra-node
ones); the report names the prior and the fabric. The
overlay goes to NAME.fit.toml in the working directory unless --out names a path: nothing is
written into tables/ (or beside any table file, where it would overlay that table) unless --out
says so. --run measures collplan's CPU engine, so it refuses a GPU node table unless --force.

Pinned sweeps (one cell) are fitted first; partial and free sweeps then fit only the cells no
pinned sweep measured, among those their own pinned sweeps do not show slower than the point (by
over 3 %; a point left with none is a warning, not fitted), from 3 starts. Those cells are
"inferred": applied in the overlay and tagged so, never "measured", and the report lists the
fitted picks that land on them ("unmeasured pick: ...").

A fit is at one shape, nodes x ranks per node: --nodes (else the sweeps') x the table's
gpus_per_node, or --gpus-per-node N, or --topology FILE's. A sweep's shape comes from its rank
lines, else its manifest entry, else --gpus-per-node, else it is an error; one at the fit's node
count but of other ranks per node is an error naming both shapes. The overlay's cells record the
shape and the planner applies them only there.
`

// run fits one node table at one node count and writes the overlay and the report; with --run it
// measures the sweeps first, with --check it evaluates an existing overlay instead of fitting.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && subcommands[args[0]] != nil {
		return subcommands[args[0]](ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("calibrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	node := fs.String("node", "", "node table: an embedded name (h200) or a TOML file")
	sweeps := fs.String("sweeps", "", "directory of sweeps (with an optional sweeps.toml), a manifest (*.toml) or one sweep file")
	dumps := fs.String("dumps", "", "profiler dumps of collplan's NCCL plugin (one *.jsonl, or a directory of them; docs/profile-dump.md): every collective a job ran, a point of the cell NCCL ran; alone or beside --sweeps")
	nodes := fs.Int("nodes", 0, "node count of the sweeps (default: what the sweeps say)")
	gpnFlag := fs.Int("gpus-per-node", 0, "ranks per node to fit at: the topology is built with N ranks per node (default: the table's gpus_per_node; a sweep of another shape is an error)")
	topoFile := fs.String("topology", "", "topology file (planner --topology's, e.g. from nccl-log --topology-out) to fit on instead of the one --node's table gives; --node still names the table the overlay is for")
	out := fs.String("out", "", "overlay to write (--check: to read) (default NAME.fit.toml in the working directory)")
	fabric := fs.String("fabric", "", "fabric table (an embedded name, see 'planner tables --fabrics', or a FILE.toml) giving the prior's inter-node inputs above 1 node")
	prior := fs.String("prior", "", "an overlay (NAME.fit.toml) applied over the node table as the prior (default: the table alone, without its overlay)")
	force := fs.Bool("force", false, "with --run: measure even for a GPU node table (collbench runs collplan's CPU engine, whose numbers are not the GPU's)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	holdout := fs.Int("holdout", 0, "hold out every K-th measured size from the fit and report the error on them (0: none)")
	date := fs.String("date", time.Now().UTC().Format("2006-01-02"), "provenance date")
	svg := fs.String("svg", "", "write an SVG plot: measured points and fitted (solid) and prior (dashed) curves per cell")
	check := fs.String("check", "", "evaluate the overlay at --out against the sweeps in DIR without refitting (with --run: measure them into DIR first)")
	doRun := fs.Bool("run", false, "run collbench sweeps of every pinned cell legal in the prior that the engine runs at this shape (--np, --gpus-per-node) and the free choice here, then fit them")
	quick := fs.Bool("quick", false, "with --run: a small sweep for CI (AllReduce, 8 B..1 MiB factor 4, -n 5 -w 2, inproc)")
	np := fs.Int("np", 0, "with --run: ranks (default: the table's gpus_per_node x --nodes)")
	sweepsOut := fs.String("sweeps-out", "", "with --run: directory for the sweeps and sweeps.toml (default: a new temp dir)")
	collbench := fs.String("collbench", "", "with --run: collbench binary (default: beside calibrate, then PATH)")
	noProgress := fs.Bool("no-progress", false, "with --run: no progress bar on stderr")
	transport := fs.String("transport", "shm", "with --run: collbench --transport (shm or inproc), or net: each node an emulated host (collbench --hosts NODES: network namespaces, TCP between them; root)")
	collList := fs.String("colls", "all", "with --run: collectives to sweep, comma-separated, or all")
	var minB, maxB int64 = 8, 16 << 20
	fs.Var(bytesize.Flag{V: &minB}, "min", "with --run: smallest size (K/M/G suffix) [8]")
	fs.Var(bytesize.Flag{V: &maxB}, "max", "with --run: largest size [16M]")
	factor := fs.Int64("factor", 2, "with --run: size step factor")
	iters := fs.Int("iters", 20, "with --run: collbench -n")
	warmup := fs.Int("warmup", 5, "with --run: collbench -w")
	repeat := fs.Int("repeat", 1, "with --run: run each pinned sweep K times, in K rounds over all the sweeps, and keep, per size, the minimum time (--quick: 1)")
	noCorr := fs.Bool("no-corrections", false, "fit latency and bandwidth per cell only, no per-bucket bandwidth corrections")
	holdoutNodes := fs.Int("holdout-nodes", 0, "with sweeps at several node counts: leave node count N out of the fit and report the prediction error there")
	predictNodes := fs.String("predict-nodes", "", "with sweeps at several node counts: also write the overlay's cells at these node counts (comma-separated), predicted by the fit")
	credit := fs.String("credit", calibrate.CreditEnvelope, "what a point of a free or partly pinned sweep measures: envelope (the fastest cell its pin allows) or model (the cell NCCL's model picks there, as the base table prices it; check the table against the machine with calibrate nccl-log --check-decisions)")
	halfFlag := fs.String("half", "ip", "the half of every row to fit and score: ip (in place, as PyTorch runs) or oop (out of place)")
	if err := cmdline.Parse(fs, args, "calibrate"); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			_, err = io.WriteString(stdout, cmdline.Usage(fs, doc))
			return err
		}
		return usageError{err}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *quick {
		def := func(name string, apply func()) {
			if !set[name] {
				apply()
			}
		}
		def("colls", func() { *collList = "allreduce" })
		def("max", func() { maxB = 1 << 20 })
		def("factor", func() { *factor = 4 })
		def("iters", func() { *iters = 5 })
		def("warmup", func() { *warmup = 2 })
		def("transport", func() { *transport = "inproc" })
		def("repeat", func() { *repeat = 1 })
	}
	switch {
	case fs.NArg() > 0:
		return usageError{cmdline.Hint("calibrate", fmt.Errorf("unexpected argument %q", fs.Arg(0)))}
	case *node == "":
		return usagef("--node is required")
	case !*doRun && (set["quick"] || set["np"] || set["sweeps-out"] || set["collbench"] || set["transport"] || set["colls"] ||
		set["min"] || set["max"] || set["factor"] || set["iters"] || set["warmup"] || set["repeat"]):
		return usagef("--quick, --np, --sweeps-out, --collbench, --transport, --colls, --min, --max, --factor, --iters, --warmup and --repeat need --run")
	case *doRun && *sweeps != "":
		return usagef("--run measures its own sweeps; drop --sweeps")
	case *dumps != "" && (*doRun || *check != ""):
		return usagef("--dumps is fitted; --run and --check measure or evaluate sweeps: drop one")
	case !*doRun && *force:
		return usagef("--force is for --run (measuring a GPU node table with the CPU engine)")
	case *check != "" && *sweeps != "":
		return usagef("--check DIR names the sweeps to evaluate; drop --sweeps")
	case !*doRun && *sweeps == "" && *check == "" && *dumps == "":
		return usagef("--sweeps is required (or --dumps, --run, or --check DIR)")
	case *doRun && *check != "" && set["sweeps-out"]:
		return usagef("with --run --check DIR the sweeps go to DIR; drop --sweeps-out")
	case *holdout < 0 || *holdout == 1:
		return usagef("--holdout %d: want 0 (none) or K >= 2", *holdout)
	case *check != "" && *holdout != 0:
		return usagef("--holdout is for fitting; --check does not fit")
	case *transport != "shm" && *transport != "inproc" && *transport != "net":
		return usagef("--transport %q: want shm, inproc or net", *transport)
	case minB < 1 || maxB < minB || maxB > 1<<40:
		return usagef("--min %d --max %d: want 1 <= min <= max <= 1T", minB, maxB)
	case *factor < 2:
		return usagef("--factor %d: want at least 2", *factor)
	case *repeat < 1:
		return usagef("--repeat %d: want at least 1", *repeat)
	case *iters < 1 || *warmup < 0:
		return usagef("--iters %d --warmup %d: want iters >= 1, warmup >= 0", *iters, *warmup)
	case *np < 0:
		return usagef("--np %d: must be positive", *np)
	case set["gpus-per-node"] && *gpnFlag < 1:
		return usagef("--gpus-per-node %d: must be at least 1", *gpnFlag)
	case *topoFile != "" && *doRun:
		return usagef("--topology describes a machine to fit; --run measures collplan's CPU engine at the table's shape: drop one")
	case *topoFile != "" && set["gpus-per-node"]:
		return usagef("--gpus-per-node applies to --node's table, not --topology (set n_ranks and local_ranks in the file)")
	}
	half, err := calibrate.ParseHalf(*halfFlag)
	if err != nil {
		return usagef("--half %q: want oop or ip", *halfFlag)
	}
	if *credit != calibrate.CreditEnvelope && *credit != calibrate.CreditModel {
		return usagef("--credit %q: want %s or %s", *credit, calibrate.CreditEnvelope, calibrate.CreditModel)
	}
	n, pn, err := loadTables(*node, *prior)
	if err != nil {
		return err
	}
	var fab *tables.Fabric
	if *fabric != "" { // the prior's inter-node inputs; the overlay is still written over n
		if fab, err = tables.ResolveFabric(*fabric); err != nil {
			return usagef("--fabric: %v", err)
		}
		if pn, err = tables.WithFabric(pn, fab); err != nil {
			return usagef("--fabric: %v", err)
		}
	}
	if *doRun && !n.Node.IsCPU() && !*force {
		return usagef("--run measures collplan's CPU engine, not the GPUs of %s (gpu %q): the fit would give them the CPU's numbers; fit that GPU's own sweeps with --sweeps, or pass --force", n.File, n.Node.GPU)
	}
	if *out == "" {
		*out = n.Name + ".fit.toml" // in the working directory; checkOutputs keeps it off a table
	}
	// Inputs are checked first, then every output, then the work starts.
	checkOut := func() error {
		if err := checkOutputs(*out, !set["out"], *check, *svg, *sweepsOut, *doRun); err != nil {
			return err
		}
		return checkOldOverlay(*out, *check, stderr)
	}
	if *doRun {
		gpn := n.Node.GPUsPerNode
		if *gpnFlag > 0 {
			gpn = *gpnFlag
		}
		if *np == 0 {
			*np = gpn * max(*nodes, 1)
		}
		if gpn < 1 || *np%gpn != 0 {
			return usagef("--np %d: want a multiple of the ranks per node, %d (%s)", *np, gpn, gpnFrom(n, *gpnFlag))
		}
		nn := *np / gpn
		if *nodes != 0 && *nodes != nn {
			return usagef("--np %d is %d nodes of %d ranks, not --nodes %d", *np, nn, gpn, *nodes)
		}
		*nodes = nn
		colls, err := parseColls(*collList)
		if err != nil {
			return err
		}
		_, _, pl, err := priorPlanner(pn, nn, gpn, nil)
		if err != nil {
			return err
		}
		menus, err := calibrate.Menus(ctx, pl)
		if err != nil {
			return err
		}
		specs := planSweeps(menus, colls, *check == "", *np, gpn)
		if len(specs) == 0 {
			return usagef("no cell of %s at %d nodes x %d ranks per node is both legal and run by the engine", *collList, nn, gpn)
		}
		bin, err := findCollbench(*collbench)
		if err != nil {
			return err
		}
		if err := checkOut(); err != nil {
			return err
		}
		dir := *check
		if dir == "" {
			dir = *sweepsOut
		}
		if dir == "" {
			if dir, err = os.MkdirTemp("", "calibrate-sweeps-"); err != nil {
				return err
			}
		}
		rpn := 0
		if nn > 1 {
			rpn = gpn
		}
		var bar io.Writer
		if !*noProgress && isTerminal(stderr) {
			bar = stderr
		}
		fmt.Fprintf(stderr, "calibrate: running %d collbench sweeps (%d ranks, %s, %d..%d B factor %d, -n %d -w %d) into %s\n",
			len(specs), *np, *transport, minB, maxB, *factor, *iters, *warmup, dir)
		if *repeat > 1 {
			fmt.Fprintf(stderr, "calibrate: each pinned sweep runs %d times; per size the minimum time is kept\n", *repeat)
		}
		start := time.Now()
		sc := sweepConfig{collbench: bin, np: *np, rpn: rpn, nodes: nn, gpn: gpn, transport: *transport,
			minB: minB, maxB: maxB, fact: *factor, iters: *iters, warmup: *warmup, repeat: *repeat, half: half}
		if err := runSweeps(ctx, sc, specs, dir, bar); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "calibrate: sweeps done in %s: %s (with %s)\n", time.Since(start).Round(100*time.Millisecond), dir, calibrate.ManifestName)
		*sweeps = dir
	}
	if *check != "" {
		*sweeps = *check
	}
	var sw []*calibrate.Sweep
	if *sweeps != "" {
		var probs []calibrate.Problem
		if sw, probs, err = calibrate.LoadSweeps(*sweeps); err != nil {
			return usageError{err}
		}
		for _, p := range probs {
			fmt.Fprintln(stderr, "calibrate: warning:", p.Error())
		}
	}
	var dumpPts []calibrate.Point
	if *dumps != "" {
		ds, err := loadDumps(*dumps)
		if err != nil {
			return err
		}
		dn, drpn, err := dumpShape(ds)
		if err != nil {
			return err
		}
		switch {
		case *nodes != 0 && *nodes != dn:
			return usagef("--dumps %s: the communicator ran on %d nodes, not --nodes %d", dumpNames(ds), dn, *nodes)
		case len(sweepNodeCounts(sw)) > 1 || (len(sw) > 0 && sweepNodeCounts(sw)[0] != dn):
			return usagef("--dumps ran on %d nodes and the sweeps on %s: fit one node count at a time (--nodes)", dn, joinInts(sweepNodeCounts(sw)))
		case *topoFile == "" && !set["gpus-per-node"] && n.Node.GPUsPerNode != drpn:
			return usagef("--dumps %s: %d ranks per node, the table's gpus_per_node is %d: give --gpus-per-node %d", dumpNames(ds), drpn, n.Node.GPUsPerNode, drpn)
		case set["gpus-per-node"] && *gpnFlag != drpn:
			return usagef("--dumps %s: %d ranks per node, not --gpus-per-node %d", dumpNames(ds), drpn, *gpnFlag)
		}
		*nodes = dn
		var warn []string
		dumpPts, warn = dumpPoints(ds)
		for _, w := range warn {
			fmt.Fprintln(stderr, "calibrate: warning:", w)
		}
		if *sweeps == "" {
			*sweeps = *dumps // names the input in messages
		}
	}
	var fileTopo *capabilities.Topology
	if *topoFile != "" {
		t, _, err := capabilities.LoadTopologyEstimates(*topoFile)
		if err != nil {
			return usageError{err}
		}
		if *nodes != 0 && *nodes != t.NNodes {
			return usagef("--topology %s is %d nodes, not --nodes %d", *topoFile, t.NNodes, *nodes)
		}
		*nodes, fileTopo = t.NNodes, &t
	}
	if *nodes == 0 && (len(sweepNodeCounts(sw)) > 1 || *holdoutNodes != 0) {
		// Sweeps at several node counts are fitted together, through the model's structure.
		switch {
		case *check != "":
			return usagef("--check: the sweeps ran on %s nodes; evaluate one node count with --nodes N", joinInts(sweepNodeCounts(sw)))
		case *svg != "":
			return usagef("--svg: the sweeps ran on %s nodes; plot one node count with --nodes N", joinInts(sweepNodeCounts(sw)))
		case *holdout != 0:
			return usagef("--holdout %d: a fit across node counts holds out a node count (--holdout-nodes N), not sizes", *holdout)
		}
		rpn := n.Node.GPUsPerNode
		if *gpnFlag > 0 {
			rpn = *gpnFlag
		}
		predict, err := parseNodeList(*predictNodes)
		if err != nil {
			return err
		}
		pr := calibrate.Prior{Table: n.File, Overlay: *prior}
		if fab != nil {
			pr.Fabric = fab.File
		}
		return runAcross(ctx, acrossJob{n: n, pn: pn, prior: pr, sweeps: sw,
			rpn: rpn, gpnFlag: *gpnFlag, rpnFrom: gpnFrom(n, *gpnFlag),
			half: half, credit: *credit, out: *out, date: *date, holdout: *holdoutNodes, predict: predict, asJSON: *asJSON,
			checkOutputs: checkOut}, stdout, stderr)
	}
	if set["holdout-nodes"] || set["predict-nodes"] {
		return usagef("--holdout-nodes and --predict-nodes are for sweeps at several node counts fitted together (without --nodes)")
	}
	if *nodes == 0 {
		for _, s := range sw {
			if s.Nodes != 0 {
				*nodes = s.Nodes
			}
		}
		if *nodes == 0 {
			return usagef("%s: no sweep names its node count; give --nodes", *sweeps)
		}
	}
	if *nodes < 1 {
		return usagef("--nodes %d: must be at least 1", *nodes)
	}
	// The shape to fit at: the topology file's, else --gpus-per-node, else the table's; every
	// sweep at this node count must have run at it.
	shape := calibrate.Shape{Nodes: *nodes, RanksPerNode: n.Node.GPUsPerNode}
	shapeFrom := gpnFrom(n, *gpnFlag)
	var fix func(int) string // nil: --gpus-per-node N
	switch {
	case fileTopo != nil:
		shape.RanksPerNode, shapeFrom = fileTopo.LocalRanks, "the local_ranks of --topology "+*topoFile
		fix = func(rpn int) string {
			return fmt.Sprintf("fit it on a topology file with local_ranks = %d, or on --node's table with --gpus-per-node %d", rpn, rpn)
		}
	case *gpnFlag > 0:
		shape.RanksPerNode = *gpnFlag
	}
	for _, s := range sw {
		if !s.CollKnown || (s.Nodes != 0 && s.Nodes != *nodes) {
			continue // not fitted: Points says why
		}
		if _, err := calibrate.CheckShape(s, *gpnFlag, shape, shapeFrom, fix); err != nil {
			return usageError{err}
		}
	}
	topo, cfg, priorPl, err := priorPlanner(pn, *nodes, shape.RanksPerNode, fileTopo)
	if err != nil {
		return err
	}
	priorName := calibrate.Prior{Table: n.File, Overlay: *prior}
	if fab != nil {
		priorName.Fabric = fab.File
	}
	// Every cell a sweep's pin can make legal, priced; the pins decide which ones a point measures.
	menus, err := calibrate.PricedMenus(ctx, &topo, cfg)
	if err != nil {
		return err
	}
	pts, skipped, err := calibrate.Points(ctx, sw, &topo, cfg, calibrate.PointOptions{Half: half, Credit: *credit})
	if err != nil {
		return err
	}
	for _, p := range skipped {
		fmt.Fprintln(stderr, "calibrate: warning:", p.Error())
	}
	pts = append(pts, dumpPts...)
	if len(pts) == 0 {
		return usagef("%s: no valid measured point to fit at %d nodes", *sweeps, *nodes)
	}
	if !*doRun { // --run checked them before its sweeps
		if err := checkOut(); err != nil {
			return err
		}
	}
	if *check != "" {
		return checkOverlay(ctx, n, *out, *nodes, topo, priorName, priorPl, pts, *svg, *asJSON, stdout, stderr)
	}
	fitPts, held := splitHoldout(pts, *holdout)
	var (
		res  *calibrate.FitResult
		corr []calibrate.BucketCorrection
	)
	fcfg := cfg
	if *noCorr {
		if res, err = calibrate.Fit(menus, fitPts, calibrate.FitOptions{}); err != nil {
			return err
		}
	} else {
		cf, err := calibrate.FitCorrected(ctx, &topo, cfg, fitPts, calibrate.FitOptions{}, calibrate.CorrectionOptions{})
		if err != nil {
			return err
		}
		res, corr = cf.FitResult, cf.Corrections
		if len(corr) > 0 {
			fcfg.Factors = cf.Factors
		}
	}
	for _, p := range res.Problems { // envelope points every allowed cell of which was measured slower
		fmt.Fprintln(stderr, "calibrate: warning:", p.Error())
	}
	fcfg.Cells = res.Overrides()
	pricedFit, err := calibrate.PricedMenus(ctx, &topo, fcfg)
	if err != nil {
		return err
	}
	fitted, heldBack, err := fittedPlanner(ctx, &topo, fcfg, priorPl, stderr)
	if err != nil {
		return err
	}
	rep, err := calibrate.BuildReport(ctx, *nodes, priorPl, fitted, pricedFit, menus, res, fitPts, held)
	if err != nil {
		return err
	}
	rep.Prior = priorName
	rep.RanksPerNode = shape.RanksPerNode
	rep.AddCorrections(corr)
	rep.Half = half
	rep.Credit = *credit
	var svgData []byte
	if *svg != "" { // drawn before anything is written
		if svgData, err = renderSVG(pricedFit, menus, pts, fmt.Sprintf("calibrate %s, %d nodes: measured and fitted", n.Name, *nodes)); err != nil {
			return err
		}
	}

	in := calibrate.OverlayInput{Nodes: *nodes, RanksPerNode: shape.RanksPerNode, Date: *date, Credit: *credit}
	if in.Files, in.NCCLVersions, err = provenance(sw, fitPts); err != nil { // only the files that supplied fitted points
		return err
	}
	hadCorr := false
	var keepCorr []tables.CorrectionCell // an earlier overlay's rows of other shapes
	if old, err := configfile.Read(*out); err == nil {
		if in.Keep, err = calibrate.KeepFromOverlay(*out, old, *nodes, shape.RanksPerNode, n.Node.GPUsPerNode); err != nil {
			return usageError{err}
		}
		if hadCorr, keepCorr, err = calibrate.OverlayCorrections(*out, old, *nodes, shape.RanksPerNode); err != nil {
			return usageError{err}
		}
		if in.KeepFiles, err = calibrate.KeepProvenance(*out, old, *nodes, shape.RanksPerNode, len(in.Keep) > 0); err != nil {
			return usageError{err}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return usagef("the overlay to update: %v", err)
	}
	// The table's own [corrections] and the earlier overlay's rows of other shapes, with this
	// shape's fitted rows: the overlay's array replaces the table's, so it is written whole.
	if len(corr) > 0 || hadCorr {
		var existing []tables.CorrectionCell
		if pn.Corrections != nil { // the prior's, which the fitted multipliers apply to
			existing = pn.Corrections.Cell
		}
		in.Corrections = calibrate.TableCorrections(calibrate.MergeCorrections(existing, keepCorr), menus, corr, *nodes, shape.RanksPerNode)
	}
	var buf bytes.Buffer
	if err := calibrate.WriteOverlay(&buf, withoutCells(res, heldBack), in); err != nil {
		return err
	}
	// The overlay must load over its table before it is written.
	if _, err := tables.ApplyOverlay(n, *out, buf.Bytes()); err != nil {
		return fmt.Errorf("the fitted overlay does not load: %w", err)
	}
	if err := os.WriteFile(*out, buf.Bytes(), 0o644); err != nil {
		return err
	}
	written := withoutCells(res, heldBack)
	inferred := 0
	for c := range written.Fitted {
		if written.InferredCell(c) {
			inferred++
		}
	}
	fmt.Fprintf(stderr, "calibrate: wrote %s (%d cells fitted at %s from %d points, %d of them inferred from envelope sweeps only; %d bucket corrections)\n",
		*out, len(written.Fitted), shape, len(fitPts), inferred, len(corr))
	if svgData != nil {
		if err := os.WriteFile(*svg, svgData, 0o644); err != nil {
			return err
		}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(stdout)
}

// checkOutputs checks, before any work, every path the run will write (the overlay at out, the SVG,
// the sweeps' directory with --run) and, with --check, that the overlay to evaluate can be read.
// outDefault says out is the default, not the user's: it must not land beside a node table, whose
// overlay it would become (tables.LoadFile applies NAME.fit.toml beside NAME.toml).
func checkOutputs(out string, outDefault bool, check, svg, sweepsOut string, doRun bool) error {
	outFlag := "--out"
	if outDefault {
		outFlag = "--out (the default)"
		if table := strings.TrimSuffix(out, ".fit.toml") + ".toml"; check == "" && fileExists(table) {
			return usagef("%s %s: would overlay the table %s beside it; name the file with --out", outFlag, out, table)
		}
	}
	var errs []error
	if check != "" {
		if err := outpath.Readable(outFlag, out); err != nil {
			errs = append(errs, fmt.Errorf("--check: the overlay to evaluate: %w", err))
		}
	} else {
		errs = append(errs, outpath.File(outFlag, out))
	}
	errs = append(errs, outpath.File("--svg", svg))
	if doRun {
		if check != "" {
			errs = append(errs, outpath.Dir("--check", check))
		} else {
			errs = append(errs, outpath.Dir("--sweeps-out", sweepsOut))
		}
	}
	for _, err := range errs {
		if err != nil {
			return usageError{err}
		}
	}
	return nil
}

// loadTables loads the node table to fit, alone (an embedded name or a TOML file; never with the
// overlay beside it), and the prior: that table, or with --prior the overlay FILE applied over it.
func loadTables(name, prior string) (n, pn *tables.Node, err error) {
	if strings.HasSuffix(name, ".toml") {
		n, err = tables.LoadFileBase(name)
	} else {
		n, err = tables.LoadBase(name)
	}
	if err != nil {
		return nil, nil, usageError{err}
	}
	if prior == "" {
		return n, n, nil
	}
	if !tables.IsOverlayPath(prior) {
		return nil, nil, usagef("--prior %s: a node table; --prior takes an overlay (NAME.fit.toml) to apply over --node", prior)
	}
	data, err := configfile.Read(prior)
	if err != nil {
		return nil, nil, usagef("--prior: %v", err)
	}
	if pn, err = tables.ApplyOverlay(n, prior, data); err != nil {
		return nil, nil, usagef("--prior: %v", err)
	}
	return n, pn, nil
}

// checkOldOverlay checks, before any work, an overlay already at out that the fit will rewrite (its
// cells at other node counts are kept): one of another schema version is a usage error; one written
// before overlays had versions is migrated, which stderr says.
func checkOldOverlay(out, check string, stderr io.Writer) error {
	if check != "" {
		return nil
	}
	data, err := configfile.Read(out)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return usagef("the overlay to update: %v", err)
	}
	if _, err := tables.OverlayVersion(out, data); errors.Is(err, tables.ErrNoSchemaVersion) {
		fmt.Fprintf(stderr, "calibrate: %s has no schema_version (written before overlays had versions): rewritten at schema_version %d\n", out, tables.OverlaySchema)
	} else if err != nil {
		return usagef("the overlay to update: %v", err)
	}
	return nil
}

// gpnFrom says where the ranks per node of a fit come from, for the errors: the flag or the table.
func gpnFrom(n *tables.Node, flagGPN int) string {
	if flagGPN > 0 {
		return fmt.Sprintf("--gpus-per-node %d", flagGPN)
	}
	return fmt.Sprintf("%s's gpus_per_node", n.File)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// priorPlanner builds the topology, the planner configuration and the prior planner of table n at
// nodes nodes of rpn ranks each (capabilities.FromNodeShape), or on the topology file's topology
// when file is not nil: the table as every command plans with it (node.PlannerConfig), with the overlay
// --prior applied over it, if any; by default the table alone, so that a refit starts from the
// table and not from the fit it replaces.
func priorPlanner(n *tables.Node, nodes, rpn int, file *capabilities.Topology) (capabilities.Topology, planner.Config, *planner.Planner, error) {
	var topo capabilities.Topology
	var err error
	if file != nil {
		topo = *file
	} else if topo, err = capabilities.FromNodeShape(n, nodes, rpn); err != nil {
		return topo, planner.Config{}, nil, usageError{err}
	}
	cfg, err := node.PlannerConfig(n, &topo)
	if err != nil {
		return topo, cfg, nil, usageError{err}
	}
	prior, err := planner.New(&topo, cfg)
	if err != nil {
		return topo, cfg, nil, usageError{err}
	}
	return topo, cfg, prior, nil
}

// splitHoldout holds out every k-th distinct size (the k-th, 2k-th, ...); k = 0 holds out none.
func splitHoldout(pts []calibrate.Point, k int) (fit, held []calibrate.Point) {
	if k == 0 {
		return pts, nil
	}
	sizes := map[int64]bool{}
	for _, p := range pts {
		sizes[p.Bytes] = true
	}
	var ss []int64
	for s := range sizes {
		ss = append(ss, s)
	}
	sort.Slice(ss, func(i, j int) bool { return ss[i] < ss[j] })
	out := map[int64]bool{}
	for i, s := range ss {
		if (i+1)%k == 0 {
			out[s] = true
		}
	}
	for _, p := range pts {
		if out[p.Bytes] {
			held = append(held, p)
		} else {
			fit = append(fit, p)
		}
	}
	return fit, held
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// fileSHA256 returns the hex SHA-256 of the file at path, read as a stream.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
