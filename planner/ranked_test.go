package planner

import (
	"context"
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

// TestRankedTable: at every size within 64 bytes of an interval edge, and mid-interval, the
// table's list equals Ranked, float32 ties included (the ranking flips back and forth near one,
// and the table follows it).
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
				sizes := []int64{iv.Lo + (iv.Hi-iv.Lo)/2}
				for d := int64(0); d < 64; d++ {
					sizes = append(sizes, iv.Lo+d, iv.Hi-1-d)
				}
				for _, n := range sizes {
					if n < iv.Lo || n >= iv.Hi {
						continue
					}
					want, err := pr.Ranked(n, 4)
					require.NoError(t, err)
					require.Equal(t, want, iv.Plans, "size %d", n)
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
