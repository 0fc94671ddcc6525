package planner

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
)

// oracle is the brute-force argmin, written here apart from the planner's: price all 21 cells with
// the menu, apply the interval's edits, scan algorithms then protocols keeping t >= 0 && t < best.
func oracle(m *Menu, ivs []Interval, n int64) (Cell, bool) {
	var t [costmodel.NumAlgos][costmodel.NumProtos]float64
	for a := range t {
		for p := range t[a] {
			t[a][p] = float64(m.Time(costmodel.Algo(a), costmodel.Proto(p), n))
		}
	}
	for _, iv := range ivs {
		if n < iv.Lo || n >= iv.Hi {
			continue
		}
		for _, e := range iv.Edits {
			v := &t[e.Cell.Algo][e.Cell.Proto]
			switch {
			case e.Kind == Disable:
				*v = -1
			case *v < 0:
			case e.Kind == Force:
				*v = 0
			case e.Kind == AddCost:
				*v = float64(float32(math.Max(0, *v+e.Value)))
			case e.Kind == ScaleCost:
				*v = float64(float32(*v * e.Value))
			}
		}
	}
	best, ok, cell := math.MaxFloat32, false, Cell{}
	for a := range t {
		for p := range t[a] {
			if t[a][p] >= 0 && t[a][p] < best {
				best, ok, cell = t[a][p], true, Cell{costmodel.Algo(a), costmodel.Proto(p)}
			}
		}
	}
	return cell, ok
}

type oracleCase struct {
	name  string
	topo  func(t testing.TB) *capabilities.Topology
	cls   Class
	tuner *fixedTuner
}

func oracleCases() []oracleCase {
	file := func(name string) func(t testing.TB) *capabilities.Topology {
		return func(t testing.TB) *capabilities.Topology { return topo(t, name) }
	}
	ar, ag := class(costmodel.AllReduce), class(costmodel.AllGather)
	pipe := ar
	pipe.PipeOps = 5
	soft := &fixedTuner{ivs: []Interval{
		{Lo: 1000, Hi: 300000, Edits: []Edit{{Kind: AddCost, Cell: Cell{costmodel.Tree, costmodel.LL}, Value: -8}}},
		{Lo: 1 << 22, Hi: 1<<22 + 12345, Edits: []Edit{{Kind: Force, Cell: Cell{costmodel.Ring, costmodel.Simple}}, {Kind: Channels, Value: 3}}},
		{Lo: 1 << 26, Hi: 1 << 33, Edits: []Edit{{Kind: ScaleCost, Cell: Cell{costmodel.Tree, costmodel.Simple}, Value: 0.8}, {Kind: Chunk, Value: 70000}}},
	}}
	return []oracleCase{
		{"s1 allreduce", file("s1"), ar, nil},
		{"s1 allgather", file("s1"), ag, nil},
		{"s1 broadcast", file("s1"), class(costmodel.Broadcast), nil},
		{"s2 allreduce", file("s2"), ar, nil},
		{"s2 allreduce pipe 5", file("s2"), pipe, nil},
		{"s2 allgather", file("s2"), ag, nil},
		{"s2 reducescatter", file("s2"), class(costmodel.ReduceScatter), nil},
		{"s3 allreduce", file("s3"), ar, nil},
		{"s2 allreduce tuned", file("s2"), ar, soft},
	}
}

// TestDecisionTableOracle compares Lookup with the brute-force argmin (and the full decision with
// Explain) at every boundary, with no exception for float32 ties,, boundary +-1, every bucket edge and its neighbours, and 10^5
// log-uniform random sizes up to 2^40.
func TestDecisionTableOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range oracleCases() {
		t.Run(tc.name, func(t *testing.T) {
			var tu Tuner
			var ivs []Interval
			if tc.tuner != nil {
				tu, ivs = tc.tuner, tc.tuner.ivs
			}
			pl := newPlanner(t, tc.topo(t), tu)
			pr, err := pl.Prepare(context.Background(), tc.cls)
			require.NoError(t, err)
			dt, err := pr.Compile()
			require.NoError(t, err)
			require.NotEmpty(t, dt.Boundaries(), "a class with no crossover proves little")
			var sizes []int64
			for _, b := range dt.Boundaries() {
				sizes = append(sizes, b-1, b, b+1)
			}
			for i := 0; i <= correction.NumBuckets; i++ {
				e := correction.BucketStart(i)
				sizes = append(sizes, e-1, e, e+1)
			}
			sizes = append(sizes, 0, 1, 63, 1<<40)
			for i := 0; i < 100000; i++ {
				sizes = append(sizes, int64(math.Exp2(rng.Float64()*40)))
			}
			checked := 0
			for _, n := range sizes {
				if n < 0 {
					continue
				}
				want, ok := oracle(pr.Menu(), ivs, n)
				require.True(t, ok)
				got := dt.Lookup(n)
				require.Equal(t, want, Cell{got.Algo, got.Proto}, "size %d", n)
				if checked%97 == 0 || n < 1<<12 {
					p, err := pr.Explain(n)
					require.NoError(t, err)
					require.Equal(t, p.Decision, got, "size %d", n)
				}
				checked++
			}
			t.Logf("%d sizes checked", checked)
		})
	}
}

// TestDecisionTableBoundariesExact: at each boundary b the decision differs from b-1's, and
// entries are sorted and contiguous.
func TestDecisionTableBoundariesExact(t *testing.T) {
	pl := newPlanner(t, topo(t, "s2"), nil)
	dt, err := pl.Compile(context.Background(), class(costmodel.AllReduce))
	require.NoError(t, err)
	es := dt.Entries()
	require.NotEmpty(t, es)
	assert.Zero(t, es[0].Lo)
	assert.Equal(t, MaxBytes, es[len(es)-1].Hi)
	for i := 1; i < len(es); i++ {
		assert.Equal(t, es[i-1].Hi, es[i].Lo)
		assert.NotEqual(t, es[i-1].Decision, es[i].Decision)
		assert.NotEqual(t, dt.Lookup(es[i].Lo-1), dt.Lookup(es[i].Lo))
	}
	// S2's crossovers by hand: Tree/LL -> Tree/LL128 and -> NVLS_TREE happen between the §13 picks.
	assert.Equal(t, "TREE/LL", cellOf(dt.Lookup(65536)))
	assert.Equal(t, "TREE/LL128", cellOf(dt.Lookup(1<<20)))
	assert.Equal(t, "NVLS_TREE/SIMPLE", cellOf(dt.Lookup(2<<20)))
	assert.Equal(t, dt.Lookup(0), dt.Lookup(-5))
	assert.Equal(t, dt.Lookup(MaxBytes-1), dt.Lookup(math.MaxInt64))
}

func cellOf(d Decision) string { return d.Algo.String() + "/" + d.Proto.String() }

func TestLookupAllocs(t *testing.T) {
	pl := newPlanner(t, topo(t, "s2"), nil)
	dt, err := pl.Compile(context.Background(), class(costmodel.AllReduce))
	require.NoError(t, err)
	n := int64(12345)
	allocs := testing.AllocsPerRun(1000, func() {
		_ = dt.Lookup(n)
		n = n*7 + 1
		if n > 1<<40 {
			n = 12345
		}
	})
	assert.Zero(t, allocs)
}

func randomSizes() []int64 {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := make([]int64, 4096)
	for i := range sizes {
		sizes[i] = int64(math.Exp2(rng.Float64() * 40))
	}
	return sizes
}

// BenchmarkLookup times DecisionTable.Lookup on log-uniform random sizes up to 2^40, beside a plain
// binary search over the same entries (slices.BinarySearch), for the ratio.
func BenchmarkLookup(b *testing.B) {
	for _, tc := range []struct {
		name string
		coll costmodel.Coll
	}{{"s2", costmodel.AllReduce}, {"s1", costmodel.AllGather}, {"s3", costmodel.AllReduce}} {
		pl := newPlanner(b, topo(b, tc.name), nil)
		dt, err := pl.Compile(context.Background(), class(tc.coll))
		require.NoError(b, err)
		sizes := randomSizes()
		b.Run(tc.name+"-"+tc.coll.String()+"/table", func(b *testing.B) {
			b.ReportAllocs()
			var sink int
			for i := 0; i < b.N; i++ {
				sink += dt.Lookup(sizes[i&4095]).Channels
			}
			_ = sink
			b.ReportMetric(float64(len(dt.Entries())), "entries")
		})
		es := dt.Entries()
		starts := make([]int64, len(es))
		for i, e := range es {
			starts[i] = e.Lo
		}
		b.Run(tc.name+"-"+tc.coll.String()+"/binarysearch", func(b *testing.B) {
			b.ReportAllocs()
			var sink int
			for i := 0; i < b.N; i++ {
				j, found := slices.BinarySearch(starts, sizes[i&4095])
				if !found {
					j--
				}
				sink += es[j].Channels
			}
			_ = sink
		})
	}
}

func BenchmarkCompile(b *testing.B) {
	pl := newPlanner(b, topo(b, "s2"), nil)
	for i := 0; i < b.N; i++ {
		if _, err := pl.Compile(context.Background(), class(costmodel.AllReduce)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecide is the per-call alternative to a DecisionTable: price the 21 cells, take the
// argmin and size the plan (what NCCL does on every call), on the same random sizes.
func BenchmarkDecide(b *testing.B) {
	pl := newPlanner(b, topo(b, "s2"), nil)
	m, err := pl.Menu(class(costmodel.AllReduce))
	require.NoError(b, err)
	sizes := randomSizes()
	b.ReportAllocs()
	b.ResetTimer()
	var sink int
	for i := 0; i < b.N; i++ {
		d, _, _ := pl.decide(m, sizes[i&4095], nil)
		sink += d.Channels
	}
	_ = sink
}
