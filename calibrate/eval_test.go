package calibrate

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestEvaluateTruthHasNoRegret: on noise-free sweeps of the truth, the truth planner's pick is
// the measured best (regret 0) and its predictions are exact; the prior is scored too.
func TestEvaluateTruthHasNoRegret(t *testing.T) {
	ctx := context.Background()
	topo := loadTopo(t, "s2.toml")
	priorPl, prior := priorOf(t, &topo)
	truth := truthPlanner(t, &topo, prior)
	sweeps := synthSweeps(t, truth, topo.NNodes, 1, 0, 1)
	pts, _ := pointsOf(t, sweeps, &topo)
	require.NotEmpty(t, pts)
	ev, err := Evaluate(ctx, topo.NNodes, priorPl, truth, pts)
	require.NoError(t, err)
	require.Len(t, ev.Policies, 3)
	f := ev.Policies[1]
	assert.Equal(t, "fitted", f.Name)
	assert.Positive(t, f.RegretSizes)
	assert.InDelta(t, 0, f.RegretMedian, 1e-3)
	assert.InDelta(t, 0, f.CellErrMedian, 1e-3)
	assert.True(t, ev.GoalMet)
	assert.Equal(t, "ring/simple", ev.Policies[2].Name)
	var b bytes.Buffer
	require.NoError(t, ev.WriteText(&b))
	assert.Contains(t, b.String(), "goal (fitted median regret <= 5%, median prediction error <= 15%): met")

	_, err = Evaluate(ctx, topo.NNodes, priorPl, truth, nil)
	assert.Error(t, err)
}

// TestPlotSVGIsWellFormed decodes the plot as XML and counts a circle per pinned point.
func TestPlotSVGIsWellFormed(t *testing.T) {
	ctx := context.Background()
	topo := loadTopo(t, "s2.toml")
	_, prior := priorOf(t, &topo)
	truth := truthPlanner(t, &topo, prior)
	fm, err := Menus(ctx, truth)
	require.NoError(t, err)
	pts, _ := pointsOf(t, synthSweeps(t, truth, topo.NNodes, 1, 0.03, 2), &topo)
	var b bytes.Buffer
	require.NoError(t, PlotSVG(&b, fm, prior, pts, `fit <&> "test"`))
	circles, polylines := 0, 0
	d := xml.NewDecoder(strings.NewReader(b.String()))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if se, ok := tok.(xml.StartElement); ok {
			switch se.Name.Local {
			case "circle":
				circles++
			case "polyline":
				polylines++
			}
		}
	}
	assert.Equal(t, len(pts)+len(truthFactors), circles, "one per point and one per legend entry")
	assert.Equal(t, 2*len(truthFactors), polylines, "fitted and prior per cell")

	assert.Error(t, PlotSVG(io.Discard, fm, prior, nil, "empty"))
}
