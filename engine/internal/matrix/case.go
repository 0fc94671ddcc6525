package matrix

import (
	"fmt"
	"math/rand/v2"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// CollAlgo is a collective with the algorithm pinned for it.
type CollAlgo struct {
	Coll costmodel.Coll
	Algo costmodel.Algo
}

// CollAlgos are the matrix's ring and tree rows: Ring for all five collectives, Tree for AllReduce
// (the only collective NCCL and the engine run Tree for).
var CollAlgos = []CollAlgo{
	{costmodel.AllReduce, costmodel.Ring}, {costmodel.AllReduce, costmodel.Tree},
	{costmodel.AllGather, costmodel.Ring}, {costmodel.ReduceScatter, costmodel.Ring},
	{costmodel.Broadcast, costmodel.Ring}, {costmodel.Reduce, costmodel.Ring},
}

// Protos are the three protocols.
var Protos = []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple}

// DtOp is a dtype with a reduction operator.
type DtOp struct {
	Dt kernels.Dtype
	Op kernels.Op
}

// DtOps are the matrix's (dtype, op) values: every dtype with sum, and avg, min, max, prod and
// premulsum on float32, int32, float16, bfloat16 and fp8e4m3 (short: float16, int32 and fp8e4m3).
func DtOps(short bool) []DtOp {
	var out []DtOp
	for dt := kernels.Dtype(0); dt < kernels.NumDtypes; dt++ {
		out = append(out, DtOp{dt, kernels.Sum})
	}
	dts := []kernels.Dtype{kernels.Float32, kernels.Int32, kernels.Float16, kernels.Bfloat16, kernels.Fp8E4M3}
	if short {
		dts = []kernels.Dtype{kernels.Float16, kernels.Int32, kernels.Fp8E4M3}
	}
	for _, op := range []kernels.Op{kernels.Avg, kernels.Min, kernels.Max, kernels.Prod, kernels.PreMulSum} {
		for _, dt := range dts {
			out = append(out, DtOp{dt, op})
		}
	}
	return out
}

// The size classes of a case (Count gives the element count).
const (
	SizeZero  = iota // 0 elements
	SizeOne          // 1 element
	SizeSmall        // 13 elements
	SizeWrap         // wraps every FIFO at least 3 times, not a multiple of a line, slot or chunk
	NumSizes
)

// Case is one call of the matrix.
type Case struct {
	CA       CollAlgo
	Proto    costmodel.Proto
	Do       DtOp
	N        int
	RPN      int // ranks per node: 1, 2, 3, or 0 for N
	Size     int // a size class
	InPlace  bool
	Channels int
	Misalign int // bytes the buffers start past an aligned allocation
	RootSel  int // 0: root 0, 1: N-1, 2: N/2 (Broadcast, Reduce)
	Invalid  bool
}

func (m Case) String() string {
	rpn := fmt.Sprint(m.RPN)
	if m.RPN == 0 {
		rpn = "n"
	}
	s := fmt.Sprintf("%v-%v-%v-%v-%v-n%d-rpn%s-size%d-ch%d", m.CA.Coll, m.CA.Algo, m.Proto, m.Do.Dt, m.Do.Op, m.N, rpn, m.Size, m.Channels)
	if m.InPlace {
		s += "-inplace"
	}
	if m.Misalign != 0 {
		s += "-misaligned"
	}
	if m.Invalid {
		s += "-invalid"
	}
	if m.CA.Coll == costmodel.Broadcast || m.CA.Coll == costmodel.Reduce {
		s += fmt.Sprintf("-root%d", m.Root())
	}
	return s
}

// Root is the case's root rank.
func (m Case) Root() int {
	switch m.RootSel {
	case 1:
		return m.N - 1
	case 2:
		return m.N / 2
	}
	return 0
}

// Reduces says whether the case's collective reduces (and so takes an op).
func (m Case) Reduces() bool {
	c := m.CA.Coll
	return c == costmodel.AllReduce || c == costmodel.ReduceScatter || c == costmodel.Reduce
}

// Space is the matrix's axes: the values of collective x algorithm, protocol, (dtype, op), n and
// ranks per node that its cases take, beside the fixed ones (the four size classes, in place or
// not, 1..3 channels, aligned or off by one byte, and the three roots).
type Space struct {
	CollAlgos []CollAlgo
	Protos    []costmodel.Proto
	DtOps     []DtOp
	Ns        []int // rank counts; with Nodes, node counts
	RPNs      []int // ranks per node (0: n)
	// Nodes makes Ns count nodes: a case's n is Ns[i] times its ranks per node (the emulated
	// hosts' shapes, where every node holds the same number of ranks).
	Nodes bool
	Seed  uint64
}

// axes are the value counts of the space's ten axes, in Cases' order.
func (s Space) axes() []int {
	return []int{len(s.CollAlgos), len(s.Protos), len(s.DtOps), len(s.Ns), len(s.RPNs), NumSizes, 2, 3, 2, 3}
}

// Cases is the space's pairwise covering set: every value of every axis, and every pair of values
// of any two axes, appears in at least one case (Pairwise with the space's seed).
func (s Space) Cases() []Case {
	var cases []Case
	for _, row := range Pairwise(s.axes(), s.Seed) {
		n, rpn := s.Ns[row[3]], s.RPNs[row[4]]
		if s.Nodes {
			n *= rpn
		}
		cases = append(cases, Case{
			CA: s.CollAlgos[row[0]], Proto: s.Protos[row[1]], Do: s.DtOps[row[2]], N: n, RPN: rpn,
			Size: row[5], InPlace: row[6] == 1, Channels: row[7] + 1, Misalign: row[8], RootSel: row[9],
		})
	}
	return cases
}

// Pairwise returns rows (value indices per axis, axis a taking sizes[a] values) such that every
// pair of values of every two axes appears in some row: a greedy covering with a fixed seed.
func Pairwise(sizes []int, seed uint64) [][]int {
	type pair struct{ a, va, b, vb int }
	uncovered := map[pair]bool{}
	for a := range sizes {
		for b := a + 1; b < len(sizes); b++ {
			for va := 0; va < sizes[a]; va++ {
				for vb := 0; vb < sizes[b]; vb++ {
					uncovered[pair{a, va, b, vb}] = true
				}
			}
		}
	}
	gain := func(row []int, fixed []bool, a, va int) int {
		g := 0
		for b := range sizes {
			if b == a || !fixed[b] {
				continue
			}
			p := pair{a, va, b, row[b]}
			if b < a {
				p = pair{b, row[b], a, va}
			}
			if uncovered[p] {
				g++
			}
		}
		return g
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	var rows [][]int
	for len(uncovered) > 0 {
		// Seed the row with the uncovered pair that comes first in a fixed order.
		var first pair
		found := false
		for a := range sizes {
			for b := a + 1; b < len(sizes) && !found; b++ {
				for va := 0; va < sizes[a] && !found; va++ {
					for vb := 0; vb < sizes[b] && !found; vb++ {
						if p := (pair{a, va, b, vb}); uncovered[p] {
							first, found = p, true
						}
					}
				}
			}
			if found {
				break
			}
		}
		row := make([]int, len(sizes))
		fixed := make([]bool, len(sizes))
		row[first.a], row[first.b] = first.va, first.vb
		fixed[first.a], fixed[first.b] = true, true
		for _, a := range rng.Perm(len(sizes)) {
			if fixed[a] {
				continue
			}
			best, bestGain := rng.IntN(sizes[a]), -1
			for _, va := range rng.Perm(sizes[a]) {
				if g := gain(row, fixed, a, va); g > bestGain {
					best, bestGain = va, g
				}
			}
			row[a], fixed[a] = best, true
		}
		for a := range sizes {
			for b := a + 1; b < len(sizes); b++ {
				delete(uncovered, pair{a, row[a], b, row[b]})
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// Count is the element count of a case's size class on FIFO slots of slotPayload bytes. The
// wrapping size gives every channel at least 32 FIFO steps of payload (so each connection wraps
// its 8 slots at least 3 times) and three full ring loops of the largest chunk (4 slots), plus an
// odd number of elements, so it is not a multiple of a line, a slot or a chunk.
func Count(m Case, slotPayload int) int {
	switch m.Size {
	case SizeZero:
		return 0
	case SizeOne:
		return 1
	case SizeSmall:
		return 13
	}
	return (max(32, 12*m.N)*slotPayload*m.Channels)/m.Do.Dt.Size() + 37
}

// TinyBuffers make every FIFO slot small, so that the wrapping size stays small: LL 2 lines (16
// payload bytes), LL128 one line (120), Simple 64 bytes.
func TinyBuffers() planner.Buffers {
	return planner.Buffers{LL: wire.NCCLSteps * 2 * wire.LLLineBytes, LL128: wire.NCCLSteps * wire.LL128LineBytes, Simple: wire.NCCLSteps * 64}
}

// SlotPayload is the payload bytes of one FIFO slot of protocol p in buffers b: the engine's rule
// (its test checks the two agree), for callers outside the engine.
func SlotPayload(b planner.Buffers, p costmodel.Proto) int {
	switch p {
	case costmodel.LL:
		return int(b.LL / wire.NCCLSteps / wire.LLLineBytes * wire.LLLinePayload)
	case costmodel.LL128:
		return int(b.LL128 / wire.NCCLSteps / wire.LL128LineBytes * wire.LL128LinePayload)
	}
	return int(b.Simple / wire.NCCLSteps)
}
