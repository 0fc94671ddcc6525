// Package node turns a node table into the planner's configuration: the table's tuner constants,
// its bandwidth corrections and the cells its fitted overlay measured. Every command that plans
// for a node table (planner, collbench, planner compile) builds its planner from it, so that a
// fitted overlay (calibrate's NAME.fit.toml) changes every one of their picks alike.
package node

import (
	"fmt"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// PlannerConfig returns the planner configuration that node table n implies for topology tp
// (which capabilities.FromNode built from n):
//   - Constants: NCCL 2.30's, with the table's [constants] applied; nil (the planner's default)
//     when the table has none;
//   - Factors: NCCL's tree correction factors for tp (correction.Default), times the table's
//     [corrections] (the rows of every shape, and those of tp's nodes x local_ranks over them);
//   - Cells: the fitted overlay's [[fit.cell]] entries fitted at tp's shape, tp.NNodes nodes of
//     tp.LocalRanks (a cell fitted at 2 nodes says nothing about 4, one fitted at 1 x 2 nothing
//     about 1 x 4); a cell that tp's env or shape makes illegal is skipped by planner.New with a
//     note (Planner.Overlay), never an error. Where the overlay has no cell of tp's shape, its
//     cells at tp.NNodes nodes and other ranks per node are passed skipped too (CellOverride.Skip:
//     "fitted at 1 x 2 ..., this is 1 x 4"), so that the note says why none applies; where it has,
//     they are left out, as the other node counts' are;
//   - Overlay: the file the fitted cells and the overlay's numbers come from: the overlay
//     (tables.Node.Overlay), else the table's own file when it carries [fit] cells itself, else "".
//
// Every command and tuner that plans for a node table calls this one function. Errors name the
// table file.
func PlannerConfig(n *tables.Node, tp *capabilities.Topology) (planner.Config, error) {
	var cfg planner.Config
	if n == nil {
		return cfg, nil
	}
	if n.Constants != nil {
		k := costmodel.DefaultConstants()
		if err := k.Apply(n.Constants); err != nil {
			return cfg, fmt.Errorf("node: %s: %w", n.File, err)
		}
		cfg.Constants = &k
	}
	f := correction.Default(tp)
	if err := f.Apply(n, tp.NNodes, tp.LocalRanks); err != nil {
		return cfg, fmt.Errorf("node: %w", err)
	}
	cfg.Factors = f
	cfg.Overlay = n.Overlay
	cells, err := capabilities.NodeFitCells(n, tp.NNodes)
	if err != nil {
		return cfg, err
	}
	fitted := false // the overlay has cells of tp's shape
	for _, c := range cells {
		fitted = fitted || c.RanksPerNode == tp.LocalRanks
	}
	for _, c := range cells {
		o := planner.CellOverride{Coll: c.Coll, Algo: c.Algo, Proto: c.Proto,
			LatUS: float32(c.LatUS), BWGBps: float32(c.BWGBps)}
		if c.RanksPerNode != tp.LocalRanks {
			if fitted {
				continue
			}
			o.Skip = fmt.Sprintf("fitted at %d x %d (nodes x ranks per node), this is %d x %d", tp.NNodes, c.RanksPerNode, tp.NNodes, tp.LocalRanks)
		}
		cfg.Cells = append(cfg.Cells, o)
	}
	if cfg.Overlay == "" && n.Fit != nil && len(n.Fit.Cell) > 0 {
		cfg.Overlay = n.File
	}
	return cfg, nil
}
