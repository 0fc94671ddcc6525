package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/internal/svgplot"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/report"
)

// runMap prints, for a topology and class, the plan at each power of two in [--min, --max], then
// every crossover (the exact first size of each new algorithm/protocol), and optionally writes an
// SVG of every legal cell's predicted time with the argmin traced.
func runMap(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := newCommand("map", stderr, false)
	minS := c.fs.String("min", "8", "smallest size")
	maxS := c.fs.String("max", "4G", "largest size")
	svgPath := c.outputFile("svg", "write an SVG plot of predicted time per cell to this file")
	s, cls, pl, help, err := c.parse(args)
	if help || err != nil {
		return err
	}
	lo, err := parseBytes("--min", *minS)
	if err != nil {
		return err
	}
	hi, err := parseBytes("--max", *maxS)
	if err != nil {
		return err
	}
	if lo < 1 || hi < lo || hi > planner.MaxBytes {
		return usagef("--min %d and --max %d: want 1 <= min <= max <= %d", lo, hi, planner.MaxBytes)
	}
	pr, err := prepare(ctx, pl, cls)
	if err != nil {
		return err
	}
	dt, err := pr.Compile()
	if err != nil {
		return usageError{err}
	}
	fmt.Fprintf(stdout, "%s %s %s, pipe ops %d, on %s (%s, %d ranks), %s .. %s\n", cls.Coll, cls.Dtype, cls.Op,
		cls.PipeOps, s.Source, report.Plural(s.Topo.NNodes, "node"), s.Topo.NRanks, bytesize.Format(lo), bytesize.Format(hi))
	if line := s.OverlayLine(pl); line != "" {
		fmt.Fprintf(stdout, "overlay: %s\n", line)
	}
	fmt.Fprintf(stdout, "assumed: %s\n", s.AssumedLine())
	if rel := s.ReleaseName(); rel != "" {
		fmt.Fprintf(stdout, "nccl: priced by NCCL %s's model (docs/releases.md)\n", rel)
	}
	if name, note := pr.Tuner(); name != "" {
		fmt.Fprintf(stdout, "tuner: %s\n", strings.TrimSpace(name+" "+note))
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "bytes\tsize\tplan\ttime_us\tchannels\tthreads\tchunk\t")
	for _, n := range sizesPow2(lo, hi) {
		p, err := pr.Explain(n)
		if err != nil {
			return usageError{err}
		}
		fmt.Fprintf(tw, "%d\t%s\t%s/%s\t%.2f\t%d\t%d\t%d\t%s\n", n, bytesize.Format(n), p.Algo, p.Proto, p.TimeUS,
			p.Channels, p.Threads, p.ChunkBytes, report.ForcedNote(p.Forced))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "\ncrossovers (first size of the new plan):")
	prev := dt.Lookup(lo)
	for _, e := range dt.Entries() {
		if e.Lo <= lo || e.Lo > hi {
			continue
		}
		if e.Algo != prev.Algo || e.Proto != prev.Proto {
			p, err := pr.Explain(e.Lo)
			if err != nil {
				return usageError{err}
			}
			fmt.Fprintf(stdout, "  %12d B  %s/%s -> %s/%s%s\n", e.Lo, prev.Algo, prev.Proto, e.Algo, e.Proto, report.ForcedNote(p.Forced))
		}
		prev = e.Decision
	}
	spans, err := forcedSpans(pr, dt, lo, hi)
	if err != nil {
		return usageError{err}
	}
	if len(spans) > 0 {
		fmt.Fprintln(stdout, "\nforced (the pick did not win on cost; times are the model's):")
		for _, sp := range spans {
			fmt.Fprintf(stdout, "  %s .. %s  %s forced by %s\n", bytesize.Format(sp.lo), bytesize.Format(sp.hi), sp.cell, sp.by)
		}
	}
	if *svgPath != "" {
		svg, err := plotSVG(pr, lo, hi, spans, fmt.Sprintf("%s %s on %s", cls.Coll, cls.Dtype, s.Source))
		if err != nil {
			return usageError{err}
		}
		if err := os.WriteFile(*svgPath, []byte(svg), 0o644); err != nil {
			return fmt.Errorf("map: %w", err)
		}
		fmt.Fprintf(stdout, "\nwrote %s\n", *svgPath)
	}
	return nil
}

// forcedSpan is a run of sizes [lo, hi] (both included) whose pick, cell, was forced by by.
type forcedSpan struct {
	lo, hi int64
	cell   planner.Cell
	by     planner.Forcing
}

// forcedSpans lists the maximal runs of sizes in [lo, hi] whose pick was forced, one cell and one
// forcing each. Forcing can change only where the decision does (the table's entries) or where the
// tuner's edits do (its interval edges), so one plan per piece between those edges decides.
func forcedSpans(pr *planner.Prepared, dt *planner.DecisionTable, lo, hi int64) ([]forcedSpan, error) {
	edges := []int64{lo}
	add := func(b int64) {
		if b > lo && b <= hi {
			edges = append(edges, b)
		}
	}
	for _, e := range dt.Entries() {
		add(e.Lo)
	}
	for _, iv := range pr.Intervals() {
		add(iv.Lo)
		add(iv.Hi)
	}
	slices.Sort(edges)
	edges = slices.Compact(edges)
	var out []forcedSpan
	for i, b := range edges {
		end := hi
		if i+1 < len(edges) {
			end = edges[i+1] - 1
		}
		p, err := pr.Explain(b)
		if err != nil {
			return nil, err
		}
		if p.Forced == planner.NotForced {
			continue
		}
		cell := planner.Cell{Algo: p.Algo, Proto: p.Proto}
		if k := len(out) - 1; k >= 0 && out[k].hi == b-1 && out[k].cell == cell && out[k].by == p.Forced {
			out[k].hi = end
			continue
		}
		out = append(out, forcedSpan{lo: b, hi: end, cell: cell, by: p.Forced})
	}
	return out, nil
}

// sizesPow2 lists lo, the powers of two in (lo, hi), and hi.
func sizesPow2(lo, hi int64) []int64 {
	out := []int64{lo}
	for p := int64(1); p < hi && p > 0; p <<= 1 {
		if p > lo {
			out = append(out, p)
		}
	}
	if hi != lo {
		out = append(out, hi)
	}
	return out
}

// forcedFill shades the forced spans of the map's SVG.
const forcedFill = "#fdd49e"

// plotSVG draws log2(bytes) against log10(time_us) for every legal cell, sampled 16 times an
// octave, with the argmin drawn over them and the forced spans shaded behind.
func plotSVG(pr *planner.Prepared, lo, hi int64, forced []forcedSpan, title string) (string, error) {
	const w, h, mr = 960.0, 600.0, 190.0
	var xs []int64
	for x := math.Log2(float64(lo)); ; x += 1.0 / 16 {
		n := int64(math.Round(math.Exp2(x)))
		if n > hi || x > math.Log2(float64(hi)) {
			break
		}
		if len(xs) == 0 || n != xs[len(xs)-1] {
			xs = append(xs, n)
		}
	}
	if xs[len(xs)-1] != hi {
		xs = append(xs, hi)
	}
	type series struct {
		name string
		pts  [][2]float64
	}
	var all []series
	ymin, ymax := math.Inf(1), math.Inf(-1)
	m := pr.Menu()
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			if m.Cells[a][p].Reason != "" {
				continue
			}
			s := series{name: a.String() + "/" + p.String()}
			for _, n := range xs {
				if t := m.Time(a, p, n); t > 0 {
					s.pts = append(s.pts, [2]float64{math.Log2(float64(n)), math.Log10(float64(t))})
				}
			}
			all = append(all, s)
		}
	}
	best := series{name: "argmin"}
	for _, n := range xs {
		plan, err := pr.Explain(n)
		if err != nil {
			return "", err
		}
		if plan.TimeUS > 0 {
			best.pts = append(best.pts, [2]float64{math.Log2(float64(n)), math.Log10(float64(plan.TimeUS))})
		}
	}
	for _, s := range append(all, best) {
		for _, p := range s.pts {
			ymin, ymax = math.Min(ymin, p[1]), math.Max(ymax, p[1])
		}
	}
	if math.IsInf(ymin, 0) {
		return "", fmt.Errorf("map: no legal cell to plot")
	}
	x0, x1 := math.Log2(float64(lo)), math.Log2(float64(hi))
	p := svgplot.New(title, w, h, mr, x0, x1, ymin, ymax, 2)
	var forcings []planner.Forcing // in the order first seen, for the legend
	for _, sp := range forced {
		// The span covers [lo, hi+1) on the size axis, at least 2 px wide, behind the curves.
		xa, xb := p.X(math.Log2(float64(sp.lo))), p.X(math.Log2(float64(min(sp.hi+1, hi))))
		p.Raw(`<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="%s" opacity="0.45"><title>%s forced by %s</title></rect>`+"\n",
			xa, p.MT, math.Max(xb-xa, 2), h-p.MT-p.MB, forcedFill, svgplot.Escape(sp.cell.String()), svgplot.Escape(sp.by.String()))
		if !slices.Contains(forcings, sp.by) {
			forcings = append(forcings, sp.by)
		}
	}
	for i, s := range all {
		c := svgplot.Colors[i%len(svgplot.Colors)]
		p.Polyline(s.pts, c, 1.5, `stroke-dasharray="5,3"`)
		p.Raw(`<line x1="%g" x2="%g" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%g" y="%d">%s</text>`+"\n",
			w-mr+10, w-mr+30, 50+18*i, 50+18*i, c, w-mr+35, 54+18*i, svgplot.Escape(s.name))
	}
	p.Polyline(best.pts, "black", 3.5, `opacity="0.55"`)
	p.Raw(`<line x1="%g" x2="%g" y1="%d" y2="%d" stroke="black" stroke-width="3.5" opacity="0.55"/><text x="%g" y="%d">argmin (pick)</text>`+"\n",
		w-mr+10, w-mr+30, 50+18*len(all), 50+18*len(all), w-mr+35, 54+18*len(all))
	for i, by := range forcings {
		y := 50 + 18*(len(all)+1+i)
		p.Raw(`<rect x="%g" y="%d" width="20" height="10" fill="%s" opacity="0.45"/><text x="%g" y="%d">forced by %s</text>`+"\n",
			w-mr+10, y-5, forcedFill, w-mr+35, y+4, svgplot.Escape(by.String()))
	}
	return p.String("message size (model nBytes)"), nil
}
