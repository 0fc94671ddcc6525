package planner

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"

	"github.com/collplan/collplan/correction"
	"github.com/collplan/collplan/costmodel"
)

// MaxBytes is the end of the size domain a DecisionTable is compiled over (1 PiB); sizes beyond it
// get the last entry's decision.
const MaxBytes int64 = 1 << 50

// Entry is one row of a DecisionTable: the decision for sizes [Lo, Hi).
type Entry struct {
	Lo, Hi int64
	Decision
}

// DecisionTable is a query class compiled into sorted size boundaries. Each boundary is the exact
// first size at which the planner's decision changes; Lookup is a bounded binary search that
// allocates nothing.
type DecisionTable struct {
	Class     Class
	Tuner     string
	TunerNote string
	// Overlay is what became of the planner's fitted cells (Planner.Overlay); nil for none.
	Overlay *Overlay

	starts []int64
	decs   []Decision
	// span[k] holds the first and last entry that can contain a size of bit length k.
	span [65][2]int32
}

// Compile builds the DecisionTable of a class: one tuner round trip, then, segment by segment
// between the points where a cell's cost changes form (correction buckets, the ring plateau, tuner
// interval edges), a search for each size where the decision changes. Within a segment every cost
// is affine in the size and channel, thread and chunk sizing are monotone, so each decision holds
// on one interval and bisection finds its exact end.
func (pl *Planner) Compile(ctx context.Context, cls Class) (*DecisionTable, error) {
	pr, err := pl.Prepare(ctx, cls)
	if err != nil {
		return nil, err
	}
	return pr.Compile()
}

// Compile builds the class's DecisionTable without another tuner call.
func (pr *Prepared) Compile() (*DecisionTable, error) {
	pl, m, po, cls := pr.pl, pr.menu, pr.po, pr.menu.Class
	dt := &DecisionTable{Class: cls, Tuner: po.name, TunerNote: po.note, Overlay: pl.Overlay()}
	var err error
	dt.starts, dt.decs, err = intervals(pl.breakpoints(po), func(n int64) (Decision, error) {
		d, _, err := pl.decide(m, n, po.edits(n))
		return d, err
	}, func(n int64) bool { return near(m, n, po.edits(n), 1) },
		func(a, b Decision) bool { return a.Algo != b.Algo || a.Proto != b.Proto })
	if err != nil {
		return nil, err
	}
	dt.index()
	return dt, nil
}

// intervals walks [0, MaxBytes) segment by segment between cuts and returns the first size of each
// run of equal values of decide, with the value. Within a segment each value must hold on one
// interval, which bisection then finds exactly, except where tie says the decision rests on a
// float32 rounding: around each change bisection finds, the sizes where tie holds are decided one
// by one, so that a decision flipping back and forth over a few bytes is followed flip by flip.
func intervals[T comparable](cuts []int64, decide func(int64) (T, error), tie func(int64) bool, reordered func(a, b T) bool) ([]int64, []T, error) {
	var starts []int64
	var vals []T
	for i := 0; i+1 < len(cuts); i++ {
		lo, hi := cuts[i], cuts[i+1]
		var (
			carried T // decide(x), when the previous step already decided it
			have    bool
		)
		for x := lo; x < hi; {
			d := carried
			if !have {
				var err error
				if d, err = decide(x); err != nil {
					return nil, nil, fmt.Errorf("%w (at %d bytes)", err, x)
				}
			}
			have = false
			if k := len(vals); k == 0 || vals[k-1] != d {
				starts = append(starts, x)
				vals = append(vals, d)
			}
			next, err := lastEqual(x, hi, d, decide)
			if err != nil {
				return nil, nil, err
			}
			// Only a change of cells can be a rounding flip (sizing changes at exact thresholds); a
			// zone of flips is entered through one, since every change in a segment is visited.
			if next < hi && tie != nil {
				// The next iteration starts at next: decide it once, for both.
				if carried, err = decide(next); err != nil {
					return nil, nil, fmt.Errorf("%w (at %d bytes)", err, next)
				}
				have = true
			}
			if have && reordered(d, carried) && (tie(next-1) || tie(next)) {
				have = false
				// The change sits in a tie zone: decide every size of the zone.
				lo, end := next-1, next
				for lo > x && next-lo < maxTieZone && tie(lo-1) {
					lo--
				}
				for end < hi && end-next < maxTieZone && tie(end) {
					end++
				}
				for n := lo; n < end; n++ {
					d, err := decide(n)
					if err != nil {
						return nil, nil, fmt.Errorf("%w (at %d bytes)", err, n)
					}
					if vals[len(vals)-1] != d {
						starts = append(starts, n)
						vals = append(vals, d)
					}
				}
				next = end
			}
			x = next
		}
	}
	return starts, vals, nil
}

// maxTieZone bounds the sizes decided one by one on each side of a change (see near); the widest
// zone of the embedded tables is about 200 sizes (TestDecisionTableEqualsPerSizeArgmin checks
// 1024 around every boundary).
const maxTieZone = 1 << 12

// tieULPs is how close, in units of the lower time's float32 ulp, two cells' times must be for
// their order at a size to count as a rounding decision: m.Time is a handful of float32
// operations, each rounding by half an ulp, so two cells whose exact times cross within the zone
// can swap order at any size in it. (8 and 64 give the same tables of every embedded node table
// and node count as 16, TestDecisionTableEqualsPerSizeArgmin holding; 64 costs planner compile
// twice the time.)
const tieULPs = 16

// near reports whether the order of the k cheapest cells at n (after the tuner's edits; k = 1 is
// the argmin) rests on a float32 tie: two of the k+1 lowest accepted times differ, by at most
// tieULPs ulps of the lower (equal included: the size itself rounds to float32, so two cells'
// times can be equal over a run of sizes and apart on either side of it).
func near(m *Menu, n int64, edits []Edit, k int) bool {
	var t [costmodel.NumAlgos][costmodel.NumProtos]float32
	costs(m, n, edits, &t)
	type cand struct {
		v float32
		c Cell
	}
	var buf [costmodel.NumAlgos * costmodel.NumProtos]cand
	vs := buf[:0]
	for a := range t {
		for p, v := range t[a] {
			if v >= 0 && !math.IsInf(float64(v), 0) {
				vs = append(vs, cand{v, Cell{costmodel.Algo(a), costmodel.Proto(p)}})
			}
		}
	}
	slices.SortFunc(vs, func(x, y cand) int {
		switch {
		case x.v < y.v:
			return -1
		case x.v > y.v:
			return 1
		}
		return 0
	})
	for i := 0; i+1 < len(vs) && i < k; i++ {
		lo, hi := vs[i], vs[i+1]
		if hi.v-lo.v > tieULPs*(math.Nextafter32(lo.v, math.MaxFloat32)-lo.v) {
			continue
		}
		if hi.v != lo.v || !sameEverywhere(m, n, edits, lo.c, hi.c) {
			return true
		}
	}
	return false
}

// sameEverywhere reports whether cells x and y cost exactly the same at n/2 and 2n as they do at
// n: two cells priced from the same inputs (a structural tie, which NCCL's strict < orders the same
// way at every size, so no decision flips between them), not two whose times meet at n by
// rounding.
func sameEverywhere(m *Menu, n int64, edits []Edit, x, y Cell) bool {
	for _, at := range []int64{n / 2, 2 * n} {
		var t [costmodel.NumAlgos][costmodel.NumProtos]float32
		costs(m, at, edits, &t)
		if t[x.Algo][x.Proto] != t[y.Algo][y.Proto] {
			return false
		}
	}
	return true
}

// lastEqual returns the first size in (x, hi] whose decision differs from d (hi when none does),
// assuming the sizes deciding d form an interval: a doubling probe, then bisection.
func lastEqual[T comparable](x, hi int64, d T, decide func(int64) (T, error)) (int64, error) {
	good, step := x, int64(1)
	bad := hi
	for {
		probe := good + step
		if probe >= hi {
			break
		}
		pd, err := decide(probe)
		if err != nil {
			return 0, fmt.Errorf("%w (at %d bytes)", err, probe)
		}
		if pd != d {
			bad = probe
			break
		}
		good, step = probe, step*2
	}
	for bad-good > 1 {
		mid := good + (bad-good)/2
		md, err := decide(mid)
		if err != nil {
			return 0, fmt.Errorf("%w (at %d bytes)", err, mid)
		}
		if md == d {
			good = mid
		} else {
			bad = mid
		}
	}
	return bad, nil
}

// breakpoints are the sizes where some cost changes form, sorted, from 0 to MaxBytes.
func (pl *Planner) breakpoints(po *policy) []int64 {
	cuts := []int64{0, MaxBytes}
	for i := 0; i <= correction.NumBuckets; i++ {
		cuts = append(cuts, correction.BucketStart(i))
	}
	if pl.topo.NNodes > 1 {
		cuts = append(cuts, 64*int64(pl.topo.CommNChannels)*int64(pl.topo.NRanks))
	}
	for _, iv := range po.ivs {
		cuts = append(cuts, iv.Lo, iv.Hi)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	out := cuts[:0]
	for _, c := range cuts {
		if c >= 0 && c <= MaxBytes {
			out = append(out, c)
		}
	}
	return out
}

// index fills span so that a lookup searches only the entries that can hold its bit length.
func (dt *DecisionTable) index() {
	last := func(n int64) int32 { // index of the last entry starting at or before n
		i, _ := slices.BinarySearch(dt.starts, n+1)
		return int32(i - 1)
	}
	for k := 0; k <= 64; k++ {
		var lo, hi int64
		switch {
		case k == 0:
			lo, hi = 0, 0
		case k == 64:
			lo, hi = 1<<62, 1<<63-1
		default:
			lo, hi = int64(1)<<(k-1), int64(1)<<k-1
		}
		if k == 63 {
			hi = 1<<63 - 1
		}
		dt.span[k] = [2]int32{last(lo), last(hi)}
	}
}

// Lookup returns the decision for nBytes (negative sizes count as 0). It allocates nothing.
func (dt *DecisionTable) Lookup(nBytes int64) Decision {
	if nBytes < 0 {
		nBytes = 0
	}
	s := &dt.span[bits.Len64(uint64(nBytes))]
	i, j := s[0], s[1]
	for i < j {
		m := (i + j + 1) >> 1
		if dt.starts[m] <= nBytes {
			i = m
		} else {
			j = m - 1
		}
	}
	return dt.decs[i]
}

// Entries returns the table's rows; the last row's Hi is MaxBytes.
func (dt *DecisionTable) Entries() []Entry {
	out := make([]Entry, len(dt.starts))
	for i := range dt.starts {
		hi := MaxBytes
		if i+1 < len(dt.starts) {
			hi = dt.starts[i+1]
		}
		out[i] = Entry{Lo: dt.starts[i], Hi: hi, Decision: dt.decs[i]}
	}
	return out
}

// Boundaries returns the sizes where the decision changes (every entry start but the first).
func (dt *DecisionTable) Boundaries() []int64 { return slices.Clone(dt.starts[1:]) }
