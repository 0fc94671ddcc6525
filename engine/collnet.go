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

// collNetChainTasks sets up channel ch's CollNetChain for cl and appends its workers: the head
// (the node's first rank) runs algorithm.CollNetChain; every other rank runs Tree's reduce-up and
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
		wk.cn = algorithm.CollNetChain{Cl: &cl.kc, Lo: lo, Hi: hi, Link: link, FromKid: fromKid, ToKid: toKid,
			NetOp: collNetWireOp(cl.opKind), Addr: c.cfg.CollNet.Addr}
		wk.job = jobCollNetChainHead
		return append(tasks, wk), nil
	}
	return c.treeBranchTasks(w, cl, ch, lo, hi, c.rank-1, fromKids, toKids, tasks)
}
