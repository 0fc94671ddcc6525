package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// The correctness matrix. Its axes:
//
//	collective x algorithm   ring for all five, tree for AllReduce (PAT for AllGather and
//	                         ReduceScatter in its own rows: one rank per node, Simple)
//	protocol                 LL, LL128, Simple
//	dtype x op               the 12 dtypes with sum; avg, min, max, prod, premulsum on float32,
//	                         int32, float16, bfloat16 and fp8e4m3
//	n                        1..9
//	ranks per node           1, 2, 3, n (3 clamps to n below 3 ranks)
//	size                     0, 1 element, 13 elements, and a size that wraps every FIFO at least
//	                         3 times (not a multiple of a line, slot or chunk)
//	in place                 no, yes
//	channels                 1, 2, 3
//	buffer alignment         aligned, off by one byte
//	root                     0, n-1, n/2 (Broadcast, Reduce)
//
// The full cartesian product is ~10^7 calls; the test runs a pairwise covering set: every value of
// every axis, and every pair of values of any two axes, appears in at least one case. -short (the
// race detector's run) uses a pairwise set over smaller axes.

type collAlgo struct {
	coll costmodel.Coll
	algo costmodel.Algo
}

var collAlgos = []collAlgo{
	{costmodel.AllReduce, costmodel.Ring}, {costmodel.AllReduce, costmodel.Tree},
	{costmodel.AllGather, costmodel.Ring}, {costmodel.ReduceScatter, costmodel.Ring},
	{costmodel.Broadcast, costmodel.Ring}, {costmodel.Reduce, costmodel.Ring},
}

type dtOp struct {
	dt kernels.Dtype
	op kernels.Op
}

func dtOps(short bool) []dtOp {
	var out []dtOp
	for dt := kernels.Dtype(0); dt < kernels.NumDtypes; dt++ {
		out = append(out, dtOp{dt, kernels.Sum})
	}
	dts := []kernels.Dtype{kernels.Float32, kernels.Int32, kernels.Float16, kernels.Bfloat16, kernels.Fp8E4M3}
	if short {
		dts = []kernels.Dtype{kernels.Float16, kernels.Int32, kernels.Fp8E4M3}
	}
	for _, op := range []kernels.Op{kernels.Avg, kernels.Min, kernels.Max, kernels.Prod, kernels.PreMulSum} {
		for _, dt := range dts {
			out = append(out, dtOp{dt, op})
		}
	}
	return out
}

const (
	sizeZero = iota
	sizeOne
	sizeSmall
	sizeWrap
)

type matrixCase struct {
	ca       collAlgo
	proto    costmodel.Proto
	do       dtOp
	n        int
	rpn      int // 1, 2, 3, or 0 for n
	size     int
	inPlace  bool
	channels int
	misalign int
	rootSel  int
	invalid  bool // the full matrix's refused rows: ErrInvalid on every rank expected
}

func (m matrixCase) String() string {
	rpn := fmt.Sprint(m.rpn)
	if m.rpn == 0 {
		rpn = "n"
	}
	s := fmt.Sprintf("%v-%v-%v-%v-%v-n%d-rpn%s-size%d-ch%d", m.ca.coll, m.ca.algo, m.proto, m.do.dt, m.do.op, m.n, rpn, m.size, m.channels)
	if m.inPlace {
		s += "-inplace"
	}
	if m.misalign != 0 {
		s += "-misaligned"
	}
	if m.invalid {
		s += "-invalid"
	}
	if m.ca.coll == costmodel.Broadcast || m.ca.coll == costmodel.Reduce {
		s += fmt.Sprintf("-root%d", m.root())
	}
	return s
}

func (m matrixCase) root() int {
	switch m.rootSel {
	case 1:
		return m.n - 1
	case 2:
		return m.n / 2
	}
	return 0
}

// pairwise returns rows (value indices per axis) such that every pair of values of every two axes
// appears in some row: a greedy covering with a fixed seed.
func pairwise(sizes []int, seed uint64) [][]int {
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

func matrixCases(short bool) []matrixCase {
	ns := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if short {
		ns = []int{1, 2, 3, 5, 8, 9}
	}
	dos := dtOps(short)
	rpns := []int{1, 2, 3, 0}
	axes := []int{len(collAlgos), len(protos), len(dos), len(ns), len(rpns), 4, 2, 3, 2, 3}
	var cases []matrixCase
	for _, row := range pairwise(axes, 42) {
		cases = append(cases, matrixCase{
			ca: collAlgos[row[0]], proto: protos[row[1]], do: dos[row[2]], n: ns[row[3]], rpn: rpns[row[4]],
			size: row[5], inPlace: row[6] == 1, channels: row[7] + 1, misalign: row[8], rootSel: row[9],
		})
	}
	return cases
}

// patMatrixCases are the PAT rows: AllGather and ReduceScatter at one rank per node with Simple
// (the only cells NCCL runs PAT in), over the other axes of the matrix: n = 1..9, every dtype with
// sum and the ops PAT runs (ReduceScatter refuses avg and PreMulSum: TestPATInvalid), the four
// sizes, in place or not, 1..3 channels, aligned or not.
func patMatrixCases(short bool) []matrixCase {
	cas := []collAlgo{{costmodel.AllGather, costmodel.PAT}, {costmodel.ReduceScatter, costmodel.PAT}}
	var dos []dtOp
	for _, d := range dtOps(short) {
		if d.op != kernels.Avg && d.op != kernels.PreMulSum {
			dos = append(dos, d)
		}
	}
	ns := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	axes := []int{len(cas), len(dos), len(ns), 4, 2, 3, 2}
	var cases []matrixCase
	for _, row := range pairwise(axes, 43) {
		cases = append(cases, matrixCase{
			ca: cas[row[0]], proto: costmodel.Simple, do: dos[row[1]], n: ns[row[2]], rpn: 1,
			size: row[3], inPlace: row[4] == 1, channels: row[5] + 1, misalign: row[6],
		})
	}
	return cases
}

// TestMatrixPAT runs the PAT rows, checked by the same oracle as the rest of the matrix.
func TestMatrixPAT(t *testing.T) {
	cases := patMatrixCases(testing.Short())
	start := time.Now()
	for _, m := range cases {
		t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
	}
	t.Logf("%d cases in %v", len(cases), time.Since(start))
}

// TestPairwiseCovers checks the covering property the matrix relies on.
func TestPairwiseCovers(t *testing.T) {
	axes := []int{6, 3, 37, 9, 4, 4, 2, 3, 2, 3}
	rows := pairwise(axes, 42)
	for a := range axes {
		for b := a + 1; b < len(axes); b++ {
			seen := map[[2]int]bool{}
			for _, r := range rows {
				seen[[2]int{r[a], r[b]}] = true
			}
			require.Len(t, seen, axes[a]*axes[b], "axes %d and %d", a, b)
		}
	}
	t.Logf("%d rows cover all pairs of %v", len(rows), axes)
}

func TestMatrix(t *testing.T) {
	cases := matrixCases(testing.Short())
	start := time.Now()
	for _, m := range cases {
		t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
	}
	t.Logf("%d cases in %v", len(cases), time.Since(start))
}

// matrixCount is the element count of a size class. The wrapping size gives every channel at
// least 32 FIFO steps of payload (so each connection wraps its 8 slots at least 3 times) and three
// full ring loops of the largest chunk (4 slots), plus an odd number of elements, so it is not a
// multiple of a line, a slot or a chunk.
func matrixCount(m matrixCase, cfgPayload int) int {
	es := m.do.dt.Size()
	switch m.size {
	case sizeZero:
		return 0
	case sizeOne:
		return 1
	case sizeSmall:
		return 13
	}
	return (max(32, 12*m.n)*cfgPayload*m.channels)/es + 37
}

// caseCount is matrixCount on communicator c's buffers, where an NVLS, NVLS_TREE or CollNetDirect
// AllReduce's wrapping size is larger: a step carries a chunk per head (the node's ranks), so the
// size is that many times the bytes for as many steps.
func caseCount(m matrixCase, c *Comm) int {
	if (m.ca.algo == costmodel.NVLS || m.ca.algo == costmodel.NVLSTree || m.ca.algo == costmodel.CollNetDirect) && m.ca.coll == costmodel.AllReduce && m.size == sizeWrap {
		return (32*c.topo.rpn*c.nvlsStepBytes()*m.channels)/m.do.dt.Size() + 37
	}
	return matrixCount(m, int(c.slotPayload(m.proto)))
}

const guardBytes = 16

// guarded returns a buffer of need bytes starting misalign bytes into an allocation, followed by
// guard bytes of a known pattern, and the whole allocation.
func guarded(need, misalign int) (buf, all []byte) {
	all = make([]byte, misalign+need+guardBytes)
	for i := range all {
		all[i] = 0xa5
	}
	return all[misalign : misalign+need+guardBytes], all
}

// caseBuffers are one case's per-rank buffers: the full inputs, the send and receive slices handed
// to the engine (inside guarded allocations, in place or not as the case says), and a copy of each
// allocation taken before the call.
type caseBuffers struct {
	ins, sends, recvs, allocs, before [][]byte
	outOff                            []int // where recv starts in allocs[r]
	inCount, outCount                 int
}

// placeBuffers lays a case's buffers out as NCCL's in-place conventions say: AllGather's send is
// this rank's block of recv, ReduceScatter's recv is this rank's block of send, the others share
// one buffer; a non-root of an in-place Broadcast or Reduce has separate buffers.
func placeBuffers(m matrixCase, count int, input func(r, inCount int) []byte) *caseBuffers {
	n, es, coll, root := m.n, m.do.dt.Size(), m.ca.coll, m.root()
	b := &caseBuffers{inCount: count, outCount: count}
	if coll == costmodel.ReduceScatter {
		b.inCount = n * count
	}
	if coll == costmodel.AllGather {
		b.outCount = n * count
	}
	b.ins, b.sends, b.recvs = make([][]byte, n), make([][]byte, n), make([][]byte, n)
	b.allocs, b.before, b.outOff = make([][]byte, n), make([][]byte, n), make([]int, n)
	for r := 0; r < n; r++ {
		b.ins[r] = input(r, b.inCount)
		var all []byte
		switch {
		case !m.inPlace || (coll == costmodel.Broadcast || coll == costmodel.Reduce) && r != root:
			b.sends[r], _ = guarded(b.inCount*es, m.misalign)
			copy(b.sends[r], b.ins[r])
			b.recvs[r], all = guarded(b.outCount*es, m.misalign)
		case coll == costmodel.AllGather:
			b.recvs[r], all = guarded(b.outCount*es, m.misalign)
			b.sends[r] = b.recvs[r][r*count*es : (r+1)*count*es]
			copy(b.sends[r], b.ins[r])
		case coll == costmodel.ReduceScatter:
			b.sends[r], all = guarded(b.inCount*es, m.misalign)
			copy(b.sends[r], b.ins[r])
			b.recvs[r] = b.sends[r][r*count*es : (r+1)*count*es]
			b.outOff[r] = r * count * es
		default:
			b.sends[r], all = guarded(b.inCount*es, m.misalign)
			copy(b.sends[r], b.ins[r])
			b.recvs[r] = b.sends[r]
		}
		b.allocs[r] = all
		b.outOff[r] += m.misalign
		b.before[r] = bytes.Clone(all)
	}
	return b
}

// checkUntouched reports any change outside the results: guard bytes, the rest of an in-place send
// buffer, a non-root Reduce output, and the send buffer of an out-of-place call.
func (b *caseBuffers) checkUntouched(m matrixCase, es int, fail func(format string, a ...any)) {
	coll, root := m.ca.coll, m.root()
	for r := 0; r < m.n; r++ {
		lo, hi := b.outOff[r], b.outOff[r]+b.outCount*es
		if coll == costmodel.Reduce && r != root {
			hi = lo
		}
		for i, v := range b.allocs[r] {
			if (i < lo || i >= hi) && v != b.before[r][i] {
				fail("rank %d: byte %d outside the result changed", r, i-m.misalign)
				break
			}
		}
		separate := !m.inPlace || (coll == costmodel.Broadcast || coll == costmodel.Reduce) && r != root
		if separate && !bytes.Equal(b.sends[r][:b.inCount*es], b.ins[r]) {
			fail("rank %d: the send buffer changed", r)
		}
	}
}

func runMatrixCase(t *testing.T, m matrixCase) {
	cfg := Config{Buffers: tinyBuffers(), RanksPerNode: m.rpn, Override: Pin(m.ca.algo, m.proto)}
	cfg.Override.Channels = m.channels
	if m.rpn == 0 {
		cfg.RanksPerNode = m.n
	}
	if m.ca.algo == costmodel.CollNetDirect || m.ca.algo == costmodel.CollNetChain {
		cfg.CollNet.Addr = testCollNetAddr(t)
	}
	comms, err := NewInProcess(m.n, cfg)
	require.NoError(t, err)
	defer closeAll(comms)
	n, dt, op, coll := m.n, m.do.dt, m.do.op, m.ca.coll
	es := dt.Size()
	count := caseCount(m, comms[0])
	root := m.root()
	reduces := coll == costmodel.AllReduce || coll == costmodel.ReduceScatter || coll == costmodel.Reduce
	const seed = 7

	// Inputs (full per-rank send contents) and the buffers handed to the engine.
	b := placeBuffers(m, count, func(r, inCount int) []byte {
		in := make([]byte, inCount*es)
		fillInput(in, dt, op, seed, r, 0, inCount)
		return in
	})
	ins, sends, recvs := b.ins, b.sends, b.recvs
	scalars := make([][]byte, n)
	ops := make([]kernels.Op, n)
	for r := 0; r < n; r++ {
		ops[r] = op
		if reduces && op == kernels.PreMulSum {
			scalars[r] = premulScalar(dt, r)
			ops[r], err = comms[r].RedOpCreatePreMulSum(scalars[r], dt)
			require.NoError(t, err)
		}
	}

	errs := runRanks(t, comms, 30*time.Second, func(r int, c *Comm) error {
		switch coll {
		case costmodel.AllReduce:
			return c.AllReduce(bg, sends[r], recvs[r], count, dt, ops[r])
		case costmodel.AllGather:
			return c.AllGather(bg, sends[r], recvs[r], count, dt)
		case costmodel.ReduceScatter:
			return c.ReduceScatter(bg, sends[r], recvs[r], count, dt, ops[r])
		case costmodel.Broadcast:
			return c.Broadcast(bg, sends[r], recvs[r], count, dt, root)
		default:
			return c.Reduce(bg, sends[r], recvs[r], count, dt, ops[r], root)
		}
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}

	// Results.
	fails := 0
	fail := func(format string, a ...any) {
		if fails < 5 {
			t.Errorf(format, a...)
		}
		fails++
	}
	checkResults(fail, coll, dt, op, count, es, root, ins, recvs, scalars, true, nil)
	b.checkUntouched(m, es, fail)

	// Every FIFO in use wrapped its slots at least 3 times. NVLS: every multicast object did, and
	// no connection was used.
	if m.ca.algo == costmodel.NVLS {
		for _, c := range comms {
			assert.Empty(t, c.eps, "rank %d: NVLS mapped connections", c.rank)
			if m.size != sizeWrap {
				continue
			}
			for ch, g := range c.nvls {
				if g != nil {
					assert.GreaterOrEqual(t, g.Step, uint64(3*NCCLSteps), "rank %d channel %d: multicast object carried %d steps", c.rank, ch, g.Step)
				}
			}
		}
	} else if m.ca.algo == costmodel.NVLSTree {
		checkNVLSTreeConns(t, comms, m.size == sizeWrap)
	} else if m.ca.algo == costmodel.CollNetDirect || m.ca.algo == costmodel.CollNetChain {
		checkCollNetWrap(t, comms, m.ca.algo, m.size == sizeWrap)
	}
	if m.ca.algo != costmodel.NVLS && m.ca.algo != costmodel.CollNetDirect && m.size == sizeWrap && n > 1 && (m.ca.algo != costmodel.CollNetChain || comms[0].topo.rpn > 1) {
		used := 0
		for _, c := range comms {
			for k, e := range c.eps {
				if k.from != c.rank || e.Step == 0 {
					continue
				}
				used++
				assert.GreaterOrEqual(t, e.Step, uint64(3*NCCLSteps), "connection %v carried %d steps", k, e.Step)
			}
		}
		assert.Positive(t, used)
	}
}

// TestCoreProduct runs the full product of the structural axes (collective x algorithm, protocol,
// n = 1..9, ranks per node 1, 2 and n, in place or not) at the wrapping size, cycling through the
// dtype/op list, the channel counts and the alignments. -short keeps n in {2, 3, 9}.
func TestCoreProduct(t *testing.T) {
	dos := dtOps(false)
	ns := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if testing.Short() {
		ns = []int{2, 5}
	}
	k := 0
	start := time.Now()
	for _, ca := range collAlgos {
		for _, proto := range protos {
			for _, n := range ns {
				for _, rpn := range []int{1, 2, 0} {
					for _, inPlace := range []bool{false, true} {
						m := matrixCase{ca: ca, proto: proto, do: dos[k%len(dos)], n: n, rpn: rpn, size: sizeWrap,
							inPlace: inPlace, channels: 1 + k%3, misalign: k % 2, rootSel: k % 3}
						k++
						t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
					}
				}
			}
		}
	}
	t.Logf("%d cases in %v", k, time.Since(start))
}

// TestDecisive checks the cases that tell NCCL's operator semantics apart, on every algorithm and
// protocol: float16 avg pre-multiplies (60000 and 60000 average to 60000, where summing first
// would overflow to infinity), int32 avg truncates toward zero once (-3 and 0 give -1), int8 sums
// wrap.
func TestDecisive(t *testing.T) {
	f16 := func(v float64) []byte { b := make([]byte, 2); kernels.SetValue(kernels.Float16, b, v); return b }
	i32 := func(v int32) []byte { b := make([]byte, 4); binary.LittleEndian.PutUint32(b, uint32(v)); return b }
	cases := []struct {
		name string
		dt   kernels.Dtype
		op   kernels.Op
		in   [][]byte // per rank, one element
		want []byte
	}{
		{"float16 avg 60000,60000", kernels.Float16, kernels.Avg, [][]byte{f16(60000), f16(60000)}, f16(60000)},
		{"int32 avg -3,0", kernels.Int32, kernels.Avg, [][]byte{i32(-3), i32(0)}, i32(-1)},
		{"int32 avg -7,0,0", kernels.Int32, kernels.Avg, [][]byte{i32(-7), i32(0), i32(0)}, i32(-2)},
		{"int8 sum 100,100", kernels.Int8, kernels.Sum, [][]byte{{100}, {100}}, []byte{0xc8}},
		{"int8 sum 127,1,1", kernels.Int8, kernels.Sum, [][]byte{{127}, {1}, {1}}, []byte{0x81}},
		{"uint8 sum 200,100", kernels.Uint8, kernels.Sum, [][]byte{{200}, {100}}, []byte{44}},
	}
	for _, tc := range cases {
		for _, algo := range []costmodel.Algo{costmodel.Ring, costmodel.Tree} {
			for _, proto := range protos {
				t.Run(fmt.Sprintf("%s/%v/%v", tc.name, algo, proto), func(t *testing.T) {
					n := len(tc.in)
					comms, err := NewInProcess(n, Config{Buffers: tinyBuffers(), Override: Pin(algo, proto)})
					require.NoError(t, err)
					defer closeAll(comms)
					const count = 301 // the element repeated, across several steps
					es := tc.dt.Size()
					outs := make([][]byte, n)
					errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
						send := bytes.Repeat(tc.in[r], count)
						outs[r] = make([]byte, count*es)
						return c.AllReduce(bg, send, outs[r], count, tc.dt, tc.op)
					})
					for r := range comms {
						require.NoError(t, errs[r])
						require.Equal(t, bytes.Repeat(tc.want, count), outs[r], "rank %d", r)
					}
				})
			}
		}
	}
}

// TestDtypeProduct runs every dtype/op pair on every collective x algorithm and protocol at the
// wrapping size, on 3 ranks in nodes of 2 (an uneven last node) and 8 ranks in one node. -short
// keeps the 3-rank half.
func TestDtypeProduct(t *testing.T) {
	shapes := []struct{ n, rpn int }{{3, 2}, {8, 0}}
	if testing.Short() {
		shapes = shapes[:1]
	}
	k := 0
	for _, sh := range shapes {
		for _, ca := range collAlgos {
			for _, proto := range protos {
				for _, do := range dtOps(false) {
					m := matrixCase{ca: ca, proto: proto, do: do, n: sh.n, rpn: sh.rpn, size: sizeWrap,
						inPlace: k%2 == 1, channels: 1 + k%3, misalign: k / 2 % 2, rootSel: k % 3}
					k++
					t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
				}
			}
		}
	}
}
