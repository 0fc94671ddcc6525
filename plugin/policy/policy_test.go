package policy_test

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin/policy"
)

func TestFirstMatch(t *testing.T) {
	e := func(a costmodel.Algo) []planner.Edit {
		return []planner.Edit{{Kind: planner.Force, Cell: planner.Cell{Algo: a, Proto: costmodel.Simple}}}
	}
	for _, tc := range []struct {
		name  string
		cands []policy.Candidate
		want  []planner.Interval
	}{
		{"none", nil, nil},
		{"empty candidate", []policy.Candidate{{Lo: 5, Hi: 5, Edits: e(0)}}, nil},
		{"first wins", []policy.Candidate{{Lo: 10, Hi: 20, Edits: e(0)}, {Lo: 0, Hi: 30, Edits: e(1)}},
			[]planner.Interval{{Lo: 0, Hi: 10, Edits: e(1)}, {Lo: 10, Hi: 20, Edits: e(0)}, {Lo: 20, Hi: 30, Edits: e(1)}}},
		{"gap", []policy.Candidate{{Lo: 0, Hi: 10, Edits: e(0)}, {Lo: 20, Hi: 30, Edits: e(0)}},
			[]planner.Interval{{Lo: 0, Hi: 10, Edits: e(0)}, {Lo: 20, Hi: 30, Edits: e(0)}}},
		{"adjacent equal edits merge", []policy.Candidate{{Lo: 0, Hi: 10, Edits: e(0)}, {Lo: 10, Hi: 30, Edits: e(0)}},
			[]planner.Interval{{Lo: 0, Hi: 30, Edits: e(0)}}},
		{"shadowed", []policy.Candidate{{Lo: 0, Hi: 100, Edits: e(0)}, {Lo: 10, Hi: 20, Edits: e(1)}},
			[]planner.Interval{{Lo: 0, Hi: 100, Edits: e(0)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, policy.FirstMatch(tc.cands))
		})
	}
}

func TestInclusive(t *testing.T) {
	for _, tc := range []struct {
		min, max uint64
		lo, hi   int64
		ok       bool
	}{
		{0, 0, 0, 1, true},
		{0, 4294967295, 0, 4294967296, true},
		{4294967296, 17179869184, 4294967296, 17179869185, true},
		{0, math.MaxUint64, 0, math.MaxInt64, true},
		{1, math.MaxInt64, 1, math.MaxInt64, true},
		{5, 4, 0, 0, false},
		{math.MaxInt64, math.MaxUint64, 0, 0, false},
	} {
		lo, hi, ok := policy.Inclusive(tc.min, tc.max)
		assert.Equal(t, tc.ok, ok, "%d..%d", tc.min, tc.max)
		if tc.ok {
			assert.Equal(t, [2]int64{tc.lo, tc.hi}, [2]int64{lo, hi}, "%d..%d", tc.min, tc.max)
		}
	}
}
