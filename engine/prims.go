package engine

import (
	"sync"
	"unsafe"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
)

// A worker runs one channel's share of a call on one goroutine: NCCL's thread block. A tree
// channel of a non-root rank has two (reduce-up and broadcast-down), like runTreeSplit's two teams,
// unless its range is one FIFO step (tree.go).
// It talks to its peers through endpoints and moves data with the primitives below.
type worker struct {
	c     *Comm
	ch    int
	w     wire.Waiter
	proto costmodel.Proto

	red, comb kernels.Reducer
	reducing  bool // the call reduces: the local input is pre-multiplied as it is loaded
	preMul    bool // red's device op is PreMulSum (Load is not a copy)
	postDiv   bool // red's device op is SumPostDiv (Finish divides)

	pieceBytes int // payload bytes of one FIFO step (a multiple of the element size)

	recvs, sends []*wire.Endpoint
	recvBuf      [maxPeers]*wire.Endpoint
	sendBuf      [maxPeers]*wire.Endpoint

	scratch [maxPeers + 1][]byte // unpacked LL/LL128 receives, and the accumulator
	views   [maxPeers][]byte

	stats ChannelStats // this call's traffic, added to the Comm's at the end

	// Race-build annotations (wire's race.go), set only when c.raceHidden: after each step's sends the
	// worker releases raceRel; after each step's receives, before it writes its output, it
	// acquires raceAcq. raceTok is the token a tree's reduce-up worker releases.
	raceRel, raceAcq unsafe.Pointer
	raceTok          byte

	job  job // what the worker runs in this call
	ring ringRun
	tree treeRun
	cn   cnChainRun
	err  error
}

// job is a worker's schedule in a call.
type job uint8

const (
	jobRingAllReduce job = iota
	jobRingAllGather
	jobRingReduceScatter
	jobRingBroadcast
	jobRingReduce
	jobTreeRoot
	jobTreeUp
	jobTreeDown
	jobTreeLeafUp
	jobTreeLeafDown
	jobTreeUpDown
	jobTreeLeafUpDown
	jobPat              // pat.go: the channel's patRun
	jobCollNetChainHead // collnet.go: a CollNetChain head's cnChainRun
)

// runJob runs the worker's job, records its error and, when wg is not nil, marks it done.
func (w *worker) runJob(wg *sync.WaitGroup) {
	switch w.job {
	case jobRingAllReduce:
		w.err = w.ring.allReduce(w)
	case jobRingAllGather:
		w.err = w.ring.allGather(w)
	case jobRingReduceScatter:
		w.err = w.ring.reduceScatter(w)
	case jobRingBroadcast:
		w.err = w.ring.broadcast(w)
	case jobRingReduce:
		w.err = w.ring.reduce(w)
	case jobTreeRoot:
		w.err = w.tree.each(w, recvReduceCopySend)
	case jobTreeUp:
		w.err = w.tree.each(w, recvReduceSend)
	case jobTreeDown:
		w.err = w.tree.each(w, recvCopySend)
	case jobTreeLeafUp:
		w.err = w.tree.each(w, send)
	case jobTreeLeafDown:
		w.err = w.tree.each(w, recv)
	case jobTreeUpDown:
		w.err = w.tree.upDown(w, recvReduceSend, recvCopySend)
	case jobTreeLeafUpDown:
		w.err = w.tree.upDown(w, send, recv)
	case jobPat:
		w.err = w.c.pats[w.ch].run(w)
	case jobCollNetChainHead:
		w.err = w.cn.run(w)
	}
	if wg != nil {
		wg.Done()
	}
}

// maxPeers is NCCL_MAX_TREE_ARITY: a tree rank receives from or sends to at most three peers.
const maxPeers = 3

// prim is a primitive: which of receive, local input, local output and send a FIFO step
// involves, and whether the reduction completes there (postOp).
type prim uint8

const (
	primIn prim = 1 << iota
	primOut
	primRecv
	primSend
	primPost
)

// NCCL's primitives (src/device/prims_*.h).
const (
	send               = primIn | primSend
	copySend           = primIn | primOut | primSend
	recv               = primRecv | primOut
	recvReduceSend     = primRecv | primIn | primSend
	recvReduceCopy     = primRecv | primIn | primOut | primPost
	recvReduceCopySend = primRecv | primIn | primOut | primSend | primPost
	recvCopySend       = primRecv | primOut | primSend
)

// setPeers sets the endpoints the next primitives receive from and send to.
func (w *worker) setPeers(recvs, sends []*wire.Endpoint) {
	w.recvs = append(w.recvBuf[:0], recvs...)
	w.sends = append(w.sendBuf[:0], sends...)
}

// run applies primitive p to in and out (byte ranges of the user's buffers of equal length, nil
// where p does not use them), one FIFO step per piece of w.pieceBytes.
func (w *worker) run(p prim, in, out []byte) error {
	nb := max(len(in), len(out))
	for off := 0; off < nb; off += w.pieceBytes {
		end := min(off+w.pieceBytes, nb)
		var pi, po []byte
		if p&primIn != 0 {
			pi = in[off:end]
		}
		if p&primOut != 0 {
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
func (w *worker) piece(p prim, in, out []byte, nb int) error {
	simple := w.proto == costmodel.Simple
	var recvs, sends []*wire.Endpoint
	if p&primRecv != 0 {
		recvs = w.recvs
	}
	if p&primSend != 0 {
		sends = w.sends
	}

	// Receive.
	views := w.views[:len(recvs)]
	for i, e := range recvs {
		if simple {
			v, err := e.WaitSimple(&w.w, nb)
			if err != nil {
				return err
			}
			views[i] = v
			continue
		}
		dst := w.scratch[i][:nb]
		if in == nil && out != nil && len(recvs) == 1 && w.raceAcq == nil {
			dst = out // a copy: unpack straight into the output
		}
		var err error
		if w.proto == costmodel.LL {
			err = e.GetLL(&w.w, dst)
		} else {
			err = e.GetLL128(&w.w, dst)
		}
		if err != nil {
			return err
		}
		views[i] = dst
	}
	if w.raceAcq != nil {
		wire.RaceAcquire(w.raceAcq)
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
		if err := sends[0].Reserve(&w.w); err != nil {
			return err
		}
		res, inSlot = sends[0].SimpleSlotBytes(nb), true
	default:
		res = w.scratch[maxPeers][:nb]
	}

	// Combine.
	switch {
	case len(views) == 0: // send or copySend: the local input alone
		switch {
		case w.reducing && w.preMul:
			w.red.Load(res, in)
		case out == nil && !inSlot:
			res = in // pack straight from the input
		case !sameBytes(res, in):
			copy(res, in)
		}
	case in != nil: // recvReduce*: the first peer's partial, my input pre-multiplied, then the rest
		w.red.Reduce(res, views[0], in)
		for _, v := range views[1:] {
			w.comb.Reduce(res, res, v)
		}
		if p&primPost != 0 && w.postDiv {
			w.red.Finish(res)
		}
	default: // recv or recvCopySend: one peer's data
		switch {
		case out == nil && !inSlot:
			res = views[0]
		case !sameBytes(res, views[0]):
			copy(res, views[0])
		}
	}

	// Send.
	for i, e := range sends {
		if i > 0 || !inSlot {
			if err := e.Reserve(&w.w); err != nil {
				return err
			}
		}
		switch w.proto {
		case costmodel.Simple:
			if i > 0 || !inSlot {
				copy(e.SimpleSlotBytes(nb), res)
			}
			e.PublishSimple()
			w.stats.WireBytes += uint64(nb)
		case costmodel.LL:
			e.PutLL(res)
			w.stats.WireBytes += uint64(wire.LLLines(nb) * wire.LLLineBytes)
		default:
			e.PutLL128(res)
			w.stats.WireBytes += uint64(wire.LL128Lines(nb) * wire.LL128LineBytes)
		}
		w.stats.Steps++
		w.stats.PayloadBytes += uint64(nb)
	}
	if w.raceRel != nil {
		wire.RaceReleaseMerge(w.raceRel)
	}

	// Hand the received slots back (after the sends: a Simple result may have been read from one).
	for _, e := range recvs {
		e.Release()
		w.stats.RecvBytes += uint64(nb)
	}
	return nil
}

// fuseBlock is pieceFused's block: small enough that a block written to the output is still in
// L1 when it is copied to the send slot.
const fuseBlock = 16 << 10

// pieceFused is piece for Simple steps that store to the output and send to one peer (copySend,
// recvReduceCopySend, recvCopySend), with at most one receive peer.
func (w *worker) pieceFused(p prim, in, out []byte, views [][]byte, e *wire.Endpoint, recvs []*wire.Endpoint, nb int) error {
	if err := e.Reserve(&w.w); err != nil {
		return err
	}
	slot := e.SimpleSlotBytes(nb)
	post := p&primPost != 0 && w.postDiv
	for s := 0; s < nb; s += fuseBlock {
		t := min(s+fuseBlock, nb)
		o := out[s:t]
		switch {
		case len(views) == 0: // copySend
			switch {
			case w.reducing && w.preMul:
				w.red.Load(o, in[s:t])
			case !sameBytes(o, in[s:t]):
				copy(o, in[s:t])
			}
		case in != nil: // recvReduceCopySend
			w.red.Reduce(o, views[0][s:t], in[s:t])
			if post {
				w.red.Finish(o)
			}
		default: // recvCopySend
			copy(o, views[0][s:t])
		}
		copy(slot[s:t], o)
	}
	e.PublishSimple()
	w.stats.WireBytes += uint64(nb)
	w.stats.Steps++
	w.stats.PayloadBytes += uint64(nb)
	if w.raceRel != nil {
		wire.RaceReleaseMerge(w.raceRel)
	}
	for _, r := range recvs {
		r.Release()
		w.stats.RecvBytes += uint64(nb)
	}
	return nil
}

// sameBytes reports whether a and b start at the same address (both non-empty).
func sameBytes(a, b []byte) bool {
	return len(a) > 0 && len(b) > 0 && &a[0] == &b[0]
}

// ensureScratch sizes the scratch buffers for pieces of nb bytes and nRecv receive peers.
func (w *worker) ensureScratch(nb, nRecv int) {
	if w.proto == costmodel.Simple {
		nRecv = 0 // Simple receives are read in place
	}
	for i := 0; i < nRecv; i++ {
		if len(w.scratch[i]) < nb {
			w.scratch[i] = make([]byte, nb)
		}
	}
	if len(w.scratch[maxPeers]) < nb {
		w.scratch[maxPeers] = make([]byte, nb)
	}
}
