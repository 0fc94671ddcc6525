package tables

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOverlayFitCells(t *testing.T) {
	base := decodeFile(t, "testdata/overlay/base.toml")
	good := []byte(`schema_version = 1

[[fit.cell]]
coll = "allreduce"
algo = "ring"
proto = "ll128"
nodes = 2          # measured
lat_us = 12.5      # measured
bw_gbps = 80       # measured
lat_sigma = 0.5    # measured
bw_sigma = 2       # measured
points = 7         # measured
`)
	n, err := ApplyOverlay(base, "x.fit.toml", good)
	require.NoError(t, err)
	require.NotNil(t, n.Fit)
	assert.Equal(t, []FitCell{{Coll: "allreduce", Algo: "ring", Proto: "ll128", Nodes: 2, LatUS: 12.5, BWGBps: 80, LatSigma: 0.5, BWSigma: 2, Points: 7}}, n.Fit.Cell)
	assert.Equal(t, "measured", n.Sources["fit.cell[0].bw_gbps"])
	assert.Nil(t, base.Fit, "the base is not modified")

	bad := []byte(`schema_version = 1
[[fit.cell]]
coll = "allreduce"
algo = "ringo"
proto = "ll128"
nodes = 0
lat_us = -1
bw_gbps = 0
lat_sigma = 0
bw_sigma = -2
points = 0

[[fit.cell]]
coll = "allreduce"
algo = "ring"
proto = "ll"
nodes = 2
lat_us = 1
bw_gbps = 1
lat_sigma = 0
bw_sigma = 0
points = 1

[[fit.cell]]
coll = "allreduce"
algo = "ring"
proto = "ll"
nodes = 2
lat_us = 1
bw_gbps = 1
lat_sigma = 0
bw_sigma = 0
points = 1
`)
	_, err = ApplyOverlay(base, "bad.fit.toml", bad)
	require.Error(t, err)
	for _, want := range []string{
		`tables: bad.fit.toml: line 4: fit.cell[0].algo: "ringo" is not one of`,
		"fit.cell[0].nodes: 0 out of range 1..65536",
		"fit.cell[0].lat_us: -1 must be finite and >= 0",
		"fit.cell[0].bw_gbps: 0 must be finite and > 0",
		"fit.cell[0].bw_sigma: -2 must be finite and >= 0",
		"fit.cell[0].points: 0 must be >= 1",
		"line 24: fit.cell[2]: duplicate cell allreduce/ring/ll at 2 nodes (also fit.cell[1])",
	} {
		assert.ErrorContains(t, err, want)
	}
	_, err = ApplyOverlay(base, "unknown.fit.toml", []byte("schema_version = 1\n[[fit.cell]]\nlatency = 3  # measured\n"))
	assert.ErrorContains(t, err, "tables: unknown.fit.toml: line 3: fit.cell.latency: unknown key")
}

// TestOverlayFitCellShape: ranks_per_node names the shape of a cell: a cell at 2 nodes x 4 and the
// same cell at 2 nodes x 8 are two cells, not duplicates; ranks_per_node = 0 is out of range.
func TestOverlayFitCellShape(t *testing.T) {
	base, err := LoadBase("h100")
	require.NoError(t, err)
	cell := func(rpn string) string {
		return "\n[[fit.cell]]\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\nnodes = 2  # measured\n" + rpn +
			"lat_us = 1  # measured\nbw_gbps = 1  # measured\nlat_sigma = 0  # measured\nbw_sigma = 0  # measured\npoints = 1  # measured\n"
	}
	on, err := ApplyOverlay(base, "two.fit.toml", []byte("schema_version = 1\n"+cell("ranks_per_node = 4  # measured\n")+cell("")))
	require.NoError(t, err)
	require.Len(t, on.Fit.Cell, 2)
	assert.Equal(t, 4, on.Fit.Cell[0].RanksPerNode)
	assert.Equal(t, 0, on.Fit.Cell[1].RanksPerNode, "absent: the table's gpus_per_node, resolved by the planner")

	_, err = ApplyOverlay(base, "zero.fit.toml", []byte("schema_version = 1\n"+cell("ranks_per_node = 0  # measured\n")))
	assert.ErrorContains(t, err, "fit.cell[0].ranks_per_node: 0 out of range 1..65536")
}
