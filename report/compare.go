package report

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
)

type measureKey struct {
	coll  capabilities.Coll
	bytes int64
}

// CompareTuner is one side of a comparison: its name as printed and how to open its client (nil:
// the built-in policy).
type CompareTuner struct {
	Name string
	Open func() (*plugin.Client, error)
}

// Compare is planner compare after its flags: it scores two tuners against the sweeps (read from
// sweepsName, their problems already listed) on s's topology, at every measured size each one's
// pick, the measured time of that pick and its regret against the fastest run, and prints the
// table and the verdict to stdout (skipped sweeps to stderr). A tuner that fails is an error,
// never the built-in policy's answer under the tuner's name.
func Compare(ctx context.Context, s *Setup, cls planner.Class, tuners [2]CompareTuner, sweepsName string, all []*calibrate.Sweep,
	half string, stdout, stderr io.Writer) error {
	meas, skipped, err := groundTruth(ctx, all, s, half)
	if err != nil {
		return err
	}
	for _, why := range skipped {
		fmt.Fprintln(stderr, "planner: compare: skipped", why)
	}
	if len(meas) == 0 {
		return fmt.Errorf("%s: no measured size for this topology (%s half)", sweepsName, half)
	}
	var sides [2]*side
	for i, t := range tuners {
		tc, err := t.Open()
		if err != nil {
			return err
		}
		pl, err := s.Planner(ctx, tc)
		if err != nil {
			return err
		}
		sides[i] = &side{name: t.Name, label: 'A' + rune(i), pl: pl, prepared: map[capabilities.Coll]*planner.Prepared{}}
	}
	keys := make([]measureKey, len(meas))
	hasDefault := false
	for i, sr := range meas {
		keys[i] = measureKey{sr.Coll, sr.Bytes}
		if _, ok := sr.Default(); ok {
			hasDefault = true
		}
	}
	// Every tuner answers every collective before anything is printed: a tuner that fails is an
	// error, not a table half scored on the built-in policy.
	for _, k := range keys {
		for _, sd := range sides {
			if _, err := sd.pick(ctx, cls, k); err != nil {
				return err
			}
		}
	}
	exact := 0
	for _, sr := range meas {
		if best := sr.Best(); best.Kind == calibrate.RunExact {
			exact++
		}
	}
	fmt.Fprintf(stdout, "%s, %s %s, pipe ops %d: tuner A = %s, tuner B = %s; ground truth: %d measured sizes (%s half) from %s\n",
		s.Source, cls.Dtype, cls.Op, cls.PipeOps, sides[0].name, sides[1].name, len(keys), half, sweepsName)
	if line := s.OverlayLine(sides[0].pl); line != "" {
		fmt.Fprintf(stdout, "overlay: %s\n", line)
	}
	fmt.Fprintf(stdout, "assumed: %s\n", s.AssumedLine())
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	head := "coll\tbytes\tmeasured best\tus\tA pick\tus\tA regret\tB pick\tus\tB regret\t"
	if hasDefault {
		head += "nccl default us\tregret\t"
	}
	fmt.Fprintln(tw, head)
	differ := 0
	var defRegrets []float64
	for i, k := range keys {
		sr := meas[i]
		best := sr.Best()
		row := fmt.Sprintf("%s\t%s\t%s\t%.2f", k.coll, bytesize.Format(k.bytes), runLabel(best), best.TimeUS)
		var picks [2]planner.Cell
		for i, sd := range sides {
			pick, err := sd.pick(ctx, cls, k)
			if err != nil {
				return err
			}
			picks[i] = pick
			r, proxy, ok := sr.Measure(calibrate.Cell{Coll: k.coll, Algo: pick.Algo, Proto: pick.Proto})
			if !ok {
				sd.unmeasured++
				row += fmt.Sprintf("\t%s\t-\tnot measured", pick)
				continue
			}
			label := pick.String()
			if proxy {
				label += " via " + r.Label()
				sd.proxied++
			}
			reg := r.TimeUS/best.TimeUS - 1
			sd.regrets = append(sd.regrets, reg)
			sd.total += r.TimeUS
			row += fmt.Sprintf("\t%s\t%.2f\t%.1f%%", label, r.TimeUS, 100*reg)
		}
		if hasDefault {
			if d, ok := sr.Default(); ok {
				reg := d.TimeUS/best.TimeUS - 1
				defRegrets = append(defRegrets, reg)
				row += fmt.Sprintf("\t%.2f\t%.1f%%", d.TimeUS, 100*reg)
			} else {
				row += "\t-\t-"
			}
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
		fmt.Fprintf(stdout, "tuner %c (%s): median regret %.1f%%, max %.1f%% over %d measured picks (%d exact, %d by proxy; %d picks not measured)\n",
			'A'+i, sd.name, 100*med, 100*mx, len(sd.regrets), len(sd.regrets)-sd.proxied, sd.proxied, sd.unmeasured)
	}
	if hasDefault {
		med, mx := summary(defRegrets)
		fmt.Fprintf(stdout, "nccl default (the free runs, the baseline to beat): median regret %.1f%%, max %.1f%% over %d sizes\n",
			100*med, 100*mx, len(defRegrets))
	}
	if exact < len(keys) || hasDefault {
		fmt.Fprintln(stdout, "(a pick \"via\" a pin is measured by a run with that algorithm-only or protocol-only pin, NCCL choosing within it; a free run is NCCL's default and measures no pick)")
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
	proxied    int // measured picks whose run is a partial one (calibrate.SizeRuns.Measure)
}

// pick is the tuner's plan for a measured size (one tuner call per collective).
func (sd *side) pick(ctx context.Context, cls planner.Class, k measureKey) (planner.Cell, error) {
	pr, ok := sd.prepared[k.coll]
	if !ok {
		cls.Coll = k.coll
		var err error
		if pr, err = sd.pl.Prepare(ctx, cls); err != nil {
			return planner.Cell{}, fmt.Errorf("tuner %c: %w", sd.label, err)
		}
		if err := pr.TunerErr(); err != nil {
			name, _ := pr.Tuner()
			return planner.Cell{}, fmt.Errorf("tuner %c: tuner %s failed: %v", sd.label, name, err)
		}
		sd.prepared[k.coll] = pr
	}
	p, err := pr.Explain(k.bytes)
	if err != nil {
		return planner.Cell{}, err
	}
	return planner.Cell{Algo: p.Algo, Proto: p.Proto}, nil
}

// groundTruth groups the sweeps' points per (collective, size) into runs (calibrate.GroupRuns)
// for the topology's node and rank counts (sweeps that do not say are taken as matching): the
// chosen half of every row, each sweep's legal cells decided by its pin (calibrate.Points), so
// pinned, algorithm-only, protocol-only and free runs are all scored.
func groundTruth(ctx context.Context, sweeps []*calibrate.Sweep, s *Setup, half string) ([]calibrate.SizeRuns, []string, error) {
	t := &s.Topo
	var skipped []string
	var keep []*calibrate.Sweep
	for _, sw := range sweeps {
		name := fmt.Sprintf("%s:%d", sw.File, sw.Line)
		switch {
		case !sw.CollKnown:
			skipped = append(skipped, name+": collective unknown")
			continue
		case sw.Nodes > 0 && sw.Nodes != t.NNodes, sw.Ranks > 0 && sw.Ranks != t.NRanks:
			skipped = append(skipped, fmt.Sprintf("%s: %d nodes, %d ranks, not this topology's %d and %d", name, sw.Nodes, sw.Ranks, t.NNodes, t.NRanks))
			continue
		}
		keep = append(keep, sw)
	}
	var cfg planner.Config
	if s.Node != nil {
		var err error
		if cfg, err = node.PlannerConfig(s.Node, t); err != nil {
			return nil, nil, err
		}
	}
	pts, probs, err := calibrate.Points(ctx, keep, t, cfg, calibrate.PointOptions{Half: half})
	if err != nil {
		return nil, nil, err
	}
	for _, p := range probs {
		skipped = append(skipped, p.Error())
	}
	return calibrate.GroupRuns(pts), skipped, nil
}

// runLabel names a run as compare prints cells: "RING/LL" for an exact run, else its
// calibrate.RunTime.Label ("NCCL_ALGO=Ring", "NCCL default").
func runLabel(r calibrate.RunTime) string {
	if r.Kind == calibrate.RunExact {
		return planner.Cell{Algo: r.Cells[0].Algo, Proto: r.Cells[0].Proto}.String()
	}
	return r.Label()
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
