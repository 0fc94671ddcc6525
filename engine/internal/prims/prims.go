package prims

import (
	"unsafe"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
)

// Prims is the primitive-running part of a worker, one channel's share of a call on one goroutine
// (the engine's worker embeds it, so its methods are direct calls): the protocol and operators of
// the call, the endpoints the next primitives receive from and send to, and their scratch.
type Prims struct {
	W     wire.Waiter
	Proto costmodel.Proto

	Red, Comb kernels.Reducer
	Reducing  bool // the call reduces: the local input is pre-multiplied as it is loaded
	PreMul    bool // Red's device op is PreMulSum (Load is not a copy)
	PostDiv   bool // Red's device op is SumPostDiv (Finish divides)

	PieceBytes int // payload bytes of one FIFO step (a multiple of the element size)

	recvs, sends []*wire.Endpoint
	recvBuf      [MaxPeers]*wire.Endpoint
	sendBuf      [MaxPeers]*wire.Endpoint

	scratch [MaxPeers + 1][]byte // unpacked LL/LL128 receives, and the accumulator
	views   [MaxPeers][]byte

	Stats ChannelStats // this call's traffic, added to the Comm's at the end

	// Race-build annotations (wire's race.go), set only when the engine's c.raceHidden: before
	// each step's first publish the worker releases RaceRel; after each step's receives, before it writes
	// its output, it acquires RaceAcq. RaceTok is the token a tree's reduce-up worker releases.
	RaceRel, RaceAcq unsafe.Pointer
	RaceTok          byte
}

// ChannelStats is the traffic one rank sent and received on one channel.
type ChannelStats struct {
	Steps        uint64 // FIFO steps sent
	PayloadBytes uint64 // payload bytes sent
	WireBytes    uint64 // bytes written into peers' FIFO slots: payload plus LL/LL128 flags and padding
	RecvBytes    uint64 // payload bytes received

	// NVLS (the engine's nvls.go): bytes this rank reduced with the multicast object's ldReduce,
	// and bytes it stored with its st (counted once, whatever the number of members). Neither goes
	// through a connection.
	LdReduceBytes uint64
	StBytes       uint64
}

// Add adds o's counts to s.
func (s *ChannelStats) Add(o ChannelStats) {
	s.Steps += o.Steps
	s.PayloadBytes += o.PayloadBytes
	s.WireBytes += o.WireBytes
	s.RecvBytes += o.RecvBytes
	s.LdReduceBytes += o.LdReduceBytes
	s.StBytes += o.StBytes
}

// MaxPeers is NCCL_MAX_TREE_ARITY: a tree rank receives from or sends to at most three peers.
const MaxPeers = 3

// Prim is a primitive: which of receive, local input, local output and send a FIFO step
// involves, and whether the reduction completes there (postOp).
type Prim uint8

const (
	PrimIn Prim = 1 << iota
	PrimOut
	PrimRecv
	PrimSend
	PrimPost
)

// NCCL's primitives (src/device/prims_*.h).
const (
	Send               = PrimIn | PrimSend
	CopySend           = PrimIn | PrimOut | PrimSend
	Recv               = PrimRecv | PrimOut
	RecvReduceSend     = PrimRecv | PrimIn | PrimSend
	RecvReduceCopy     = PrimRecv | PrimIn | PrimOut | PrimPost
	RecvReduceCopySend = PrimRecv | PrimIn | PrimOut | PrimSend | PrimPost
	RecvCopySend       = PrimRecv | PrimOut | PrimSend
)

// SetPeers sets the endpoints the next primitives receive from and send to.
func (w *Prims) SetPeers(recvs, sends []*wire.Endpoint) {
	w.recvs = append(w.recvBuf[:0], recvs...)
	w.sends = append(w.sendBuf[:0], sends...)
}

// Run applies primitive p to in and out (byte ranges of the user's buffers of equal length, nil
// where p does not use them), one FIFO step per piece of w.PieceBytes.
func (w *Prims) Run(p Prim, in, out []byte) error {
	nb := max(len(in), len(out))
	for off := 0; off < nb; off += w.PieceBytes {
		end := min(off+w.PieceBytes, nb)
		var pi, po []byte
		if p&PrimIn != 0 {
			pi = in[off:end]
		}
		if p&PrimOut != 0 {
			po = out[off:end]
		}
		if err := w.piece(p, pi, po, end-off); err != nil {
			return err
		}
	}
	return nil
}

// piece performs one FIFO step of primitive p on nb bytes: receive from every recv peer, combine
// with the local input, apply the postOp, store to the local output, send to every send peer,
// then hand the received slots back.
//
// Where the result is built: in the output when there is one; else, with Simple, directly in the
// first send peer's slot; else in the accumulator scratch (LL and LL128 pack from it). Simple
// receives are read in place from the slot; LL and LL128 receives are unpacked first.
func (w *Prims) piece(p Prim, in, out []byte, nb int) error {
	simple := w.Proto == costmodel.Simple
	var recvs, sends []*wire.Endpoint
	if p&PrimRecv != 0 {
		recvs = w.recvs
	}
	if p&PrimSend != 0 {
		sends = w.sends
	}

	// Receive.
	views := w.views[:len(recvs)]
	for i, e := range recvs {
		if simple {
			v, err := e.WaitSimple(&w.W, nb)
			if err != nil {
				return err
			}
			views[i] = v
			continue
		}
		dst := w.scratch[i][:nb]
		if in == nil && out != nil && len(recvs) == 1 && w.RaceAcq == nil {
			dst = out // a copy: unpack straight into the output
		}
		var err error
		if w.Proto == costmodel.LL {
			err = e.GetLL(&w.W, dst)
		} else {
			err = e.GetLL128(&w.W, dst)
		}
		if err != nil {
			return err
		}
		views[i] = dst
	}
	if w.RaceAcq != nil {
		wire.RaceAcquire(w.RaceAcq)
	}

	// Simple with an output and one send peer: build the result in the output and copy it to the
	// send slot block by block, so that the copy reads it back from L1 rather than making a second
	// pass over the whole step.
	if simple && out != nil && len(sends) == 1 && len(views) <= 1 {
		return w.pieceFused(p, in, out, views, sends[0], recvs, nb)
	}

	// Choose where the result is built.
	var res []byte
	inSlot := false
	switch {
	case out != nil:
		res = out
	case simple && len(sends) > 0:
		if err := sends[0].Reserve(&w.W); err != nil {
			return err
		}
		res, inSlot = sends[0].SimpleSlotBytes(nb), true
	default:
		res = w.scratch[MaxPeers][:nb]
	}

	// Combine.
	switch {
	case len(views) == 0: // send or copySend: the local input alone
		switch {
		case w.Reducing && w.PreMul:
			w.Red.Load(res, in)
		case out == nil && !inSlot && w.RaceRel == nil:
			res = in // pack straight from the input (annotated race builds copy it: see Send below)
		case !SameBytes(res, in):
			copy(res, in)
		}
	case in != nil: // recvReduce*: the first peer's partial, my input pre-multiplied, then the rest
		w.Red.Reduce(res, views[0], in)
		for _, v := range views[1:] {
			w.Comb.Reduce(res, res, v)
		}
		if p&PrimPost != 0 && w.PostDiv {
			w.Red.Finish(res)
		}
	default: // recv or recvCopySend: one peer's data
		switch {
		case out == nil && !inSlot:
			res = views[0]
		case !SameBytes(res, views[0]):
			copy(res, views[0])
		}
	}

	// Send. In an annotated race build the release comes before the first publish: released after
	// it, a peer could take the data, and the answer come back to this rank's other worker (the
	// tree's broadcast-down, writing where reduce-up read), before this goroutine reached the
	// release, and the detector then saw the read and the write unordered (TestTreeInPlaceRace,
	// shm/LL/5000, once in a loaded CI run). So the sends must not read the user's input after
	// it: there the LL/LL128 pack reads the scratch copy, not the input.
	if w.RaceRel != nil {
		wire.RaceReleaseMerge(w.RaceRel)
	}
	for i, e := range sends {
		if i > 0 || !inSlot {
			if err := e.Reserve(&w.W); err != nil {
				return err
			}
		}
		switch w.Proto {
		case costmodel.Simple:
			if i > 0 || !inSlot {
				copy(e.SimpleSlotBytes(nb), res)
			}
			e.PublishSimple()
			w.Stats.WireBytes += uint64(nb)
		case costmodel.LL:
			e.PutLL(res)
			w.Stats.WireBytes += uint64(wire.LLLines(nb) * wire.LLLineBytes)
		default:
			e.PutLL128(res)
			w.Stats.WireBytes += uint64(wire.LL128Lines(nb) * wire.LL128LineBytes)
		}
		w.Stats.Steps++
		w.Stats.PayloadBytes += uint64(nb)
	}

	// Hand the received slots back (after the sends: a Simple result may have been read from one).
	for _, e := range recvs {
		e.Release()
		w.Stats.RecvBytes += uint64(nb)
	}
	return nil
}

// fuseBlock is pieceFused's block: small enough that a block written to the output is still in
// L1 when it is copied to the send slot.
const fuseBlock = 16 << 10

// pieceFused is piece for Simple steps that store to the output and send to one peer (copySend,
// recvReduceCopySend, recvCopySend), with at most one receive peer.
func (w *Prims) pieceFused(p Prim, in, out []byte, views [][]byte, e *wire.Endpoint, recvs []*wire.Endpoint, nb int) error {
	if err := e.Reserve(&w.W); err != nil {
		return err
	}
	slot := e.SimpleSlotBytes(nb)
	post := p&PrimPost != 0 && w.PostDiv
	for s := 0; s < nb; s += fuseBlock {
		t := min(s+fuseBlock, nb)
		o := out[s:t]
		switch {
		case len(views) == 0: // copySend
			switch {
			case w.Reducing && w.PreMul:
				w.Red.Load(o, in[s:t])
			case !SameBytes(o, in[s:t]):
				copy(o, in[s:t])
			}
		case in != nil: // recvReduceCopySend
			w.Red.Reduce(o, views[0][s:t], in[s:t])
			if post {
				w.Red.Finish(o)
			}
		default: // recvCopySend
			copy(o, views[0][s:t])
		}
		copy(slot[s:t], o)
	}
	if w.RaceRel != nil {
		wire.RaceReleaseMerge(w.RaceRel) // before the publish: see piece
	}
	e.PublishSimple()
	w.Stats.WireBytes += uint64(nb)
	w.Stats.Steps++
	w.Stats.PayloadBytes += uint64(nb)
	for _, r := range recvs {
		r.Release()
		w.Stats.RecvBytes += uint64(nb)
	}
	return nil
}

// SameBytes reports whether a and b start at the same address (both non-empty).
func SameBytes(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// EnsureScratch sizes the scratch buffers for pieces of nb bytes and nRecv receive peers.
func (w *Prims) EnsureScratch(nb, nRecv int) {
	if w.Proto == costmodel.Simple {
		nRecv = 0 // Simple receives are read in place
	}
	for i := 0; i < nRecv; i++ {
		if len(w.scratch[i]) < nb {
			w.scratch[i] = make([]byte, nb)
		}
	}
	if len(w.scratch[MaxPeers]) < nb {
		w.scratch[MaxPeers] = make([]byte, nb)
	}
}
