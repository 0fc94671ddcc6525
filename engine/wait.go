package engine

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// Waiting. Every wait in the engine is a poll of one word in a shared region (a head or tail
// counter, a line's flag, a peer's call descriptor) with the same bounded backoff: spinPolls plain
// polls; then, when every polling goroutine of the job has a core to itself (waiter.spin), more
// polls for up to spinTime; then, for yieldTime, polls each followed by runtime.Gosched (so that
// with more ranks and channels than cores the rank being waited for gets the CPU) and, when the
// ranks are processes and there are more of them than cores, by osYield (sched_yield on Linux:
// Gosched only switches among this process's goroutines, and the rank being waited for may be
// another process waiting for this core; a rank running a single worker then skips the Gosched,
// which has nothing to switch to and costs a run-queue lock per poll), and in a bulk call's worker
// also once the wait has lasted osYieldAfter; then polls separated by sleeps that double from
// minSleep to maxSleep. Past the first spinPolls polls every poll (every spinPolls-th in the spin
// phase) also checks the communicator's abort word, this Comm's closed flag and the call's context.
//
// The yield phase is long (a millisecond) because a sleep is expensive: Go's timers wake a
// sleeping goroutine 50 us to 1 ms late, and a sleeping producer stalls its whole pipeline. The
// spin phase exists because a Gosched is not free either (the scheduler's run-queue lock): a
// 2-rank 8-byte AllReduce, whose waits are a few hundred nanoseconds, spent 40 % of its time in
// Gosched when every wait past 64 polls yielded.
//
// When processes outnumber the cores (osYield), a wait yields at its first failed poll: the rank
// it waits for most likely needs this core, and each context switch is on the call's critical
// path. The yield phase reads the clock only every clockPolls-th poll (a clock read costs 30-50 ns
// in a VM, a yield several hundred). Measured on 2 cores, 4 rank processes, LL all-reduce of
// 8-512 B (median of 70 repetitions each, alternated): 64 polls before the first yield and a
// clock read per poll took 4.6-7.5 us, this 4.1-6.7 us (docs/engine-vs-mpi.md, sixth run).
const (
	spinPolls  = 64
	spinTime   = 20 * time.Microsecond
	yieldTime  = time.Millisecond
	clockPolls = 16
	minSleep   = time.Microsecond
	maxSleep   = 256 * time.Microsecond
)

// The watchdog. A wait that has lasted Config.Timeout aborts the communicator naming the rank that
// stopped moving data. Waits past their yield phase publish, in the waiting rank's control line,
// a beat (a monotonic clock shared by the host's processes, at most every beatEvery) and the rank
// they last waited for; the rank that fires names the rank that shows no recent beat (a stopped or
// hung process: SIGSTOP, a debugger, a dead scheduler, or a rank not in the call), looking first
// at the rank it waits for and along the "waits for" links from there (stalledRank). Only waits
// that already sleep pay for any of this; the link is not cleared when a wait ends (it is only a
// hint), so a wait that succeeds costs nothing more than before.
const beatEvery = 100 * time.Millisecond

// waiter carries what a wait loop checks besides its word.
type waiter struct {
	c    *Comm
	ctx  context.Context
	done <-chan struct{}

	marked   bool  // this waiter published whom it waits for (waitsFor) in this call
	waitsFor int   // the rank it published
	lastBeat int64 // nanotime of this waiter's last published beat

	spin     bool  // every polling goroutine has a core: spin for spinTime before yielding
	spinning bool  // the current wait is in its spin phase
	spinEnd  int64 // nanotime at which the current wait's spin phase ends
	yieldEnd int64 // nanotime at which the current wait stops yielding and starts sleeping
	sleep    time.Duration
	osYield  bool // the whole yield phase also yields the OS thread (see osYieldNeeded)
	bulk     bool // a worker's waiter in a call of at least bulkBytes: see osYieldAfter
	agree    bool // the calling goroutine's worker: its waits also check the peers' descriptors
	shared   bool // the rank runs other workers in this call: an osYield wait still calls Gosched
}

// osYieldAfter is how long a worker's wait in a call of at least bulkBytes yields only the
// goroutine before it also yields the OS thread, whatever the transport and the rank and core
// counts: a peer that has not answered by then has most likely lost its core to another process
// (the host's other work), and a rank that keeps polling keeps it from getting one back. Measured
// on a 2-core host with one other busy process, 2 ranks, Simple AllReduce at 64 MiB: 1.2 to
// 2.0-2.4 GB/s busbw as processes, 1.55 to 2.0 in process; on the idle host sched_yield returns at
// once (4.1-4.2 GB/s, no worse than without). Small calls never do it: they are latency-bound, and
// a yield can hand the core to the other process for a whole time slice.
const (
	osYieldAfter = 50 * time.Microsecond
	bulkBytes    = 1 << 20
)

func newWaiter(c *Comm, ctx context.Context) waiter {
	return waiter{c: c, ctx: ctx, done: ctx.Done(), osYield: osYieldNeeded(c), spin: c.spinFits(1)}
}

// spinFits reports whether a call whose ranks each run k polling goroutines may spin: every one
// of the n*k goroutines has a core (and, for in-process ranks, a P) to itself, so a spinning
// waiter delays nobody. The cores are counted once, when the Comm is made.
func (c *Comm) spinFits(k int) bool {
	if _, inproc := c.tr.(rankTransport); inproc {
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
	if _, inproc := c.tr.(rankTransport); inproc {
		return false
	}
	return c.n > runtime.NumCPU()
}

// idle is called after the i-th unsuccessful poll (i from 0) of a wait for rank peer. It returns
// an error when the wait must end: the communicator was aborted, this Comm closed, the context
// done (the last two abort the communicator, since this rank will not play its part in the call),
// or the wait outlasted the watchdog's timeout.
func (w *waiter) idle(i, peer int) error {
	if i == 0 {
		if err := w.agreePoll(); err != nil {
			return err
		}
	}
	polls := spinPolls
	if w.osYield {
		polls = 0
	}
	if i < polls {
		return nil
	}
	if i == polls {
		w.spinning, w.yieldEnd = w.spin, 0
		if w.spinning {
			w.spinEnd = nanotime() + int64(spinTime)
		}
	}
	if w.spinning {
		if i%spinPolls != 0 {
			return nil
		}
		if err := w.check(); err != nil {
			return err
		}
		if nanotime() < w.spinEnd {
			return nil
		}
		w.spinning = false
	}
	if err := w.check(); err != nil {
		return err
	}
	var now int64
	switch {
	case w.yieldEnd == 0:
		now = nanotime()
		w.yieldEnd, w.sleep = now+int64(yieldTime), minSleep
	case w.bulk || i%clockPolls == 0:
		now = nanotime()
	}
	if now < w.yieldEnd {
		if !w.osYield || w.shared {
			runtime.Gosched()
		}
		if w.osYield || w.bulk && now-(w.yieldEnd-int64(yieldTime)) > int64(osYieldAfter) {
			osYield()
		}
		return nil
	}
	if err := w.watch(now, peer); err != nil {
		return err
	}
	time.Sleep(w.sleep)
	w.sleep = min(2*w.sleep, maxSleep)
	return nil
}

// watch is the sleep phase's watchdog duty: publish a beat and whom this rank waits for, and fire
// once the wait has lasted the timeout.
//
// Ranks without a watchdog (Timeout 0, the engine's default) publish nothing: a job's ranks share
// the setting, and a rank that beats for others' watchdogs costs a clock read per sleep.
func (w *waiter) watch(now int64, peer int) error {
	c := w.c
	if c.cfg.Timeout <= 0 || c.n == 1 {
		return nil
	}
	if !w.marked || peer != w.waitsFor {
		w.marked, w.waitsFor = true, peer
		atomic.StoreUint64(c.waitsFor[c.rank], uint64(peer+1))
	}
	if w.lastBeat == 0 || now-w.lastBeat >= int64(beatEvery) {
		w.lastBeat = now
		atomic.StoreUint64(c.beat[c.rank], uint64(monoNow()))
	}
	if now-(w.yieldEnd-int64(yieldTime)) < int64(c.cfg.Timeout) {
		return nil
	}
	if r, endpoint := c.stalledRank(peer); endpoint {
		c.setAbort(abortCollNetStalled)
	} else {
		c.abortFor(r, abortStalled)
	}
	return c.abortError(atomic.LoadUint64(c.abort))
}

// stalledRank names the rank that stopped moving data, seen from a wait for peer: a rank that has
// shown no beat for staleAfter (stopped, hung, or never in the call: every rank blocked on it
// beats while it waits), looked for first at peer, then along the "waits for" links from peer
// (which rank each waits for; a rank with two waiting goroutines publishes one of them, so the
// links are a hint), then among all ranks; peer itself when every rank is alive and waiting (a call
// the ranks disagree on). Peer n stands for the CollNet aggregation endpoint (collnet.go): when
// the wait, or the links from peer, lead to it and every rank is alive, endpoint is true: the
// endpoint is the one that stopped.
func (c *Comm) stalledRank(peer int) (rank int, endpoint bool) {
	stale := int64(max(3*beatEvery, c.cfg.Timeout/2))
	now := monoNow()
	quiet := func(r int) bool { return now-int64(atomic.LoadUint64(c.beat[r])) > stale }
	endpoint = peer == c.n
	if peer < 0 || peer >= c.n || peer == c.rank {
		peer = (c.rank + 1) % c.n
	}
	if !endpoint && quiet(peer) {
		return peer, false
	}
	for r, hops := peer, 0; !endpoint && hops < c.n; hops++ {
		next := int(atomic.LoadUint64(c.waitsFor[r])) - 1
		if next == c.n {
			endpoint = true
			break
		}
		if next < 0 || next >= c.n || next == c.rank {
			break
		}
		if quiet(next) {
			return next, false
		}
		r = next
	}
	for r := range c.n {
		if r != c.rank && quiet(r) {
			return r, false
		}
	}
	return peer, endpoint
}

// nanotime is a monotonic clock in nanoseconds.
func nanotime() int64 { return int64(time.Since(clockBase)) }

var clockBase = time.Now()

// agreePoll reads the peers' descriptors of the call while the calling goroutine's worker waits
// anyway, the cheapest time to do it (agree.go); it also notices a peer that closed without
// joining.
func (w *waiter) agreePoll() error {
	if !w.agree || w.c.agree.next >= w.c.n {
		return nil
	}
	_, err := w.c.agreePoll()
	return err
}

// check returns the error that ends a wait, if any.
func (w *waiter) check() error {
	c := w.c
	if a := atomic.LoadUint64(c.abort); a != 0 {
		return c.abortError(a)
	}
	if err := w.agreePoll(); err != nil {
		return err
	}
	if c.closed.Load() {
		c.setAbort(abortClosed)
		return ErrClosed
	}
	if w.done != nil {
		select {
		case <-w.done:
			c.setAbort(abortCancel)
			return w.ctx.Err()
		default:
		}
	}
	return nil
}

// waitGE waits until *p >= v, written by rank peer.
func (w *waiter) waitGE(p *uint64, v uint64, peer int) error {
	for i := 0; atomic.LoadUint64(p) < v; i++ {
		if err := w.idle(i, peer); err != nil {
			return err
		}
	}
	return nil
}

// waitEq waits until *p == v, written by rank peer.
func (w *waiter) waitEq(p *uint64, v uint64, peer int) error {
	for i := 0; atomic.LoadUint64(p) != v; i++ {
		if err := w.idle(i, peer); err != nil {
			return err
		}
	}
	return nil
}

// waitLL waits until the LL half-line *p, written by rank peer, carries flag in its upper 32 bits
// and returns it.
func (w *waiter) waitLL(p *uint64, flag uint32, peer int) (uint64, error) {
	for i := 0; ; i++ {
		v := atomic.LoadUint64(p)
		if uint32(v>>32) == flag {
			return v, nil
		}
		if err := w.idle(i, peer); err != nil {
			return 0, err
		}
	}
}
