package regions

import (
	"fmt"
	"math"
	"slices"
)

// Point is a vertex in log2(bytes) x log2(ranks) space.
type Point struct{ X, Y float64 }

// span is a closed interval [lo, hi] of x.
type span struct{ lo, hi float64 }

// lineSpans returns the closed x-intervals where the horizontal line y meets the closed polygon
// (boundary included), sorted and merged. The interior comes from the crossings of edges with one
// end above y and the other at or below it (even-odd rule), the boundary from horizontal edges on
// the line and vertices on it.
func lineSpans(poly []Point, y float64) []span {
	var xs []float64
	var spans []span
	for i := range poly {
		p, q := poly[i], poly[(i+1)%len(poly)]
		if (p.Y > y) != (q.Y > y) {
			xs = append(xs, p.X+(y-p.Y)*(q.X-p.X)/(q.Y-p.Y))
		}
		if p.Y == y {
			spans = append(spans, span{p.X, p.X})
			if q.Y == y {
				spans = append(spans, span{math.Min(p.X, q.X), math.Max(p.X, q.X)})
			}
		}
	}
	slices.Sort(xs)
	for i := 0; i+1 < len(xs); i += 2 {
		spans = append(spans, span{xs[i], xs[i+1]})
	}
	slices.SortFunc(spans, func(a, b span) int {
		switch {
		case a.lo < b.lo:
			return -1
		case a.lo > b.lo:
			return 1
		}
		return 0
	})
	var out []span
	for _, s := range spans {
		if n := len(out); n > 0 && s.lo <= out[n-1].hi {
			out[n-1].hi = math.Max(out[n-1].hi, s.hi)
			continue
		}
		out = append(out, s)
	}
	return out
}

// log2 is the x coordinate of a size; every membership test goes through it.
func log2(n int64) float64 { return math.Log2(float64(n)) }

// byteRange returns the sizes n >= 1 with log2(n) in [s.lo, s.hi] as [lo, hi); ok is false when
// there are none. Sizes stop short of MaxInt64.
func byteRange(s span) (lo, hi int64, ok bool) {
	if s.hi < 0 || s.lo > 62.99999 {
		return 0, 0, false
	}
	lo = 1
	if s.lo > 0 {
		lo = int64(math.Ceil(math.Exp2(s.lo)))
		for lo > 1 && log2(lo-1) >= s.lo {
			lo--
		}
		for log2(lo) < s.lo {
			lo++
		}
	}
	last := int64(math.MaxInt64 - 1)
	if s.hi < 62.99999 {
		last = int64(math.Floor(math.Exp2(s.hi)))
		for log2(last+1) <= s.hi {
			last++
		}
		for last >= 1 && log2(last) > s.hi {
			last--
		}
	}
	if last < lo {
		return 0, 0, false
	}
	return lo, last + 1, true
}

// checkPolygon rejects polygons the scan line cannot read: fewer than 3 vertices, coordinates
// outside [0, 64], repeated consecutive vertices, zero area, or crossing edges.
func checkPolygon(poly []Point) error {
	if len(poly) < 3 {
		return fmt.Errorf("%d vertices, want at least 3", len(poly))
	}
	for i, p := range poly {
		if !(p.X >= 0 && p.X <= 64 && p.Y >= 0 && p.Y <= 64) {
			return fmt.Errorf("vertex %d (%g, %g) outside [0, 64] x [0, 64] (log2 bytes, log2 ranks)", i, p.X, p.Y)
		}
		if q := poly[(i+1)%len(poly)]; p == q {
			return fmt.Errorf("vertex %d repeats vertex %d", (i+1)%len(poly), i)
		}
	}
	area := 0.0
	for i, p := range poly {
		q := poly[(i+1)%len(poly)]
		area += p.X*q.Y - q.X*p.Y
	}
	if area == 0 {
		return fmt.Errorf("zero area")
	}
	n := len(poly)
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			if j == i+1 || (i == 0 && j == n-1) {
				continue // adjacent edges share a vertex
			}
			a, b, c, d := poly[i], poly[(i+1)%n], poly[j], poly[(j+1)%n]
			if segmentsMeet(a, b, c, d) {
				return fmt.Errorf("edges %d and %d cross", i, j)
			}
		}
	}
	return nil
}

func orient(a, b, c Point) float64 { return (b.X-a.X)*(c.Y-a.Y) - (b.Y-a.Y)*(c.X-a.X) }

func onSegment(a, b, p Point) bool {
	return math.Min(a.X, b.X) <= p.X && p.X <= math.Max(a.X, b.X) && math.Min(a.Y, b.Y) <= p.Y && p.Y <= math.Max(a.Y, b.Y)
}

// segmentsMeet reports whether segments ab and cd share a point.
func segmentsMeet(a, b, c, d Point) bool {
	o1, o2, o3, o4 := orient(a, b, c), orient(a, b, d), orient(c, d, a), orient(c, d, b)
	if ((o1 > 0 && o2 < 0) || (o1 < 0 && o2 > 0)) && ((o3 > 0 && o4 < 0) || (o3 < 0 && o4 > 0)) {
		return true
	}
	return (o1 == 0 && onSegment(a, b, c)) || (o2 == 0 && onSegment(a, b, d)) ||
		(o3 == 0 && onSegment(c, d, a)) || (o4 == 0 && onSegment(c, d, b))
}
