package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// abResamples and abLevel are the bootstrap's resamples and confidence level.
const (
	abResamples = 2000
	abLevel     = 0.95
)

// abSweep is --ab: at each size, -ab-runs timed runs of each policy, interleaved A, B, A, B ... on
// one communicator (every rank swaps the tables in at the same call), a checked call of each, and
// a row with the medians and a bootstrap confidence interval of median(B) - median(A).
func (b *bench) abSweep(ctx, stopCtx context.Context) error {
	o := b.o
	w := b.out
	fmt.Fprintf(w, "# A/B: A = %s (table hash %016x%s), B = %s (table hash %016x%s)\n", o.ab[0], tableHash(b.ab[0]), fallback(b.ab[0]),
		o.ab[1], tableHash(b.ab[1]), fallback(b.ab[1]))
	if tableHash(b.ab[0]) == tableHash(b.ab[1]) {
		fmt.Fprintf(w, "# A/B: warning: the two policies compile to the same table; any difference is noise\n")
	}
	fmt.Fprintf(w, "# A/B: %d runs of each per size, interleaved A,B,A,B; a run is %d warmup + %d timed iterations of %d calls, out of place;\n",
		o.abRuns, o.warmup, o.iters, o.agg)
	fmt.Fprintf(w, "# A/B: %d bootstrap resamples (seed %d), %.0f%% CI of median(B) - median(A); verdict only when the CI excludes 0\n",
		abResamples, o.abSeed, 100*abLevel)
	fmt.Fprintf(w, "#%11s  %-16s  %-16s  %10s  %10s  %9s  %21s  %6s  %s\n", "size (B)", "A cell", "B cell",
		"A med(us)", "B med(us)", "B-A(us)", "95% CI of B-A (us)", "B/A", "verdict")
	for size := o.minBytes; size <= o.maxBytes; {
		stop, err := b.agreeStop(ctx, stopCtx.Err() != nil)
		if err != nil {
			return err
		}
		if stop {
			break
		}
		count, printed := b.counts(size)
		send, recv := b.buffers(int(count), false)
		var times [2][]float64
		var cells [2]string
		for r := 0; r < o.abRuns; r++ {
			for p := 0; p < 2; p++ {
				us, c, err := b.abRun(ctx, b.ab[p], send, recv, int(count))
				if err != nil {
					return fmt.Errorf("%d bytes, policy %c: %w", printed, 'A'+p, err)
				}
				times[p] = append(times[p], us)
				cells[p] = c
			}
		}
		for p := 0; p < 2; p++ {
			for i := 0; i < o.check; i++ {
				if err := b.c.SwapTables(b.c.Seq()+1, []*planner.DecisionTable{b.ab[p]}); err != nil {
					return err
				}
				b.fill(send, recv, int(count), false)
				if err := b.call(ctx, send, recv, int(count)); err != nil {
					return err
				}
				if b.corrupt && count > 0 {
					recv[b.es-1] ^= 0x40
				}
				all, err := b.allReduceInt64(ctx, b.countWrong(recv, int(count)), kernels.Sum)
				if err != nil {
					return err
				}
				b.wrong += all
			}
		}
		ma, mb := median(times[0]), median(times[1])
		lo, hi := bootstrapDiff(times[0], times[1], abResamples, abLevel, o.abSeed^uint64(printed))
		verdict := "no significant difference"
		switch {
		case lo > 0:
			verdict = "A faster"
		case hi < 0:
			verdict = "B faster"
		}
		ratio := 0.0
		if ma > 0 {
			ratio = mb / ma
		}
		fmt.Fprintf(w, "%12d  %-16s  %-16s  %10.2f  %10.2f  %9.2f  [%9.2f, %9.2f]  %6.3f  %s\n",
			printed, cells[0], cells[1], ma, mb, mb-ma, lo, hi, ratio, verdict)
		if o.stepF > 1 {
			if size == 0 {
				size = 1
			}
			size *= o.stepF
		} else {
			size += o.stepB
		}
	}
	return nil
}

func fallback(dt *planner.DecisionTable) string {
	if dt.TunerNote != "" {
		return "; FALLBACK: " + dt.TunerNote
	}
	return ""
}

// abRun swaps dt in and times one run: warmups, a barrier, -n iterations of -m calls; the time per
// call is reduced across ranks per -a. It returns the time and the cell the calls ran.
func (b *bench) abRun(ctx context.Context, dt *planner.DecisionTable, send, recv []byte, count int) (float64, string, error) {
	o := b.o
	if err := b.c.SwapTables(b.c.Seq()+1, []*planner.DecisionTable{dt}); err != nil {
		return 0, "", err
	}
	for i := 0; i < o.warmup; i++ {
		if err := b.call(ctx, send, recv, count); err != nil {
			return 0, "", err
		}
	}
	if _, err := b.allReduceInt64(ctx, 0, kernels.Sum); err != nil { // barrier
		return 0, "", err
	}
	start := time.Now()
	for i := 0; i < o.iters*o.agg; i++ {
		if err := b.call(ctx, send, recv, count); err != nil {
			return 0, "", err
		}
	}
	us := float64(time.Since(start).Nanoseconds()) / 1e3 / float64(o.iters*o.agg)
	c := cell(b.c.LastPlan())
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
	return us, c, err
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// bootstrapDiff is the percentile bootstrap interval of median(b) - median(a) at level, from
// resamples resamples of each sample (with replacement), seeded.
func bootstrapDiff(a, b []float64, resamples int, level float64, seed uint64) (lo, hi float64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	ra, rb := make([]float64, len(a)), make([]float64, len(b))
	ds := make([]float64, resamples)
	for i := range ds {
		for j := range ra {
			ra[j] = a[rng.IntN(len(a))]
		}
		for j := range rb {
			rb[j] = b[rng.IntN(len(b))]
		}
		ds[i] = median(rb) - median(ra)
	}
	slices.Sort(ds)
	tail := (1 - level) / 2
	li := int(tail * float64(resamples))
	hi_ := int((1-tail)*float64(resamples)) - 1
	return ds[li], ds[max(li, min(hi_, resamples-1))]
}
