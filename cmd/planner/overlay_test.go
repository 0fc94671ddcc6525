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

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/tables"
)

// runCLIErr runs the planner and returns stdout and stderr.
func runCLIErr(t *testing.T, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), err
}

// shippedCells lists the shipped cpu overlay's fitted cells at 1 x 2 (the table's gpus_per_node),
// as NAME/ALGO/PROTO in the planner's spelling, read from the table (not from the planner), with
// keep choosing the ones the test expects to be skipped.
func shippedCells(t *testing.T, keep func(algo, proto string) bool) []string {
	t.Helper()
	n, err := tables.Load("cpu")
	require.NoError(t, err)
	require.NotNil(t, n.Fit, "cpu ships a fitted overlay")
	var out []string
	for _, c := range n.Fit.Cell {
		if c.Nodes != 1 || c.RanksPerNode != n.Node.GPUsPerNode || !keep(c.Algo, c.Proto) {
			continue
		}
		coll, err := capabilities.ParseColl(c.Coll)
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%s/%s/%s", coll, strings.ToUpper(c.Algo), strings.ToUpper(c.Proto)))
	}
	require.NotEmpty(t, out)
	return out
}

// TestOverlayNeverBreaksExplain: a fitted cell of the shipped cpu overlay that a filter (--algo) or
// an env pin (NCCL_PROTO in the process) makes illegal is not applied, and explain says which and
// why in its text and its JSON instead of failing (it failed with "override of AllReduce/TREE/LL:
// the cell is not usable").
func TestOverlayNeverBreaksExplain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		env    string // NCCL_PROTO in the process
		args   []string
		reason string
		skip   func(algo, proto string) bool
	}{
		{"--algo Ring", "", []string{"--algo", "Ring"}, `disabled by NCCL_ALGO="Ring" (flag)`,
			func(algo, _ string) bool { return algo != "ring" }},
		{"NCCL_PROTO=Simple", "Simple", nil, `disabled by NCCL_PROTO="Simple" (process)`,
			func(_, proto string) bool { return proto == "ll" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearNCCLEnv(t)
			if tc.env != "" {
				t.Setenv("NCCL_PROTO", tc.env)
			}
			args := append([]string{"explain", "--node", "cpu", "--coll", "allreduce", "--bytes", "1M"}, tc.args...)
			text, _, err := runCLIErr(t, "", args...)
			require.NoError(t, err)
			want := shippedCells(t, tc.skip)
			all := shippedCells(t, func(string, string) bool { return true })
			assert.Contains(t, text, fmt.Sprintf("   overlay: cpu.fit.toml (embedded): %d of %d fitted cells applied; not applied: ",
				len(all)-len(want), len(all)))
			for _, c := range want {
				assert.Contains(t, text, c)
			}
			assert.Contains(t, text, tc.reason)

			out, _, err := runCLIErr(t, "", append(args, "--json")...)
			require.NoError(t, err)
			var got struct {
				Overlay *struct {
					File     string `json:"file"`
					Embedded bool   `json:"embedded"`
					Skipped  []struct {
						Cell   string `json:"cell"`
						Reason string `json:"reason"`
					} `json:"skipped"`
				} `json:"overlay"`
			}
			require.NoError(t, json.Unmarshal([]byte(out), &got))
			require.NotNil(t, got.Overlay)
			assert.Equal(t, "cpu.fit.toml", got.Overlay.File)
			assert.True(t, got.Overlay.Embedded)
			var cells []string
			for _, s := range got.Overlay.Skipped {
				cells = append(cells, s.Cell)
				assert.Equal(t, tc.reason, s.Reason, s.Cell)
			}
			assert.Equal(t, want, cells)
		})
	}
}

// TestCompileOverlayEveryShape: planner compile --node cpu compiles every block of its default grid,
// the single-rank ones too (it failed on "1 nodes x 1 ranks"), and says on stderr which fitted
// cells a block could not use.
func TestCompileOverlayEveryShape(t *testing.T) {
	clearNCCLEnv(t)
	file := filepath.Join(t.TempDir(), "cpu.cptt")
	out, errs, err := runCLIErr(t, "", "compile", "--node", "cpu", "-o", file)
	require.NoError(t, err)
	// 1, 2, 4, ..., 1024 nodes (11) x (2, 1) ranks per node (cpu.toml: gpus_per_node = 2).
	assert.Equal(t, 22, strings.Count(out, " nodes "), out)
	assert.Contains(t, out, "     1 nodes      1 ranks  pipe ops 1..4")
	// At 1 x 1, where nothing was fitted, every one-node cell (1 x 2 and 1 x 4) is named.
	n, err := tables.Load("cpu")
	require.NoError(t, err)
	oneNode := 0
	for _, c := range n.Fit.Cell {
		if c.Nodes == 1 {
			oneNode++
		}
	}
	require.Greater(t, oneNode, len(shippedCells(t, func(string, string) bool { return true })), "cells at 1 x 2 and 1 x 4")
	assert.Contains(t, errs, fmt.Sprintf("planner: compile: 1 nodes x 1 ranks: overlay cpu.fit.toml: %d cells not applied: ", oneNode))
	assert.Contains(t, errs, "single rank: NCCL builds no model (n_ranks = 1)")
	_, err = os.Stat(file)
	assert.NoError(t, err)
}

// TestNoOverlay: --no-overlay plans with the base table alone: explain names no overlay and prices
// AllReduce Ring/LL with cpu.toml's own numbers, which differ from the fitted ones.
func TestNoOverlay(t *testing.T) {
	clearNCCLEnv(t)
	with := explainJSON(t, "--node", "cpu", "--coll", "allreduce", "--bytes", "1M")
	without := explainJSON(t, "--node", "cpu", "--coll", "allreduce", "--bytes", "1M", "--no-overlay")
	assert.NotNil(t, with["overlay"])
	assert.Nil(t, without["overlay"])
	base, err := tables.LoadBase("cpu")
	require.NoError(t, err)
	assert.Nil(t, base.Fit, "the base table has no fitted cells")
	n, err := tables.Load("cpu")
	require.NoError(t, err)
	var fitted float64
	for _, c := range n.Fit.Cell {
		if c.Coll == "allreduce" && c.Algo == "ring" && c.Proto == "ll" && c.Nodes == 1 && c.RanksPerNode == n.Node.GPUsPerNode {
			fitted = c.LatUS
		}
	}
	require.NotZero(t, fitted)
	lat := func(m map[string]any) float64 {
		for _, c := range m["menu"].([]any) {
			cm := c.(map[string]any)
			if cm["algo"] == "RING" && cm["proto"] == "LL" {
				return cm["lat_us"].(float64)
			}
		}
		t.Fatal("no RING/LL cell")
		return 0
	}
	assert.InDelta(t, fitted, lat(with), 1e-6, "the fitted latency applies")
	assert.NotEqual(t, float32(fitted), float32(lat(without)), "--no-overlay: the model's own latency")

	for _, args := range [][]string{
		{"query", "--node", "cpu", "--no-overlay"},
		{"map", "--node", "cpu", "--no-overlay", "--max", "1K"},
	} {
		_, _, err := runCLIErr(t, "allreduce,4K\n", args...)
		assert.NoError(t, err, args)
	}
	_, _, err = runCLIErr(t, "", "explain", "--topology", topoDir+"s1.toml", "--bytes", "1M", "--no-overlay")
	var ue usageError
	assert.ErrorAs(t, err, &ue, "--no-overlay needs a node table")
}

// TestOverlayNeverBreaksTheOtherCommands: map, query and compare on the cpu table with --algo Ring
// (which leaves the overlay's Tree cells illegal) answer, and say once which cells were not
// applied: map and compare under their header, query on stderr.
func TestOverlayNeverBreaksTheOtherCommands(t *testing.T) {
	clearNCCLEnv(t)
	tree := shippedCells(t, func(algo, _ string) bool { return algo == "tree" })
	const reason = `disabled by NCCL_ALGO="Ring" (flag)`
	for _, tc := range []struct {
		name   string
		args   []string
		stdin  string
		stdout bool // the note is on stdout (a header line), else on stderr
	}{
		{"map", []string{"map", "--node", "cpu", "--algo", "Ring", "--max", "1M"}, "", true},
		{"query", []string{"query", "--node", "cpu", "--algo", "Ring"}, "allreduce,4K\nbroadcast,1M\n", false},
		{"compare", []string{"compare", "--node", "cpu", "--algo", "Ring", "--sweeps", "../calibrate/testdata/cpu-ar"}, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errs, err := runCLIErr(t, tc.stdin, tc.args...)
			require.NoError(t, err, errs)
			where, other := errs, out
			if tc.stdout {
				where, other = out, errs
			}
			assert.Equal(t, 1, strings.Count(where, "overlay"), where)
			assert.NotContains(t, other, "overlay")
			for _, c := range tree {
				assert.Contains(t, where, c)
			}
			assert.Contains(t, where, reason)
		})
	}
}
