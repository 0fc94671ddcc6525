package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/matrix"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
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
//
// The cases, inputs, buffers and oracle are engine/internal/matrix's, shared with the across-hosts
// run of the same matrix (engine/transport/net/matrix_test.go). The engine's tests name them with
// the types below (matrixCase is matrix.Case with the engine's field names, for the engine's own rows:
// PAT, NVLS, NVLS_TREE, CollNet, the full matrix).

type collAlgo struct {
	coll costmodel.Coll
	algo costmodel.Algo
}

var collAlgos = func() []collAlgo {
	var out []collAlgo
	for _, ca := range matrix.CollAlgos {
		out = append(out, collAlgo{ca.Coll, ca.Algo})
	}
	return out
}()

type dtOp struct {
	dt kernels.Dtype
	op kernels.Op
}

func dtOps(short bool) []dtOp {
	var out []dtOp
	for _, d := range matrix.DtOps(short) {
		out = append(out, dtOp{d.Dt, d.Op})
	}
	return out
}

const (
	sizeZero  = matrix.SizeZero
	sizeOne   = matrix.SizeOne
	sizeSmall = matrix.SizeSmall
	sizeWrap  = matrix.SizeWrap
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

// shared is the case as the matrix package has it.
func (m matrixCase) shared() matrix.Case {
	return matrix.Case{CA: matrix.CollAlgo{Coll: m.ca.coll, Algo: m.ca.algo}, Proto: m.proto, Do: matrix.DtOp{Dt: m.do.dt, Op: m.do.op},
		N: m.n, RPN: m.rpn, Size: m.size, InPlace: m.inPlace, Channels: m.channels, Misalign: m.misalign, RootSel: m.rootSel, Invalid: m.invalid}
}

// caseOf is the matrix package's case with the engine's names.
func caseOf(c matrix.Case) matrixCase {
	return matrixCase{ca: collAlgo{c.CA.Coll, c.CA.Algo}, proto: c.Proto, do: dtOp{c.Do.Dt, c.Do.Op}, n: c.N, rpn: c.RPN, size: c.Size,
		inPlace: c.InPlace, channels: c.Channels, misalign: c.Misalign, rootSel: c.RootSel, invalid: c.Invalid}
}

func (m matrixCase) String() string { return m.shared().String() }

func (m matrixCase) root() int { return m.shared().Root() }

// pairwise returns rows (value indices per axis) such that every pair of values of every two axes
// appears in some row (matrix.Pairwise).
func pairwise(sizes []int, seed uint64) [][]int { return matrix.Pairwise(sizes, seed) }

// matrixSpace is the in-process matrix's axes: n = 1..9 (short: 1, 2, 3, 5, 8, 9), ranks per node
// 1, 2, 3 and n.
func matrixSpace(short bool) matrix.Space {
	ns := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}
	if short {
		ns = []int{1, 2, 3, 5, 8, 9}
	}
	return matrix.Space{CollAlgos: matrix.CollAlgos, Protos: matrix.Protos, DtOps: matrix.DtOps(short), Ns: ns, RPNs: []int{1, 2, 3, 0}, Seed: 42}
}

func matrixCases(short bool) []matrixCase {
	var cases []matrixCase
	for _, c := range matrixSpace(short).Cases() {
		cases = append(cases, caseOf(c))
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

func TestMatrix(t *testing.T) {
	cases := matrixCases(testing.Short())
	start := time.Now()
	for _, m := range cases {
		t.Run(m.String(), func(t *testing.T) { runMatrixCase(t, m) })
	}
	t.Logf("%d cases in %v", len(cases), time.Since(start))
}

// matrixCount is the element count of a size class (matrix.Count) on slots of cfgPayload bytes.
func matrixCount(m matrixCase, cfgPayload int) int { return matrix.Count(m.shared(), cfgPayload) }

// TestSlotPayload: the matrix package's slot payload, which the across-hosts matrix sizes its
// cases by, is the engine's, for the matrix's tiny buffers and for the defaults.
func TestSlotPayload(t *testing.T) {
	for _, b := range []planner.Buffers{tinyBuffers(), {}} {
		comms, err := NewInProcess(1, Config{Buffers: b})
		require.NoError(t, err)
		for _, p := range protos {
			assert.Equal(t, int(comms[0].slotPayload(p)), matrix.SlotPayload(comms[0].cfg.Buffers, p), "%v, buffers %+v", p, b)
		}
		closeAll(comms)
	}
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

// caseBuffers are one case's per-rank buffers (matrix.Placement).
type caseBuffers = matrix.Placement

// placeBuffers lays a case's buffers out as NCCL's in-place conventions say (matrix.Place).
func placeBuffers(m matrixCase, count int, input func(r, inCount int) []byte) *caseBuffers {
	return matrix.Place(m.shared(), count, input, nil)
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
	ins, sends, recvs := b.Ins, b.Sends, b.Recvs
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
	b.CheckUntouched(m.shared(), fail)

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
