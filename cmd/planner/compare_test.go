package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompare scores the built-in policy against a rules tuner that forces Ring/Simple, on three
// hand-written pinned sweeps (testdata/compare) for §13 S1. By hand: S1 picks RING/LL at 4 KiB and
// 1 MiB and NVLS/SIMPLE at 64 MiB. Measured best: RING/LL 20 us, NVLS 25 us, NVLS 380 us. So A's
// regrets are 0, 30/25-1 = 20 %, 0 (median 0, max 20 %); B's are 60/20-1 = 200 %, 60/25-1 = 140 %,
// 400/380-1 = 5.3 % (median 140 %, max 200 %). A wins.
func TestCompare(t *testing.T) {
	clearNCCLEnv(t)
	out, _, err := runTuner(t, "", "compare", "--topology", topoDir+"s1.toml", "--sweeps", "testdata/compare",
		"--b", filepath.Join(tunerBin, "tuner-rules"), "--b-config", "testdata/ring_simple.conf")
	require.NoError(t, err)
	lines := strings.Split(out, "\n")
	row := func(size string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, "AllReduce") && strings.Contains(l, " "+size+" ") {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		t.Fatalf("no row for %s in\n%s", size, out)
		return ""
	}
	assert.Equal(t, "AllReduce 4 KiB RING/LL 20.00 RING/LL 20.00 0.0% RING/SIMPLE 60.00 200.0%", row("KiB"))
	assert.Equal(t, "AllReduce 1 MiB NVLS/SIMPLE 25.00 RING/LL 30.00 20.0% RING/SIMPLE 60.00 140.0%", row("1 MiB"))
	assert.Equal(t, "AllReduce 64 MiB NVLS/SIMPLE 380.00 NVLS/SIMPLE 380.00 0.0% RING/SIMPLE 400.00 5.3%", row("64 MiB"))
	assert.Contains(t, out, "picks differ at 3 of 3 sizes")
	assert.Contains(t, out, "tuner A (none): median regret 0.0%, max 20.0% over 3 measured picks")
	assert.Contains(t, out, "median regret 140.0%, max 200.0% over 3 measured picks")
	assert.Contains(t, out, "verdict: A (none) wins")

	// A missing --sweeps, a --tuner and a missing directory are errors.
	_, _, err = runTuner(t, "", "compare", "--topology", topoDir+"s1.toml")
	assert.ErrorContains(t, err, "--sweeps")
	_, _, err = runTuner(t, "", "compare", "--topology", topoDir+"s1.toml", "--sweeps", "testdata/compare", "--tuner", "x")
	assert.Error(t, err)
	_, _, err = runTuner(t, "", "compare", "--topology", topoDir+"s1.toml", "--sweeps", "testdata/nope")
	assert.Error(t, err)
}

// compareRow is the row of size (" 4 KiB ", " 1 MiB ", ...) in compare's output, its fields joined
// by single spaces.
func compareRow(t *testing.T, out, size string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "AllReduce") && strings.Contains(l, size) {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	t.Fatalf("no row for %s in\n%s", size, out)
	return ""
}

// TestComparePartialAndFree: algorithm-only and free sweeps are scored (before: "no pinned
// (algorithm and protocol) sweep for this topology"). testdata/compare-partial on §13 S1: a Ring-only
// run (legal cells RING/LL, LL128, SIMPLE), an NVLS-only run (NVLS/SIMPLE alone, so exact) and a
// free run, in place (us):
//
//	size    ring  nvls  free
//	4 KiB     20    30    22
//	1 MiB     30    25    24
//	64 MiB   900   380   370
//
// A (none) picks RING/LL, RING/LL, NVLS/SIMPLE; B (Ring/Simple) RING/SIMPLE. By hand: best 20
// (Ring run), 24 (free), 370 (free). A: via Ring 20/20-1 = 0, via Ring 30/24-1 = 25 %, exact
// 380/370-1 = 2.7 %. B: via Ring 0, 25 %, 900/370-1 = 143.2 %. NCCL default: 22/20-1 = 10 %, 0, 0.
func TestComparePartialAndFree(t *testing.T) {
	clearNCCLEnv(t)
	out, _, err := runTuner(t, "", "compare", "--topology", topoDir+"s1.toml", "--sweeps", "testdata/compare-partial",
		"--b", filepath.Join(tunerBin, "tuner-rules"), "--b-config", "testdata/ring_simple.conf")
	require.NoError(t, err)
	assert.Equal(t, "AllReduce 4 KiB NCCL_ALGO=Ring 20.00 RING/LL via NCCL_ALGO=Ring 20.00 0.0% RING/SIMPLE via NCCL_ALGO=Ring 20.00 0.0% 22.00 10.0%", compareRow(t, out, " KiB "))
	assert.Equal(t, "AllReduce 1 MiB NCCL default 24.00 RING/LL via NCCL_ALGO=Ring 30.00 25.0% RING/SIMPLE via NCCL_ALGO=Ring 30.00 25.0% 24.00 0.0%", compareRow(t, out, " 1 MiB "))
	assert.Equal(t, "AllReduce 64 MiB NCCL default 370.00 NVLS/SIMPLE 380.00 2.7% RING/SIMPLE via NCCL_ALGO=Ring 900.00 143.2% 370.00 0.0%", compareRow(t, out, " 64 MiB "))
	assert.Contains(t, out, "tuner A (none): median regret 2.7%, max 25.0% over 3 measured picks (1 exact, 2 by proxy; 0 picks not measured)")
	assert.Contains(t, out, "median regret 25.0%, max 143.2% over 3 measured picks (0 exact, 3 by proxy; 0 picks not measured)")
	assert.Contains(t, out, "nccl default (the free runs, the baseline to beat): median regret 0.0%, max 10.0% over 3 sizes")
	assert.Contains(t, out, "verdict: A (none) wins")
}

// TestCompareOneHalf: every run is scored on one half (--half, in place by default). In
// testdata/compare-half the Ring/LL run's in-place half is wrong at 1 MiB (#wrong 1) and its
// out-of-place time is 10 us. Before, compare took that out-of-place 10 us as Ring/LL's time among
// the other runs' in-place times (best RING/LL 10, regret 0). In place, no run measures Ring/LL
// at 1 MiB: best NVLS/SIMPLE 25, A's RING/LL not measured. Out of place: Ring/LL 10 is the best.
func TestCompareOneHalf(t *testing.T) {
	clearNCCLEnv(t)
	tests := []struct {
		half, row, summary string
	}{
		{"", "AllReduce 1 MiB NVLS/SIMPLE 25.00 RING/LL - not measured RING/LL - not measured", "(2 exact, 0 by proxy; 1 picks not measured)"},
		{"ip", "AllReduce 1 MiB NVLS/SIMPLE 25.00 RING/LL - not measured RING/LL - not measured", "(in-place half)"},
		{"oop", "AllReduce 1 MiB RING/LL 10.00 RING/LL 10.00 0.0% RING/LL 10.00 0.0%", "(out-of-place half)"},
	}
	for _, tt := range tests {
		t.Run(tt.half, func(t *testing.T) {
			args := []string{"compare", "--topology", topoDir + "s1.toml", "--sweeps", "testdata/compare-half"}
			if tt.half != "" {
				args = append(args, "--half", tt.half)
			}
			out, _, err := runTuner(t, "", args...)
			require.NoError(t, err)
			assert.Equal(t, tt.row, compareRow(t, out, " 1 MiB "))
			assert.Contains(t, out, tt.summary)
		})
	}
	_, _, err := runTuner(t, "", "compare", "--topology", topoDir+"s1.toml", "--sweeps", "testdata/compare-half", "--half", "both")
	assert.ErrorContains(t, err, `--half "both": want oop or ip`)
}
