package main

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// fittedPlanner builds the planner over the fitted configuration cfg (its Cells the fit's
// overrides). A cell that the table's planner makes illegal but a sweep's pin made legal (an
// NCCL_PROTO naming LL128 lifts the LL128 auto gate) has no value the planner accepts without that
// pin; when planner.New refuses such overrides, they are held back (returned, with a warning on
// stderr) and the planner is built without them. The overlay then leaves them out.
func fittedPlanner(ctx context.Context, topo *capabilities.Topology, cfg planner.Config, prior *planner.Planner,
	stderr io.Writer) (*planner.Planner, []planner.CellOverride, error) {
	pl, err := planner.New(topo, cfg)
	if err == nil {
		return pl, nil, nil
	}
	menus, merr := calibrate.Menus(ctx, prior)
	if merr != nil {
		return nil, nil, merr
	}
	var keep, held []planner.CellOverride
	for _, o := range cfg.Cells {
		mc := menus[o.Coll].Cells[o.Algo][o.Proto]
		if mc.BWGBps > 0 && mc.Reason == "" {
			keep = append(keep, o)
			continue
		}
		held = append(held, o)
		fmt.Fprintf(stderr, "calibrate: warning: %s/%s/%s is fitted from a sweep whose pin makes it legal, but not written to the overlay: without that pin the table's planner makes it illegal (%s) and refuses a value for it\n",
			o.Coll, o.Algo, o.Proto, mc.Reason)
	}
	if len(held) == 0 {
		return nil, nil, err
	}
	cfg.Cells = keep
	if pl, err = planner.New(topo, cfg); err != nil {
		return nil, nil, err
	}
	return pl, held, nil
}

// withoutCells returns a copy of res without the fitted cells of held (the parameters stay, for the
// report).
func withoutCells(res *calibrate.FitResult, held []planner.CellOverride) *calibrate.FitResult {
	if len(held) == 0 {
		return res
	}
	out := *res
	out.Fitted = map[calibrate.Cell][2]float64{}
	for c, v := range res.Fitted {
		out.Fitted[c] = v
	}
	for _, o := range held {
		delete(out.Fitted, calibrate.Cell{Coll: o.Coll, Algo: o.Algo, Proto: o.Proto})
	}
	return &out
}

// pointFiles lists, sorted, the files that supplied pts, and the NCCL versions the sweeps of those
// files name: the overlay's provenance, which names only what the fit used.
func pointFiles(sweeps []*calibrate.Sweep, pts []calibrate.Point) (files, versions []string) {
	used := map[string]bool{}
	for _, p := range pts {
		used[p.File] = true
	}
	vs := map[string]bool{}
	for _, s := range sweeps {
		if used[s.File] && s.NCCLVersion != "" {
			vs[s.NCCLVersion] = true
		}
	}
	return sortedKeys(used), sortedKeys(vs)
}

// renderSVG draws pts against the fitted and prior menus (calibrate.PlotSVG) into bytes, so that a
// plot that cannot be drawn fails before anything is written.
func renderSVG(fitted, prior map[costmodel.Coll]*planner.Menu, pts []calibrate.Point, title string) ([]byte, error) {
	var b bytes.Buffer
	if err := calibrate.PlotSVG(&b, fitted, prior, pts, title); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// provenance is an overlay's [provenance] inputs: the files that supplied pts (sorted) with their
// SHA-256, and the NCCL versions their sweeps name.
func provenance(sweeps []*calibrate.Sweep, pts []calibrate.Point) ([]tables.InputFile, []string, error) {
	files, versions := pointFiles(sweeps, pts)
	var out []tables.InputFile
	for _, f := range files {
		sum, err := fileSHA256(f)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, tables.InputFile{File: f, SHA256: sum})
	}
	return out, versions, nil
}
