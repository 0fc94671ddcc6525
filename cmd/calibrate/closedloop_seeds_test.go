package main

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin/shimtable"
	"github.com/collplan/collplan/tables"
)

// TestClosedLoopSeeds is an opt-in measurement (COLLPLAN_LOOP_SEEDS=1): TestClosedLoopSimulated's
// loop on truths drawn from seeds 1..8 instead of its one seed, logging job 1's and job 2's median
// regret (and job 2's without exploration). It asserts nothing: it shows how far the one seed's
// result carries (README, "The closed loop").
func TestClosedLoopSeeds(t *testing.T) {
	if os.Getenv("COLLPLAN_LOOP_SEEDS") == "" {
		t.Skip("opt-in measurement: set COLLPLAN_LOOP_SEEDS=1")
	}
	base, err := tables.LoadBase("h100")
	require.NoError(t, err)
	req := shimtable.Request{Node: base, Nodes: []int{1}, RanksPerNode: []int{8}, MaxPipeOps: 1}
	prior, err := shimtable.Compile(context.Background(), req)
	require.NoError(t, err)
	tp, err := capabilities.FromNode(base, 1)
	require.NoError(t, err)
	cfg, err := node.PlannerConfig(base, &tp)
	require.NoError(t, err)
	pl, err := planner.New(&tp, cfg)
	require.NoError(t, err)
	m, err := pl.Menu(planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	require.NoError(t, err)
	share := priorShare(prior)
	for seed := uint64(1); seed <= 8; seed++ {
		tr := newLoopTruth(rand.New(rand.NewPCG(seed, 99)), m, share)
		next, _, cells := closeLoop(t, req, prior, tr, 20)
		ctl, _, _ := closeLoop(t, req, prior, tr, 0)
		t.Logf("seed %d: job 1 %.1f %%, job 2 %.1f %% (max %.1f %%, %d cells fitted), job 2 without exploration %.1f %%",
			seed, 100*medianRegret(prior, tr), 100*medianRegret(next, tr), 100*maxRegret(next, tr), cells, 100*medianRegret(ctl, tr))
	}
}
