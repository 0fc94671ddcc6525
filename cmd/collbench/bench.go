package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/engine/launch"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// bench is one rank's run of the size sweep.
type bench struct {
	o         *options
	c         *engine.Comm
	out       io.Writer // the table (rank 0), io.Discard elsewhere
	plans     string
	transport string
	override  engine.Override // the pins of the measured calls
	log       io.Writer       // every rank's log lines (policy switches)

	table    *planner.DecisionTable    // the policy running now (nil without tables)
	watch    *reloadWatch              // rank 0: SIGHUPs
	switched bool                      // a switch happened; the next measured call is logged
	ab       [2]*planner.DecisionTable // --ab's policies

	rank, n int
	es      int
	corrupt bool

	hostNames []string // each rank's host, when the job spans hosts (--hosts); nil: this host's name

	sendBuf, recvBuf []byte // sized for maxBytes

	curCount int // count of the call being checked

	op kernels.Op // the calls' operator: o.op, or this rank's PreMulSum handle for mulsum

	sumBus  float64
	nBus    int
	wrong   int64
	scratch []byte
}

// half is one timed half of a row.
type half struct {
	us                    float64
	wrong                 int64
	iMin, iMax, iP99, iCV float64
}

func (b *bench) run(ctx context.Context) error {
	oc := *b.o // this rank's copy: -d all and -o all move it from combination to combination
	b.o = &oc
	o := b.o
	b.rank, b.n, b.es = b.c.Rank(), b.c.Size(), o.dt.Size()
	b.op = o.op
	// The test hook: COLLPLAN_CORRUPT=1 flips one element of the checked output on the last rank
	// (on the root for Reduce, whose other ranks have no output).
	victim := b.n - 1
	if o.coll == costmodel.Reduce {
		victim = o.root
	}
	b.corrupt = os.Getenv("COLLPLAN_CORRUPT") == "1" && b.rank == victim
	b.scratch = make([]byte, max(8*b.n, 32))
	if b.log == nil {
		b.log = io.Discard
	}
	var send, recv int64
	for _, dt := range o.dtNames {
		b.es = dtypes[dt].Size()
		s, r := b.bufBytes(o.maxBytes)
		send, recv = max(send, s), max(recv, r)
	}
	b.es = o.dt.Size()
	b.sendBuf, b.recvBuf = make([]byte, send), make([]byte, recv)
	// Collectives run to completion once started: a stop request (ctx) ends the sweep between
	// sizes, agreed by every rank; a call still blocked hardGrace later is aborted.
	cctx, cancel := callContext(ctx)
	defer cancel()
	if err := b.preamble(cctx); err != nil {
		return err
	}
	if len(o.ab) > 0 {
		if err := b.abSweep(cctx, ctx); err != nil {
			return err
		}
	}
	stopped := len(o.ab) > 0
	// -d all and -o all: every type and, for each, every op, in nccl-tests' order, each with its
	// size sweep(s), under the one header (nccl-tests prints one table).
	for _, dt := range o.dtNames {
		for _, op := range o.opNames {
			if stopped {
				break
			}
			var err error
			if stopped, err = b.combo(ctx, cctx, dt, op); err != nil {
				return err
			}
		}
	}
	status := "OK"
	if b.wrong > 0 {
		status = "FAILED"
	}
	avg := 0.0
	if b.nBus > 0 {
		avg = b.sumBus / float64(b.nBus)
	}
	fmt.Fprintf(b.out, "# Out of bounds values : %d %s\n", b.wrong, status)
	fmt.Fprintf(b.out, "# Avg bus bandwidth    : %.6g \n", avg)
	fmt.Fprintf(b.out, "#\n# Collective test concluded: %s\n#\n", o.program)
	if b.wrong > 0 {
		return fmt.Errorf("%d wrong values", b.wrong)
	}
	return nil
}

// combo runs one type and op's size sweeps (-N of them); stopped reports that the ranks agreed to
// stop.
func (b *bench) combo(ctx, cctx context.Context, dt, op string) (stopped bool, err error) {
	o := b.o
	o.setCombo(dt, op)
	b.es, b.op = o.dt.Size(), o.op
	if op == "mulsum" {
		if b.op, err = b.c.RedOpCreatePreMulSum(b.premulScalarBytes(), o.dt); err != nil {
			return false, fmt.Errorf("-o mulsum on %s: %w", dt, err)
		}
		defer b.c.RedOpDestroy(b.op)
	}
	for cycle := 0; o.cycles == 0 || cycle < o.cycles; cycle++ {
		for size := o.minBytes; size <= o.maxBytes; {
			stop, err := b.agreeStop(cctx, ctx.Err() != nil)
			if err != nil {
				return false, err
			}
			if stop {
				return true, nil
			}
			if err := b.row(cctx, size); err != nil {
				return false, err
			}
			if o.stepF > 1 {
				if size == 0 {
					size = 1
				}
				size *= o.stepF
			} else {
				size += o.stepB
			}
		}
	}
	return false, nil
}

// bufBytes are the send and receive buffer sizes for a printed size.
func (b *bench) bufBytes(size int64) (int64, int64) {
	count, _ := b.counts(size)
	one := count * int64(b.es)
	switch b.o.coll {
	case costmodel.AllGather:
		return one, one * int64(b.n)
	case costmodel.ReduceScatter:
		return one * int64(b.n), one
	}
	return one, one
}

// counts returns the call's count (per rank for AllGather and ReduceScatter) and the printed
// size, as nccl-tests computes them.
func (b *bench) counts(size int64) (count, printed int64) {
	es, n := int64(b.es), int64(b.n)
	switch b.o.coll {
	case costmodel.AllGather, costmodel.ReduceScatter:
		count = size / es / n
		if a := 16 / es; a > 1 {
			count &^= a - 1
		}
		return count, count * es * n
	}
	count = size / es
	return count, count * es
}

func (b *bench) allReduceInt64(ctx context.Context, v int64, op kernels.Op) (int64, error) {
	buf := b.scratch[:8]
	binary.LittleEndian.PutUint64(buf, uint64(v))
	defer b.unpinned()()
	if err := b.c.AllReduce(ctx, buf, buf, 1, kernels.Int64, op); err != nil {
		return 0, fmt.Errorf("exchanging results: %w", err)
	}
	return int64(binary.LittleEndian.Uint64(buf)), nil
}

func (b *bench) allReduceFloat64(ctx context.Context, v float64, op kernels.Op) (float64, error) {
	buf := b.scratch[:8]
	binary.LittleEndian.PutUint64(buf, math.Float64bits(v))
	defer b.unpinned()()
	if err := b.c.AllReduce(ctx, buf, buf, 1, kernels.Float64, op); err != nil {
		return 0, fmt.Errorf("exchanging times: %w", err)
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(buf)), nil
}

// unpinned lifts the pins for collbench's own bookkeeping calls (pids, times, wrong counts,
// barriers), which must run whatever the measured calls are pinned to (a Tree pin does not apply
// to AllGather); it returns the function that restores them. Every rank makes the same change
// between the same calls, as SetOverride requires.
func (b *bench) unpinned() func() {
	b.c.SetOverride(engine.Override{})
	return func() { b.c.SetOverride(b.override) }
}

// preamble prints nccl-tests' header, with the pins and one line per rank (pids gathered through
// the engine).
func (b *bench) preamble(ctx context.Context) error {
	o := b.o
	pids := make([]byte, 8*b.n)
	binary.LittleEndian.PutUint64(pids[8*b.rank:], uint64(os.Getpid()))
	restore := b.unpinned()
	err := b.c.AllGather(ctx, pids[8*b.rank:8*b.rank+8], pids, 1, kernels.Int64)
	restore()
	if err != nil {
		return fmt.Errorf("gathering rank pids: %w", err)
	}
	w := b.out
	fmt.Fprintf(w, "# collbench version %s nccl-headers=%d nccl-library=%d\n", version, ncclCode, ncclCode)
	fmt.Fprintf(w, "# Collective test starting: %s\n", o.program)
	if o.algo != "" {
		fmt.Fprintf(w, "# NCCL_ALGO=%s\n", o.algo)
	}
	if o.proto != "" {
		fmt.Fprintf(w, "# NCCL_PROTO=%s\n", o.proto)
	}
	step := fmt.Sprintf("%d(factor)", o.stepF)
	if o.stepF <= 1 {
		step = fmt.Sprintf("%d(bytes)", o.stepB)
	}
	fmt.Fprintf(w, "# nThread 1 nGpus 1 minBytes %d maxBytes %d step: %s warmup iters: %d iters: %d agg iters: %d validation: %d graph: 0\n",
		o.minBytes, o.maxBytes, step, o.warmup, o.iters, o.agg, o.check)
	rpn := o.rpn
	if rpn <= 0 || rpn > b.n {
		rpn = b.n
	}
	fmt.Fprintf(w, "# collbench transport: %s, ranks per node: %d, plans: %s\n", b.transport, rpn, b.plans)
	if b.transport == "shm" {
		bind := "not bound by collbench's launcher"
		if cpus := os.Getenv(launch.EnvBind); cpus != "" {
			bind = fmt.Sprintf("rank r on the (r mod %d)-th of cpus %s", strings.Count(cpus, ",")+1, cpus)
		}
		fmt.Fprintf(w, "# collbench binding: %s\n", bind)
	}
	fmt.Fprintf(w, "#\n# Using devices\n")
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.ReplaceAll(host, " ", "_")
	for r := 0; r < b.n; r++ {
		h := host
		switch {
		case len(b.hostNames) == b.n:
			h = strings.ReplaceAll(b.hostNames[r], " ", "_")
		case rpn < b.n: // virtual nodes show as hosts, so the sweep names its node count
			h = fmt.Sprintf("%s-vnode%d", host, r/rpn)
		}
		fmt.Fprintf(w, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n",
			r, 0, binary.LittleEndian.Uint64(pids[8*r:]), h, r%rpn, 0, 0, 0, "cpu")
	}
	fmt.Fprintf(w, "#\n")
	// -C names the time columns cputime and -S adds the timestamp column, as nccl-tests does.
	tm, stamp, stampUnit := "   time", "", ""
	if o.cpuTime {
		tm = "cputime"
	}
	if o.stamps {
		stamp, stampUnit = fmt.Sprintf("  %19s", "timestamp"), fmt.Sprintf("  %19s", "")
	}
	if len(o.ab) > 0 {
		// abSweep prints its own table.
	} else if o.perIter {
		fmt.Fprintf(w, "#                                                                 out-of-place (+ per-iteration)                                in-place (+ per-iteration)\n")
		fmt.Fprintf(w, "#       size         count      type   redop    root  %s   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%%  %s   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%% %s\n", tm, tm, stamp)
		fmt.Fprintf(w, "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%%) %s\n", stampUnit)
	} else {
		fmt.Fprintf(w, "#                                                              out-of-place                       in-place          \n")
		fmt.Fprintf(w, "#       size         count      type   redop    root  %s   algbw   busbw  #wrong  %s   algbw   busbw  #wrong %s\n", tm, tm, stamp)
		fmt.Fprintf(w, "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         %s\n", stampUnit)
	}
	return nil
}

// row times and checks one size, out of place and in place, and prints it.
func (b *bench) row(ctx context.Context, size int64) error {
	o := b.o
	count, printed := b.counts(size)
	var halves [2]half
	for ip := 0; ip < 2; ip++ {
		h, err := b.half(ctx, int(count), ip == 1)
		if err != nil {
			return fmt.Errorf("%d bytes, %s: %w", printed, map[bool]string{false: "out of place", true: "in place"}[ip == 1], err)
		}
		halves[ip] = h
	}
	root := -1
	if o.coll == costmodel.Broadcast || o.coll == costmodel.Reduce {
		root = o.root
	}
	line := fmt.Sprintf("%12d  %12d  %8s  %6s  %6d", printed, count, o.dtName, o.opName, root)
	for _, h := range halves {
		sec := h.us / 1e6
		algbw := 0.0
		if sec > 0 {
			algbw = float64(printed) / 1e9 / sec
		}
		busbw := algbw * busFactor(o.coll, b.n)
		b.sumBus += busbw
		b.nBus++
		line += fmt.Sprintf("  %7s  %6s  %6s", floatStr(h.us, 7), floatStr(algbw, 6), floatStr(busbw, 6))
		if o.check > 0 {
			line += fmt.Sprintf("  %6g", float64(h.wrong))
			b.wrong += h.wrong
		} else {
			line += fmt.Sprintf("  %6s", "N/A")
		}
		if o.perIter {
			line += fmt.Sprintf("  %7s  %7s  %7s  %7s", floatStr(h.iMin, 7), floatStr(h.iMax, 7), floatStr(h.iP99, 7), floatStr(h.iCV, 7))
		}
	}
	if o.stamps {
		line += "  " + time.Now().Format("2006-01-02 15:04:05")
	}
	fmt.Fprintln(b.out, line)
	return nil
}

// busFactor is nccl-tests' bus bandwidth factor.
func busFactor(c costmodel.Coll, n int) float64 {
	switch c {
	case costmodel.AllReduce:
		return 2 * float64(n-1) / float64(n)
	case costmodel.AllGather, costmodel.ReduceScatter:
		return float64(n-1) / float64(n)
	}
	return 1
}

// floatStr is nccl-tests' getFloatStr: the first of %.2f, %.1f, %.0f that fits width, else %.1e
// (width >= 7) or %.0e.
func floatStr(v float64, width int) string {
	for _, p := range []int{2, 1, 0} {
		if s := fmt.Sprintf("%.*f", p, v); len(s) <= width {
			return s
		}
	}
	if width >= 7 {
		return fmt.Sprintf("%.1e", v)
	}
	return fmt.Sprintf("%.0e", v)
}

// buffers returns the send and receive slices of a call of count elements.
func (b *bench) buffers(count int, inPlace bool) (send, recv []byte) {
	one := count * b.es
	all := one * b.n
	o := b.o
	switch o.coll {
	case costmodel.AllGather:
		recv = b.recvBuf[:all]
		send = b.sendBuf[:one]
		if inPlace {
			send = recv[b.rank*one : (b.rank+1)*one]
		}
	case costmodel.ReduceScatter:
		send = b.sendBuf[:all]
		recv = b.recvBuf[:one]
		if inPlace {
			recv = send[b.rank*one : (b.rank+1)*one]
		}
	default:
		send, recv = b.sendBuf[:one], b.recvBuf[:one]
		if inPlace {
			send = recv
		}
	}
	return send, recv
}

func (b *bench) call(ctx context.Context, send, recv []byte, count int) error {
	o := b.o
	switch o.coll {
	case costmodel.AllReduce:
		return b.c.AllReduce(ctx, send, recv, count, o.dt, b.op)
	case costmodel.AllGather:
		return b.c.AllGather(ctx, send, recv, count, o.dt)
	case costmodel.ReduceScatter:
		return b.c.ReduceScatter(ctx, send, recv, count, o.dt, b.op)
	case costmodel.Broadcast:
		return b.c.Broadcast(ctx, send, recv, count, o.dt, o.root)
	default:
		return b.c.Reduce(ctx, send, recv, count, o.dt, b.op, o.root)
	}
}

// half times one half of a row (warmups, then -n iterations of -m calls), reduces the time across
// ranks per -a, then runs -c checked calls and counts the wrong elements on every rank.
func (b *bench) half(ctx context.Context, count int, inPlace bool) (half, error) {
	o := b.o
	var h half
	send, recv := b.buffers(count, inPlace)
	b.fill(send, recv, count, inPlace)
	for i := 0; i < o.warmup; i++ {
		if err := b.call(ctx, send, recv, count); err != nil {
			return h, err
		}
		b.noteSwitch()
	}
	if _, err := b.allReduceInt64(ctx, 0, kernels.Sum); err != nil { // barrier
		return h, err
	}
	var iters []float64
	if o.perIter {
		iters = make([]float64, 0, o.iters)
	}
	cpu0 := b.cpuTime()
	start := time.Now()
	last := start
	for i := 0; i < o.iters; i++ {
		for j := 0; j < o.agg; j++ {
			if err := b.call(ctx, send, recv, count); err != nil {
				return h, err
			}
			b.noteSwitch()
		}
		if o.perIter {
			now := time.Now()
			iters = append(iters, float64(now.Sub(last).Nanoseconds())/1e3/float64(o.agg))
			last = now
		}
	}
	us := float64(time.Since(start).Nanoseconds()) / 1e3 / float64(o.iters*o.agg)
	if o.cpuTime {
		us = float64((b.cpuTime() - cpu0).Nanoseconds()) / 1e3 / float64(o.iters*o.agg)
	}
	var err error
	switch o.average {
	case 1:
		us, err = b.allReduceFloat64(ctx, us, kernels.Sum)
		us /= float64(b.n)
	case 2:
		us, err = b.allReduceFloat64(ctx, us, kernels.Min)
	case 3:
		us, err = b.allReduceFloat64(ctx, us, kernels.Max)
	}
	if err != nil {
		return h, err
	}
	h.us = us
	if o.perIter {
		slices.Sort(iters)
		h.iMin, h.iMax = iters[0], iters[len(iters)-1]
		h.iP99 = iters[min(len(iters)-1, int(math.Ceil(0.99*float64(len(iters))))-1)]
		mean, sq := 0.0, 0.0
		for _, v := range iters {
			mean += v
		}
		mean /= float64(len(iters))
		for _, v := range iters {
			sq += (v - mean) * (v - mean)
		}
		if mean > 0 {
			h.iCV = 100 * math.Sqrt(sq/float64(len(iters))) / mean
		}
	}
	for i := 0; i < o.check; i++ {
		b.fill(send, recv, count, inPlace)
		if err := b.call(ctx, send, recv, count); err != nil {
			return h, err
		}
		if b.corrupt && count > 0 {
			recv[b.es-1] ^= 0x40 // the test hook: one wrong element
		}
		wrong := b.countWrong(recv, count)
		all, err := b.allReduceInt64(ctx, wrong, kernels.Sum)
		if err != nil {
			return h, err
		}
		h.wrong += all
	}
	return h, nil
}
