// Package svgplot draws the log-log plots collplan prints: message size (log2 bytes) across,
// time (log10 us) up, a legend column on the right. It writes plain SVG text.
package svgplot

import (
	"fmt"
	"math"
	"strings"

	"github.com/collplan/collplan/internal/bytesize"
)

// Colors is the series palette, cycled.
var Colors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#aec7e8", "#ffbb78"}

// Plot is one figure. Points are (log2 bytes, log10 us).
type Plot struct {
	W, H, ML, MR, MT, MB float64 // size and margins; MR holds the legend
	x0, x1, y0, y1       float64
	b                    strings.Builder
}

// New starts a figure of size w x h with a right margin mr for the legend, over x in [x0, x1]
// (log2 bytes) and y in [ymin, ymax] (log10 us, widened to whole decades): header, title, a grid
// line per decade of time and per xStep of log2 size, labelled.
func New(title string, w, h, mr, x0, x1, ymin, ymax, xStep float64) *Plot {
	p := &Plot{W: w, H: h, ML: 70, MR: mr, MT: 40, MB: 50, x0: x0, x1: x1, y0: math.Floor(ymin), y1: math.Ceil(ymax)}
	if p.y1 == p.y0 {
		p.y1++
	}
	if p.x1 == p.x0 {
		p.x1++
	}
	fmt.Fprintf(&p.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&p.b, `<rect width="100%%" height="100%%" fill="white"/><text x="%g" y="24" font-size="15">%s</text>`+"\n", p.ML, Escape(title))
	for y := p.y0; y <= p.y1; y++ {
		fmt.Fprintf(&p.b, `<line x1="%g" x2="%g" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%g us</text>`+"\n",
			p.ML, w-mr, p.Y(y), p.Y(y), p.ML-6, p.Y(y)+4, math.Pow(10, y))
	}
	for x := math.Ceil(x0); x <= x1; x += xStep {
		fmt.Fprintf(&p.b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="#eee"/><text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n",
			p.X(x), p.X(x), p.MT, h-p.MB, p.X(x), h-p.MB+18, Escape(strings.ReplaceAll(bytesize.Format(int64(math.Exp2(x))), " ", "")))
	}
	return p
}

// X and Y map plot coordinates to SVG pixels.
func (p *Plot) X(x float64) float64 { return p.ML + (x-p.x0)/(p.x1-p.x0)*(p.W-p.ML-p.MR) }

// Y maps log10 us to a pixel row.
func (p *Plot) Y(y float64) float64 { return p.H - p.MB - (y-p.y0)/(p.y1-p.y0)*(p.H-p.MT-p.MB) }

// Polyline draws a series (nothing when it has no point); attrs are extra SVG attributes.
func (p *Plot) Polyline(pts [][2]float64, color string, width float64, attrs string) {
	if len(pts) == 0 {
		return
	}
	ss := make([]string, len(pts))
	for i, q := range pts {
		ss[i] = fmt.Sprintf("%.1f,%.1f", p.X(q[0]), p.Y(q[1]))
	}
	fmt.Fprintf(&p.b, `<polyline fill="none" stroke="%s" stroke-width="%g" %s points="%s"/>`+"\n", color, width, attrs, strings.Join(ss, " "))
}

// Raw appends SVG text as is (markers, legend entries).
func (p *Plot) Raw(format string, a ...any) { fmt.Fprintf(&p.b, format, a...) }

// String closes the figure with the x-axis caption and returns the SVG.
func (p *Plot) String(xCaption string) string {
	fmt.Fprintf(&p.b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`+"\n", (p.ML+p.W-p.MR)/2, p.H-10, Escape(xCaption))
	return p.b.String() + "</svg>\n"
}

// Escape makes text safe inside SVG.
func Escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}
