package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/internal/outpath"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/tables"
)

// topoFlags are the flags that choose a topology, its env filters and the tuner plugin.
type topoFlags struct {
	node, table, topology string
	fabric                string
	nodes, gpn            int
	algo, proto           string
	noOverlay             bool
	tuner                 tunerFlags
}

func (f *topoFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.node, "node", "", "embedded node table (see 'planner tables'), e.g. h100")
	fs.StringVar(&f.table, "table", "", "node table file (TOML) instead of an embedded one")
	fs.IntVar(&f.nodes, "nodes", 1, "node count with --node or --table")
	fs.StringVar(&f.fabric, "fabric", "", "with --node or --table: fabric table (an embedded name, see 'planner tables', or a FILE.toml) giving the inter-node inputs above 1 node")
	fs.IntVar(&f.gpn, "gpus-per-node", 0, "with --node or --table: ranks per node instead of the table's gpus_per_node (the table's graphs, N ranks per node; a fitted cell applies at its own shape only)")
	fs.StringVar(&f.topology, "topology", "", "topology file (TOML, the schema of design/topology-example.toml)")
	fs.StringVar(&f.algo, "algo", "", "NCCL_ALGO filter; wins over the topology's [env] and the process environment")
	fs.StringVar(&f.proto, "proto", "", "NCCL_PROTO filter; wins over the topology's [env] and the process environment")
	fs.BoolVar(&f.noOverlay, "no-overlay", false, "with --node or --table: plan with the node table alone, without its fitted overlay NAME.fit.toml")
	f.tuner.register(fs)
}

// setup is a built topology with what explains it.
type setup struct {
	topo      capabilities.Topology
	source    string   // "node h100 x2", "topology FILE"
	estimated []string // estimated inputs of the node table, or the topology file's "# estimate" keys
	node      *tables.Node
	embedded  bool           // node is an embedded table (--node), so its overlay is too
	noOverlay bool           // --no-overlay: node is the table alone
	fabric    *tables.Fabric // --fabric: composed into node (tables.WithFabric); nil when none
	tuner     *plugin.Client // nil: no tuner
	assumed   assumed
}

// assumed is what a topology built from a node table took for granted: its ranks per node and
// where they came from, and the [scale.N] whose graphs it used.
type assumed struct {
	gpn       int
	gpnSource string // "table", "flag" or "topology"
	gpnText   string // "8 (h100.toml's gpus_per_node)"
	scale     string // the [scale.N] key; "" for a topology file
	standsIn  bool   // scale is not the node count's own
	graphs    string // "scale 4 stands in for 4096 nodes (no [scale.4096])"
}

// assumedLine is what map and compare print after "assumed: ": "gpus per node 8 (h100.toml's
// gpus_per_node); graphs: scale 4 stands in for 4096 nodes (no [scale.4096])".
func (s *setup) assumedLine() string {
	return fmt.Sprintf("gpus per node %s; graphs: %s", s.assumed.gpnText, s.assumed.graphs)
}

// assume describes the shape of s's topology: for a node table, its ranks per node (gpnFlag, else
// the table's) and the scale whose graphs stood in (capabilities.NodeScaleKey).
func assume(s *setup, gpnFlag int) assumed {
	if s.node == nil {
		return assumed{gpn: s.topo.LocalRanks, gpnSource: "topology",
			gpnText: fmt.Sprintf("%d (the topology file's local_ranks)", s.topo.LocalRanks), graphs: "the topology file's"}
	}
	a := assumed{gpn: s.node.Node.GPUsPerNode, gpnSource: "table",
		gpnText: fmt.Sprintf("%d (%s's gpus_per_node)", s.node.Node.GPUsPerNode, filepath.Base(s.node.File))}
	if gpnFlag > 0 {
		a.gpn, a.gpnSource = gpnFlag, "flag"
		a.gpnText = fmt.Sprintf("%d (--gpus-per-node; the table says %d)", gpnFlag, s.node.Node.GPUsPerNode)
	}
	nodes := s.topo.NNodes
	a.scale = capabilities.NodeScaleKey(nodes)
	a.graphs = fmt.Sprintf("scale %s (%s)", a.scale, plural(nodes, "node"))
	if a.scale != strconv.Itoa(nodes) {
		a.standsIn = true
		a.graphs = fmt.Sprintf("scale %s stands in for %s (no [scale.%d])", a.scale, plural(nodes, "node"), nodes)
	}
	return a
}

// build resolves the topology: a topology file, or a node table at --nodes; then env from the
// process, overridden by the file's [env], overridden by --algo/--proto.
func (f *topoFlags) build(fs *flag.FlagSet) (*setup, error) {
	set := 0
	for _, s := range []string{f.node, f.table, f.topology} {
		if s != "" {
			set++
		}
	}
	if set != 1 {
		return nil, usagef("give exactly one of --node, --table or --topology")
	}
	nodesGiven, gpnGiven := false, false
	fs.Visit(func(fl *flag.Flag) {
		nodesGiven = nodesGiven || fl.Name == "nodes"
		gpnGiven = gpnGiven || fl.Name == "gpus-per-node"
	})
	s := &setup{}
	var err error
	switch {
	case f.topology != "":
		if nodesGiven {
			return nil, usagef("--nodes applies to --node or --table, not --topology (set n_nodes in the file)")
		}
		if gpnGiven {
			return nil, usagef("--gpus-per-node applies to --node or --table, not --topology (set n_ranks and local_ranks in the file)")
		}
		if f.noOverlay {
			return nil, usagef("--no-overlay applies to --node or --table, not --topology (a topology file has no overlay)")
		}
		if f.fabric != "" {
			return nil, usagef("--fabric applies to --node or --table, not --topology (set the graphs' inter-node values in the file)")
		}
		if s.topo, s.estimated, err = capabilities.LoadTopologyEstimates(f.topology); err != nil {
			return nil, usageError{err}
		}
		s.source = "topology " + f.topology
	default:
		if f.nodes < 1 {
			return nil, usagef("--nodes %d: must be at least 1", f.nodes)
		}
		if gpnGiven && f.gpn < 1 {
			return nil, usagef("--gpus-per-node %d: must be at least 1", f.gpn)
		}
		s.node, err = loadNode(f.node, f.table, f.noOverlay)
		s.embedded, s.noOverlay = f.node != "", f.noOverlay
		if err != nil {
			return nil, usageError{err}
		}
		if s.node, s.fabric, err = withFabric(s.node, f.fabric); err != nil {
			return nil, err
		}
		if s.topo, err = capabilities.FromNodeShape(s.node, f.nodes, f.gpn); err != nil {
			return nil, usageError{err}
		}
		s.source = fmt.Sprintf("node %s x%d", s.node.Name, f.nodes)
		if s.fabric != nil {
			s.source += " fabric " + s.fabric.Name
		}
		s.estimated = usedEstimates(s.node.Estimated(), capabilities.NodeScaleKey(f.nodes))
	}
	s.assumed = assume(s, f.gpn)
	var flags capabilities.Env
	if f.algo != "" {
		flags.Algo = capabilities.Setting{Value: f.algo, Source: capabilities.SourceFlag}
	}
	if f.proto != "" {
		flags.Proto = capabilities.Setting{Value: f.proto, Source: capabilities.SourceFlag}
	}
	flags.Overlay(s.topo.Env)
	flags.Overlay(capabilities.EnvFromProcess(os.LookupEnv))
	s.topo.Env = flags
	if s.tuner, err = f.tuner.client(fs.Output()); err != nil {
		return nil, err
	}
	return s, nil
}

// loadNode loads the embedded table name or else the table file, with its fitted overlay unless
// noOverlay.
func loadNode(name, file string, noOverlay bool) (*tables.Node, error) {
	switch {
	case name != "" && noOverlay:
		return tables.LoadBase(name)
	case name != "":
		return tables.Load(name)
	case noOverlay:
		return tables.LoadFileBase(file)
	}
	return tables.LoadFile(file)
}

// withFabric composes the fabric table named by --fabric (an embedded name or a FILE.toml) into
// the node table n (tables.WithFabric); with name "" it returns n unchanged. Errors are usage errors
// naming the fabric file and key.
func withFabric(n *tables.Node, name string) (*tables.Node, *tables.Fabric, error) {
	if name == "" {
		return n, nil, nil
	}
	f, err := tables.ResolveFabric(name)
	if err != nil {
		return nil, nil, usagef("--fabric: %v", err)
	}
	c, err := tables.WithFabric(n, f)
	if err != nil {
		return nil, nil, usagef("--fabric: %v", err)
	}
	return c, f, nil
}

// fabricLine is what the commands print after "fabric: ": the fabric file and where it applied.
func fabricLine(f *tables.Fabric, nNodes int) string {
	if nNodes <= 1 {
		return f.File + ": not applied (1 node: no inter-node hop)"
	}
	return f.File + ": inter-node bw_inter, type_inter, latency_inter and net_device_type (" + f.Fabric.Description + ")"
}

// overlayLine says what became of the node table's fitted overlay, for the commands that print
// it in a header (map, compare, after "overlay: ") or on stderr (query, compile): describeOverlay
// of the planner's overlay; "" when none applied.
func (s *setup) overlayLine(pl *planner.Planner) string {
	ov := pl.Overlay()
	if ov == nil || ov.File == "" {
		return ""
	}
	return describeOverlay(ov, s.embedded)
}

// describeOverlay is what explain prints after "overlay: ": the file, whether it is embedded, how
// many fitted cells applied, and which did not and why.
func describeOverlay(ov *planner.Overlay, embedded bool) string {
	var b strings.Builder
	b.WriteString(ov.File)
	if embedded {
		b.WriteString(" (embedded)")
	}
	n := ov.Applied + len(ov.Skipped)
	if n == 0 {
		b.WriteString(": no fitted cell at this node count")
		return b.String()
	}
	fmt.Fprintf(&b, ": %d of %d fitted cells applied", ov.Applied, n)
	if note := ov.Note(); note != "" {
		_, rest, _ := strings.Cut(note, " not applied: ")
		b.WriteString("; not applied: " + rest)
	}
	return b.String()
}

// planner builds the planner over the topology, with what the node table implies (node.PlannerConfig:
// its constants, corrections and fitted cells at this node count) and the tuner plugin when one
// was given (its Init may replace the model; see plugin.Client.Planner).
func (s *setup) planner() (*planner.Planner, error) {
	var cfg planner.Config
	if s.node != nil {
		var err error
		if cfg, err = node.PlannerConfig(s.node, &s.topo); err != nil {
			return nil, usageError{err}
		}
	}
	var pl *planner.Planner
	var err error
	if s.tuner != nil {
		pl, err = s.tuner.Planner(context.Background(), &s.topo, cfg)
	} else {
		pl, err = planner.New(&s.topo, cfg)
	}
	if err != nil {
		return nil, usageError{err}
	}
	return pl, nil
}

// classFlags are the flags of one query class and size.
type classFlags struct {
	coll, op, dtype, bytes string
	pipeOps                int
	regBuff                bool
}

func (c *classFlags) register(fs *flag.FlagSet, withBytes bool) {
	fs.StringVar(&c.coll, "coll", "allreduce", "collective: broadcast reduce allgather reducescatter allreduce")
	fs.StringVar(&c.op, "op", "sum", "reduction op: sum prod min max avg premulsum (mulsum)")
	fs.StringVar(&c.dtype, "dtype", "float32", "element type (nccl-tests names accepted: half float double ...)")
	fs.IntVar(&c.pipeOps, "pipe-ops", 1, "numPipeOps")
	fs.BoolVar(&c.regBuff, "reg-buff", false, "send and receive buffers registered")
	if withBytes {
		fs.StringVar(&c.bytes, "bytes", "", "model nBytes (the full buffer for AllGather/ReduceScatter): 4096, 4K, 1MiB ...")
	}
}

func (c *classFlags) class() (planner.Class, error) {
	return parseClass(c.coll, c.op, c.dtype, c.pipeOps, c.regBuff)
}

func parseClass(coll, op, dtype string, pipeOps int, regBuff bool) (planner.Class, error) {
	var cls planner.Class
	var err error
	if cls.Coll, err = capabilities.ParseColl(coll); err != nil {
		return cls, usageError{err}
	}
	if cls.Op, err = capabilities.ParseOp(op); err != nil {
		return cls, usageError{err}
	}
	if cls.Dtype, err = capabilities.ParseDtype(dtype); err != nil {
		return cls, usageError{err}
	}
	if pipeOps < 1 {
		return cls, usagef("pipe ops %d: must be at least 1", pipeOps)
	}
	cls.PipeOps, cls.RegBuff = pipeOps, regBuff
	return cls, nil
}

func parseBytes(name, s string) (int64, error) {
	if s == "" {
		return 0, usagef("%s is required", name)
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, usagef("%s: %v", name, err)
	}
	return n, nil
}

// newFlagSet returns a flag set of planner NAME that never exits; parseFlags parses it quietly.
// Its output, stderr, is where commands log (a tuner's lines).
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses and rejects stray arguments: -h is a helpRequest, a bad flag or argument one
// usage error line.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseQuiet(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return flagError(fs.Name(), fmt.Errorf("unexpected argument %q", fs.Arg(0)))
	}
	return nil
}

// usedEstimates keeps the estimated inputs this topology reads: node facts, constants, corrections
// and the one scale its node count selects.
func usedEstimates(all []string, scale string) []string {
	var out []string
	for _, p := range all {
		if !strings.HasPrefix(p, "scale.") || strings.HasPrefix(p, "scale."+scale+".") {
			out = append(out, p)
		}
	}
	return out
}

// command is what explain, query and map share: the topology and class flags, parsed into a
// topology and a planner.
type command struct {
	fs *flag.FlagSet
	tf topoFlags
	cf classFlags
	// outFiles are the command's output file flags, checked right after parsing.
	outFiles []outFlag
}

// outFlag is an output file flag: its name and where its value lands.
type outFlag struct {
	name string
	path *string
}

// outputFile registers the string flag name as an output file: parse checks that it can be written
// (internal/outpath) before building anything.
func (c *command) outputFile(name, usage string) *string {
	p := c.fs.String(name, "", usage)
	c.outFiles = append(c.outFiles, outFlag{name, p})
	return p
}

func newCommand(name string, stderr io.Writer, withBytes bool) *command {
	c := &command{fs: newFlagSet(name, stderr)}
	c.tf.register(c.fs)
	c.cf.register(c.fs, withBytes)
	return c
}

// parse parses args and builds the topology, the default class and the planner. help is true
// when -h was asked for; err is then the helpRequest, which run prints.
func (c *command) parse(args []string) (s *setup, cls planner.Class, pl *planner.Planner, help bool, err error) {
	if err = parseFlags(c.fs, args); err != nil {
		var h helpRequest
		return nil, cls, nil, errors.As(err, &h), err
	}
	for _, o := range c.outFiles {
		if err = outpath.File("--"+o.name, *o.path); err != nil {
			return nil, cls, nil, false, usageError{err}
		}
	}
	if s, err = c.tf.build(c.fs); err != nil {
		return nil, cls, nil, false, err
	}
	if cls, err = c.cf.class(); err != nil {
		return nil, cls, nil, false, err
	}
	pl, err = s.planner()
	return s, cls, pl, false, err
}
