// Package rules is NCCL's example CSV tuner (reference/tuner-ecosystem.md §1.6) as a collplan
// policy, without the example's bugs: no rule or no match never forces one channel, sizes are
// 64-bit (a rule can reach past 4 GiB), every line is checked and a bad line is an error naming
// its line number (no silent allreduce/ring/simple defaults), and lines have no length limit.
//
// One rule per line:
//
//	collective,minbytes,maxbytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]
//
// collective is broadcast, reduce, allgather, reducescatter or allreduce; algorithm is tree, ring,
// collnet_direct, collnet_chain, nvls, nvls_tree or pat (NCCL_ALGO's names work too); protocol is
// ll, ll128 or simple (case-insensitive). minbytes and maxbytes are inclusive unsigned 64-bit byte
// counts of the model size (NCCL's nBytes). channels -1 (or 0) keeps the planner's channel count,
// 1..64 sets it. nNodes, nRanks and numPipeOps are -1 for any or an exact value >= 1; regBuff is
// -1, 0 or 1. Blank lines and lines starting with # are skipped; fields may be padded with
// blanks. 8, 9 or 10 fields are accepted.
//
// Matching follows the example: rules are scanned in file order and the first rule that matches
// the class, the topology and the size, and whose cell is legal for the class (NCCL: not IGNORE),
// wins. Its cell is forced (cost 0) and its channel count, when given, set.
package rules

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/configfile"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin/policy"
)

// Rule is one parsed line.
type Rule struct {
	Line     int
	Coll     costmodel.Coll
	Min, Max uint64 // inclusive bounds, bytes
	Cell     planner.Cell
	Channels int // 0: keep the planner's
	NNodes   int // -1: any
	NRanks   int // -1: any
	PipeOps  int // -1: any
	RegBuff  int // -1: any, else 0 or 1
}

// Policy is a parsed rules file; it implements planner.Tuner.
type Policy struct {
	File  string
	Rules []Rule
}

var _ planner.Tuner = (*Policy)(nil)

// LineError is one bad line.
type LineError struct {
	File string
	Line int
	Msg  string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// ParseError lists every bad line of a file.
type ParseError struct {
	Lines []*LineError
}

// Details lists every bad line (tuner-rules -check prints them all).
func (e *ParseError) Details() []string {
	out := make([]string, len(e.Lines))
	for i, l := range e.Lines {
		out[i] = l.Error()
	}
	return out
}

// Error lists the first bad lines (all of them are in Lines).
func (e *ParseError) Error() string {
	const show = 5
	var msgs []string
	for i, l := range e.Lines {
		if i == show {
			msgs = append(msgs, fmt.Sprintf("and %d more bad lines", len(e.Lines)-show))
			break
		}
		msgs = append(msgs, l.Error())
	}
	return "rules: " + strings.Join(msgs, "; ")
}

// New loads a rules file; it is the plugin's Factory.
func New(path string) (planner.Tuner, error) { return Load(path) }

// Load reads and parses a rules file; a file over configfile.MaxBytes (4 MiB) is an error.
func Load(path string) (*Policy, error) {
	if path == "" {
		return nil, fmt.Errorf("rules: no configuration file (give --tuner-config FILE)")
	}
	data, err := configfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	return Parse(path, data)
}

// Parse parses a rules file's contents; file names it in errors. Every bad line is reported.
func Parse(file string, data []byte) (*Policy, error) {
	p := &Policy{File: file}
	var bad []*LineError
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), len(data)+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r, err := parseLine(line)
		if err != nil {
			bad = append(bad, &LineError{File: file, Line: n, Msg: err.Error()})
			continue
		}
		r.Line = n
		p.Rules = append(p.Rules, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("rules: %s: %w", file, err)
	}
	if len(bad) > 0 {
		return nil, &ParseError{Lines: bad}
	}
	return p, nil
}

var fieldNames = []string{"collective", "minbytes", "maxbytes", "algorithm", "protocol", "channels",
	"nNodes", "nRanks", "numPipeOps", "regBuff"}

var algoNames = map[string]costmodel.Algo{"tree": costmodel.Tree, "ring": costmodel.Ring,
	"collnet_direct": costmodel.CollNetDirect, "collnet_chain": costmodel.CollNetChain,
	"nvls": costmodel.NVLS, "nvls_tree": costmodel.NVLSTree, "pat": costmodel.PAT}

var collNames = map[string]costmodel.Coll{"broadcast": costmodel.Broadcast, "reduce": costmodel.Reduce,
	"allgather": costmodel.AllGather, "reducescatter": costmodel.ReduceScatter, "allreduce": costmodel.AllReduce}

func parseLine(line string) (Rule, error) {
	f := strings.Split(line, ",")
	if len(f) < 8 || len(f) > 10 {
		return Rule{}, fmt.Errorf("%d fields, want 8, 9 or 10: collective,minbytes,maxbytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]", len(f))
	}
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
		if f[i] == "" {
			return Rule{}, fmt.Errorf("field %d (%s) is empty", i+1, fieldNames[i])
		}
	}
	bad := func(i int, format string, args ...any) error {
		return fmt.Errorf("field %d (%s) %q: %s", i+1, fieldNames[i], f[i], fmt.Sprintf(format, args...))
	}
	r := Rule{PipeOps: -1, RegBuff: -1}
	var ok bool
	if r.Coll, ok = collNames[strings.ToLower(f[0])]; !ok {
		return r, bad(0, "unknown collective (want broadcast, reduce, allgather, reducescatter or allreduce)")
	}
	var err error
	if r.Min, err = strconv.ParseUint(f[1], 10, 64); err != nil {
		return r, bad(1, "not an unsigned 64-bit byte count")
	}
	if r.Max, err = strconv.ParseUint(f[2], 10, 64); err != nil {
		return r, bad(2, "not an unsigned 64-bit byte count")
	}
	if r.Min > r.Max {
		return r, bad(2, "below minbytes %d", r.Min)
	}
	if r.Cell.Algo, ok = algoNames[strings.ToLower(f[3])]; !ok {
		if r.Cell.Algo, err = capabilities.ParseAlgo(f[3]); err != nil {
			return r, bad(3, "unknown algorithm (want tree, ring, collnet_direct, collnet_chain, nvls, nvls_tree or pat)")
		}
	}
	if r.Cell.Proto, err = capabilities.ParseProto(f[4]); err != nil {
		return r, bad(4, "unknown protocol (want ll, ll128 or simple)")
	}
	ints := []struct {
		i      int
		dst    *int
		lo, hi int
		want   string
	}{{5, &r.Channels, -1, 64, "-1 (keep), 0 (keep) or 1..64"},
		{6, &r.NNodes, -1, math.MaxInt32, "-1 (any) or >= 1"},
		{7, &r.NRanks, -1, math.MaxInt32, "-1 (any) or >= 1"},
		{8, &r.PipeOps, -1, math.MaxInt32, "-1 (any) or >= 1"},
		{9, &r.RegBuff, -1, 1, "-1 (any), 0 or 1"}}
	for _, x := range ints {
		if x.i >= len(f) {
			break
		}
		v, err := strconv.Atoi(f[x.i])
		zeroOK := x.i == 5 || x.i == 9
		if err != nil || v < x.lo || v > x.hi || (v == 0 && !zeroOK) {
			return r, bad(x.i, "want %s", x.want)
		}
		*x.dst = v
	}
	if r.Channels < 0 {
		r.Channels = 0
	}
	return r, nil
}

// Name identifies the policy.
func (p *Policy) Name() string { return "rules" }

// matches reports whether a rule applies to the class and topology at all.
func (r *Rule) matches(req *planner.Request) bool {
	t, c := req.Topology, req.Class
	reg := 0
	if c.RegBuff {
		reg = 1
	}
	return r.Coll == c.Coll &&
		(r.NNodes == -1 || r.NNodes == t.NNodes) &&
		(r.NRanks == -1 || r.NRanks == t.NRanks) &&
		(r.PipeOps == -1 || r.PipeOps == c.PipeOps) &&
		(r.RegBuff == -1 || r.RegBuff == reg)
}

// Tune answers with the first applicable rule per size.
func (p *Policy) Tune(_ context.Context, req *planner.Request) ([]planner.Interval, error) {
	var cands []policy.Candidate
	for i := range p.Rules {
		r := &p.Rules[i]
		if !r.matches(req) || req.Menu.Cells[r.Cell.Algo][r.Cell.Proto].Reason != "" {
			continue
		}
		lo, hi, ok := policy.Inclusive(r.Min, r.Max)
		if !ok {
			continue
		}
		edits := []planner.Edit{{Kind: planner.Force, Cell: r.Cell}}
		if r.Channels > 0 {
			edits = append(edits, planner.Edit{Kind: planner.Channels, Value: float64(r.Channels)})
		}
		cands = append(cands, policy.Candidate{Lo: lo, Hi: hi, Edits: edits})
	}
	return policy.FirstMatch(cands), nil
}
