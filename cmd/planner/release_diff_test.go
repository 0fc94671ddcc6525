package main

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/report"
)

// TestUpgradeDiffPerDelta: planner diff --nccl A --to B between consecutive releases shows each
// model-relevant delta of reference §14 as a changed band. Where one release carries two deltas,
// --algo/--proto keep only the cells the delta moves (and an ARM copy of b200.toml turns the x86-only
// NVLSTree correction off), so the band is the delta's alone. The expected cells follow from the
// delta's direction, stated per row; the band's exact bounds are the model's and are not asserted.
//
// The deltas of tuning.cc that reference §14 does not list (llMaxBws' Hopper row, the Ring inter
// step count, Tree's NET latency at ppn 1, the NVLS AllGather ratio, the LL128 gate's compute
// capability list) have rows too. Deltas that no node table can show: the Tree pattern source (2.25 -> 2.26: a Topology's one tree
// graph has pattern max_tree_pattern, so the rules agree; the row asserts no change), the Tree
// Simple chunk shrink (<= 2.19: chunks are not priced; no change), LL128 with mixed compute
// capability (2.29 -> 2.30: a node table has one compute capability; costmodel's
// TestLL128MixedCompCapByRelease covers it) and the tuner ABI (not priced).
func TestUpgradeDiffPerDelta(t *testing.T) {
	clearNCCLEnv(t)
	const arm = "testdata/b200-arm.toml"
	for _, tc := range []struct {
		delta    string
		a, b     string
		table    string // --node NAME, or --a FILE for a path
		nodes    int
		extra    []string
		coll     string
		size     int64  // a size inside the band
		wantA    string // A's pick there ("" with wantB "": no pick changes anywhere)
		wantB    string
		strategy string // why B's pick differs
	}{
		{"Ring LL bw factor and llMaxBws Hopper row", "2.20", "2.21", "h100", 1, []string{"--algo", "Ring"}, "allreduce", 2 << 20,
			"RING/LL128", "RING/LL", "Ring/LL busBw x1/4 -> x0.5 and its cap llMaxBws[Hopper] 87.7 -> 141, both 2.21: LL gains the MiB band"},
		{"hw NVLINK NVLS 23 -> 25", "2.20", "2.21", "h100", 1, []string{"--algo", "NVLS,Tree"}, "allreduce", 180000,
			"NVLS/SIMPLE", "TREE/LL", "NVLS 23 + 180000/266667 = 23.67 us < Tree/LL 15.2 + 180000/(38740*0.5) = 24.49; at 25 us NVLS is 25.67: Tree wins"},
		{"latCount batch 9 -> 8", "2.21", "2.22", "h100", 1, []string{"--pipe-ops", "9"}, "allreduce", 256 << 10,
			"NVLS/SIMPLE", "TREE/LL", "9 ops: latCount 1 -> 2 doubles latency: lower-latency Tree/LL wins over NVLS"},
		{"Tree Simple latency", "2.22", "2.23", "h100", 4, []string{"--algo", "Tree,Ring", "--proto", "Simple"}, "allreduce", 1 << 20,
			"RING/SIMPLE", "TREE/SIMPLE", "Tree/Simple lat 2*(7*28+2*28) = 504 -> 8.4+2*(7*4+2*14) = 120.4 (Ring/Simple's 8 -> 6 inter steps move it far less): Tree wins"},
		{"Ring AllReduce inter steps 2*nNodes -> 2*(nNodes-1)", "2.22", "2.23", "h100", 4, []string{"--algo", "Tree,Ring", "--proto", "LL"}, "allreduce", 300000,
			"TREE/LL", "RING/LL", "Ring/LL loses 2 of its 8 inter-node steps (Tree/LL unchanged): Ring wins a few more sizes"},
		{"Ring LL128 factor at ppn 1", "2.22", "2.23", "gh200", 4, []string{"--fabric", "ib-ndr", "--algo", "Ring", "--proto", "LL128,Simple"}, "allgather", 4 << 20,
			"RING/SIMPLE", "RING/LL128", "one GPU per node: LL128 x0.7 -> x0.92 outweighs its inter-node latency 4.0 -> 8.5 (ppn-1 rule); Simple unchanged (14 both)"},
		{"inter-node latency at ppn 1 is Tree's", "2.22", "2.23", "gh200", 4, []string{"--fabric", "ib-ndr", "--algo", "Ring", "--proto", "LL,Simple"}, "allgather", 1572864,
			"RING/LL", "RING/SIMPLE", "Ring/LL's 3 inter-node steps 2.7 -> 5.0 us each (Tree's NET LL); Simple 14 both"},
		{"NVLS AllGather ratio 5/6 dropped", "2.22", "2.23", "h100", 1, []string{"--algo", "NVLS,Ring", "--proto", "LL128,Simple"}, "allgather", 8 << 20,
			"RING/LL128", "NVLS/SIMPLE", "NVLS AllGather keeps busBw (no x5/6) from 2.23"},
		{"PAT present", "2.22", "2.23", "gh200", 4, []string{"--fabric", "ib-ndr"}, "allgather", 1572864,
			"RING/LL128", "PAT/SIMPLE", "PAT is modelled from 2.23 (one GPU per node, host net device)"},
		{"PAT factor 0.85 -> 0.75", "2.23", "2.24", "gh200", 4, []string{"--fabric", "ib-ndr"}, "allgather", 1572864,
			"PAT/SIMPLE", "RING/LL128", "PAT's bandwidth drops by 0.75/0.85"},
		{"NCCL_PROTO per-function syntax", "2.23", "2.24", "h100", 1, []string{"--proto", "^LL128;allreduce:LL128"}, "allgather", 16 << 20,
			"RING/LL128", "NVLS/SIMPLE", "2.23 reads one unknown token (all on); 2.24 turns LL128 off for AllGather"},
		{"Tree pattern source", "2.25", "2.26", "h100", 4, nil, "allreduce", 0, "", "", "the graph's pattern is max_tree_pattern"},
		{"Blackwell ceilings 2x Hopper", "2.24", "2.25", "b200", 1, []string{"--proto", "LL,Simple"}, "broadcast", 1 << 20,
			"RING/SIMPLE", "RING/LL", "Blackwell gets its row (v2.25.1): llMaxBws N1 141 -> 282 lifts Ring/LL"},
		{"LL128 auto gate admits cc 100", "2.24", "2.25", "b200", 2, []string{"--algo", "Ring"}, "allgather", 16 << 20,
			"RING/SIMPLE", "RING/LL128", "the gate's list 70, 80, 90 gains 100 and 120 (v2.25.1)"},
		{"no Blackwell change in 2.27", "2.26", "2.27", "b200", 1, nil, "broadcast", 0, "", "", "reference §14 dates the 2x rows to 2.27; v2.25.1 has them"},
		{"Blackwell ceilings explicit", "2.27", "2.28", "b200", 2, []string{"--algo", "Tree,Ring"}, "allreduce", 4000000,
			"TREE/LL128", "RING/LL128", "perChMaxTreeLL128Bws N2 73.4 -> 31.67 caps Tree/LL128"},
		{"NVLS model", "2.27", "2.28", "h100", 1, nil, "allgather", 8 << 20,
			"NVLS/SIMPLE", "RING/LL128", "NVLS AllGather bw min(bwIntra, bwInter)*nCh -> the nvlsEfficiency model (x0.85*(nCh-1)/nCh*(ppn-1)/ppn)"},
		{"hw NET NVLSTree 14 -> 20.9", "2.28.3", "2.28.9", "h100", 2, nil, "allreduce", 512 << 10,
			"NVLS_TREE/SIMPLE", "TREE/LL128", "NVLSTree latency 25+2*14 = 53 -> 25+2*20.9 = 66.8"},
		{"NVLSTree treeCorrectionFactor", "2.28.9", "2.29", "b200", 2, nil, "allreduce", 2000000,
			"NVLS_TREE/SIMPLE", "TREE/LL128", "NVLSTree bw x treeCorrectionFactor (cc 100, x86): Simple 0.5 in bucket 14 (1-2 MiB)"},
		{"NVLSTree correction is x86 only", "2.28.9", "2.29", arm, 2, nil, "allreduce", 0, "", "", "ARM: no correction, N2 ceiling unchanged"},
		{"NVLSTree N4 ceiling 43.1 -> 43.8", "2.28.9", "2.29", arm, 4, nil, "allreduce", 512 << 20,
			"RING/SIMPLE", "NVLS_TREE/SIMPLE", "NVLSTree per-channel ceiling up 1.6%"},
		{"NVLSTree N4 ceiling 43.8 -> 80", "2.29", "2.30", "b200", 4, nil, "allreduce", 24 << 20,
			"RING/LL128", "NVLS_TREE/SIMPLE", "NVLSTree per-channel ceiling 43.8 -> 80 no longer binds"},
		{"Tree Simple chunk shrink", "2.19", "2.20", "h100", 2, nil, "allreduce", 0, "", "", "chunks are not priced"},
	} {
		t.Run(tc.delta, func(t *testing.T) {
			args := []string{"diff", "--json", "--nccl", tc.a, "--to", tc.b, "--nodes", fmt.Sprint(tc.nodes), "--coll", tc.coll}
			if tc.table == arm {
				args = append(args, "--a", tc.table)
			} else {
				args = append(args, "--node", tc.table)
			}
			out, err := runCLI(t, "", append(args, tc.extra...)...)
			require.NoError(t, err)
			var d report.Diff
			require.NoError(t, json.Unmarshal([]byte(out), &d))
			ra, err := mustParseRelease(tc.a)
			require.NoError(t, err)
			assert.Equal(t, ra, d.NCCLA)
			if tc.wantA == "" {
				assert.Zero(t, d.Changed, "%s: %s", tc.delta, tc.strategy)
				return
			}
			require.Len(t, d.Rows, 1, out)
			var hit *report.DiffBand
			for i, bd := range d.Rows[0].Bands {
				if bd.Lo <= tc.size && tc.size <= bd.Hi {
					hit = &d.Rows[0].Bands[i]
				}
			}
			require.NotNil(t, hit, "no band holds %d: %s", tc.size, out)
			assert.Equal(t, tc.wantA, hit.A, tc.strategy)
			assert.Equal(t, tc.wantB, hit.B, tc.strategy)
		})
	}
}

func mustParseRelease(s string) (string, error) {
	r, err := parseRelease("--nccl", s)
	return r.String(), err
}

// TestUpgradeDiffFlags: the upgrade check's flag errors.
func TestUpgradeDiffFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--node", "h100", "--a", "h100", "--nccl", "2.28"}, "--node names the table of both sides"},
		{[]string{"--node", "h100", "--nccl", "2.17"}, "--nccl: NCCL release \"2.17\" is not supported"},
		{[]string{"--node", "h100", "--to", "2.31"}, "--to: NCCL release \"2.31\" is not supported"},
		{[]string{"--nccl", "2.28"}, "--a (or --node) is required"},
	} {
		_, err := runCLI(t, "", append([]string{"diff"}, tc.args...)...)
		var ue usageError
		require.ErrorAs(t, err, &ue, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want)
	}
	// --to alone compares 2.30.7 (A) with the release given (B), and labels both.
	out, err := runCLI(t, "", "diff", "--node", "h100", "--to", "2.28.3", "--nodes", "2", "--coll", "allreduce")
	require.NoError(t, err)
	assert.Contains(t, out, "A = h100 (NCCL 2.30.7)\nB = h100 (NCCL 2.28.3)")
}
