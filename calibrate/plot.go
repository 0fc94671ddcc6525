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

// PlotSVG draws, log-log, every pinned point of pts (circles, one colour per cell) and the
// fitted model's time of each measured cell (solid) and the prior's (dashed), over the measured
// size range. fitted and prior are menus per collective (Menus); prior may be nil.
func PlotSVG(w io.Writer, fitted, prior map[costmodel.Coll]*planner.Menu, pts []Point, title string) error {
	const wd, ht, mr = 960.0, 600.0, 230.0
	type series struct {
		cell     Cell
		meas     [][2]float64
		fit, pri [][2]float64
	}
	byCell := map[Cell]*series{}
	lo, hi := int64(math.MaxInt64), int64(0)
	for _, p := range pts {
		if !p.Pinned() || p.TimeUS <= 0 || p.Bytes <= 0 {
			continue
		}
		c := p.Cells[0]
		s := byCell[c]
		if s == nil {
			s = &series{cell: c}
			byCell[c] = s
		}
		s.meas = append(s.meas, [2]float64{math.Log2(float64(p.Bytes)), math.Log10(p.TimeUS)})
		lo, hi = min(lo, p.Bytes), max(hi, p.Bytes)
	}
	if len(byCell) == 0 {
		return fmt.Errorf("calibrate: plot: no pinned point to draw")
	}
	var cells []Cell
	for c := range byCell {
		cells = append(cells, c)
	}
	sort.Slice(cells, func(i, j int) bool { return cellLess(cells[i], cells[j]) })
	var xs []int64
	for x := math.Log2(float64(lo)); x <= math.Log2(float64(hi))+1e-9; x += 1.0 / 8 {
		n := int64(math.Round(math.Exp2(x)))
		if len(xs) == 0 || n != xs[len(xs)-1] {
			xs = append(xs, n)
		}
	}
	curve := func(m map[costmodel.Coll]*planner.Menu, c Cell) [][2]float64 {
		var out [][2]float64
		if m == nil || m[c.Coll] == nil {
			return nil
		}
		for _, n := range xs {
			if t := m[c.Coll].Time(c.Algo, c.Proto, n); t > 0 {
				out = append(out, [2]float64{math.Log2(float64(n)), math.Log10(float64(t))})
			}
		}
		return out
	}
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, c := range cells {
		s := byCell[c]
		s.fit, s.pri = curve(fitted, c), curve(prior, c)
		for _, l := range [][][2]float64{s.meas, s.fit, s.pri} {
			for _, p := range l {
				ymin, ymax = math.Min(ymin, p[1]), math.Max(ymax, p[1])
			}
		}
	}
	x0, x1 := math.Log2(float64(lo)), math.Log2(float64(hi))
	pl := svgplot.New(title, wd, ht, mr, x0, x1, ymin, ymax, math.Max(1, math.Ceil((x1-x0)/12)))
	for i, c := range cells {
		s := byCell[c]
		col := svgplot.Colors[i%len(svgplot.Colors)]
		pl.Polyline(s.pri, col, 1, `stroke-dasharray="4,4" opacity="0.6"`)
		pl.Polyline(s.fit, col, 2, "")
		for _, p := range s.meas {
			pl.Raw(`<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", pl.X(p[0]), pl.Y(p[1]), col)
		}
		y := 50 + 18*i
		pl.Raw(`<line x1="%g" x2="%g" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><circle cx="%g" cy="%d" r="3" fill="%s"/><text x="%g" y="%d">%s</text>`+"\n",
			wd-mr+10, wd-mr+30, y, y, col, wd-mr+20, y, col, wd-mr+35, y+4, svgplot.Escape(c.String()))
	}
	y := 50 + 18*len(cells) + 10
	pl.Raw(`<text x="%g" y="%d">dots: measured; solid: fitted;</text><text x="%g" y="%d">dashed: prior table</text>`+"\n",
		wd-mr+10, y, wd-mr+10, y+16)
	_, err := io.WriteString(w, pl.String("message size (bytes)"))
	return err
}
