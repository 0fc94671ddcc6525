package algorithm

import (
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/prims"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport/collnet"
	"github.com/collplan/collplan/engine/transport/nvls"
	"github.com/collplan/collplan/kernels"
)

// NVLS is one channel's kernel on a multicast object (NCCL's runNvls, src/device/all_reduce.h,
// and the NVLS variants of all_gather.h and reduce_scatter.h): NVLS's AllReduce, AllGather and
// ReduceScatter, NVLS_TREE's AllReduce (Tree set: nvlstree.go) and CollNetDirect's AllReduce,
// AllGather and ReduceScatter (Net set: collnet.go, where G is the node's region of the same
// layout, "collnet/NODE/CH"), over the channel's element range [Lo, Hi). The engine maps G, the
// tree connections and the endpoint link (its nvls.go, nvlstree.go and collnet.go say which
// channel gets which) and fills the rest once per call; Run then reads nothing else. G and Net
// are the concrete nvls.Group and collnet.Link: their operations (LdReduce, St, Behind, Send,
// Result, ...) run per step, so they are direct calls, not calls through an interface.
type NVLS struct {
	Cl        *Call
	W         wire.Waiter
	G         *nvls.Group
	Red, Comb kernels.Reducer // the call's operator (with its pre- and post-op) and its plain combine
	Lo, Hi    int

	Tree    *NVLSTreeLinks // NVLS_TREE: this rank's tree connections on the channel
	Net     *collnet.Link  // CollNetDirect: this rank's endpoint connection on the channel
	NetOp   kernels.Op     // CollNetDirect: the operator on the wire
	PostDiv bool           // CollNetDirect: the post-op divides (integer avg)
	NNodes  int            // CollNetDirect: the virtual nodes the endpoint joins
	Addr    string         // CollNetDirect: the endpoint's address, for errors

	Stats prims.ChannelStats // this call's traffic, added to the Comm's at the end
}

// The phases of a step. AllReduce: scatter, reduce (ldReduce and st of this rank's share),
// gather. AllGather: st (this rank's chunk), gather. ReduceScatter: scatter, ldReduce (this
// rank's block, into the output). What each phase of step s waits for, and publishes (every
// counter holds s+1 once its phase of step s is done, across calls whatever the collective):
//
//	scatter   every member's reduced >= s-7 (their ldReduce of s-8 read this rank's up slot)
//	          publishes posted
//	reduce    every member's posted >= s+1 (the step's inputs are in) and done >= s-7 (its
//	          gather of s-8 left the down slot that st writes); publishes reduced
//	st (AG)   every member's done >= s-7; publishes posted and reduced
//	gather    every member's reduced >= s+1 (every share is in); publishes done
//	ldReduce  every member's posted >= s+1; publishes reduced and done (RS)
//
// NVLS_TREE AllReduce replaces reduce by tree-up and tree-down (nvlstree.go, which says what
// they wait for); CollNetDirect AllReduce runs cn-scatter, net-up, net-down and gather
// (collnet.go).
const (
	phScatter = iota
	phReduce
	phSt
	phGather
	phLdReduce
	phTreeUp
	phTreeDown
	phCnScatter // CollNetDirect (collnet.go): scatter with the pre-op
	phNetUp
	phNetDown
	phCnAgUp // CollNetDirect AllGather and ReduceScatter (collnet.go)
	phCnAgDown
	phCnAgGather
	phCnRsScatter
	phCnRsUp
	phCnRsDown
)

// nvlsPhases are the phases of AllReduce, AllGather and ReduceScatter, upstream first, then
// NVLS_TREE AllReduce's at a tree's root and elsewhere, then CollNetDirect AllReduce's.
var nvlsPhases = [...][]uint8{{phScatter, phReduce, phGather}, {phSt, phGather}, {phScatter, phLdReduce},
	{phScatter, phTreeUp, phGather}, {phScatter, phTreeUp, phTreeDown, phGather},
	{phCnScatter, phNetUp, phNetDown, phGather},
	{phCnAgUp, phCnAgDown, phCnAgGather}, {phCnRsScatter, phCnRsUp, phCnRsDown}}

// Run pipelines the call's steps through its phases on one goroutine, as NCCL's runNvls runs them
// in separate warps: each round it runs, upstream first, every phase whose step is ready (a phase
// never passes the one before it), so a rank scatters up to NCCL_STEPS steps ahead while it waits
// for the others' shares. When no phase can move it idles as every wait does (wire's wait.go: backoff,
// abort, Close, context and watchdog), naming the member it last found behind.
func (wk *NVLS) Run() error {
	ph := nvlsPhases[0]
	switch wk.Cl.Coll {
	case costmodel.AllGather:
		ph = nvlsPhases[1]
	case costmodel.ReduceScatter:
		ph = nvlsPhases[2]
	}
	if wk.Tree != nil {
		ph = nvlsPhases[3]
		if wk.Tree.ToUp != nil {
			ph = nvlsPhases[4]
		}
	}
	g := wk.G
	per := wk.Cl.ChunkElems
	if wk.Cl.Coll == costmodel.AllReduce {
		per *= g.L.Members
	}
	steps := uint64(DivUp(wk.Hi-wk.Lo, per))
	if wk.Net != nil {
		switch wk.Cl.Coll {
		case costmodel.AllGather:
			ph = nvlsPhases[6]
		case costmodel.ReduceScatter:
			ph = nvlsPhases[7]
		default:
			ph = nvlsPhases[5]
		}
		if wk.Cl.Coll != costmodel.AllReduce {
			steps *= uint64(wk.NNodes) // a region step per (chunk, node): collnet.go
		}
	}
	base := g.Step
	var next [4]uint64 // per phase: the next step (from base)
	last := len(ph) - 1
	for i := 0; next[last] < steps; {
		moved := false
		peer := -1
		for p, kind := range ph {
			limit := steps
			if p > 0 {
				limit = next[p-1]
			}
			if next[p] >= limit {
				continue
			}
			s := base + next[p]
			if m := wk.blocked(kind, s, int(next[p])); m >= 0 {
				peer = m
				continue
			}
			wk.act(kind, s, int(next[p]))
			next[p]++
			moved = true
		}
		if moved {
			i = 0
			continue
		}
		if err := wk.W.Idle(i, peer); err != nil {
			return err
		}
		i++
	}
	g.Step = base + steps
	return nil
}

// blocked returns the rank that phase kind of step s, the i-th step of the call on this channel,
// waits for, or -1 when it may run.
func (wk *NVLS) blocked(kind uint8, s uint64, i int) int {
	g := wk.G
	var free uint64 // the counters' value that frees slot s: s-7, or 0 for the first 8 steps
	if s >= wire.NCCLSteps {
		free = s - wire.NCCLSteps + 1
	}
	switch kind {
	case phScatter:
		return g.Behind(g.Reduced, free)
	case phReduce:
		if m := g.Behind(g.Posted, s+1); m >= 0 {
			return m
		}
		return g.Behind(g.Done, free)
	case phSt:
		return g.Behind(g.Done, free)
	case phGather:
		return g.Behind(g.Reduced, s+1)
	case phTreeUp, phTreeDown:
		return wk.treeBlocked(kind, s, i, free)
	case phCnScatter:
		return g.Behind(g.Reduced, free)
	case phNetUp, phNetDown:
		return wk.netBlocked(kind, s, i, free)
	case phCnAgUp, phCnAgDown, phCnAgGather, phCnRsScatter, phCnRsUp, phCnRsDown:
		return wk.cnGatherBlocked(kind, s, i, free)
	}
	return g.Behind(g.Posted, s+1) // phLdReduce
}

// arStep returns AllReduce's step i on this channel: rem elements from element off, in shares of
// share elements (the last one shorter, or empty), share h at h*S of the slot. A full step is n
// shares of a chunk; a shorter last step is cut into n aligned shares.
func (wk *NVLS) arStep(i int) (off, rem, share int) {
	n, ce := wk.G.L.Members, wk.Cl.ChunkElems
	off = wk.Lo + i*n*ce
	rem = min(wk.Hi-off, n*ce)
	share = ce
	if rem < n*ce {
		share = min(RoundUp(DivUp(rem, n), AlignElems(wk.Cl.ES)), ce)
	}
	return off, rem, share
}

// act runs phase kind of step s, the i-th step of the call on this channel.
func (wk *NVLS) act(kind uint8, s uint64, i int) {
	cl, g := wk.Cl, wk.G
	n, es, me, S := g.L.Members, cl.ES, g.Me, g.L.StepBytes
	ce := cl.ChunkElems
	me64 := s + 1
	if kind >= phCnAgUp {
		wk.cnGatherAct(kind, s, i)
		return
	}
	if cl.Coll == costmodel.AllReduce {
		off, rem, share := wk.arStep(i)
		switch kind {
		case phScatter:
			in := Span(cl.Send, off, rem, es)
			for h := 0; h*share < rem; h++ {
				e0, e1 := h*share, min((h+1)*share, rem)
				copy(g.SlotAt(s, me, false, h*S, (e1-e0)*es), in[e0*es:e1*es])
			}
			wire.StoreRelease(g.Posted[me], me64)
		case phReduce:
			if e0 := me * share; e0 < rem {
				e1 := min(e0+share, rem)
				mine := g.SlotAt(s, me, true, me*S, (e1-e0)*es)
				g.LdReduce(wk.Red, s, mine, me*S)
				g.St(s, mine, me*S)
				wk.Stats.LdReduceBytes += uint64(len(mine))
				wk.Stats.StBytes += uint64(len(mine))
			}
			wire.StoreRelease(g.Reduced[me], me64)
		case phTreeUp, phTreeDown:
			nb := 0
			if e0 := me * share; e0 < rem {
				nb = (min(e0+share, rem) - e0) * es
			}
			wk.treeAct(kind, s, nb)
		case phNetUp, phNetDown:
			nb := 0
			if e0 := me * share; e0 < rem {
				nb = (min(e0+share, rem) - e0) * es
			}
			wk.netAct(kind, s, nb)
		case phCnScatter:
			in := Span(cl.Send, off, rem, es)
			for h := 0; h*share < rem; h++ {
				e0, e1 := h*share, min((h+1)*share, rem)
				wk.Red.Load(g.SlotAt(s, me, false, h*S, (e1-e0)*es), in[e0*es:e1*es])
			}
			wire.StoreRelease(g.Posted[me], me64)
		default: // phGather
			out := Span(cl.Recv, off, rem, es)
			for h := 0; h*share < rem; h++ {
				e0, e1 := h*share, min((h+1)*share, rem)
				copy(out[e0*es:e1*es], g.SlotAt(s, me, true, h*S, (e1-e0)*es))
			}
			wire.StoreRelease(g.Done[me], me64)
		}
		return
	}
	// AllGather and ReduceScatter: step i is ce elements at e0 of every block; block h is share h.
	count := cl.Count
	e0 := wk.Lo + i*ce
	nel := min(ce, wk.Hi-e0)
	nb := nel * es
	switch kind {
	case phSt:
		g.St(s, Span(cl.Send, e0, nel, es), me*S)
		wk.Stats.StBytes += uint64(nb)
		wire.StoreRelease(g.Posted[me], me64)
		wire.StoreRelease(g.Reduced[me], me64)
	case phGather:
		for h := 0; h < n; h++ {
			if h != me || !cl.InPlace {
				copy(Span(cl.Recv, h*count+e0, nel, es), g.SlotAt(s, me, true, h*S, nb))
			}
		}
		wire.StoreRelease(g.Done[me], me64)
	case phScatter:
		for h := 0; h < n; h++ {
			copy(g.SlotAt(s, me, false, h*S, nb), Span(cl.Send, h*count+e0, nel, es))
		}
		wire.StoreRelease(g.Posted[me], me64)
	default: // phLdReduce
		g.LdReduce(wk.Red, s, Span(cl.Recv, e0, nel, es), me*S)
		wk.Stats.LdReduceBytes += uint64(nb)
		wire.StoreRelease(g.Reduced[me], me64)
		wire.StoreRelease(g.Done[me], me64)
	}
}
