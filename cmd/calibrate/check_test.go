package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
)

// partialFree is a set of sweeps with no run pinned on both algorithm and protocol: Ring-only,
// Tree-only and free runs on h200 at 2 nodes.
const partialFree = "testdata/h200-2n-free"

// partialFreeUS are the in-place times of partialFree's runs (us), read off its files.
var partialFreeUS = map[int64]struct{ ring, tree, free float64 }{
	256:      {100, 44, 40},
	65536:    {111, 48, 50},
	1048576:  {158, 130, 125},
	16777216: {226, 233, 230},
	67108864: {522, 651, 500},
}

// TestCheckPartialAndFree: --check scores an overlay on algorithm-only and free sweeps (before:
// "calibrate: no pinned point to evaluate"). Oracle, from partialFreeUS: the best is the fastest of
// the three runs; a pick on Ring is measured by the Ring run and one on Tree by the Tree run, both
// as proxies ("via NCCL_ALGO=..."); any other pick is unmeasured; NCCL default is the free run.
func TestCheckPartialAndFree(t *testing.T) {
	ctx := context.Background()
	overlay := filepath.Join(t.TempDir(), "h200.fit.toml")
	var out, errb bytes.Buffer
	require.NoError(t, run(ctx, []string{"--node", "h200", "--nodes", "2", "--sweeps", fixtures, "--out", overlay}, &out, &errb), errb.String())

	out.Reset()
	errb.Reset()
	require.NoError(t, run(ctx, []string{"--node", "h200", "--check", partialFree, "--out", overlay, "--json"}, &out, &errb), errb.String())
	var ev calibrate.Eval
	require.NoError(t, json.Unmarshal(out.Bytes(), &ev))
	assert.Equal(t, 0, ev.Points)
	assert.Equal(t, 15, ev.EnvelopePoints)
	require.Len(t, ev.Policies, 4)
	require.Equal(t, "nccl default", ev.Policies[3].Name)
	require.Len(t, ev.Sizes, len(partialFreeUS))
	proxied := 0
	for _, s := range ev.Sizes {
		m, ok := partialFreeUS[s.Bytes]
		require.True(t, ok, s.Bytes)
		best := min(m.ring, m.tree, m.free)
		assert.Equal(t, best, s.BestUS, "best at %d", s.Bytes)
		for i, p := range s.Picks[:3] {
			name := ev.Policies[i].Name
			wantUS, via := 0.0, ""
			switch {
			case strings.Contains(p.Cell, "/RING/"):
				wantUS, via = m.ring, "NCCL_ALGO=Ring"
			case strings.Contains(p.Cell, "/TREE/"):
				wantUS, via = m.tree, "NCCL_ALGO=Tree"
			}
			assert.Equal(t, via, p.Via, "%s at %d (%s)", name, s.Bytes, p.Cell)
			assert.Equal(t, wantUS, p.MeasuredUS, "%s at %d (%s)", name, s.Bytes, p.Cell)
			if wantUS == 0 {
				assert.Equal(t, -1.0, p.Regret, "%s at %d (%s)", name, s.Bytes, p.Cell)
				continue
			}
			proxied++
			assert.InDelta(t, wantUS/best-1, p.Regret, 1e-12, "%s at %d (%s)", name, s.Bytes, p.Cell)
		}
		assert.InDelta(t, m.free/best-1, s.Picks[3].Regret, 1e-12, "nccl default at %d", s.Bytes)
	}
	assert.Positive(t, proxied)
	for _, p := range ev.Policies[:3] {
		assert.Zero(t, p.RegretExactSizes, p.Name)
		assert.Equal(t, p.RegretSizes, p.RegretProxySizes, p.Name)
	}
	// NCCL default by hand: 0, 50/48-1, 0, 230/226-1, 0: median 0, max 1/24.
	assert.InDelta(t, 0, ev.Policies[3].RegretMedian, 1e-12)
	assert.InDelta(t, 50.0/48-1, ev.Policies[3].RegretMax, 1e-12)
	for _, p := range ev.Policies[:2] {
		assert.Equal(t, 15, p.EnvPoints, p.Name)
	}

	out.Reset()
	require.NoError(t, run(ctx, []string{"--node", "h200", "--check", partialFree, "--out", overlay}, &out, &errb))
	assert.Contains(t, out.String(), "via NCCL_ALGO=Tree")
	assert.Contains(t, out.String(), "prediction error, prior vs fitted: pinned points median 0.000 vs 0.000 (0 points); envelope points median")
	assert.Contains(t, errb.String(), "on 0 pinned and 15 envelope points")
}
