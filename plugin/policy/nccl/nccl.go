// Package nccl is the policy that decides as stock NCCL 2.30 does: no edits, and at Init it hands
// the host NCCL's default constants and corrections (reference/nccl-costmodel.md §1, §6), so a host
// that prices with a fitted node table decides as NCCL would. On a host already pricing with the
// defaults it changes nothing: the baseline against which other policies, and the plugin round
// trip itself, are measured.
package nccl

import (
	"context"
	"fmt"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
)

// Policy is NCCL 2.30's model.
type Policy struct{}

var (
	_ planner.Tuner      = Policy{}
	_ plugin.Initializer = Policy{}
)

// New is the plugin's Factory; the policy takes no configuration.
func New(path string) (planner.Tuner, error) {
	if path != "" {
		return nil, fmt.Errorf("nccl: takes no configuration (got %s)", path)
	}
	return Policy{}, nil
}

// Name identifies the policy.
func (Policy) Name() string { return "nccl" }

// Init answers with NCCL's default constants and corrections for the topology.
func (Policy) Init(_ context.Context, t *capabilities.Topology, _ plugin.Model) (plugin.Model, error) {
	k := costmodel.DefaultConstants()
	return plugin.Model{Constants: &k, Factors: correction.Default(t)}, nil
}

// Tune makes no edits.
func (Policy) Tune(context.Context, *planner.Request) ([]planner.Interval, error) { return nil, nil }
