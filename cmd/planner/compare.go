package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
)

// measured holds, per (collective, size), the measured time of each pinned cell.
type measured map[measureKey]map[planner.Cell]float64

type measureKey struct {
	coll  capabilities.Coll
	bytes int64
}

// runCompare scores two tuners offline against pinned sweeps: at every measured size, each tuner's
// pick, the measured time of that pick, and its regret against the fastest measured cell.
func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("compare", stderr, false)
	a := c.fs.String("a", "none", "tuner A: none, NAME or PATH")
	aCfg := c.fs.String("a-config", "", "configuration file for tuner A")
	b := c.fs.String("b", "none", "tuner B: none, NAME or PATH")
	bCfg := c.fs.String("b-config", "", "configuration file for tuner B")
	sweeps := c.fs.String("sweeps", "", "directory of sweeps, or a sweeps.toml manifest (pinned runs are the ground truth)")
	s, cls, _, help, err := c.parse(args)
	if help || err != nil {
		return err
	}
	if !c.tf.tuner.None() {
		return usagef("compare takes its tuners as --a and --b, not --tuner")
	}
	if *sweeps == "" {
		return usagef("--sweeps is required")
	}
	all, problems, err := calibrate.LoadSweeps(*sweeps)
	if err != nil {
		return usageError{err}
	}
	for _, p := range problems {
		fmt.Fprintln(stderr, "planner: compare:", p)
	}
	meas, skipped := groundTruth(all, &s.topo)
	for _, why := range skipped {
		fmt.Fprintln(stderr, "planner: compare: skipped", why)
	}
	if len(meas) == 0 {
		return usagef("%s: no pinned (algorithm and protocol) sweep for this topology", *sweeps)
	}
	var sides [2]*side
	for i, t := range [][2]string{{*a, *aCfg}, {*b, *bCfg}} {
		tf := tunerFlags{plugin.Spec{Name: t[0], Config: t[1]}}
		if s.tuner, err = tf.client(stderr); err != nil {
			return err
		}
		pl, err := s.planner()
		if err != nil {
			return err
		}
		sides[i] = &side{name: t[0], label: 'A' + rune(i), pl: pl, prepared: map[capabilities.Coll]*planner.Prepared{}}
	}
	keys := make([]measureKey, 0, len(meas))
	for k := range meas {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y measureKey) int {
		if x.coll != y.coll {
			return int(x.coll) - int(y.coll)
		}
		return int(min(1, max(-1, x.bytes-y.bytes)))
	})
	// Every tuner answers every collective before anything is printed: a tuner that fails is an
	// error, not a table half scored on the built-in policy.
	for _, k := range keys {
		for _, sd := range sides {
			if _, err := sd.pick(ctx, cls, k); err != nil {
				return err
			}
		}
	}
	fmt.Fprintf(stdout, "%s, %s %s, pipe ops %d: tuner A = %s, tuner B = %s; ground truth: %d pinned sizes from %s\n",
		s.source, cls.Dtype, cls.Op, cls.PipeOps, sides[0].name, sides[1].name, len(keys), *sweeps)
	if line := s.overlayLine(sides[0].pl); line != "" {
		fmt.Fprintf(stdout, "overlay: %s\n", line)
	}
	fmt.Fprintf(stdout, "assumed: %s\n", s.assumedLine())
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "coll\tbytes\tmeasured best\tus\tA pick\tus\tA regret\tB pick\tus\tB regret\t")
	differ := 0
	for _, k := range keys {
		cells := meas[k]
		best, bestT := bestCell(cells)
		row := fmt.Sprintf("%s\t%s\t%s\t%.2f", k.coll, bytesize.Format(k.bytes), best, bestT)
		var picks [2]planner.Cell
		for i, sd := range sides {
			pick, err := sd.pick(ctx, cls, k)
			if err != nil {
				return err
			}
			picks[i] = pick
			t, ok := cells[pick]
			if !ok {
				sd.unmeasured++
				row += fmt.Sprintf("\t%s\t-\tnot measured", pick)
				continue
			}
			r := t/bestT - 1
			sd.regrets = append(sd.regrets, r)
			sd.total += t
			row += fmt.Sprintf("\t%s\t%.2f\t%.1f%%", pick, t, 100*r)
		}
		if picks[0] != picks[1] {
			differ++
		}
		fmt.Fprintln(tw, row+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\npicks differ at %d of %d sizes\n", differ, len(keys))
	for i, sd := range sides {
		med, mx := summary(sd.regrets)
		fmt.Fprintf(stdout, "tuner %c (%s): median regret %.1f%%, max %.1f%% over %d measured picks (%d picks not measured)\n",
			'A'+i, sd.name, 100*med, 100*mx, len(sd.regrets), sd.unmeasured)
	}
	fmt.Fprintln(stdout, verdict(sides[0], sides[1]))
	return nil
}

// side is one tuner's planner and its score.
type side struct {
	name  string
	label rune // 'A' or 'B'

	pl         *planner.Planner
	prepared   map[capabilities.Coll]*planner.Prepared
	regrets    []float64
	total      float64
	unmeasured int
}

// pick is the tuner's plan for a measured size (one tuner call per collective).
func (sd *side) pick(ctx context.Context, cls planner.Class, k measureKey) (planner.Cell, error) {
	pr, ok := sd.prepared[k.coll]
	if !ok {
		cls.Coll = k.coll
		var err error
		if pr, err = prepare(ctx, sd.pl, cls); err != nil {
			return planner.Cell{}, fmt.Errorf("tuner %c: %w", sd.label, err)
		}
		sd.prepared[k.coll] = pr
	}
	p, err := pr.Explain(k.bytes)
	if err != nil {
		return planner.Cell{}, err
	}
	return planner.Cell{Algo: p.Algo, Proto: p.Proto}, nil
}

// groundTruth collects the measured times of sweeps pinned to one algorithm and one protocol, for
// the topology's node and rank counts (sweeps that do not say are taken as matching). It uses the
// in-place half when valid, else the out-of-place one, and the fastest of repeated measurements.
func groundTruth(sweeps []*calibrate.Sweep, t *capabilities.Topology) (measured, []string) {
	meas := measured{}
	var skipped []string
	for _, sw := range sweeps {
		name := fmt.Sprintf("%s:%d", sw.File, sw.Line)
		cell, ok := pinnedCell(sw.Pin)
		switch {
		case !sw.CollKnown:
			skipped = append(skipped, name+": collective unknown")
			continue
		case !ok:
			skipped = append(skipped, fmt.Sprintf("%s: not pinned to one algorithm and one protocol (NCCL_ALGO=%q NCCL_PROTO=%q)", name, sw.Pin.Algo, sw.Pin.Proto))
			continue
		case sw.Nodes > 0 && sw.Nodes != t.NNodes, sw.Ranks > 0 && sw.Ranks != t.NRanks:
			skipped = append(skipped, fmt.Sprintf("%s: %d nodes, %d ranks, not this topology's %d and %d", name, sw.Nodes, sw.Ranks, t.NNodes, t.NRanks))
			continue
		}
		for _, r := range sw.Rows {
			h := r.IP
			if !h.Valid {
				h = r.OOP
			}
			if !h.Valid || r.Bytes <= 0 {
				continue
			}
			k := measureKey{sw.Coll, r.Bytes}
			if meas[k] == nil {
				meas[k] = map[planner.Cell]float64{}
			}
			if old, ok := meas[k][cell]; !ok || h.TimeUS < old {
				meas[k][cell] = h.TimeUS
			}
		}
	}
	return meas, skipped
}

// pinnedCell is the single cell a pin names, if it names exactly one algorithm and one protocol.
func pinnedCell(p calibrate.Pin) (planner.Cell, bool) {
	single := func(s string) bool { return s != "" && !strings.ContainsAny(s, "^,;:") }
	if !single(p.Algo) || !single(p.Proto) {
		return planner.Cell{}, false
	}
	a, errA := capabilities.ParseAlgo(p.Algo)
	pr, errP := capabilities.ParseProto(p.Proto)
	if errA != nil || errP != nil {
		return planner.Cell{}, false
	}
	return planner.Cell{Algo: a, Proto: pr}, true
}

// bestCell is the fastest measured cell (ties to the lower (algo, proto)).
func bestCell(cells map[planner.Cell]float64) (planner.Cell, float64) {
	var best planner.Cell
	bestT := math.Inf(1)
	for c, t := range cells {
		if t < bestT || (t == bestT && (c.Algo < best.Algo || (c.Algo == best.Algo && c.Proto < best.Proto))) {
			best, bestT = c, t
		}
	}
	return best, bestT
}

// summary is the median and maximum of regrets (0, 0 when empty).
func summary(rs []float64) (median, maxR float64) {
	if len(rs) == 0 {
		return 0, 0
	}
	s := slices.Clone(rs)
	slices.Sort(s)
	n := len(s)
	median = s[n/2]
	if n%2 == 0 {
		median = (s[n/2-1] + s[n/2]) / 2
	}
	return median, s[n-1]
}

// verdict names the winner: lower median regret, then lower max, then lower total measured time of
// the picks; picks that were not measured make the comparison incomplete.
func verdict(a, b *side) string {
	if a.unmeasured > 0 || b.unmeasured > 0 {
		return "verdict: incomplete, some picks were never measured (pin sweeps for those cells)"
	}
	ma, xa := summary(a.regrets)
	mb, xb := summary(b.regrets)
	switch {
	case ma < mb || (ma == mb && xa < xb) || (ma == mb && xa == xb && a.total < b.total):
		return fmt.Sprintf("verdict: A (%s) wins", a.name)
	case mb < ma || (ma == mb && xb < xa) || (ma == mb && xa == xb && b.total < a.total):
		return fmt.Sprintf("verdict: B (%s) wins", b.name)
	}
	return "verdict: tie"
}
