package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/internal/outpath"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/tables"
)

// topoFlags are the flags that choose a topology, its env filters and the tuner plugin.
type topoFlags struct {
	node, table, topology string
	fabric                string
	nodes, gpn            int
	algo, proto           string
	noOverlay             bool
	nccl                  string
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
	fs.StringVar(&f.nccl, "nccl", "", "price as this NCCL release's model does: "+costmodel.SupportedReleases+" (default 2.30.7; docs/releases.md)")
	f.tuner.register(fs)
}

// setup is a built topology with what explains it (report.Setup) and the tuner plugin chosen
// (nil: none).
type setup struct {
	*report.Setup
	tuner *plugin.Client
}

// spec is the report.Spec the flags choose.
func (f *topoFlags) spec(fs *flag.FlagSet) report.Spec {
	sp := report.Spec{Node: f.node, Table: f.table, Topology: f.topology, Fabric: f.fabric, Nodes: f.nodes,
		GPUsPerNode: f.gpn, Algo: f.algo, Proto: f.proto, NoOverlay: f.noOverlay}
	fs.Visit(func(fl *flag.Flag) {
		sp.NodesGiven = sp.NodesGiven || fl.Name == "nodes"
		sp.GPUsPerNodeGiven = sp.GPUsPerNodeGiven || fl.Name == "gpus-per-node"
	})
	return sp
}

// build resolves the topology (report.Build: a topology file, or a node table at --nodes; then env
// from the process, overridden by the file's [env], overridden by --algo/--proto) and the tuner.
func (f *topoFlags) build(fs *flag.FlagSet) (*setup, error) {
	sp := f.spec(fs)
	var err error
	if sp.Release, err = parseRelease("--nccl", f.nccl); err != nil {
		return nil, err
	}
	rs, err := report.Build(sp, os.LookupEnv)
	if err != nil {
		return nil, usageError{err}
	}
	s := &setup{Setup: rs}
	if s.tuner, err = f.tuner.client(fs.Output()); err != nil {
		return nil, err
	}
	return s, nil
}

// withFabric is report.WithFabric with its errors as usage errors.
func withFabric(n *tables.Node, name string) (*tables.Node, *tables.Fabric, error) {
	c, f, err := report.WithFabric(n, name)
	if err != nil {
		return nil, nil, usageError{err}
	}
	return c, f, nil
}

// planner builds the planner over the topology (report.Setup.Planner) with the tuner plugin when
// one was given.
func (s *setup) planner() (*planner.Planner, error) {
	pl, err := s.Setup.Planner(context.Background(), s.tuner)
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

// parseRelease parses the NCCL release flag name ("" is the zero value: 2.30.7, not named in the
// outputs); an unknown or unsupported release is a usage error naming the flag and the range.
func parseRelease(name, s string) (costmodel.Release, error) {
	if s == "" {
		return costmodel.Release{}, nil
	}
	r, err := costmodel.ParseRelease(s)
	if err != nil {
		return r, usagef("%s: %v", name, err)
	}
	return r, nil
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
	s, cls, pl, err = c.built()
	return s, cls, pl, false, err
}

// built is parse after the flags: the output files checked, then the topology, the default class
// and the planner built.
func (c *command) built() (s *setup, cls planner.Class, pl *planner.Planner, err error) {
	for _, o := range c.outFiles {
		if err = outpath.File("--"+o.name, *o.path); err != nil {
			return nil, cls, nil, usageError{err}
		}
	}
	if s, err = c.tf.build(c.fs); err != nil {
		return nil, cls, nil, err
	}
	if cls, err = c.cf.class(); err != nil {
		return nil, cls, nil, err
	}
	pl, err = s.planner()
	return s, cls, pl, err
}
