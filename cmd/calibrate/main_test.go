package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/tables"
)

const fixtures = "../../calibrate/testdata/fit/h200-2n"

func TestCalibrateWritesOverlayThatLoads(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../tables/h200.toml")
	require.NoError(t, err)
	base := filepath.Join(dir, "h200.toml")
	require.NoError(t, os.WriteFile(base, data, 0o644))
	var out, errb bytes.Buffer
	err = run(context.Background(), []string{"--node", base, "--sweeps", fixtures, "--out", tables.OverlayPath(base),
		"--json", "--holdout", "5", "--date", "2026-11-30"}, &out, &errb)
	require.NoError(t, err, errb.String())
	var rep map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.EqualValues(t, 2, rep["nodes"])
	assert.EqualValues(t, 2, rep["holdout_points"], "the 5th of 5 sizes, Tree and Ring")

	n, err := tables.LoadFile(base)
	require.NoError(t, err)
	require.NotNil(t, n.Fit)
	assert.NotEmpty(t, n.Fit.Cell)
	for _, c := range n.Fit.Cell {
		assert.Equal(t, 2, c.Nodes)
		assert.Equal(t, "allreduce", c.Coll)
	}
	assert.Equal(t, "2026-11-30", n.Provenance.Date)
	require.Len(t, n.Provenance.FittedFrom, 2)
	assert.Len(t, n.Provenance.FittedFrom[0].SHA256, 64)
	assert.Equal(t, []string{"2.30.7"}, n.Provenance.NCCLVersions)
	require.NotNil(t, n.Provenance.Residual)
	assert.Equal(t, 8, n.Provenance.Residual.Points)
	// The fixtures pin the algorithm but not the protocol: NCCL chose among protocols, so no pinned
	// sweep measured a cell and its fitted values are inferred from the envelope, never "measured".
	// Cell 0 is Tree/LL, which wins only the small sizes where its latency dominates: its latency is
	// inferred, its bandwidth (never reached by a point it explains) held at the prior.
	assert.Equal(t, "tree", n.Fit.Cell[0].Algo)
	assert.Equal(t, "ll", n.Fit.Cell[0].Proto)
	assert.Equal(t, "inferred (from envelope sweeps only: no pinned sweep measured this cell)", n.Sources["fit.cell[0].lat_us"])
	assert.Equal(t, "prior (not identified by the data)", n.Sources["fit.cell[0].bw_gbps"])
	assert.Equal(t, "measured", n.Sources["fit.cell[0].nodes"])

	// Text report.
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"--node", base, "--sweeps", fixtures, "--out", filepath.Join(dir, "again.fit.toml")}, &out, &errb))
	assert.Contains(t, out.String(), "per size")
}

func TestCalibrateBadInput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sweeps", fixtures}, "--node is required"},
		{[]string{"--node", "h200"}, "--sweeps is required"},
		{[]string{"--node", "nope", "--sweeps", fixtures}, `no embedded table "nope"`},
		{[]string{"--node", "h200", "--sweeps", "does/not/exist"}, "does/not/exist"},
		{[]string{"--node", "h200", "--sweeps", fixtures, "--holdout", "1"}, "--holdout 1"},
	} {
		var out, errb bytes.Buffer
		err := run(context.Background(), tc.args, &out, &errb)
		require.Error(t, err, tc.args)
		var ue usageError
		assert.ErrorAs(t, err, &ue, "exit status 2 for %v", tc.args)
		assert.Contains(t, err.Error(), tc.want)
	}
}
