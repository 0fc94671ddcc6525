package engine

import (
	"fmt"
	"runtime"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/algorithm"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/kernels"
)

// CollNet: AllReduce where the network reduces. NCCL hands each node's partial result to a collnet
// plugin (SHARP: the switches reduce across the nodes) and gets the reduction over every node back.
// Here the network is the aggregation endpoint (engine/transport/collnet), a process of its own
// reached over TCP; everything inside a virtual node stays on the engine's transports.
//
// Facts from NCCL (src/device/all_reduce.h's COLLNET_DIRECT and COLLNET_CHAIN Simple kernels,
// src/graph/connect.cc connectCollNet, src/enqueue.cc calcCollChunking and getCollNetSupport,
// src/graph/tuning.cc; reference §2, §3 and §5):
//   - CollNetDirect: every local rank is a head (nHeads = localRanks) and owns share h of every
//     step (offset + (bid*nHeads + headRank)*chunkSize). Each rank scatters the step's shares of
//     its input to the heads, applying the operator's pre-op (the PreMulSum scalar, float avg's
//     1/n) as it reads its input; head h reduces share h across the node and sends it to the
//     network (recvReduceSend to the collnet connection); it receives the reduction across the
//     nodes (recvCopyDirectSend with postOp: integer avg divides here), sends it to every local
//     rank, and every rank gathers the whole step. NCCL's intra-node legs use direct pointers
//     into the peers' buffers;
//   - CollNetChain: the node's ranks form a chain; reduce-up runs recvReduceSend along it (send
//     at its far end) to the head, whose up is the collnet connection; the head receives the
//     reduction from the network and, "the first in the broadcast chain", applies the postOp and
//     sends it down the chain (recvCopySend, recv at the far end). Up and down run concurrently
//     (the kernel splits its threads in two);
//   - legality: AllReduce; CollNetDirect also AllGather and ReduceScatter, with a plugin that has
//     iallgather and ireducescatter (this endpoint has both: collnet.Has) and every node's
//     localRanks <= collNetHeadsNum (here every local rank is a head); Simple only (busBw = 0 for LL and LL128); CollNet is built only for 2 or more nodes;
//     CollNetDirect only when no node has more than NCCL_MAX_DIRECT_ARITY+1 = 8 local ranks; the
//     op/dtype must be in collNetSupportMatrix, the plugin's answer, looked up with avg and
//     PreMulSum translated to sum (getCollNetSupport: the pre-op and post-op run on the GPUs,
//     the network sums; AllGather skips the matrix). This endpoint answers yes for sum, min and max on int32, uint32, int64,
//     uint64, float16, float32, float64 and bfloat16 (a SHARP-class switch: no 8-bit types, no
//     prod); so avg and PreMulSum run on those dtypes too;
//   - the chunk (calcCollChunking): CollNetDirect starts from the Simple step (NCCL_BUFFSIZE /
//     NCCL_STEPS) and halves it while nBytes/(nChannels*nHeads*chunk) < depth*64 and the chunk
//     is above 128 KiB, then while < depth*8 above 64 KiB, then while < depth*8 above 32 KiB
//     (depth 2 with local peers, else 1); CollNetChain starts from min(256 KiB, the Simple step)
//     and halves while nBytes/(nChannels*chunk) < depth*64 above 128 KiB, < depth*8 above
//     64 KiB, < depth above 32 KiB (depth = nRanks/nNodes).
//
// The engine's choices:
//   - CollNetDirect's intra-node legs use a shared region of NVLS's shape ("collnet/NODE/CH",
//     NVLSLayout, nvls.go), which stands for NCCL's direct pointers: each rank scatters (with the
//     pre-op) into its up buffer, head h reads share h of every member's up buffer (the sum a
//     direct-read head computes), and writes the network's result into every member's down
//     buffer, from which each rank gathers. So no point-to-point connection inside a node carries a
//     byte, the intra-node part pipelines NCCL_STEPS steps like NVLS, and its staging is fixed. Its
//     step is NVLS's (min(NCCL_NVLS_CHUNKSIZE, the Simple slot)), which caps NCCL's chunk rule:
//     NCCL's direct pointers need no staging at all, and a 512 KiB step would put 2 x 8 x
//     localRanks^2 x 512 KiB in the region. The phases run on the NVLS worker (scatter, net-up,
//     net-down, gather), so a rank keeps up to NCCL_STEPS steps in flight to the endpoint.
//   - CollNetChain's chain uses the ordinary Simple connections ("conn/C/FROM-TO"; with Tree's
//     and Ring's between the same ranks, in call order), one chunk per FIFO step, and the head
//     is the node's first rank. Non-head ranks run Tree's reduce-up and broadcast-down workers;
//     the head runs one worker that pipelines both ends: it sends a step to the endpoint as soon
//     as its child's partial is in and it has a credit, and sends a result down as soon as it is
//     back, keeping up to NCCL_STEPS steps in flight.
//   - each (channel, share) a rank heads has its own endpoint connection (collnet.Link), made by
//     the first CollNet call on that channel and shared by both algorithms (share 0 of a node is
//     its first rank in both); the endpoint groups the connections by Config.CollNet.Job.

// maxCollNetHeads is NCCL_MAX_DIRECT_ARITY+1: CollNetDirect's most local ranks.
const maxCollNetHeads = collnet.MaxHeads

// collNetWireOp is the operator that travels to the network for user op (already folded:
// PreMulSum handles are PreMulSum): avg and PreMulSum as sum (getCollNetSupport).
func collNetWireOp(op kernels.Op) kernels.Op {
	if op == kernels.Avg || op == kernels.PreMulSum {
		return kernels.Sum
	}
	return op
}

// collNetColl is the endpoint's collective for coll (AllReduce, AllGather, ReduceScatter).
func collNetColl(coll costmodel.Coll) collnet.Coll {
	switch coll {
	case costmodel.AllGather:
		return collnet.AllGather
	case costmodel.ReduceScatter:
		return collnet.ReduceScatter
	}
	return collnet.AllReduce
}

// collNetCheck returns the error of a CollNet plan that NCCL would not run (see the facts above):
// ErrInvalid, the same on every rank.
func collNetCheck(a costmodel.Algo, n, rpn int, coll costmodel.Coll, dt kernels.Dtype, op kernels.Op, proto costmodel.Proto) error {
	nNodes := algorithm.DivUp(n, rpn)
	gathers := a == costmodel.CollNetDirect && (coll == costmodel.AllGather || coll == costmodel.ReduceScatter)
	switch {
	case gathers && !collnet.Has(collNetColl(coll)):
		return fmt.Errorf("%w: COLLNET_DIRECT for %v (NCCL runs it only with a collnet plugin that has iallgather and ireducescatter)",
			ErrInvalid, coll)
	case coll != costmodel.AllReduce && !gathers:
		return fmt.Errorf("%w: %v for %v (NCCL runs CollNet for AllReduce, and CollNetDirect for AllGather and ReduceScatter with a plugin that has them)",
			ErrInvalid, a, coll)
	case proto != costmodel.Simple:
		return fmt.Errorf("%w: %v with %v (NCCL runs CollNet with Simple only)", ErrInvalid, a, proto)
	case nNodes < 2:
		return fmt.Errorf("%w: %v on one virtual node of %d ranks (NCCL builds CollNet for 2 or more nodes)", ErrInvalid, a, n)
	case a == costmodel.CollNetDirect && n%rpn != 0:
		return fmt.Errorf("%w: COLLNET_DIRECT on %d ranks in virtual nodes of %d (every node's heads meet their peers of the other nodes: the nodes must have the same size)",
			ErrInvalid, n, rpn)
	case a == costmodel.CollNetDirect && rpn > maxCollNetHeads:
		return fmt.Errorf("%w: COLLNET_DIRECT with %d ranks per node (NCCL allows at most %d local ranks)", ErrInvalid, rpn, maxCollNetHeads)
	case coll != costmodel.AllGather && !collnet.OpOK(dt, collNetWireOp(op)):
		return fmt.Errorf("%w: %v %v with %v %v (the endpoint reduces sum, min and max of 32- and 64-bit integers and of float16, bfloat16, float32 and float64; avg and PreMulSum travel as sum)",
			ErrInvalid, a, coll, dt, op)
	}
	return nil
}

// collNetChunk is NCCL's chunk for a CollNet call of nBytes (the model byte count) on nc
// channels (the facts above), capped for CollNetDirect at the region's step. planned, when
// positive, is the planner's chunk (capped the same way).
func (c *Comm) collNetChunk(a costmodel.Algo, nBytes, planned int64, nc int) int64 {
	slot := c.cfg.Buffers.Simple / NCCLSteps
	limit := slot
	if a == costmodel.CollNetDirect {
		limit = int64(c.nvlsStepBytes())
	}
	if planned > 0 {
		return min(planned, limit)
	}
	type rule struct{ mul, above int64 }
	var ops, depth int64
	var rules [3]rule
	chunk := slot
	if a == costmodel.CollNetDirect {
		ops, depth = int64(nc)*int64(c.topo.rpn), 1
		if c.topo.rpn > 1 {
			depth = 2
		}
		rules = [3]rule{{64, 128 << 10}, {8, 64 << 10}, {8, 32 << 10}}
	} else {
		chunk = min(256<<10, slot)
		ops, depth = int64(nc), int64(c.n/c.topo.nNodes)
		rules = [3]rule{{64, 128 << 10}, {8, 64 << 10}, {1, 32 << 10}}
	}
	for _, r := range rules {
		for nBytes/(ops*chunk) < depth*r.mul && chunk > r.above {
			chunk /= 2
		}
	}
	return min(chunk, limit)
}

// collNetGroupFor returns channel ch's CollNetDirect region of this rank's virtual node, mapping it
// on first use.
func (c *Comm) collNetGroupFor(ch int) (*nvlsGroup, error) {
	return c.nodeGroup(&c.cnGroups, ch, CollNetRegion)
}

// CollNetRegion returns the name of CollNetDirect's intra-node region of virtual node node on
// channel ch: "collnet/NODE/CH".
func CollNetRegion(node, ch int) string {
	return "collnet" + NVLSRegion(node, ch)[len("nvls"):]
}

// collNetLink returns this rank's endpoint connection for (ch, share), dialling it on first use.
func (c *Comm) collNetLink(ch, share int) (*collnet.Link, error) {
	k := [2]int{ch, share}
	if l := c.cnLinks[k]; l != nil {
		return l, nil
	}
	if c.cnLinks == nil {
		c.cnLinks = make(map[[2]int]*collnet.Link)
	}
	l, err := collnet.Dial(&c.ctl, c.cfg.CollNet.Addr, c.cfg.CollNet.Job, ch, share, c.rank/c.topo.rpn, c.topo.nNodes, int(c.cfg.Buffers.Simple/NCCLSteps))
	if err != nil {
		return nil, err
	}
	c.cnLinks[k] = l
	return l, nil
}

// closeCollNet closes the endpoint connections (Close, before the regions go).
func (c *Comm) closeCollNet() {
	for k, l := range c.cnLinks {
		l.Close()
		delete(c.cnLinks, k)
	}
}

// collNetWaits adjusts a CollNet call's waiter for the endpoint, one more process (or, when the
// ranks are goroutines of one process, goroutine) that needs a core while the ranks wait for it:
// rank processes yield the OS thread when they and the endpoint outnumber the cores, so the
// endpoint gets one (waiter.go: osYieldNeeded counts the ranks alone).
func (c *Comm) collNetWaits(w *wire.Waiter) {
	if c.procRanks <= 1 && c.n+1 > runtime.NumCPU() {
		w.OSYield = true
	}
}

// collNetSpinFits is spinFits for a CollNet call whose ranks each run k polling goroutines: every
// poller and the endpoint have a core (and, in process, a P).
func (c *Comm) collNetSpinFits(k int) bool {
	if c.procRanks > 1 {
		return c.procRanks*k+1 <= c.procs
	}
	return c.n*k+1 <= c.cores && k <= c.procs
}

// collNetError returns the first endpoint connection's failure, if any.
func (c *Comm) collNetError() error {
	for _, l := range c.cnLinks {
		if err := l.Err(); err != nil {
			return err
		}
	}
	return nil
}

// withCollNetCause adds the endpoint connection's failure to an abort it caused.
func (c *Comm) withCollNetCause(err error) error {
	if err == nil || !isAbort(err) {
		return err
	}
	if cause := c.collNetError(); cause != nil {
		return fmt.Errorf("%w: %v", err, cause)
	}
	return err
}

// CollNetDirect on the NVLS worker: the phases of one step (nvls.go's run), with what they wait for
// and publish:
//
//	cn-scatter  as scatter, but loading the input with the pre-op (every member's reduced >= s-7);
//	            publishes posted
//	net-up      every member's posted >= s+1 and, when this rank's share of the step is not
//	            empty, a credit on its endpoint connection: reduces share me across the members'
//	            up slots into the connection's frame and sends it
//	net-down    this share's result is back, and every member's done >= s-7: applies the post-op,
//	            st's it into every member's down slot; publishes reduced
//	gather      as NVLS's

// netBlocked is blocked for net-up and net-down of step s, the i-th of the call on this channel. A
// wait for the endpoint names rank n, which the watchdog takes for the endpoint (wire's wait.go).
func (wk *nvlsWorker) netBlocked(kind uint8, s uint64, i int, free uint64) int {
	g, l := wk.g, wk.net
	_, rem, share := wk.arStep(i)
	mine := g.Me*share < rem
	if kind == phNetUp {
		if m := g.Behind(g.Posted, s+1); m >= 0 {
			return m
		}
		if mine && !l.SendReady() {
			return wk.comm.n
		}
		return -1
	}
	if mine && !l.RecvReady() {
		return wk.comm.n
	}
	return g.Behind(g.Done, free)
}

// netAct runs net-up or net-down of step s on this rank's share, nb bytes at me*S of the slots.
func (wk *nvlsWorker) netAct(kind uint8, s uint64, nb int) {
	g, l, cl := wk.g, wk.net, wk.cl
	off := g.Me * g.L.StepBytes
	if kind == phNetUp {
		if nb > 0 {
			g.LdReduce(cl.comb, s, l.Payload(nb), off)
			l.Send(collnet.AllReduce, cl.dt, wk.netOp, nb)
			wk.stats.LdReduceBytes += uint64(nb)
			wk.stats.WireBytes += uint64(nb)
			wk.stats.PayloadBytes += uint64(nb)
			wk.stats.Steps++
		}
		return
	}
	if nb > 0 {
		res := l.Result()
		if len(res) != nb {
			l.Fail(fmt.Errorf("engine: CollNet endpoint %s: result of %d bytes for a step of %d", wk.c().cfg.CollNet.Addr, len(res), nb))
			return // the abort ends the next wait
		}
		if wk.postDiv {
			cl.red.Finish(res)
		}
		g.St(s, res, off)
		l.Release()
		wk.stats.RecvBytes += uint64(nb)
		wk.stats.StBytes += uint64(nb)
	}
	wire.StoreRelease(g.Reduced[g.Me], s+1)
}

func (wk *nvlsWorker) c() *Comm { return wk.comm }

// cnChainRun is a CollNetChain head's schedule on one channel: elements [lo, hi) in chunks of one
// FIFO step, up from the chain (or its own input alone) to the endpoint, down from the endpoint to
// the chain.
type cnChainRun struct {
	cl             *call
	lo, hi         int
	link           *collnet.Link
	fromKid, toKid *wire.Endpoint // nil in a node of one rank
	netOp          kernels.Op
}

// collNetChainTasks sets up channel ch's CollNetChain for cl and appends its workers: the head
// (the node's first rank) runs cnChainRun; every other rank runs Tree's reduce-up and
// broadcast-down with its chain neighbours (the previous rank up, the next one down).
func (c *Comm) collNetChainTasks(w *wire.Waiter, cl *call, ch, lo, hi int, tasks []*worker) ([]*worker, error) {
	nlo, nhi := c.topo.nodeRanks(c.rank / c.topo.rpn)
	var fromKids, toKids []*wire.Endpoint
	var fromKid, toKid *wire.Endpoint
	if c.rank+1 < nhi {
		var err error
		if fromKid, err = c.endpoint(ch, c.rank+1, c.rank); err != nil {
			return tasks, err
		}
		if toKid, err = c.endpoint(ch, c.rank, c.rank+1); err != nil {
			return tasks, err
		}
		fromKids, toKids = []*wire.Endpoint{fromKid}, []*wire.Endpoint{toKid}
	}
	if c.rank == nlo {
		link, err := c.collNetLink(ch, 0)
		if err != nil {
			return tasks, err
		}
		wk := c.worker(w, cl, ch, 0)
		wk.SetPeers(nil, nil)
		wk.cn = cnChainRun{cl: cl, lo: lo, hi: hi, link: link, fromKid: fromKid, toKid: toKid, netOp: collNetWireOp(cl.opKind)}
		wk.job = jobCollNetChainHead
		return append(tasks, wk), nil
	}
	return c.treeBranchTasks(w, cl, ch, lo, hi, c.rank-1, fromKids, toKids, tasks)
}

// run pipelines the head's two ends on one goroutine: up (the child's partial reduced with this
// rank's input, or the input alone with the pre-op, sent to the endpoint) as soon as the child's
// step is in and the connection has a credit; down (the result, post-op applied, into the output
// and to the child) as soon as it is back and the child has a free slot.
func (r *cnChainRun) run(w *worker) error {
	cl, l := r.cl, r.link
	es, ce := cl.es, cl.plan.chunkElems
	steps := algorithm.DivUp(r.hi-r.lo, ce)
	for up, down, i := 0, 0, 0; down < steps; {
		moved := false
		if up < steps && l.SendReady() && (r.fromKid == nil || r.fromKid.RecvReady()) {
			e0 := r.lo + up*ce
			nel := min(ce, r.hi-e0)
			nb := nel * es
			dst, in := l.Payload(nb), algorithm.Span(cl.send, e0, nel, es)
			if r.fromKid != nil {
				w.Red.Reduce(dst, r.fromKid.SimpleSlotBytes(nb), in)
				r.fromKid.Release()
				w.Stats.RecvBytes += uint64(nb)
			} else {
				w.Red.Load(dst, in)
			}
			l.Send(collnet.AllReduce, cl.dt, r.netOp, nb)
			w.Stats.WireBytes += uint64(nb)
			w.Stats.PayloadBytes += uint64(nb)
			w.Stats.Steps++
			up++
			moved = true
		}
		if down < up && l.RecvReady() && (r.toKid == nil || r.toKid.SendReady()) {
			e0 := r.lo + down*ce
			nel := min(ce, r.hi-e0)
			nb := nel * es
			res := l.Result()
			if len(res) != nb {
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s: result of %d bytes for a step of %d", w.c.cfg.CollNet.Addr, len(res), nb))
			} else {
				out := algorithm.Span(cl.recv, e0, nel, es)
				copy(out, res)
				if w.PostDiv {
					w.Red.Finish(out)
				}
				l.Release()
				w.Stats.RecvBytes += uint64(nb)
				if r.toKid != nil {
					copy(r.toKid.SimpleSlotBytes(nb), out)
					r.toKid.PublishSimple()
					w.Stats.WireBytes += uint64(nb)
					w.Stats.PayloadBytes += uint64(nb)
					w.Stats.Steps++
				}
				down++
				moved = true
			}
		}
		if moved {
			i = 0
			continue
		}
		peer := w.c.n // the endpoint (wire's watchdog), unless the child's partial is what is missing
		if r.fromKid != nil && up < steps && l.SendReady() && !r.fromKid.RecvReady() {
			peer = r.fromKid.Peer
		}
		if err := w.W.Idle(i, peer); err != nil {
			return err
		}
		i++
	}
	return nil
}

// CollNetDirect AllGather and ReduceScatter on the NVLS worker. A call step i carries a chunk of
// ce elements at e0 of every block; it runs as nNodes region steps j = i*nNodes + k, one per node
// k, so each region slot holds one node's part whatever the node count (the slots keep NVLS's
// size). This rank (local index me of node K) heads share me: the blocks of ranks k*rpn + me.
//
//	AllGather (the plugin's iallgather: each node's part in, every node's parts out)
//	  ag-up      k = 0: a credit on the endpoint connection; sends this rank's own chunk (its
//	             input needs no node partner: the head of share me is rank me itself); publishes
//	             posted
//	  ag-down    the result is in (nNodes chunks, node k's at k*nb) and every member's done >= j-7:
//	             st's node k's chunk into every member's down slot at me*S (release at the last
//	             k); publishes reduced
//	  ag-gather  every member's reduced >= j+1: copies slot h*S of its down slot to block
//	             k*rpn + h of the output, for every local h; publishes done
//
//	ReduceScatter (the plugin's ireducescatter: nNodes parts in, the part of this node out)
//	  rs-scatter every member's reduced >= j-7: loads, with the pre-op, the chunk of block
//	             k*rpn + h of its input into its up slot at h*S, for every local h; publishes
//	             posted
//	  rs-up      every member's posted >= j+1 and a credit: reduces share me across the members'
//	             up slots into part k of the frame; at the last k sends the nNodes parts
//	  rs-down    at the last k, the result is in: the post-op, then this rank's output chunk;
//	             publishes reduced and done
//
// NCCL's all_gather.h and reduce_scatter.h run the same exchange with direct pointers into the
// peers' buffers: the region stands for them, as it does for AllReduce.

// cnGatherStep returns region step j's chunk: node k, elements [e0, e0+nel) of every block.
func (wk *nvlsWorker) cnGatherStep(j int) (k, e0, nel int) {
	nNodes, ce := wk.c().topo.nNodes, wk.cl.plan.chunkElems
	k = j % nNodes
	e0 = wk.lo + (j/nNodes)*ce
	return k, e0, min(ce, wk.hi-e0)
}

// cnGatherBlocked is blocked for the AllGather and ReduceScatter phases of region step s, the
// j-th of the call on this channel (a wait for the endpoint names rank n).
func (wk *nvlsWorker) cnGatherBlocked(kind uint8, s uint64, j int, free uint64) int {
	g, l := wk.g, wk.net
	k, _, _ := wk.cnGatherStep(j)
	last := k == wk.c().topo.nNodes-1
	switch kind {
	case phCnAgUp:
		if k == 0 && !l.SendReady() {
			return wk.comm.n
		}
		return -1
	case phCnAgDown:
		if !l.RecvReady() {
			return wk.comm.n
		}
		return g.Behind(g.Done, free)
	case phCnAgGather:
		return g.Behind(g.Reduced, s+1)
	case phCnRsScatter:
		return g.Behind(g.Reduced, free)
	case phCnRsUp:
		if m := g.Behind(g.Posted, s+1); m >= 0 {
			return m
		}
		if !l.SendReady() {
			return wk.comm.n
		}
		return -1
	}
	if last && !l.RecvReady() { // phCnRsDown
		return wk.comm.n
	}
	return -1
}

// cnGatherAct runs an AllGather or ReduceScatter phase of region step s, the j-th of the call.
func (wk *nvlsWorker) cnGatherAct(kind uint8, s uint64, j int) {
	cl, g, l := wk.cl, wk.g, wk.net
	rpn, nNodes := g.L.Members, wk.c().topo.nNodes
	me, S, es, count := g.Me, g.L.StepBytes, cl.es, cl.count
	k, e0, nel := wk.cnGatherStep(j)
	nb := nel * es
	last := k == nNodes-1
	addr := wk.c().cfg.CollNet.Addr
	switch kind {
	case phCnAgUp:
		if k == 0 {
			copy(l.Payload(nb), algorithm.Span(cl.send, e0, nel, es))
			l.Send(collnet.AllGather, cl.dt, kernels.Sum, nb)
			wk.stats.WireBytes += uint64(nb)
			wk.stats.PayloadBytes += uint64(nb)
			wk.stats.Steps++
		}
		wire.StoreRelease(g.Posted[me], s+1)
	case phCnAgDown:
		res := l.Result()
		if len(res) != nNodes*nb {
			l.Fail(fmt.Errorf("engine: CollNet endpoint %s: AllGather result of %d bytes for %d nodes' %d", addr, len(res), nNodes, nb))
			return // the abort ends the next wait
		}
		g.St(s, res[k*nb:(k+1)*nb], me*S)
		wk.stats.StBytes += uint64(nb)
		if last {
			l.Release()
			wk.stats.RecvBytes += uint64(len(res))
		}
		wire.StoreRelease(g.Reduced[me], s+1)
	case phCnAgGather:
		for h := 0; h < rpn; h++ {
			r := k*rpn + h
			if r != wk.c().rank || !cl.inPlace {
				copy(algorithm.Span(cl.recv, r*count+e0, nel, es), g.SlotAt(s, me, true, h*S, nb))
			}
		}
		wire.StoreRelease(g.Done[me], s+1)
	case phCnRsScatter:
		for h := 0; h < rpn; h++ {
			cl.red.Load(g.SlotAt(s, me, false, h*S, nb), algorithm.Span(cl.send, (k*rpn+h)*count+e0, nel, es))
		}
		wire.StoreRelease(g.Posted[me], s+1)
	case phCnRsUp:
		frame := l.Payload(nNodes * nb)
		g.LdReduce(cl.comb, s, frame[k*nb:(k+1)*nb], me*S)
		wk.stats.LdReduceBytes += uint64(nb)
		if last {
			l.Send(collnet.ReduceScatter, cl.dt, wk.netOp, nNodes*nb)
			wk.stats.WireBytes += uint64(nNodes * nb)
			wk.stats.PayloadBytes += uint64(nNodes * nb)
			wk.stats.Steps++
		}
	default: // phCnRsDown
		if last {
			res := l.Result()
			if len(res) != nb {
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s: ReduceScatter result of %d bytes for a part of %d", addr, len(res), nb))
				return
			}
			out := algorithm.Span(cl.recv, e0, nel, es)
			copy(out, res)
			if wk.postDiv {
				cl.red.Finish(out)
			}
			l.Release()
			wk.stats.RecvBytes += uint64(nb)
		}
		wire.StoreRelease(g.Reduced[me], s+1)
		wire.StoreRelease(g.Done[me], s+1)
	}
}
