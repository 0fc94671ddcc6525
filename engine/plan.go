package engine

import (
	"fmt"
	"io"
	"time"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// MaxChannels is the most channels a call runs on (NCCL's MAXCHANNELS).
const MaxChannels = wire.MaxChannels

// Config is a communicator's configuration. Zero values take the defaults given per field. Every
// rank of a communicator must use the same configuration (New checks it: every rank claims the
// control region with a layout word that hashes it, and a rank whose word differs gets ErrConfig).
type Config struct {
	// RanksPerNode groups consecutive ranks into virtual nodes: node k holds ranks
	// [k*RanksPerNode, (k+1)*RanksPerNode), the last node possibly fewer. Rings visit the nodes in
	// order; trees are the double binary tree over the nodes with a chain inside each, as NCCL builds
	// them across hosts. 0 (or anything above n) means one node.
	RanksPerNode int

	// Buffers are the per-connection buffer sizes of each protocol, each cut into NCCL_STEPS
	// slots: Simple (NCCL_BUFFSIZE, 4 MiB), LL (NCCL_LL_BUFFSIZE, 512 KiB), LL128
	// (NCCL_LL128_BUFFSIZE, 4.6875 MiB). NVLSChunk (NCCL_NVLS_CHUNKSIZE, 128 KiB) is NVLS's step
	// per head, capped at a Simple slot (nvls.go). Zero fields take NCCL's defaults. LL
	// must be a multiple of 8 x 16 bytes (whole lines per slot), LL128 of 8 x 128, Simple of 8 x 8.
	// Tests make them tiny so that every call wraps the FIFOs.
	Buffers planner.Buffers

	// Plan, when set, gives each call's plan from its collective and model byte count (count times
	// the element size, times n for AllGather and ReduceScatter, as NCCL's model counts). A
	// planner.DecisionTable's Lookup fits (see TablePlan).
	Plan PlanFunc
	// Tables are consulted when Plan is nil: the first table whose class has the call's collective,
	// op and dtype, else the first with its collective where that table's pick can run the call's
	// op and dtype (else the call runs as an unplanned one).
	Tables []*planner.DecisionTable
	// Channels is the channel count of calls that no Plan or table plans; 0 means 2. Such calls run
	// Ring with Simple unless Override pins them.
	Channels int
	// Override pins parts of every call's plan, over the planner's choice.
	Override Override

	// DebugLog receives rank 0's NCCL-style TUNING lines when NCCL_DEBUG=INFO and
	// NCCL_DEBUG_SUBSYS asks for TUNING (see tuninglog.go); nil means standard error.
	DebugLog io.Writer

	// CollNet is the aggregation endpoint of CollNetDirect and CollNetChain calls (collnet.go).
	CollNet CollNetConfig

	// Timeout is the watchdog's: a wait inside a call that sees no progress for this long aborts
	// the communicator on every rank, naming the rank that stopped moving data (see wire's wait.go).
	// 0 turns it off. (collbench defaults to 10 minutes, as PyTorch's process groups do.)
	Timeout time.Duration
}

// CollNetConfig says where a communicator's CollNet calls find their aggregation endpoint
// (engine/transport/collnet).
type CollNetConfig struct {
	// Addr is the endpoint's TCP address, host:port: what COLLPLAN_COLLNET_ADDR (CollNetEnv) gives
	// rank processes. "" means none: a CollNet call is then ErrConfig on every rank.
	Addr string
	// Job names the communicator at the endpoint, the same on every rank and unique among the
	// endpoint's live jobs (collbench passes its job id). NewInProcess makes one when it is "".
	Job string
}

// PlanFunc returns the plan for a call of collective coll on nBytes bytes (the model byte count).
type PlanFunc func(coll costmodel.Coll, nBytes int64) planner.Decision

// TablePlan returns a PlanFunc that looks every call up in dt, whatever its collective.
func TablePlan(dt *planner.DecisionTable) PlanFunc {
	return func(_ costmodel.Coll, nBytes int64) planner.Decision { return dt.Lookup(nBytes) }
}

// Override pins parts of every call's plan, like NCCL_ALGO and NCCL_PROTO pin NCCL's. When a pin
// changes the planned algorithm or protocol, the chunk and slice sizes are the engine's defaults for
// the pinned cell (the planner's were sized for another cell).
type Override struct {
	Algo     costmodel.Algo
	PinAlgo  bool
	Proto    costmodel.Proto
	PinProto bool
	Channels int // > 0 pins the channel count
}

// Pin returns an Override that pins both the algorithm and the protocol.
func Pin(a costmodel.Algo, p costmodel.Proto) Override {
	return Override{Algo: a, PinAlgo: true, Proto: p, PinProto: true}
}

// normalize fills defaults and checks the configuration for n ranks.
func (cfg Config) normalize(n int) (Config, error) {
	if cfg.RanksPerNode < 0 {
		return cfg, fmt.Errorf("%w: RanksPerNode %d", ErrInvalid, cfg.RanksPerNode)
	}
	if cfg.RanksPerNode == 0 || cfg.RanksPerNode > n {
		cfg.RanksPerNode = n
	}
	cfg.Buffers = cfg.Buffers.WithDefaults()
	b := &cfg.Buffers
	for _, f := range []struct {
		name  string
		v     int64
		quant int64
	}{
		{"LL", b.LL, NCCLSteps * wire.LLLineBytes},
		{"LL128", b.LL128, NCCLSteps * wire.LL128LineBytes},
		{"Simple", b.Simple, NCCLSteps * 8},
		{"NVLSChunk", b.NVLSChunk, 8},
	} {
		if f.v < 0 || f.v%f.quant != 0 || f.v > 1<<30 {
			return cfg, fmt.Errorf("%w: %s buffer of %d bytes: want a positive multiple of %d up to 1 GiB",
				ErrInvalid, f.name, f.v, f.quant)
		}
	}
	if cfg.Channels == 0 {
		cfg.Channels = 2
	}
	if cfg.Timeout < 0 {
		return cfg, fmt.Errorf("%w: Timeout %s", ErrInvalid, cfg.Timeout)
	}
	if cfg.Channels < 0 || cfg.Channels > MaxChannels {
		return cfg, fmt.Errorf("%w: Channels %d (want 1..%d)", ErrInvalid, cfg.Channels, MaxChannels)
	}
	return cfg, nil
}

// plan is a call's plan as the engine runs it.
type plan struct {
	planner.Decision       // Channels, ChunkBytes and SliceBytes as run (SliceBytes: one FIFO step)
	chunkElems, pieceElems int
}

// capOp maps a kernels operator to the capabilities one (the two enums order Min and Max
// differently).
func capOp(op kernels.Op) capabilities.Op {
	switch op {
	case kernels.Prod:
		return capabilities.Prod
	case kernels.Max:
		return capabilities.Max
	case kernels.Min:
		return capabilities.Min
	case kernels.Avg:
		return capabilities.Avg
	case kernels.PreMulSum:
		return capabilities.PreMulSum
	}
	return capabilities.Sum
}

// modelBytes is NCCL's model byte count of a call: the full buffer.
func modelBytes(coll costmodel.Coll, count, es, n int) int64 {
	b := int64(count) * int64(es)
	if coll == costmodel.AllGather || coll == costmodel.ReduceScatter {
		b *= int64(n)
	}
	return b
}

// resolve returns the plan of a call: the planner's decision (Plan, else Tables, else Ring/Simple
// on cfg.Channels), the override applied, the algorithm checked, and chunk and step sizes fitted to
// the connection buffers.
func (c *Comm) resolve(coll costmodel.Coll, dt kernels.Dtype, op kernels.Op, count int) (plan, error) {
	cfg := &c.cfg
	es := dt.Size()
	nBytes := modelBytes(coll, count, es, c.n)
	var d planner.Decision
	planned := true
	switch {
	case cfg.Plan != nil:
		d = cfg.Plan(coll, nBytes)
	case len(cfg.Tables) > 0:
		if t, own := c.table(coll, op, dt); t != nil {
			d = t.Lookup(nBytes)
			// A table of another class priced the menu for its own op and dtype: where its pick
			// cannot run this call's (NVLS and CollNet reduce fewer op/dtype pairs than Ring),
			// the call takes the engine's default, as one with no table does.
			planned = own || algoError(coll, d.Algo, d.Proto, c.n, c.topo.rpn, dt, op) == nil
		} else {
			planned = false
		}
	default:
		planned = false
	}
	if !planned {
		d = planner.Decision{Algo: costmodel.Ring, Proto: costmodel.Simple, Channels: cfg.Channels}
	}
	base := d
	o := c.override
	if o.PinAlgo {
		d.Algo = o.Algo
	}
	if o.PinProto {
		d.Proto = o.Proto
	} else if o.PinAlgo && simpleOnly(d.Algo) {
		// A pinned algorithm that runs Simple alone runs with Simple, as NCCL_ALGO does: NCCL's
		// model gives its LL and LL128 cells no bandwidth, so the tuner picks Simple.
		d.Proto = costmodel.Simple
	}
	if o.Channels > 0 {
		d.Channels = o.Channels
	}
	if !planned || d.Algo != base.Algo || d.Proto != base.Proto {
		d.ChunkBytes, d.SliceBytes = 0, 0
	}
	if err := algoError(coll, d.Algo, d.Proto, c.n, c.topo.rpn, dt, op); err != nil {
		return plan{}, err
	}
	if d.Algo == costmodel.PAT {
		// One op is one FIFO step: the chunk (NCCL's PAT rule, pattasks.go) is also the step.
		d.Channels = min(max(d.Channels, 1), MaxChannels)
		ce := int(patChunk(coll, nBytes, c.slotPayload(d.Proto), d.ChunkBytes, d.Channels, es)) / es
		d.ChunkBytes, d.SliceBytes = int64(ce*es), int64(ce*es)
		return plan{Decision: d, chunkElems: ce, pieceElems: ce}, nil
	}
	if d.Proto < 0 || d.Proto >= costmodel.NumProtos {
		return plan{}, fmt.Errorf("%w: protocol %d", ErrInvalid, int(d.Proto))
	}
	d.Channels = min(max(d.Channels, 1), MaxChannels)
	if d.Algo == costmodel.NVLS || d.Algo == costmodel.NVLSTree {
		// One step carries a chunk per head (nvls.go, nvlstree.go): the chunk is the step.
		chunk := c.nvlsChunk(nBytes, d.ChunkBytes)
		if d.Algo == costmodel.NVLSTree {
			chunk = c.nvlsTreeChunk(nBytes, d.ChunkBytes)
		}
		ce := max(1, int(chunk)/es)
		d.ChunkBytes, d.SliceBytes = int64(ce*es), int64(ce*es)
		return plan{Decision: d, chunkElems: ce, pieceElems: ce}, nil
	}
	if d.Algo == costmodel.CollNetDirect || d.Algo == costmodel.CollNetChain {
		if cfg.CollNet.Addr == "" {
			return plan{}, fmt.Errorf("%w: %v needs a CollNet aggregation endpoint and none is configured (Config.CollNet.Addr; rank processes read %s)",
				ErrConfig, d.Algo, collnet.CollNetEnv)
		}
		// One chunk is one FIFO step (a share per head for CollNetDirect): collnet.go.
		ce := max(1, int(c.collNetChunk(d.Algo, nBytes, d.ChunkBytes, d.Channels))/es)
		d.ChunkBytes, d.SliceBytes = int64(ce*es), int64(ce*es)
		return plan{Decision: d, chunkElems: ce, pieceElems: ce}, nil
	}

	// One FIFO step carries at most a slot's payload, and at most a slice.
	payload := c.slotPayload(d.Proto)
	piece := payload
	if d.SliceBytes > 0 && d.SliceBytes < piece {
		piece = d.SliceBytes
	}
	p := plan{pieceElems: max(1, int(piece)/es)}
	// A chunk is at most NCCL's ceiling for the buffers (calcCollChunking's base: chunkSteps slots
	// for Simple, one slot's payload for LL and LL128). On a ring that cycles (AllReduce,
	// AllGather, ReduceScatter) it is also at most half the FIFO: every rank injects a chunk before
	// it first receives, and a chunk of NCCL_STEPS steps on every link would fill the whole ring.
	ceiling := payload
	chunkSteps := int64(1)
	if d.Algo == costmodel.Ring && (coll == costmodel.AllReduce || coll == costmodel.AllGather || coll == costmodel.ReduceScatter) {
		if d.Proto == costmodel.Simple {
			chunkSteps = 4 // ALLREDUCE_CHUNKSTEPS etc.
		}
		ceiling = min(payload*chunkSteps, int64(p.pieceElems*es)*NCCLSteps/2)
	} else {
		ceiling = payload * chunkSteps
	}
	chunk := d.ChunkBytes
	if chunk <= 0 || chunk > ceiling {
		chunk = ceiling
	}
	ce := max(1, int(chunk)/es)
	p.chunkElems = ce
	d.ChunkBytes, d.SliceBytes = int64(ce*es), int64(p.pieceElems*es)
	p.Decision = d
	return p, nil
}

// algoError is the error of a call of coll planned with algorithm a and protocol p, dtype dt and
// op on n ranks in virtual nodes of rpn (normalized as Config.normalize does): nil where the engine
// runs it; ErrInvalid where NCCL would not run it (pattasks.go, nvls.go, nvlstree.go say why);
// ErrNotImplemented for a path the engine lacks. Every rank of a call computes the same error.
func algoError(coll costmodel.Coll, a costmodel.Algo, p costmodel.Proto, n, rpn int, dt kernels.Dtype, op kernels.Op) error {
	switch {
	case a == costmodel.Ring:
	case a == costmodel.Tree && coll == costmodel.AllReduce:
	case a == costmodel.NVLS:
		return nvlsCheck(n, rpn, coll, dt, op, p)
	case a == costmodel.NVLSTree:
		return nvlsTreeCheck(n, rpn, coll, dt, op, p)
	case a == costmodel.Tree:
		return fmt.Errorf("engine: %v for %v: %w (NCCL runs Tree for AllReduce only)", a, coll, ErrNotImplemented)
	case a == costmodel.PAT:
		return patLegal(rpn, coll, op, p)
	case a == costmodel.CollNetDirect || a == costmodel.CollNetChain:
		return collNetCheck(a, n, rpn, coll, dt, op, p)
	case a >= 0 && a < costmodel.NumAlgos:
		return fmt.Errorf("engine: algorithm %v for %v: %w", a, coll, ErrNotImplemented)
	default:
		return fmt.Errorf("%w: algorithm %d", ErrInvalid, int(a))
	}
	return nil
}

// simpleOnly reports whether NCCL runs algorithm a with Simple only (NVLS, NVLS_TREE, CollNet,
// PAT).
func simpleOnly(a costmodel.Algo) bool {
	switch a {
	case costmodel.NVLS, costmodel.NVLSTree, costmodel.CollNetDirect, costmodel.CollNetChain, costmodel.PAT:
		return true
	}
	return false
}

// PinError is the error every rank of a communicator of n ranks, rpn per virtual node (0: one
// node), would return for a call of coll pinned to algorithm a and protocol p with dtype dt and op:
// nil where the engine runs it, else ErrInvalid (NCCL would not run it) or ErrNotImplemented. A
// launcher checks its pins with it before any rank starts.
func PinError(coll costmodel.Coll, a costmodel.Algo, p costmodel.Proto, n, rpn int, dt kernels.Dtype, op kernels.Op) error {
	if n < 1 {
		return fmt.Errorf("%w: %d ranks", ErrInvalid, n)
	}
	if rpn <= 0 || rpn > n {
		rpn = n
	}
	if p < 0 || p >= costmodel.NumProtos {
		return fmt.Errorf("%w: protocol %d", ErrInvalid, int(p))
	}
	return algoError(coll, a, p, n, rpn, dt, op)
}

// slotPayload is the payload bytes of one FIFO slot: Simple carries the slot, LL half of it (the
// rest is flags), LL128 120 of every 128 bytes.
func (c *Comm) slotPayload(p costmodel.Proto) int64 {
	b := c.cfg.Buffers
	switch p {
	case costmodel.LL:
		return b.LL / NCCLSteps / wire.LLLineBytes * wire.LLLinePayload
	case costmodel.LL128:
		return b.LL128 / NCCLSteps / wire.LL128LineBytes * wire.LL128LinePayload
	}
	return b.Simple / NCCLSteps
}

// table returns the call's table: the first of its class (collective, op, dtype), own, else the
// first of its collective.
func (c *Comm) table(coll costmodel.Coll, op kernels.Op, dt kernels.Dtype) (t *planner.DecisionTable, own bool) {
	var first *planner.DecisionTable
	for _, t := range c.cfg.Tables {
		if t == nil || t.Class.Coll != coll {
			continue
		}
		if t.Class.Op == capOp(op) && int(t.Class.Dtype) == int(dt) {
			return t, true
		}
		if first == nil {
			first = t
		}
	}
	return first, false
}
