package calibrate

import (
	"context"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
)

// NCCLLog is what one NCCL log (NCCL_DEBUG=INFO; NCCL_DEBUG_SUBSYS with INIT, ENV, TUNING and
// GRAPH) says about the cost model: the TUNING decisions, the model table rank 0 prints at init,
// the GRAPH lines of the topology search and the facts of the first communicator.
type NCCLLog struct {
	File      string
	Decisions []Decision  // ParseTuning's, in file order
	Table     *ModelTable // the first model table; nil when the log has none
	Graphs    []GraphLine // ParseGraphs'
	Comm      CommFacts
	// Problems are the lines rejected (decision and model-table lines that do not parse, malformed
	// GRAPH lines, NUL bytes), each naming file and line.
	Problems []Problem
}

// CommFacts are the first communicator's facts that an NCCL log prints besides the model table and
// the GRAPH lines; a fact whose line is 0 is not in the log.
type CommFacts struct {
	// NCCLVersion is from "NCCL version 2.30.7+cuda12.8"; CUDAVersion is the CUDA NCCL was built
	// with (12080 for "+cuda12.8"), which is the CUDART_VERSION that tuning.cc's LL128 rule reads.
	NCCLVersion string `json:"nccl_version"`
	CUDAVersion int    `json:"cuda_version"`
	VersionLine int    `json:"version_line"`
	// NRanks, NNodes and LocalRanks are from init.cc's "comm %p rank %d nRanks %d nNodes %d
	// localRanks %d localRank %d MNNVL %d" (LocalRanks the largest of the communicator's lines).
	NRanks     int `json:"n_ranks"`
	NNodes     int `json:"n_nodes"`
	LocalRanks int `json:"local_ranks"`
	CommLine   int `json:"comm_line"`
	// InitRanks is from the first "%s comm %p rank %d nranks %d cudaDev %d ... - Init COMPLETE"
	// line (init.cc; the funcName, such as ncclCommInitRank, since 2.19): the ranks of a log that
	// lacks the comm line. It gives no nodes nor local ranks.
	InitRanks int `json:"init_ranks"`
	InitLine  int `json:"init_line"`
	// CollChannels and NVLSChannels are from init.cc's "%d coll channels, %d collnet channels, %d
	// nvls channels, %d p2p channels, %d p2p channels per peer": comm->nChannels, nvlsChannels.
	CollChannels int `json:"coll_channels"`
	NVLSChannels int `json:"nvls_channels"`
	ChannelsLine int `json:"channels_line"`
	// Algo and Proto are NCCL_ALGO and NCCL_PROTO from tuning.cc's "... set by environment to ...".
	Algo      string `json:"nccl_algo"`
	Proto     string `json:"nccl_proto"`
	AlgoLine  int    `json:"nccl_algo_line"`
	ProtoLine int    `json:"nccl_proto_line"`
	// GPUName is rank 0's device in nccl-tests' "# Rank" lines, when the log holds them.
	GPUName string `json:"gpu"`
	GPULine int    `json:"gpu_line"`
}

var (
	logVersionRE  = regexp.MustCompile(`^NCCL version (\d+\.\d+\.\d+)(?:\S*?\+cuda(\d+)\.(\d+))?`)
	logCommRE     = regexp.MustCompile(`^comm (\S+) rank (\d+) nRanks (\d+) nNodes (\d+) localRanks (\d+) localRank (\d+)`)
	logChannelsRE = regexp.MustCompile(`^(\d+) coll channels, (\d+) collnet channels, (\d+) nvls channels`)
	logInitRE     = regexp.MustCompile(`^(?:\w+ )?comm (\S+) rank (\d+) nranks (\d+) cudaDev (\d+) .*- Init COMPLETE`)
)

// ParseNCCLLog reads an NCCL log in one pass: what ParseTuning and ParseGraphs read, and the
// communicator's facts (CommFacts). Lines that are rejected are in NCCLLog.Problems; the error is
// for r failing or a line over 16 MiB.
func ParseNCCLLog(file string, r io.Reader) (*NCCLLog, error) {
	lr := &logReader{file: file, r: r}
	tr, gr := newTuningReader(file), newGraphReader(file)
	out := &NCCLLog{File: file}
	c := &out.Comm
	rank0 := false // GPUName is rank 0's
	for l := range lr.lines() {
		nl, ok := parseNCCLLine(l.text)
		tr.line(l, nl, ok)
		gr.line(l, nl, ok)
		if !ok {
			// nccl-tests' "# Rank" lines: rank 0's device, else the first one named.
			if m := rankRE.FindStringSubmatch(strings.TrimSpace(l.text)); m != nil && strings.TrimSpace(m[3]) != "" &&
				(c.GPULine == 0 || (m[1] == "0" && !rank0)) {
				c.GPUName, c.GPULine, rank0 = strings.TrimSpace(m[3]), l.line, m[1] == "0"
			}
			continue
		}
		if nl.level != "INFO" {
			continue
		}
		if m := logVersionRE.FindStringSubmatch(nl.msg); m != nil && c.VersionLine == 0 {
			c.NCCLVersion, c.VersionLine = m[1], l.line
			if m[2] != "" {
				major, _ := strconv.Atoi(m[2])
				minor, _ := strconv.Atoi(m[3])
				c.CUDAVersion = major*1000 + minor*10
			}
		}
		if m := logCommRE.FindStringSubmatch(nl.msg); m != nil {
			n, _ := strconv.Atoi(m[3])
			nodes, _ := strconv.Atoi(m[4])
			local, _ := strconv.Atoi(m[5])
			switch {
			case c.CommLine == 0:
				c.NRanks, c.NNodes, c.LocalRanks, c.CommLine = n, nodes, local, l.line
			case n == c.NRanks && nodes == c.NNodes:
				c.LocalRanks = max(c.LocalRanks, local)
			}
		}
		if m := logInitRE.FindStringSubmatch(nl.msg); m != nil && c.InitLine == 0 {
			c.InitRanks, _ = strconv.Atoi(m[3])
			c.InitLine = l.line
		}
		if m := logChannelsRE.FindStringSubmatch(nl.msg); m != nil && c.ChannelsLine == 0 {
			c.CollChannels, _ = strconv.Atoi(m[1])
			c.NVLSChannels, _ = strconv.Atoi(m[3])
			c.ChannelsLine = l.line
		}
		if m := pinEnvRE.FindStringSubmatch(nl.msg); m != nil {
			v := strings.TrimSpace(strings.Trim(m[2], `"'`))
			if m[1] == "NCCL_ALGO" && c.AlgoLine == 0 {
				c.Algo, c.AlgoLine = v, l.line
			} else if m[1] == "NCCL_PROTO" && c.ProtoLine == 0 {
				c.Proto, c.ProtoLine = v, l.line
			}
		}
	}
	if lr.err != nil {
		return nil, lr.err
	}
	out.Table = tr.finish()
	out.Decisions, out.Graphs = tr.out, gr.out
	out.Problems = append(append(append(out.Problems, tr.probs...), gr.probs...), lr.nul...)
	return out, nil
}

// gpuCompCaps maps GPU names (as nvidia-smi and nccl-tests print them) to compute capabilities,
// most specific first.
var gpuCompCaps = []struct {
	name string
	cc   int
}{
	{"GB200", 100}, {"GB300", 103}, {"B300", 103}, {"B200", 100}, {"B100", 100},
	{"GH200", 90}, {"H200", 90}, {"H100", 90}, {"H800", 90}, {"H20", 90},
	{"L40", 89}, {"L4", 89}, {"RTX 6000 Ada", 89}, {"RTX 4090", 89},
	{"A100", 80}, {"A800", 80}, {"A30", 80}, {"A40", 86}, {"A10", 86}, {"A16", 86},
	{"V100", 70}, {"T4", 75},
}

// CompCapOf returns the compute capability (90 for sm_90) of a GPU name such as "NVIDIA H100 80GB
// HBM3", and false when the name is not known.
func CompCapOf(gpu string) (int, bool) {
	up := strings.ToUpper(gpu)
	for _, g := range gpuCompCaps {
		if strings.Contains(up, strings.ToUpper(g.name)) {
			return g.cc, true
		}
	}
	return 0, false
}

// Defaults of the topology inputs an NCCL log does not print (TopologyFile tags them "estimate").
const (
	DefaultLogCompCap = 90 // Hopper: the GPU name is not in the log, or not known
	DefaultLogCUDART  = 12080
	// DefaultLogNVSCount is the NVSwitch count written when the NVLS graph has channels (an HGX
	// baseboard; only CollNetDirect reads it); 0 otherwise.
	DefaultLogNVSCount = 4
)

// TopologyFile writes the log's first communicator as a topology file (the schema of
// design/topology-example.toml, checked with capabilities.DecodeTopology) and returns it with the
// keys it tagged "estimate". Each input the log gives carries a comment naming its line; what the
// log lacks takes a default tagged "estimate", so that planner explain --topology lists it:
//
//   - n_nodes, n_ranks, max_local_ranks: init.cc's comm line; without it, n_ranks from the first
//     "... - Init COMPLETE" line, and the GRAPH lines' hosts and sources (estimate) for the rest;
//   - min_comp_cap, max_comp_cap: the GPU name of nccl-tests' rank lines (CompCapOf); else 90;
//   - cpu_arch "x86", cpu_vendor "intel", net_device_type "host": NCCL's INFO lines name none;
//   - nvs_count: 4 when the NVLS graph has channels, else 0 (only CollNetDirect reads it);
//   - collnet_enable, collnet_chain_support: true when the log shows a CollNet graph on more than
//     one node (its heads counts and collnet_support then estimates: 0 and []), else false;
//   - nvls_support: the NVLS graph has channels; max_tree_pattern: the tree graph's pattern;
//   - comm_n_channels, nvls_channels: init.cc's channels line; without it, min(64, 2 x ring
//     channels) and the NVLS graph's channels (estimate);
//   - cudart_version: the "+cudaX.Y" of the version line, else 12080;
//   - [env]: NCCL_ALGO and NCCL_PROTO as the log says the environment set them;
//   - [graphs.*]: TopologyGraphs over the GRAPH lines; latency_inter is not logged: 0 (estimate).
//
// The error says why no file can be written: no GRAPH line of a known pattern, path types the
// oldest NCCL printed as numbers, or a result DecodeTopology refuses.
func (l *NCCLLog) TopologyFile() ([]byte, []string, error) {
	gs, names, err := TopologyGraphs(l.Graphs)
	if err != nil {
		return nil, nil, err
	}
	c := l.Comm
	var b strings.Builder
	put := func(key, value, tag string) {
		line := fmt.Sprintf("%s = %s", key, value)
		if tag != "" {
			line = fmt.Sprintf("%-34s # %s", line, tag)
		}
		b.WriteString(line + "\n")
	}
	at := func(line int, what string) string { return fmt.Sprintf("%s, line %d", what, line) }
	fmt.Fprintf(&b, "# The first communicator of %s,\n", l.File)
	b.WriteString("# written by calibrate nccl-log from its NCCL INFO lines. Each input the log gives names its line;\n")
	b.WriteString("# an input the log lacks takes a documented default tagged \"estimate\" (planner explain --topology\n")
	b.WriteString("# lists them; calibrate nccl-log -h says which defaults).\n")

	// Graph facts, per communicator 0 of each source.
	hosts, sources := map[string]bool{}, map[int]bool{}
	treePattern, treeLine := 0, 0
	collnet := false
	for _, g := range l.Graphs {
		if g.Comm != 0 || g.Graph == "" {
			continue
		}
		hosts[g.Host] = true
		sources[g.sourceOrdinal] = true
		if g.Graph == GraphTree && g.Pattern >= 1 && g.Pattern <= 3 && g.Pattern > treePattern {
			treePattern, treeLine = g.Pattern, g.Line
		}
		collnet = collnet || g.Graph == GraphCollNetChain || g.Graph == GraphCollNetDirect
	}
	nodes, ranks, local := c.NNodes, c.NRanks, c.LocalRanks
	if c.CommLine != 0 {
		put("n_nodes", strconv.Itoa(nodes), at(c.CommLine, "comm line"))
		put("n_ranks", strconv.Itoa(ranks), at(c.CommLine, "comm line"))
	} else {
		nodes, ranks = max(1, len(hosts)), max(1, len(sources))
		put("n_nodes", strconv.Itoa(nodes), capabilities.EstimateTag)
		if c.InitLine != 0 && c.InitRanks > 0 {
			ranks = c.InitRanks
			put("n_ranks", strconv.Itoa(ranks), at(c.InitLine, "Init COMPLETE line"))
		} else {
			put("n_ranks", strconv.Itoa(ranks), capabilities.EstimateTag)
		}
	}
	if cc, ok := CompCapOf(c.GPUName); ok {
		tag := fmt.Sprintf("GPU %s, line %d", c.GPUName, c.GPULine)
		put("min_comp_cap", strconv.Itoa(cc), tag)
		put("max_comp_cap", strconv.Itoa(cc), tag)
	} else {
		put("min_comp_cap", strconv.Itoa(DefaultLogCompCap), capabilities.EstimateTag)
		put("max_comp_cap", strconv.Itoa(DefaultLogCompCap), capabilities.EstimateTag)
	}
	put("cpu_arch", `"x86"`, capabilities.EstimateTag)
	put("cpu_vendor", `"intel"`, capabilities.EstimateTag)
	nvls := gs.NVLS.NChannels > 0
	if nvls {
		put("nvs_count", strconv.Itoa(DefaultLogNVSCount), capabilities.EstimateTag)
	} else {
		put("nvs_count", "0", capabilities.EstimateTag)
	}
	if collnet && nodes > 1 {
		put("collnet_enable", "true", "GRAPH lines: a CollNet graph")
		put("collnet_chain_support", strconv.FormatBool(gs.CollNetChain.NChannels > 0), "GRAPH lines")
		put("collnet_heads_num", "0", capabilities.EstimateTag)
		put("collnet_direct_n_heads", "0", capabilities.EstimateTag)
		put("collnet_support", "[]", capabilities.EstimateTag)
	} else {
		put("collnet_enable", "false", "GRAPH lines: no CollNet graph on more than one node")
		put("collnet_chain_support", "false", "")
	}
	put("nvls_support", strconv.FormatBool(nvls), "GRAPH lines: NVLS graph channels")
	if treePattern != 0 {
		put("max_tree_pattern", strconv.Itoa(treePattern), at(treeLine, "GRAPH tree pattern"))
	} else {
		put("max_tree_pattern", "1", capabilities.EstimateTag)
	}
	put("net_device_type", `"host"`, capabilities.EstimateTag)
	if c.ChannelsLine != 0 {
		put("comm_n_channels", strconv.Itoa(c.CollChannels), at(c.ChannelsLine, "channels line"))
		put("nvls_channels", strconv.Itoa(c.NVLSChannels), at(c.ChannelsLine, "channels line"))
	} else {
		put("comm_n_channels", strconv.Itoa(min(64, 2*gs.Ring.NChannels)), capabilities.EstimateTag)
		put("nvls_channels", strconv.Itoa(gs.NVLS.NChannels), capabilities.EstimateTag)
	}
	if c.CommLine != 0 && local > 0 {
		put("max_local_ranks", strconv.Itoa(local), at(c.CommLine, "comm line"))
	} else {
		put("max_local_ranks", strconv.Itoa(max(1, ranks/max(1, nodes))), capabilities.EstimateTag)
	}
	if c.CUDAVersion > 0 {
		put("cudart_version", strconv.Itoa(c.CUDAVersion), at(c.VersionLine, "NCCL version line"))
	} else {
		put("cudart_version", strconv.Itoa(DefaultLogCUDART), capabilities.EstimateTag)
	}
	if c.AlgoLine != 0 || c.ProtoLine != 0 {
		b.WriteString("\n[env]\n")
		if c.AlgoLine != 0 {
			put("NCCL_ALGO", strconv.Quote(c.Algo), at(c.AlgoLine, "set by environment"))
		}
		if c.ProtoLine != 0 {
			put("NCCL_PROTO", strconv.Quote(c.Proto), at(c.ProtoLine, "set by environment"))
		}
	}
	for _, n := range names {
		g := graphByName(&gs, n)
		fmt.Fprintf(&b, "\n[graphs.%s]\n", n)
		put("n_channels", strconv.Itoa(g.NChannels), "GRAPH lines: the minimum over ranks")
		put("bw_intra", tomlFloat(g.BwIntra), "")
		put("bw_inter", tomlFloat(g.BwInter), "")
		put("type_intra", strconv.Quote(g.TypeIntra.String()), "the maximum over ranks")
		put("type_inter", strconv.Quote(g.TypeInter.String()), "")
		put("latency_inter", tomlFloat(g.LatencyInter), capabilities.EstimateTag)
		put("same_channels", strconv.FormatBool(g.SameChannels), "")
	}
	data := []byte(b.String())
	if _, err := capabilities.DecodeTopology(l.File+" (as a topology file)", data); err != nil {
		return nil, nil, fmt.Errorf("calibrate: %w", err)
	}
	return data, capabilities.TopologyEstimates(data), nil
}

func graphByName(gs *capabilities.Graphs, name string) capabilities.Graph {
	switch name {
	case GraphRing:
		return gs.Ring
	case GraphCollNetDirect:
		return gs.CollNetDirect
	case GraphCollNetChain:
		return gs.CollNetChain
	case GraphNVLS:
		return gs.NVLS
	}
	return gs.Tree
}

// DecisionCheck is one logged decision (with the count of its identical repeats) against a
// planner's pick at the same size.
type DecisionCheck struct {
	Decision
	Count int // decisions with the same collective, size, algorithm, protocol and format
	// NBytes is the model's nBytes: the logged count x element size, times the ranks for AllGather
	// and ReduceScatter, whose TUNING line prints per-rank bytes (reference §8.1).
	NBytes int64
	// Planned is the planner's pick and PlannedUS its time; Agree says it is the logged cell.
	Planned   Cell
	PlannedUS float64
	Agree     bool
	// Skipped says why the decision is not checked ("" when it is).
	Skipped string
}

// CheckDecisions compares each distinct decision with pl's pick for the same collective and model
// size, float32 sum at one pipe op (the TUNING line names neither dtype nor op, and one
// collective per group is what nccl-tests runs). Decisions that name no collective (the 2.20-2.22
// format) or one the model does not price (SendRecv) are listed as skipped.
func CheckDecisions(ctx context.Context, pl *planner.Planner, ds []Decision) ([]DecisionCheck, error) {
	type key struct {
		coll        string
		bytes       int64
		algo, proto int
		format      string
	}
	idx := map[key]int{}
	var out []DecisionCheck
	nRanks := int64(pl.Topology().NRanks)
	for _, d := range ds {
		k := key{d.CollName, d.Bytes, int(d.Algo), int(d.Proto), d.Format}
		if i, ok := idx[k]; ok {
			out[i].Count++
			continue
		}
		idx[k] = len(out)
		dc := DecisionCheck{Decision: d, Count: 1, NBytes: d.Bytes}
		switch {
		case d.Format == Format220:
			dc.Skipped = "the 2.20-2.22 line names no collective"
		case !d.CollKnown:
			dc.Skipped = fmt.Sprintf("%s is not a collective the model prices", d.CollName)
		default:
			if d.Coll == capabilities.AllGather || d.Coll == capabilities.ReduceScatter {
				dc.NBytes = d.Bytes * nRanks
			}
			cls := planner.Class{Coll: d.Coll, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
			plan, err := pl.Explain(ctx, cls, dc.NBytes)
			if err != nil {
				dc.Skipped = err.Error()
				break
			}
			dc.Planned = Cell{d.Coll, plan.Algo, plan.Proto}
			dc.PlannedUS = float64(plan.TimeUS)
			dc.Agree = plan.Algo == d.Algo && plan.Proto == d.Proto
		}
		out = append(out, dc)
	}
	return out, nil
}

// CellCheck is one cell of NCCL's printed model table against a planner's table.
type CellCheck struct {
	Cell
	LoggedLatUS, LoggedBWGBps float64
	LatUS, BWGBps             float64
	// Agree: both agree to the table's printed precision (%8.1f/%6.1f: within 0.05, and 0.1 %).
	Agree bool
}

// CheckModelTable compares the usable cells of t's algorithms (a bandwidth above 0 in the log or
// in pl) with pl's table: latency and algorithm bandwidth, before corrections. A cell that both
// disable is left out: NCCL keeps the latency it computed for it (reference addendum 5), which no
// decision reads.
func CheckModelTable(pl *planner.Planner, t *ModelTable) []CellCheck {
	tb := pl.Table()
	near := func(logged, got float64) bool { return math.Abs(logged-got) <= 0.05+1e-3*math.Abs(logged) }
	var out []CellCheck
	for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
		for _, a := range t.Algos {
			for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
				cc := CellCheck{Cell: Cell{c, a, p}, LoggedLatUS: t.LatUS[c][a][p], LoggedBWGBps: t.BwGBps[c][a][p],
					LatUS: float64(tb.Lat[c][a][p]), BWGBps: float64(tb.BW[c][a][p])}
				if !(cc.LoggedBWGBps > 0) && !(cc.BWGBps > 0) {
					continue
				}
				cc.Agree = near(cc.LoggedLatUS, cc.LatUS) && near(cc.LoggedBWGBps, cc.BWGBps)
				out = append(out, cc)
			}
		}
	}
	return out
}
