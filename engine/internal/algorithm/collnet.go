package algorithm

import (
	"fmt"

	"github.com/collplan/collplan/engine/internal/prims"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/kernels"
)

// CollNet's kernels (NCCL's COLLNET_DIRECT and COLLNET_CHAIN Simple kernels of
// src/device/all_reduce.h, and CollNetDirect's all_gather.h and reduce_scatter.h; the engine's
// collnet.go has the facts, the legality and the set-up): CollNetDirect on the NVLS worker (NVLS
// with Net set), CollNetChain's head as CollNetChain on a worker's prims; the chain's other ranks
// run Tree's kernel.

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
func (wk *NVLS) netBlocked(kind uint8, s uint64, i int, free uint64) int {
	g, l := wk.G, wk.Net
	_, rem, share := wk.arStep(i)
	mine := g.Me*share < rem
	if kind == phNetUp {
		if m := g.Behind(g.Posted, s+1); m >= 0 {
			return m
		}
		if mine && !l.SendReady() {
			return wk.Cl.N
		}
		return -1
	}
	if mine && !l.RecvReady() {
		return wk.Cl.N
	}
	return g.Behind(g.Done, free)
}

// netAct runs net-up or net-down of step s on this rank's share, nb bytes at me*S of the slots.
func (wk *NVLS) netAct(kind uint8, s uint64, nb int) {
	g, l, cl := wk.G, wk.Net, wk.Cl
	off := g.Me * g.L.StepBytes
	if kind == phNetUp {
		if nb > 0 {
			g.LdReduce(wk.Comb, s, l.Payload(nb), off)
			l.Send(collnet.AllReduce, cl.Dt, wk.NetOp, nb)
			wk.Stats.LdReduceBytes += uint64(nb)
			wk.Stats.WireBytes += uint64(nb)
			wk.Stats.PayloadBytes += uint64(nb)
			wk.Stats.Steps++
		}
		return
	}
	if nb > 0 {
		res := l.Result()
		if len(res) != nb {
			l.Fail(fmt.Errorf("engine: CollNet endpoint %s: result of %d bytes for a step of %d", wk.Addr, len(res), nb))
			return // the abort ends the next wait
		}
		if wk.PostDiv {
			wk.Red.Finish(res)
		}
		g.St(s, res, off)
		l.Release()
		wk.Stats.RecvBytes += uint64(nb)
		wk.Stats.StBytes += uint64(nb)
	}
	wire.StoreRelease(g.Reduced[g.Me], s+1)
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
func (wk *NVLS) cnGatherStep(j int) (k, e0, nel int) {
	nNodes, ce := wk.NNodes, wk.Cl.ChunkElems
	k = j % nNodes
	e0 = wk.Lo + (j/nNodes)*ce
	return k, e0, min(ce, wk.Hi-e0)
}

// cnGatherBlocked is blocked for the AllGather and ReduceScatter phases of region step s, the
// j-th of the call on this channel (a wait for the endpoint names rank n).
func (wk *NVLS) cnGatherBlocked(kind uint8, s uint64, j int, free uint64) int {
	g, l := wk.G, wk.Net
	k, _, _ := wk.cnGatherStep(j)
	last := k == wk.NNodes-1
	switch kind {
	case phCnAgUp:
		if k == 0 && !l.SendReady() {
			return wk.Cl.N
		}
		return -1
	case phCnAgDown:
		if !l.RecvReady() {
			return wk.Cl.N
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
			return wk.Cl.N
		}
		return -1
	}
	if last && !l.RecvReady() { // phCnRsDown
		return wk.Cl.N
	}
	return -1
}

// cnGatherAct runs an AllGather or ReduceScatter phase of region step s, the j-th of the call.
func (wk *NVLS) cnGatherAct(kind uint8, s uint64, j int) {
	cl, g, l := wk.Cl, wk.G, wk.Net
	rpn, nNodes := g.L.Members, wk.NNodes
	me, S, es, count := g.Me, g.L.StepBytes, cl.ES, cl.Count
	k, e0, nel := wk.cnGatherStep(j)
	nb := nel * es
	last := k == nNodes-1
	addr := wk.Addr
	switch kind {
	case phCnAgUp:
		if k == 0 {
			copy(l.Payload(nb), Span(cl.Send, e0, nel, es))
			l.Send(collnet.AllGather, cl.Dt, kernels.Sum, nb)
			wk.Stats.WireBytes += uint64(nb)
			wk.Stats.PayloadBytes += uint64(nb)
			wk.Stats.Steps++
		}
		wire.StoreRelease(g.Posted[me], s+1)
	case phCnAgDown:
		res := l.Result()
		if len(res) != nNodes*nb {
			l.Fail(fmt.Errorf("engine: CollNet endpoint %s: AllGather result of %d bytes for %d nodes' %d", addr, len(res), nNodes, nb))
			return // the abort ends the next wait
		}
		g.St(s, res[k*nb:(k+1)*nb], me*S)
		wk.Stats.StBytes += uint64(nb)
		if last {
			l.Release()
			wk.Stats.RecvBytes += uint64(len(res))
		}
		wire.StoreRelease(g.Reduced[me], s+1)
	case phCnAgGather:
		for h := 0; h < rpn; h++ {
			r := k*rpn + h
			if r != wk.Cl.Rank || !cl.InPlace {
				copy(Span(cl.Recv, r*count+e0, nel, es), g.SlotAt(s, me, true, h*S, nb))
			}
		}
		wire.StoreRelease(g.Done[me], s+1)
	case phCnRsScatter:
		for h := 0; h < rpn; h++ {
			wk.Red.Load(g.SlotAt(s, me, false, h*S, nb), Span(cl.Send, (k*rpn+h)*count+e0, nel, es))
		}
		wire.StoreRelease(g.Posted[me], s+1)
	case phCnRsUp:
		frame := l.Payload(nNodes * nb)
		g.LdReduce(wk.Comb, s, frame[k*nb:(k+1)*nb], me*S)
		wk.Stats.LdReduceBytes += uint64(nb)
		if last {
			l.Send(collnet.ReduceScatter, cl.Dt, wk.NetOp, nNodes*nb)
			wk.Stats.WireBytes += uint64(nNodes * nb)
			wk.Stats.PayloadBytes += uint64(nNodes * nb)
			wk.Stats.Steps++
		}
	default: // phCnRsDown
		if last {
			res := l.Result()
			if len(res) != nb {
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s: ReduceScatter result of %d bytes for a part of %d", addr, len(res), nb))
				return
			}
			out := Span(cl.Recv, e0, nel, es)
			copy(out, res)
			if wk.PostDiv {
				wk.Red.Finish(out)
			}
			l.Release()
			wk.Stats.RecvBytes += uint64(nb)
		}
		wire.StoreRelease(g.Reduced[me], s+1)
		wire.StoreRelease(g.Done[me], s+1)
	}
}

// CollNetChain is a CollNetChain head's schedule on one channel: elements [Lo, Hi) in chunks of
// one FIFO step, up from the chain (or its own input alone) to the endpoint, down from the
// endpoint to the chain.
type CollNetChain struct {
	Cl             *Call
	Lo, Hi         int
	Link           *collnet.Link
	FromKid, ToKid *wire.Endpoint // nil in a node of one rank
	NetOp          kernels.Op     // the operator on the wire
	Addr           string         // the endpoint's address, for errors
}

// Run pipelines the head's two ends on one goroutine: up (the child's partial reduced with this
// rank's input, or the input alone with the pre-op, sent to the endpoint) as soon as the child's
// step is in and the connection has a credit; down (the result, post-op applied, into the output
// and to the child) as soon as it is back and the child has a free slot.
func (r *CollNetChain) Run(w *prims.Prims) error {
	cl, l := r.Cl, r.Link
	es, ce := cl.ES, cl.ChunkElems
	steps := DivUp(r.Hi-r.Lo, ce)
	for up, down, i := 0, 0, 0; down < steps; {
		moved := false
		if up < steps && l.SendReady() && (r.FromKid == nil || r.FromKid.RecvReady()) {
			e0 := r.Lo + up*ce
			nel := min(ce, r.Hi-e0)
			nb := nel * es
			dst, in := l.Payload(nb), Span(cl.Send, e0, nel, es)
			if r.FromKid != nil {
				w.Red.Reduce(dst, r.FromKid.SimpleSlotBytes(nb), in)
				r.FromKid.Release()
				w.Stats.RecvBytes += uint64(nb)
			} else {
				w.Red.Load(dst, in)
			}
			l.Send(collnet.AllReduce, cl.Dt, r.NetOp, nb)
			w.Stats.WireBytes += uint64(nb)
			w.Stats.PayloadBytes += uint64(nb)
			w.Stats.Steps++
			up++
			moved = true
		}
		if down < up && l.RecvReady() && (r.ToKid == nil || r.ToKid.SendReady()) {
			e0 := r.Lo + down*ce
			nel := min(ce, r.Hi-e0)
			nb := nel * es
			res := l.Result()
			if len(res) != nb {
				l.Fail(fmt.Errorf("engine: CollNet endpoint %s: result of %d bytes for a step of %d", r.Addr, len(res), nb))
			} else {
				out := Span(cl.Recv, e0, nel, es)
				copy(out, res)
				if w.PostDiv {
					w.Red.Finish(out)
				}
				l.Release()
				w.Stats.RecvBytes += uint64(nb)
				if r.ToKid != nil {
					copy(r.ToKid.SimpleSlotBytes(nb), out)
					r.ToKid.PublishSimple()
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
		peer := r.Cl.N // the endpoint (wire's watchdog), unless the child's partial is what is missing
		if r.FromKid != nil && up < steps && l.SendReady() && !r.FromKid.RecvReady() {
			peer = r.FromKid.Peer
		}
		if err := w.W.Idle(i, peer); err != nil {
			return err
		}
		i++
	}
	return nil
}
