package cuda

import (
	"fmt"

	"github.com/collplan/collplan/engine"
)

// The GPU communicator's ring plan, kept free of the driver so that it is tested without a GPU:
// which connection region each (channel, rank) sends on and receives from, and the Work of every
// thread block of a ring call.

// Protocols, numbered as in common.cuh (CP_PROTO_*) and costmodel.
const (
	ProtoLL     = 0
	ProtoLL128  = 1
	ProtoSimple = 2
)

// ConnBuffers are a connection's buffer sizes per protocol, each NCCL_STEPS slots (the engine's
// planner.Buffers LL, LL128 and Simple).
type ConnBuffers struct {
	LL, LL128, Simple int
}

// RegionBytes = 3 lines + LL + LL128 + Simple: a connection region (engine/layout.go).
func (b ConnBuffers) RegionBytes() int {
	return engine.ConnBufOffset + b.LL + b.LL128 + b.Simple
}

// PieceBytes = LL/NCCL_STEPS/16 x 8 (LL), LL128/NCCL_STEPS/128 x 120 (LL128), Simple/NCCL_STEPS
// (Simple): a FIFO step's payload in protocol p, a slot's lines times their payload (the line
// geometry of engine/layout.go).
func (b ConnBuffers) PieceBytes(p int) int {
	switch p {
	case ProtoLL:
		return b.LL / engine.NCCLSteps / engine.LLLineBytes * engine.LLLinePayload
	case ProtoLL128:
		return b.LL128 / engine.NCCLSteps / engine.LL128LineBytes * engine.LL128LinePayload
	}
	return b.Simple / engine.NCCLSteps
}

func (b ConnBuffers) check() error {
	for _, v := range []struct {
		name      string
		bytes, of int
	}{
		{"LL", b.LL, engine.NCCLSteps * engine.LLLineBytes},
		{"LL128", b.LL128, engine.NCCLSteps * engine.LL128LineBytes},
		{"Simple", b.Simple, engine.NCCLSteps * 128},
	} {
		if v.bytes <= 0 || v.bytes%v.of != 0 {
			return fmt.Errorf("cuda: %s buffer of %d bytes: want a positive multiple of %d", v.name, v.bytes, v.of)
		}
	}
	return nil
}

// RingOrder is channel ch's ring over n ranks: 0..n-1 on even channels, backwards on odd ones
// (the engine's rings on one virtual node, without the per-channel rotation).
func RingOrder(n, ch int) []int32 {
	r := make([]int32, n)
	for i := range r {
		if ch%2 == 0 {
			r[i] = int32(i)
		} else {
			r[i] = int32((n - i) % n)
		}
	}
	return r
}

// ringCall is one ring call as the blocks see it.
type ringCall struct {
	n, channels int
	count       int // the call's count (per rank for AllGather and ReduceScatter)
	es          int // element size
	proto       int
	buffers     ConnBuffers
	devOp       int
	opArgs      []uint64 // per rank
	root        int
	inPlace     bool
}

// ringAddrs are the device addresses a ring call's Works point into.
type ringAddrs struct {
	send, recv []uint64                  // per rank
	region     func(ch, from int) uint64 // the region of the connection from rank from to its ring successor
	sendStep   func(ch, rank int) uint64 // the step count of rank's sending side on channel ch
	recvStep   func(ch, rank int) uint64
	ring       func(ch int) uint64 // the channel's ring order (int32 each)
	abort      uint64
}

// ringWorks is every block's Work, block = rank*channels + ch: each channel an equal share of
// the elements (rounded up to 16 bytes of elements, the last shorter), one FIFO step a chunk.
func ringWorks(c ringCall, a ringAddrs) []Work {
	align := max(1, 16/c.es)
	per := (c.count + c.channels - 1) / c.channels
	per = (per + align - 1) / align * align
	piece := c.buffers.PieceBytes(c.proto)
	works := make([]Work, 0, c.n*c.channels)
	conn := func(region, step uint64) Conn {
		return Conn{Region: region, Step: step, LLBytes: uint32(c.buffers.LL), LL128Bytes: uint32(c.buffers.LL128),
			SimpleBytes: uint32(c.buffers.Simple)}
	}
	for r := range c.n {
		for ch := range c.channels {
			ring := RingOrder(c.n, ch)
			ix := 0
			for i, v := range ring {
				if int(v) == r {
					ix = i
				}
			}
			prev := int(ring[(ix+c.n-1)%c.n])
			lo, hi := min(ch*per, c.count), min((ch+1)*per, c.count)
			w := Work{
				SendBuff: a.send[r], RecvBuff: a.recv[r], Count: uint64(c.count), Lo: uint64(lo), Hi: uint64(hi),
				ChunkElems: uint64(piece / c.es), PieceBytes: uint64(piece), OpArg: c.opArgs[r], Abort: a.abort,
				Ring: a.ring(ch), DevOp: uint32(c.devOp), NRanks: uint32(c.n), RingIx: uint32(ix), Root: uint32(c.root),
				RingRecv: conn(a.region(ch, prev), a.recvStep(ch, r)), RingSend: conn(a.region(ch, r), a.sendStep(ch, r)),
			}
			if c.inPlace {
				w.InPlace = 1
			}
			works = append(works, w)
		}
	}
	return works
}
