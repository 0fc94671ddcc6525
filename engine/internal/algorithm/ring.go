package algorithm

import "github.com/collplan/collplan/engine/internal/prims"

// Ring is one channel's ring schedule: NCCL's runRing for each collective
// (src/device/{all_reduce,all_gather,reduce_scatter,broadcast,reduce}.h), over the channel's
// element range [Lo, Hi). Ring[Ix] is this rank.
type Ring struct {
	Cl     *Call
	Ring   []int
	Ix     int
	Lo, Hi int
}

// Span returns bytes [e0, e0+nel) elements of b (nil when b is nil).
func Span(b []byte, e0, nel, es int) []byte {
	if b == nil {
		return nil
	}
	return b[e0*es : (e0+nel)*es]
}

// AllReduce is reduce-scatter fused with all-gather in one loop. Per loop the range is cut into n
// chunks (chunk k at k*chunkCount); the rank at ring position ix sends chunk ix-1, reduces and
// forwards chunks ix-2 .. ix+1, completes chunk ix (postOp) and forwards it, forwards the finished
// chunks ix-1 .. ix+2, and finally receives chunk ix+1.
func (r *Ring) AllReduce(w *prims.Prims) error {
	cl, n, ix := r.Cl, len(r.Ring), r.Ix
	es := cl.ES
	size := r.Hi - r.Lo
	loop := n * cl.ChunkElems
	for off := 0; off < size; off += loop {
		rem := size - off
		ce := cl.ChunkElems
		if rem < loop {
			ce = min(RoundUp(DivUp(rem, n), AlignElems(es)), ce)
		}
		step := func(p prims.Prim, chunk int) error {
			co := chunk * ce
			nel := min(max(rem-co, 0), ce)
			if nel == 0 {
				return nil
			}
			e0 := r.Lo + off + co
			var in, out []byte
			if p&prims.PrimIn != 0 {
				in = Span(cl.Send, e0, nel, es)
			}
			if p&prims.PrimOut != 0 {
				out = Span(cl.Recv, e0, nel, es)
			}
			return w.Run(p, in, out)
		}
		if err := step(prims.Send, Mod(ix-1, n)); err != nil {
			return err
		}
		for j := 2; j < n; j++ {
			if err := step(prims.RecvReduceSend, Mod(ix-j, n)); err != nil {
				return err
			}
		}
		if err := step(prims.RecvReduceCopySend, ix); err != nil {
			return err
		}
		for j := 1; j < n-1; j++ {
			if err := step(prims.RecvCopySend, Mod(ix-j, n)); err != nil {
				return err
			}
		}
		if err := step(prims.Recv, Mod(ix+1, n)); err != nil {
			return err
		}
	}
	return nil
}

// AllGather: per chunk, send this rank's block (copying it to the output unless in place),
// forward the blocks of the n-2 ranks before it, and receive the block of the rank after it.
func (r *Ring) AllGather(w *prims.Prims) error {
	cl, n, ix := r.Cl, len(r.Ring), r.Ix
	es, count := cl.ES, cl.Count
	ce := cl.ChunkElems
	for e0 := r.Lo; e0 < r.Hi; e0 += ce {
		nel := min(ce, r.Hi-e0)
		block := func(rank int) []byte { return Span(cl.Recv, rank*count+e0, nel, es) }
		var err error
		if cl.InPlace {
			err = w.Run(prims.Send, block(r.Ring[ix]), nil)
		} else {
			err = w.Run(prims.CopySend, Span(cl.Send, e0, nel, es), block(r.Ring[ix]))
		}
		if err != nil {
			return err
		}
		for j := 1; j < n-1; j++ {
			if err := w.Run(prims.RecvCopySend, nil, block(r.Ring[Mod(ix-j, n)])); err != nil {
				return err
			}
		}
		if err := w.Run(prims.Recv, nil, block(r.Ring[Mod(ix+1, n)])); err != nil {
			return err
		}
	}
	return nil
}

// ReduceScatter: per chunk, send the block of the rank before this one, reduce and forward the
// blocks of the ranks before that, and complete this rank's own block (postOp) into the output.
func (r *Ring) ReduceScatter(w *prims.Prims) error {
	cl, n, ix := r.Cl, len(r.Ring), r.Ix
	es, count := cl.ES, cl.Count
	ce := cl.ChunkElems
	for e0 := r.Lo; e0 < r.Hi; e0 += ce {
		nel := min(ce, r.Hi-e0)
		block := func(rank int) []byte { return Span(cl.Send, rank*count+e0, nel, es) }
		if err := w.Run(prims.Send, block(r.Ring[Mod(ix-1, n)]), nil); err != nil {
			return err
		}
		for j := 2; j < n; j++ {
			if err := w.Run(prims.RecvReduceSend, block(r.Ring[Mod(ix-j, n)]), nil); err != nil {
				return err
			}
		}
		if err := w.Run(prims.RecvReduceCopy, block(r.Ring[ix]), Span(cl.Recv, e0, nel, es)); err != nil {
			return err
		}
	}
	return nil
}

// Broadcast: the root sends (copying to its output unless in place), the rank before the root in
// the ring only receives, every other rank receives, keeps and forwards.
func (r *Ring) Broadcast(w *prims.Prims) error {
	cl, n, ix := r.Cl, len(r.Ring), r.Ix
	es := cl.ES
	me, next := r.Ring[ix], r.Ring[Mod(ix+1, n)]
	ce := cl.ChunkElems
	for e0 := r.Lo; e0 < r.Hi; e0 += ce {
		nel := min(ce, r.Hi-e0)
		out := Span(cl.Recv, e0, nel, es)
		var err error
		switch {
		case me == cl.Root && cl.InPlace:
			err = w.Run(prims.Send, out, nil)
		case me == cl.Root:
			err = w.Run(prims.CopySend, Span(cl.Send, e0, nel, es), out)
		case next == cl.Root:
			err = w.Run(prims.Recv, nil, out)
		default:
			err = w.Run(prims.RecvCopySend, nil, out)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Reduce: the rank after the root in the ring sends its input, the root completes the reduction
// (postOp) into its output, every other rank reduces and forwards.
func (r *Ring) Reduce(w *prims.Prims) error {
	cl, n, ix := r.Cl, len(r.Ring), r.Ix
	es := cl.ES
	me, prev := r.Ring[ix], r.Ring[Mod(ix-1, n)]
	ce := cl.ChunkElems
	for e0 := r.Lo; e0 < r.Hi; e0 += ce {
		nel := min(ce, r.Hi-e0)
		in := Span(cl.Send, e0, nel, es)
		var err error
		switch {
		case prev == cl.Root:
			err = w.Run(prims.Send, in, nil)
		case me == cl.Root:
			err = w.Run(prims.RecvReduceCopy, in, Span(cl.Recv, e0, nel, es))
		default:
			err = w.Run(prims.RecvReduceSend, in, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
