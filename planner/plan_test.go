package planner

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
)

// TestPickIsExplains: Prepared.Pick, the service's hot path, is the decision, time and forcing of
// Prepared.Explain's plan, at sizes from 1 B to 64 GiB, for every collective of the §13 scenarios.
func TestPickIsExplains(t *testing.T) {
	for _, name := range []string{"s1", "s2", "s3"} {
		pl := newPlanner(t, topo(t, name), nil)
		for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
			pr, err := pl.Prepare(context.Background(), class(c))
			require.NoError(t, err)
			for n := int64(1); n < 1<<36; n = n*2 + n/3 {
				want, err := pr.Explain(n)
				require.NoError(t, err)
				got, err := pr.Pick(n)
				require.NoError(t, err)
				assert.Equal(t, Pick{Decision: want.Decision, TimeUS: want.TimeUS, Forced: want.Forced}, got, "%s %v %d", name, c, n)
			}
		}
	}
	pr, err := newPlanner(t, topo(t, "s1"), nil).Prepare(context.Background(), class(costmodel.AllReduce))
	require.NoError(t, err)
	_, err = pr.Pick(-1)
	assert.Error(t, err)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = pr.Pick(1 << 20) }), "Pick allocates")
}
