package main

import (
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const shapeFixtures = "testdata/shapes"

// TestShapeMismatchIsAnError: a 4-rank sweep (four rank lines on one host) against the h100 table,
// 8 GPUs per node, is refused, naming the file, both shapes and the flag that fits it at its own.
// The shapes are read off the fixture: ar-1x4.txt has 4 rank lines on h100-node-07; h100.toml has
// gpus_per_node = 8.
func TestShapeMismatchIsAnError(t *testing.T) {
	sweep := filepath.Join(shapeFixtures, "ar-1x4.txt")
	_, _, stderr, err := fitJSON(t, "h100", "--sweeps", sweep)
	require.Error(t, err, stderr)
	var ue usageError
	assert.True(t, errors.As(err, &ue), "a usage error (exit 2): %v", err)
	for _, want := range []string{
		sweep + ":1:",
		"1 node x 4 ranks per node (4 ranks) (from its rank lines)",
		"1 node x 8 ranks per node (8 ranks) (",
		"h100.toml's gpus_per_node",
		"--gpus-per-node 4",
	} {
		assert.Contains(t, err.Error(), want)
	}
}

// TestTwoByFourFittedAtItsShape: rank lines on two hosts, four each, are 2 nodes x 4 ranks per node.
// With --gpus-per-node 4 the fit is at that shape: the report says 2 nodes of 4 and every overlay
// cell is written at nodes = 2, ranks_per_node = 4. Without the flag the 8-GPU table refuses it.
func TestTwoByFourFittedAtItsShape(t *testing.T) {
	sweep := filepath.Join(shapeFixtures, "ar-2x4.txt")
	_, _, _, err := fitJSON(t, "h100", "--sweeps", sweep)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "2 nodes x 4 ranks per node (8 ranks)")
	assert.Contains(t, err.Error(), "2 nodes x 8 ranks per node (16 ranks)")

	rep, n, stderr, err := fitJSON(t, "h100", "--gpus-per-node", "4", "--sweeps", sweep)
	require.NoError(t, err, stderr)
	assert.EqualValues(t, 2, rep["nodes"])
	assert.EqualValues(t, 4, rep["ranks_per_node"])
	assert.Contains(t, stderr, "fitted at 2 nodes x 4 ranks per node (8 ranks)")
	require.NotNil(t, n.Fit, "the overlay beside the table has cells")
	require.NotEmpty(t, n.Fit.Cell)
	for i, c := range n.Fit.Cell {
		assert.Equal(t, 2, c.Nodes, "cell %d", i)
		assert.Equal(t, 4, c.RanksPerNode, "cell %d", i)
		assert.Equal(t, "measured", n.Sources["fit.cell["+strconv.Itoa(i)+"].ranks_per_node"], "cell %d", i)
	}
}

// TestShapeSources: ranks per node come from the rank lines, else the manifest, else the flag, else
// it is an error naming the file.
func TestShapeSources(t *testing.T) {
	const noRanks = "../../calibrate/testdata/logs/ar_no_start_line.txt" // no "# Rank" lines
	_, _, _, err := fitJSON(t, "h100", "--nodes", "1", "--sweeps", noRanks)
	require.Error(t, err)
	assert.Contains(t, err.Error(), noRanks+":1: nothing gives the ranks per node")
	assert.Contains(t, err.Error(), "--gpus-per-node N")

	_, _, stderr, err := fitJSON(t, "h100", "--nodes", "1", "--gpus-per-node", "8", "--sweeps", noRanks)
	assert.NoError(t, err, stderr)

	// The flag disagreeing with the rank lines is the same mismatch, the other way round.
	_, _, _, err = fitJSON(t, "h100", "--gpus-per-node", "8", "--sweeps", filepath.Join(shapeFixtures, "ar-1x4.txt"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(--gpus-per-node 8); give --gpus-per-node 4")
}

// TestFitOnATopologyFile: --topology FILE fits on the file's topology, whose n_nodes and
// local_ranks are the fit's shape (s1.toml: 1 node, 8 ranks, max_local_ranks 8): the 1 x 8 sweep
// fits, the 1 x 4 one is refused naming the file's local_ranks; --gpus-per-node with it is an
// error.
func TestFitOnATopologyFile(t *testing.T) {
	const topo = "../../capabilities/testdata/topology/s1.toml"
	rep, _, stderr, err := fitJSON(t, "h100", "--topology", topo, "--sweeps", "../../calibrate/testdata/sweeps/ar_current_h100_1n8g.txt")
	require.NoError(t, err, stderr)
	assert.EqualValues(t, 1, rep["nodes"])
	assert.EqualValues(t, 8, rep["ranks_per_node"])

	_, _, _, err = fitJSON(t, "h100", "--topology", topo, "--sweeps", filepath.Join(shapeFixtures, "ar-1x4.txt"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "(the local_ranks of --topology "+topo+"); fit it on a topology file with local_ranks = 4")

	_, _, _, err = fitJSON(t, "h100", "--topology", topo, "--gpus-per-node", "8", "--sweeps", filepath.Join(shapeFixtures, "ar-1x4.txt"))
	var ue usageError
	assert.True(t, errors.As(err, &ue), "a usage error: %v", err)
}
