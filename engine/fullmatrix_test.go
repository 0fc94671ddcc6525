package engine

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// TestFullMatrix runs the full cartesian product that issues 3 and 13 ask for:
//
//	collective x algorithm   ring for all five, tree for AllReduce; and, with Simple, NVLS
//	                         (AllReduce, AllGather, ReduceScatter), NVLS_TREE (AllReduce),
//	                         CollNetDirect (AllReduce), CollNetChain (AllReduce), PAT (AllGather,
//	                         ReduceScatter): each wherever fullLegal says NCCL runs it, and
//	                         ErrInvalid on every rank where it does not (fullInvalidCases)
//	protocol                 LL, LL128, Simple (the new paths' LL and LL128 pins: ErrInvalid)
//	dtype x op               every dtype with every op (sum, prod, max, min, avg, premulsum) for
//	                         the reducing collectives; every dtype for AllGather and Broadcast
//	                         (which take no op); a pair a path does not admit: ErrInvalid
//	n                        1..9
//	ranks per node           1, 2, n, and (Simple) 3 for n >= 4 (deduplicated: n = 1 has only 1,
//	                         n = 2 only 1 and 2, n = 3 only 1, 2 and 3)
//	size                     0, 1 element, and the wrapping size (not a multiple of a line, slot
//	                         or chunk; every connection, multicast object, CollNetDirect region
//	                         and endpoint connection in use wraps its 8 slots at least 3 times)
//	in place                 no, yes
//
// with the oracle and checks of TestMatrix. The channel count (1, 2, 3), the buffer alignment and
// the root (0, n-1, n/2) cycle through the cases. The communicators of one (n, ranks per node,
// protocol) group are made once and reused for all of its cases (SetOverride pins each case's
// algorithm, protocol and channel count), and the groups run in parallel, at most GOMAXPROCS at a
// time. The Simple groups' communicators reach the test binary's CollNet endpoint.
//
// It is opt-in: COLLPLAN_FULL_MATRIX=1 go test -count=1 -run '^TestFullMatrix$' -timeout 30m ./engine/
// (CI and go test ./... run the pairwise rows: TestMatrix, TestMatrixPAT, TestNVLSMatrix,
// TestNVLSTreeMatrix, TestCollNetMatrix).
func TestFullMatrix(t *testing.T) {
	if os.Getenv("COLLPLAN_FULL_MATRIX") != "1" {
		t.Skip("opt-in: COLLPLAN_FULL_MATRIX=1 runs the full product; the pairwise rows (TestMatrix and the per-path matrices) run without it")
	}
	var total, groups atomic.Int64
	start := time.Now()
	t.Cleanup(func() {
		t.Logf("%d cases in %d groups in %v (GOMAXPROCS %d)", total.Load(), groups.Load(), time.Since(start), runtime.GOMAXPROCS(0))
	})
	for n := 1; n <= 9; n++ {
		for _, proto := range protos {
			for _, rpn := range fullRPNs(n, proto) {
				cases := fullGroupCases(n, rpn, proto)
				groups.Add(1)
				total.Add(int64(len(cases)))
				rpnName := fmt.Sprint(rpn)
				if rpn == 0 {
					rpnName = "n"
				}
				addr := ""
				if proto == costmodel.Simple {
					addr = testCollNetAddr(t)
				}
				t.Run(fmt.Sprintf("n%d-rpn%s-%v", n, rpnName, proto), func(t *testing.T) {
					t.Parallel()
					runFullGroup(t, n, rpn, addr, cases)
				})
			}
		}
	}
}

// fullRPNs returns the distinct ranks-per-node values {1, 2, n} for n ranks, 0 standing for n (one
// node), as matrixCase does, and 3 for n >= 4 in the Simple groups (NVLS_TREE and CollNet's
// nodes of 3; the new paths run Simple only).
func fullRPNs(n int, proto costmodel.Proto) []int {
	switch n {
	case 1:
		return []int{0}
	case 2:
		return []int{1, 0}
	case 3:
		return []int{1, 2, 0}
	}
	if proto == costmodel.Simple {
		return []int{1, 2, 3, 0}
	}
	return []int{1, 2, 0}
}

// fullNewPaths are the (collective, algorithm) rows besides Ring and Tree that the engine runs:
// every row of NCCL's menu (reference §"legality lists": AllReduce: Tree, Ring, CollNetDirect,
// CollNetChain, NVLS, NVLSTree; AllGather, ReduceScatter: Ring, CollNetDirect, NVLS, PAT).
var fullNewPaths = []collAlgo{
	{costmodel.AllReduce, costmodel.NVLS}, {costmodel.AllGather, costmodel.NVLS}, {costmodel.ReduceScatter, costmodel.NVLS},
	{costmodel.AllReduce, costmodel.NVLSTree},
	{costmodel.AllReduce, costmodel.CollNetDirect}, {costmodel.AllReduce, costmodel.CollNetChain},
	{costmodel.AllGather, costmodel.CollNetDirect}, {costmodel.ReduceScatter, costmodel.CollNetDirect},
	{costmodel.AllGather, costmodel.PAT}, {costmodel.ReduceScatter, costmodel.PAT},
}

// fullNewAlgos are the new paths' algorithms; fullInvalidCases pins each to every collective.
var fullNewAlgos = []costmodel.Algo{costmodel.NVLS, costmodel.NVLSTree, costmodel.CollNetDirect, costmodel.CollNetChain, costmodel.PAT}

// fullLegal says, independently of the engine's code, whether NCCL runs (coll, algo) pinned with
// Simple on n ranks in virtual nodes of rpn (rpn = n: one node) for dtype dt and op, from the
// reference's rules (§9's nvlsSupport and collNetSupport, the cost table's row rules, and the
// shapes each path is built for):
//   - NVLS: AllReduce, AllGather, ReduceScatter in one node of 2 or more ranks; AllGather takes any
//     dtype, the others the switch's pairs (sum of int32, uint32, int64, uint64, float16,
//     bfloat16, float32, float64; min and max of those but float32 and float64);
//   - NVLS_TREE: AllReduce on 2 or more nodes of the same size, 2 or more ranks each, NVLS's pairs;
//   - CollNetDirect: AllReduce, AllGather and ReduceScatter (rule 10: the endpoint has iallgather
//     and ireducescatter, every local rank is a head) on 2 or more nodes of the same size, at most
//     8 ranks each; CollNetChain: AllReduce on 2 or more nodes; AllReduce and ReduceScatter take
//     the endpoint's pairs (sum, min and max of the eight dtypes above; avg and PreMulSum travel
//     as sum; no prod, no 8-bit dtype), AllGather any dtype (collNetSupport skips the matrix);
//   - PAT: AllGather and ReduceScatter at one rank per node; ReduceScatter refuses avg and
//     PreMulSum (NCCL's PAT runs neither PreMulSum nor SumPostDiv).
func fullLegal(ca collAlgo, n, rpn int, dt kernels.Dtype, op kernels.Op) bool {
	if rpn == 0 || rpn > n {
		rpn = n
	}
	wide := dt == kernels.Int32 || dt == kernels.Uint32 || dt == kernels.Int64 || dt == kernels.Uint64 ||
		dt == kernels.Float16 || dt == kernels.Bfloat16 || dt == kernels.Float32 || dt == kernels.Float64
	isFloat32or64 := dt == kernels.Float32 || dt == kernels.Float64
	switchPair := wide && (op == kernels.Sum || (op == kernels.Min || op == kernels.Max) && !isFloat32or64)
	nodes := (n + rpn - 1) / rpn
	endpointPair := wide && (op == kernels.Sum || op == kernels.Min || op == kernels.Max || op == kernels.Avg || op == kernels.PreMulSum)
	coll := ca.coll
	switch ca.algo {
	case costmodel.NVLS:
		inMenu := coll == costmodel.AllReduce || coll == costmodel.AllGather || coll == costmodel.ReduceScatter
		return inMenu && n >= 2 && rpn == n && (coll == costmodel.AllGather || switchPair)
	case costmodel.NVLSTree:
		return coll == costmodel.AllReduce && rpn >= 2 && n%rpn == 0 && nodes >= 2 && switchPair
	case costmodel.CollNetDirect:
		inMenu := coll == costmodel.AllReduce || coll == costmodel.AllGather || coll == costmodel.ReduceScatter
		return inMenu && nodes >= 2 && n%rpn == 0 && rpn <= 8 && (coll == costmodel.AllGather || endpointPair)
	case costmodel.CollNetChain:
		return coll == costmodel.AllReduce && nodes >= 2 && endpointPair
	case costmodel.PAT:
		switch coll {
		case costmodel.AllGather:
			return rpn == 1
		case costmodel.ReduceScatter:
			return rpn == 1 && op != kernels.Avg && op != kernels.PreMulSum
		}
		return false
	}
	return false
}

// fullInvalidCases are a group's refused rows: with Simple, every (dtype, op) of a new path that
// fullLegal refuses at the group's shape, and every collective a new algorithm does not run (float32
// sum); with LL and LL128, every new path (float32 sum). Each runs once, one element out of place.
func fullInvalidCases(n, rpn int, proto costmodel.Proto) []matrixCase {
	var out []matrixCase
	add := func(ca collAlgo, do dtOp) {
		out = append(out, matrixCase{ca: ca, proto: proto, do: do, n: n, rpn: rpn, size: sizeOne, channels: 1, invalid: true})
	}
	f32sum := dtOp{kernels.Float32, kernels.Sum}
	if proto != costmodel.Simple {
		for _, ca := range fullNewPaths {
			add(ca, f32sum)
		}
		return out
	}
	for _, ca := range fullNewPaths {
		for _, do := range fullDtOps(ca.coll) {
			if !fullLegal(ca, n, rpn, do.dt, do.op) {
				add(ca, do)
			}
		}
	}
	for _, a := range fullNewAlgos {
		for coll := costmodel.Coll(0); coll < costmodel.NumColls; coll++ {
			ca := collAlgo{coll, a}
			if !slices.Contains(fullNewPaths, ca) {
				add(ca, f32sum)
			}
		}
	}
	return out
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
	cas := collAlgos
	if proto == costmodel.Simple {
		cas = append(slices.Clone(collAlgos), fullNewPaths...)
	}
	for _, ca := range cas {
		for _, do := range fullDtOps(ca.coll) {
			if ca.algo != costmodel.Ring && ca.algo != costmodel.Tree && !fullLegal(ca, n, rpn, do.dt, do.op) {
				continue // in fullInvalidCases
			}
			for _, size := range []int{sizeZero, sizeOne, sizeWrap} {
				for _, inPlace := range []bool{false, true} {
					out = append(out, matrixCase{ca: ca, proto: proto, do: do, n: n, rpn: rpn, size: size,
						inPlace: inPlace, channels: 1 + k%3, misalign: k / 3 % 2, rootSel: k / 2 % 3})
					k++
				}
			}
		}
	}
	return append(out, fullInvalidCases(n, rpn, proto)...)
}

// runFullGroup runs a group's cases one after another on one set of communicators, made again only
// after a case leaves them unusable (a failed call aborts the communicator).
func runFullGroup(t *testing.T, n, rpn int, collNetAddr string, cases []matrixCase) {
	var comms []*Comm
	inputs, expects := fullInputs{}, fullExpects{}
	defer func() { closeAll(comms) }()
	for _, m := range cases {
		if comms == nil {
			cfg := Config{Buffers: tinyBuffers(), RanksPerNode: rpn}
			cfg.CollNet.Addr = collNetAddr
			var err error
			comms, err = NewInProcess(n, cfg)
			require.NoError(t, err)
		}
		ok := t.Run(m.String(), func(t *testing.T) {
			if m.invalid {
				runFullInvalid(t, comms, m)
				return
			}
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
	count := caseCount(m, comms[0])
	root := m.root()
	reduces := coll == costmodel.AllReduce || coll == costmodel.ReduceScatter || coll == costmodel.Reduce

	b := placeBuffers(m, count, func(r, inCount int) []byte { return inputs.get(dt, op, n, r, inCount) })
	ins, sends, recvs := b.Ins, b.Sends, b.Recvs
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
	// Steps carried so far by each connection, multicast object, CollNetDirect region and endpoint
	// connection, to count this call's.
	before := make([]map[stepKey]uint64, n)
	for r, c := range comms {
		before[r] = stepCounts(c)
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
	b.CheckUntouched(m.shared(), fail)

	checkFullSteps(m, comms, before, fail)
	return true
}

// stepKey names a step counter of a rank: a connection's (kind "conn", its epKey), a channel's
// multicast object ("nvls") or CollNetDirect region ("region"), an endpoint connection ("link",
// channel and share).
type stepKey struct {
	kind string
	conn epKey
	a, b int
}

// stepCounts returns the steps each of c's connections (those it sends on), multicast objects,
// CollNetDirect regions and endpoint connections has carried so far.
func stepCounts(c *Comm) map[stepKey]uint64 {
	out := make(map[stepKey]uint64)
	for k, e := range c.eps {
		if k.from == c.rank {
			out[stepKey{kind: "conn", conn: k}] = e.Step
		}
	}
	for ch, g := range c.nvls {
		if g != nil {
			out[stepKey{kind: "nvls", a: ch}] = g.Step
		}
	}
	for ch, g := range c.cnGroups {
		if g != nil {
			out[stepKey{kind: "region", a: ch}] = g.Step
		}
	}
	for k, l := range c.cnLinks {
		out[stepKey{kind: "link", a: k[0], b: k[1]}] = l.Sent()
	}
	return out
}

// checkFullSteps checks what one call moved, from the step counters before it: NVLS and
// CollNetDirect moved nothing point to point; NVLS_TREE's connections are between ranks of the same
// local index in different nodes; and at the wrapping size (n > 1) the path's own kind of counter
// moved (connections for Ring, Tree, PAT; the multicast object for NVLS and NVLS_TREE; regions and
// endpoint connections for CollNetDirect; endpoint connections for CollNetChain) and every counter
// that moved carried at least 3 times NCCL_STEPS steps.
func checkFullSteps(m matrixCase, comms []*Comm, before []map[stepKey]uint64, fail func(format string, a ...any)) {
	moved := map[string]int{}
	for r, c := range comms {
		rpn := c.topo.rpn
		for k, now := range stepCounts(c) {
			d := now - before[r][k]
			if d == 0 {
				continue
			}
			moved[k.kind]++
			if k.kind == "conn" {
				switch m.ca.algo {
				case costmodel.NVLS, costmodel.CollNetDirect:
					fail("rank %d: %v moved %d steps point to point (connection %v)", r, m.ca.algo, d, k.conn)
				case costmodel.NVLSTree:
					if k.conn.from%rpn != k.conn.to%rpn || k.conn.from/rpn == k.conn.to/rpn {
						fail("rank %d: NVLS_TREE used connection %v (not between heads of one local index)", r, k.conn)
					}
				}
			}
			if m.size == sizeWrap && d < 3*NCCLSteps {
				fail("rank %d: %s %v carried %d steps in this call, want >= %d", r, k.kind, k, d, 3*NCCLSteps)
			}
		}
	}
	if m.size != sizeWrap || m.n == 1 {
		return
	}
	var want []string
	switch m.ca.algo {
	case costmodel.NVLS, costmodel.NVLSTree:
		want = []string{"nvls"}
	case costmodel.CollNetDirect:
		want = []string{"region", "link"}
	case costmodel.CollNetChain:
		want = []string{"link"}
	default:
		want = []string{"conn"}
	}
	for _, k := range want {
		if moved[k] == 0 {
			fail("%v: no %s carried a step", m.ca.algo, k)
		}
	}
}

// runFullInvalid runs a refused row on the group's communicators: every rank returns ErrInvalid,
// the same error, the one PinError names (a launcher's check before the ranks start); the
// communicators stay usable (the next case runs on them).
func runFullInvalid(t *testing.T, comms []*Comm, m matrixCase) {
	ov := Pin(m.ca.algo, m.proto)
	ov.Channels = m.channels
	for _, c := range comms {
		c.SetOverride(ov)
	}
	n, dt, op, coll := m.n, m.do.dt, m.do.op, m.ca.coll
	const count = 1
	es := dt.Size()
	ops := make([]kernels.Op, n)
	premul := op == kernels.PreMulSum && (coll == costmodel.AllReduce || coll == costmodel.ReduceScatter || coll == costmodel.Reduce)
	for r, c := range comms {
		ops[r] = op
		if premul {
			var err error
			ops[r], err = c.RedOpCreatePreMulSum(premulScalar(dt, r), dt)
			require.NoError(t, err)
		}
	}
	errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
		send, recv := make([]byte, n*count*es), make([]byte, n*count*es)
		switch coll {
		case costmodel.AllReduce:
			return c.AllReduce(bg, send[:es], recv[:es], count, dt, ops[r])
		case costmodel.AllGather:
			return c.AllGather(bg, send[:es], recv, count, dt)
		case costmodel.ReduceScatter:
			return c.ReduceScatter(bg, send, recv[:es], count, dt, ops[r])
		case costmodel.Broadcast:
			return c.Broadcast(bg, send[:es], recv[:es], count, dt, 0)
		default:
			return c.Reduce(bg, send[:es], recv[:es], count, dt, ops[r], 0)
		}
	})
	pinErr := PinError(coll, m.ca.algo, m.proto, n, m.rpn, dt, op)
	require.ErrorIs(t, pinErr, ErrInvalid, "PinError")
	for r, err := range errs {
		require.ErrorIs(t, err, ErrInvalid, "rank %d", r)
		assert.Equal(t, errs[0].Error(), err.Error(), "rank %d: not rank 0's error", r)
		assert.Contains(t, err.Error(), pinErr.Error(), "rank %d: not PinError's reason", r)
	}
	if premul {
		for r, c := range comms {
			require.NoError(t, c.RedOpDestroy(ops[r]))
		}
	}
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

// TestPinLegalAgrees is a brute-force comparison over a grid: for every new algorithm, collective,
// protocol, n = 1..18 (CollNetDirect at 8 and 9 ranks per node), ranks per node 1..n and every (dtype, op), the engine's PinError is nil
// exactly where fullLegal (the test's own statement of NCCL's rules) says NCCL runs it with Simple,
// and ErrInvalid elsewhere. So the full matrix's split into run and refused rows is the engine's
// too, not only at the shapes it runs.
func TestPinLegalAgrees(t *testing.T) {
	ops := []kernels.Op{kernels.Sum, kernels.Prod, kernels.Max, kernels.Min, kernels.Avg, kernels.PreMulSum}
	checked, legal := 0, 0
	for _, a := range fullNewAlgos {
		for coll := costmodel.Coll(0); coll < costmodel.NumColls; coll++ {
			for _, proto := range protos {
				for n := 1; n <= 18; n++ {
					for rpn := 1; rpn <= n; rpn++ {
						for dt := kernels.Dtype(0); dt < kernels.NumDtypes; dt++ {
							for _, op := range ops {
								want := proto == costmodel.Simple && fullLegal(collAlgo{coll, a}, n, rpn, dt, op)
								err := PinError(coll, a, proto, n, rpn, dt, op)
								checked++
								if want {
									legal++
									if err != nil {
										t.Fatalf("%v %v %v n=%d rpn=%d %v %v: engine refuses (%v), NCCL runs it", coll, a, proto, n, rpn, dt, op, err)
									}
									continue
								}
								if !errors.Is(err, ErrInvalid) {
									t.Fatalf("%v %v %v n=%d rpn=%d %v %v: got %v, want ErrInvalid", coll, a, proto, n, rpn, dt, op, err)
								}
							}
						}
					}
				}
			}
		}
	}
	t.Logf("%d pins compared, %d legal", checked, legal)
}
