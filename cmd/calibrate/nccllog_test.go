package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
)

const s1Log = "../../calibrate/testdata/logs/nccl_2.30_h100_s1.log"

// ncclLogRun runs calibrate nccl-log with args and --json and decodes its object.
func ncclLogRun(t *testing.T, args ...string) ncclLogJSON {
	t.Helper()
	var out, errb bytes.Buffer
	require.NoError(t, run(context.Background(), append([]string{"nccl-log", "--json"}, args...), &out, &errb), errb.String())
	var got ncclLogJSON
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	return got
}

// TestNCCLLogS1: the log of reference §13's scenario S1 gives the S1 topology (the hand-written
// capabilities/testdata/topology/s1.toml, estimates aside), and over it the planner makes every
// logged decision, each at §13's NCCL-computed time, and agrees with every usable cell of the
// logged model table.
func TestNCCLLogS1(t *testing.T) {
	topoFile := filepath.Join(t.TempDir(), "s1.toml")
	got := ncclLogRun(t, s1Log, "--topology-out", topoFile, "--check-decisions")

	assert.Equal(t, "2.30.7", got.Comm.NCCLVersion)
	assert.Equal(t, 12080, got.Comm.CUDAVersion)
	assert.Equal(t, [5]int{8, 1, 8, 32, 16}, [5]int{got.Comm.NRanks, got.Comm.NNodes, got.Comm.LocalRanks, got.Comm.CollChannels, got.Comm.NVLSChannels})
	assert.Equal(t, "NVIDIA H100 80GB HBM3", got.Comm.GPUName)
	require.Len(t, got.Decisions, 12)
	for _, d := range got.Decisions {
		assert.Equal(t, "2.24+", d.Format)
		assert.Equal(t, 0, d.Rank, "hydra's [0] prefix is the rank")
		assert.Empty(t, d.Timestamp)
	}
	assert.Empty(t, got.Problems)

	derived, est, err := capabilities.LoadTopologyEstimates(topoFile)
	require.NoError(t, err)
	want, err := capabilities.LoadTopology("../../capabilities/testdata/topology/s1.toml")
	require.NoError(t, err)
	assert.Equal(t, want, derived)
	assert.Equal(t, []string{"cpu_arch", "cpu_vendor", "graphs.nvls.latency_inter", "graphs.ring.latency_inter",
		"graphs.tree.latency_inter", "net_device_type", "nvs_count"}, est)
	assert.Equal(t, est, got.Estimated)

	// §13 S1's picks: AllReduce by nBytes, AllGather by its total-buffer nBytes (the TUNING line's
	// per-rank bytes x 8).
	picks := map[string][2]any{
		"AllReduce 8": {"RING/LL", 15.00}, "AllReduce 4096": {"RING/LL", 15.05}, "AllReduce 65536": {"RING/LL", 15.81},
		"AllReduce 1048576": {"RING/LL", 28.01}, "AllReduce 2097152": {"NVLS/SIMPLE", 36.47},
		"AllReduce 67108864": {"NVLS/SIMPLE", 392.00}, "AllReduce 1073741824": {"NVLS/SIMPLE", 5897.03},
		"AllGather 65536": {"RING/LL", 11.21}, "AllGather 2097152": {"RING/LL", 23.81},
		"AllGather 67108864": {"RING/SIMPLE", 215.70}, "AllGather 1073741824": {"RING/SIMPLE", 2968.21},
	}
	require.Len(t, got.Checks, len(picks), "distinct decisions")
	for _, c := range got.Checks {
		key := c.Coll + " " + strconv.FormatInt(c.NBytes, 10)
		want, ok := picks[key]
		require.True(t, ok, key)
		assert.Equal(t, want[0], c.Planned, key)
		assert.Equal(t, want[0], c.Logged, key)
		assert.InDelta(t, want[1].(float64), c.PlannedUS, 0.006, key)
		assert.True(t, c.Agree, key)
	}
	assert.Equal(t, 2, got.Checks[0].Count, "the 8 B decision is logged twice")
	require.NotEmpty(t, got.Cells)
	for _, c := range got.Cells {
		assert.True(t, *c.Agree, "%s: NCCL %.1f/%.1f, planner %.2f/%.2f", c.Cell, c.LatUS, c.BWGBps, c.PlannerLatUS, c.PlannerBW)
	}

	// The text says the same.
	var out, errb bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"nccl-log", s1Log, "--check-decisions"}, &out, &errb))
	for _, w := range []string{
		"NCCL 2.30.7 (line 21), 8 ranks on 1 node, 8 local (line 54), 32 coll channels, 16 nvls channels (line 62)",
		"TUNING decisions: 12 (12 in the 2.24+ format)",
		"the planner picks NCCL's cell at 11 of 11 distinct decisions (0 not checked)",
		"model table: 21 of 21 usable cells agree",
		"estimated inputs (not in the log): cpu_arch, cpu_vendor",
	} {
		assert.Contains(t, out.String(), w)
	}
}

// TestNCCLLogFormats: the three decision formats NCCL has printed (2.20-2.22 without the
// collective, 2.23 with numeric ids and the time, 2.24+ with names and channels), with the ranks
// the launcher prefixes give.
func TestNCCLLogFormats(t *testing.T) {
	for _, tc := range []struct {
		file   string
		format string
		n      int
		rank   int
		first  decisionJSON
		table  bool
	}{
		{"../../calibrate/testdata/tuning/tuning_2.21_pcie_plain.log", "2.20-2.22", 4, -1,
			decisionJSON{Line: 18, Rank: -1, Format: "2.20-2.22", Bytes: 8, Algo: "RING", Proto: "LL", ChannelLo: -1, ChannelHi: -1, TimeUS: 12.6}, true},
		{"../../calibrate/testdata/tuning/tuning_2.23_h200_srun.log", "2.23", 8, 0,
			decisionJSON{Line: 3, Rank: 0, Format: "2.23", Coll: "AllReduce", Bytes: 8, Algo: "TREE", Proto: "LL", ChannelLo: -1, ChannelHi: -1, TimeUS: 35.200001}, false},
		{"../../calibrate/testdata/tuning/tuning_2.30_h100_tagged.log", "2.24+", 9, 0,
			decisionJSON{Line: 38, Rank: 0, Format: "2.24+", Coll: "AllReduce", Bytes: 8, Algo: "RING", Proto: "LL", ChannelLo: 0, ChannelHi: 0, TimeUS: -1, Timestamp: "2025-06-11 10:02:04"}, true},
	} {
		t.Run(tc.format, func(t *testing.T) {
			got := ncclLogRun(t, tc.file)
			require.Len(t, got.Decisions, tc.n)
			for _, d := range got.Decisions {
				assert.Equal(t, tc.format, d.Format)
				assert.Equal(t, tc.rank, d.Rank)
			}
			assert.Equal(t, tc.first, got.Decisions[0])
			assert.Equal(t, tc.table, got.Table != nil, "the model table")
		})
	}
}

// TestNCCLLogErrors: usage errors are one line and exit status 2.
func TestNCCLLogErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"nccl-log"}, "LOG is required"},
		{[]string{"nccl-log", "/does/not/exist.log"}, "/does/not/exist.log"},
		{[]string{"nccl-log", "../../calibrate/testdata/tuning/tuning_2.23_h200_srun.log", "--check-decisions"}, "no GRAPH line of a known pattern"},
		{[]string{"nccl-log", "../../calibrate/testdata/graphs/graph_oldest_numeric.log", "--topology-out", filepath.Join(dir, "t.toml")},
			`graph_oldest_numeric.log:1: path types "3"/"" are not names (LOC NVL ... DIS); `},
		{[]string{"nccl-log", s1Log, "--topology-out", filepath.Join(dir, "missing", "t.toml")}, "--topology-out"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runMain(t, tc.args...)
			assert.Equal(t, 2, code, stderr)
			assert.Empty(t, stdout)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			require.Len(t, lines, 1, stderr)
			assert.Contains(t, lines[0], tc.want)
		})
	}
}

// TestNCCLLogPublicTPGDS: the public NCCL 2.27.5 log (calibrate/testdata/public/logs) has no comm
// line, so its 16 ranks come from its first "... nranks 16 ... - Init COMPLETE" line (line 86);
// both its decision lines (12 and 104, grep -n "Bytes -> Algo") are read; it has no GRAPH line,
// so --check-decisions has no topology to price them on and says so (exit status 2).
func TestNCCLLogPublicTPGDS(t *testing.T) {
	log := "../../calibrate/testdata/public/logs/devopsrustem__slurmv4__tpgds-aihub0007_nccl2.27.5_16ranks.txt"
	code, stdout, stderr := runMain(t, "nccl-log", log)
	require.Equal(t, 0, code, stderr)
	assert.True(t, strings.HasPrefix(stdout, log+": 16 ranks (Init COMPLETE, line 86)\n"), stdout)
	assert.Contains(t, stdout, "TUNING decisions: 2 (2 in the 2.24+ format)")
	got := ncclLogRun(t, log)
	require.Len(t, got.Decisions, 2)
	assert.Equal(t, [2]int{12, 104}, [2]int{got.Decisions[0].Line, got.Decisions[1].Line})
	assert.Equal(t, [2]int{16, 86}, [2]int{got.Comm.InitRanks, got.Comm.InitLine})

	code, stdout, stderr = runMain(t, "nccl-log", log, "--check-decisions")
	assert.Equal(t, 2, code)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, log+": no topology file from this log")
	assert.Contains(t, stderr, "no GRAPH line of a known pattern")
}
