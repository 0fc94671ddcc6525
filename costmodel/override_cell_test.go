package costmodel

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
)

func TestOverrideCell(t *testing.T) {
	topo, err := capabilities.LoadTopology("../capabilities/testdata/topology/s2.toml")
	require.NoError(t, err)
	k := DefaultConstants()
	tb, err := Build(&topo, &k)
	require.NoError(t, err)
	require.NoError(t, tb.Override(AllReduce, Ring, LL128, 12.5, 80))
	assert.Equal(t, float32(12.5), tb.Lat[AllReduce][Ring][LL128])
	assert.Equal(t, float32(80), tb.BW[AllReduce][Ring][LL128])
	// 12.5 + 8e6/(1000*80) = 112.5 us
	assert.InDelta(t, 112.5, tb.Time(AllReduce, Ring, LL128, 8_000_000, 1, 1), 1e-3)

	// A cell the model left unusable stays unusable.
	require.Zero(t, tb.BW[AllReduce][CollNetDirect][Simple])
	err = tb.Override(AllReduce, CollNetDirect, Simple, 1, 100)
	assert.ErrorContains(t, err, "not usable")
	assert.Zero(t, tb.BW[AllReduce][CollNetDirect][Simple])
	assert.ErrorContains(t, tb.Override(AllReduce, Ring, LL128, -1, 80), "latency -1")
	assert.ErrorContains(t, tb.Override(AllReduce, Ring, LL128, 1, 0), "bandwidth 0")
	assert.ErrorContains(t, tb.Override(NumColls, Ring, LL128, 1, 1), "out of range")
}
