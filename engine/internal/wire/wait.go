package wire

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
)

// Waiting. Every wait in the engine is a poll of one word in a shared region (a head or tail
// counter, a line's flag, a peer's call descriptor) with the same bounded backoff: spinPolls plain
// polls; then, when every polling goroutine of the job has a core to itself (Waiter.Spin), more
// polls for up to spinTime; then, for yieldTime, polls each followed by runtime.Gosched (so that
// with more ranks and channels than cores the rank being waited for gets the CPU) and, when the
// ranks are processes and there are more of them than cores, by OSYield (sched_yield on Linux:
// Gosched only switches among this process's goroutines, and the rank being waited for may be
// another process waiting for this core; a rank running a single worker then skips the Gosched,
// which has nothing to switch to and costs a run-queue lock per poll), and in a bulk call's worker
// also once the wait has lasted osYieldAfter; then polls separated by sleeps that double from
// minSleep to maxSleep. Past the first spinPolls polls every poll (every spinPolls-th in the spin
// phase) also checks the communicator's abort word, this Comm's closed flag and the call's context.
// On a transport that rings a bell when its own goroutines store into the regions (Parker: the
// network transport), the sleeps are blocks on that bell, bounded by the same back-off, and the
// yield phase may be shorter (Parker.ParkAfter).
//
// The yield phase is long (a millisecond) because a sleep is expensive: Go's timers wake a
// sleeping goroutine 50 us to 1 ms late, and a sleeping producer stalls its whole pipeline. The
// spin phase exists because a Gosched is not free either (the scheduler's run-queue lock): a
// 2-rank 8-byte AllReduce, whose waits are a few hundred nanoseconds, spent 40 % of its time in
// Gosched when every wait past 64 polls yielded.
//
// When processes outnumber the cores (OSYield), a wait yields at its first failed poll: the rank
// it waits for most likely needs this core, and each context switch is on the call's critical
// path. The yield phase reads the clock only every clockPolls-th poll (a clock read costs 30-50 ns
// in a VM, a yield several hundred). Measured on 2 cores, 4 rank processes, LL all-reduce of
// 8-512 B (median of 70 repetitions each, alternated): 64 polls before the first yield and a
// clock read per poll took 4.6-7.5 us, this 4.1-6.7 us (docs/engine-vs-mpi.md, sixth run). A wait
// with a Park reads it at every poll: its yield phase is Parker.ParkAfter, which may be a few
// microseconds, and 16 sched_yields before the first clock read made it last far longer where 8
// emulated hosts share 2 cores (a third of all samples in sched_yield).
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

// Ctl is a rank's view of the control region's words that every wait checks besides its own
// word, and the slow paths of its owner (the engine's Comm, which holds one). Nothing on it is
// called per FIFO step: the two functions run only while the call's agreement is unfinished (at
// most until every peer's descriptor is read) or once the communicator is aborted.
type Ctl struct {
	Rank, N int
	Abort   *uint64     // the abort word (CtrlAbortOffset of the control region)
	Closed  atomic.Bool // this rank's Comm is closed
	Timeout time.Duration
	// per rank, for the watchdog: the last beat (MonoNow) of a sleeping wait, and the rank+1
	// that wait waits for (0 none)
	Beat, WaitsFor []*uint64
	// AgreeNext: the ranks below it have been checked in the current call's agreement (the
	// engine's agree.go); the waits of the calling goroutine's worker call AgreePoll while it is
	// below N.
	AgreeNext int
	AgreePoll func() error
	// AbortError is the error of a wait that found the communicator aborted with word w.
	AbortError func(w uint64) error
}

// SetAbort aborts the communicator on behalf of this rank, unless it is already aborted.
func (c *Ctl) SetAbort(reason int) {
	atomic.CompareAndSwapUint64(c.Abort, 0, AbortWord(c.Rank, reason))
}

// AbortFor aborts the communicator naming another rank (gone or stalled), unless it is already
// aborted.
func (c *Ctl) AbortFor(rank, reason int) {
	atomic.CompareAndSwapUint64(c.Abort, 0, AbortWord(rank, reason))
}

// Waiter carries what a wait loop checks besides its word.
type Waiter struct {
	c    *Ctl
	ctx  context.Context
	done <-chan struct{}

	marked   bool  // this waiter published whom it waits for (waitsFor) in this call
	waitsFor int   // the rank it published
	lastBeat int64 // nanotime of this waiter's last published beat

	Spin     bool  // every polling goroutine has a core: spin for spinTime before yielding
	spinning bool  // the current wait is in its spin phase
	spinEnd  int64 // nanotime at which the current wait's spin phase ends
	waitFrom int64 // nanotime at which the current wait's yield phase began
	yieldEnd int64 // nanotime at which the current wait stops yielding and starts sleeping
	sleep    time.Duration
	OSYield  bool // the whole yield phase also yields the OS thread (see the engine's osYieldNeeded)
	Bulk     bool // a worker's waiter in a call of at least BulkBytes: see osYieldAfter
	Agree    bool // the calling goroutine's worker: its waits also check the peers' descriptors
	Shared   bool // the rank runs other workers in this call: an OSYield wait still calls Gosched (so does one with a Park, whose transport's goroutines share the Ps)

	// Park, when the transport offers it, makes the sleep phase block on the transport's bell
	// instead of sleeping (see Parker); bell is the armed bell of the current wait, timer the
	// waiter's one timer for those blocks.
	Park  Parker
	bell  <-chan struct{}
	timer *time.Timer
}

// Parker is what a transport whose own goroutines store into this process's regions (the network
// transport's proxy and socket readers) offers its ranks' waits, so that a wait for data from
// another host blocks, and the process's Go runtime waits in the kernel for the socket, rather than
// every goroutine of the host polling:
//
//   - Poke, at a wait's first unsuccessful poll: the rank has most likely just published something
//     (a step, a head), so the transport's poller should look now rather than at its next back-off.
//   - Bell returns a channel closed at the transport's next store into the process's regions. A
//     wait arms the bell, polls once more, and only then blocks on it, so a store between the
//     failed poll and the block is never missed.
//   - ParkAfter is how long a wait yields before it parks; 0 keeps yieldTime. While goroutines of
//     a process yield, Go's scheduler always finds one to run and reads the network only when it
//     runs out: a host process whose waits yield for yieldTime leaves a socket's data unread for as
//     long, so a transport whose host processes outnumber the cores parks early.
//
// The block is bounded (the sleep phase's back-off, minSleep to maxSleep), for stores the
// transport does not ring for: a local rank's, this Comm's abort or close, the context.
type Parker interface {
	Poke()
	Bell() <-chan struct{}
	ParkAfter() time.Duration
}

// osYieldAfter is how long a worker's wait in a call of at least BulkBytes yields only the
// goroutine before it also yields the OS thread, whatever the transport and the rank and core
// counts: a peer that has not answered by then has most likely lost its core to another process
// (the host's other work), and a rank that keeps polling keeps it from getting one back. Measured
// on a 2-core host with one other busy process, 2 ranks, Simple AllReduce at 64 MiB: 1.2 to
// 2.0-2.4 GB/s busbw as processes, 1.55 to 2.0 in process; on the idle host sched_yield returns at
// once (4.1-4.2 GB/s, no worse than without). Small calls never do it: they are latency-bound, and
// a yield can hand the core to the other process for a whole time slice.
const (
	osYieldAfter = 50 * time.Microsecond
	BulkBytes    = 1 << 20
)

// NewWaiter returns a waiter of c's rank for a call with context ctx (osYield, spin: see Waiter).
func NewWaiter(c *Ctl, ctx context.Context, osYield, spin bool) Waiter {
	return Waiter{c: c, ctx: ctx, done: ctx.Done(), OSYield: osYield, Spin: spin}
}

// Copy is w for another goroutine: the armed bell and the timer are each goroutine's own.
func (w *Waiter) Copy() Waiter {
	v := *w
	v.bell, v.timer = nil, nil
	return v
}

// From makes w a copy of v for another goroutine (Copy), keeping w's own timer.
func (w *Waiter) From(v *Waiter) {
	t := w.timer
	*w = v.Copy()
	w.timer = t
}

// Idle is called after the i-th unsuccessful poll (i from 0) of a wait for rank peer. It returns
// an error when the wait must end: the communicator was aborted, this Comm closed, the context
// done (the last two abort the communicator, since this rank will not play its part in the call),
// or the wait outlasted the watchdog's timeout.
func (w *Waiter) Idle(i, peer int) error {
	if i == 0 {
		if w.Park != nil {
			w.Park.Poke()
		}
		if err := w.agreePoll(); err != nil {
			return err
		}
	}
	polls := spinPolls
	if w.OSYield {
		polls = 0
	}
	if i < polls {
		return nil
	}
	if i == polls {
		w.spinning, w.yieldEnd = w.Spin, 0
		if w.spinning {
			w.spinEnd = Nanotime() + int64(spinTime)
		}
	}
	if w.spinning {
		if i%spinPolls != 0 {
			return nil
		}
		if err := w.check(); err != nil {
			return err
		}
		if Nanotime() < w.spinEnd {
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
		now = Nanotime()
		yield := yieldTime
		if w.Park != nil {
			if d := w.Park.ParkAfter(); d > 0 {
				yield = d
			}
		}
		w.waitFrom, w.yieldEnd, w.sleep = now, now+int64(yield), minSleep
	case w.Bulk || w.Park != nil || i%clockPolls == 0:
		now = Nanotime()
	}
	if now < w.yieldEnd {
		if !w.OSYield || w.Shared || w.Park != nil {
			runtime.Gosched()
		}
		if w.OSYield || w.Bulk && now-w.waitFrom > int64(osYieldAfter) {
			OSYield()
		}
		return nil
	}
	if err := w.watch(now, peer); err != nil {
		return err
	}
	if w.Park != nil {
		return w.park()
	}
	time.Sleep(w.sleep)
	w.sleep = min(2*w.sleep, maxSleep)
	return nil
}

// park is the sleep phase of a wait whose transport rings a bell (Parker): arm the bell and poll
// once more, then block until it rings or the back-off's sleep has passed.
func (w *Waiter) park() error {
	if w.bell == nil {
		w.bell = w.Park.Bell()
		return nil
	}
	if w.timer == nil {
		w.timer = time.NewTimer(w.sleep)
	} else {
		w.timer.Reset(w.sleep)
	}
	select {
	case <-w.bell:
		w.bell = nil
	case <-w.timer.C:
		w.sleep = min(2*w.sleep, maxSleep)
	}
	w.timer.Stop()
	return nil
}

// watch is the sleep phase's watchdog duty: publish a beat and whom this rank waits for, and fire
// once the wait has lasted the timeout.
//
// Ranks without a watchdog (Timeout 0, the engine's default) publish nothing: a job's ranks share
// the setting, and a rank that beats for others' watchdogs costs a clock read per sleep.
func (w *Waiter) watch(now int64, peer int) error {
	c := w.c
	if c.Timeout <= 0 || c.N == 1 {
		return nil
	}
	if !w.marked || peer != w.waitsFor {
		w.marked, w.waitsFor = true, peer
		atomic.StoreUint64(c.WaitsFor[c.Rank], uint64(peer+1))
	}
	if w.lastBeat == 0 || now-w.lastBeat >= int64(beatEvery) {
		w.lastBeat = now
		atomic.StoreUint64(c.Beat[c.Rank], uint64(MonoNow()))
	}
	if now-w.waitFrom < int64(c.Timeout) {
		return nil
	}
	if r, endpoint := c.StalledRank(peer); endpoint {
		c.SetAbort(AbortCollNetStalled)
	} else {
		c.AbortFor(r, AbortStalled)
	}
	return c.AbortError(atomic.LoadUint64(c.Abort))
}

// StalledRank names the rank that stopped moving data, seen from a wait for peer: a rank that has
// shown no beat for staleAfter (stopped, hung, or never in the call: every rank blocked on it
// beats while it waits), looked for first at peer, then along the "waits for" links from peer
// (which rank each waits for; a rank with two waiting goroutines publishes one of them, so the
// links are a hint), then among all ranks; peer itself when every rank is alive and waiting (a call
// the ranks disagree on). Peer n stands for the CollNet aggregation endpoint (the engine's collnet.go): when
// the wait, or the links from peer, lead to it and every rank is alive, endpoint is true: the
// endpoint is the one that stopped.
func (c *Ctl) StalledRank(peer int) (rank int, endpoint bool) {
	stale := int64(max(3*beatEvery, c.Timeout/2))
	now := MonoNow()
	quiet := func(r int) bool { return now-int64(atomic.LoadUint64(c.Beat[r])) > stale }
	endpoint = peer == c.N
	if peer < 0 || peer >= c.N || peer == c.Rank {
		peer = (c.Rank + 1) % c.N
	}
	if !endpoint && quiet(peer) {
		return peer, false
	}
	for r, hops := peer, 0; !endpoint && hops < c.N; hops++ {
		next := int(atomic.LoadUint64(c.WaitsFor[r])) - 1
		if next == c.N {
			endpoint = true
			break
		}
		if next < 0 || next >= c.N || next == c.Rank {
			break
		}
		if quiet(next) {
			return next, false
		}
		r = next
	}
	for r := range c.N {
		if r != c.Rank && quiet(r) {
			return r, false
		}
	}
	return peer, endpoint
}

// Nanotime is a monotonic clock in nanoseconds.
func Nanotime() int64 { return int64(time.Since(clockBase)) }

var clockBase = time.Now()

// agreePoll reads the peers' descriptors of the call while the calling goroutine's worker waits
// anyway, the cheapest time to do it (agree.go); it also notices a peer that closed without
// joining.
func (w *Waiter) agreePoll() error {
	if !w.Agree || w.c.AgreeNext >= w.c.N {
		return nil
	}
	return w.c.AgreePoll()
}

// check returns the error that ends a wait, if any.
func (w *Waiter) check() error {
	c := w.c
	if a := atomic.LoadUint64(c.Abort); a != 0 {
		return c.AbortError(a)
	}
	if err := w.agreePoll(); err != nil {
		return err
	}
	if c.Closed.Load() {
		c.SetAbort(AbortClosed)
		return ErrClosed
	}
	if w.done != nil {
		select {
		case <-w.done:
			c.SetAbort(AbortCancel)
			return w.ctx.Err()
		default:
		}
	}
	return nil
}

// WaitGE waits until *p >= v, written by rank peer.
func (w *Waiter) WaitGE(p *uint64, v uint64, peer int) error {
	for i := 0; atomic.LoadUint64(p) < v; i++ {
		if err := w.Idle(i, peer); err != nil {
			return err
		}
	}
	return nil
}

// WaitEq waits until *p == v, written by rank peer.
func (w *Waiter) WaitEq(p *uint64, v uint64, peer int) error {
	for i := 0; atomic.LoadUint64(p) != v; i++ {
		if err := w.Idle(i, peer); err != nil {
			return err
		}
	}
	return nil
}

// WaitLL waits until the LL half-line *p, written by rank peer, carries flag in its upper 32 bits
// and returns it.
func (w *Waiter) WaitLL(p *uint64, flag uint32, peer int) (uint64, error) {
	for i := 0; ; i++ {
		v := atomic.LoadUint64(p)
		if uint32(v>>32) == flag {
			return v, nil
		}
		if err := w.Idle(i, peer); err != nil {
			return 0, err
		}
	}
}
