package algorithm

import "github.com/collplan/collplan/engine/internal/wire"

// NVLS_TREE's kernel on the NVLS worker (NCCL's NVLS_TREE Simple kernel of src/device/all_reduce.h;
// the engine's nvlstree.go has the facts and the set-up). Per step s of a channel, head h of node k
// (rank k*rpn+h) runs, on the channel's one goroutine, scatter and gather as NVLS does and in
// between:
//
//	tree-up    every member's posted >= s+1, the children's step s is in their connections, and
//	           the parent's connection has a free slot; ld_reduces share h into that slot, adds
//	           the children's partials and sends it up. At the root: also every member's
//	           done >= s-7 and free slots to the children; it st's the sum into every member's
//	           down buffer, sends it down, and publishes reduced
//	tree-down  (not at the root) the parent's step s is in, every member's done >= s-7 and free
//	           slots to the children; st's the share, sends it down, and publishes reduced

// NVLSTreeLinks are a rank's NVLS_TREE connections on one channel (Simple, one share per FIFO
// step), to and from its parent (nil at the root) and its children in the tree over the nodes.
type NVLSTreeLinks struct {
	ToUp, FromUp     *wire.Endpoint
	ToKids, FromKids [2]*wire.Endpoint
	NKids            int
}

// treeBlocked is blocked for tree-up and tree-down of step s, the i-th step of the call on this
// channel (free: the counters' value that frees slot s).
func (wk *NVLS) treeBlocked(kind uint8, s uint64, i int, free uint64) int {
	g, t := wk.G, wk.Tree
	_, rem, share := wk.arStep(i)
	mine := g.Me*share < rem // this rank's share of the step is not empty: it moves through the tree
	if kind == phTreeUp {
		if m := g.Behind(g.Posted, s+1); m >= 0 {
			return m
		}
		if mine {
			for _, e := range t.FromKids[:t.NKids] {
				if !e.RecvReady() {
					return e.Peer
				}
			}
			if t.ToUp != nil && !t.ToUp.SendReady() {
				return t.ToUp.Peer
			}
		}
		if t.ToUp != nil {
			return -1
		}
	} else if mine && !t.FromUp.RecvReady() {
		return t.FromUp.Peer
	}
	// The root's tree-up, and tree-down: st into the down slots, send to the children.
	if m := g.Behind(g.Done, free); m >= 0 {
		return m
	}
	if mine {
		for _, e := range t.ToKids[:t.NKids] {
			if !e.SendReady() {
				return e.Peer
			}
		}
	}
	return -1
}

// treeAct runs tree-up or tree-down of step s on this rank's share, nb bytes at me*S of the slot
// (treeBlocked has seen every connection ready, so no wait below waits).
func (wk *NVLS) treeAct(kind uint8, s uint64, nb int) {
	g, t := wk.G, wk.Tree
	off := g.Me * g.L.StepBytes
	var res []byte // the share's final value, at the root's tree-up and at tree-down
	if nb > 0 {
		switch {
		case kind == phTreeDown:
			res = t.FromUp.SimpleSlotBytes(nb)
			wk.Stats.RecvBytes += uint64(nb)
		default:
			// Tree-up: the node's sum of the share straight into the parent's slot (at the root,
			// into this rank's own down slot, which st then skips), plus the children's partials.
			dst := g.SlotAt(s, g.Me, true, off, nb)
			if t.ToUp != nil {
				dst = t.ToUp.SimpleSlotBytes(nb)
			}
			g.LdReduce(wk.Red, s, dst, off)
			wk.Stats.LdReduceBytes += uint64(nb)
			for _, e := range t.FromKids[:t.NKids] {
				wk.Comb.Reduce(dst, dst, e.SimpleSlotBytes(nb))
				e.Release()
				wk.Stats.RecvBytes += uint64(nb)
			}
			if t.ToUp != nil {
				wk.sent(t.ToUp, nb)
				return
			}
			res = dst
		}
		g.St(s, res, off)
		wk.Stats.StBytes += uint64(nb)
		for _, e := range t.ToKids[:t.NKids] {
			copy(e.SimpleSlotBytes(nb), res)
			wk.sent(e, nb)
		}
		if kind == phTreeDown {
			t.FromUp.Release()
		}
	} else if kind == phTreeUp && t.ToUp != nil {
		return
	}
	wire.StoreRelease(g.Reduced[g.Me], s+1)
}

// sent publishes a Simple step of nb bytes on e and counts it.
func (wk *NVLS) sent(e *wire.Endpoint, nb int) {
	e.PublishSimple()
	wk.Stats.WireBytes += uint64(nb)
	wk.Stats.PayloadBytes += uint64(nb)
	wk.Stats.Steps++
}
