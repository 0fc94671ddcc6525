package calibrate

import (
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/svgplot"
	"github.com/collplan/collplan/planner"
)

// PlotSVG draws, log-log, every point of pts (circles, one colour per series) with the fitted
// model's time (solid) and the prior's (dashed), over the measured size range. A series is one
// pinned cell, or one set of cells that protocol-free or free sweeps allow: its points are the
// fastest of those cells as NCCL chose, and its curves the minimum over them (the envelope the fit
// uses), labelled with "*" for what the pin leaves free ("AllReduce/TREE/*"). fitted and prior are
// menus per collective (Menus, or PricedMenus where a pin lifted the LL128 gate); prior may be nil.
func PlotSVG(w io.Writer, fitted, prior map[costmodel.Coll]*planner.Menu, pts []Point, title string) error {
	const wd, ht, mr = 960.0, 600.0, 230.0
	type series struct {
		label    string
		cells    []Cell
		meas     [][2]float64
		fit, pri [][2]float64
	}
	byKey := map[string]*series{}
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, p := range pts {
		if len(p.Cells) == 0 || p.TimeUS <= 0 || p.Bytes <= 0 {
			continue
		}
		label := seriesLabel(p.Cells)
		key := label + "|" + fmt.Sprint(p.Cells)
		s := byKey[key]
		if s == nil {
			s = &series{label: label, cells: p.Cells}
			byKey[key] = s
		}
		s.meas = append(s.meas, [2]float64{math.Log2(float64(p.Bytes)), math.Log10(p.TimeUS)})
		lo, hi = min(lo, p.Bytes), max(hi, p.Bytes)
	}
	if len(byKey) == 0 {
		return fmt.Errorf("calibrate: plot: no measured point to draw")
	}
	var all []*series
	for _, s := range byKey {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		switch {
		case a.cells[0] != b.cells[0]:
			return cellLess(a.cells[0], b.cells[0])
		case a.label != b.label:
			return a.label < b.label
		}
		return len(a.cells) < len(b.cells)
	})
	var xs []int64
	for x := math.Log2(float64(lo)); x <= math.Log2(float64(hi))+1e-9; x += 1.0 / 8 {
		n := int64(math.Round(math.Exp2(x)))
		if len(xs) == 0 || n != xs[len(xs)-1] {
			xs = append(xs, n)
		}
	}
	curve := func(m map[costmodel.Coll]*planner.Menu, cells []Cell) [][2]float64 {
		var out [][2]float64
		if m == nil || m[cells[0].Coll] == nil {
			return nil
		}
		menu := m[cells[0].Coll]
		for _, n := range xs {
			best := math.Inf(1)
			for _, c := range cells {
				if t := menu.Time(c.Algo, c.Proto, n); t > 0 {
					best = math.Min(best, float64(t))
				}
			}
			if !math.IsInf(best, 1) {
				out = append(out, [2]float64{math.Log2(float64(n)), math.Log10(best)})
			}
		}
		return out
	}
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, s := range all {
		s.fit, s.pri = curve(fitted, s.cells), curve(prior, s.cells)
		for _, l := range [][][2]float64{s.meas, s.fit, s.pri} {
			for _, p := range l {
				ymin, ymax = math.Min(ymin, p[1]), math.Max(ymax, p[1])
			}
		}
	}
	x0, x1 := math.Log2(float64(lo)), math.Log2(float64(hi))
	pl := svgplot.New(title, wd, ht, mr, x0, x1, ymin, ymax, math.Max(1, math.Ceil((x1-x0)/12)))
	for i, s := range all {
		col := svgplot.Colors[i%len(svgplot.Colors)]
		pl.Polyline(s.pri, col, 1, `stroke-dasharray="4,4" opacity="0.6"`)
		pl.Polyline(s.fit, col, 2, "")
		for _, p := range s.meas {
			pl.Raw(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", pl.X(p[0]), pl.Y(p[1]), col)
		}
		y := 50 + 18*i
		pl.Raw(`<line x1="%g" x2="%g" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><circle cx="%g" cy="%d" r="3" fill="%s"/><text x="%g" y="%d">%s</text>`+"\n",
			wd-mr+10, wd-mr+30, y, y, col, wd-mr+20, y, col, wd-mr+35, y+4, svgplot.Escape(s.label))
	}
	y := 50 + 18*len(all) + 10
	pl.Raw(`<text x="%g" y="%d">dots: measured; solid: fitted;</text><text x="%g" y="%d">dashed: prior table</text>`+"\n",
		wd-mr+10, y, wd-mr+10, y+16)
	_, err := io.WriteString(w, pl.String("message size (bytes)"))
	return err
}

// seriesLabel names a set of cells of one collective: the cell itself when it is one, else
// COLL/ALGO/PROTO with "*" where the cells differ ("AllReduce/TREE/*").
func seriesLabel(cells []Cell) string {
	if len(cells) == 1 {
		return cells[0].String()
	}
	algo, proto := cells[0].Algo.String(), cells[0].Proto.String()
	for _, c := range cells[1:] {
		if c.Algo.String() != algo {
			algo = "*"
		}
		if c.Proto.String() != proto {
			proto = "*"
		}
	}
	return fmt.Sprintf("%s/%s/%s", cells[0].Coll, algo, proto)
}
