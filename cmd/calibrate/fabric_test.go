package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
)

// n10Sweep is the public 10-node H100 nccl-tests file (calibrate/testdata/public/SOURCES.toml).
const n10Sweep = "../../calibrate/testdata/public/xxrjun__nccl-tests-cluster__benchmarks_example-cluster01_nccl-benchmark-results_multi-node_runs_20260129-180219_without-debug_logs_nccl_N10_G8.log"

// priorMedianErr runs calibrate --json on the public 10-node file and returns the report's prior
// and, per collective, the median |prior pick's predicted / measured - 1| over its sizes.
func priorMedianErr(t *testing.T, extra ...string) (calibrate.Prior, map[string]float64) {
	t.Helper()
	args := append([]string{"--node", "h100", "--sweeps", n10Sweep, "--out", filepath.Join(t.TempDir(), "h100.fit.toml"), "--json"}, extra...)
	var out, errb bytes.Buffer
	require.NoError(t, run(context.Background(), args, &out, &errb), errb.String())
	var rep calibrate.Report
	require.NoError(t, json.Unmarshal(out.Bytes(), &rep))
	errs := map[string][]float64{}
	for _, s := range rep.Sizes {
		require.Greater(t, s.MeasuredUS, 0.0)
		errs[s.Coll] = append(errs[s.Coll], math.Abs(s.Prior.PredUS/s.MeasuredUS-1))
	}
	med := map[string]float64{}
	for c, e := range errs {
		sort.Float64s(e)
		if n := len(e); n%2 == 1 {
			med[c] = e[n/2]
		} else {
			med[c] = (e[n/2-1] + e[n/2]) / 2
		}
	}
	return rep.Prior, med
}

// TestFabricPrior: --fabric reaches calibrate's prior, and the report names it. The medians are
// logged (go test -run TestFabricPrior -v ./cmd/calibrate/), not asserted: they are the issue's
// measurement of the fabric prior, scored after the fabric tables were committed.
func TestFabricPrior(t *testing.T) {
	p0, m0 := priorMedianErr(t)
	assert.Empty(t, p0.Fabric)
	p1, m1 := priorMedianErr(t, "--fabric", "ib-ndr")
	assert.Equal(t, "ib-ndr.toml", p1.Fabric)
	assert.Contains(t, p1.String(), "fabric ib-ndr.toml")
	assert.NotEqual(t, m0["AllReduce"], m1["AllReduce"], "the fabric changes the prior's predictions")
	for _, c := range []string{"AllReduce", "AllGather", "ReduceScatter"} {
		t.Logf("10 nodes %-13s prior median |pred/meas-1|: h100 alone %.3f, h100 + ib-ndr %.3f", c, m0[c], m1[c])
	}

	var out, errb bytes.Buffer
	err := run(context.Background(), []string{"--node", "h100", "--sweeps", n10Sweep, "--fabric", "../../tables/testdata/fabric/unknown-key.toml"}, &out, &errb)
	require.Error(t, err)
	assert.ErrorContains(t, err, "unknown-key.toml: line 9: fabric.nic_speed: unknown key")
	var ue usageError
	assert.ErrorAs(t, err, &ue)
}
