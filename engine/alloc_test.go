package engine

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// assertNoAllocationPerStep runs call (one collective of count elements on every rank of comms)
// at few and at many elements, runs times each after a warm-up, and checks that the call of many
// steps allocates no more than the call of few, up to the call's goroutines.
//
// The slack: Go's runtime gives a goroutine a timer the first time it sleeps (time.Sleep) and
// drops it when the goroutine exits. Every call runs new goroutines (on each rank the caller's,
// which runRanks starts, and one per further worker), and a goroutine sleeps only if one of its
// waits outlasts the spin and yield phases, which depends on the machine's load, not on the number
// of steps: a loaded CI run counted 20 allocations at 2000 elements and 24 at 8000. So each of the
// call's goroutines may add one allocation to either side. The check still fails for an
// allocation per step: it requires the larger call to take more than four times the slack in steps
// beyond the smaller one. steps counts the steps rank 0 has run so far (rankSteps for calls over
// connections).
func assertNoAllocationPerStep(t *testing.T, comms []*Comm, steps func(*Comm) uint64, runs, few, many int, call func(count int)) {
	t.Helper()
	measure := func(count int) (allocs float64, perCall uint64) {
		before := steps(comms[0])
		allocs = testing.AllocsPerRun(runs, func() { call(count) })
		return allocs, (steps(comms[0]) - before) / uint64(runs+1) // AllocsPerRun warms up once
	}
	a0, s0 := measure(few)
	a1, s1 := measure(many)
	slack := callGoroutines(comms)
	t.Logf("allocs per call: %v (%d elements, %d steps on rank 0), %v (%d, %d steps); slack %d goroutines",
		a0, few, s0, a1, many, s1, slack)
	assert.Greater(t, s1, s0+uint64(4*slack), "the larger call has too few steps more to show an allocation per step")
	assert.LessOrEqual(t, a1, a0+float64(slack), "allocation grows with the message")
}

// rankSteps is the FIFO steps c has sent so far, over its channels.
func rankSteps(c *Comm) uint64 {
	var s uint64
	for _, ch := range c.Stats() {
		s += ch.Steps
	}
	return s
}

// callGoroutines is the goroutines the last call ran over comms: one per worker of each rank (the
// first worker runs on the caller's goroutine). A communicator pinned to one algorithm runs one
// kind of worker, so the sum of both kinds' lists is the last call's.
func callGoroutines(comms []*Comm) int {
	n := 0
	for _, c := range comms {
		n += len(c.tasks) + len(c.nvlsRun)
	}
	return n
}
