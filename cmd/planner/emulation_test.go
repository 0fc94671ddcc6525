package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden files of TestExplainCPUEmulatedPaths")

// menuListing is explain --json's menu as legality only: one line per cell, "ALGO/PROTO priced"
// for a legal cell (a positive time) or "ALGO/PROTO -: reason". The prices come from the model and
// the shipped overlay, which a refit changes; the listing does not.
func menuListing(t *testing.T, m map[string]any) string {
	t.Helper()
	menu, ok := m["menu"].([]any)
	require.True(t, ok)
	require.Len(t, menu, 21)
	var b strings.Builder
	q := m["query"].(map[string]any)
	a := assumedOf(t, m)
	fmt.Fprintf(&b, "%v, %v ranks, %v per node (%v)\n", q["coll"], q["n_ranks"], a["gpus_per_node"], a["graphs"])
	for _, x := range menu {
		c := x.(map[string]any)
		name := fmt.Sprintf("%s/%s", c["algo"], c["proto"])
		if r := c["reason"].(string); r != "" {
			fmt.Fprintf(&b, "%s -: %s\n", name, r)
			continue
		}
		tm, _ := c["time_us"].(float64)
		require.Positive(t, tm, "%s: a legal cell has a price", name)
		fmt.Fprintf(&b, "%s priced\n", name)
	}
	return b.String()
}

// TestExplainCPUEmulatedPaths: planner explain --node cpu lists the engine's emulated paths as legal,
// with a price, at the shapes where the engine runs them (golden files in testdata/explain-cpu:
// every cell's legality and reason; go test ./cmd/planner -run TestExplainCPUEmulatedPaths -update
// rewrites them): NVLS on one node of 2 and of 4 ranks, NVLS_TREE on 2 nodes of 2, PAT at one rank
// per node, CollNetDirect AllGather and ReduceScatter on 2 or more nodes (the emulated network's
// iallgather and ireducescatter). The shipped overlay applies at 1 x 2 (its cells' shape) and the NVLS cell, which it
// does not fit, is the model's, not refused.
func TestExplainCPUEmulatedPaths(t *testing.T) {
	clearNCCLEnv(t)
	for _, tc := range []struct {
		golden string
		args   []string
		legal  []string // the new paths' cells that must be legal here
	}{
		{"allreduce-1x2", []string{"--coll", "allreduce"}, []string{"NVLS/SIMPLE"}},
		{"allreduce-1x4", []string{"--coll", "allreduce", "--gpus-per-node", "4"}, []string{"NVLS/SIMPLE"}},
		{"allreduce-2x2", []string{"--coll", "allreduce", "--nodes", "2"}, []string{"NVLS_TREE/SIMPLE", "COLLNET_DIRECT/SIMPLE", "COLLNET_CHAIN/SIMPLE"}},
		{"allgather-1x2", []string{"--coll", "allgather"}, []string{"NVLS/SIMPLE"}},
		{"allgather-4x1", []string{"--coll", "allgather", "--nodes", "4", "--gpus-per-node", "1"}, []string{"PAT/SIMPLE", "COLLNET_DIRECT/SIMPLE"}},
		{"allgather-2x2", []string{"--coll", "allgather", "--nodes", "2"}, []string{"COLLNET_DIRECT/SIMPLE"}},
		{"reducescatter-2x1", []string{"--coll", "reducescatter", "--nodes", "2", "--gpus-per-node", "1"}, []string{"PAT/SIMPLE", "COLLNET_DIRECT/SIMPLE"}},
		{"reducescatter-2x2", []string{"--coll", "reducescatter", "--nodes", "2"}, []string{"COLLNET_DIRECT/SIMPLE"}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			m := explainJSON(t, append([]string{"--node", "cpu", "--bytes", "1M"}, tc.args...)...)
			got := menuListing(t, m)
			for _, c := range tc.legal {
				assert.Contains(t, got, c+" priced\n")
			}
			path := filepath.Join("testdata", "explain-cpu", tc.golden+".txt")
			if *updateGolden {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.Equal(t, string(want), got)
		})
	}
}

// TestExplainCPUNVLSPrice: NVLS/Simple AllReduce of 1 MiB on the cpu table, 1 node of 2 ranks, with
// the shipped overlay (which fits no NVLS cell: the model prices it), worked by hand from
// costmodel's formulas (reference §2, §3, §6) and tables/cpu.toml's numbers:
//
//	latency: one node, so hwLat[PCI][NVLS][Simple] alone (type_intra PHB): cpu.toml's
//	         [constants.hw_latencies.pci] nvls[2] = 25 us
//	bandwidth: nvls graph 2 channels of bw_intra 2.0, nvls_efficiency 0.8:
//	         per channel 2.0 x 0.8 x (2-1)/2 = 0.8, x2 for AllReduce = 1.6 (< bw_inter 2.0);
//	         busBw = 2 x 1.6 = 3.2; algBw = busBw x nRanks/nSteps = 3.2 x 2/2 = 3.2 GB/s
//	time:    25 x ceil(1/8) + 1048576 / (1000 x 3.2) = 25 + 327.68 = 352.68 us (correction 1)
func TestExplainCPUNVLSPrice(t *testing.T) {
	clearNCCLEnv(t)
	m := explainJSON(t, "--node", "cpu", "--coll", "allreduce", "--bytes", "1M", "--no-overlay") // the model's own price
	var cell map[string]any
	for _, x := range m["menu"].([]any) {
		c := x.(map[string]any)
		if c["algo"] == "NVLS" && c["proto"] == "SIMPLE" {
			cell = c
		}
	}
	require.NotNil(t, cell)
	assert.Equal(t, "", cell["reason"])
	assert.InDelta(t, 25.0, cell["lat_us"], 1e-6)
	assert.InDelta(t, 3.2, cell["bw_gbps"], 1e-6)
	assert.InDelta(t, 1.0, cell["correction"], 1e-9)
	assert.InDelta(t, 352.68, cell["time_us"], 1e-3)
	// With the shipped overlay, which fits the NVLS cell at this shape, the cell is still legal.
	m = explainJSON(t, "--node", "cpu", "--coll", "allreduce", "--bytes", "1M")
	ov, ok := m["overlay"].(map[string]any)
	require.True(t, ok, "the shipped overlay applies")
	assert.Equal(t, "cpu.fit.toml", ov["file"])
	assert.Empty(t, ov["skipped"], "no fitted cell is refused at the overlay's own shape")
	for _, x := range m["menu"].([]any) {
		if c := x.(map[string]any); c["algo"] == "NVLS" && c["proto"] == "SIMPLE" {
			assert.Equal(t, "", c["reason"])
			assert.Positive(t, c["time_us"])
		}
	}
}
