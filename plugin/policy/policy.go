// Package policy holds what the tuner policies share: resolving "first match wins" rules over size
// ranges into the sorted, non-overlapping intervals a planner.Tuner answers with. The policies
// themselves are the packages below it (rules, regions, table, nccl); each is a planner.Tuner that
// runs in process and, through plugin.Serve, as a plugin binary (cmd/tuner-*).
package policy

import (
	"math"
	"slices"

	"github.com/collplan/collplan/planner"
)

// Candidate is a size range [Lo, Hi) where a rule matches, with the edits it makes.
type Candidate struct {
	Lo, Hi int64
	Edits  []planner.Edit
}

// FirstMatch resolves candidates given in priority order: each size gets the edits of the first
// candidate containing it. Adjacent ranges with equal edits merge; sizes no candidate contains get
// no interval.
func FirstMatch(cands []Candidate) []planner.Interval {
	var cuts []int64
	for _, c := range cands {
		if c.Lo < c.Hi {
			cuts = append(cuts, c.Lo, c.Hi)
		}
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	var out []planner.Interval
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]
		var edits []planner.Edit
		found := false
		for _, c := range cands {
			if c.Lo <= lo && hi <= c.Hi {
				edits, found = c.Edits, true
				break
			}
		}
		if !found {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Hi == lo && slices.Equal(out[n-1].Edits, edits) {
			out[n-1].Hi = hi
			continue
		}
		out = append(out, planner.Interval{Lo: lo, Hi: hi, Edits: slices.Clone(edits)})
	}
	return out
}

// Inclusive converts an inclusive byte range [min, max] (unsigned, as NCCL's size_t bounds) to
// [lo, hi) in int64 sizes; ok is false when no int64 size lies in it. hi saturates at MaxInt64.
func Inclusive(min, max uint64) (lo, hi int64, ok bool) {
	if min > max || min > math.MaxInt64-1 {
		return 0, 0, false
	}
	lo = int64(min)
	if max >= math.MaxInt64-1 {
		return lo, math.MaxInt64, true
	}
	return lo, int64(max) + 1, true
}
