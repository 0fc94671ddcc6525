package svgplot

import (
	"encoding/xml"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPlot(t *testing.T) {
	p := New("a <title> & more", 960, 600, 190, 8, 30, 0.3, 2.7, 2)
	// Corners: x0 at the left margin, x1 at the legend's edge; whole decades 0 and 3 at the bottom
	// and top margins.
	assert.Equal(t, 70.0, p.X(8))
	assert.Equal(t, 960.0-190, p.X(30))
	assert.Equal(t, 600.0-50, p.Y(0))
	assert.Equal(t, 40.0, p.Y(3))
	p.Polyline([][2]float64{{8, 1}, {30, 2}}, Colors[0], 2, `opacity="0.5"`)
	p.Polyline(nil, Colors[1], 2, "")
	svg := p.String("bytes")
	assert.Equal(t, 1, strings.Count(svg, "<polyline"), "an empty series draws nothing")
	assert.Contains(t, svg, "a &lt;title&gt; &amp; more")
	assert.Contains(t, svg, ">1KiB<")
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		if _, err := dec.Token(); err != nil {
			require.ErrorContains(t, err, "EOF")
			break
		}
	}
}
