package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExplainNamesTheStandInScale: a node table has [scale.1], [scale.2] and [scale.4]; NCCL's
// index2 is nNodes-1 up to 2 nodes and 2 above (tables.ScaleFor), so at 3 and at 4096 nodes the
// graphs are [scale.4]'s, standing in for a scale the table does not have, and explain says so in
// the text and the JSON; at 2 and 4 nodes the scale is the node count's own.
func TestExplainNamesTheStandInScale(t *testing.T) {
	clearNCCLEnv(t)
	for _, tc := range []struct {
		nodes, line, scale string
		standsIn           bool
	}{
		{"4096", "   graphs: scale 4 stands in for 4096 nodes (no [scale.4096])\n", "4", true},
		{"3", "   graphs: scale 4 stands in for 3 nodes (no [scale.3])\n", "4", true},
		{"4", "   graphs: scale 4 (4 nodes)\n", "4", false},
		{"2", "   graphs: scale 2 (2 nodes)\n", "2", false},
	} {
		out, err := runCLI(t, "", "explain", "--node", "h100", "--nodes", tc.nodes, "--bytes", "1M")
		require.NoError(t, err)
		assert.Contains(t, out, tc.line, "%s nodes", tc.nodes)
		m := explainJSON(t, "--node", "h100", "--nodes", tc.nodes, "--bytes", "1M")
		a := assumedOf(t, m)
		assert.Equal(t, tc.line[len("   graphs: "):len(tc.line)-1], a["graphs"], "%s nodes", tc.nodes)
		assert.Equal(t, tc.scale, a["scale"], "%s nodes", tc.nodes)
		assert.Equal(t, tc.standsIn, a["scale_stands_in"], "%s nodes", tc.nodes)
	}
}

// TestGPUsPerNodeFlag: --gpus-per-node builds the table's topology with N ranks per node (2 nodes x 4
// = 8 ranks on h100, whose table says 8 per node: 16 ranks), and explain says which it assumed
// and where it came from; explain, query, map and compare take it; with --topology it is an error.
func TestGPUsPerNodeFlag(t *testing.T) {
	clearNCCLEnv(t)
	m := explainJSON(t, "--node", "h100", "--nodes", "2", "--bytes", "1M")
	assert.EqualValues(t, 16, m["query"].(map[string]any)["n_ranks"]) // h100.toml: gpus_per_node = 8
	a := assumedOf(t, m)
	assert.EqualValues(t, 8, a["gpus_per_node"])
	assert.Equal(t, "table", a["gpus_per_node_source"])

	m = explainJSON(t, "--node", "h100", "--nodes", "2", "--gpus-per-node", "4", "--bytes", "1M")
	assert.EqualValues(t, 8, m["query"].(map[string]any)["n_ranks"])
	a = assumedOf(t, m)
	assert.EqualValues(t, 4, a["gpus_per_node"])
	assert.Equal(t, "flag", a["gpus_per_node_source"])

	out, err := runCLI(t, "", "explain", "--node", "h100", "--nodes", "2", "--gpus-per-node", "4", "--bytes", "1M")
	require.NoError(t, err)
	assert.Contains(t, out, "(2 nodes, 8 ranks)")
	assert.Contains(t, out, "   gpus per node: 4 (--gpus-per-node; the table says 8)\n")
	assert.Contains(t, out, "   graphs: scale 2 (2 nodes), searched at the table's 8 GPUs per node: NCCL searches 4 again")
	assert.Contains(t, assumedOf(t, m)["graphs"], "searched at the table's 8 GPUs per node")
	out, err = runCLI(t, "", "explain", "--node", "h100", "--bytes", "1M")
	require.NoError(t, err)
	assert.Contains(t, out, "   gpus per node: 8 (h100.toml's gpus_per_node)\n")

	_, err = runCLI(t, "allreduce,1M\n", "query", "--node", "h100", "--nodes", "2", "--gpus-per-node", "4")
	assert.NoError(t, err)
	out, err = runCLI(t, "", "map", "--node", "h100", "--nodes", "2", "--gpus-per-node", "4", "--min", "1K", "--max", "1M")
	assert.NoError(t, err)
	assert.Contains(t, out, "8 ranks")
	assert.Contains(t, out, "\nassumed: gpus per node 4 (--gpus-per-node; the table says 8); graphs: scale 2 (2 nodes), "+
		"searched at the table's 8 GPUs per node: NCCL searches 4 again, and its channels and speeds can differ (--topology gives them; --node h100-4 is this node at 4)\n")

	for _, args := range [][]string{
		{"explain", "--topology", topoDir + "s1.toml", "--gpus-per-node", "4", "--bytes", "1M"},
		{"explain", "--node", "h100", "--gpus-per-node", "0", "--bytes", "1M"},
	} {
		_, err := runCLI(t, "", args...)
		var ue usageError
		assert.True(t, errors.As(err, &ue), "%v: want a usage error, got %v", args, err)
	}
}

// TestOverlayAtAnotherShape: the overlay of testdata/fit was fitted at the table's 8 ranks per node
// (its cells have no ranks_per_node); at 2 nodes x 4 every one of its 2-node cells is skipped with
// a note naming both shapes, and the pick is the table's own.
func TestOverlayAtAnotherShape(t *testing.T) {
	clearNCCLEnv(t)
	dir := t.TempDir()
	for _, f := range []string{"h200.toml", "h200.fit.toml"} {
		data, err := os.ReadFile(filepath.Join("testdata/fit", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), data, 0o644))
	}
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"explain", "--table", filepath.Join(dir, "h200.toml"), "--nodes", "2",
		"--gpus-per-node", "4", "--bytes", "16MiB"}, nil, &out, &errb)
	require.NoError(t, err, errb.String())
	assert.Contains(t, out.String(), "fitted at 2 x 8 (nodes x ranks per node), this is 2 x 4")
	assert.Contains(t, out.String(), ": 0 of 1 fitted cells applied")
}

// assumedOf is explain --json's "assumed" object.
func assumedOf(t *testing.T, m map[string]any) map[string]any {
	t.Helper()
	a, ok := m["assumed"].(map[string]any)
	require.True(t, ok, "explain --json has an assumed object: %v", m["assumed"])
	return a
}

// TestL40S4IsS3: l40s-4 at one node has reference §13 S3's inputs (4 GPUs, PCIe only, typeIntra
// PXB, 2 channels of 12 GB/s, x86 Intel; cc 89 shares cc 80's compCapIndex), so explain gives S3's
// AllReduce cells and picks as the reference lists them (nBytes -> algo/proto time nMaxChannels/nWarps).
func TestL40S4IsS3(t *testing.T) {
	clearNCCLEnv(t)
	for _, tc := range []struct {
		bytes, algo, proto string
		timeUS             float64
		channels, warps    int
	}{
		{"8", "RING", "LL", 12.60, 1, 3},
		{"4096", "RING", "LL", 13.11, 1, 4},
		{"64K", "RING", "LL", 20.79, 4, 16},
		{"1M", "RING", "SIMPLE", 108.14, 4, 17},
	} {
		m := explainJSON(t, "--node", "l40s-4", "--bytes", tc.bytes)
		assert.Equal(t, tc.algo, m["algo"], tc.bytes)
		assert.Equal(t, tc.proto, m["proto"], tc.bytes)
		assert.InDelta(t, tc.timeUS, m["time_us"], 0.005, tc.bytes)
		assert.EqualValues(t, tc.channels, m["channels"], tc.bytes)
		assert.EqualValues(t, tc.warps, m["warps"], tc.bytes)
	}
	m := explainJSON(t, "--node", "l40s-4", "--bytes", "1M")
	for _, c := range []struct {
		algo, proto string
		lat, bw     float64
	}{
		{"TREE", "LL", 12.80, 2.91}, {"TREE", "SIMPLE", 32.40, 11.04}, {"RING", "LL", 12.60, 8.00}, {"RING", "SIMPLE", 42.60, 16.00},
	} {
		cell := menuCell(t, m, c.algo, c.proto)
		assert.InDelta(t, c.lat, cell["lat_us"], 0.005, "%s/%s lat", c.algo, c.proto)
		assert.InDelta(t, c.bw, cell["bw_gbps"], 0.005, "%s/%s bw", c.algo, c.proto)
	}
	assert.Contains(t, menuCell(t, m, "RING", "LL128")["reason"], "PXB > NVB", "S3: LL128 is gated off")
}
