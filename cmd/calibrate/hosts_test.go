package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/emuhost"
	"github.com/collplan/collplan/tables"
)

// TestRunAcrossEmulatedHosts: calibrate --node cpu-net --run --transport net sweeps every legal
// AllReduce cell across 2 emulated hosts (collbench --hosts 2), one rank each; the manifest records
// 2 nodes of 1 rank and the collbench command that measured each sweep, and the overlay fitted to
// them loads over cpu-net. Skips where emulated hosts cannot be made, fails there with
// COLLPLAN_REQUIRE_NETNS=1 (as CI runs).
func TestRunAcrossEmulatedHosts(t *testing.T) {
	if err := emuhost.Check(); err != nil {
		if os.Getenv("COLLPLAN_REQUIRE_NETNS") == "1" {
			t.Fatalf("COLLPLAN_REQUIRE_NETNS=1 but emulated hosts cannot be made: %v", err)
		}
		t.Skipf("--transport net needs emulated hosts (%v)", err)
	}
	bin := needCollbench(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	sweeps, overlay := filepath.Join(dir, "sweeps"), filepath.Join(dir, "cpu-net.fit.toml")
	var out, errb bytes.Buffer
	err := run(ctx, []string{"--node", "cpu-net", "--run", "--transport", "net", "--nodes", "2", "--colls", "allreduce",
		"--min", "8", "--max", "64K", "--factor", "16", "--iters", "3", "--warmup", "1", "--collbench", bin,
		"--sweeps-out", sweeps, "--out", overlay, "--json", "--date", "2026-12-02"}, &out, &errb)
	require.NoError(t, err, errb.String())
	var rep calibrate.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, 2, rep.Nodes)

	man, err := calibrate.LoadManifest(filepath.Join(sweeps, calibrate.ManifestName))
	require.NoError(t, err)
	var pins []string
	for _, e := range man.Sweeps {
		assert.Equal(t, 2, e.Nodes, e.File)
		assert.Equal(t, 1, e.GPUsPerNode, e.File)
		assert.Contains(t, e.Note, "--hosts 2", e.File)
		assert.NotContains(t, e.Note, "--transport", e.File)
		pins = append(pins, e.Algo+"/"+e.Proto)
	}
	// cpu-net: LL128 off (the auto gate), no switch, no reducing network: Tree and Ring with LL and
	// Simple, and the free choice.
	assert.Equal(t, []string{"Tree/LL", "Tree/Simple", "Ring/LL", "Ring/Simple", "/"}, pins)

	data, err := os.ReadFile(overlay)
	require.NoError(t, err)
	base, err := tables.Load("cpu-net")
	require.NoError(t, err)
	_, err = tables.ApplyOverlay(base, overlay, data)
	require.NoError(t, err)
}
