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
