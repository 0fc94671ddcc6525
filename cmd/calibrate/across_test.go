package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// TestFitAcrossSeedNodeCounts: the seed's 2- and 4-node H200 sweeps (Tree and Ring pinned, each
// node count its own files) are fitted together; before, calibrate refused them ("sweeps ran on 2
// and 4 nodes; pick one with --nodes"). The overlay holds cells at 2, 4 and the predicted 8 nodes,
// tagged as such, and loads; the planner at 8 nodes applies them.
func TestFitAcrossSeedNodeCounts(t *testing.T) {
	out := filepath.Join(t.TempDir(), "h200.fit.toml")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--node", "h200", "--sweeps", "../../calibrate/testdata/fit/h200-2n4n",
		"--out", out, "--predict-nodes", "8", "--json"}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	var rep AcrossReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep))
	assert.Equal(t, []int{2, 4}, rep.Fitted)
	assert.Equal(t, []int{2, 4, 8}, rep.Written)
	assert.Equal(t, 20, rep.Points)
	require.Len(t, rep.Errors, 2)
	for _, e := range rep.Errors {
		assert.Equal(t, 10, e.Points)
		assert.LessOrEqual(t, e.Fitted, e.Prior, "%d nodes: the fit is no worse than the prior on its own points", e.Nodes)
	}
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(data), "nodes = 8  # predicted by the fit across 2, 4 nodes")
	assert.Contains(t, string(data), "nodes = 4  # measured (fitted across 2, 4 nodes)")
	base, err := tables.LoadBase("h200")
	require.NoError(t, err)
	on, err := tables.ApplyOverlay(base, out, data)
	require.NoError(t, err)
	topo, err := capabilities.FromNode(on, 8)
	require.NoError(t, err)
	cfg, err := node.PlannerConfig(on, &topo)
	require.NoError(t, err)
	require.NotEmpty(t, cfg.Cells, "cells at 8 nodes")
	pl, err := planner.New(&topo, cfg)
	require.NoError(t, err)
	assert.Positive(t, pl.Overlay().Applied)
}

// TestHoldoutNodes: sweeps generated from a "true" machine (the h100 table with NCCL's NET hop
// latencies x1.8 and every graph's bwInter x0.6: an oracle independent of the fit) at 4, 8 and 16
// nodes; --holdout-nodes 16 fits 4 and 8 and predicts 16 within 2 %, where the prior is off by more
// than 10 %.
func TestHoldoutNodes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n, err := tables.Load("h100")
	require.NoError(t, err)
	k := costmodel.DefaultConstants()
	for a := range k.HWLat[costmodel.HWNet] {
		for p := range k.HWLat[costmodel.HWNet][a] {
			k.HWLat[costmodel.HWNet][a][p] *= 1.8
		}
	}
	var man strings.Builder
	cells := []struct {
		a costmodel.Algo
		p costmodel.Proto
	}{{costmodel.Ring, costmodel.Simple}, {costmodel.Tree, costmodel.LL128}}
	for _, nn := range []int{4, 8, 16} {
		topo, err := capabilities.FromNode(n, nn)
		require.NoError(t, err)
		for _, g := range []*capabilities.Graph{&topo.Graphs.Tree, &topo.Graphs.Ring} {
			g.BwInter *= 0.6
		}
		tp, err := planner.New(&topo, planner.Config{Constants: &k})
		require.NoError(t, err)
		menus, err := calibrate.Menus(ctx, tp)
		require.NoError(t, err)
		for _, c := range cells {
			a, p := c.a, c.p
			name := fmt.Sprintf("%s_%s_%dn.txt", a, p, nn)
			writeSynthSweep(t, filepath.Join(dir, name), func(b int64) float64 {
				return float64(menus[costmodel.AllReduce].Time(a, p, b))
			})
			fmt.Fprintf(&man, "[[sweep]]\nfile = %q\nalgo = %q\nproto = %q\nnodes = %d\ngpus_per_node = 8\n\n", name, a, p, nn)
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sweeps.toml"), []byte(man.String()), 0o644))
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"--node", "h100", "--sweeps", dir, "--out", filepath.Join(dir, "h100.fit.toml"),
		"--holdout-nodes", "16", "--no-corrections", "--json"}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	var rep AcrossReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep))
	assert.Equal(t, []int{4, 8}, rep.Fitted)
	assert.Equal(t, 16, rep.HeldOut)
	require.Len(t, rep.Errors, 3)
	held := rep.Errors[2]
	require.Equal(t, 16, held.Nodes)
	assert.Equal(t, "held out", held.Role)
	t.Logf("16 nodes (held out): fitted %.2f%%, prior %.2f%%", 100*held.Fitted, 100*held.Prior)
	assert.Less(t, held.Fitted, 0.02)
	assert.Greater(t, held.Prior, 0.10)
}

// TestAcrossBadInput: the flags of a fit across node counts and their errors.
func TestAcrossBadInput(t *testing.T) {
	seed := "../../calibrate/testdata/fit/h200-2n4n"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--holdout-nodes", "8"}, "--holdout-nodes 8: no sweep ran on 8 nodes (they ran on 2, 4)"},
		{[]string{"--predict-nodes", "8,x"}, `--predict-nodes "8,x": "x" is not a positive integer (want node counts`},
		{[]string{"--predict-nodes", "0"}, `"0" is not a positive integer`},
		{[]string{"--holdout", "2"}, "a fit across node counts holds out a node count (--holdout-nodes N), not sizes"},
		{[]string{"--nodes", "2", "--holdout-nodes", "4"}, "--holdout-nodes and --predict-nodes are for sweeps at several node counts"},
		{[]string{"--svg", filepath.Join(t.TempDir(), "x.svg")}, "--svg: the sweeps ran on 2, 4 nodes; plot one node count with --nodes N"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"--node", "h200", "--sweeps", seed, "--out", filepath.Join(t.TempDir(), "o.fit.toml")}, tc.args...)
		err := run(context.Background(), args, &stdout, &stderr)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want, "%v", tc.args)
		var ue usageError
		assert.ErrorAs(t, err, &ue, "%v: exit 2", tc.args)
	}
}

// TestPublicScalingHoldout is issue 12's multi-node acceptance on public data: ABCI 2.0's
// all_reduce at 1, 2, 4, 8 and 16 nodes (calibrate/testdata/public, unedited), fitted without 16
// nodes; the median prediction error there must be at most 15 % (the bound) and below the
// prior's.
func TestPublicScalingHoldout(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--node", "a100", "--fabric", "ib-hdr",
		"--sweeps", "../../calibrate/testdata/public/sets/abci-a100-allreduce-1-16n/sweeps.toml",
		"--holdout-nodes", "16", "--out", filepath.Join(t.TempDir(), "abci.fit.toml"), "--json"}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	var rep AcrossReport
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep))
	assert.Equal(t, []int{1, 2, 4, 8}, rep.Fitted)
	var held *AcrossNodeError
	for i := range rep.Errors {
		if rep.Errors[i].Nodes == 16 {
			held = &rep.Errors[i]
		}
	}
	require.NotNil(t, held)
	require.Positive(t, held.Points)
	t.Logf("16 nodes held out: fitted %.1f%%, prior %.1f%% (%d points)", 100*held.Fitted, 100*held.Prior, held.Points)
	assert.LessOrEqual(t, held.Fitted, 0.15)
	assert.Less(t, held.Fitted, held.Prior)
}
