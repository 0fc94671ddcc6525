package cuda

import (
	"fmt"

	"github.com/collplan/collplan/capabilities"
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

// RegionBytes = 3 lines + LL + LL128 + Simple: a connection region (engine/internal/wire/layout.go).
func (b ConnBuffers) RegionBytes() int {
	return engine.ConnBufOffset + b.LL + b.LL128 + b.Simple
}

// PieceBytes = LL/NCCL_STEPS/16 x 8 (LL), LL128/NCCL_STEPS/128 x 120 (LL128), Simple/NCCL_STEPS
// (Simple): a FIFO step's payload in protocol p, a slot's lines times their payload (the line
// geometry of engine/internal/wire/layout.go).
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

// Trees returns the two trees of NCCL's double binary tree over n ranks, one rank per node
// (capabilities.DoubleTree): even channels run on tree 0, odd channels on tree 1, as in the CPU
// engine.
func Trees(n int) ([2][]capabilities.TreeLinks, error) {
	t0, t1, err := capabilities.DoubleTree(n, 1)
	return [2][]capabilities.TreeLinks{t0, t1}, err
}

// treeAddrs are the device addresses a Tree call's Works point into: edge (ch, child, dir) is the
// connection from child to its parent (dir 0, reduce-up) or from the parent to child (dir 1,
// broadcast-down) on channel ch, each with a step count for its sending and its receiving side.
type treeAddrs struct {
	send, recv []uint64
	region     func(ch, child, dir int) uint64
	step       func(ch, child, dir, side int) uint64 // side 0 the sender's, 1 the receiver's
	abort      uint64
}

// treeWorks is every block's Work of a Tree AllReduce, block = rank*channels + ch, over the same
// channel ranges as ringWorks.
func treeWorks(c ringCall, a treeAddrs, trees [2][]capabilities.TreeLinks) []Work {
	align := max(1, 16/c.es)
	per := (c.count + c.channels - 1) / c.channels
	per = (per + align - 1) / align * align
	piece := c.buffers.PieceBytes(c.proto)
	conn := func(region, step uint64) Conn {
		return Conn{Region: region, Step: step, LLBytes: uint32(c.buffers.LL), LL128Bytes: uint32(c.buffers.LL128),
			SimpleBytes: uint32(c.buffers.Simple)}
	}
	works := make([]Work, 0, c.n*c.channels)
	for r := range c.n {
		for ch := range c.channels {
			l := trees[ch%2][r]
			lo, hi := min(ch*per, c.count), min((ch+1)*per, c.count)
			w := Work{
				SendBuff: a.send[r], RecvBuff: a.recv[r], Count: uint64(c.count), Lo: uint64(lo), Hi: uint64(hi),
				ChunkElems: uint64(piece / c.es), PieceBytes: uint64(piece), OpArg: c.opArgs[r], Abort: a.abort,
				DevOp: uint32(c.devOp), NRanks: uint32(c.n),
			}
			if l.Up >= 0 {
				w.TreeUp = 1
				w.ToUp = conn(a.region(ch, r, 0), a.step(ch, r, 0, 0))
				w.FromUp = conn(a.region(ch, r, 1), a.step(ch, r, 1, 1))
			}
			for _, k := range l.Down {
				if k < 0 {
					continue
				}
				w.FromKid[w.NKids] = conn(a.region(ch, k, 0), a.step(ch, k, 0, 1))
				w.ToKid[w.NKids] = conn(a.region(ch, k, 1), a.step(ch, k, 1, 0))
				w.NKids++
			}
			if c.inPlace {
				w.InPlace = 1
			}
			works = append(works, w)
		}
	}
	return works
}
