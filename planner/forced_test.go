package planner

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
)

// TestForcedPlanTime: a forced plan's time is the model's time of the forced cell, not the 0 the
// argmin saw, and the plan says what forced it. Hand-derived on S1 at 1 MiB AllReduce: NVLS/Simple
// 25 + 2^20/(1000*182.857) = 30.734 us, Ring/LL 15.0 + 2^20/(1000*80.571) = 28.014 us (correction 1
// for both at this size; TestTunerEdits' comment has the same two numbers).
func TestForcedPlanTime(t *testing.T) {
	const nvlsUS, ringLLUS = 25 + float64(1<<20)/182857, 15.0 + float64(1<<20)/80571
	ringLL := Cell{costmodel.Ring, costmodel.LL}
	nvls := Cell{costmodel.NVLS, costmodel.Simple}
	env := func(algo, proto string) capabilities.Env {
		var e capabilities.Env
		if algo != "" {
			e.Algo = capabilities.Setting{Value: algo, Source: capabilities.SourceFlag}
		}
		if proto != "" {
			e.Proto = capabilities.Setting{Value: proto, Source: capabilities.SourceFlag}
		}
		return e
	}
	for _, tc := range []struct {
		name   string
		edits  []Edit
		env    capabilities.Env
		want   Cell
		timeUS float64
		costUS float64
		forced Forcing
	}{
		{"unforced", nil, capabilities.Env{}, ringLL, ringLLUS, ringLLUS, NotForced},
		{"tuner force", []Edit{{Kind: Force, Cell: nvls}}, capabilities.Env{}, nvls, nvlsUS, 0, ForcedByTuner},
		// A force the tuner then cost-edits is a preference, not a pin: it wins on its cost.
		{"force then add", []Edit{{Kind: Force, Cell: nvls}, {Kind: AddCost, Cell: nvls, Value: 1}}, capabilities.Env{}, nvls, nvlsUS, 1, NotForced},
		// A cost edit moves the pick; the plan's time stays the model's, the argmin's cost is CostUS.
		{"add", []Edit{{Kind: AddCost, Cell: ringLL, Value: 3}}, capabilities.Env{}, nvls, nvlsUS, nvlsUS, NotForced},
		{"env pins one cell", nil, env("nvls", "simple"), nvls, nvlsUS, nvlsUS, ForcedByEnv},
		{"env pins one cell and the tuner forces it", []Edit{{Kind: Force, Cell: nvls}}, env("nvls", "simple"), nvls, nvlsUS, 0, ForcedByEnv},
		// NCCL_ALGO=ring alone leaves Ring/LL, Ring/LL128 and Ring/Simple: a filter, not a pin.
		{"env filters", nil, env("ring", ""), ringLL, ringLLUS, ringLLUS, NotForced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := topo(t, "s1")
			tp.Env = tc.env
			tu := &fixedTuner{ivs: []Interval{{Lo: 1 << 20, Hi: 2 << 20, Edits: tc.edits}}}
			p, err := newPlanner(t, tp, tu).Explain(context.Background(), class(costmodel.AllReduce), 1<<20)
			require.NoError(t, err)
			require.Empty(t, p.Explain.TunerNote)
			assert.Equal(t, tc.want, Cell{p.Algo, p.Proto})
			assert.InDelta(t, tc.timeUS, p.TimeUS, 0.005)
			assert.Equal(t, p.Explain.Cells[p.Algo][p.Proto].ModelTimeUS, p.TimeUS, "the plan's time is its cell's model time")
			assert.InDelta(t, tc.costUS, p.CostUS, 0.005)
			assert.Equal(t, tc.forced, p.Forced)
		})
	}
}

func TestForcingString(t *testing.T) {
	assert.Equal(t, "", NotForced.String())
	assert.Equal(t, "NCCL_ALGO/NCCL_PROTO", ForcedByEnv.String())
	assert.Equal(t, "the tuner", ForcedByTuner.String())
	assert.Equal(t, "Forcing(7)", Forcing(7).String())
}

// TestPreparedIntervals: the tuner's validated answer, as a copy; none without a tuner or after a
// fallback.
func TestPreparedIntervals(t *testing.T) {
	ctx := context.Background()
	nvls := Cell{costmodel.NVLS, costmodel.Simple}
	ivs := []Interval{{Lo: 0, Hi: 10, Edits: []Edit{{Kind: Force, Cell: nvls}}}, {Lo: 20, Hi: 30}}
	pr, err := newPlanner(t, topo(t, "s1"), &fixedTuner{ivs: ivs}).Prepare(ctx, class(costmodel.AllReduce))
	require.NoError(t, err)
	got := pr.Intervals()
	assert.Equal(t, ivs, got)
	got[0].Edits[0].Kind = Disable
	assert.Equal(t, Force, pr.Intervals()[0].Edits[0].Kind, "a copy")

	pr, err = newPlanner(t, topo(t, "s1"), nil).Prepare(ctx, class(costmodel.AllReduce))
	require.NoError(t, err)
	assert.Empty(t, pr.Intervals())
	bad := []Interval{{Lo: 0, Hi: 10}, {Lo: 5, Hi: 20}}
	pr, err = newPlanner(t, topo(t, "s1"), &fixedTuner{ivs: bad}).Prepare(ctx, class(costmodel.AllReduce))
	require.NoError(t, err)
	assert.Empty(t, pr.Intervals(), "an invalid answer is replaced by the built-in policy")
}
