package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/algorithm"
	"github.com/collplan/collplan/engine/internal/prims"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// Comm is one rank of a communicator. Its collectives must be called by every rank of the
// communicator in the same order, each rank from its own goroutine (or process); a Comm runs one
// collective at a time. Close may be called from any goroutine.
type Comm struct {
	rank, n int
	cfg     Config
	topo    vtopo
	tr      transport.Transport
	layout  wire.ConnLayout

	ctrl  []byte
	ctl   wire.Ctl      // what every wait checks: the abort word, closed, the watchdog's words (wire's wait.go)
	abort *uint64       // ctl.Abort
	state []*uint64     // per rank: bit 0 closed
	desc  [][2][]uint64 // per rank, per sequence parity: descWords words (agree.go)
	agree agreement     // the current call's agreement

	rings  [][]int // per channel, built on first use
	ringIx []int
	tree   [2][]capabilities.TreeLinks

	eps      map[epKey]*wire.Endpoint
	ringEps  [][2]*wire.Endpoint        // per channel: the ring's receive and send endpoints, once mapped
	pats     []*algorithm.PAT           // per channel: PAT's endpoints and state, made by the first PAT call (pattasks.go)
	workers  [][2]*worker               // per channel: role 0 (ring, tree root, tree reduce-up), role 1 (tree broadcast-down)
	nvls     []*nvlsGroup               // per channel: the multicast object of NVLS calls, once mapped (nvls.go)
	nvlsWks  []*nvlsWorker              // per channel: the NVLS worker
	nvlsRun  []*nvlsWorker              // the NVLS workers of the current call
	nvlsTree []*algorithm.NVLSTreeLinks // per channel: the NVLS_TREE connections, once mapped (nvlstree.go)
	cnGroups []*nvlsGroup               // per channel: CollNetDirect's intra-node region, once mapped (collnet.go)
	cnLinks  map[[2]int]*collnet.Link   // per (channel, share): the CollNet endpoint connections this rank heads
	tasks    []*worker                  // the workers of the current call
	cur      call                       // the current call (kept here so that a call allocates nothing)
	wg       sync.WaitGroup             // the current call's extra workers

	callMu    sync.Mutex // one call at a time; held by Close while it tears down
	closeErr  error
	closeOnce sync.Once

	seq      uint64
	override Override
	premul   []premulOp
	last     planner.Decision
	tuneLog  io.Writer // rank 0's TUNING log, nil when off (tuninglog.go)

	// raceHidden: a race build on a transport other than the in-process one, whose regions the
	// race detector cannot see synchronise through (wire's race.go); the engine annotates the orderings
	// between its own goroutines that it relies on.
	raceHidden bool

	cores, procs int         // runtime.NumCPU and GOMAXPROCS when the Comm was made (see spinFits)
	procRanks    int         // ranks of this communicator that are goroutines of this process (processRanks)
	park         wire.Parker // the transport's bell for waits (parker), nil for most

	session atomic.Pointer[Session] // the rendezvous connections watching the peers (Session.Attach)

	statsMu sync.Mutex
	stats   []ChannelStats
}

type epKey struct{ ch, from, to int }

type premulOp struct {
	dt     kernels.Dtype
	scalar []byte
	live   bool
}

// ChannelStats is the traffic one rank sent and received on one channel (its fields:
// engine/internal/prims).
type ChannelStats = prims.ChannelStats

const stateClosed = 1

// NewInProcess returns the n ranks of a communicator whose ranks are goroutines of this process,
// sharing memory through an in-process Transport. Call each rank's collectives from its own
// goroutine and Close every rank when done.
func NewInProcess(n int, cfg Config) ([]*Comm, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: %d ranks", ErrInvalid, n)
	}
	tr := transport.NewInProcess()
	if cfg.CollNet.Addr != "" && cfg.CollNet.Job == "" {
		cfg.CollNet.Job = transport.NewJobID(os.Getpid())
	}
	comms := make([]*Comm, n)
	for r := range comms {
		c, err := New(r, n, tr.Rank(), cfg)
		if err != nil {
			for _, d := range comms[:r] {
				d.Close()
			}
			return nil, err
		}
		comms[r] = c
	}
	return comms, nil
}

// New returns rank rank of an n-rank communicator whose ranks share memory through tr (each rank
// has its own Transport value, over the same regions). It touches only the control region; the
// connections are set up by the first call that uses them.
func New(rank, n int, tr transport.Transport, cfg Config) (*Comm, error) {
	if n < 1 || rank < 0 || rank >= n {
		return nil, fmt.Errorf("%w: rank %d of %d", ErrInvalid, rank, n)
	}
	if tr == nil {
		return nil, fmt.Errorf("%w: nil transport", ErrInvalid)
	}
	if x := uint16(1); *(*byte)(unsafe.Pointer(&x)) != 1 {
		return nil, errors.New("engine: the wire formats need a little-endian host")
	}
	cfg, err := cfg.normalize(n)
	if err != nil {
		return nil, err
	}
	// A transport between hosts (engine/transport/net) places consecutive ranks per host: the
	// virtual nodes must be those hosts.
	if h, ok := tr.(interface{ RanksPerHost() int }); ok && h.RanksPerHost() != cfg.RanksPerNode {
		return nil, fmt.Errorf("%w: Config.RanksPerNode is %d, the transport has %d ranks per host", ErrConfig, cfg.RanksPerNode, h.RanksPerHost())
	}
	b := cfg.Buffers
	c := &Comm{
		rank: rank, n: n, cfg: cfg, tr: tr,
		topo:     newVtopo(n, cfg.RanksPerNode),
		layout:   wire.ConnLayout{LLBytes: int(b.LL), LL128Bytes: int(b.LL128), SimpleBytes: int(b.Simple)},
		eps:      make(map[epKey]*wire.Endpoint),
		override: cfg.Override,
	}
	_, inproc := tr.(transport.Rank)
	c.raceHidden = wire.RaceEnabled && !inproc
	c.cores, c.procs = runtime.NumCPU(), runtime.GOMAXPROCS(0)
	c.procRanks = processRanks(tr, n)
	c.park = parker(tr)
	c.tuneLog = tuningWriter(rank, &cfg, os.Getenv)
	cfgWord := wire.LayoutWord("config", uint64(n), uint64(cfg.RanksPerNode), uint64(b.LL), uint64(b.LL128), uint64(b.Simple), uint64(b.NVLSChunk))
	c.tree[0], c.tree[1] = c.topo.trees()
	size := wire.CtrlSize(n)
	ctrl, err := tr.Region(transport.CtrlRegion, size)
	if err == nil {
		err = wire.CheckRegion(ctrl, transport.CtrlRegion, size)
	}
	if err == nil {
		err = wire.ClaimLayout(ctrl, transport.CtrlRegion, wire.LayoutWord("ctrl", uint64(n), cfgWord))
	}
	if err != nil {
		tr.Close()
		return nil, err
	}
	c.ctrl = ctrl
	c.abort = wire.WordAt(ctrl, wire.CtrlAbortOffset)
	c.ctl.Rank, c.ctl.N, c.ctl.Abort, c.ctl.Timeout = rank, n, c.abort, cfg.Timeout
	c.ctl.AgreePoll = func() error { _, err := c.agreePoll(); return err }
	c.ctl.AbortError = c.abortError
	c.state = make([]*uint64, n)
	c.ctl.Beat, c.ctl.WaitsFor = make([]*uint64, n), make([]*uint64, n)
	c.desc = make([][2][]uint64, n)
	for r := 0; r < n; r++ {
		base := wire.CtrlRankOffset + r*wire.CtrlRankSize
		c.state[r] = wire.WordAt(ctrl, base)
		c.ctl.Beat[r], c.ctl.WaitsFor[r] = wire.WordAt(ctrl, base+8), wire.WordAt(ctrl, base+16)
		c.desc[r][0] = wire.WordsOf(ctrl[base+wire.LineBytes : base+wire.LineBytes+descWords*8])
		c.desc[r][1] = wire.WordsOf(ctrl[base+2*wire.LineBytes : base+2*wire.LineBytes+descWords*8])
	}
	return c, nil
}

// Rank returns the Comm's rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of ranks.
func (c *Comm) Size() int { return c.n }

// SetOverride replaces the Override of later calls. Every rank must make the same change between
// the same two calls (a plan that differs across ranks is a mismatch: see agree.go).
func (c *Comm) SetOverride(o Override) {
	c.callMu.Lock()
	c.override = o
	c.callMu.Unlock()
}

// LastPlan returns the plan of the last call that ran on more than one rank, as run: Channels is
// the channel count split across, ChunkBytes the chunk, SliceBytes the payload of one FIFO step.
// Threads is not used by the engine (a channel is one goroutine).
func (c *Comm) LastPlan() planner.Decision {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	return c.last
}

// Stats returns, per channel, the traffic this rank sent and received since the Comm was made or
// ResetStats last ran.
func (c *Comm) Stats() []ChannelStats {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return append([]ChannelStats(nil), c.stats...)
}

// ResetStats zeroes the traffic counters.
func (c *Comm) ResetStats() {
	c.statsMu.Lock()
	c.stats = nil
	c.statsMu.Unlock()
}

// RedOpCreatePreMulSum returns an operator for dt that multiplies every rank's contribution by
// scalar (one element of dt, little-endian) as it is loaded, like ncclRedOpCreatePreMulSum: the
// first handle is kernels.PreMulSum, later ones count up from it. Each rank creates its own, with
// its own scalar. The handle is valid on this Comm only, for dt only.
func (c *Comm) RedOpCreatePreMulSum(scalar []byte, dt kernels.Dtype) (kernels.Op, error) {
	if _, err := kernels.NewReducer(dt, kernels.PreMulSum, 1, scalar); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	c.callMu.Lock()
	defer c.callMu.Unlock()
	c.premul = append(c.premul, premulOp{dt: dt, scalar: append([]byte(nil), scalar...), live: true})
	return kernels.PreMulSum + kernels.Op(len(c.premul)-1), nil
}

// RedOpDestroy releases an operator made by RedOpCreatePreMulSum.
func (c *Comm) RedOpDestroy(op kernels.Op) error {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	i := int(op - kernels.PreMulSum)
	if i < 0 || i >= len(c.premul) || !c.premul[i].live {
		return fmt.Errorf("%w: op %d is not a live PreMulSum operator", ErrInvalid, int(op))
	}
	c.premul[i] = premulOp{}
	return nil
}

// Close releases the rank. A collective this rank is running at that moment fails at its next
// wait with ErrClosed and aborts the communicator; ranks waiting for this one to join a later call
// get ErrPeerClosed. Close waits for the rank's goroutines to stop and is idempotent.
func (c *Comm) Close() error {
	c.closeOnce.Do(func() {
		c.ctl.Closed.Store(true)
		if s := c.session.Load(); s != nil {
			s.detach() // no abort from a lost peer once the regions are unmapped
		}
		c.callMu.Lock()
		defer c.callMu.Unlock()
		atomic.OrUint64(c.state[c.rank], stateClosed)
		c.closeCollNet() // before the regions go: a failing connection stores the abort word
		c.closeErr = c.tr.Close()
	})
	return c.closeErr
}

// Abort aborts the communicator, like ncclCommAbort: every rank's current and later calls fail
// with an *AbortError naming this rank. Then it closes this rank.
func (c *Comm) Abort() error {
	c.setAbort(abortUser)
	return c.Close()
}

// setAbort aborts the communicator on behalf of this rank, unless it is already aborted.
func (c *Comm) setAbort(reason int) { c.ctl.SetAbort(reason) }

// Aborted returns the communicator's abort as an *AbortError (or the error its reason stands
// for), nil when it is not aborted.
func (c *Comm) Aborted() error {
	if w := atomic.LoadUint64(c.abort); w != 0 {
		return wire.AbortErr(w)
	}
	return nil
}

// abortFor aborts the communicator naming another rank (gone or stalled), unless it is already
// aborted.
func (c *Comm) abortFor(rank, reason int) { c.ctl.AbortFor(rank, reason) }

// AllReduce reduces count elements of send across the ranks with op and leaves the result in recv
// on every rank. send and recv may be the same buffer (in place), and must otherwise not overlap.
func (c *Comm) AllReduce(ctx context.Context, send, recv []byte, count int, dt kernels.Dtype, op kernels.Op) error {
	return c.collective(ctx, args{coll: costmodel.AllReduce, send: send, recv: recv, count: count, dt: dt, op: op})
}

// AllGather gathers count elements from every rank's send into recv (n*count elements, rank r's at
// element r*count) on every rank. In place: send is recv's block of this rank.
func (c *Comm) AllGather(ctx context.Context, send, recv []byte, count int, dt kernels.Dtype) error {
	return c.collective(ctx, args{coll: costmodel.AllGather, send: send, recv: recv, count: count, dt: dt})
}

// ReduceScatter reduces n*count elements of send across the ranks with op and leaves block r
// (count elements at element r*count) of the result in rank r's recv. In place: recv is send's
// block of this rank.
func (c *Comm) ReduceScatter(ctx context.Context, send, recv []byte, count int, dt kernels.Dtype, op kernels.Op) error {
	return c.collective(ctx, args{coll: costmodel.ReduceScatter, send: send, recv: recv, count: count, dt: dt, op: op})
}

// Broadcast copies count elements of root's send into recv on every rank. send is read on root
// only (other ranks may pass nil); root may pass the same buffer twice (in place).
func (c *Comm) Broadcast(ctx context.Context, send, recv []byte, count int, dt kernels.Dtype, root int) error {
	return c.collective(ctx, args{coll: costmodel.Broadcast, send: send, recv: recv, count: count, dt: dt, root: root})
}

// Reduce reduces count elements of send across the ranks with op into root's recv. recv is
// written on root only (other ranks may pass nil).
func (c *Comm) Reduce(ctx context.Context, send, recv []byte, count int, dt kernels.Dtype, op kernels.Op, root int) error {
	return c.collective(ctx, args{coll: costmodel.Reduce, send: send, recv: recv, count: count, dt: dt, op: op, root: root})
}

// args are a call's arguments as the user gave them.
type args struct {
	coll       costmodel.Coll
	send, recv []byte
	count      int
	dt         kernels.Dtype
	op         kernels.Op
	root       int
}

// call is a validated, planned call.
type call struct {
	args
	es        int
	opKind    kernels.Op // op, with PreMulSum handles folded to PreMulSum
	red, comb kernels.Reducer
	inPlace   bool
	plan      plan
	kc        algorithm.Call // what the kernels of engine/internal/algorithm read, filled by execute
}

func (a *args) reduces() bool {
	return a.coll == costmodel.AllReduce || a.coll == costmodel.ReduceScatter || a.coll == costmodel.Reduce
}

// collective runs one call: validate and plan it locally, post it for the other ranks to check
// (agree.go), run it, and check theirs.
func (c *Comm) collective(ctx context.Context, a args) error {
	c.callMu.Lock()
	defer c.callMu.Unlock()
	if c.ctl.Closed.Load() {
		return ErrClosed
	}
	if w := atomic.LoadUint64(c.abort); w != 0 {
		return wire.AbortErr(w)
	}
	if err := ctx.Err(); err != nil {
		c.setAbort(abortCancel)
		return err
	}
	w := newWaiter(c, ctx)
	cl := &c.cur
	*cl = call{args: a}
	localErr := c.prepare(cl)
	c.seq++
	if c.n == 1 {
		if localErr == nil && cl.count > 0 {
			c.local(cl)
		}
		return localErr
	}
	c.post(c.seq, describe(cl, localErr))
	if localErr != nil {
		c.disagreement(abortDisagree) // aborts unless every rank found the call invalid
		return localErr
	}
	if cl.count == 0 {
		return c.agreeWait(&w)
	}
	c.last = cl.plan.Decision
	c.logTuning(cl)
	return c.execute(&w, cl)
}

// prepare validates the call, slices its buffers to size and plans it.
func (c *Comm) prepare(cl *call) error {
	if cl.coll < 0 || cl.coll >= costmodel.NumColls {
		return fmt.Errorf("%w: collective %d", ErrInvalid, int(cl.coll))
	}
	if !cl.dt.Valid() {
		return fmt.Errorf("%w: dtype %d", ErrInvalid, int(cl.dt))
	}
	if cl.count < 0 {
		return fmt.Errorf("%w: count %d", ErrInvalid, cl.count)
	}
	cl.es = cl.dt.Size()
	if cl.coll == costmodel.Broadcast || cl.coll == costmodel.Reduce {
		if cl.root < 0 || cl.root >= c.n {
			return fmt.Errorf("%w: root %d of %d ranks", ErrInvalid, cl.root, c.n)
		}
	} else {
		cl.root = 0
	}
	if cl.reduces() {
		var scalar []byte
		cl.opKind = cl.op
		if cl.op >= kernels.PreMulSum {
			i := int(cl.op - kernels.PreMulSum)
			if i >= len(c.premul) || !c.premul[i].live {
				return fmt.Errorf("%w: op %d: PreMulSum operators come from RedOpCreatePreMulSum", ErrInvalid, int(cl.op))
			}
			if c.premul[i].dt != cl.dt {
				return fmt.Errorf("%w: PreMulSum operator %d was made for %v, not %v", ErrInvalid, int(cl.op), c.premul[i].dt, cl.dt)
			}
			cl.opKind, scalar = kernels.PreMulSum, c.premul[i].scalar
		}
		red, err := kernels.NewReducer(cl.dt, cl.opKind, c.n, scalar)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		cl.red, cl.comb = red, red
		if red.DevOp() == kernels.DevPreMulSum {
			// Partial results from peers are already scaled: they combine with a plain sum.
			cl.comb, _ = kernels.NewReducer(cl.dt, kernels.Sum, c.n, nil)
		}
	} else {
		cl.op, cl.opKind = 0, 0
	}
	if cl.count > (1<<62)/(c.n*cl.es) {
		return fmt.Errorf("%w: count %d is too large", ErrInvalid, cl.count)
	}
	if err := c.sliceBuffers(cl); err != nil {
		return err
	}
	p, err := c.resolve(cl.coll, cl.dt, cl.opKind, cl.count)
	if err != nil {
		return err
	}
	cl.plan = p
	return nil
}

// sliceBuffers checks the buffer sizes, cuts them to size, and finds in-place calls.
func (c *Comm) sliceBuffers(cl *call) error {
	one := cl.count * cl.es
	all := one * c.n
	sendNeed, recvNeed := one, one
	switch cl.coll {
	case costmodel.AllGather:
		recvNeed = all
	case costmodel.ReduceScatter:
		sendNeed = all
	case costmodel.Broadcast:
		if c.rank != cl.root {
			sendNeed = -1
		}
	case costmodel.Reduce:
		if c.rank != cl.root {
			recvNeed = -1
		}
	}
	cut := func(name string, b []byte, need int) ([]byte, error) {
		if need < 0 {
			return nil, nil
		}
		if len(b) < need {
			return nil, fmt.Errorf("%w: %v %s buffer of %d bytes, need %d", ErrInvalid, cl.coll, name, len(b), need)
		}
		return b[:need:need], nil
	}
	var err error
	if cl.send, err = cut("send", cl.send, sendNeed); err != nil {
		return err
	}
	if cl.recv, err = cut("recv", cl.recv, recvNeed); err != nil {
		return err
	}
	if cl.send == nil || cl.recv == nil || one == 0 {
		return nil
	}
	// In place: the smaller buffer is this rank's block of the larger one (or they are the same).
	s, r := cl.send, cl.recv
	off := c.rank * one
	switch cl.coll {
	case costmodel.AllGather:
		r = r[off : off+one]
	case costmodel.ReduceScatter:
		s = s[off : off+one]
	}
	if prims.SameBytes(s, r) {
		cl.inPlace = true
		return nil
	}
	if overlap(cl.send, cl.recv) {
		return fmt.Errorf("%w: %v send and recv buffers overlap without being in place", ErrInvalid, cl.coll)
	}
	return nil
}

func overlap(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// local runs a call on a single rank: NCCL's one-rank path, which still applies the operator's
// pre- and post-operations.
func (c *Comm) local(cl *call) {
	switch cl.coll {
	case costmodel.AllReduce, costmodel.ReduceScatter, costmodel.Reduce:
		cl.red.Load(cl.recv, cl.send)
		cl.red.Finish(cl.recv)
	default:
		if !cl.inPlace {
			copy(cl.recv, cl.send)
		}
	}
}

// endpoint returns this rank's side of the connection from rank from to rank to on channel ch,
// mapping its region on first use.
func (c *Comm) endpoint(ch, from, to int) (*wire.Endpoint, error) {
	k := epKey{ch, from, to}
	if e := c.eps[k]; e != nil {
		return e, nil
	}
	name := transport.ConnRegion(ch, from, to)
	size := c.layout.Size()
	r, err := c.tr.Region(name, size)
	if err == nil {
		err = wire.CheckRegion(r, name, size)
	}
	if err == nil {
		err = wire.ClaimLayout(r, name, c.layout.Word())
	}
	if err != nil {
		return nil, err
	}
	e := wire.NewEndpoint(r, c.layout)
	if e.Peer = from; from == c.rank {
		e.Peer = to
	}
	c.eps[k] = e
	return e, nil
}

// ring returns channel ch's ring and this rank's position in it.
func (c *Comm) ring(ch int) ([]int, int) {
	for len(c.rings) <= ch {
		r := c.topo.ring(len(c.rings))
		ix := 0
		for i, x := range r {
			if x == c.rank {
				ix = i
			}
		}
		c.rings = append(c.rings, r)
		c.ringIx = append(c.ringIx, ix)
	}
	return c.rings[ch], c.ringIx[ch]
}

// worker returns channel ch's worker of the given role, set up for cl.
func (c *Comm) worker(w *wire.Waiter, cl *call, ch, role int) *worker {
	for len(c.workers) <= ch {
		c.workers = append(c.workers, [2]*worker{})
	}
	wk := c.workers[ch][role]
	if wk == nil {
		wk = &worker{c: c, ch: ch}
		c.workers[ch][role] = wk
	}
	wk.W.From(w)
	wk.W.Bulk = cl.count*cl.es >= wire.BulkBytes
	wk.Proto = cl.plan.Proto
	wk.Red, wk.Comb = cl.red, cl.comb
	wk.Reducing = cl.reduces()
	wk.PreMul = wk.Reducing && cl.red.DevOp() == kernels.DevPreMulSum
	wk.PostDiv = wk.Reducing && cl.red.DevOp() == kernels.DevSumPostDiv
	wk.PieceBytes = cl.plan.pieceElems * cl.es
	wk.Stats = ChannelStats{}
	wk.err = nil
	wk.RaceRel, wk.RaceAcq = nil, nil
	return wk
}

// execute splits the call across its channels (contiguous element ranges, as ncclCollCbdPart
// does), sets up each channel's connections and workers, and runs every worker on its own
// goroutine (the first on the calling one).
func (c *Comm) execute(w *wire.Waiter, cl *call) error {
	cl.kc = algorithm.Call{Coll: cl.coll, Rank: c.rank, N: c.n, Dt: cl.dt, Send: cl.send, Recv: cl.recv, Count: cl.count,
		ES: cl.es, Root: cl.root, InPlace: cl.inPlace, ChunkElems: cl.plan.chunkElems}
	switch cl.plan.Algo {
	case costmodel.NVLS, costmodel.NVLSTree:
		return c.executeNVLS(w, cl)
	case costmodel.CollNetDirect:
		return c.withCollNetCause(c.executeNVLS(w, cl))
	}
	total := cl.count
	nc := cl.plan.Channels
	per := algorithm.RoundUp(algorithm.DivUp(total, nc), algorithm.AlignElems(cl.es))
	tasks := c.tasks[:0]
	isCollNet := cl.plan.Algo == costmodel.CollNetChain
	if isCollNet {
		c.collNetWaits(w) // before the workers copy the call's waiter
	}
	for ch := 0; ch < nc; ch++ {
		lo := ch * per
		if lo >= total {
			break
		}
		hi := min(total, lo+per)
		var err error
		switch cl.plan.Algo {
		case costmodel.Tree:
			tasks, err = c.treeTasks(w, cl, ch, lo, hi, tasks)
		case costmodel.PAT:
			tasks, err = c.patTasks(w, cl, ch, lo, hi, tasks)
		case costmodel.CollNetChain:
			tasks, err = c.collNetChainTasks(w, cl, ch, lo, hi, tasks)
		default:
			tasks, err = c.ringTasks(w, cl, ch, lo, hi, tasks)
		}
		if err != nil {
			c.setAbort(abortInternal)
			return err
		}
	}
	c.tasks = tasks
	spin := c.spinFits(len(tasks))
	if isCollNet {
		spin = c.collNetSpinFits(len(tasks))
	}
	for _, wk := range tasks {
		wk.W.Spin, wk.W.Shared = spin, len(tasks) > 1
	}
	tasks[0].W.Agree = true // the calling goroutine checks the peers' descriptors while it waits
	wg := &c.wg
	wg.Add(len(tasks) - 1)
	for _, wk := range tasks[1:] {
		go wk.runJob(wg)
	}
	tasks[0].runJob(nil)
	var agreeErr error
	if tasks[0].err == nil {
		agreeErr = c.agreeWait(&tasks[0].W)
	}
	wg.Wait()

	c.statsMu.Lock()
	for _, wk := range tasks {
		for len(c.stats) <= wk.ch {
			c.stats = append(c.stats, ChannelStats{})
		}
		c.stats[wk.ch].Add(wk.Stats)
	}
	c.statsMu.Unlock()

	if agreeErr != nil {
		return agreeErr
	}
	// This rank's own cause (context, Close) before the abort it caused in the other workers.
	var abortE error
	for _, wk := range tasks {
		switch {
		case wk.err == nil:
		case isAbort(wk.err):
			abortE = wk.err
		default:
			return wk.err
		}
	}
	if abortE != nil {
		return c.withCollNetCause(abortE) // a CollNetChain head's endpoint connection may be the cause
	}
	return nil
}

func isAbort(err error) bool {
	var ae *AbortError
	return errors.As(err, &ae)
}
