package algorithm

import (
	"math/bits"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/prims"
	"github.com/collplan/collplan/engine/internal/wire"
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

// PATDims is the number of PAT dimensions of n ranks: log2Up(n).
func PATDims(n int) int { return bits.Len(uint(n - 1)) }

// fbs is the first bit set of s > 0.
func fbs(s int) int { return bits.TrailingZeros(uint(s)) }

// PATPeers returns the peers of dimension d of rank for coll: the rank it sends to and the rank it
// receives from.
func PATPeers(coll costmodel.Coll, rank, n, d int) (to, from int) {
	if coll == costmodel.AllGather {
		return Mod(rank-(1<<d), n), Mod(rank+(1<<d), n)
	}
	return Mod(rank+(1<<d), n), Mod(rank-(1<<d), n)
}

// PATOp is one op of a PAT chunk as rank r runs it: dimension dim, the offsets (from r, mod n)
// of the block it sends and the block it receives. Offset 0 is the rank's own block.
type PATOp struct{ Dim, SendOff, RecvOff int }

// PATSchedule returns the ops of one chunk of coll on n ranks, in the order every rank runs them
// (the same for every rank: offsets are relative).
func PATSchedule(coll costmodel.Coll, n int) []PATOp {
	ops := make([]PATOp, 0, max(0, n-1))
	for i := 1; i < n; i++ {
		s := i
		if coll == costmodel.ReduceScatter {
			s = n - i
		}
		d := fbs(s)
		if coll == costmodel.AllGather {
			ops = append(ops, PATOp{Dim: d, SendOff: s - 1<<d, RecvOff: s})
		} else {
			ops = append(ops, PATOp{Dim: d, SendOff: s, RecvOff: s - 1<<d})
		}
	}
	return ops
}

// PAT is one channel's PAT state: its endpoints per dimension, the element range [lo, hi), and
// ReduceScatter's accumulators (one chunk per tree level: at most one offset per level is open).
type PAT struct {
	Cl           *Call
	Lo, Hi       int
	Sends, Recvs []*wire.Endpoint
	Acc          [][]byte
	Ops          []PATOp    // the schedule of Cl's collective
	Sched        [2][]PATOp // AllGather's and ReduceScatter's, made on first use
}

// recvReduceStore receives a partial, reduces it with the local input and stores the result, with
// no postOp: a ReduceScatter partial on its way up a PAT tree.
const recvReduceStore = prims.PrimRecv | prims.PrimIn | prims.PrimOut

// Run runs the channel's share of the call: per chunk, the ops of patSchedule, each one FIFO step
// (the chunk is at most a slot's payload and is also the step size).
func (p *PAT) Run(w *prims.Prims) error {
	cl := p.Cl
	n, me := cl.N, cl.Rank
	es, count := cl.ES, cl.Count
	ce := cl.ChunkElems
	ag := cl.Coll == costmodel.AllGather
	if ag && !cl.InPlace {
		copy(Span(cl.Recv, me*count+p.Lo, p.Hi-p.Lo, es), Span(cl.Send, p.Lo, p.Hi-p.Lo, es))
	}
	for e0 := p.Lo; e0 < p.Hi; e0 += ce {
		nel := min(ce, p.Hi-e0)
		nb := nel * es
		for _, op := range p.Ops {
			var err error
			d := op.Dim
			if ag {
				err = p.step(w, d, prims.Send, Span(cl.Recv, ((me+op.SendOff)%n)*count+e0, nel, es), nil)
				if err == nil {
					err = p.step(w, d, prims.Recv, nil, Span(cl.Recv, ((me+op.RecvOff)%n)*count+e0, nel, es))
				}
			} else {
				s, t := op.SendOff, op.RecvOff
				in := func(off int) []byte { return Span(cl.Send, ((me+off)%n)*count+e0, nel, es) }
				// Send offset s's partial: its input alone at a leaf (no child offset s+1 < n), else
				// the accumulator of its level, complete since its children came earlier.
				src := in(s)
				if s&1 == 0 && s+1 < n {
					src = p.Acc[fbs(s)][:nb]
				}
				if err = p.step(w, d, prims.Send, src, nil); err != nil {
					return err
				}
				// Receive a partial of offset t: the first (largest) child starts from t's input, the
				// later ones add to what has been reduced; offset 0 is this rank's output.
				dst, prim := Span(cl.Recv, e0, nel, es), recvReduceStore
				if t != 0 {
					dst = p.Acc[fbs(t)][:nb]
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
func (p *PAT) step(w *prims.Prims, d int, pr prims.Prim, in, out []byte) error {
	if pr&prims.PrimSend != 0 {
		w.SetPeers(nil, p.Sends[d:d+1])
	} else {
		w.SetPeers(p.Recvs[d:d+1], nil)
	}
	return w.Run(pr, in, out)
}
