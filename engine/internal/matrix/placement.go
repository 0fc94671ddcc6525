package matrix

import (
	"bytes"

	"github.com/collplan/collplan/costmodel"
)

// GuardBytes is the length of the known pattern after every buffer.
const GuardBytes = 16

// Guarded returns a buffer of need bytes starting misalign bytes into an allocation, followed by
// guard bytes of a known pattern, and the whole allocation.
func Guarded(need, misalign int) (buf, all []byte) {
	all = make([]byte, misalign+need+GuardBytes)
	for i := range all {
		all[i] = 0xa5
	}
	return all[misalign : misalign+need+GuardBytes], all
}

// Placement is one case's per-rank buffers: the full inputs, the send and receive slices handed to
// the engine (inside guarded allocations, in place or not as the case says), and a copy of each
// allocation taken before the call.
type Placement struct {
	Ins, Sends, Recvs, Allocs, Before [][]byte
	OutOff                            []int // where recv starts in Allocs[r]
	InCount, OutCount                 int
}

// Place lays a case's buffers out as NCCL's in-place conventions say: AllGather's send is this
// rank's block of recv, ReduceScatter's recv is this rank's block of send, the others share one
// buffer; a non-root of an in-place Broadcast or Reduce has separate buffers. input(r, inCount)
// gives rank r's full send contents. Only the ranks for which local says true get buffers (nil:
// every rank); every rank's input is there, for the oracle.
func Place(m Case, count int, input func(r, inCount int) []byte, local func(r int) bool) *Placement {
	n, es, coll, root := m.N, m.Do.Dt.Size(), m.CA.Coll, m.Root()
	b := &Placement{InCount: count, OutCount: count}
	if coll == costmodel.ReduceScatter {
		b.InCount = n * count
	}
	if coll == costmodel.AllGather {
		b.OutCount = n * count
	}
	b.Ins, b.Sends, b.Recvs = make([][]byte, n), make([][]byte, n), make([][]byte, n)
	b.Allocs, b.Before, b.OutOff = make([][]byte, n), make([][]byte, n), make([]int, n)
	for r := 0; r < n; r++ {
		b.Ins[r] = input(r, b.InCount)
		if local != nil && !local(r) {
			continue
		}
		var all []byte
		switch {
		case !m.InPlace || (coll == costmodel.Broadcast || coll == costmodel.Reduce) && r != root:
			b.Sends[r], _ = Guarded(b.InCount*es, m.Misalign)
			copy(b.Sends[r], b.Ins[r])
			b.Recvs[r], all = Guarded(b.OutCount*es, m.Misalign)
		case coll == costmodel.AllGather:
			b.Recvs[r], all = Guarded(b.OutCount*es, m.Misalign)
			b.Sends[r] = b.Recvs[r][r*count*es : (r+1)*count*es]
			copy(b.Sends[r], b.Ins[r])
		case coll == costmodel.ReduceScatter:
			b.Sends[r], all = Guarded(b.InCount*es, m.Misalign)
			copy(b.Sends[r], b.Ins[r])
			b.Recvs[r] = b.Sends[r][r*count*es : (r+1)*count*es]
			b.OutOff[r] = r * count * es
		default:
			b.Sends[r], all = Guarded(b.InCount*es, m.Misalign)
			copy(b.Sends[r], b.Ins[r])
			b.Recvs[r] = b.Sends[r]
		}
		b.Allocs[r] = all
		b.OutOff[r] += m.Misalign
		b.Before[r] = bytes.Clone(all)
	}
	return b
}

// CheckUntouched reports any change outside the results of every rank (CheckRankUntouched).
func (b *Placement) CheckUntouched(m Case, fail func(format string, a ...any)) {
	for r := 0; r < m.N; r++ {
		b.CheckRankUntouched(m, r, fail)
	}
}

// CheckRankUntouched reports any change outside rank r's result: guard bytes, the rest of an
// in-place send buffer, a non-root Reduce output, and the send buffer of an out-of-place call.
func (b *Placement) CheckRankUntouched(m Case, r int, fail func(format string, a ...any)) {
	coll, root, es := m.CA.Coll, m.Root(), m.Do.Dt.Size()
	lo, hi := b.OutOff[r], b.OutOff[r]+b.OutCount*es
	if coll == costmodel.Reduce && r != root {
		hi = lo
	}
	for i, v := range b.Allocs[r] {
		if (i < lo || i >= hi) && v != b.Before[r][i] {
			fail("rank %d: byte %d outside the result changed", r, i-m.Misalign)
			break
		}
	}
	separate := !m.InPlace || (coll == costmodel.Broadcast || coll == costmodel.Reduce) && r != root
	if separate && !bytes.Equal(b.Sends[r][:b.InCount*es], b.Ins[r]) {
		fail("rank %d: the send buffer changed", r)
	}
}
