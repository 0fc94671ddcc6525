package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// writeSynthSweep writes an nccl-tests table of times(n) for sizes 256 B .. 256 MiB, two per octave.
func writeSynthSweep(t *testing.T, path string, times func(int64) float64) {
	t.Helper()
	var b strings.Builder
	b.WriteString("# nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007\n# Collective test starting: all_reduce_perf\n")
	b.WriteString("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n")
	b.WriteString("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n")
	for k := 0; k <= 40; k++ {
		n := int64(math.Round(256*math.Pow(2, float64(k)/2)/4)) * 4
		tm := times(n)
		bw := float64(n) / tm / 1000
		fmt.Fprintf(&b, "%12d %13d     float     sum      -1 %8.2f %7.2f %7.2f      0 %8.2f %7.2f %7.2f      0\n", n, n/4, tm, bw, bw, tm, bw, bw)
	}
	b.WriteString("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.0\n")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o644))
}

// writeRingSweeps writes into dir a pinned sweep of each Ring protocol, menu's times with 2 %
// lognormal noise, and their manifest at nodes x 8 GPUs; it returns dir.
func writeRingSweeps(t *testing.T, dir string, menu *planner.Menu, nodes int, rng *rand.Rand) string {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o755))
	var man strings.Builder
	for _, p := range []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple} {
		file := "ring-" + strings.ToLower(p.String()) + ".txt"
		writeSynthSweep(t, filepath.Join(dir, file), func(nb int64) float64 {
			return float64(menu.Time(costmodel.Ring, p, nb)) * math.Exp(0.02*rng.NormFloat64())
		})
		fmt.Fprintf(&man, "[[sweep]]\nfile = %q\nalgo = \"Ring\"\nproto = %q\nnodes = %d\ngpus_per_node = 8\n\n", file, benchProto[p], nodes)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sweeps.toml"), []byte(man.String()), 0o644))
	return dir
}

// TestCalibrateWritesBucketCorrections: sweeps whose Ring/LL bandwidth dips x0.5 in two buckets
// give an overlay with a [corrections] row for that cell, which the planner then applies (the
// same Default + Apply as cmd/planner's setup.planner), so that explain changes there.
func TestCalibrateWritesBucketCorrections(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	data, err := os.ReadFile("../../tables/h200.toml")
	require.NoError(t, err)
	base := filepath.Join(dir, "h200.toml")
	require.NoError(t, os.WriteFile(base, data, 0o644))
	n, err := tables.LoadFile(base)
	require.NoError(t, err)
	topo, cfg, prior, err := priorPlanner(n, 2, 0, nil)
	require.NoError(t, err)
	cls := planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
	pm, err := prior.Prepare(ctx, cls)
	require.NoError(t, err)
	menu := pm.Menu()
	// The dip: the first two buckets from 4 KiB up where Ring/LL's time is >= 60% bandwidth.
	var dip []int
	for b := 6; b < 20 && len(dip) < 2; b++ {
		nb := correction.BucketStart(b)
		lat := float64(menu.Cells[costmodel.Ring][costmodel.LL].LatUS)
		if tm := float64(menu.Time(costmodel.Ring, costmodel.LL, nb)); (tm-lat)/tm >= 0.6 {
			dip = append(dip, b, b+1)
		}
	}
	require.Len(t, dip, 2)
	truthF := correction.Default(&topo)
	if cfg.Factors != nil {
		truthF = cfg.Factors
	}
	tf := *truthF
	row := make([]float64, correction.NumBuckets)
	for b := range row {
		row[b] = float64(tf.Factor(costmodel.AllReduce, costmodel.Ring, costmodel.LL, correction.BucketStart(b)))
		if b == dip[0] || b == dip[1] {
			row[b] *= 0.5
		}
	}
	require.NoError(t, tf.Set(costmodel.AllReduce, costmodel.Ring, costmodel.LL, row, correction.SourceTable))
	tcfg := cfg
	tcfg.Factors = &tf
	truth, err := planner.New(&topo, tcfg)
	require.NoError(t, err)
	tm, err := truth.Prepare(ctx, cls)
	require.NoError(t, err)
	rng := rand.New(rand.NewSource(1))
	sweeps := writeRingSweeps(t, filepath.Join(dir, "sweeps"), tm.Menu(), 2, rng)

	var out, errb bytes.Buffer
	overlay := tables.OverlayPath(base) // beside the table, where tables.LoadFile finds it
	require.NoError(t, run(ctx, []string{"--node", base, "--sweeps", sweeps, "--out", overlay, "--json", "--date", "2026-11-30"}, &out, &errb), errb.String())
	var rep struct {
		Corrections []struct {
			Cell   string  `json:"cell"`
			Bucket int     `json:"bucket"`
			Factor float64 `json:"factor"`
			Sigma  float64 `json:"sigma"`
		} `json:"corrections"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	require.Len(t, rep.Corrections, 2, out.String())
	for i, c := range rep.Corrections {
		t.Logf("%s bucket %d: factor %.3f ± %.2g (true %.3f)", c.Cell, c.Bucket, c.Factor, c.Sigma, row[c.Bucket])
		assert.Equal(t, "AllReduce/RING/LL", c.Cell)
		assert.Equal(t, dip[i], c.Bucket)
		assert.InDelta(t, 1, c.Factor/row[c.Bucket], 0.10)
		assert.Greater(t, c.Sigma, 0.0)
	}

	// The overlay loads and carries the row; the planner applies it.
	on, err := tables.LoadFile(base)
	require.NoError(t, err)
	require.NotNil(t, on.Corrections)
	var got *tables.CorrectionCell
	for i, c := range on.Corrections.Cell {
		if c.Coll == "allreduce" && c.Algo == "ring" && c.Proto == "ll" {
			got = &on.Corrections.Cell[i]
		}
	}
	require.NotNil(t, got, "%+v", on.Corrections.Cell)
	require.Len(t, got.Factors, correction.NumBuckets)
	for b, f := range got.Factors {
		if b == dip[0] || b == dip[1] {
			assert.InDelta(t, 1, f/row[b], 0.10, "bucket %d", b)
		} else {
			assert.Equal(t, row[b], f, "bucket %d: not written where not needed", b)
		}
	}
	assert.Equal(t, "measured", on.Sources["corrections.cell[0].factors"])
	_, _, fitted, err := priorPlanner(on, 2, 0, nil)
	require.NoError(t, err)
	nb := correction.BucketStart(dip[0]) * 3 / 2
	pp, err := prior.Explain(ctx, cls, nb)
	require.NoError(t, err)
	fp, err := fitted.Explain(ctx, cls, nb)
	require.NoError(t, err)
	assert.Equal(t, float32(1), pp.Explain.Cells[costmodel.Ring][costmodel.LL].Correction)
	assert.InDelta(t, 0.5, fp.Explain.Cells[costmodel.Ring][costmodel.LL].Correction, 0.05)
	assert.Greater(t, fp.Explain.Cells[costmodel.Ring][costmodel.LL].TimeUS, pp.Explain.Cells[costmodel.Ring][costmodel.LL].TimeUS)

	// A refit starts from the table alone again, not from the fit it replaces: the same sweeps fit
	// the same row (it does not compound on the last one).
	out.Reset()
	require.NoError(t, run(ctx, []string{"--node", base, "--sweeps", sweeps, "--out", overlay, "--json", "--date", "2026-11-30"}, &out, &errb), errb.String())
	first := rep.Corrections
	rep.Corrections = nil
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Equal(t, first, rep.Corrections)
	again, err := tables.LoadFile(base)
	require.NoError(t, err)
	require.NotNil(t, again.Corrections)
	assert.Equal(t, on.Corrections.Cell, again.Corrections.Cell)

	// With --prior the overlay, its corrections are the prior's: nothing new is fitted, and the row
	// is written again as it was.
	out.Reset()
	require.NoError(t, run(ctx, []string{"--node", base, "--sweeps", sweeps, "--prior", overlay, "--out", overlay, "--json", "--date", "2026-11-30"}, &out, &errb), errb.String())
	rep.Corrections = nil
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Empty(t, rep.Corrections)
	again, err = tables.LoadFile(base)
	require.NoError(t, err)
	require.NotNil(t, again.Corrections)
	assert.Equal(t, on.Corrections.Cell, again.Corrections.Cell)

	// The text report of a fresh table lists them.
	base2 := filepath.Join(t.TempDir(), "h200.toml")
	require.NoError(t, os.WriteFile(base2, data, 0o644))
	out.Reset()
	require.NoError(t, run(ctx, []string{"--node", base2, "--sweeps", sweeps, "--out", tables.OverlayPath(base2), "--date", "2026-11-30"}, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "bandwidth corrections")
	assert.Contains(t, out.String(), fmt.Sprintf("AllReduce/RING/LL  %d", dip[0]))

	// The rows are the 2-node fit's: tagged with its shape, applied there only, and kept by a fit
	// of another shape into the same overlay, as its cells are. Here: the prior model's own times
	// at 4 nodes (no dip, so no correction) fitted into the overlay after the 2-node fit.
	assert.Equal(t, 2, got.Nodes)
	assert.Equal(t, 8, got.RanksPerNode)
	topo4, _, prior4, err := priorPlanner(n, 4, 0, nil)
	require.NoError(t, err)
	require.Equal(t, 4, topo4.NNodes)
	pm4, err := prior4.Prepare(ctx, cls)
	require.NoError(t, err)
	sweeps4 := writeRingSweeps(t, filepath.Join(dir, "sweeps4"), pm4.Menu(), 4, rng)
	out.Reset()
	require.NoError(t, run(ctx, []string{"--node", base, "--nodes", "4", "--sweeps", sweeps4, "--out", overlay, "--json", "--date", "2026-11-30"}, &out, &errb), errb.String())
	rep.Corrections = nil
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	assert.Empty(t, rep.Corrections, "no dip at 4 nodes")
	both, err := tables.LoadFile(base)
	require.NoError(t, err)
	require.NotNil(t, both.Corrections, "the 2-node fit's rows survive the 4-node fit")
	assert.Equal(t, on.Corrections.Cell, both.Corrections.Cell)
	// The provenance names both fits' sweep files: the kept cells' as well as the new ones'.
	var from2, from4 int
	for _, f := range both.Provenance.FittedFrom {
		switch filepath.Dir(f.File) {
		case sweeps:
			from2++
			assert.Equal(t, [2]int{2, 8}, [2]int{f.Nodes, f.RanksPerNode}, f.File)
		case sweeps4:
			from4++
			assert.Equal(t, [2]int{4, 8}, [2]int{f.Nodes, f.RanksPerNode}, f.File)
		}
	}
	assert.Positive(t, from2, "the 2-node fit's files: %+v", both.Provenance.FittedFrom)
	assert.Positive(t, from4, "the 4-node fit's files: %+v", both.Provenance.FittedFrom)
	for _, tc := range []struct {
		nodes int
		want  float64
	}{{2, 0.5}, {4, 1}} {
		_, _, pl, err := priorPlanner(both, tc.nodes, 0, nil)
		require.NoError(t, err)
		e, err := pl.Explain(ctx, cls, nb)
		require.NoError(t, err)
		assert.InDelta(t, tc.want, e.Explain.Cells[costmodel.Ring][costmodel.LL].Correction, 0.05, "%d nodes", tc.nodes)
	}
}
