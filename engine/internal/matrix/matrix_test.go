package matrix

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// TestPairwiseCovers checks the covering property the matrix relies on.
func TestPairwiseCovers(t *testing.T) {
	axes := []int{6, 3, 37, 9, 4, 4, 2, 3, 2, 3}
	rows := Pairwise(axes, 42)
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

// TestSpaceNodes: with Nodes, a case's n is its node count times its ranks per node, and every
// (nodes, ranks per node) pair appears with every protocol and every collective x algorithm.
func TestSpaceNodes(t *testing.T) {
	s := Space{CollAlgos: CollAlgos, Protos: Protos, DtOps: DtOps(true), Ns: []int{2, 3}, RPNs: []int{1, 2}, Nodes: true, Seed: 5}
	seen := map[[4]int]bool{}
	for _, m := range s.Cases() {
		require.Contains(t, []int{1, 2}, m.RPN)
		require.Contains(t, []int{2, 3}, m.N/m.RPN, "%v", m)
		require.Zero(t, m.N%m.RPN, "%v", m)
		seen[[4]int{m.N, m.RPN, int(m.Proto), -1}] = true
		seen[[4]int{m.N, m.RPN, int(m.CA.Coll), int(m.CA.Algo)}] = true
	}
	for _, sh := range [][2]int{{2, 1}, {4, 2}, {3, 1}, {6, 2}} {
		for _, p := range Protos {
			assert.True(t, seen[[4]int{sh[0], sh[1], int(p), -1}], "n %d rpn %d %v", sh[0], sh[1], p)
		}
		for _, ca := range CollAlgos {
			assert.True(t, seen[[4]int{sh[0], sh[1], int(ca.Coll), int(ca.Algo)}], "n %d rpn %d %v", sh[0], sh[1], ca)
		}
	}
}

// TestOracle: verdicts worked out by hand.
func TestOracle(t *testing.T) {
	f16 := func(v float64) []byte { b := make([]byte, 2); kernels.SetValue(kernels.Float16, b, v); return b }
	i32 := func(v int32) []byte { b := make([]byte, 4); binary.LittleEndian.PutUint32(b, uint32(v)); return b }
	for _, tc := range []struct {
		name    string
		dt      kernels.Dtype
		op      kernels.Op
		ins     [][]byte
		scalars [][]byte
		good    []byte
		bad     []byte
	}{
		{"int8 sum wraps", kernels.Int8, kernels.Sum, [][]byte{{100}, {100}}, nil, []byte{0xc8}, []byte{0x7f}},
		{"uint8 max", kernels.Uint8, kernels.Max, [][]byte{{200}, {100}}, nil, []byte{200}, []byte{100}},
		{"int8 min signed", kernels.Int8, kernels.Min, [][]byte{{0xff}, {1}}, nil, []byte{0xff}, []byte{1}},
		{"int32 avg truncates", kernels.Int32, kernels.Avg, [][]byte{i32(-3), i32(0)}, nil, i32(-1), i32(-2)},
		{"int32 premulsum", kernels.Int32, kernels.PreMulSum, [][]byte{i32(5), i32(7)}, [][]byte{i32(2), i32(-1)}, i32(3), i32(12)},
		{"float16 avg", kernels.Float16, kernels.Avg, [][]byte{f16(60000), f16(60000)}, nil, f16(60000), f16(59000)},
		{"float16 prod", kernels.Float16, kernels.Prod, [][]byte{f16(1.5), f16(-0.75)}, nil, f16(-1.125), f16(1.125)},
		{"float16 premulsum", kernels.Float16, kernels.PreMulSum, [][]byte{f16(1), f16(2)}, [][]byte{f16(0.5), f16(1.5)}, f16(3.5), f16(3)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.NoError(t, CheckElem(tc.dt, tc.op, tc.good, tc.ins, 0, tc.scalars))
			assert.Error(t, CheckElem(tc.dt, tc.op, tc.bad, tc.ins, 0, tc.scalars))
		})
	}
}

// TestPlace: in place, AllGather's send is the rank's block of its receive buffer and
// ReduceScatter's receive is the rank's block of its send; CheckRankUntouched finds a guard byte
// written; ranks that are not local get inputs only.
func TestPlace(t *testing.T) {
	m := Case{CA: CollAlgo{costmodel.AllGather, costmodel.Ring}, Do: DtOp{kernels.Int32, kernels.Sum}, N: 3, InPlace: true, Misalign: 1}
	in := func(r, n int) []byte { return Input(kernels.Int32, kernels.Sum, Seed, r, n) }
	b := Place(m, 5, in, func(r int) bool { return r != 2 })
	require.Nil(t, b.Recvs[2])
	require.Len(t, b.Ins[2], 4*5)
	assert.Equal(t, &b.Recvs[1][4*5], &b.Sends[1][0])
	var fails []string
	fail := func(f string, a ...any) { fails = append(fails, f) }
	b.CheckRankUntouched(m, 1, fail)
	assert.Empty(t, fails)
	b.Recvs[1][3*4*5] ^= 1 // the first guard byte
	b.CheckRankUntouched(m, 1, fail)
	assert.Len(t, fails, 1)

	m.CA.Coll = costmodel.ReduceScatter
	b = Place(m, 5, in, nil)
	assert.Equal(t, &b.Sends[2][2*4*5], &b.Recvs[2][0])
	assert.Equal(t, 1+2*4*5, b.OutOff[2])
}
