package engine

import (
	"fmt"
	"math/bits"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/algorithm"
	"github.com/collplan/collplan/engine/internal/prims"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
)

// PAT (Parallel Aggregated Trees), NCCL's algorithm for AllGather and ReduceScatter at one rank per
// node (PatAGAlgorithm and PatRSAlgorithm in NCCL's src/include/collectives.h, run by runPat in
// src/device/all_gather.h and reduce_scatter.h; the proxy's peers in src/proxy.cc, patterns
// PatDown and PatUp). The facts the engine follows:
//
//   - Peers. A rank talks to the ranks at power-of-two distances, one "dimension" d per distance
//     2^d < n (d = 0 .. log2Up(n)-1), whatever n (not only powers of two: distances wrap mod n).
//     AllGather (PatDown) sends on dimension d to rank-2^d and receives from rank+2^d;
//     ReduceScatter (PatUp) sends to rank+2^d and receives from rank-2^d. So a rank has at most
//     log2Up(n) send and log2Up(n) receive connections per channel, and two dimensions never name
//     the same peer (0 < 2^b-2^a < n).
//   - Trees. NCCL names a block by its offset s from the rank that holds it: rank r's offset s is
//     the block of rank (r+s) mod n, offset 0 its own. AllGather broadcasts every block down a
//     binomial tree: a rank receives offset s (s > 0) over dimension fbs(s) (the first bit set),
//     from the rank at whose offset s - 2^fbs(s) the block is, and forwards it to the offsets
//     s + 2^e < n for e < fbs(s) (every e for its own block). ReduceScatter runs the same trees
//     reversed: the partial for the block at offset s is the rank's input for it reduced with the
//     children's partials (offsets s + 2^e), sent over dimension fbs(s) toward offset 0, the
//     block's owner, which makes the last reduction into its output.
//   - Transfers. Per chunk there is one transfer per s = 1 .. n-1 and rank: over dimension
//     d = fbs(s), the block at the sender's offset s - 2^d (AllGather) resp. s (ReduceScatter),
//     which is the receiver's offset s resp. s - 2^d. NCCL's op for s (PatAGAlgorithm's phase 1)
//     receives the block of offset t = s - 2^fbs(s) over fbs(t) (the first op of that block only;
//     later ones re-read the slot) and forwards it over fbs(s); leaf ops (phase 0) only receive,
//     and ops with s >= n (n not a power of two) are skipped. So every rank sends and receives
//     n-1 times per chunk (for n = 2^k, 2^(k-1-d) times on dimension d), and a block crosses at
//     most log2Up(n) hops.
//   - Aggregation and buffers. NCCL packs several ops into one FIFO slot: aggFactor (a power of
//     two) doubles while stepSize/(channelBytes*aggFactor) >= 2 and aggFactor < n/2; postFreq, the
//     ops per posted slot, is that aggFactor; then aggFactor doubles up to stepDepth (NCCL_STEPS =
//     8) times more, still below n/2, which lets that many slots per peer be in flight. Op a of an
//     aggregated step writes its nelem elements at slot offset (a mod postFreq)*nelem, a received
//     slot is read by every forward of its data and handed back on the last one, and
//     parallelFactor = min(16, postFreq) ops run at once (NCCL_PAT_NWORKERS/WARP_SIZE = 512/32
//     worker groups). nelem is the chunk: one op never carries more than one slot (stepSize =
//     chunkCount*sizeof(T)). A chunk's ops all finish before the next chunk's.
//   - Order. NCCL runs the largest distances first. AllGather, n = 8, rank 0, one slot per op:
//     its own block to distances 4 and 2; block 4 (received from distance 4) on to 2; its own
//     block, then blocks 2, 4 and 6 (6 received from distance 2) to distance 1; last the leaf
//     receives of blocks 1, 3, 5, 7 from distance 1. ReduceScatter runs the mirror: the leaf
//     partials of blocks 7, 3, 5, 1 to distance 1 first, the rank's own block's last partial
//     (from distance 1) last. Aggregation bounds what is in flight per peer to the FIFO depth.
//   - Legality (src/graph/tuning.cc, enqueue.cc): PAT runs only AllGather and ReduceScatter, only
//     the Simple protocol, only where NCCL_PAT_ENABLE allows it (auto: nNodes == nRanks, one GPU per
//     node, and a host network); ReduceScatter with PreMulSum or SumPostDiv (so avg, float or
//     integer, and user PreMulSum operators) is not offered.
//   - Chunk (calcCollChunking): the Simple slot (stepSize, chunkSteps 1), halved while
//     chunk*nChannels*32 > nBytes for AllGather (16 for ReduceScatter), floor 64 KiB.
//
// What the engine runs: the same peers, trees and transfers, one transfer per FIFO slot
// (aggFactor = postFreq = 1, NCCL's own values for n <= 3, where aggFactor < n/2 never holds),
// grouped by s: its op s sends the block of offset s - 2^d (AllGather, s increasing) resp. the
// finished partial of offset s (ReduceScatter, s decreasing) over d = fbs(s), then receives over
// the same d. Every op of a rank sends and receives on one dimension and every rank runs the same
// op sequence, so each connection carries its items in the same order at both ends, and the rank
// furthest behind can always move (what it waits for was sent, its send has room): the schedule
// cannot deadlock, whatever the FIFO depth. NCCL's order and packing (postFreq ops in a slot,
// slots read out of order) are not reproduced: per chunk the transfers (dimension, block, send or
// receive) are NCCL's, in another order (TestPATTransfersMatchNCCL holds NCCL's op sequences for
// n = 8 and 5), and NCCL moves them in fewer, fuller slots when a chunk is under half a slot.

// patLegal returns the ErrInvalid error for a PAT plan NCCL would not run, nil when it runs.
func patLegal(rpn int, coll costmodel.Coll, op kernels.Op, proto costmodel.Proto) error {
	switch {
	case coll != costmodel.AllGather && coll != costmodel.ReduceScatter:
		return fmt.Errorf("%w: PAT for %v (NCCL runs PAT for AllGather and ReduceScatter only)", ErrInvalid, coll)
	case rpn != 1:
		return fmt.Errorf("%w: PAT with %d ranks per node (NCCL runs PAT at one rank per node)", ErrInvalid, rpn)
	case proto != costmodel.Simple:
		return fmt.Errorf("%w: PAT with %v (NCCL runs PAT with Simple only)", ErrInvalid, proto)
	case coll == costmodel.ReduceScatter && (op == kernels.Avg || op == kernels.PreMulSum):
		return fmt.Errorf("%w: PAT ReduceScatter with %v (NCCL's PAT does not run PreMulSum or SumPostDiv)", ErrInvalid, op)
	}
	return nil
}

// patChunk is NCCL's PAT chunk for a call of nBytes (model bytes) on nCh channels: the Simple
// slot's payload, halved while chunk*nCh*k > nBytes (k = 32 for AllGather, 16 for ReduceScatter)
// and the chunk is above 64 KiB (calcCollChunking). planned, when positive, is the planner's
// chunk, used instead, capped at the slot. The result is a whole number of elements.
func patChunk(coll costmodel.Coll, nBytes, payload, planned int64, nCh, es int) int64 {
	chunk := payload
	if planned > 0 {
		chunk = min(planned, payload)
	} else {
		k := int64(32)
		if coll == costmodel.ReduceScatter {
			k = 16
		}
		for chunk*int64(nCh)*k > nBytes && chunk > 64<<10 {
			chunk /= 2
		}
	}
	return max(int64(es), chunk/int64(es)*int64(es))
}

// patDims is the number of PAT dimensions of n ranks: log2Up(n).
func patDims(n int) int { return bits.Len(uint(n - 1)) }

// fbs is the first bit set of s > 0.
func fbs(s int) int { return bits.TrailingZeros(uint(s)) }

// patPeers returns the peers of dimension d of rank for coll: the rank it sends to and the rank it
// receives from.
func patPeers(coll costmodel.Coll, rank, n, d int) (to, from int) {
	if coll == costmodel.AllGather {
		return algorithm.Mod(rank-(1<<d), n), algorithm.Mod(rank+(1<<d), n)
	}
	return algorithm.Mod(rank+(1<<d), n), algorithm.Mod(rank-(1<<d), n)
}

// patOp is one op of a PAT chunk as rank r runs it: dimension dim, the offsets (from r, mod n)
// of the block it sends and the block it receives. Offset 0 is the rank's own block.
type patOp struct{ dim, sendOff, recvOff int }

// patSchedule returns the ops of one chunk of coll on n ranks, in the order every rank runs them
// (the same for every rank: offsets are relative).
func patSchedule(coll costmodel.Coll, n int) []patOp {
	ops := make([]patOp, 0, max(0, n-1))
	for i := 1; i < n; i++ {
		s := i
		if coll == costmodel.ReduceScatter {
			s = n - i
		}
		d := fbs(s)
		if coll == costmodel.AllGather {
			ops = append(ops, patOp{dim: d, sendOff: s - 1<<d, recvOff: s})
		} else {
			ops = append(ops, patOp{dim: d, sendOff: s, recvOff: s - 1<<d})
		}
	}
	return ops
}

// patRun is one channel's PAT state: its endpoints per dimension, the element range [lo, hi), and
// ReduceScatter's accumulators (one chunk per tree level: at most one offset per level is open).
type patRun struct {
	cl           *call
	lo, hi       int
	sends, recvs []*wire.Endpoint
	acc          [][]byte
	ops          []patOp    // the schedule of cl's collective
	sched        [2][]patOp // AllGather's and ReduceScatter's, made on first use
}

// patTasks sets up channel ch's PAT connections for cl (made on first use, only the ones the
// schedule uses) and appends its worker.
func (c *Comm) patTasks(w *wire.Waiter, cl *call, ch, lo, hi int, tasks []*worker) ([]*worker, error) {
	for len(c.pats) <= ch {
		c.pats = append(c.pats, &patRun{})
	}
	p := c.pats[ch]
	nd := patDims(c.n)
	p.sends, p.recvs = p.sends[:0], p.recvs[:0]
	for d := 0; d < nd; d++ {
		to, from := patPeers(cl.coll, c.rank, c.n, d)
		tx, err := c.endpoint(ch, c.rank, to)
		if err != nil {
			return tasks, err
		}
		rx, err := c.endpoint(ch, from, c.rank)
		if err != nil {
			return tasks, err
		}
		p.sends, p.recvs = append(p.sends, tx), append(p.recvs, rx)
	}
	p.cl, p.lo, p.hi = cl, lo, hi
	k := 0
	if cl.coll == costmodel.ReduceScatter {
		k = 1
	}
	if p.sched[k] == nil {
		p.sched[k] = patSchedule(cl.coll, c.n)
	}
	p.ops = p.sched[k]
	wk := c.worker(w, cl, ch, 0)
	wk.EnsureScratch(wk.PieceBytes, 1)
	if cl.coll == costmodel.ReduceScatter {
		for len(p.acc) <= nd {
			p.acc = append(p.acc, nil)
		}
		for i := range p.acc {
			if len(p.acc[i]) < wk.PieceBytes {
				p.acc[i] = make([]byte, wk.PieceBytes)
			}
		}
	}
	wk.job = jobPat
	return append(tasks, wk), nil
}

// recvReduceStore receives a partial, reduces it with the local input and stores the result, with
// no postOp: a ReduceScatter partial on its way up a PAT tree.
const recvReduceStore = prims.PrimRecv | prims.PrimIn | prims.PrimOut

// run runs the channel's share of the call: per chunk, the ops of patSchedule, each one FIFO step
// (the chunk is at most a slot's payload and is also the step size).
func (p *patRun) run(w *worker) error {
	cl := p.cl
	c := w.c
	n, me := c.n, c.rank
	es, count := cl.es, cl.count
	ce := cl.plan.chunkElems
	ag := cl.coll == costmodel.AllGather
	if ag && !cl.inPlace {
		copy(algorithm.Span(cl.recv, me*count+p.lo, p.hi-p.lo, es), algorithm.Span(cl.send, p.lo, p.hi-p.lo, es))
	}
	for e0 := p.lo; e0 < p.hi; e0 += ce {
		nel := min(ce, p.hi-e0)
		nb := nel * es
		for _, op := range p.ops {
			var err error
			d := op.dim
			if ag {
				err = p.step(w, d, prims.Send, algorithm.Span(cl.recv, ((me+op.sendOff)%n)*count+e0, nel, es), nil)
				if err == nil {
					err = p.step(w, d, prims.Recv, nil, algorithm.Span(cl.recv, ((me+op.recvOff)%n)*count+e0, nel, es))
				}
			} else {
				s, t := op.sendOff, op.recvOff
				in := func(off int) []byte { return algorithm.Span(cl.send, ((me+off)%n)*count+e0, nel, es) }
				// Send offset s's partial: its input alone at a leaf (no child offset s+1 < n), else
				// the accumulator of its level, complete since its children came earlier.
				src := in(s)
				if s&1 == 0 && s+1 < n {
					src = p.acc[fbs(s)][:nb]
				}
				if err = p.step(w, d, prims.Send, src, nil); err != nil {
					return err
				}
				// Receive a partial of offset t: the first (largest) child starts from t's input, the
				// later ones add to what has been reduced; offset 0 is this rank's output.
				dst, prim := algorithm.Span(cl.recv, e0, nel, es), recvReduceStore
				if t != 0 {
					dst = p.acc[fbs(t)][:nb]
				} else if d == 0 {
					prim = prims.RecvReduceCopy // the last contribution: the postOp
				}
				base := dst
				if t+1<<(d+1) >= n || (t != 0 && d+1 >= fbs(t)) {
					base = in(t)
				}
				err = p.step(w, d, prim, base, dst)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// step runs primitive pr on dimension d's peers (its send peer when pr sends, its receive peer when
// it receives).
func (p *patRun) step(w *worker, d int, pr prims.Prim, in, out []byte) error {
	if pr&prims.PrimSend != 0 {
		w.SetPeers(nil, p.sends[d:d+1])
	} else {
		w.SetPeers(p.recvs[d:d+1], nil)
	}
	return w.Run(pr, in, out)
}
