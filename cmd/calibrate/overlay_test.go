package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// cpuFixtures are two pinned AllReduce sweeps of the cpu table (Ring/LL and Ring/Simple, 2 ranks).
const cpuFixtures = "testdata/cpu-ar"

// baseRingLL is the cpu table's own model latency of AllReduce Ring/LL at one node (2 ranks),
// priced from tables/cpu.toml decoded alone, without the overlay beside it.
func baseRingLL(t *testing.T) float64 {
	t.Helper()
	data, err := os.ReadFile("../../tables/cpu.toml")
	require.NoError(t, err)
	n, err := tables.Decode("cpu.toml", data)
	require.NoError(t, err)
	require.Nil(t, n.Fit)
	tp, err := capabilities.FromNode(n, 1)
	require.NoError(t, err)
	cfg, err := node.PlannerConfig(n, &tp)
	require.NoError(t, err)
	pl, err := planner.New(&tp, cfg)
	require.NoError(t, err)
	return float64(pl.Table().Lat[costmodel.AllReduce][costmodel.Ring][costmodel.LL])
}

// overlayRingLL reads the AllReduce Ring/LL latency at one node from an overlay file's text.
func overlayRingLL(t *testing.T, file string) float64 {
	t.Helper()
	var o struct {
		Fit struct {
			Cell []map[string]any `toml:"cell"`
		} `toml:"fit"`
	}
	_, err := toml.DecodeFile(file, &o)
	require.NoError(t, err)
	for _, c := range o.Fit.Cell {
		if c["coll"] == "allreduce" && c["algo"] == "ring" && c["proto"] == "ll" && c["nodes"] == int64(1) {
			return c["lat_us"].(float64)
		}
	}
	t.Fatalf("%s: no allreduce ring ll cell at 1 node", file)
	return 0
}

// TestPriorIsTheBaseTable: the prior of a fit is the node table without its overlay, unless
// --prior FILE names an overlay to apply over it; the report says which, in text and JSON. (The
// prior was the table with its shipped overlay, so a refit started from the last fit.)
func TestPriorIsTheBaseTable(t *testing.T) {
	shipped := "../../tables/cpu.fit.toml"
	for _, tc := range []struct {
		name        string
		args        []string
		wantOverlay string
		wantLat     float64
		wantText    string
	}{
		{"default: the base table", nil, "", baseRingLL(t), "prior: cpu.toml (the base table, no overlay)"},
		{"--prior an overlay", []string{"--prior", shipped}, shipped, overlayRingLL(t, shipped),
			"prior: cpu.toml with the overlay " + shipped + " (--prior)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "cpu.fit.toml")
			args := append([]string{"--node", "cpu", "--sweeps", cpuFixtures, "--out", out, "--no-corrections"}, tc.args...)
			var stdout, stderr bytes.Buffer
			require.NoError(t, run(context.Background(), append(args, "--json"), &stdout, &stderr), stderr.String())
			var rep struct {
				Prior struct {
					Table   string `json:"table"`
					Overlay string `json:"overlay"`
				} `json:"prior"`
				Params []struct {
					Cell  string  `json:"cell"`
					Kind  string  `json:"kind"`
					Prior float64 `json:"prior"`
				} `json:"params"`
			}
			require.NoError(t, json.Unmarshal(stdout.Bytes(), &rep))
			assert.Equal(t, "cpu.toml", rep.Prior.Table)
			assert.Equal(t, tc.wantOverlay, rep.Prior.Overlay)
			found := false
			for _, p := range rep.Params {
				if p.Cell == "AllReduce/RING/LL" && p.Kind == "lat_us" {
					found = true
					assert.InDelta(t, tc.wantLat, p.Prior, 1e-6)
				}
			}
			assert.True(t, found, "AllReduce/RING/LL lat_us is a parameter")

			stdout.Reset()
			require.NoError(t, os.Remove(out))
			require.NoError(t, run(context.Background(), args, &stdout, &stderr), stderr.String())
			assert.True(t, strings.HasPrefix(stdout.String(), tc.wantText+"\n"), stdout.String())
		})
	}
	for _, tc := range []struct {
		prior, want string
	}{
		{"testdata/missing.fit.toml", "--prior: "},
		{"../../tables/cpu.toml", "--prior ../../tables/cpu.toml: a node table; --prior takes an overlay (NAME.fit.toml)"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"--node", "cpu", "--sweeps", cpuFixtures, "--out", filepath.Join(t.TempDir(), "x.fit.toml"),
			"--prior", tc.prior}, &stdout, &stderr)
		var ue usageError
		require.ErrorAs(t, err, &ue, tc.prior)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// TestRunRefusesGPUTables: --run measures collplan's CPU engine, so on a GPU node table it is a
// usage error (one line, exit status 2) unless --force; nothing runs. (calibrate --node h200 --run
// ran the CPU engine and wrote 0.08 GB/s "H200" constants.)
func TestRunRefusesGPUTables(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"h200", "h100", "b200", "l40s-pcie"} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"--node", name, "--run", "--quick", "--collbench", "/does/not/exist",
			"--out", filepath.Join(dir, name+".fit.toml")}, &stdout, &stderr)
		var ue usageError
		require.ErrorAs(t, err, &ue, name)
		assert.Contains(t, err.Error(), "--run measures collplan's CPU engine", name)
		assert.Contains(t, err.Error(), "--force", name)
		assert.NotContains(t, err.Error(), "\n", "one line")
		assert.NotContains(t, stderr.String(), "running", "no sweep started")
	}
	// With --force the refusal is gone: the run gets as far as finding collbench.
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--node", "h200", "--run", "--quick", "--force", "--collbench", "/does/not/exist",
		"--out", filepath.Join(dir, "h200.fit.toml")}, &stdout, &stderr)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--collbench")
	err = run(context.Background(), []string{"--node", "h200", "--sweeps", fixtures, "--force", "--out", filepath.Join(dir, "h200.fit.toml")}, &stdout, &stderr)
	assert.ErrorContains(t, err, "--force is for --run")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries)
}

// TestDefaultOutNotInTables: without --out the overlay goes to NAME.fit.toml in the working
// directory, never into tables/ (the embedded tables' directory, which it wrote to) or beside a
// table file (where it would overlay it); a default that would land beside NAME.toml is refused.
func TestDefaultOutNotInTables(t *testing.T) {
	sweeps, err := filepath.Abs(fixtures)
	require.NoError(t, err)
	h200, err := os.ReadFile("../../tables/h200.toml")
	require.NoError(t, err)
	for _, tc := range []struct {
		name  string
		node  string // with the working directory as ".", and "t/h200.toml" a copy of h200.toml
		setup func(t *testing.T)
	}{
		{"embedded table", "h200", nil},
		{"a table file", "t/h200.toml", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wd := t.TempDir()
			t.Chdir(wd)
			require.NoError(t, os.Mkdir("tables", 0o755))
			require.NoError(t, os.Mkdir("t", 0o755))
			require.NoError(t, os.WriteFile("t/h200.toml", h200, 0o644))
			var stdout, stderr bytes.Buffer
			require.NoError(t, run(context.Background(), []string{"--node", tc.node, "--sweeps", sweeps}, &stdout, &stderr), stderr.String())
			assert.Contains(t, stderr.String(), "calibrate: wrote h200.fit.toml")
			_, err := os.Stat("h200.fit.toml")
			assert.NoError(t, err, "written in the working directory")
			for _, p := range []string{"tables/h200.fit.toml", "t/h200.fit.toml"} {
				_, err := os.Stat(p)
				assert.ErrorIs(t, err, os.ErrNotExist, p)
			}
		})
	}
	t.Run("beside the table", func(t *testing.T) {
		wd := t.TempDir()
		t.Chdir(wd)
		require.NoError(t, os.WriteFile("h200.toml", h200, 0o644))
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), []string{"--node", "h200.toml", "--sweeps", sweeps}, &stdout, &stderr)
		var ue usageError
		require.ErrorAs(t, err, &ue)
		assert.Contains(t, err.Error(), "--out (the default) h200.fit.toml: would overlay the table h200.toml beside it; name the file with --out")
		_, err = os.Stat("h200.fit.toml")
		assert.ErrorIs(t, err, os.ErrNotExist)
	})
}

// TestUpdateAnOlderOverlay: an overlay already at --out is rewritten with its cells at other node
// counts kept. One written before overlays had versions (the same keys) is migrated, and stderr
// says so; one of an unknown version is a usage error before any work.
func TestUpdateAnOlderOverlay(t *testing.T) {
	const cell4 = "[[fit.cell]]\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll\"\nnodes = 4\nlat_us = 30.0\nbw_gbps = 40.0\n" +
		"lat_sigma = 0.0\nbw_sigma = 0.0\npoints = 5\n"
	for _, tc := range []struct {
		name, head, wantErr, wantNote string
	}{
		{"no version", "", "", "has no schema_version (written before overlays had versions): rewritten at schema_version 1"},
		{"version 1", "schema_version = 1\n", "", ""},
		{"version 2", "schema_version = 2\n", "the overlay to update: tables: ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "h200.fit.toml")
			require.NoError(t, os.WriteFile(out, []byte(tc.head+cell4), 0o644))
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), []string{"--node", "h200", "--sweeps", fixtures, "--out", out}, &stdout, &stderr)
			if tc.wantErr != "" {
				var ue usageError
				require.ErrorAs(t, err, &ue)
				assert.Contains(t, err.Error(), tc.wantErr)
				assert.Contains(t, err.Error(), "schema_version: 2 is not a version this build reads")
				assert.Empty(t, stdout.String(), "no fit")
				return
			}
			require.NoError(t, err, stderr.String())
			if tc.wantNote != "" {
				assert.Contains(t, stderr.String(), out+" "+tc.wantNote)
			} else {
				assert.NotContains(t, stderr.String(), "schema_version")
			}
			base, err := tables.LoadBase("h200")
			require.NoError(t, err)
			data, err := os.ReadFile(out)
			require.NoError(t, err)
			n, err := tables.ApplyOverlay(base, out, data)
			require.NoError(t, err, "rewritten at the current version")
			nodes := map[int]int{}
			for _, c := range n.Fit.Cell {
				nodes[c.Nodes]++
			}
			assert.Equal(t, 1, nodes[4], "the 4-node cell is kept")
			assert.Positive(t, nodes[2], "the 2-node cells are fitted")
		})
	}
}
