package algorithm

import (
	"github.com/collplan/collplan/engine/internal/prims"
	"github.com/collplan/collplan/engine/internal/wire"
)

// Tree is one channel's tree schedule over its element range [Lo, Hi), chunk by chunk: the
// root runs recvReduceCopySend (receive the children's partial sums, add its input, complete the
// reduction into its output, send the result back down); a non-root rank runs recvReduceSend up
// and recvCopySend down (send and recv at a leaf).
type Tree struct {
	Cl     *Call
	Lo, Hi int

	// For a one-goroutine non-root rank (the engine's jobTreeUpDown): the peers of the
	// broadcast-down half, which the worker switches to once its reduce-up half is done.
	FromUp *wire.Endpoint
	ToKids [prims.MaxPeers]*wire.Endpoint
	NKids  int
}

// UpDown runs reduce-up with the worker's peers (children to parent), then broadcast-down from the
// parent to the children on the same goroutine.
func (t *Tree) UpDown(w *prims.Prims, up, down prims.Prim) error {
	if err := t.Each(w, up); err != nil {
		return err
	}
	w.SetPeers([]*wire.Endpoint{t.FromUp}, t.ToKids[:t.NKids])
	return t.Each(w, down)
}

// Each runs primitive p over the range, chunk by chunk.
func (t *Tree) Each(w *prims.Prims, p prims.Prim) error {
	cl := t.Cl
	ce := cl.ChunkElems
	for e0 := t.Lo; e0 < t.Hi; e0 += ce {
		nel := min(ce, t.Hi-e0)
		var in, out []byte
		if p&prims.PrimIn != 0 {
			in = Span(cl.Send, e0, nel, cl.ES)
		}
		if p&prims.PrimOut != 0 {
			out = Span(cl.Recv, e0, nel, cl.ES)
		}
		if err := w.Run(p, in, out); err != nil {
			return err
		}
	}
	return nil
}
