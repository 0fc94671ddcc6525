package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/tables"
)

// ll128Fixtures are an 8 x L40S PCIe box's sweeps: Ring/LL128 and Ring/Simple pinned at one node,
// and a Ring/Simple sweep on two nodes that a one-node fit skips.
const ll128Fixtures = "testdata/ll128-pcie"

// fitJSON runs calibrate with args plus --json into a fresh --out beside a copy of tables/NAME.toml
// (so that loading the copy applies it) and returns the report, the overlay as loaded over its
// table, stderr and the error.
func fitJSON(t *testing.T, table string, args ...string) (map[string]any, *tables.Node, string, error) {
	t.Helper()
	dir := t.TempDir()
	data, err := os.ReadFile(filepath.Join("..", "..", "tables", table+".toml"))
	require.NoError(t, err)
	base := filepath.Join(dir, table+".toml")
	require.NoError(t, os.WriteFile(base, data, 0o644))
	var out, errb bytes.Buffer
	err = run(context.Background(), append([]string{"--node", base, "--out", filepath.Join(dir, table+".fit.toml"), "--json", "--date", "2026-12-01"}, args...), &out, &errb)
	if err != nil {
		return nil, nil, errb.String(), err
	}
	var rep map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep), out.String())
	n, err := tables.LoadFile(base)
	require.NoError(t, err)
	return rep, n, errb.String(), nil
}

// TestPinnedLL128OnPCIe: NCCL_PROTO=LL128 lifts NCCL's LL128 auto gate (tuning.cc resolves LL128's
// auto value 2 through the hardware checks; an NCCL_PROTO that names LL128 sets it to 1, reference
// §5), so a sweep pinned to it on a PCIe table is fitted as planner explain --proto LL128 prices it;
// the provenance lists the files that supplied points, not the sweep the fit skipped.
func TestPinnedLL128OnPCIe(t *testing.T) {
	rep, n, stderr, err := fitJSON(t, "l40s-pcie", "--nodes", "1", "--sweeps", ll128Fixtures)
	require.NoError(t, err, stderr)
	assert.NotContains(t, stderr, "allows no legal cell")
	assert.Contains(t, stderr, "two-nodes.txt:1: sweep not fitted: it ran on 2 nodes, the fit is for 1")
	fitted := map[string]bool{}
	for _, p := range rep["params"].([]any) {
		pm := p.(map[string]any)
		if pm["identified"].(bool) {
			fitted[pm["cell"].(string)] = true
		}
	}
	assert.True(t, fitted["AllReduce/RING/LL128"], "params: %v", rep["params"])
	assert.True(t, fitted["AllReduce/RING/SIMPLE"], "params: %v", rep["params"])
	var files []string
	for _, f := range n.Provenance.FittedFrom {
		files = append(files, filepath.Base(f.File))
	}
	assert.Equal(t, []string{"ring-ll128.txt", "ring-simple.txt"}, files)
	assert.Equal(t, []string{"2.30.7"}, n.Provenance.NCCLVersions)
	// The overlay carries the Ring/LL128 cell only where the table's planner takes a value for a
	// cell that its own env makes illegal; otherwise calibrate says why it is left out.
	written := false
	for _, c := range n.Fit.Cell {
		written = written || (c.Algo == "ring" && c.Proto == "ll128")
	}
	if !written {
		assert.Contains(t, stderr, "AllReduce/RING/LL128 is fitted from a sweep whose pin makes it legal, but not written to the overlay")
	}
}

// TestHalfFitted: the in-place half is fitted by default (PyTorch's collectives run in place),
// --half oop fits the out-of-place one, and the report says which.
func TestHalfFitted(t *testing.T) {
	// ring-simple.txt's first row: 4096 B, out-of-place 95.38 us, in-place 94.44 us.
	for _, tc := range []struct {
		args []string
		half string
		us   float64
	}{
		{nil, "in-place", 94.44},
		{[]string{"--half", "ip"}, "in-place", 94.44},
		{[]string{"--half", "oop"}, "out-of-place", 95.38},
	} {
		t.Run(tc.half+strings.Join(tc.args, " "), func(t *testing.T) {
			rep, _, stderr, err := fitJSON(t, "l40s-pcie", append([]string{"--sweeps", filepath.Join(ll128Fixtures, "ring-simple.txt")}, tc.args...)...)
			require.NoError(t, err, stderr)
			assert.Equal(t, tc.half, rep["half"])
			pts := rep["points"].([]any)
			require.NotEmpty(t, pts)
			first := pts[0].(map[string]any)
			assert.EqualValues(t, 4096, first["bytes"])
			assert.Equal(t, tc.us, first["measured_us"])
		})
	}
	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"--node", "l40s-pcie", "--sweeps", ll128Fixtures, "--half", "both"}, &out, &errb)
	var ue usageError
	require.ErrorAs(t, err, &ue)
	assert.Contains(t, err.Error(), `--half "both": want oop or ip`)
}

// TestReadmeExampleSVG: the README's fit with --svg draws its sweeps, whose protocol is free (each
// point is the fastest of the cells its pin allows), instead of failing after writing the overlay.
func TestReadmeExampleSVG(t *testing.T) {
	dir := t.TempDir()
	out, svg := filepath.Join(dir, "h200.fit.toml"), filepath.Join(dir, "x.svg")
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--node", "h200", "--nodes", "2", "--sweeps", fixtures, "--out", out, "--svg", svg}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	assert.Contains(t, string(data), "<circle")
	assert.Contains(t, string(data), "AllReduce/TREE/*")
	assert.Contains(t, string(data), "AllReduce/RING/*")
}

// TestReportUnmeasured: a pick no sweep measured prints "-" for its measured time, not "/0".
func TestReportUnmeasured(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"--node", "h200", "--nodes", "2", "--sweeps", fixtures,
		"--out", filepath.Join(t.TempDir(), "o.fit.toml")}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	assert.NotContains(t, stdout.String(), "/0,")
	// No run measures NVLS_TREE/SIMPLE at 64 MiB (the sweeps are Ring-only and Tree-only): "-",
	// not 0. (Ring/Simple, unmeasured before, is now measured by the Ring run as a proxy.)
	assert.Contains(t, stdout.String(), "AllReduce/NVLS_TREE/SIMPLE (479.4/-, -)")
	assert.Contains(t, stdout.String(), "AllReduce/RING/SIMPLE (271.6/100, 1.273) via NCCL_ALGO=Ring")
}

// TestOverlayHeldAtPrior: a parameter the data do not identify keeps the prior's value, and the
// overlay says so instead of tagging it "measured".
func TestOverlayHeldAtPrior(t *testing.T) {
	rep, n, stderr, err := fitJSON(t, "h200", "--nodes", "2", "--sweeps", fixtures)
	require.NoError(t, err, stderr)
	held := map[string]bool{} // "cell kind" of every parameter held at the prior
	for _, p := range rep["params"].([]any) {
		pm := p.(map[string]any)
		if !pm["identified"].(bool) {
			held[pm["cell"].(string)+" "+pm["kind"].(string)] = true
		}
	}
	require.NotEmpty(t, held, "the fixture holds a parameter at the prior")
	checked := 0
	for i, c := range n.Fit.Cell {
		cell := strings.ToUpper(c.Algo) + "/" + strings.ToUpper(c.Proto)
		for _, kind := range []string{"lat_us", "bw_gbps"} {
			tag := n.Sources["fit.cell["+strconv.Itoa(i)+"]."+kind]
			if held["AllReduce/"+cell+" "+kind] {
				checked++
				assert.NotEqual(t, "measured", tag, "%s %s is held at the prior", cell, kind)
			} else {
				assert.Equal(t, "measured", tag, "%s %s", cell, kind)
			}
		}
	}
	assert.Positive(t, checked)
}

// TestFitWithoutStartLine: a sweep whose "# Collective test starting" line was cut off is fitted
// (its collective inferred from its columns, with a warning), not refused.
func TestFitWithoutStartLine(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../calibrate/testdata/logs/ar_no_start_line.txt")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ar.txt"), data, 0o644))
	rep, _, stderr, err := fitJSON(t, "h100", "--nodes", "1", "--gpus-per-node", "8", "--sweeps", dir) // no rank lines: busbw/algbw says 8
	require.NoError(t, err, stderr)
	assert.Contains(t, stderr, "inferred AllReduce")
	assert.NotContains(t, stderr, "sweep not fitted")
	assert.Len(t, rep["points"], 5)
}
