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
	w := wire.NewWaiter(&c.ctl, ctx, osYieldNeeded(c), c.spinFits(1))
	w.Park = c.park
	return w
}

// parker is tr's bell for waits (wire.Parker), when it runs goroutines of its own in this process
// that store into the ranks' regions (the network transport's proxy and socket readers). Its
// waits then also call Gosched whatever the rank and core counts (wire's Idle: a Park is as Shared): those
// goroutines share the process's Ps, and a rank that yielded only the OS thread would hold the
// process's one P while the data it waits for sat unread in a socket.
func parker(tr transport.Transport) wire.Parker {
	p, _ := tr.(wire.Parker)
	return p
}

// spinFits reports whether a call whose ranks each run k polling goroutines may spin: every one
// of the n*k goroutines has a core (and, for in-process ranks, a P) to itself, so a spinning
// waiter delays nobody. The cores are counted once, when the Comm is made.
//
// A transport with a bell for waits (c.park: the network transport) stores what the waits wait
// for from goroutines of its own, its poller and its socket readers, on this process's Ps; they
// count as parkPolling more goroutines that need a P. A waiter spinning on the P they need holds
// back the very data it waits for, for its whole spin phase (spinTime) per hop: across 2 emulated
// hosts, one rank and one P per host process, 8-byte AllReduce took 70-77 us with the ranks
// spinning and 21-34 us without.
func (c *Comm) spinFits(k int) bool {
	extra := 0
	if c.park != nil {
		extra = parkPolling
	}
	if c.procRanks > 1 {
		return c.procRanks*k+extra <= c.procs
	}
	return c.n*k <= c.cores && k+extra <= c.procs
}

// parkPolling is the polling goroutines a transport with a bell runs in each process beside its
// ranks' workers: the network transport's poller and (at least) one socket reader.
const parkPolling = 2

// processRanks is how many of a communicator's ranks are goroutines of this process, sharing its
// Ps: all n on the in-process transport; what a transport that says so reports (the network
// transport's hosts run their ranks as goroutines over an in-process local transport); else one,
// a rank per process.
func processRanks(tr transport.Transport, n int) int {
	if _, inproc := tr.(transport.Rank); inproc {
		return n
	}
	if p, ok := tr.(interface{ ProcessRanks() int }); ok {
		return max(p.ProcessRanks(), 1)
	}
	return 1
}

// osYieldNeeded reports whether c's waits must yield the OS thread to other processes: its ranks
// are not goroutines of one process (the transport is not the in-process one) and there are more
// of them than cores. When the ranks fit the cores each keeps its core while it polls, and a
// sched_yield would only hand the core to unrelated work for a time slice (measured: 2-rank
// calls of 8 B went from 2-3 us to 15-45 us on a loaded 2-core host).
//
// Ranks that are goroutines of one process (procRanks > 1) never need it: a sched_yield without a
// Gosched would leave the rank being waited for, on the same P, unscheduled (across emulated hosts,
// two ranks per host process, an 8-byte AllReduce took 4.4 ms so).
func osYieldNeeded(c *Comm) bool {
	if c.procRanks > 1 {
		return false
	}
	return c.n > runtime.NumCPU()
}
