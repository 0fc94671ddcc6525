package calibrate

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/bytesize"
	"github.com/collplan/collplan/planner"
)

// PlotSVG draws, log-log, every pinned point of pts (circles, one colour per cell) and the
// fitted model's time of each measured cell (solid) and the prior's (dashed), over the measured
// size range. fitted and prior are menus per collective (Menus); prior may be nil.
func PlotSVG(w io.Writer, fitted, prior map[costmodel.Coll]*planner.Menu, pts []Point, title string) error {
	const wd, ht, ml, mr, mt, mb = 960.0, 600.0, 70.0, 230.0, 40.0, 50.0
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
	ymin, ymax = math.Floor(ymin), math.Ceil(ymax)
	if ymax == ymin {
		ymax++
	}
	x0, x1 := math.Log2(float64(lo)), math.Log2(float64(hi))
	if x1 == x0 {
		x1++
	}
	px := func(x float64) float64 { return ml + (x-x0)/(x1-x0)*(wd-ml-mr) }
	py := func(y float64) float64 { return ht - mb - (y-ymin)/(ymax-ymin)*(ht-mt-mb) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", wd, ht)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="24" font-size="15">%s</text>`+"\n", ml, xmlEscape(title))
	for y := ymin; y <= ymax; y++ {
		fmt.Fprintf(&b, `<line x1="%g" x2="%g" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%g us</text>`+"\n",
			ml, wd-mr, py(y), py(y), ml-6, py(y)+4, math.Pow(10, y))
	}
	step := math.Max(1, math.Ceil((x1-x0)/12))
	for x := math.Ceil(x0); x <= x1; x += step {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#eee"/><text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n",
			px(x), px(x), mt, ht-mb, px(x), ht-mb+18, xmlEscape(strings.ReplaceAll(bytesize.Format(int64(math.Exp2(x))), " ", "")))
	}
	colors := []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78"}
	line := func(pts [][2]float64, color string, width float64, extra string) {
		if len(pts) == 0 {
			return
		}
		var ss []string
		for _, p := range pts {
			ss = append(ss, fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1])))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%g" %s points="%s"/>`+"\n", color, width, extra, strings.Join(ss, " "))
	}
	for i, c := range cells {
		s := byCell[c]
		col := colors[i%len(colors)]
		line(s.pri, col, 1, `stroke-dasharray="4,4" opacity="0.6"`)
		line(s.fit, col, 2, "")
		for _, p := range s.meas {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p[0]), py(p[1]), col)
		}
		y := 50 + 18*i
		fmt.Fprintf(&b, `<line x1="%g" x2="%g" y1="%d" y2="%d" stroke="%s" stroke-width="2"/><circle cx="%g" cy="%d" r="3" fill="%s"/><text x="%g" y="%d">%s</text>`+"\n",
			wd-mr+10, wd-mr+30, y, y, col, wd-mr+20, y, col, wd-mr+35, y+4, xmlEscape(c.String()))
	}
	y := 50 + 18*len(cells) + 10
	fmt.Fprintf(&b, `<text x="%g" y="%d">dots: measured; solid: fitted;</text><text x="%g" y="%d">dashed: prior table</text>`+"\n",
		wd-mr+10, y, wd-mr+10, y+16)
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">message size (bytes)</text>`+"\n", (ml+wd-mr)/2, ht-10)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
