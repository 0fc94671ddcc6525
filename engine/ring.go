package engine

import (
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/prims"
	"github.com/collplan/collplan/engine/internal/wire"
)

// ringTasks sets up channel ch's ring connections for cl and appends its worker, which runs the
// channel's element range [lo, hi).
func (c *Comm) ringTasks(w *wire.Waiter, cl *call, ch, lo, hi int, tasks []*worker) ([]*worker, error) {
	ring, ix := c.ring(ch)
	for len(c.ringEps) <= ch {
		c.ringEps = append(c.ringEps, [2]*wire.Endpoint{})
	}
	eps := &c.ringEps[ch]
	if eps[0] == nil {
		n := len(ring)
		prev, next := ring[mod(ix-1, n)], ring[mod(ix+1, n)]
		rx, err := c.endpoint(ch, prev, c.rank)
		if err != nil {
			return tasks, err
		}
		tx, err := c.endpoint(ch, c.rank, next)
		if err != nil {
			return tasks, err
		}
		eps[0], eps[1] = rx, tx
	}
	wk := c.worker(w, cl, ch, 0)
	wk.SetPeers(eps[:1], eps[1:])
	wk.EnsureScratch(wk.PieceBytes, 1)
	wk.ring = ringRun{cl: cl, ring: ring, ix: ix, lo: lo, hi: hi}
	switch cl.coll {
	case costmodel.AllReduce:
		wk.job = jobRingAllReduce
	case costmodel.AllGather:
		wk.job = jobRingAllGather
	case costmodel.ReduceScatter:
		wk.job = jobRingReduceScatter
	case costmodel.Broadcast:
		wk.job = jobRingBroadcast
	default:
		wk.job = jobRingReduce
	}
	return append(tasks, wk), nil
}

// ringRun is one channel's ring schedule: NCCL's runRing for each collective
// (src/device/{all_reduce,all_gather,reduce_scatter,broadcast,reduce}.h), over the channel's
// element range [lo, hi). ring[ix] is this rank.
type ringRun struct {
	cl     *call
	ring   []int
	ix     int
	lo, hi int
}

// span returns bytes [e0, e0+nel) elements of b (nil when b is nil).
func span(b []byte, e0, nel, es int) []byte {
	if b == nil {
		return nil
	}
	return b[e0*es : (e0+nel)*es]
}

// allReduce is reduce-scatter fused with all-gather in one loop. Per loop the range is cut into n
// chunks (chunk k at k*chunkCount); the rank at ring position ix sends chunk ix-1, reduces and
// forwards chunks ix-2 .. ix+1, completes chunk ix (postOp) and forwards it, forwards the finished
// chunks ix-1 .. ix+2, and finally receives chunk ix+1.
func (r *ringRun) allReduce(w *worker) error {
	cl, n, ix := r.cl, len(r.ring), r.ix
	es := cl.es
	size := r.hi - r.lo
	loop := n * cl.plan.chunkElems
	for off := 0; off < size; off += loop {
		rem := size - off
		ce := cl.plan.chunkElems
		if rem < loop {
			ce = min(roundUp(divUp(rem, n), alignElems(es)), ce)
		}
		step := func(p prims.Prim, chunk int) error {
			co := chunk * ce
			nel := min(max(rem-co, 0), ce)
			if nel == 0 {
				return nil
			}
			e0 := r.lo + off + co
			var in, out []byte
			if p&prims.PrimIn != 0 {
				in = span(cl.send, e0, nel, es)
			}
			if p&prims.PrimOut != 0 {
				out = span(cl.recv, e0, nel, es)
			}
			return w.Run(p, in, out)
		}
		if err := step(prims.Send, mod(ix-1, n)); err != nil {
			return err
		}
		for j := 2; j < n; j++ {
			if err := step(prims.RecvReduceSend, mod(ix-j, n)); err != nil {
				return err
			}
		}
		if err := step(prims.RecvReduceCopySend, ix); err != nil {
			return err
		}
		for j := 1; j < n-1; j++ {
			if err := step(prims.RecvCopySend, mod(ix-j, n)); err != nil {
				return err
			}
		}
		if err := step(prims.Recv, mod(ix+1, n)); err != nil {
			return err
		}
	}
	return nil
}

// allGather: per chunk, send this rank's block (copying it to the output unless in place),
// forward the blocks of the n-2 ranks before it, and receive the block of the rank after it.
func (r *ringRun) allGather(w *worker) error {
	cl, n, ix := r.cl, len(r.ring), r.ix
	es, count := cl.es, cl.count
	ce := cl.plan.chunkElems
	for e0 := r.lo; e0 < r.hi; e0 += ce {
		nel := min(ce, r.hi-e0)
		block := func(rank int) []byte { return span(cl.recv, rank*count+e0, nel, es) }
		var err error
		if cl.inPlace {
			err = w.Run(prims.Send, block(r.ring[ix]), nil)
		} else {
			err = w.Run(prims.CopySend, span(cl.send, e0, nel, es), block(r.ring[ix]))
		}
		if err != nil {
			return err
		}
		for j := 1; j < n-1; j++ {
			if err := w.Run(prims.RecvCopySend, nil, block(r.ring[mod(ix-j, n)])); err != nil {
				return err
			}
		}
		if err := w.Run(prims.Recv, nil, block(r.ring[mod(ix+1, n)])); err != nil {
			return err
		}
	}
	return nil
}

// reduceScatter: per chunk, send the block of the rank before this one, reduce and forward the
// blocks of the ranks before that, and complete this rank's own block (postOp) into the output.
func (r *ringRun) reduceScatter(w *worker) error {
	cl, n, ix := r.cl, len(r.ring), r.ix
	es, count := cl.es, cl.count
	ce := cl.plan.chunkElems
	for e0 := r.lo; e0 < r.hi; e0 += ce {
		nel := min(ce, r.hi-e0)
		block := func(rank int) []byte { return span(cl.send, rank*count+e0, nel, es) }
		if err := w.Run(prims.Send, block(r.ring[mod(ix-1, n)]), nil); err != nil {
			return err
		}
		for j := 2; j < n; j++ {
			if err := w.Run(prims.RecvReduceSend, block(r.ring[mod(ix-j, n)]), nil); err != nil {
				return err
			}
		}
		if err := w.Run(prims.RecvReduceCopy, block(r.ring[ix]), span(cl.recv, e0, nel, es)); err != nil {
			return err
		}
	}
	return nil
}

// broadcast: the root sends (copying to its output unless in place), the rank before the root in
// the ring only receives, every other rank receives, keeps and forwards.
func (r *ringRun) broadcast(w *worker) error {
	cl, n, ix := r.cl, len(r.ring), r.ix
	es := cl.es
	me, next := r.ring[ix], r.ring[mod(ix+1, n)]
	ce := cl.plan.chunkElems
	for e0 := r.lo; e0 < r.hi; e0 += ce {
		nel := min(ce, r.hi-e0)
		out := span(cl.recv, e0, nel, es)
		var err error
		switch {
		case me == cl.root && cl.inPlace:
			err = w.Run(prims.Send, out, nil)
		case me == cl.root:
			err = w.Run(prims.CopySend, span(cl.send, e0, nel, es), out)
		case next == cl.root:
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

// reduce: the rank after the root in the ring sends its input, the root completes the reduction
// (postOp) into its output, every other rank reduces and forwards.
func (r *ringRun) reduce(w *worker) error {
	cl, n, ix := r.cl, len(r.ring), r.ix
	es := cl.es
	me, prev := r.ring[ix], r.ring[mod(ix-1, n)]
	ce := cl.plan.chunkElems
	for e0 := r.lo; e0 < r.hi; e0 += ce {
		nel := min(ce, r.hi-e0)
		in := span(cl.send, e0, nel, es)
		var err error
		switch {
		case prev == cl.root:
			err = w.Run(prims.Send, in, nil)
		case me == cl.root:
			err = w.Run(prims.RecvReduceCopy, in, span(cl.recv, e0, nel, es))
		default:
			err = w.Run(prims.RecvReduceSend, in, nil)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
