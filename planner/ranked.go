package planner

import (
	"fmt"
	"math"
	"slices"

	"github.com/collplan/collplan/costmodel"
)

// MaxRanked bounds how many ranked plans a RankedTable keeps per interval.
const MaxRanked = 8

// Ranked returns the class's legal cells at nBytes, cheapest first after the tuner's edits (ties to
// the lower (algo, proto), NCCL's order), each sized as if picked; at most k of them. Its first entry
// is Explain's decision. A consumer that finds its pick unavailable (an NCCL build with other env
// filters) falls back to the next.
func (pr *Prepared) Ranked(nBytes int64, k int) ([]Decision, error) {
	r, err := pr.ranked(nBytes, k)
	if err != nil {
		return nil, err
	}
	return slices.Clone(r.d[:r.n]), nil
}

// ranking is a comparable ranked list (so that intervals can compare it).
type ranking struct {
	n int
	d [MaxRanked]Decision
}

func (pr *Prepared) ranked(n int64, k int) (ranking, error) {
	var r ranking
	if k < 1 || k > MaxRanked {
		return r, fmt.Errorf("planner: ranked plans %d out of range [1, %d]", k, MaxRanked)
	}
	edits := pr.po.edits(n)
	var t [costmodel.NumAlgos][costmodel.NumProtos]float32
	costs(pr.menu, n, edits, &t)
	type cand struct {
		t float32
		c Cell
	}
	var cs []cand
	for a := costmodel.Algo(0); a < costmodel.NumAlgos; a++ {
		for p := costmodel.Proto(0); p < costmodel.NumProtos; p++ {
			if v := t[a][p]; v >= 0 && !math.IsInf(float64(v), 0) {
				cs = append(cs, cand{v, Cell{a, p}})
			}
		}
	}
	if len(cs) == 0 {
		return r, pr.pl.noAlgorithm(pr.menu.Class)
	}
	// Stable: equal costs keep (algo, proto) order, as NCCL's strict < does.
	slices.SortStableFunc(cs, func(x, y cand) int {
		switch {
		case x.t < y.t:
			return -1
		case x.t > y.t:
			return 1
		}
		return 0
	})
	for _, c := range cs[:min(k, len(cs))] {
		r.d[r.n] = pr.pl.size(pr.menu.Class, c.c.Algo, c.c.Proto, n, edits)
		r.n++
	}
	return r, nil
}

// RankedInterval is the ranked plans for sizes [Lo, Hi).
type RankedInterval struct {
	Lo, Hi int64
	Plans  []Decision
}

// RankedTable compiles Ranked(., k) into intervals, each ending exactly where the ranked list (or
// a plan's sizing) changes; the last one ends at MaxBytes.
func (pr *Prepared) RankedTable(k int) ([]RankedInterval, error) {
	if k < 1 || k > MaxRanked {
		return nil, fmt.Errorf("planner: ranked plans %d out of range [1, %d]", k, MaxRanked)
	}
	starts, vals, err := intervals(pr.pl.breakpoints(pr.po), func(n int64) (ranking, error) { return pr.ranked(n, k) },
		func(n int64) bool { return near(pr.menu, n, pr.po.edits(n), k) },
		func(a, b ranking) bool {
			if a.n != b.n {
				return true
			}
			for i := 0; i < a.n; i++ {
				if a.d[i].Algo != b.d[i].Algo || a.d[i].Proto != b.d[i].Proto {
					return true
				}
			}
			return false
		})
	if err != nil {
		return nil, err
	}
	out := make([]RankedInterval, len(starts))
	for i := range starts {
		hi := MaxBytes
		if i+1 < len(starts) {
			hi = starts[i+1]
		}
		out[i] = RankedInterval{Lo: starts[i], Hi: hi, Plans: slices.Clone(vals[i].d[:vals[i].n])}
	}
	return out, nil
}

// ChannelOverride is the tuner's channel count at nBytes (0 when the tuner leaves NCCL's).
func (pr *Prepared) ChannelOverride(nBytes int64) int {
	ch := 0
	for _, e := range pr.po.edits(nBytes) {
		if e.Kind == Channels && e.Value > 0 {
			ch = int(e.Value)
		}
	}
	return ch
}
