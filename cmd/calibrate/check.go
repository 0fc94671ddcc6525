package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/configfile"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// checkOverlay evaluates the overlay at overlayPath (fitted cells at nodes), applied over the node
// table n, against pts without refitting: the prior (named by priorName), the fitted planner and
// fixed Ring/Simple, by regret and prediction error.
func checkOverlay(ctx context.Context, n *tables.Node, overlayPath string, nodes int, topo capabilities.Topology,
	priorName calibrate.Prior, prior *planner.Planner, pts []calibrate.Point,
	svg string, asJSON bool, stdout, stderr io.Writer) error {
	data, err := configfile.Read(overlayPath)
	if err != nil {
		return usagef("--check: the overlay to evaluate: %v", err)
	}
	on, err := tables.ApplyOverlay(n, overlayPath, data)
	if err != nil {
		return usageError{err}
	}
	ncfg, err := node.PlannerConfig(on, &topo) // the table with the overlay: its constants, corrections and cells
	if err != nil {
		return usageError{err}
	}
	here := 0 // the cells fitted at this shape (the others are skipped with a note)
	for _, c := range ncfg.Cells {
		if c.Skip == "" {
			here++
		}
	}
	if here == 0 {
		return usagef("%s: no fitted cell at %s", overlayPath, calibrate.Shape{Nodes: nodes, RanksPerNode: topo.LocalRanks})
	}
	fitted, err := planner.New(&topo, ncfg)
	if err != nil {
		return fmt.Errorf("%s: %w", overlayPath, err)
	}
	ev, err := calibrate.Evaluate(ctx, nodes, prior, fitted, pts)
	if err != nil {
		return usageError{err}
	}
	ev.Prior = priorName
	ev.RanksPerNode = topo.LocalRanks
	fmt.Fprintf(stderr, "calibrate: evaluated %s (%d fitted cells at %s) on %d pinned and %d envelope points, not refitted\n",
		overlayPath, here, calibrate.Shape{Nodes: nodes, RanksPerNode: topo.LocalRanks}, ev.Points, ev.EnvelopePoints)
	if svg != "" {
		if err := writeSVG(ctx, svg, fitted, prior, pts, fmt.Sprintf("calibrate --check %s, %d nodes: fresh sweep vs %s", n.Name, nodes, overlayPath)); err != nil {
			return err
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(ev)
	}
	return ev.WriteText(stdout)
}

// writeSVG plots pts against the fitted and prior planners' curves into file.
func writeSVG(ctx context.Context, file string, fitted, prior *planner.Planner, pts []calibrate.Point, title string) error {
	fm, err := calibrate.Menus(ctx, fitted)
	if err != nil {
		return err
	}
	pm, err := calibrate.Menus(ctx, prior)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := calibrate.PlotSVG(&b, fm, pm, pts, title); err != nil {
		return err
	}
	return os.WriteFile(file, b.Bytes(), 0o644)
}

// parseColls reads --colls: "all" or a comma-separated list of collectives.
func parseColls(s string) ([]costmodel.Coll, error) {
	if strings.EqualFold(strings.TrimSpace(s), "all") {
		var out []costmodel.Coll
		for c := costmodel.Coll(0); c < costmodel.NumColls; c++ {
			out = append(out, c)
		}
		return out, nil
	}
	var out []costmodel.Coll
	seen := map[costmodel.Coll]bool{}
	for _, f := range strings.Split(s, ",") {
		c, err := capabilities.ParseColl(strings.TrimSpace(f))
		if err != nil {
			return nil, usagef("--colls: %v", err)
		}
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}
