// Package table is the node-table policy: its configuration is a node table TOML (with the fitted
// overlay NAME.fit.toml beside it applied, as tables.LoadFile does), and it makes the host decide as
// a planner over that table would. It prices the host's topology as the host's own commands price a
// node table (node.PlannerConfig: the table's constants, its corrections and the overlay's fitted
// cells at the host's node count, skipping those the host's shape or env makes illegal), compiles
// its own DecisionTable for the class and forces its winner per interval, so the host's decisions
// equal its own (channels, threads and chunks follow, as the topology is the same). Intervals whose
// winner the host cannot use (a cell not legal there) get no edit.
package table

import (
	"context"
	"fmt"
	"math"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/tables"
)

// Policy is a loaded node table; it implements planner.Tuner.
type Policy struct {
	Node *tables.Node
}

var _ planner.Tuner = (*Policy)(nil)

// New loads a node table file; it is the plugin's Factory.
func New(path string) (planner.Tuner, error) { return Load(path) }

// Load reads a node table file and its overlay.
func Load(path string) (*Policy, error) {
	if path == "" {
		return nil, fmt.Errorf("table: no configuration file (give --tuner-config NODE.toml)")
	}
	n, err := tables.LoadFile(path)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	return FromNode(n)
}

// FromNode builds the policy from a decoded node table; its constants must apply.
func FromNode(n *tables.Node) (*Policy, error) {
	k := costmodel.DefaultConstants()
	if err := k.Apply(n.Constants); err != nil {
		return nil, fmt.Errorf("table: %s: %w", n.File, err)
	}
	return &Policy{Node: n}, nil
}

// Name identifies the policy.
func (p *Policy) Name() string { return "table" }

// Planner is the policy's own planner over the host's topology: the table as node.PlannerConfig
// configures it, fitted cells included.
func (p *Policy) Planner(req *planner.Request) (*planner.Planner, error) {
	cfg, err := node.PlannerConfig(p.Node, req.Topology)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	pl, err := planner.New(req.Topology, cfg)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	return pl, nil
}

// Tune compiles the class over the table and forces its winner per interval.
func (p *Policy) Tune(ctx context.Context, req *planner.Request) ([]planner.Interval, error) {
	pl, err := p.Planner(req)
	if err != nil {
		return nil, err
	}
	dt, err := pl.Compile(ctx, req.Class)
	if err != nil {
		return nil, fmt.Errorf("table: %w", err)
	}
	entries := dt.Entries()
	var out []planner.Interval
	for i, e := range entries {
		hi := e.Hi
		if i == len(entries)-1 {
			hi = math.MaxInt64 // the table's last decision holds beyond MaxBytes
		}
		cell := planner.Cell{Algo: e.Algo, Proto: e.Proto}
		if req.Menu.Cells[cell.Algo][cell.Proto].Reason != "" {
			continue
		}
		edit := planner.Edit{Kind: planner.Force, Cell: cell}
		if n := len(out); n > 0 && out[n-1].Hi == e.Lo && out[n-1].Edits[0] == edit {
			out[n-1].Hi = hi
			continue
		}
		out = append(out, planner.Interval{Lo: e.Lo, Hi: hi, Edits: []planner.Edit{edit}})
	}
	return out, nil
}
