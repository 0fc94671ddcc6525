package main

import (
	"context"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// TestCompileTableUsesOverlay: collbench plans with the cpu node table as calibrated, its fitted
// overlay included: its DecisionTable is the one a planner configured here by hand with the
// overlay's fitted cells and corrections compiles, not the hand-set table's.
func TestCompileTableUsesOverlay(t *testing.T) {
	nt, err := tables.Load("cpu")
	require.NoError(t, err)
	require.NotNil(t, nt.Fit, "the shipped cpu table has a fitted overlay")
	nt.Node.GPUsPerNode = 2
	topo, err := capabilities.FromNode(nt, 1)
	require.NoError(t, err)
	fit, err := capabilities.NodeFitCells(nt, 1)
	require.NoError(t, err)
	require.NotEmpty(t, fit)
	var cfg planner.Config
	for _, c := range fit {
		if c.RanksPerNode != 2 { // fitted at 1 x 4
			continue
		}
		cfg.Cells = append(cfg.Cells, planner.CellOverride{Coll: c.Coll, Algo: c.Algo, Proto: c.Proto, LatUS: float32(c.LatUS), BWGBps: float32(c.BWGBps)})
	}
	cfg.Factors = correction.Default(&topo)
	require.NoError(t, cfg.Factors.Apply(nt, topo.NNodes, topo.LocalRanks))
	cfg.Constants = tableConstants(t, nt)
	cls := planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
	compile := func(cfg planner.Config) *planner.DecisionTable {
		pl, err := planner.New(&topo, cfg)
		require.NoError(t, err)
		dt, err := pl.Compile(context.Background(), cls)
		require.NoError(t, err)
		return dt
	}
	withFit, handSet := compile(cfg), compile(planner.Config{})
	require.NotEqual(t, tableHash(handSet), tableHash(withFit), "the overlay changes the AllReduce picks")

	got, err := compileTable(context.Background(), "cpu", capabilities.Env{}, costmodel.AllReduce, 2, 2, false, tunerSpec{}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, tableHash(withFit), tableHash(got), "collbench: %s", describeTable(got, tunerSpec{}, "cpu"))
}

// tableConstants is NCCL's constants with the node table's [constants] applied (the cpu table sets
// the emulated switch's NVLS latencies).
func tableConstants(t *testing.T, n *tables.Node) *costmodel.Constants {
	t.Helper()
	k := costmodel.DefaultConstants()
	require.NoError(t, k.Apply(n.Constants))
	return &k
}

// TestCompileTableNoOverlay: --no-overlay plans with cpu.toml alone (the table a planner over the
// base table compiles), and the plans line says which overlay applied, or that none did.
func TestCompileTableNoOverlay(t *testing.T) {
	base, err := tables.LoadBase("cpu")
	require.NoError(t, err)
	require.Nil(t, base.Fit)
	base.Node.GPUsPerNode = 2
	topo, err := capabilities.FromNode(base, 1)
	require.NoError(t, err)
	pl, err := planner.New(&topo, planner.Config{Constants: tableConstants(t, base)})
	require.NoError(t, err)
	want, err := pl.Compile(context.Background(), planner.Class{Coll: costmodel.AllReduce, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	require.NoError(t, err)

	for _, tc := range []struct {
		name      string
		noOverlay bool
		line      string
	}{
		{"the shipped overlay", false, "planner DecisionTable for the cpu node table with overlay cpu.fit.toml, table hash "},
		{"--no-overlay", true, "planner DecisionTable for the cpu node table without overlay, table hash "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := compileTable(context.Background(), "cpu", capabilities.Env{}, costmodel.AllReduce, 2, 2, tc.noOverlay, tunerSpec{}, io.Discard)
			require.NoError(t, err)
			assert.Contains(t, describeTable(got, tunerSpec{}, "cpu"), tc.line)
			if tc.noOverlay {
				assert.Equal(t, tableHash(want), tableHash(got))
			} else {
				assert.NotEqual(t, tableHash(want), tableHash(got))
			}
		})
	}
}

// TestTablePins: --proto and --algo restrict the table as NCCL_PROTO and NCCL_ALGO restrict NCCL's
// choice, so a one-sided pin never pairs with a cell the engine refuses. Across 3 emulated hosts
// (cpu-net, one rank each) the unrestricted AllGather table takes PAT, which runs Simple only:
// pinned to LL128 the table must choose among the algorithms that run LL128 (before, collbench
// ran PAT/LL128 and every rank failed: "PAT with LL128 (NCCL runs PAT with Simple only)"), and
// pinned to PAT it must choose Simple.
func TestTablePins(t *testing.T) {
	free, err := compileTable(context.Background(), "cpu-net", capabilities.Env{}, costmodel.AllGather, 3, 1, true, tunerSpec{}, io.Discard)
	require.NoError(t, err)
	sawPAT := false
	for _, e := range free.Entries() {
		sawPAT = sawPAT || e.Decision.Algo == costmodel.PAT
	}
	require.True(t, sawPAT, "the premise: the free table takes PAT somewhere")
	for _, tc := range []struct {
		o     options
		check func(planner.Decision) bool
	}{
		{options{proto: "LL128"}, func(d planner.Decision) bool { return d.Proto == costmodel.LL128 && d.Algo != costmodel.PAT }},
		{options{algo: "PAT"}, func(d planner.Decision) bool { return d.Algo == costmodel.PAT && d.Proto == costmodel.Simple }},
		{options{algo: "Ring", proto: "LL"}, func(d planner.Decision) bool { return d.Algo == costmodel.Ring && d.Proto == costmodel.LL }},
		{options{algo: "COLLNET_DIRECT"}, nil}, // NCCL's log name: every pin's name is given to the planner by NCCL_ALGO's
	} {
		if tc.check == nil {
			assert.Equal(t, "CollNetDirect", tc.o.tablePins().Algo.Value)
			continue
		}
		dt, err := compileTable(context.Background(), "cpu-net", tc.o.tablePins(), costmodel.AllGather, 3, 1, true, tunerSpec{}, io.Discard)
		require.NoError(t, err, "%+v", tc.o)
		for _, e := range dt.Entries() {
			assert.True(t, tc.check(e.Decision), "algo %q proto %q: %d..%d B: %v/%v", tc.o.algo, tc.o.proto, e.Lo, e.Hi, e.Decision.Algo, e.Decision.Proto)
		}
	}
}

// TestTablePinsBeyondTable: an algorithm pin the table has no cell of (cpu-net declares no
// reducing network; the engine runs CollNet through its endpoint) compiles a table over the
// protocols the engine runs it with, here Simple only, rather than failing ("no algorithm/protocol
// available", TestHostsJob's CollNetDirect row) or pairing it with LL.
func TestTablePinsBeyondTable(t *testing.T) {
	o := options{algo: "CollNetDirect"}
	dt, err := compileTable(context.Background(), "cpu-net", o.tablePins(), costmodel.AllReduce, 4, 2, true, tunerSpec{}, io.Discard)
	require.NoError(t, err)
	for _, e := range dt.Entries() {
		assert.Equal(t, costmodel.Simple, e.Decision.Proto, "%d..%d B", e.Lo, e.Hi)
	}
	o = options{algo: "CollNetDirect", proto: "LL"}
	_, err = compileTable(context.Background(), "cpu-net", o.tablePins(), costmodel.AllReduce, 4, 2, true, tunerSpec{}, io.Discard)
	assert.Error(t, err, "CollNetDirect with LL: nothing the engine runs")
}
