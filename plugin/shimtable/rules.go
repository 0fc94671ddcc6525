package shimtable

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// Rule is one [[rule]] of a rules file (docs/tuner-rules.md): it selects communicators by shape
// (and, reserved, by name) and calls by collective, numPipeOps and size, and pins a cell for them
// or takes their plans from another node table's compile.
type Rule struct {
	File string // the rules file
	Line int    // the line of the rule's [[rule]] header
	// lines holds the line of each key the rule sets (for errors naming the field).
	lines map[string]int

	NNodes, NRanks int    // exact; 0 matches any
	Comm           string // communicator name, exact or a glob (path.Match); "" matches any
	Coll           costmodel.Coll
	PipeOps        int   // exact numPipeOps; 0 matches any
	Min, Max       int64 // inclusive model sizes (NCCL's nBytes)

	// A pin: the cell, with Channels (0 keeps the compiled channel count).
	Pinned   bool
	Algo     costmodel.Algo
	Proto    costmodel.Proto
	Channels int
	// Node, instead of a pin: the embedded node table whose compile gives these calls' plans.
	Node string
}

// rawRule is a [[rule]] as TOML decodes it (pointers tell "absent" from zero).
type rawRule struct {
	Nodes    *int64 `toml:"nodes"`
	Ranks    *int64 `toml:"ranks"`
	Comm     string `toml:"comm"`
	Coll     string `toml:"coll"`
	PipeOps  *int64 `toml:"pipe_ops"`
	MinBytes *int64 `toml:"min_bytes"`
	MaxBytes *int64 `toml:"max_bytes"`
	Algo     string `toml:"algo"`
	Proto    string `toml:"proto"`
	Channels *int64 `toml:"channels"`
	Node     string `toml:"node"`
}

// LoadRules reads a rules file.
func LoadRules(file string) ([]Rule, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	return ParseRules(file, data)
}

var ruleHeader = regexp.MustCompile(`^\s*\[\[\s*rule\s*\]\]\s*(#.*)?$`)
var ruleKey = regexp.MustCompile(`^\s*([A-Za-z0-9_]+)\s*=`)

// keyLines finds, per [[rule]] header in file order, its line and the line of each key under it.
// TOML's decoder gives no positions, so the rules file keeps its keys on their own lines under a
// literal [[rule]] header (docs/tuner-rules.md); a file that does not is still read, with errors
// naming the rule's number instead.
func keyLines(data []byte) (headers []int, keys []map[string]int) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if ruleHeader.MatchString(l) {
			headers = append(headers, n)
			keys = append(keys, map[string]int{})
			continue
		}
		if m := ruleKey.FindStringSubmatch(l); m != nil && len(keys) > 0 {
			if _, ok := keys[len(keys)-1][m[1]]; !ok {
				keys[len(keys)-1][m[1]] = n
			}
		}
	}
	return headers, keys
}

// ParseRules reads a rules file's contents; every error names the file, the line and the field.
func ParseRules(file string, data []byte) ([]Rule, error) {
	var doc struct {
		Rule []rawRule `toml:"rule"`
	}
	md, err := toml.Decode(string(data), &doc)
	if err != nil {
		return nil, fmt.Errorf("rules: %s: %w", file, err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, fmt.Errorf("rules: %s: unknown key %q (want [[rule]] tables with nodes, ranks, comm, coll, pipe_ops, min_bytes, max_bytes and algo/proto/channels or node)", file, und[0].String())
	}
	headers, keys := keyLines(data)
	out := make([]Rule, 0, len(doc.Rule))
	for i, rr := range doc.Rule {
		r := Rule{File: file, Line: 0, lines: map[string]int{}}
		if len(headers) == len(doc.Rule) {
			r.Line, r.lines = headers[i], keys[i]
		}
		if err := r.fill(i, rr); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// where names a rule's field for an error: "FILE:LINE: rule N: FIELD".
func (r *Rule) where(n int, field string) string {
	line := r.Line
	if l, ok := r.lines[field]; ok {
		line = l
	}
	if line == 0 {
		return fmt.Sprintf("%s: rule %d: %s", r.File, n+1, field)
	}
	return fmt.Sprintf("%s:%d: rule %d: %s", r.File, line, n+1, field)
}

func (r *Rule) fill(n int, rr rawRule) error {
	errf := func(field, format string, args ...any) error {
		return fmt.Errorf("rules: %s: %s", r.where(n, field), fmt.Sprintf(format, args...))
	}
	posInt := func(field string, v *int64, max int64) (int, error) {
		if v == nil {
			return 0, nil
		}
		if *v < 1 || *v > max {
			return 0, errf(field, "%d out of range 1..%d", *v, max)
		}
		return int(*v), nil
	}
	var err error
	if r.NNodes, err = posInt("nodes", rr.Nodes, 1<<20); err != nil {
		return err
	}
	if r.NRanks, err = posInt("ranks", rr.Ranks, 1<<30); err != nil {
		return err
	}
	if r.PipeOps, err = posInt("pipe_ops", rr.PipeOps, 64); err != nil {
		return err
	}
	if r.NNodes != 0 && r.NRanks != 0 && r.NRanks < r.NNodes {
		return errf("ranks", "%d ranks on %d nodes: want at least one rank per node", r.NRanks, r.NNodes)
	}
	if rr.Comm != "" {
		if _, err := path.Match(rr.Comm, ""); err != nil {
			return errf("comm", "bad glob %q: %v", rr.Comm, err)
		}
		r.Comm = rr.Comm
	}
	if rr.Coll == "" {
		return errf("coll", "missing (broadcast, reduce, allgather, reducescatter or allreduce)")
	}
	if r.Coll, err = capabilities.ParseColl(rr.Coll); err != nil {
		return errf("coll", "%v", err)
	}
	r.Min, r.Max = 0, math.MaxInt64
	if rr.MinBytes != nil {
		if *rr.MinBytes < 0 {
			return errf("min_bytes", "%d is negative", *rr.MinBytes)
		}
		r.Min = *rr.MinBytes
	}
	if rr.MaxBytes != nil {
		if *rr.MaxBytes < r.Min {
			return errf("max_bytes", "%d is below min_bytes %d", *rr.MaxBytes, r.Min)
		}
		r.Max = *rr.MaxBytes
	}
	pin := rr.Algo != "" || rr.Proto != "" || rr.Channels != nil
	switch {
	case pin && rr.Node != "":
		return errf("node", "a rule pins a cell (algo, proto, channels) or names a node table, not both")
	case rr.Node != "":
		r.Node = rr.Node
	case rr.Algo == "":
		return errf("algo", "missing: a rule pins algo and proto, or names a node table (node)")
	case rr.Proto == "":
		return errf("proto", "missing: a pinned cell needs algo and proto")
	default:
		r.Pinned = true
		if r.Algo, err = capabilities.ParseAlgo(rr.Algo); err != nil {
			return errf("algo", "%v", err)
		}
		if r.Proto, err = capabilities.ParseProto(rr.Proto); err != nil {
			return errf("proto", "%v", err)
		}
		if r.Channels, err = posInt("channels", rr.Channels, 64); err != nil {
			return err
		}
	}
	return nil
}

// active reports whether the rule takes part in a block compiled for communicator pattern comm
// ("" for the grid's own blocks): a rule naming no communicator takes part in every block.
func (r *Rule) active(comm string) bool { return r.Comm == "" || r.Comm == comm }

// matchesShape reports whether the rule applies to a block's communicator shape. No rule applies to
// a one-rank block: NCCL's single-rank path is a local copy that prices Ring/Simple alone and asks
// no tuner, so a pin there could only be illegal or moot.
func (r *Rule) matchesShape(nNodes, nRanks int) bool {
	return nRanks > 1 && (r.NNodes == 0 || r.NNodes == nNodes) && (r.NRanks == 0 || r.NRanks == nRanks)
}

// matchesClass reports whether the rule applies to a class of a block.
func (r *Rule) matchesClass(coll costmodel.Coll, pipeOps int) bool {
	return r.Coll == coll && (r.PipeOps == 0 || r.PipeOps == pipeOps)
}

// Describe is a rule in a line, for compile's report.
func (r *Rule) Describe() string {
	var b strings.Builder
	if r.Line != 0 {
		fmt.Fprintf(&b, "%s:%d: ", r.File, r.Line)
	}
	fmt.Fprintf(&b, "%s", r.Coll)
	if r.PipeOps != 0 {
		fmt.Fprintf(&b, " numPipeOps %d", r.PipeOps)
	}
	fmt.Fprintf(&b, " bytes %d..", r.Min)
	if r.Max != math.MaxInt64 {
		fmt.Fprintf(&b, "%d", r.Max)
	}
	if r.Pinned {
		fmt.Fprintf(&b, " -> %s/%s", r.Algo, r.Proto)
		if r.Channels != 0 {
			fmt.Fprintf(&b, " %d channels", r.Channels)
		}
	} else {
		fmt.Fprintf(&b, " -> node table %s", r.Node)
	}
	return b.String()
}

// splice returns dst with the sizes [lo, hi] taking plans from at (dst's intervals elsewhere).
// extra are the sizes where at's answer may change (its own interval starts); adjacent intervals
// left with equal plans are merged.
func splice(dst Class, lo, hi int64, extra []int64, at func(s int64) []Plan) Class {
	pts := append([]int64{}, dst.Starts...)
	pts = append(pts, lo)
	if hi < math.MaxInt64 {
		pts = append(pts, hi+1)
	}
	for _, s := range extra {
		if s > lo && s <= hi {
			pts = append(pts, s)
		}
	}
	sortUnique(&pts)
	var out Class
	for _, s := range pts {
		var ps []Plan
		if s >= lo && s <= hi {
			ps = at(s)
		} else {
			ps = dst.at(s)
		}
		if n := len(out.Plans); n > 0 && equalPlans(out.Plans[n-1], ps) {
			continue
		}
		out.Starts = append(out.Starts, s)
		out.Plans = append(out.Plans, ps)
	}
	return out
}

// at is the plans of the interval holding size s.
func (c *Class) at(s int64) []Plan {
	j := 0
	for j+1 < len(c.Starts) && c.Starts[j+1] <= s {
		j++
	}
	return c.Plans[j]
}

func sortUnique(v *[]int64) {
	s := *v
	for i := 1; i < len(s); i++ { // insertion sort: a class has a few dozen starts
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	*v = out
}

func equalPlans(a, b []Plan) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// pinned is ps with p first and p's cell removed from the rest (the rest stay as the fallbacks
// when NCCL marks the pinned cell IGNORE for a call), cut to k plans.
func pinned(p Plan, ps []Plan, k int) []Plan {
	out := []Plan{p}
	for _, q := range ps {
		if len(out) == k {
			break
		}
		if q.Algo != p.Algo || q.Proto != p.Proto {
			out = append(out, q)
		}
	}
	return out
}

// altBlocks compiles, for the node-table rules that match tp's shape, the block of their node table
// at the same shape (same node count and ranks per node), keyed by the table's name.
func altBlocks(ctx context.Context, req Request, tp *capabilities.Topology) (map[string]*Block, error) {
	var out map[string]*Block
	for i := range req.Rules {
		r := &req.Rules[i]
		if r.Node == "" || !r.active(req.forComm) || !r.matchesShape(tp.NNodes, tp.NRanks) || out[r.Node] != nil {
			continue
		}
		n, err := tables.Load(r.Node)
		if err != nil {
			return nil, fmt.Errorf("shimtable: rules: %s: %w", r.where(i, "node"), err)
		}
		sub := req
		sub.Node, sub.Topology, sub.Rules = n, nil, nil
		k := req.Release.Constants()
		if err := k.Apply(n.Constants); err != nil {
			return nil, fmt.Errorf("shimtable: rules: %s: %s: %w", r.where(i, "node"), n.File, err)
		}
		atp, err := blockTopology(n, tp.NNodes, tp.NRanks/tp.NNodes)
		if err != nil {
			return nil, fmt.Errorf("shimtable: rules: %s: %w", r.where(i, "node"), err)
		}
		b, _, err := compileBlock(ctx, sub, &atp, &k, nil)
		if err != nil {
			return nil, fmt.Errorf("shimtable: rules: %s: %w", r.where(i, "node"), err)
		}
		if out == nil {
			out = map[string]*Block{}
		}
		out[r.Node] = &b
	}
	return out, nil
}

// applyRules bakes the rules that match block tp's shape and the class (coll, pipeOps) into its
// compiled intervals cl, the last rule first so that the first rule covering a size wins. A pinned
// cell that is not legal for the class on this shape is an error naming the rule's algo line; a
// node-table rule's plans that are not legal here are dropped, and an interval left with none is
// an error.
func applyRules(req Request, tp *capabilities.Topology, m *planner.Menu, cl Class, coll costmodel.Coll, pipeOps int, alt map[string]*Block, applied []int) (Class, error) {
	for i := len(req.Rules) - 1; i >= 0; i-- {
		r := &req.Rules[i]
		if !r.active(req.forComm) || !r.matchesShape(tp.NNodes, tp.NRanks) || !r.matchesClass(coll, pipeOps) {
			continue
		}
		if r.Pinned {
			if why := m.Cells[r.Algo][r.Proto].Reason; why != "" {
				return cl, fmt.Errorf("shimtable: rules: %s: %s/%s is not legal for %s at %d nodes x %d ranks: %s",
					r.where(i, "algo"), r.Algo, r.Proto, coll, tp.NNodes, tp.NRanks, why)
			}
			p := Plan{Algo: int(r.Algo), Proto: int(r.Proto), Channels: r.Channels}
			dst := cl
			cl = splice(dst, r.Min, r.Max, nil, func(s int64) []Plan { return pinned(p, dst.at(s), req.K) })
		} else {
			src := &alt[r.Node].Classes[coll][pipeOps-1]
			var bad error
			cl = splice(cl, r.Min, r.Max, src.Starts, func(s int64) []Plan {
				var ps []Plan
				for _, q := range src.at(s) {
					if m.Cells[q.Algo][q.Proto].Reason == "" {
						ps = append(ps, q)
					}
				}
				if len(ps) == 0 && bad == nil {
					bad = fmt.Errorf("shimtable: rules: %s: node table %s's plans at %d bytes (%s, %d nodes x %d ranks) are none legal here",
						r.where(i, "node"), r.Node, s, coll, tp.NNodes, tp.NRanks)
				}
				return ps
			})
			if bad != nil {
				return cl, bad
			}
		}
		if applied != nil {
			applied[i]++
		}
	}
	return cl, nil
}

// blockList names the blocks' shapes, for an error.
func blockList(bs []Block) string {
	var parts []string
	for _, b := range bs {
		parts = append(parts, fmt.Sprintf("%dx%d", b.NNodes, b.NRanks))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// compileNamed adds, per communicator pattern of the rules (in order of first appearance) and per
// grid shape one of its rules selects, a block compiled with the rules naming no communicator and
// the pattern's own, and the Named entry that leads to it.
func compileNamed(ctx context.Context, req Request, t *Table, topos []capabilities.Topology, k *costmodel.Constants) error {
	var patterns []string
	for i := range req.Rules {
		if c := req.Rules[i].Comm; c != "" && !slices.Contains(patterns, c) {
			patterns = append(patterns, c)
		}
	}
	for _, pat := range patterns {
		for ti := range topos {
			tp := &topos[ti]
			used := false
			for i := range req.Rules {
				r := &req.Rules[i]
				used = used || (r.Comm == pat && r.matchesShape(tp.NNodes, tp.NRanks))
			}
			if !used {
				continue
			}
			sub := req
			sub.forComm = pat
			b, _, err := compileBlock(ctx, sub, tp, k, t.Applied)
			if err != nil {
				return err
			}
			t.Named = append(t.Named, Named{Comm: pat, Block: len(t.Blocks)})
			t.Blocks = append(t.Blocks, b)
		}
	}
	return nil
}

// LookupComm is Lookup for a communicator named comm: the block of the first Named entry whose
// pattern matches the name (path.Match) and whose block has the shape, else the shape's first
// block. comm "" (a name not known) matches no pattern.
func (t *Table) LookupComm(comm string, nNodes, nRanks, coll, pipeOps int, nBytes int64) []Plan {
	if b := t.namedBlock(comm, nNodes, nRanks); b != nil {
		return b.lookup(coll, pipeOps, nBytes)
	}
	return t.Lookup(nNodes, nRanks, coll, pipeOps, nBytes)
}

func (t *Table) namedBlock(comm string, nNodes, nRanks int) *Block {
	if comm == "" {
		return nil
	}
	for _, n := range t.Named {
		b := &t.Blocks[n.Block]
		if ok, _ := path.Match(n.Comm, comm); ok && b.NNodes == nNodes && b.NRanks == nRanks {
			return b
		}
	}
	return nil
}
