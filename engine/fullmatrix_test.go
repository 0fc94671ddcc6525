package engine

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// TestFullMatrix runs the full cartesian product that issue 3's acceptance asks for:
//
//	collective x algorithm   ring for all five, tree for AllReduce
//	protocol                 LL, LL128, Simple
//	dtype x op               every dtype with every op (sum, prod, max, min, avg, premulsum) for
//	                         the reducing collectives; every dtype for AllGather and Broadcast
//	                         (which take no op)
//	n                        1..9
//	ranks per node           1, 2, n (deduplicated: n = 1 has only 1, n = 2 only 1 and 2)
//	size                     0, 1 element, and the wrapping size (not a multiple of a line, slot
//	                         or chunk; every connection in use wraps its 8 slots at least 3 times)
//	in place                 no, yes
//
// with the oracle and checks of TestMatrix. The channel count (1, 2, 3), the buffer alignment and
// the root (0, n-1, n/2) cycle through the cases. The communicators of one (n, ranks per node,
// protocol) group are made once and reused for all of its cases (SetOverride pins each case's
// algorithm, protocol and channel count), and the groups run in parallel, at most GOMAXPROCS at a
// time. -short (the race detector's run) skips it: TestMatrix's pairwise set covers that run.
func TestFullMatrix(t *testing.T) {
	if testing.Short() {
		t.Skip("the full product runs without -short; -short runs TestMatrix's pairwise subset")
	}
	var total, groups atomic.Int64
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("%d cases in %d groups in %v (GOMAXPROCS %d)", total.Load(), groups.Load(), time.Since(start), runtime.GOMAXPROCS(0))
	})
	for n := 1; n <= 9; n++ {
		for _, rpn := range fullRPNs(n) {
			for _, proto := range protos {
				cases := fullGroupCases(n, rpn, proto)
				groups.Add(1)
				total.Add(int64(len(cases)))
				rpnName := fmt.Sprint(rpn)
				if rpn == 0 {
					rpnName = "n"
				}
				t.Run(fmt.Sprintf("n%d-rpn%s-%v", n, rpnName, proto), func(t *testing.T) {
					t.Parallel()
					runFullGroup(t, n, rpn, cases)
				})
			}
		}
	}
}

// fullRPNs returns the distinct ranks-per-node values {1, 2, n} for n ranks, 0 standing for n (one
// node), as matrixCase does.
func fullRPNs(n int) []int {
	switch n {
	case 1:
		return []int{0}
	case 2:
		return []int{1, 0}
	}
	return []int{1, 2, 0}
}

// fullDtOps returns every (dtype, op) pair of a collective: all pairs for the reducing ones, the
// dtypes alone (with sum, which is ignored) for AllGather and Broadcast.
func fullDtOps(coll costmodel.Coll) []dtOp {
	var out []dtOp
	for dt := kernels.Dtype(0); dt < kernels.NumDtypes; dt++ {
		if coll == costmodel.AllGather || coll == costmodel.Broadcast {
			out = append(out, dtOp{dt, kernels.Sum})
			continue
		}
		for _, op := range []kernels.Op{kernels.Sum, kernels.Prod, kernels.Max, kernels.Min, kernels.Avg, kernels.PreMulSum} {
			out = append(out, dtOp{dt, op})
		}
	}
	return out
}

// fullGroupCases returns every case of one (n, ranks per node, protocol) group.
func fullGroupCases(n, rpn int, proto costmodel.Proto) []matrixCase {
	var out []matrixCase
	k := 0
	for _, ca := range collAlgos {
		for _, do := range fullDtOps(ca.coll) {
			for _, size := range []int{sizeZero, sizeOne, sizeWrap} {
				for _, inPlace := range []bool{false, true} {
					out = append(out, matrixCase{ca: ca, proto: proto, do: do, n: n, rpn: rpn, size: size,
						inPlace: inPlace, channels: 1 + k%3, misalign: k / 3 % 2, rootSel: k / 2 % 3})
					k++
				}
			}
		}
	}
	return out
}

// runFullGroup runs a group's cases one after another on one set of communicators, made again only
// after a case leaves them unusable (a failed call aborts the communicator).
func runFullGroup(t *testing.T, n, rpn int, cases []matrixCase) {
	var comms []*Comm
	inputs, expects := fullInputs{}, fullExpects{}
	defer func() { closeAll(comms) }()
	for _, m := range cases {
		if comms == nil {
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: rpn}
			var err error
			comms, err = NewInProcess(n, cfg)
			require.NoError(t, err)
		}
		ok := t.Run(m.String(), func(t *testing.T) {
			if !runFullCase(t, comms, m, inputs, expects) {
				closeAll(comms)
				comms = nil
			}
		})
		if !ok && comms != nil {
			// A failed check can leave a communicator consistent, but start afresh anyway so
			// that one bug does not cascade into the cases after it.
			closeAll(comms)
			comms = nil
		}
	}
}

// runFullCase is runMatrixCase on communicators made by the caller (and reused across cases): the
// same inputs, buffers, oracle and checks. The wrap check counts the steps each connection carried
// in this call. It returns false when a call failed, leaving the communicators unusable.
func runFullCase(t *testing.T, comms []*Comm, m matrixCase, inputs fullInputs, expects fullExpects) bool {
	ov := Pin(m.ca.algo, m.proto)
	ov.Channels = m.channels
	for _, c := range comms {
		c.SetOverride(ov)
	}
	n, dt, op, coll := m.n, m.do.dt, m.do.op, m.ca.coll
	es := dt.Size()
	count := matrixCount(m, int(comms[0].slotPayload(m.proto)))
	root := m.root()
	reduces := coll == costmodel.AllReduce || coll == costmodel.ReduceScatter || coll == costmodel.Reduce

	b := placeBuffers(m, count, func(r, inCount int) []byte { return inputs.get(dt, op, n, r, inCount) })
	ins, sends, recvs := b.ins, b.sends, b.recvs
	scalars := make([][]byte, n)
	ops := make([]kernels.Op, n)
	for r := 0; r < n; r++ {
		ops[r] = op
		if reduces && op == kernels.PreMulSum {
			scalars[r] = premulScalar(dt, r)
			var err error
			ops[r], err = comms[r].RedOpCreatePreMulSum(scalars[r], dt)
			require.NoError(t, err)
		}
	}
	// Steps carried so far by each connection, to count this call's.
	stepsBefore := make([]map[epKey]uint64, n)
	for r, c := range comms {
		stepsBefore[r] = make(map[epKey]uint64, len(c.eps))
		for k, e := range c.eps {
			stepsBefore[r][k] = e.Step
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
	failed := false
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
			failed = true
		}
	}
	if failed {
		return false
	}
	if reduces && op == kernels.PreMulSum {
		for r, c := range comms {
			require.NoError(t, c.RedOpDestroy(ops[r]))
		}
	}

	fails := 0
	fail := func(format string, a ...any) {
		if fails < 5 {
			t.Errorf(format, a...)
		}
		fails++
	}
	// Rank 0's AllReduce result is checked element by element; every other rank's must be the same
	// bytes (a result equal to a correct one is correct).
	cache := expects.of(dt, op)
	checkResults(fail, coll, dt, op, count, es, root, ins, recvs, scalars, false,
		func(off int) elemWant { return cache.get(dt, op, ins, off, scalars) })
	b.checkUntouched(m, es, fail)

	if m.size == sizeWrap && n > 1 {
		used := 0
		for r, c := range comms {
			for k, e := range c.eps {
				if k.from != c.rank {
					continue
				}
				d := e.Step - stepsBefore[r][k]
				if d == 0 {
					continue
				}
				used++
				if d < 3*NCCLSteps {
					fail("connection %v carried %d steps in this call, want >= %d", k, d, 3*NCCLSteps)
				}
			}
		}
		if used == 0 {
			fail("no connection carried a step")
		}
	}
	return true
}

// fullInputs caches a group's inputs: fillInput writes element index i at position i, so the
// inputs of a count are a prefix of those of any larger count. Keyed by dtype and whether the op
// is Prod (the only op fillInput distinguishes); the seed is runMatrixCase's.
type fullInputs map[[2]int][][]byte

func (f fullInputs) get(dt kernels.Dtype, op kernels.Op, n, r, count int) []byte {
	const seed = 7
	es := dt.Size()
	key := [2]int{int(dt), 0}
	if op == kernels.Prod {
		key[1] = 1
	}
	ins := f[key]
	if ins == nil {
		ins = make([][]byte, n)
		f[key] = ins
	}
	if len(ins[r]) < count*es {
		ins[r] = make([]byte, count*es)
		fillInput(ins[r], dt, op, seed, r, 0, count)
	}
	return ins[r][: count*es : count*es]
}

// fullExpects caches the oracle's verdicts of a group: the inputs of a (dtype, op) are the same in
// every case of the group (fullInputs, prefixes of one another) and so are the PreMulSum scalars,
// so the expected element at an offset is too, whichever algorithm, protocol, channel count or
// placement the case runs. The verdicts are expectElem's, computed once per element instead of
// once per case (the oracle was 40 % of the full matrix's CPU time).
type fullExpects map[dtOp]*expectCache

type expectCache struct {
	ws    []elemWant
	known []bool
}

// of returns the cache of a (dtype, op).
func (f fullExpects) of(dt kernels.Dtype, op kernels.Op) *expectCache {
	k := dtOp{dt, op}
	c := f[k]
	if c == nil {
		c = &expectCache{}
		f[k] = c
	}
	return c
}

// get returns the verdict at byte offset off, computing it on first use.
func (c *expectCache) get(dt kernels.Dtype, op kernels.Op, ins [][]byte, off int, scalars [][]byte) elemWant {
	i := off / dt.Size()
	if i >= len(c.ws) {
		n := max(i+1, 2*len(c.ws))
		c.ws = append(c.ws, make([]elemWant, n-len(c.ws))...)
		c.known = append(c.known, make([]bool, n-len(c.known))...)
	}
	if !c.known[i] {
		c.ws[i], c.known[i] = expectElem(dt, op, ins, off, scalars), true
	}
	return c.ws[i]
}
