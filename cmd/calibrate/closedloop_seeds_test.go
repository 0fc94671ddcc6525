package main

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestClosedLoopSeeds is TestClosedLoopSimulated's loop on truths drawn from seeds 1..8 instead of
// its one seed: on every one job 2's median regret is at most 2 % where job 1's is over 10 %, and it
// logs job 2's without exploration beside it (README, "The closed loop"). Seeds 3 and 8 failed
// before calibrate held a bandwidth that no point of its cell reached (fit.go's bwReachMin): job 2
// 47.2 % and 50.6 %, Tree/LL measured on a plateau of small sizes only and extrapolated to 256 MiB.
func TestClosedLoopSeeds(t *testing.T) {
	req, prior, m := loopSetup(t)
	share := priorShare(prior)
	for seed := uint64(1); seed <= 8; seed++ {
		tr := newLoopTruth(rand.New(rand.NewPCG(seed, 99)), m, share)
		next, _, cells := closeLoop(t, req, prior, tr, 20)
		ctl, _, _ := closeLoop(t, req, prior, tr, 0)
		before, after := medianRegret(prior, tr), medianRegret(next, tr)
		t.Logf("seed %d: job 1 %.1f %%, job 2 %.1f %% (max %.1f %%, %d cells fitted), job 2 without exploration %.1f %%",
			seed, 100*before, 100*after, 100*maxRegret(next, tr), cells, 100*medianRegret(ctl, tr))
		assert.Greater(t, before, 0.10, "seed %d: job 1's median regret (the truth must disagree with the prior)", seed)
		assert.LessOrEqual(t, after, 0.02, "seed %d: job 2's median regret", seed)
	}
}
