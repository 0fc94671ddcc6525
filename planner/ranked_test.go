package planner

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
)

// TestRanked (S1, AllReduce, 1 MiB): the §13 costs, ordered by hand: Ring/LL 28.01, NVLS 30.73,
// Tree/LL128 46.76, Ring/LL128 46.83, Ring/Simple 61.73, Tree/LL 69.34, Tree/Simple 78.65.
func TestRanked(t *testing.T) {
	pl := newPlanner(t, topo(t, "s1"), nil)
	pr, err := pl.Prepare(context.Background(), class(costmodel.AllReduce))
	require.NoError(t, err)
	r, err := pr.Ranked(1<<20, 8)
	require.NoError(t, err)
	var got []string
	for _, d := range r {
		got = append(got, cellOf(d))
	}
	assert.Equal(t, []string{"RING/LL", "NVLS/SIMPLE", "TREE/LL128", "RING/LL128", "RING/SIMPLE", "TREE/LL", "TREE/SIMPLE"}, got)
	p, err := pr.Explain(1 << 20)
	require.NoError(t, err)
	assert.Equal(t, p.Decision, r[0])
	assert.Equal(t, 16, r[1].Channels, "each plan is sized as if picked (NVLS channels)")
	_, err = pr.Ranked(1, 0)
	assert.Error(t, err)
	_, err = pr.RankedTable(9)
	assert.Error(t, err)
}

// TestRankedTable: at every interval edge and around it, the table's list equals Ranked.
func TestRankedTable(t *testing.T) {
	for _, name := range []string{"s1", "s2", "s3"} {
		pl := newPlanner(t, topo(t, name), nil)
		for _, c := range []costmodel.Coll{costmodel.AllReduce, costmodel.AllGather} {
			pr, err := pl.Prepare(context.Background(), class(c))
			require.NoError(t, err)
			ivs, err := pr.RankedTable(4)
			require.NoError(t, err)
			require.Greater(t, len(ivs), 1)
			assert.Zero(t, ivs[0].Lo)
			for i, iv := range ivs {
				if i > 0 {
					assert.Equal(t, ivs[i-1].Hi, iv.Lo)
				}
				for _, n := range []int64{iv.Lo, iv.Lo + (iv.Hi-iv.Lo)/2, iv.Hi - 1} {
					want, err := pr.Ranked(n, 4)
					require.NoError(t, err)
					if !assert.ObjectsAreEqual(want, iv.Plans) {
						requireFloatTie(t, pr.Menu(), n, want, iv.Plans)
					}
				}
			}
		}
	}
}

func TestChannelOverride(t *testing.T) {
	tu := &fixedTuner{ivs: []Interval{{Lo: 10, Hi: 20, Edits: []Edit{{Kind: Channels, Value: 5}}}}}
	pr, err := newPlanner(t, topo(t, "s1"), tu).Prepare(context.Background(), class(costmodel.AllReduce))
	require.NoError(t, err)
	assert.Equal(t, 5, pr.ChannelOverride(15))
	assert.Equal(t, 0, pr.ChannelOverride(25))
}

// requireFloatTie accepts a difference between two ranked lists only where it is a float32 tie:
// the same cells, and every pair in different order prices within 4 float32 ulps. (NCCL's float32
// costs of two cells with nearly equal slopes cross back and forth over a few bytes; the table
// keeps one of those crossings.)
func requireFloatTie(t *testing.T, m *Menu, n int64, want, got []Decision) {
	t.Helper()
	require.Equal(t, len(want), len(got), "size %d", n)
	for i := range want {
		if want[i] == got[i] {
			continue
		}
		tw := m.Time(want[i].Algo, want[i].Proto, n)
		tg := m.Time(got[i].Algo, got[i].Proto, n)
		require.InDelta(t, tw, tg, 4*ulp32(tw), "size %d rank %d: %s %v vs %s %v is no float32 tie", n, i, cellOf(want[i]), tw, cellOf(got[i]), tg)
	}
}

func ulp32(x float32) float64 {
	return float64(math.Nextafter32(x, math.MaxFloat32) - x)
}
