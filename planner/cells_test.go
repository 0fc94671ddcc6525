package planner

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
)

func TestConfigCellsOverrideAfterBuild(t *testing.T) {
	topo, err := capabilities.LoadTopology("../capabilities/testdata/topology/s2.toml")
	require.NoError(t, err)
	cls := Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
	pl, err := New(&topo, Config{})
	require.NoError(t, err)
	before, err := pl.Explain(context.Background(), cls, 1<<20)
	require.NoError(t, err)
	require.False(t, before.Algo == costmodel.Ring && before.Proto == costmodel.LL)

	// Ring/LL at 1 us and 10 TB/s beats everything.
	pl, err = New(&topo, Config{Cells: []CellOverride{{Coll: costmodel.AllReduce, Algo: costmodel.Ring, Proto: costmodel.LL, LatUS: 1, BWGBps: 10000}}})
	require.NoError(t, err)
	after, err := pl.Explain(context.Background(), cls, 1<<20)
	require.NoError(t, err)
	assert.Equal(t, costmodel.Ring, after.Algo)
	assert.Equal(t, costmodel.LL, after.Proto)
	assert.Equal(t, float32(1), after.Explain.Cells[costmodel.Ring][costmodel.LL].LatUS)

	_, err = New(&topo, Config{Cells: []CellOverride{{Coll: costmodel.AllReduce, Algo: costmodel.CollNetDirect, Proto: costmodel.Simple, LatUS: 1, BWGBps: 1}}})
	assert.ErrorContains(t, err, "planner: costmodel: override of")
}
