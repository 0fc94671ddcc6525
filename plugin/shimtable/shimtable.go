// Package shimtable compiles the planner's decisions into the binary table the NCCL tuner shim
// (plugin/ncclshim, C) reads, and reads it back. The format is docs/tuner-table.md: per (nNodes,
// nRanks) block, per collective and numPipeOps, sorted size boundaries with the ranked plans of each
// interval, so that the shim's getCollInfo is a binary search and never a model evaluation.
//
// Request.Rules (rules.go, docs/tuner-rules.md: `planner compile --rules`) bakes per-communicator
// rules into the blocks; rules naming communicators add blocks of their own, listed in the file's
// named-communicator section (Table.Named, LookupComm). Request.Release (`--nccl`) prices the table
// with that NCCL release's model and records it (Table.Release).
package shimtable

import (
	"context"
	"fmt"
	"sort"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// Format constants (docs/tuner-table.md).
const (
	Magic       = "CPLNTUNE"
	Version     = 1
	headerBytes = 64
	blockBytes  = 32
	classBytes  = 16
	planBytes   = 8
	// NumConstants is the float64 count of ncclTunerConstants_v5_t.
	NumConstants = 7*3 + 3*7*3 + 5*4*3
	noAlgo       = 0xFF
	// FlagNamed (flags bit 1): a named-communicator section follows the block directory.
	flagNamed = 2
	// flagRelease (flags bit 2): an 8-byte release record follows (after the named section, if
	// any): u32 code, u32 reserved; code = master<<31 | major<<16 | minor<<8 | patch.
	flagRelease = 4
	namedBytes  = 72 // one entry: char[64] pattern, u32 block, u32 reserved
	// MaxCommPattern is the longest commName pattern the file holds (64 bytes with its NUL).
	MaxCommPattern = 63
)

// Named sends the communicators whose commName matches Comm (exact, or a glob as path.Match and
// fnmatch without flags read it) to block Block instead of the first block of their shape. The
// block has the shape it serves; entries are tried in order.
type Named struct {
	Comm  string
	Block int
}

// Plan is one ranked plan: the cell to force, and optional channel and chunk overrides (0 keeps
// NCCL's).
type Plan struct {
	Algo, Proto int
	Channels    int
	Chunk       int64
}

// Class is the compiled decisions of one (collective, numPipeOps): Plans[i] holds for sizes from
// Starts[i] up to Starts[i+1].
type Class struct {
	Starts []int64
	Plans  [][]Plan
}

// Block is one communicator shape.
type Block struct {
	NNodes, NRanks             int
	MinPipeOps, MaxPipeOps     int
	NVLDomains, MinRanksPerNVL int
	MaxRanksPerNVL             int
	Classes                    [][]Class // [coll][pipeOps-MinPipeOps]
}

// Table is a whole compiled file.
type Table struct {
	Name      string // node table name (at most 15 bytes in the file)
	K         int
	Blocks    []Block
	Constants *[NumConstants]float64 // nil: none
	// Release is the NCCL release whose model priced the table (zero: none recorded, 2.30.7).
	Release costmodel.Release
	// Named are the named-communicator entries (docs/tuner-rules.md): their blocks follow the grid's
	// in Blocks, with a shape some earlier block already has, so only a name reaches them.
	Named []Named
	// Overlays says, per block whose planner had fitted cells or a named overlay, what became of
	// them (planner.Overlay: applied, or skipped where the block's shape makes a cell illegal).
	// Compile fills it; it is not part of the file, and Decode leaves it nil.
	Overlays []BlockOverlay
	// Applied says, per rule of the request, in how many (block, class) pairs it took effect (nil
	// without rules). Compile fills it; it is not part of the file.
	Applied []int
}

// BlockOverlay is what became of the node table's fitted overlay in one block.
type BlockOverlay struct {
	NNodes, NRanks int
	Overlay        planner.Overlay
}

// Request says what to compile. Exactly one of Node and Topology is set.
type Request struct {
	Node     *tables.Node           // a node table: one block per (nodes, ranks per node)
	Topology *capabilities.Topology // a single topology: one block
	// Nodes and RanksPerNode make the grid (Node only). Defaults: 1, 2, 4, ..., 1024 nodes, and the
	// table's GPUs per node plus 1 GPU per node.
	Nodes, RanksPerNode []int
	MaxPipeOps          int  // numPipeOps compiled are 1..MaxPipeOps; default 4
	K                   int  // ranked plans kept per interval; default 4
	Constants           bool // include the model constants for v5/v6 init
	// Release prices the table with that NCCL release's model (costmodel.Release: its constants,
	// rules and corrections; a node table's [constants] apply over its defaults) and is recorded in
	// the file. The zero value is 2.30.7's model, recorded as no release.
	Release costmodel.Release
	// Rules are the per-communicator rules baked into the blocks (docs/tuner-rules.md), in file
	// order: where two rules cover a call, the first wins.
	Rules []Rule

	// forComm selects the rules a block compiles with: those naming no communicator, and those
	// naming exactly this pattern ("" for the grid's own blocks).
	forComm string
}

// DefaultNodes is the node-count grid: 1, 2, 4, ..., 1024.
func DefaultNodes() []int {
	var out []int
	for n := 1; n <= 1024; n *= 2 {
		out = append(out, n)
	}
	return out
}

// Compile prices every block and class and compiles their ranked intervals.
func Compile(ctx context.Context, req Request) (*Table, error) {
	if (req.Node == nil) == (req.Topology == nil) {
		return nil, fmt.Errorf("shimtable: give exactly one of a node table and a topology")
	}
	if req.MaxPipeOps == 0 {
		req.MaxPipeOps = 4
	}
	if req.K == 0 {
		req.K = 4
	}
	if req.MaxPipeOps < 1 || req.MaxPipeOps > 64 {
		return nil, fmt.Errorf("shimtable: max pipe ops %d out of range [1, 64]", req.MaxPipeOps)
	}
	if req.K < 1 || req.K > planner.MaxRanked {
		return nil, fmt.Errorf("shimtable: ranked plans %d out of range [1, %d]", req.K, planner.MaxRanked)
	}
	for i := range req.Rules {
		r := &req.Rules[i]
		if len(r.Comm) > MaxCommPattern {
			return nil, fmt.Errorf("shimtable: rules: %s: %d bytes, the table holds at most %d", r.where(i, "comm"), len(r.Comm), MaxCommPattern)
		}
		if r.Node != "" && req.Node == nil {
			return nil, fmt.Errorf("shimtable: rules: %s: a node-table rule needs a node-table compile (--node or --table), not --topology", r.where(i, "node"))
		}
	}
	k := req.Release.Constants()
	t := &Table{Name: "topology", K: req.K, Release: req.Release}
	if len(req.Rules) > 0 {
		t.Applied = make([]int, len(req.Rules))
	}
	var topos []capabilities.Topology
	if req.Topology != nil {
		topos = append(topos, *req.Topology)
	} else {
		t.Name = req.Node.Name
		if err := k.Apply(req.Node.Constants); err != nil {
			return nil, fmt.Errorf("shimtable: %s: %w", req.Node.File, err)
		}
		nodes, rpns := req.Nodes, req.RanksPerNode
		if len(nodes) == 0 {
			nodes = DefaultNodes()
		}
		if len(rpns) == 0 {
			rpns = []int{req.Node.Node.GPUsPerNode}
			if req.Node.Node.GPUsPerNode != 1 {
				rpns = append(rpns, 1)
			}
		}
		for _, rpn := range rpns {
			for _, n := range nodes {
				tp, err := blockTopology(req.Node, n, rpn)
				if err != nil {
					return nil, err
				}
				topos = append(topos, tp)
			}
		}
	}
	if len(t.Name) > 15 {
		t.Name = t.Name[:15]
	}
	seen := map[[2]int]bool{}
	for i := range topos {
		tp := &topos[i]
		key := [2]int{tp.NNodes, tp.NRanks}
		if seen[key] {
			return nil, fmt.Errorf("shimtable: two blocks for %d nodes, %d ranks", tp.NNodes, tp.NRanks)
		}
		seen[key] = true
		b, ov, err := compileBlock(ctx, req, tp, &k, t.Applied)
		if err != nil {
			return nil, err
		}
		t.Blocks = append(t.Blocks, b)
		if ov != nil {
			t.Overlays = append(t.Overlays, BlockOverlay{NNodes: b.NNodes, NRanks: b.NRanks, Overlay: *ov})
		}
	}
	if err := compileNamed(ctx, req, t, topos, &k); err != nil {
		return nil, err
	}
	for i := range req.Rules {
		if t.Applied[i] == 0 {
			r := &req.Rules[i]
			return nil, fmt.Errorf("shimtable: rules: %s: matches no block and class of the table (blocks nNodes x nRanks: %s)", r.where(i, "coll"), blockList(t.Blocks))
		}
	}
	if req.Constants {
		c := flatten(&k)
		t.Constants = &c
	}
	return t, nil
}

// blockTopology is the node table at nNodes with rpn ranks per node. A grid point with fewer ranks
// per node than the table's GPUs models one rank per GPU on fewer GPUs: with one rank per node there
// is no NVLink peer (type_intra LOC, addendum 7) and no NVLS (it needs two GPUs).
func blockTopology(n *tables.Node, nNodes, rpn int) (capabilities.Topology, error) {
	if rpn < 1 || rpn > n.Node.GPUsPerNode {
		return capabilities.Topology{}, fmt.Errorf("shimtable: %s: %d ranks per node, want 1..%d", n.File, rpn, n.Node.GPUsPerNode)
	}
	tp, err := capabilities.FromNode(n, nNodes)
	if err != nil {
		return tp, err
	}
	tp.NRanks, tp.LocalRanks, tp.MaxLocalRanks = nNodes*rpn, rpn, rpn
	if rpn == 1 {
		for _, g := range []*capabilities.Graph{&tp.Graphs.Tree, &tp.Graphs.Ring, &tp.Graphs.CollNetDirect, &tp.Graphs.CollNetChain} {
			g.TypeIntra = capabilities.PathLOC
		}
		tp.NVLSSupport, tp.NVLSChannels, tp.Graphs.NVLS = false, 0, capabilities.Graph{}
	}
	return tp, tp.Validate()
}

// compileBlock compiles one block, and says what became of the node table's fitted cells there
// (nil: none). A fitted cell the block's shape makes illegal (one rank, one GPU per node) is
// skipped, never an error: every shape of the grid compiles.
func compileBlock(ctx context.Context, req Request, tp *capabilities.Topology, k *costmodel.Constants, applied []int) (Block, *planner.Overlay, error) {
	b := Block{NNodes: tp.NNodes, NRanks: tp.NRanks, MinPipeOps: 1, MaxPipeOps: req.MaxPipeOps}
	if tp.Graphs.Ring.TypeIntra == capabilities.PathNVL {
		rpn := tp.NRanks / tp.NNodes
		b.NVLDomains, b.MinRanksPerNVL, b.MaxRanksPerNVL = tp.NNodes, rpn, rpn
	} else {
		b.NVLDomains, b.MinRanksPerNVL, b.MaxRanksPerNVL = tp.NRanks, 1, 1
	}
	// The node table's corrections and fitted cells (at this node count); the constants are k,
	// which the table's [constants] already went into.
	cfg, err := node.PlannerConfig(req.Node, tp)
	if err != nil {
		return b, nil, err
	}
	cfg.Constants = k
	cfg.Release = req.Release
	pl, err := planner.New(tp, cfg)
	if err != nil {
		return b, nil, fmt.Errorf("shimtable: %d nodes x %d ranks: %w", tp.NNodes, tp.NRanks, err)
	}
	alt, err := altBlocks(ctx, req, tp)
	if err != nil {
		return b, nil, err
	}
	b.Classes = make([][]Class, costmodel.NumColls)
	for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
		for p := 1; p <= req.MaxPipeOps; p++ {
			// The tuner ABI never sees the op or dtype: compile for float32 sum, and let the shim fall
			// back to the next plan where NCCL's table says a cell is not available.
			cls := planner.Class{Coll: c, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: p}
			pr, err := pl.Prepare(ctx, cls)
			if err != nil {
				return b, nil, err
			}
			var cl Class
			ivs, err := pr.RankedTable(req.K)
			if err != nil {
				// Nothing legal at all (NCCL would fail the call): one interval with no plan, so the
				// shim passes through.
				cl = Class{Starts: []int64{0}, Plans: [][]Plan{nil}}
			}
			for _, iv := range ivs {
				plans := make([]Plan, len(iv.Plans))
				for i, d := range iv.Plans {
					plans[i] = Plan{Algo: int(d.Algo), Proto: int(d.Proto), Channels: pr.ChannelOverride(iv.Lo), Chunk: d.ChunkBytes}
				}
				cl.Starts = append(cl.Starts, iv.Lo)
				cl.Plans = append(cl.Plans, plans)
			}
			if cl, err = applyRules(req, tp, pr.Menu(), cl, c, p, alt, applied); err != nil {
				return b, nil, err
			}
			b.Classes[c] = append(b.Classes[c], cl)
		}
	}
	return b, pl.Overlay(), nil
}

// flatten lays the constants out as ncclTunerConstants_v5_t.
func flatten(k *costmodel.Constants) [NumConstants]float64 {
	var out [NumConstants]float64
	i := 0
	put := func(v float64) { out[i] = v; i++ }
	for a := range k.BaseLat {
		for _, v := range k.BaseLat[a] {
			put(v)
		}
	}
	for h := range k.HWLat {
		for a := range k.HWLat[h] {
			for _, v := range k.HWLat[h][a] {
				put(v)
			}
		}
	}
	for _, m := range []*[4][3]float64{&k.LLMaxBws, &k.PerChMaxRingLL128Bws, &k.PerChMaxTreeLL128Bws, &k.PerChMaxTreeBws, &k.PerChMaxNVLSTreeBws} {
		for r := range m {
			for _, v := range m[r] {
				put(v)
			}
		}
	}
	return out
}

// Lookup returns the ranked plans for a call, or nil when no block, class or plan matches (the shim
// then passes through).
func (t *Table) Lookup(nNodes, nRanks, coll, pipeOps int, nBytes int64) []Plan {
	for i := range t.Blocks {
		b := &t.Blocks[i]
		if b.NNodes != nNodes || b.NRanks != nRanks {
			continue
		}
		return b.lookup(coll, pipeOps, nBytes)
	}
	return nil
}

func (b *Block) lookup(coll, pipeOps int, nBytes int64) []Plan {
	if coll < 0 || coll >= len(b.Classes) || pipeOps < b.MinPipeOps || pipeOps > b.MaxPipeOps {
		return nil
	}
	cl := &b.Classes[coll][pipeOps-b.MinPipeOps]
	j := sort.Search(len(cl.Starts), func(i int) bool { return cl.Starts[i] > nBytes }) - 1
	return cl.Plans[max(j, 0)]
}
