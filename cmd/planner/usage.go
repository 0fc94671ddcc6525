package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/collplan/collplan/internal/cmdline"
)

// commandDocs is each command's usage line and what it does, printed above its flags by -h.
var commandDocs = map[string]string{
	"explain": `usage: planner explain (--node NAME | --table FILE | --topology FILE) --bytes SIZE [flags]

Plans one collective call the way NCCL 2.30 does and shows the work: the pick (algorithm, protocol,
the model's time, channels, threads, chunk; "forced by ..." when NCCL_ALGO/NCCL_PROTO or the tuner
pinned it) and every cell of the priced menu with its latency, bandwidth, correction and cost, or
why it is not legal. --json prints the same as one JSON object (README.md lists its fields).
It says what it assumed: the gpus per node and where they came from (the table's gpus_per_node,
or --gpus-per-node N, which builds the table's topology with N ranks per node) and the [scale.N]
whose graphs it used ("graphs: scale 4 stands in for 4096 nodes (no [scale.4096])").
--nccl RELEASE prices as that NCCL release's model does (2.19 .. 2.30 or master; a bare 2.N is
that minor's tag, 2.28 is 2.28.3; docs/releases.md lists what changes per release): its
constants and rules, with the node table's own constants, corrections and fitted cells over them.
The text and JSON outputs then name the release ("nccl" in the query); without it the model is
2.30.7's and nothing is named. query and map take the same flag.
`,
	"query": `usage: planner query (--node NAME | --table FILE | --topology FILE) [flags] < QUERIES

Answers a stream of queries on stdin, one a line: CSV "coll,bytes[,op[,dtype[,pipe_ops]]]" answered
with a CSV row (a header line starting with "coll" is skipped), or a JSON object such as
{"coll":"allreduce","bytes":"1MiB"} answered with a JSON line. Fields a line leaves out take the
--coll, --op, --dtype, --pipe-ops and --reg-buff flags. A bad line stops with an error naming it.
--server URL sends the queries, in batches, to a running planner serve and prints the same rows: the
topology flags become the queries' fields (--topology FILE is named by its base name, --tuner NAME is
one of the service's tuners; --table FILE and tuner paths are refused), and since the service reads
no NCCL_ALGO/NCCL_PROTO, one set here without --algo/--proto is an error.
`,
	"map": `usage: planner map (--node NAME | --table FILE | --topology FILE) [--min SIZE] [--max SIZE] [--svg FILE]

Prints the plan at each power of two in [--min, --max], every crossover (the exact first size of a
new plan) and the spans whose plan was forced; --svg FILE also plots every legal cell's predicted
time with the pick traced and the forced spans shaded.
`,
	"tables": `usage: planner tables [--json] [NAME] [--fabric F]
       planner tables --fabrics [--json]

Lists the embedded node tables: name, GPU, GPUs per node, compute capability, CPU arch/vendor,
NVLS, how many inputs are estimates, and the fitted overlay applied (- for none); then the fabric
tables (--fabric NAME of every command). planner tables NAME shows one table: its node facts,
scales and graphs, and each number's source; with --fabric F, as that fabric makes it above 1 node.
--fabrics lists only the fabric tables: NICs, net devices, GB/s per device, type_inter,
latency_inter and net device type (--json: one JSON array of objects with those keys).

--json prints the list as one JSON array of objects with the list's columns (name, gpu,
gpus_per_node, compute_capability, cpu_arch, cpu_vendor, nvls, estimated_inputs, overlay; overlay
"" for none), or with NAME that table as one such object with its file and sources (each number's
dotted key and source tag) added.
`,
	"compile": `usage: planner compile (--node NAME | --table FILE | --topology FILE) -o FILE [flags]

Writes the decision table the NCCL tuner shim (libnccl-tuner-collplan.so) reads: every shape of a
node table's grid (or the one topology) priced ahead of time (docs/tuner-table.md).

--nccl RELEASE prices the table with that NCCL release's model (as explain --nccl does) and
records the release in the file; the shim's init log names it.

--rules FILE bakes per-communicator rules (TOML, docs/tuner-rules.md) into the blocks: a rule
selects communicators by nodes, ranks and optionally name (comm) and calls by collective,
numPipeOps and size, and pins a cell (algo, proto, channels) or takes the plans of another node
table (node). A pin that is not
legal on a shape it covers, or a rule that matches no block, is an error naming the file, line and
field.
`,
	"compare": `usage: planner compare (--node NAME | --table FILE | --topology FILE) --sweeps DIR [--a T] [--b T] [--half ip|oop]

Scores two tuners against sweeps (nccl-tests or collbench tables, sweeps.toml manifests): each
one's pick per measured size, the measured time of that pick and its regret against the fastest
run at that size. Every sweep is one run, pinned or not. A pick is measured by the run pinned on
both its algorithm and protocol, else (marked "via NCCL_ALGO=...") by an algorithm-only or
protocol-only run whose pin allows it, the one with the fewest legal cells; a run without a pin
is NCCL's default, shown in a column of its own as the baseline to beat, and measures no pick.
Every time comes from the --half of each row (in place by default, as calibrate fits).
`,
	"show-decisions": `usage: planner show-decisions (--log FILE | --dump FILE) (--node NAME | --table FILE | --topology FILE) [--nodes N] [--coll C] [--json]

Reads the TUNING lines of an NCCL log (--log; NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING; the
2.20-2.22, 2.23 and 2.24+ formats) or a dump of collplan's NCCL profiler plugin (--dump;
docs/profile-dump.md) and shows, per collective and size, what NCCL ran (algorithm, protocol,
channels, its own predicted time where the log prints one, the median measured time from a dump)
and how often, beside what
collplan picks for the same call on the given topology, both cells priced by collplan's model, and
the share of calls where the two agree. The decisions of one process are shown (the lowest rank
the launcher tagged, else the first process in the log): every rank of a communicator logs the
same ones. AllGather and ReduceScatter sizes are NCCL's per-rank bytes; the model is asked at
bytes x ranks. Lines that are not modelled collectives (SendRecv) or do not parse are listed with
their line numbers. The 2.20-2.22 format names no collective: --coll names the one the log ran
(nccl-tests prints it as "Collective test starting: all_reduce_perf"). A TUNING log prints no
dtype: --dtype and --op (float32 sum by default) are assumed. A dump names each call's dtype and
pipelined ops (rows split by them; an unknown count is priced as 1) but not its op (--op); its
communicator's ranks and nodes must be the topology's.
`,
	"diff": `usage: planner diff --a TABLE [--b TABLE] [--a-overlay FILE] [--b-no-overlay] [--a-tuner T] [--b-tuner T] [flags]
       planner diff --nccl RELEASE [--to RELEASE] --node TABLE [--nodes N,...] [flags]

Compares two node tables (an embedded NAME or a FILE.toml each), a table with and without its
fitted overlay or with another overlay (--a-overlay FILE), or one table under two tuners (--b
defaults to --a): for every collective (--coll) and node count (--nodes; default 1, 2, 4 ... 4096
and the tables' scales), the size bands of [--min, --max] where the two picks differ, both picks,
and the predicted time ratio B/A at each band's ends (each side's own model: below 1, B expects to
be faster). A tuner that fails is an error. --json prints the answer of POST /v1/diff.

The upgrade check: --nccl A --to B prices side A with NCCL release A's model and side B with B's
(2.19 .. 2.30 or master; an absent one is 2.30.7; --node TABLE names the table of both sides), so
the bands are where an NCCL upgrade changes the pick, e.g. planner diff --nccl 2.28 --to 2.30
--node h100 --nodes 4. The labels and --json's nccl_a/nccl_b name the releases; docs/releases.md
lists what changes per release.
`,
	"serve": `usage: planner serve [--listen ADDR] [--topology FILE]... [--tuner NAME]... [flags]

Serves the planner over HTTP/JSON (docs/service.md; the OpenAPI document at /v1/openapi.json):
POST /v1/explain and /v1/plan (one query or a batch, the fields of planner explain's flags; an
explain answer is planner explain --json's output for the same flags), POST /v1/map, GET
/v1/tables and /v1/tables/NAME, POST /v1/compile (planner compile's table as a download), POST
/v1/diff (planner diff --json), POST /v1/compare (planner compare on uploaded sweeps), /healthz, /readyz, /metrics (Prometheus). Queries name node
tables (embedded, or --table FILE by its table name, with the overlay beside it), topologies
(--topology FILE, by base name) and tuners (--tuner, by name) from the set given here, never a file
or a binary. The service never reads its own NCCL_ALGO or
NCCL_PROTO. It listens on 127.0.0.1:7480 and answers only loopback Host names and same-origin
requests; a non-loopback --listen needs --token-file, --tls-cert and --tls-key, or it refuses to
start. SIGHUP (or POST /v1/admin/reload with --admin-token-file) reloads the table files, their
overlays, the topologies and the tuners: the new set is built first and swapped in whole; a
failed reload keeps the old one. SIGTERM drains the requests in flight. A tuner that fails or hangs past --tuner-timeout never
holds a request: the built-in policy answers, labelled "builtin". GET / is the web crossover
map (embedded; README.md), with POST /v1/overlay/sweep and /v1/overlay/tuning for its overlays.
`,
}

// helpRequest is -h or --help: run prints usage, the command's usage and flags, to stdout and
// succeeds.
type helpRequest struct{ usage string }

func (h helpRequest) Error() string { return "help requested" }

// usageText is a flag set's -h output: its command's doc, then its flags.
func usageText(fs *flag.FlagSet) string {
	doc, ok := commandDocs[fs.Name()]
	if !ok {
		doc = fmt.Sprintf("usage: planner %s [flags]\n", fs.Name())
	}
	return cmdline.Usage(fs, doc)
}

// parseQuiet parses args with fs printing nothing (the flag package would print the whole usage
// on an error): -h becomes a helpRequest, a parse error one usage error line with the hint.
func parseQuiet(fs *flag.FlagSet, args []string) error {
	err := cmdline.Parse(fs, args, "planner "+fs.Name())
	if errors.Is(err, flag.ErrHelp) {
		return helpRequest{usageText(fs)}
	}
	if err != nil {
		return usageError{fmt.Errorf("%s: %w", fs.Name(), err)}
	}
	return nil
}

// flagError is a bad command line of planner NAME: one line, with where to read the flags.
func flagError(name string, err error) error {
	return usageError{cmdline.Hint("planner "+name, fmt.Errorf("%s: %w", name, err))}
}

// exitCode prints err's line to stderr, prefixed "planner: " once (the planner package's errors
// already start with it), and returns the status: 0 for nil, 2 for bad input (a usageError), 1
// otherwise.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, cmdline.ErrorLine("planner", err))
	var ue usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}
