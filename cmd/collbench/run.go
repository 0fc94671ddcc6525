package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/engine/transport/shm"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

const version = "0.1.0"

// ncclCode is the NCCL version whose semantics the engine follows (2.30.7), printed as nccl-tests
// prints its nccl-headers and nccl-library codes.
const ncclCode = 23007

// rendezvousTimeout bounds how long a rank waits for the others to show up.
var rendezvousTimeout = 30 * time.Second

// selfExe is the program the launcher starts as ranks (tests replace it).
var selfExe = os.Executable

// options are the parsed command line.
type options struct {
	serveCollNet string // --serve-collnet: only an aggregation endpoint (run refuses it with a collective)

	coll     costmodel.Coll
	program  string
	minBytes int64
	maxBytes int64
	stepF    int64
	stepB    int64
	iters    int
	warmup   int
	agg      int
	cycles   int
	check    int
	op       kernels.Op
	opName   string
	dt       kernels.Dtype
	dtName   string
	root     int
	perIter  bool
	average  int
	cpuTime  bool // -C: report CPU time instead of wall time
	stamps   bool // -S: a timestamp column

	// -d all and -o all: the types and ops to run, in nccl-tests' order (types outer); a single
	// name otherwise. op, opName, dt and dtName are the first combination's (bench.run moves
	// its own copy along).
	dtNames, opNames []string

	np        int
	maxNP     int           // --max-np (0: the host's limit, maxRanks)
	timeout   time.Duration // --timeout: the engine's watchdog
	rpn       int
	hosts     int  // --hosts: emulated hosts (hosts.go); 0: one host
	rankProcs bool // --rank-processes: with --hosts, each rank its own process (hostprocs.go)
	netHosts  int  // a launcher's job across hosts (launched.go): its hosts; 0: not one
	transport string
	device    string // --device: cpu (the engine on CPUs) or cuda (the GPU communicator)
	bindTo    string
	algo      string // NCCL_ALGO as given ("" when free)
	proto     string
	channels  int
	usePlan   bool
	noOverlay bool // plan with the cpu node table alone, without its fitted overlay
	buffers   planner.Buffers

	tuner tunerSpec // --tuner, --tuner-config, --tuner-timeout, --tuner-sha256
	// --ab A,B: live A/B of two policies (ab[0], ab[1]) on one communicator
	ab     []tunerSpec
	abRuns int
	abSeed uint64
}

var colls = map[string]struct {
	c    costmodel.Coll
	prog string
}{
	"allreduce":     {costmodel.AllReduce, "all_reduce_perf"},
	"allgather":     {costmodel.AllGather, "all_gather_perf"},
	"reducescatter": {costmodel.ReduceScatter, "reduce_scatter_perf"},
	"broadcast":     {costmodel.Broadcast, "broadcast_perf"},
	"reduce":        {costmodel.Reduce, "reduce_perf"},
}

// nccl-tests' type and op names.
var dtypes = map[string]kernels.Dtype{
	"int8": kernels.Int8, "uint8": kernels.Uint8, "int32": kernels.Int32, "uint32": kernels.Uint32,
	"int64": kernels.Int64, "uint64": kernels.Uint64, "half": kernels.Float16, "float": kernels.Float32,
	"double": kernels.Float64, "bfloat16": kernels.Bfloat16, "f8e4m3": kernels.Fp8E4M3, "f8e5m2": kernels.Fp8E5M2,
}

var ops = map[string]kernels.Op{"sum": kernels.Sum, "prod": kernels.Prod, "max": kernels.Max, "min": kernels.Min, "avg": kernels.Avg,
	"mulsum": kernels.PreMulSum}

// nccl-tests' orders for -d all and -o all. mulsum is a PreMulSum operator that every rank makes
// with its own scalar (premulScalar), as nccl-tests' ncclRedOpCreatePreMulSum.
var (
	allDtypes = []string{"int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"}
	allOps    = []string{"sum", "prod", "max", "min", "avg", "mulsum"}
)

const usageLine = "usage: collbench allreduce|allgather|reducescatter|broadcast|reduce [flags]"

// help prints the whole usage: what collbench is, then every flag.
func help(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s\n\ncollbench runs collplan's engine with nccl-tests' flags and prints nccl-tests' table (see\nthe package documentation, `go doc ./cmd/collbench`). Flags:\n\n", usageLine)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// parseArgs reads the command line: the collective, then nccl-tests' flags and collbench's own.
// -h prints the usage to stdout and returns errHelp; a bad flag is one line naming it, with the
// hint to run -h.
func parseArgs(args []string, stdout io.Writer) (*options, error) {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help") {
		_, fs := newFlags("allreduce")
		help(stdout, fs)
		return nil, errHelp
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return nil, usagef("missing collective: %s (run 'collbench -h' for the flags)", usageLine)
	}
	if _, ok := colls[strings.ToLower(args[0])]; !ok {
		return nil, usagef("unknown collective %q: %s", args[0], usageLine)
	}
	o, fs := newFlags(args[0])
	var ab, abCfg, abCfgA, abCfgB string
	fs.StringVar(&ab, "ab", "", "A,B: live A/B of two tuners (e.g. none,rules), interleaved run by run at each size")
	fs.StringVar(&abCfg, "ab-config", "", "A,B: the two tuners' configuration files (either may be empty)")
	fs.StringVar(&abCfgA, "ab-config-a", "", "configuration file of --ab's A")
	fs.StringVar(&abCfgB, "ab-config-b", "", "configuration file of --ab's B")
	var perIter, cpuTime, stamps int
	num := func(p *int, short, long string, def int, usage string) {
		fs.IntVar(p, short, def, usage)
		fs.IntVar(p, long, def, usage)
	}
	num(&perIter, "I", "per_iter_timing", 0, "1 adds i_min i_max i_p99 i_cv% columns")
	num(&cpuTime, "C", "report_cputime", 0, "1 reports CPU time instead of wall time")
	num(&stamps, "S", "report_timestamps", 0, "1 adds a timestamp (date and time) to every row")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help(stdout, fs)
			return nil, errHelp
		}
		return nil, usagef("%v (run 'collbench %s -h' for the flags)", err, args[0])
	}
	o, err := o.finish(ab, abCfg, abCfgA, abCfgB, perIter, cpuTime, stamps, fs)
	if err != nil {
		return nil, usageError{err}
	}
	return o, nil
}

// newFlags makes the flag set of collective name and the options it fills (the --ab and column
// flags are parseArgs' own).
func newFlags(name string) (*options, *flag.FlagSet) {
	cc := colls[strings.ToLower(name)]
	o := &options{coll: cc.c, program: cc.prog, minBytes: 32 << 20, maxBytes: 32 << 20, stepF: 1, stepB: 1 << 20,
		iters: 20, warmup: 1, agg: 1, cycles: 1, check: 1, average: 1}
	fs := flag.NewFlagSet("collbench "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // parseArgs reports a bad flag in one line
	fs.Usage = func() {}
	sz := func(p *int64, short, long, usage string) {
		fs.Var(bytesize.Flag{V: p}, short, usage)
		fs.Var(bytesize.Flag{V: p}, long, usage)
	}
	num := func(p *int, short, long string, def int, usage string) {
		fs.IntVar(p, short, def, usage)
		fs.IntVar(p, long, def, usage)
	}
	str := func(p *string, short, long, def, usage string) {
		fs.StringVar(p, short, def, usage)
		fs.StringVar(p, long, def, usage)
	}
	sz(&o.minBytes, "b", "minbytes", "minimum size in bytes (K/M/G suffix) [32M]")
	sz(&o.maxBytes, "e", "maxbytes", "maximum size in bytes [32M]")
	sz(&o.stepB, "i", "stepbytes", "additive size step [1M]")
	sz(&o.stepF, "f", "stepfactor", "multiplicative size step, used if > 1 [1]")
	num(&o.iters, "n", "iters", 20, "timed iterations")
	num(&o.warmup, "w", "warmup_iters", 1, "warmup iterations")
	num(&o.agg, "m", "agg_iters", 1, "operations per timed iteration")
	num(&o.cycles, "N", "run_cycles", 1, "size sweeps to run; 0 runs until interrupted")
	num(&o.check, "c", "check", 1, "validation iterations; 0 prints N/A")
	str(&o.opName, "o", "op", "sum", "sum|prod|max|min|avg|mulsum|all")
	str(&o.dtName, "d", "datatype", "float", "int8|uint8|int32|uint32|int64|uint64|half|float|double|bfloat16|f8e4m3|f8e5m2|all")
	num(&o.root, "r", "root", 0, "root of broadcast and reduce")
	num(&o.average, "a", "average", 1, "time across ranks: 0 rank 0, 1 avg, 2 min, 3 max")
	fs.IntVar(&o.np, "np", 0, "ranks (default: from the environment, else 2)")
	fs.IntVar(&o.maxNP, "max-np", 0, "the most ranks -np may ask for (default: 8 per core, at least 16, and what memory holds)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "watchdog: a rank whose peers move no data for this long aborts the job, naming the rank that stopped (0: off)")
	fs.IntVar(&o.rpn, "ranks-per-node", 0, "ranks per virtual node (0: one node)")
	fs.IntVar(&o.hosts, "hosts", 0, "H: run the job across H emulated hosts (network namespaces on one machine, root; -np spread evenly, TCP between hosts through the network transport); 0: one host")
	fs.BoolVar(&o.rankProcs, "rank-processes", false, "with --hosts: each rank its own process (shm inside a host, every rank its own proxy) instead of one process per host running its ranks as goroutines")
	fs.StringVar(&o.transport, "transport", "shm", "shm (ranks are processes) or inproc (goroutines)")
	fs.StringVar(&o.device, "device", "cpu", "cpu (the engine on CPUs) or cuda (the GPU communicator, the ranks sharing device 0, through libcuda.so.1; without a driver: one line and exit status 3, a missing runtime, not bad input)")
	fs.StringVar(&o.bindTo, "bind-to", "auto", "shm ranks on CPUs: auto (rank r on the (r mod c)-th of c CPUs when ranks outnumber them) or none")
	fs.StringVar(&o.algo, "algo", "", "pin the algorithm (NCCL_ALGO; Ring, Tree for allreduce, PAT for allgather and reducescatter at --ranks-per-node 1 with Simple, NVLS for allreduce, allgather and reducescatter on one node with Simple, NVLS_TREE for allreduce on 2+ equal nodes of 2+ ranks with Simple, CollNetDirect (2+ equal nodes of at most 8 ranks) for allreduce, allgather and reducescatter and CollNetChain (2+ nodes) for allreduce with Simple, through a CollNet aggregation endpoint: the launcher starts one, ranks started by hand need COLLPLAN_COLLNET_ADDR)")
	fs.StringVar(&o.serveCollNet, "serve-collnet", "", "ADDR: run only a CollNet aggregation endpoint on ADDR (host:port, e.g. 127.0.0.1:7777) until SIGINT or SIGTERM, with no collective: collbench --serve-collnet ADDR; ranks find it through COLLPLAN_COLLNET_ADDR")
	fs.StringVar(&o.proto, "proto", "", "pin the protocol (NCCL_PROTO; LL, LL128, Simple)")
	fs.IntVar(&o.channels, "channels", 0, "pin the channel count")
	fs.BoolVar(&o.usePlan, "planner", true, "plan calls with the planner's DecisionTable for the cpu node table, cpu-net with --hosts (unless pinned)")
	fs.BoolVar(&o.noOverlay, "no-overlay", false, "plan with the node table alone (cpu, cpu-net with --hosts), without its fitted overlay (cpu.fit.toml, cpu-net.fit.toml)")
	fs.Var(bytesize.Flag{V: &o.buffers.Simple}, "buffsize", "Simple connection buffer (NCCL_BUFFSIZE; default 4M)")
	fs.Var(bytesize.Flag{V: &o.buffers.LL}, "ll-buffsize", "LL connection buffer (default 512K)")
	fs.Var(bytesize.Flag{V: &o.buffers.LL128}, "ll128-buffsize", "LL128 connection buffer")
	fs.StringVar(&o.tuner.Name, "tuner", "none", "tuner plugin of the planner: none, a NAME (tuner-NAME beside this binary, then on PATH) or a PATH")
	fs.StringVar(&o.tuner.Config, "tuner-config", "", "configuration file handed to the tuner (re-read on SIGHUP)")
	fs.DurationVar(&o.tuner.Timeout, "tuner-timeout", 0, "tuner start and per-call deadline (default 5s to start, 2s per call)")
	fs.StringVar(&o.tuner.SHA256, "tuner-sha256", "", "pin the tuner binary to this SHA-256 (hex)")
	fs.IntVar(&o.abRuns, "ab-runs", 15, "timed runs per policy and size (each -n iterations)")
	fs.Uint64Var(&o.abSeed, "ab-seed", 1, "seed of the bootstrap")
	return o, fs
}

// finish checks the parsed flags and fills what follows from them.
func (o *options) finish(ab, abCfg, abCfgA, abCfgB string, perIter, cpuTime, stamps int, fs *flag.FlagSet) (*options, error) {
	if ab != "" {
		names := strings.Split(ab, ",")
		if len(names) != 2 || names[0] == "" || names[1] == "" {
			return nil, fmt.Errorf("--ab %q: want two tuner names, A,B", ab)
		}
		cfgs := []string{abCfgA, abCfgB}
		if abCfg != "" {
			parts := strings.Split(abCfg, ",")
			if len(parts) != 2 {
				return nil, fmt.Errorf("--ab-config %q: want two files, A,B (either may be empty)", abCfg)
			}
			for i, p := range parts {
				if p != "" {
					cfgs[i] = p
				}
			}
		}
		for i := range names {
			o.ab = append(o.ab, tunerSpec{Name: names[i], Config: cfgs[i], Timeout: o.tuner.Timeout})
		}
		if o.abRuns < 2 {
			return nil, errors.New("--ab-runs must be at least 2")
		}
		if !o.tuner.None() || o.tuner.Config != "" || o.tuner.SHA256 != "" {
			return nil, errors.New("--ab names both policies; leave out --tuner, --tuner-config and --tuner-sha256")
		}
	} else if abCfg != "" || abCfgA != "" || abCfgB != "" {
		return nil, errors.New("--ab-config needs --ab")
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.perIter, o.cpuTime, o.stamps = perIter != 0, cpuTime != 0, stamps != 0
	o.opNames, o.dtNames = []string{o.opName}, []string{o.dtName}
	if o.opName == "all" {
		o.opNames = allOps
	}
	if o.dtName == "all" {
		o.dtNames = allDtypes
	}
	for _, name := range o.opNames {
		if _, ok := ops[name]; !ok {
			return nil, fmt.Errorf("-o %q: want sum, prod, max, min, avg, mulsum or all", name)
		}
	}
	for _, name := range o.dtNames {
		if _, ok := dtypes[name]; !ok {
			return nil, fmt.Errorf("-d %q: unknown type", name)
		}
	}
	if o.coll == costmodel.AllGather || o.coll == costmodel.Broadcast {
		o.opNames = []string{"none"} // no operator: one table per type, as nccl-tests
	}
	if len(o.ab) > 0 && (len(o.opNames) > 1 || len(o.dtNames) > 1) {
		return nil, errors.New("--ab times one type and op: leave out -o all and -d all")
	}
	o.setCombo(o.dtNames[0], o.opNames[0])
	switch {
	case o.minBytes > o.maxBytes:
		return nil, fmt.Errorf("-b %d is above -e %d", o.minBytes, o.maxBytes)
	case o.stepF <= 1 && o.stepB <= 0:
		return nil, errors.New("-f must be above 1 or -i above 0")
	case o.iters < 1 || o.warmup < 0 || o.agg < 1 || o.cycles < 0 || o.check < 0:
		return nil, errors.New("-n and -m must be at least 1; -w, -N and -c at least 0")
	case o.average < 0 || o.average > 3:
		return nil, fmt.Errorf("-a %d: want 0, 1, 2 or 3", o.average)
	case o.transport != "shm" && o.transport != "inproc":
		return nil, fmt.Errorf("--transport %q: want shm or inproc", o.transport)
	case o.device != "cpu" && o.device != "cuda":
		return nil, fmt.Errorf("--device %q: want cpu or cuda", o.device)
	case o.bindTo != "auto" && o.bindTo != "none":
		return nil, fmt.Errorf("--bind-to %q: want auto or none", o.bindTo)
	case o.np < 0:
		return nil, fmt.Errorf("-np %d: want a positive rank count (0: from the environment, else 2)", o.np)
	case o.maxNP < 0:
		return nil, fmt.Errorf("--max-np %d: want a positive rank count", o.maxNP)
	case o.timeout < 0:
		return nil, fmt.Errorf("--timeout %s: want a positive duration, or 0 for no watchdog", o.timeout)
	case o.channels < 0 || o.channels > engine.MaxChannels:
		return nil, fmt.Errorf("--channels %d: want 1..%d (0: the plan's)", o.channels, engine.MaxChannels)
	case o.root < 0:
		return nil, fmt.Errorf("-r %d: want a rank", o.root)
	}
	// NCCL_ALGO / NCCL_PROTO from the environment unless given as flags.
	if o.algo == "" {
		o.algo = os.Getenv("NCCL_ALGO")
	}
	if o.proto == "" {
		o.proto = os.Getenv("NCCL_PROTO")
	}
	return o, nil
}

// setCombo makes dt and op the type and operator of the calls ("none": AllGather and Broadcast).
func (o *options) setCombo(dt, op string) {
	o.dtName, o.dt = dt, dtypes[dt]
	o.opName, o.op = op, ops[op]
	if op == "none" {
		o.op = kernels.Sum
	}
}

// engineConfig turns the options into the engine's configuration for n ranks.
func (o *options) engineConfig(n int) (engine.Config, string, error) {
	cfg := engine.Config{RanksPerNode: o.rpn, Buffers: o.buffers, Timeout: o.timeout}
	cfg.CollNet.Addr = os.Getenv(collnet.CollNetEnv)
	if o.algo != "" {
		a, err := parseAlgo(o.algo, "algorithm")
		if err != nil {
			return cfg, "", err
		}
		cfg.Override.Algo, cfg.Override.PinAlgo = a, true
	}
	if o.proto != "" {
		p, err := parseEnum(o.proto, "protocol", costmodel.NumProtos, func(i int) string { return costmodel.Proto(i).String() })
		if err != nil {
			return cfg, "", err
		}
		cfg.Override.Proto, cfg.Override.PinProto = costmodel.Proto(p), true
	}
	cfg.Override.Channels = o.channels
	if o.channels > 0 {
		cfg.Channels = o.channels
	}
	plans := "engine default (Ring/Simple, 2 channels)"
	if o.usePlan && !(cfg.Override.PinAlgo && cfg.Override.PinProto && o.channels > 0) && n > 1 {
		dt, err := compileTable(context.Background(), o.benchTable(), o.tablePins(), o.coll, n, o.rpn, o.noOverlay, o.tuner, os.Stderr)
		if err != nil {
			return cfg, "", err
		}
		cfg.Tables = []*planner.DecisionTable{dt}
		plans = describeTable(dt, o.tuner, o.benchTable())
	} else if o.tuner.String() != "none" || len(o.ab) > 0 {
		return cfg, "", errors.New("--tuner and --ab need the planner's tables: leave --planner on and do not pin algorithm, protocol and channels all at once (and run at least 2 ranks)")
	}
	return cfg, plans, nil
}

// validate finds what engineConfig and abTables would refuse for n ranks, without compiling: the
// pins' names, and each tuner's flags (the binary resolves, its configuration is a text file).
func (o *options) validate(n int) error {
	algo, proto := -1, int(costmodel.Simple) // every path the engine has runs Simple
	if o.algo != "" {
		a, err := parseAlgo(o.algo, "--algo (or NCCL_ALGO)")
		if err != nil {
			return err
		}
		algo = int(a)
	}
	if o.proto != "" {
		p, err := parseEnum(o.proto, "--proto (or NCCL_PROTO)", costmodel.NumProtos, func(i int) string { return costmodel.Proto(i).String() })
		if err != nil {
			return err
		}
		proto = p
	}
	// A pinned algorithm the engine would refuse on every rank is refused here, once.
	if algo >= 0 {
		if err := engine.PinError(o.coll, costmodel.Algo(algo), costmodel.Proto(proto), n, o.rpn, o.dt, o.op); err != nil {
			return fmt.Errorf("--algo %s: %w", o.algo, err)
		}
	}
	pinnedAll := o.algo != "" && o.proto != "" && o.channels > 0
	if (o.tuner.String() != "none" || len(o.ab) > 0) && (!o.usePlan || pinnedAll || n < 2) {
		return errors.New("--tuner and --ab need the planner's tables: leave --planner on and do not pin algorithm, protocol and channels all at once (and run at least 2 ranks)")
	}
	if err := o.tuner.Check(); err != nil {
		return err
	}
	for i, spec := range o.ab {
		if err := spec.Check(); err != nil {
			return fmt.Errorf("--ab policy %c: %w", 'A'+i, err)
		}
	}
	return nil
}

// abTables compiles --ab's two policies' tables.
func (o *options) abTables(n int) ([2]*planner.DecisionTable, error) {
	var ts [2]*planner.DecisionTable
	for i, spec := range o.ab {
		dt, err := compileTable(context.Background(), o.benchTable(), o.tablePins(), o.coll, n, o.rpn, o.noOverlay, spec, os.Stderr)
		if err != nil {
			return ts, fmt.Errorf("--ab policy %c (%s): %w", 'A'+i, spec, err)
		}
		ts[i] = dt
	}
	return ts, nil
}

// parseAlgo reads one algorithm by NCCL_ALGO's names (Ring, Tree, CollNetDirect, CollNetChain,
// NVLS, NVLSTree, PAT) or the log's (NVLS_TREE, COLLNET_DIRECT, ...), case-insensitively.
func parseAlgo(s, what string) (costmodel.Algo, error) {
	a, err := capabilities.ParseAlgo(s)
	if err != nil || strings.Contains(s, ",") {
		return 0, fmt.Errorf("%s %q: collbench pins one algorithm (Ring, Tree, CollNetDirect, CollNetChain, NVLS, NVLSTree or PAT)", what, s)
	}
	return costmodel.Algo(a), nil
}

func parseEnum(s, what string, num int, name func(int) string) (int, error) {
	for i := 0; i < num; i++ {
		if strings.EqualFold(name(i), s) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%s %q: collbench pins one value (e.g. Ring, Tree, LL, LL128, Simple)", what, s)
}

// pinsCollNet reports whether --algo (or NCCL_ALGO) pins CollNetDirect or CollNetChain: the job
// needs an aggregation endpoint.
func (o *options) pinsCollNet() bool {
	if o.algo == "" {
		return false
	}
	a, err := parseAlgo(o.algo, "--algo")
	return err == nil && (a == costmodel.CollNetDirect || a == costmodel.CollNetChain)
}

// needsCollNet reports whether a job of n ranks may run CollNet, so that its launcher starts the
// aggregation endpoint: --algo pins CollNetDirect or CollNetChain, or the ranks plan with tables
// and CollNet is legal at the job's shape, and then either the planner's own table picks it at some
// size or a tuner (--tuner, --ab) may. The launcher compiles the built-in table only: starting the
// tuner here too would cost the job its deadline twice. A job that never runs CollNet gets no
// endpoint, which would otherwise be one more process wanting a core.
func (o *options) needsCollNet(n int) (bool, error) {
	if o.pinsCollNet() {
		return true, nil
	}
	if os.Getenv(collnet.CollNetEnv) != "" || o.coll != costmodel.AllReduce || !o.usePlan || n < 2 {
		return false, nil // an endpoint is given; CollNet runs AllReduce only; no tables
	}
	legal := false
	for _, a := range []costmodel.Algo{costmodel.CollNetDirect, costmodel.CollNetChain} {
		legal = legal || engine.PinError(o.coll, a, costmodel.Simple, n, o.rpn, kernels.Float32, kernels.Sum) == nil
	}
	if !legal {
		return false, nil
	}
	if o.tuner.String() != "none" || len(o.ab) > 0 {
		return true, nil
	}
	dt, err := compileTable(context.Background(), o.benchTable(), o.tablePins(), o.coll, n, o.rpn, o.noOverlay, tunerSpec{}, io.Discard)
	if err != nil {
		return false, err
	}
	return plansCollNet([]*planner.DecisionTable{dt}), nil
}

// plansCollNet reports whether one of the tables picks CollNetDirect or CollNetChain at some size.
func plansCollNet(tbls []*planner.DecisionTable) bool {
	for _, dt := range tbls {
		if dt == nil {
			continue
		}
		for _, e := range dt.Entries() {
			if a := e.Decision.Algo; a == costmodel.CollNetDirect || a == costmodel.CollNetChain {
				return true
			}
		}
	}
	return false
}

// serveCollNet is collbench --serve-collnet ADDR: a CollNet aggregation endpoint on ADDR until ctx
// is done (SIGINT, SIGTERM). It prints the address it listens on.
func serveCollNet(ctx context.Context, args []string, stderr io.Writer) error {
	var addr string
	switch a := strings.TrimLeft(args[0], "-"); {
	case strings.HasPrefix(a, "serve-collnet="):
		addr, args = strings.TrimPrefix(a, "serve-collnet="), args[1:]
	case a == "serve-collnet" && len(args) > 1:
		addr, args = args[1], args[2:]
	default:
		return usagef("--serve-collnet ADDR: missing the address (host:port, e.g. 127.0.0.1:7777)")
	}
	if len(args) > 0 {
		return usagef("--serve-collnet runs an aggregation endpoint alone: unexpected arguments %q", args)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return usagef("--serve-collnet %q: want host:port (%v)", addr, err)
	}
	ep, err := collnet.ListenCollNet(addr)
	if err != nil {
		return err
	}
	ep.Errorf = func(format string, a ...any) { fmt.Fprintf(stderr, "collbench: "+format+"\n", a...) }
	fmt.Fprintf(stderr, "collbench: CollNet aggregation endpoint pid %d listening on %s (%s=%s)\n", os.Getpid(), ep.Addr(), collnet.CollNetEnv, ep.Addr())
	<-ctx.Done()
	return ep.Close()
}

// run is collbench: a launcher of rank processes, one rank of a multi-process job, or (inproc)
// every rank of a job in this process.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && strings.HasPrefix(strings.TrimLeft(args[0], "-"), "serve-collnet") && strings.HasPrefix(args[0], "-") {
		return serveCollNet(ctx, args, stderr)
	}
	o, err := parseArgs(args, stdout)
	if err != nil {
		return err
	}
	if o.serveCollNet != "" {
		return usagef("--serve-collnet runs an aggregation endpoint alone: collbench --serve-collnet ADDR, without a collective")
	}
	id, across, err := o.acrossHosts()
	var env launch.Env
	isRank := false
	if !across {
		var lerr error
		env, isRank, lerr = launch.EnvFrom(os.Getenv)
		switch {
		case err == nil && id.Size > 0 && (lerr != nil || !isRank):
			// A launcher's job on this one host that engine/launch refuses (torchrun names the
			// host, not loopback) or does not see (srun): its ranks meet on loopback at
			// bootstrap's port.
			if env, err = oneHostEnv(id); err != nil {
				return usageError{err}
			}
			isRank = true
		case lerr != nil:
			return usageError{errors.Join(err, lerr)}
		case err != nil && !isRank:
			return usageError{err} // a launcher's variables, malformed: not a job to launch here
		}
	}
	isRank = isRank && o.transport != "inproc"
	n := o.np
	switch {
	case across:
		if err := o.checkAcrossHosts(id); err != nil {
			return usageError{err}
		}
		n = id.Size
	case isRank:
		if o.np != 0 && o.np != env.Size {
			return usagef("-np %d, but the environment (%s) says %d ranks", o.np, env.Source, env.Size)
		}
		n = env.Size
	case n == 0:
		n = 2
	}
	// Everything a rank would find wrong with the flags is found here, once, before any rank
	// starts (a launcher's ranks would each print the same error). --hosts first: it sets the
	// ranks per node that the pins are checked at.
	if o.hosts != 0 {
		if err := o.checkHosts(n); err != nil {
			return usageError{err}
		}
	} else if o.rankProcs {
		return usagef("--rank-processes runs the ranks of --hosts as processes: give --hosts H")
	}
	if err := o.validate(n); err != nil {
		return usageError{err}
	}
	if err := o.checkLimits(n, !isRank); err != nil {
		return err
	}
	if o.hosts != 0 {
		if h, ok := os.LookupEnv(envHostsRank); ok {
			if o.rankProcs {
				return runHostRank(ctx, o, n, h, stdout, stderr)
			}
			return runHost(ctx, o, n, h, stdout, stderr)
		}
		return runHosts(ctx, o, n, args, stdout, stderr)
	}
	if across {
		return runLaunched(ctx, o, id, stdout, stderr)
	}
	if o.device == "cuda" {
		return runCUDA(ctx, o, n, stdout)
	}
	if isRank && o.pinsCollNet() && os.Getenv(collnet.CollNetEnv) == "" {
		return usagef("--algo %s needs a CollNet aggregation endpoint: start one (collbench --serve-collnet ADDR) and give the ranks its address in %s, or let collbench launch the job",
			o.algo, collnet.CollNetEnv)
	}
	if o.transport == "inproc" {
		return runInProcess(ctx, o, n, stdout, stderr)
	}
	if isRank {
		return runRankProcess(ctx, o, env, stdout, stderr)
	}
	exe, err := selfExe()
	if err != nil {
		return fmt.Errorf("finding collbench's executable: %w", err)
	}
	// SIGHUP reaches rank 0 through a file: the launcher writes each SIGHUP's generation there.
	dir, err := os.MkdirTemp("", "collbench-reload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	reload := filepath.Join(dir, "generation")
	fctx, stopForward := context.WithCancel(ctx)
	defer stopForward()
	go forwardHups(fctx, reload)
	l := &launch.Launcher{N: n, Argv: append([]string{exe}, args...), Env: append(os.Environ(), envReload+"="+reload),
		Stdout: stdout, Stderr: stderr, Grace: 5 * time.Second}
	collNet, err := o.needsCollNet(n)
	if err != nil {
		return err
	}
	if collNet {
		l.CollNet = []string{exe, "--serve-collnet"} // the launcher appends the address
	}
	if o.bindTo == "none" {
		l.Bind = launch.BindNone
	}
	if err := l.Run(ctx); err != nil {
		return fmt.Errorf("%d-rank job: %w", n, err)
	}
	return nil
}

// runRankProcess is one rank of a multi-process job over shared memory.
func runRankProcess(ctx context.Context, o *options, env launch.Env, stdout, stderr io.Writer) error {
	cfg, plans, err := o.engineConfig(env.Size)
	if err != nil {
		return fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	var ab [2]*planner.DecisionTable
	if len(o.ab) > 0 {
		if ab, err = o.abTables(env.Size); err != nil {
			return fmt.Errorf("rank %d: %w", env.Rank, err)
		}
	}
	// Every rank compiled its tables itself; the rendezvous checks that they are the same.
	h, err := engine.ConfigHash(env.Size, cfg, o.fingerprint(), fmt.Sprintf("ab %016x %016x", tableHash(ab[0]), tableHash(ab[1])))
	if err != nil {
		return fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	job := env.Job
	if env.Rank == 0 && job == "" {
		// No launcher: rank 0 owns the job. It clears crashed jobs' segments and creates the job's
		// id and lock before the rendezvous hands the id to its peers, whose transports need the
		// lock; the last process of the job to let go removes the job's files.
		if _, err := shm.RemoveStaleShm(); err != nil {
			fmt.Fprintln(os.Stderr, "collbench: warning:", err)
		}
		lock, err := shm.CreateJobLock(transport.NewJobID(os.Getpid()))
		if err != nil {
			return fmt.Errorf("rank %d: %w", env.Rank, err)
		}
		defer func() {
			if err := lock.Close(); err != nil {
				fmt.Fprintln(stderr, "collbench: warning:", err)
			}
		}()
		job = lock.Job()
	}
	// The rendezvous connections stay open for the job's life: a rank whose process dies aborts
	// the communicator through them, with or without a launcher.
	sess, err := engine.Join(ctx, env.Rank, env.Size, env.Addr, h, job, rendezvousTimeout)
	if err != nil {
		return fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	defer sess.Close()
	job = sess.Job
	cfg.CollNet.Job = job
	tr, err := shm.NewShmTransport(job)
	if err != nil {
		return fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	c, err := engine.New(env.Rank, env.Size, tr, cfg)
	if err != nil {
		return fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	sess.Attach(c)
	out := io.Discard
	if env.Rank == 0 {
		out = stdout
	}
	b := &bench{o: o, c: c, out: out, log: stderr, plans: plans, transport: "shm", override: cfg.Override, ab: ab}
	b.setPolicy(cfg, env.Rank)
	err = b.run(ctx)
	if env.Job == "" && c.Aborted() != nil {
		tr.Abandon() // no launcher cleans up after an abort, and a stopped peer would keep the files
	}
	if cerr := c.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("rank %d: %w", env.Rank, err)
	}
	return nil
}

// runInProcess runs every rank as a goroutine of this process.
func runInProcess(ctx context.Context, o *options, n int, stdout, stderr io.Writer) error {
	cfg, plans, err := o.engineConfig(n)
	if err != nil {
		return err
	}
	var ab [2]*planner.DecisionTable
	if len(o.ab) > 0 {
		if ab, err = o.abTables(n); err != nil {
			return err
		}
	}
	logw := &lockedWriter{w: stderr}
	if cfg.CollNet.Addr == "" && (o.pinsCollNet() || plansCollNet(append(cfg.Tables, ab[0], ab[1]))) {
		ep, err := collnet.ListenCollNet("127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ep.Close()
		cfg.CollNet.Addr = ep.Addr()
	}
	comms, err := engine.NewInProcess(n, cfg)
	if err != nil {
		return err
	}
	errs := make([]error, n)
	done := make(chan int, n)
	for r, c := range comms {
		out := io.Discard
		if r == 0 {
			out = stdout
		}
		b := &bench{o: o, c: c, out: out, log: logw, plans: plans, transport: "inproc", override: cfg.Override, ab: ab}
		b.setPolicy(cfg, r)
		go func() {
			errs[r] = b.run(ctx)
			if errs[r] != nil {
				c.Abort()
			}
			done <- r
		}()
	}
	for range comms {
		<-done
	}
	for _, c := range comms {
		c.Close()
	}
	for r, err := range errs {
		if err != nil {
			return fmt.Errorf("rank %d: %w", r, err)
		}
	}
	return nil
}

// fingerprint is what, besides the engine's configuration, every rank must agree on.
func (o *options) fingerprint() string {
	return fmt.Sprintf("%v %d %d %d %d %d %d %d %d %d %v %v %d %t %d %s %s %s %v %d %d %v %v %t %t", o.coll, o.minBytes, o.maxBytes, o.stepF, o.stepB,
		o.iters, o.warmup, o.agg, o.cycles, o.check, o.op, o.dt, o.root, o.perIter, o.average, o.algo, o.proto,
		o.tuner, o.ab, o.abRuns, o.abSeed, o.dtNames, o.opNames, o.cpuTime, o.stamps)
}

// lockedWriter serializes the ranks' log lines of an in-process job.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
