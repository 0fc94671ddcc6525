package engine

import (
	"context"
	"runtime"

	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport"
)

// newWaiter returns the waiter of a call of c (engine/internal/wire's wait.go says how waits
// poll, yield and sleep).
func newWaiter(c *Comm, ctx context.Context) wire.Waiter {
	return wire.NewWaiter(&c.ctl, ctx, osYieldNeeded(c), c.spinFits(1))
}

// spinFits reports whether a call whose ranks each run k polling goroutines may spin: every one
// of the n*k goroutines has a core (and, for in-process ranks, a P) to itself, so a spinning
// waiter delays nobody. The cores are counted once, when the Comm is made.
func (c *Comm) spinFits(k int) bool {
	if _, inproc := c.tr.(transport.Rank); inproc {
		return c.n*k <= c.procs
	}
	return c.n*k <= c.cores && k <= c.procs
}

// osYieldNeeded reports whether c's waits must yield the OS thread to other processes: its ranks
// are not goroutines of one process (the transport is not the in-process one) and there are more
// of them than cores. When the ranks fit the cores each keeps its core while it polls, and a
// sched_yield would only hand the core to unrelated work for a time slice (measured: 2-rank
// calls of 8 B went from 2-3 us to 15-45 us on a loaded 2-core host).
func osYieldNeeded(c *Comm) bool {
	if _, inproc := c.tr.(transport.Rank); inproc {
		return false
	}
	return c.n > runtime.NumCPU()
}
