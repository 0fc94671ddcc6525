package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/tables"
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

// TestRefitKeepsOtherShapes: an overlay at --out with a 2-node cell fitted at h100's 8 ranks per
// node (no ranks_per_node: an overlay written before the key) keeps it, written out as
// ranks_per_node = 8, when the 2 x 4 sweep is fitted into it; the 2 x 4 cells are added beside it.
func TestRefitKeepsOtherShapes(t *testing.T) {
	const old = "schema_version = 1\n[[fit.cell]]\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\nnodes = 2\n" +
		"lat_us = 30.0\nbw_gbps = 40.0\nlat_sigma = 0.0\nbw_sigma = 0.0\npoints = 5\n"
	out := filepath.Join(t.TempDir(), "h100.fit.toml")
	require.NoError(t, os.WriteFile(out, []byte(old), 0o644))
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--node", "h100", "--gpus-per-node", "4", "--sweeps", filepath.Join(shapeFixtures, "ar-2x4.txt"),
		"--out", out}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	base, err := tables.LoadBase("h100")
	require.NoError(t, err)
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	n, err := tables.ApplyOverlay(base, out, data)
	require.NoError(t, err)
	shapes := map[[2]int]int{}
	for _, c := range n.Fit.Cell {
		shapes[[2]int{c.Nodes, c.RanksPerNode}]++
	}
	assert.Equal(t, 1, shapes[[2]int{2, 8}], "the old 2-node cell, fitted at the table's 8 per node, is kept: %v", shapes)
	assert.Positive(t, shapes[[2]int{2, 4}], "the 2 x 4 cells are written: %v", shapes)
	assert.Len(t, shapes, 2, "%v", shapes)
}

// TestCheckAtAnotherShape: --check evaluates an overlay at the sweeps' shape; an overlay whose only
// 2-node cell was fitted at h100's 8 ranks per node has no cell at 2 x 4, which is a usage error
// naming the shape, not an evaluation of the 8-per-node cell.
func TestCheckAtAnotherShape(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join(shapeFixtures, "ar-2x4.txt"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ar-2x4.txt"), data, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sweeps.toml"), []byte("[[sweep]]\nfile = \"ar-2x4.txt\"\nalgo = \"Ring\"\nproto = \"Simple\"\n"), 0o644))
	out := filepath.Join(t.TempDir(), "h100.fit.toml")
	require.NoError(t, os.WriteFile(out, []byte("schema_version = 1\n[[fit.cell]]\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"simple\"\nnodes = 2\n"+
		"lat_us = 30.0\nbw_gbps = 40.0\nlat_sigma = 0.0\nbw_sigma = 0.0\npoints = 5\n"), 0o644))
	var stdout, stderr bytes.Buffer
	err = run(context.Background(), []string{"--node", "h100", "--gpus-per-node", "4", "--check", dir, "--out", out}, &stdout, &stderr)
	var ue usageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), out+": no fitted cell at 2 nodes x 4 ranks per node (8 ranks)")
}
