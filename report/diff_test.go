package report

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/planner"
)

// explainAt is the oracle: the side's plan at one size, by Prepared.Explain (the per-size argmin,
// no decision table).
func explainAt(t *testing.T, sd Side, nodes int, cls planner.Class, n int64) *planner.Plan {
	t.Helper()
	sa, err := sd.at(context.Background(), nodes)
	require.NoError(t, err)
	p, err := sa.pl.Explain(context.Background(), cls, n)
	require.NoError(t, err)
	return p
}

// TestDiffAgainstExplain checks NewDiff against per-size explains: at every power of two, a few
// sizes on each side of every band edge and random sizes, a size lies in a band exactly when the
// two sides' explained picks differ, the band names both picks, and its time ratio at its ends is
// B's explained time over A's.
func TestDiffAgainstExplain(t *testing.T) {
	side := func(name string, noOverlay bool) Side {
		n, label, err := SideTable(name, noOverlay, "", nil)
		require.NoError(t, err)
		return Side{Spec: Spec{Node: n.Name, Loaded: n}, Label: label}
	}
	cls := planner.Class{Coll: capabilities.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
	for _, tc := range []struct {
		name  string
		a, b  Side
		nodes []int
		colls []capabilities.Coll
	}{
		{"h100 vs itself", side("h100", false), side("h100", false), []int{1, 2, 8}, []capabilities.Coll{capabilities.AllReduce}},
		{"h100 vs h200 all colls", side("h100", false), side("h200", false), []int{2, 4}, nil},
		{"cpu overlay vs none", side("cpu", false), side("cpu", true), []int{1, 2}, []capabilities.Coll{capabilities.AllReduce, capabilities.AllGather}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.colls == nil {
				for c := capabilities.Coll(0); c < capabilities.NumColls; c++ {
					tc.colls = append(tc.colls, c)
				}
			}
			lo, hi := int64(8), int64(16<<30)
			d, err := NewDiff(context.Background(), tc.a, tc.b, DiffOptions{Colls: tc.colls, Class: cls, Min: lo, Max: hi, NodeCounts: tc.nodes})
			require.NoError(t, err)
			assert.Equal(t, len(tc.colls)*len(tc.nodes), d.Compared)
			rows := map[[2]string][]DiffBand{}
			for _, r := range d.Rows {
				require.Empty(t, r.Error)
				rows[[2]string{r.Coll, strconv.Itoa(r.Nodes)}] = r.Bands
			}
			rng := rand.New(rand.NewPCG(1, 2))
			for _, nodes := range tc.nodes {
				for _, coll := range tc.colls {
					c := cls
					c.Coll = coll
					bands := rows[[2]string{coll.String(), strconv.Itoa(nodes)}]
					sizes := []int64{lo, hi}
					for p := int64(16); p < hi; p *= 2 {
						sizes = append(sizes, p)
					}
					for _, b := range bands {
						for _, x := range []int64{b.Lo - 1, b.Lo, b.Lo + 1, b.Hi - 1, b.Hi, b.Hi + 1} {
							if x >= lo && x <= hi {
								sizes = append(sizes, x)
							}
						}
					}
					for i := 0; i < 40; i++ {
						sizes = append(sizes, lo+rng.Int64N(hi-lo))
					}
					for _, n := range sizes {
						pa, pb := explainAt(t, tc.a, nodes, c, n), explainAt(t, tc.b, nodes, c, n)
						ca, cb := cellName(pa.Algo, pa.Proto), cellName(pb.Algo, pb.Proto)
						var in *DiffBand
						for i := range bands {
							if bands[i].Lo <= n && n <= bands[i].Hi {
								in = &bands[i]
							}
						}
						if ca == cb {
							assert.Nil(t, in, "%s %d nodes %d B: both pick %s, yet in a band", coll, nodes, n, ca)
							continue
						}
						if assert.NotNil(t, in, "%s %d nodes %d B: %s vs %s, in no band", coll, nodes, n, ca, cb) {
							assert.Equal(t, ca, in.A, "%s %d nodes %d B", coll, nodes, n)
							assert.Equal(t, cb, in.B, "%s %d nodes %d B", coll, nodes, n)
							if n == in.Lo {
								assert.InDelta(t, float64(pb.TimeUS/pa.TimeUS), float64(in.RatioLo), 1e-6, "ratio at %d", n)
							}
							if n == in.Hi {
								assert.InDelta(t, float64(pb.TimeUS/pa.TimeUS), float64(in.RatioHi), 1e-6, "ratio at %d", n)
							}
						}
					}
				}
			}
		})
	}
}
