package calibrate

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/collplan/collplan/costmodel"
)

// RunKind says what a run's pin left NCCL to choose.
type RunKind string

// Run kinds (RunKindOf).
const (
	// RunExact: the pin allows one legal cell, so the run measures that cell.
	RunExact RunKind = "exact"
	// RunPartial: an algorithm-only or protocol-only pin (or a pin naming several values) that
	// allows several legal cells; NCCL chose among them, so the run measures a pick only as a proxy.
	RunPartial RunKind = "partial"
	// RunFree: no pin; the run is NCCL's default and never measures a pick.
	RunFree RunKind = "free"
)

// RunKindOf is the kind of the run a point comes from: free without a pin, exact when the pin
// allows one legal cell, partial otherwise.
func RunKindOf(p Point) RunKind {
	switch {
	case p.Algo == "" && p.Proto == "":
		return RunFree
	case len(p.PinCells()) == 1:
		return RunExact
	}
	return RunPartial
}

// RunTime is one run's measured time at one (collective, size): the time of one sweep's row, or
// the fastest of repeated runs of one kind that allow the same cells.
type RunTime struct {
	// Run is the sweep's "file:line" (the fastest one of repeats).
	Run         string
	Algo, Proto string // the pin, "" free
	Kind        RunKind
	Cells       []Cell // the legal cells the pin allows
	TimeUS      float64
}

// Label names the run in reports: the cell of an exact run, "NCCL_ALGO=Ring" (and/or
// "NCCL_PROTO=LL") for a partial one, "NCCL default" for a free one.
func (r RunTime) Label() string {
	switch r.Kind {
	case RunExact:
		return r.Cells[0].String()
	case RunFree:
		return "NCCL default"
	}
	return Pin{Algo: r.Algo, Proto: r.Proto}.Env()
}

func (r RunTime) allows(c Cell) bool {
	for _, x := range r.Cells {
		if x == c {
			return true
		}
	}
	return false
}

// SizeRuns are the runs that measured one (collective, size).
type SizeRuns struct {
	Coll  costmodel.Coll
	Bytes int64
	// Runs: exact (by (algo, proto) index), then partial (by label), then free. Repeats are merged
	// into the fastest of them: exact runs of one cell, partial or free runs of one pin; partial
	// runs of different pins never are.
	Runs []RunTime
}

// GroupRuns groups points by (collective, size), sorted by collective then size.
func GroupRuns(pts []Point) []SizeRuns {
	type key struct {
		c costmodel.Coll
		n int64
	}
	by := map[key]map[string]RunTime{}
	var keys []key
	for _, p := range pts {
		k := key{p.Coll, p.Bytes}
		if by[k] == nil {
			by[k] = map[string]RunTime{}
			keys = append(keys, k)
		}
		// Repeats: exact runs of one cell (however their pins are spelled), or partial and free
		// runs of one pin; the fastest of them stays.
		kind := RunKindOf(p)
		rk := string(kind) + " " + cellsKey(p.PinCells())
		if kind != RunExact {
			rk += " " + p.Algo + "|" + p.Proto
		}
		run := p.Run
		if run == "" {
			run = fmt.Sprintf("%s:%d", p.File, p.Line)
		}
		if old, ok := by[k][rk]; !ok || p.TimeUS < old.TimeUS {
			by[k][rk] = RunTime{Run: run, Algo: p.Algo, Proto: p.Proto, Kind: kind, Cells: p.PinCells(), TimeUS: p.TimeUS}
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].c != keys[j].c {
			return keys[i].c < keys[j].c
		}
		return keys[i].n < keys[j].n
	})
	rank := map[RunKind]int{RunExact: 0, RunPartial: 1, RunFree: 2}
	out := make([]SizeRuns, 0, len(keys))
	for _, k := range keys {
		s := SizeRuns{Coll: k.c, Bytes: k.n}
		for _, r := range by[k] {
			s.Runs = append(s.Runs, r)
		}
		sort.Slice(s.Runs, func(i, j int) bool {
			a, b := s.Runs[i], s.Runs[j]
			if rank[a.Kind] != rank[b.Kind] {
				return rank[a.Kind] < rank[b.Kind]
			}
			if a.Kind == RunExact && a.Cells[0] != b.Cells[0] {
				return cellLess(a.Cells[0], b.Cells[0]) // ties of Best to the lower (algo, proto), as before
			}
			if a.Label() != b.Label() {
				return a.Label() < b.Label()
			}
			return cellsKey(a.Cells) < cellsKey(b.Cells)
		})
		out = append(out, s)
	}
	return out
}

func cellsKey(cs []Cell) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = c.String()
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// Best is the fastest run at the size (ties to the earlier run in Runs order).
func (s SizeRuns) Best() RunTime {
	best := RunTime{TimeUS: math.Inf(1)}
	for _, r := range s.Runs {
		if r.TimeUS < best.TimeUS {
			best = r
		}
	}
	return best
}

// Measure is the run that measures cell c: the exact run on c, else the partial run whose pin
// allows c with the fewest legal cells (ties to the earlier in Runs order), marked proxy because
// NCCL chose within it. A free run never measures a cell. ok is false when no run does.
func (s SizeRuns) Measure(c Cell) (r RunTime, proxy, ok bool) {
	for _, x := range s.Runs {
		if x.Kind == RunExact && x.Cells[0] == c {
			return x, false, true
		}
	}
	found := false
	for _, x := range s.Runs {
		if x.Kind == RunPartial && x.allows(c) && (!found || len(x.Cells) < len(r.Cells)) {
			r, found = x, true
		}
	}
	return r, found, found
}

// Default is the free run at the size (NCCL's default), the fastest of repeats.
func (s SizeRuns) Default() (RunTime, bool) {
	best, ok := RunTime{TimeUS: math.Inf(1)}, false
	for _, x := range s.Runs {
		if x.Kind == RunFree && x.TimeUS < best.TimeUS {
			best, ok = x, true
		}
	}
	return best, ok
}
