package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/tables"
)

// pinsOf lists a sweep plan as "coll Algo/Proto" ("coll free" for the free choice).
func pinsOf(specs []sweepSpec) []string {
	var out []string
	for _, s := range specs {
		if s.algo == "" {
			out = append(out, benchColl[s.coll]+" free")
			continue
		}
		out = append(out, benchColl[s.coll]+" "+s.algo+"/"+s.proto)
	}
	return out
}

// TestPlanSweepsAtEveryShape: calibrate --run sweeps every cell that is legal in the cpu table's
// prior and that the engine runs (engine.PinError), at the run's shape. Written out by hand from
// the rules: LL128 is off everywhere (the auto gate: compute capability 60, PHB); Tree is
// AllReduce's only; NVLS (Simple) runs in one node of 2 or more; NVLS_TREE (AllReduce, Simple) on 2
// or more nodes of 2 or more; PAT (AllGather, ReduceScatter, Simple) at one rank per node;
// CollNetDirect (AllReduce, AllGather, ReduceScatter, Simple) and CollNetChain (AllReduce) on 2 or
// more nodes, where the table declares the emulated reducing network (the cpu table and
// testdata/emulated-collnet.toml); Broadcast and Reduce are Ring's only.
func TestPlanSweepsAtEveryShape(t *testing.T) {
	all := []costmodel.Coll{costmodel.AllReduce, costmodel.AllGather, costmodel.ReduceScatter, costmodel.Broadcast, costmodel.Reduce}
	ringOnly := func(coll string) []string {
		return []string{coll + " Ring/LL", coll + " Ring/Simple", coll + " free"}
	}
	with := func(coll string, extra ...string) []string {
		out := []string{coll + " Ring/LL", coll + " Ring/Simple"}
		for _, e := range extra {
			out = append(out, coll+" "+e)
		}
		return append(out, coll+" free")
	}
	arTree := func(extra ...string) []string {
		out := []string{"allreduce Tree/LL", "allreduce Tree/Simple", "allreduce Ring/LL", "allreduce Ring/Simple"}
		for _, e := range extra {
			out = append(out, "allreduce "+e)
		}
		return append(out, "allreduce free")
	}
	cat := func(xs ...[]string) []string {
		var out []string
		for _, x := range xs {
			out = append(out, x...)
		}
		return out
	}
	for _, tc := range []struct {
		name       string
		table      string
		nodes, rpn int
		want       []string
	}{
		{"1 x 2: NVLS", "cpu", 1, 2, cat(arTree("NVLS/Simple"), with("allgather", "NVLS/Simple"), with("reducescatter", "NVLS/Simple"), ringOnly("broadcast"), ringOnly("reduce"))},
		{"1 x 4: NVLS", "cpu", 1, 4, cat(arTree("NVLS/Simple"), with("allgather", "NVLS/Simple"), with("reducescatter", "NVLS/Simple"), ringOnly("broadcast"), ringOnly("reduce"))},
		{"2 x 2: NVLS_TREE, CollNet", "cpu", 2, 2, cat(arTree("CollNetDirect/Simple", "CollNetChain/Simple", "NVLSTree/Simple"), with("allgather", "CollNetDirect/Simple"), with("reducescatter", "CollNetDirect/Simple"), ringOnly("broadcast"), ringOnly("reduce"))},
		{"4 x 1: PAT, CollNet", "cpu", 4, 1, cat(arTree("CollNetDirect/Simple", "CollNetChain/Simple"), with("allgather", "CollNetDirect/Simple", "PAT/Simple"), with("reducescatter", "CollNetDirect/Simple", "PAT/Simple"), ringOnly("broadcast"), ringOnly("reduce"))},
		{"2 x 1: PAT, CollNet", "cpu", 2, 1, cat(arTree("CollNetDirect/Simple", "CollNetChain/Simple"), with("allgather", "CollNetDirect/Simple", "PAT/Simple"), with("reducescatter", "CollNetDirect/Simple", "PAT/Simple"), ringOnly("broadcast"), ringOnly("reduce"))},
		{"collnet table 2 x 2: CollNet swept", "testdata/emulated-collnet.toml", 2, 2, cat(arTree("CollNetDirect/Simple", "CollNetChain/Simple", "NVLSTree/Simple"), with("allgather", "CollNetDirect/Simple"), with("reducescatter", "CollNetDirect/Simple"), ringOnly("broadcast"), ringOnly("reduce"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n *tables.Node
			var err error
			if strings.HasSuffix(tc.table, ".toml") {
				n, err = tables.LoadFileBase(tc.table)
			} else {
				n, err = tables.LoadBase(tc.table)
			}
			require.NoError(t, err)
			_, _, pl, err := priorPlanner(n, tc.nodes, tc.rpn, nil)
			require.NoError(t, err)
			menus, err := calibrate.Menus(context.Background(), pl)
			require.NoError(t, err)
			got := pinsOf(planSweeps(menus, all, true, tc.nodes*tc.rpn, tc.rpn))
			assert.Equal(t, tc.want, got)
			if strings.HasPrefix(tc.name, "collnet") {
				ar := menus[costmodel.AllReduce]
				for _, a := range []costmodel.Algo{costmodel.CollNetDirect, costmodel.CollNetChain} {
					assert.Empty(t, ar.Cells[a][costmodel.Simple].Reason, "%v is legal in the menu", a)
					assert.True(t, engineRuns(costmodel.AllReduce, a, costmodel.Simple, 4, 2), "%v: the engine runs it", a)
				}
			}
		})
	}
}

// TestRunSweepsTheNewPaths: calibrate --node cpu --run --quick at the shapes where NVLS, NVLS_TREE
// and PAT are legal measures each pinned (collbench --algo NVLS, NVLSTree, PAT), and the overlay
// it writes carries the fitted cell at that shape (nodes x ranks_per_node).
func TestRunSweepsTheNewPaths(t *testing.T) {
	bin := needCollbench(t)
	for _, tc := range []struct {
		name  string
		args  []string
		pin   string // the manifest's algo/proto of the new path
		cell  tables.FitCell
		nodes int
	}{
		{"NVLS at 1 x 2", []string{"--np", "2", "--colls", "allgather"}, "NVLS/Simple",
			tables.FitCell{Coll: "allgather", Algo: "nvls", Proto: "simple", Nodes: 1, RanksPerNode: 2}, 1},
		{"NVLS_TREE at 2 x 2", []string{"--np", "4", "--gpus-per-node", "2", "--colls", "allreduce", "--max", "64K"}, "NVLSTree/Simple",
			tables.FitCell{Coll: "allreduce", Algo: "nvls_tree", Proto: "simple", Nodes: 2, RanksPerNode: 2}, 2},
		{"PAT at 2 x 1", []string{"--np", "2", "--gpus-per-node", "1", "--colls", "reducescatter"}, "PAT/Simple",
			tables.FitCell{Coll: "reducescatter", Algo: "pat", Proto: "simple", Nodes: 2, RanksPerNode: 1}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			dir := t.TempDir()
			sweeps, overlay := filepath.Join(dir, "sweeps"), filepath.Join(dir, "cpu.fit.toml")
			var out, errb bytes.Buffer
			args := append([]string{"--node", "cpu", "--run", "--quick", "--collbench", bin, "--sweeps-out", sweeps,
				"--out", overlay, "--date", "2026-12-02"}, tc.args...)
			require.NoError(t, run(ctx, args, &out, &errb), errb.String())
			man, err := calibrate.LoadManifest(filepath.Join(sweeps, calibrate.ManifestName))
			require.NoError(t, err)
			var pins []string
			for _, e := range man.Sweeps {
				assert.Equal(t, tc.nodes, e.Nodes, e.File)
				pins = append(pins, e.Algo+"/"+e.Proto)
			}
			assert.Contains(t, pins, tc.pin)
			base, err := tables.LoadBase("cpu")
			require.NoError(t, err)
			data, err := os.ReadFile(overlay)
			require.NoError(t, err)
			n, err := tables.ApplyOverlay(base, overlay, data)
			require.NoError(t, err)
			require.NotNil(t, n.Fit)
			found := false
			for _, c := range n.Fit.Cell {
				if c.Coll == tc.cell.Coll && c.Algo == tc.cell.Algo && c.Proto == tc.cell.Proto {
					found = true
					assert.Equal(t, tc.cell.Nodes, c.Nodes)
					assert.Equal(t, tc.cell.RanksPerNode, c.RanksPerNode)
					assert.Positive(t, c.BWGBps)
				}
			}
			assert.True(t, found, "the overlay fits %s/%s/%s", tc.cell.Coll, tc.cell.Algo, tc.cell.Proto)
		})
	}
}
