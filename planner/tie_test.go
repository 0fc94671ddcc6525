package planner_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/report"
	"github.com/collplan/collplan/tables"
)

// TestDecisionTableEqualsPerSizeArgmin holds a compiled DecisionTable to the per-size decision
// (Prepared.Pick, which prices the menu at that size as NCCL does on every call) at every size
// within 1024 bytes of each of its boundaries, for every embedded node table, collective and node
// counts 1, 2, 4 and 16. Near a float32 tie the per-size argmin may flip back and forth over a
// few bytes (h200 at 4 nodes, Broadcast at 7003956 bytes: LL128, SIMPLE, LL128, SIMPLE); the
// table must flip with it, since a job asking at that size gets what the argmin says, not what
// a bisection between the two sides assumed.
func TestDecisionTableEqualsPerSizeArgmin(t *testing.T) {
	ctx := context.Background()
	names, nodeCounts, window := tables.Names(), []int{1, 2, 4, 16}, int64(1024)
	if raceDetector {
		// One goroutine's brute force, ten times slower under the race detector: one table at
		// one node count there; go test ./... checks them all.
		names, nodeCounts, window = []string{"h200"}, []int{4}, 128
	}
	for _, name := range names {
		for _, nodes := range nodeCounts {
			s, err := report.Build(report.Spec{Node: name, Nodes: nodes, NodesGiven: true}, report.NoEnv)
			if err != nil {
				continue // a shape the table cannot build (its own test says why)
			}
			pl, err := s.Planner(ctx, nil)
			require.NoError(t, err)
			for c := capabilities.Coll(0); c < capabilities.NumColls; c++ {
				cls := planner.Class{Coll: c, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1}
				t.Run(fmt.Sprintf("%s/%d/%s", name, nodes, c), func(t *testing.T) {
					pr, err := pl.Prepare(ctx, cls)
					require.NoError(t, err)
					dt, err := pr.Compile()
					require.NoError(t, err)
					wrong := 0
					for _, b := range dt.Boundaries() {
						for n := max(0, b-window); n <= b+window; n++ {
							want, err := pr.Pick(n)
							require.NoError(t, err)
							if got := dt.Lookup(n); got != want.Decision {
								if wrong++; wrong <= 3 {
									assert.Equal(t, want.Decision, got, "%d bytes", n)
								}
							}
						}
					}
					assert.Zero(t, wrong, "sizes where the table and the per-size argmin disagree")
				})
			}
		}
	}
}
