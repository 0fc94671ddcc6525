package planner

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
)

// TestConfigRelease: Config.Release reaches the model. On §13 S2 a 2 MiB AllReduce picks
// NVLSTree/Simple in 2.30.7 at 128.92 us (§13); NCCL 2.28.3 prices the same cell with
// hw[NET][NVLSTree][Simple] 14 instead of 20.9 (reference §14): lat 25 + 2*2*14 = 81, bw 103.226,
// so 81 + 2097152/103225.8 = 101.316 us.
func TestConfigRelease(t *testing.T) {
	r, err := costmodel.ParseRelease("2.28.3")
	require.NoError(t, err)
	pl, err := New(topo(t, "s2"), Config{Release: r})
	require.NoError(t, err)
	assert.Equal(t, "2.28.3", pl.Table().Release.String())
	p, err := pl.Explain(context.Background(), class(costmodel.AllReduce), 2<<20)
	require.NoError(t, err)
	assert.Equal(t, "NVLS_TREE/SIMPLE", p.Algo.String()+"/"+p.Proto.String())
	assert.InDelta(t, 101.316, p.TimeUS, 0.005)

	def := newPlanner(t, topo(t, "s2"), nil)
	assert.Equal(t, "2.30.7", def.Table().Release.String())
	p, err = def.Explain(context.Background(), class(costmodel.AllReduce), 2<<20)
	require.NoError(t, err)
	assert.InDelta(t, 128.92, p.TimeUS, 0.005)
}
