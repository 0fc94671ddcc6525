package engine

import (
	"fmt"
	"sync"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/algorithm"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/engine/transport/nvls"
	"github.com/collplan/collplan/kernels"
)

// NVLS: NVLink SHARP, where the NVSwitch reduces. NCCL binds one buffer per GPU of a node into a
// multicast object; a multimem.ld_reduce on the multicast address returns the reduction of that
// address across every member's buffer (the switch does the adds), and a multimem.st writes the
// same bytes into every member's buffer. The engine's multicast object (nvlsGroup) is a region of
// the transport, "nvls/NODE/CH", holding every member's buffers, with the same two operations;
// on CPU the rank that issues ldReduce does the adds the switch would do, reading every member's
// buffer, and st is one copy per member. Every other byte of the algorithm is a rank's own load or
// store into its own member buffer: nothing moves through a point-to-point connection.
//
// Facts from NCCL (src/transport/nvls.cc ncclNvlsBufferSetup, src/device/all_reduce.h runNvls,
// all_gather.h and reduce_scatter.h's NVLS variants; reference §9 and §10):
//   - the NVLS step is nvlsChunkSize (NCCL_NVLS_CHUNKSIZE, 128 KiB) and a head's buffer is
//     NCCL_STEPS steps (buffSize = nvlsChunkSize * NCCL_STEPS); per channel and head a rank holds
//     two of them, one for data going up to the switch (scatter, then ld_reduce) and one for data
//     coming down (st, then gather): nvlsPerRankSize = nChannels * 2 * buffSize, times nHeads;
//   - in one node every rank is a head (nHeads = localRanks), and head h reduces share h of every
//     step: AllReduce scatters each step's n shares of its input into the up buffers, each rank
//     ld_reduces its share and st's the result into every member's down buffer, and each rank
//     gathers the whole step out of its own down buffer; AllGather st's a rank's block into every
//     member's down buffer, and ReduceScatter scatters the n blocks and ld_reduces its own block
//     straight into its output;
//   - legality (nvlsSupport, ncclNvlsSupported): Simple only; AllReduce, AllGather and
//     ReduceScatter; sum or min/max on int32, uint32, int64, uint64, float16 and bfloat16, sum
//     only on float32 and float64; no int8, uint8, fp8, prod, avg (either device form) or
//     PreMulSum; AllGather skips the op and dtype check; AllGather and ReduceScatter need
//     localRanks <= 32; at least 2 GPUs; across nodes NCCL runs NVLS only with CollNet (NVLS_TREE
//     is the multi-node algorithm), so here NVLS is one virtual node of every rank;
//   - the chunk (calcCollChunking): nvlsChunkSize, shrunk to 64 KiB when nBytes < 64*ops*chunk,
//     to 32 KiB when < 8*ops*chunk, to 16 KiB when < 2*ops*chunk (ops = nChannels*nHeads, where
//     nChannels is the work piece's, 1; each only when the chunk is still larger).
//
// The engine scales the step to its buffers: nvlsStep = min(NVLSChunk, Simple/NCCL_STEPS), so
// tests with tiny buffers wrap the NVLS slots as they wrap the connections. The CUDA kernel of
// the same algorithm (multimem instructions) is to share the step rule and NVLSLayout.
//
// Region layout ("nvls/NODE/CH", n members, S = the step's bytes per head):
//
//	line 0              layout word (n and S)
//	line 1+3m           member m's posted counter: steps whose input m has scattered (stage in)
//	line 2+3m           member m's reduced counter: steps whose share m has ld_reduced and st'd
//	line 3+3m           member m's done counter: steps m has finished (gathered, and its reads of
//	                    every member's up buffer over): the slot is free again
//	then per member m   up buffer:   NCCL_STEPS slots of n*S bytes (share h at h*S)
//	                    down buffer: NCCL_STEPS slots of n*S bytes
//
// Step s uses slot s mod NCCL_STEPS of every buffer. A rank scatters step s once every member's
// ldReduce of step s-NCCL_STEPS is over (the same 8-step discipline as a connection's head) and
// publishes posted; ld_reduces and st's its share once every member has posted s and gathered
// s-NCCL_STEPS, and publishes reduced; gathers once every member has reduced s, and publishes
// done (engine/internal/algorithm's nvls.go: NVLS.Run and blocked). The step count carries on
// across calls.

// NVLSRegion returns the name of the multicast object of virtual node node on channel ch:
// "nvls/NODE/CH" (nvls.Region).
func NVLSRegion(node, ch int) string { return nvls.Region(node, ch) }

// NVLSLayout is the geometry of a multicast object's region (the layout above; its room is
// engine/transport/nvls), shared with any other implementation of the same algorithm (a CUDA
// kernel with multimem instructions binds the same buffers and counters): Members members,
// StepBytes bytes per head per step.
type NVLSLayout = nvls.Layout

// The counters of a member, in the order of its three lines (nvls.Posted, nvls.Reduced,
// nvls.Done).
const (
	NVLSPosted  = nvls.Posted  // steps whose input the member has scattered
	NVLSReduced = nvls.Reduced // steps whose share the member has ld_reduced and st'd
	NVLSDone    = nvls.Done    // steps the member has finished: their slots are free
)

// nvlsStepBytes is the NVLS step (one head's bytes per step) of buffers b: NCCL's nvlsChunkSize,
// at most a Simple FIFO slot.
func (c *Comm) nvlsStepBytes() int {
	b := c.cfg.Buffers
	return int(min(b.NVLSChunk, b.Simple/NCCLSteps))
}

// nvlsGroup is this rank's view of one channel's multicast object (its room: engine/transport/nvls).
type nvlsGroup = nvls.Group

// nvlsWorker runs one channel's NVLS, NVLS_TREE or CollNetDirect share of a call on one
// goroutine: the kernel (engine/internal/algorithm's NVLS), its channel and its error.
type nvlsWorker struct {
	algorithm.NVLS
	ch  int
	err error
}

// nvlsCheck returns the error of an NVLS plan that NCCL would not run (see the facts above):
// ErrInvalid, the same on every rank.
func nvlsCheck(n, rpn int, coll costmodel.Coll, dt kernels.Dtype, op kernels.Op, proto costmodel.Proto) error {
	switch {
	case coll != costmodel.AllReduce && coll != costmodel.AllGather && coll != costmodel.ReduceScatter:
		return fmt.Errorf("%w: NVLS for %v (NCCL runs it for AllReduce, AllGather and ReduceScatter)", ErrInvalid, coll)
	case proto != costmodel.Simple:
		return fmt.Errorf("%w: NVLS with %v (NCCL runs NVLS with Simple only)", ErrInvalid, proto)
	case n < 2:
		return fmt.Errorf("%w: NVLS on %d rank (it needs at least 2)", ErrInvalid, n)
	case rpn != n:
		return fmt.Errorf("%w: NVLS across %d virtual nodes of %d ranks (NVLS runs in one node; across nodes NCCL needs CollNet or NVLS_TREE)",
			ErrInvalid, algorithm.DivUp(n, rpn), rpn)
	case coll != costmodel.AllReduce && n > 32:
		return fmt.Errorf("%w: NVLS %v on %d local ranks (NCCL allows at most 32)", ErrInvalid, coll, n)
	case coll != costmodel.AllGather && !nvlsOpOK(dt, op):
		return fmt.Errorf("%w: NVLS %v with %v %v (the switch reduces sum and min/max of 32- and 64-bit integers, float16 and bfloat16, and sum of float32 and float64)",
			ErrInvalid, coll, dt, op)
	}
	return nil
}

// nvlsOpOK is NCCL's ncclNvlsSupported: which op and dtype the switch reduces.
func nvlsOpOK(dt kernels.Dtype, op kernels.Op) bool {
	switch dt {
	case kernels.Int32, kernels.Uint32, kernels.Int64, kernels.Uint64, kernels.Float16, kernels.Bfloat16:
		return op == kernels.Sum || op == kernels.Min || op == kernels.Max
	case kernels.Float32, kernels.Float64:
		return op == kernels.Sum
	}
	return false
}

// nvlsChunk is NCCL's NVLS chunk for a call of nBytes (the model byte count): the step, shrunk for small calls as calcCollChunking shrinks nvlsChunkSize. planned, when positive,
// is the planner's chunk (capped at the step).
func (c *Comm) nvlsChunk(nBytes, planned int64) int64 {
	step := int64(c.nvlsStepBytes())
	if planned > 0 {
		return min(planned, step)
	}
	chunk := step
	ops := int64(c.n) // nChannels is the work piece's, 1 per part (reference §10)
	for _, s := range []struct{ mul, to int64 }{{64, 64 << 10}, {8, 32 << 10}, {2, 16 << 10}} {
		if nBytes < s.mul*ops*chunk && chunk > s.to {
			chunk = s.to
		}
	}
	return chunk
}

// nvlsGroupFor returns channel ch's multicast object of this rank's virtual node, mapping its
// region on first use. (NVLS runs in one node of every rank; NVLS_TREE in each of several.)
func (c *Comm) nvlsGroupFor(ch int) (*nvlsGroup, error) { return c.nodeGroup(&c.nvls, ch, NVLSRegion) }

// nodeGroup returns channel ch's entry of groups (the NVLS multicast objects, or CollNetDirect's
// regions of the same layout), mapping region name(node, ch) of this rank's virtual node on first use.
func (c *Comm) nodeGroup(groups *[]*nvlsGroup, ch int, name func(node, ch int) string) (*nvlsGroup, error) {
	for len(*groups) <= ch {
		*groups = append(*groups, nil)
	}
	if g := (*groups)[ch]; g != nil {
		return g, nil
	}
	rpn := c.topo.rpn
	node := c.rank / rpn
	l := NVLSLayout{Members: rpn, StepBytes: c.nvlsStepBytes()}
	rn := name(node, ch)
	size := l.Size()
	r, err := c.tr.Region(rn, size)
	if err == nil {
		err = wire.CheckRegion(r, rn, size)
	}
	if err == nil {
		err = wire.ClaimLayout(r, rn, l.Word())
	}
	if err != nil {
		return nil, err
	}
	g := nvls.NewGroup(r, l, c.rank-node*rpn, node*rpn)
	(*groups)[ch] = g
	return g, nil
}

// executeNVLS is execute for an NVLS or NVLS_TREE call: one worker per channel (contiguous
// element ranges, as for the other algorithms), the first on the calling goroutine.
func (c *Comm) executeNVLS(w *wire.Waiter, cl *call) error {
	total := cl.count
	nc := cl.plan.Channels
	per := algorithm.RoundUp(algorithm.DivUp(total, nc), algorithm.AlignElems(cl.es))
	tasks := c.nvlsRun[:0]
	isCollNet := cl.plan.Algo == costmodel.CollNetDirect
	if isCollNet {
		c.collNetWaits(w)
	}
	for ch := 0; ch < nc; ch++ {
		lo := ch * per
		if lo >= total {
			break
		}
		var g *nvlsGroup
		var link *collnet.Link
		var err error
		if isCollNet {
			if g, err = c.collNetGroupFor(ch); err == nil {
				link, err = c.collNetLink(ch, g.Me)
			}
		} else {
			g, err = c.nvlsGroupFor(ch)
		}
		if err != nil {
			c.setAbort(abortInternal)
			return err
		}
		for len(c.nvlsWks) <= ch {
			c.nvlsWks = append(c.nvlsWks, &nvlsWorker{})
		}
		wk := c.nvlsWks[ch]
		*wk = nvlsWorker{NVLS: algorithm.NVLS{Cl: &cl.kc, W: w.Copy(), G: g, Red: cl.red, Comb: cl.comb, Lo: lo, Hi: min(total, lo+per), Net: link}, ch: ch}
		if link != nil {
			wk.NNodes, wk.Addr = c.topo.nNodes, c.cfg.CollNet.Addr
			if cl.coll != costmodel.AllGather {
				wk.NetOp, wk.PostDiv = collNetWireOp(cl.opKind), cl.red.DevOp() == kernels.DevSumPostDiv
			}
		}
		if cl.plan.Algo == costmodel.NVLSTree {
			if wk.Tree, err = c.nvlsTreeLinksFor(ch); err != nil {
				c.setAbort(abortInternal)
				return err
			}
		}
		wk.W.Bulk = cl.count*cl.es >= wire.BulkBytes
		tasks = append(tasks, wk)
	}
	c.nvlsRun = tasks
	spin := c.spinFits(len(tasks))
	if isCollNet {
		spin = c.collNetSpinFits(len(tasks))
	}
	for _, wk := range tasks {
		wk.W.Spin, wk.W.Shared = spin, len(tasks) > 1
	}
	tasks[0].W.Agree = true
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
	return abortE
}

func (wk *nvlsWorker) runJob(wg *sync.WaitGroup) {
	wk.err = wk.Run()
	if wg != nil {
		wg.Done()
	}
}
