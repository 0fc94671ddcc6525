package calibrate

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
)

// Graph names, as the topology file's [graphs.NAME] tables spell them.
const (
	GraphTree          = "tree"
	GraphRing          = "ring"
	GraphCollNetDirect = "collnet_direct"
	GraphCollNetChain  = "collnet_chain"
	GraphNVLS          = "nvls"
)

// graphOrder is the order of the topology file's graph tables (capabilities' Graphs fields).
var graphOrder = []string{GraphTree, GraphRing, GraphCollNetDirect, GraphCollNetChain, GraphNVLS}

// GraphLine is one NCCL GRAPH line: the result of one topology search on one rank,
// "Pattern 4, crossNic 0, nChannels 16, bw 20.000000/20.000000, type NVL/PIX, sameChannels 1".
// Older NCCL prints "speed" for "bw"; the oldest prints integer path types, which are kept as
// printed and cannot be rendered.
type GraphLine struct {
	File      string
	Line      int
	Pattern   int // NCCL_TOPO_PATTERN_*: 1 balanced tree, 2 split tree, 3 tree, 4 ring, 5 NVLS, 6 CollNetDirect
	CrossNic  int // -1 when the line has no crossNic
	NChannels int
	// BwIntra and BwInter are GB/s per channel, as found by the search.
	BwIntra, BwInter     float64
	TypeIntra, TypeInter string // path types as printed (LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS NET DIS)
	SameChannels         bool
	// Graph is which searched graph this is (GraphRing, GraphTree, ...), from the pattern and the
	// order init.cc searches in: ring, tree, then collnet chain and direct, then NVLS. "" when the
	// pattern is unknown. Pattern 3 is the tree graph the first time and the CollNet chain graph
	// after it.
	Graph string
	// Comm counts communicators per source: 0 for the first one a process and device initialised;
	// a second ring graph from the same source starts communicator 1.
	Comm int
	// Host, PID and Dev come from NCCL's prefix ("" and -1 when absent); Rank is the launcher's
	// rank, -1 when untagged. Lines are grouped into sources by these four.
	Host          string
	PID, Dev      int
	Rank          int
	sourceOrdinal int
}

// ParseGraphs reads the GRAPH lines of an NCCL log (NCCL_DEBUG_SUBSYS including GRAPH). Lines that
// start like a GRAPH line ("Pattern N, ...") but lack a field or hold a malformed value are
// rejected: the error is then a Problems value naming each file and line, and the result still
// holds every line that parsed. Other errors come from r.
func ParseGraphs(file string, r io.Reader) ([]GraphLine, error) {
	lr := &logReader{file: file, r: r}
	gr := newGraphReader(file)
	for l := range lr.lines() {
		nl, ok := parseNCCLLine(l.text)
		gr.line(l, nl, ok)
	}
	if lr.err != nil {
		return nil, lr.err
	}
	gr.probs = append(gr.probs, lr.nul...)
	return gr.out, gr.probs.errOrNil()
}

// graphReader reads the GRAPH lines of one log, a line at a time (ParseGraphs, ParseNCCLLog).
type graphReader struct {
	file    string
	out     []GraphLine
	probs   Problems
	sources map[string]*graphSource
}

// graphSource is one rank's (process and device's) GRAPH lines so far.
type graphSource struct {
	ordinal int
	comm    int
	seen    map[string]bool
}

func newGraphReader(file string) *graphReader {
	return &graphReader{file: file, sources: map[string]*graphSource{}}
}

// line reads one logical line; nl and ok are parseNCCLLine's.
func (gr *graphReader) line(l logLine, nl ncclLine, ok bool) {
	if !ok || nl.level != "INFO" || !strings.HasPrefix(nl.msg, "Pattern ") {
		return
	}
	g, msg := parseGraphMsg(nl.msg)
	if msg != "" {
		gr.probs = append(gr.probs, Problem{File: gr.file, Line: l.line, Msg: msg + ": " + clip(nl.msg)})
		return
	}
	g.File, g.Line, g.Host, g.PID, g.Dev, g.Rank = gr.file, l.line, nl.host, nl.pid, nl.dev, l.rank
	key := fmt.Sprintf("%d|%s|%d|%d", l.rank, nl.host, nl.pid, nl.dev)
	src := gr.sources[key]
	if src == nil {
		src = &graphSource{ordinal: len(gr.sources), seen: map[string]bool{}}
		gr.sources[key] = src
	}
	g.sourceOrdinal = src.ordinal
	name := classifyGraph(g.Pattern, src.seen)
	if name != "" && src.seen[name] {
		src.comm++
		src.seen = map[string]bool{}
		name = classifyGraph(g.Pattern, src.seen)
	}
	if name != "" {
		src.seen[name] = true
	}
	g.Graph, g.Comm = name, src.comm
	gr.out = append(gr.out, g)
}

// classifyGraph names the graph a pattern belongs to, given the graphs this communicator has shown.
func classifyGraph(pattern int, seen map[string]bool) string {
	switch pattern {
	case 4:
		return GraphRing
	case 1, 2:
		return GraphTree
	case 3:
		if seen[GraphTree] {
			return GraphCollNetChain
		}
		return GraphTree
	case 5:
		return GraphNVLS
	case 6:
		return GraphCollNetDirect
	}
	return ""
}

// parseGraphMsg reads "Pattern 4, crossNic 0, nChannels 16, bw 20.0/20.0, type NVL/PIX,
// sameChannels 1"; the string is the reason it does not parse.
func parseGraphMsg(msg string) (GraphLine, string) {
	g := GraphLine{CrossNic: -1, PID: -1, Dev: -1, Rank: -1}
	have := map[string]bool{}
	atoi := func(key, v string) (int, string) {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Sprintf("%s %q is not a count", key, v)
		}
		return n, ""
	}
	for _, part := range strings.Split(msg, ",") {
		key, val, _ := strings.Cut(strings.TrimSpace(part), " ")
		val = strings.TrimSpace(val)
		var bad string
		switch key {
		case "Pattern":
			g.Pattern, bad = atoi(key, val)
		case "crossNic":
			g.CrossNic, bad = atoi(key, val)
		case "nChannels":
			g.NChannels, bad = atoi(key, val)
		case "bw", "speed":
			key = "bw"
			a, b, ok := strings.Cut(val, "/")
			x, err1 := strconv.ParseFloat(a, 64)
			y, err2 := strconv.ParseFloat(b, 64)
			if !ok || err1 != nil || err2 != nil || !finiteNonNeg(x) || !finiteNonNeg(y) {
				bad = fmt.Sprintf("bandwidths %q are not intra/inter GB/s", val)
			}
			g.BwIntra, g.BwInter = x, y
		case "type":
			a, b, _ := strings.Cut(val, "/")
			if a == "" {
				bad = "empty path type"
			}
			g.TypeIntra, g.TypeInter = a, b
		case "sameChannels":
			var n int
			n, bad = atoi(key, val)
			g.SameChannels = n != 0
		default:
			continue // nvlink (oldest format) and fields of later versions
		}
		if bad != "" {
			return g, "GRAPH line: " + bad
		}
		have[key] = true
	}
	for _, k := range []string{"Pattern", "nChannels", "bw", "type", "sameChannels"} {
		if !have[k] {
			return g, fmt.Sprintf("GRAPH line without %s", k)
		}
	}
	return g, ""
}

func finiteNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// TopologyGraphs combines GRAPH lines into the graphs the cost model reads, as init.cc does after
// its all-gather: over the ranks of the first communicator (Comm 0), nChannels, bwIntra, bwInter
// and sameChannels take the minimum and typeIntra and typeInter the maximum; then ring and tree
// get the smaller of their two channel counts. LatencyInter is not in the GRAPH line and stays 0
// (the net plugin's usual value). It returns the graphs and the names of those present, in the
// topology file's order; absent graphs are zero, as NCCL leaves unsearched ones. Lines whose path
// types are not names (the oldest NCCL printed integers) are errors naming file and line.
func TopologyGraphs(lines []GraphLine) (capabilities.Graphs, []string, error) {
	var (
		gs      capabilities.Graphs
		present = map[string]bool{}
		probs   Problems
	)
	slot := func(name string) *capabilities.Graph {
		switch name {
		case GraphTree:
			return &gs.Tree
		case GraphRing:
			return &gs.Ring
		case GraphCollNetDirect:
			return &gs.CollNetDirect
		case GraphCollNetChain:
			return &gs.CollNetChain
		}
		return &gs.NVLS
	}
	for _, l := range lines {
		if l.Comm != 0 || l.Graph == "" {
			continue
		}
		ti, err1 := capabilities.ParsePathType(l.TypeIntra)
		te, err2 := capabilities.ParsePathType(l.TypeInter)
		if err1 != nil || err2 != nil {
			probs = append(probs, Problem{File: l.File, Line: l.Line,
				Msg: fmt.Sprintf("path types %q/%q are not names (LOC NVL ... DIS)", l.TypeIntra, l.TypeInter)})
			continue
		}
		g := slot(l.Graph)
		if !present[l.Graph] {
			present[l.Graph] = true
			*g = capabilities.Graph{NChannels: l.NChannels, BwIntra: l.BwIntra, BwInter: l.BwInter,
				TypeIntra: ti, TypeInter: te, SameChannels: l.SameChannels}
			continue
		}
		g.NChannels = min(g.NChannels, l.NChannels)
		g.BwIntra = min(g.BwIntra, l.BwIntra)
		g.BwInter = min(g.BwInter, l.BwInter)
		g.TypeIntra = max(g.TypeIntra, ti)
		g.TypeInter = max(g.TypeInter, te)
		g.SameChannels = g.SameChannels && l.SameChannels
	}
	if len(probs) > 0 {
		return capabilities.Graphs{}, nil, probs
	}
	if present[GraphRing] && present[GraphTree] {
		n := min(gs.Ring.NChannels, gs.Tree.NChannels)
		gs.Ring.NChannels, gs.Tree.NChannels = n, n
	}
	var names []string
	for _, n := range graphOrder {
		if present[n] {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return gs, nil, fmt.Errorf("calibrate: no GRAPH line of a known pattern")
	}
	return gs, names, nil
}

// WriteTopologyGraphs writes the [graphs.NAME] tables of a topology file
// (design/topology-example.toml) for the graphs TopologyGraphs finds in lines.
func WriteTopologyGraphs(w io.Writer, lines []GraphLine) error {
	gs, names, err := TopologyGraphs(lines)
	if err != nil {
		return err
	}
	type source struct {
		file    string
		ordinal int
	}
	var files []string
	sources := map[source]bool{}
	for _, l := range lines {
		if l.Comm == 0 && l.Graph != "" {
			if !slices.Contains(files, l.File) {
				files = append(files, l.File)
			}
			sources[source{l.File, l.sourceOrdinal}] = true
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# From the NCCL GRAPH lines of %s (%d sources): the minimum of n_channels, bandwidths and\n",
		strings.Join(files, ", "), len(sources))
	b.WriteString("# same_channels and the maximum of the path types over the ranks, as init.cc combines them;\n")
	b.WriteString("# ring and tree share the smaller channel count. latency_inter is not logged: 0, the usual value.\n")
	for _, n := range names {
		g := gs.Tree
		switch n {
		case GraphRing:
			g = gs.Ring
		case GraphCollNetDirect:
			g = gs.CollNetDirect
		case GraphCollNetChain:
			g = gs.CollNetChain
		case GraphNVLS:
			g = gs.NVLS
		}
		fmt.Fprintf(&b, "\n[graphs.%s]\n", n)
		fmt.Fprintf(&b, "n_channels = %d\n", g.NChannels)
		fmt.Fprintf(&b, "bw_intra = %s\n", tomlFloat(g.BwIntra))
		fmt.Fprintf(&b, "bw_inter = %s\n", tomlFloat(g.BwInter))
		fmt.Fprintf(&b, "type_intra = %q\n", g.TypeIntra.String())
		fmt.Fprintf(&b, "type_inter = %q\n", g.TypeInter.String())
		fmt.Fprintf(&b, "latency_inter = %s\n", tomlFloat(g.LatencyInter))
		fmt.Fprintf(&b, "same_channels = %t\n", g.SameChannels)
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// tomlFloat prints v as a TOML float: the shortest decimal, always with a fraction.
func tomlFloat(v float64) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}
