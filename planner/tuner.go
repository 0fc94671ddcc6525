package planner

import (
	"context"
	"fmt"
	"math"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
)

// Tuner edits the priced menu of a query class, NCCL's tuner plugin powers
// (reference/tuner-ecosystem.md §1.5) over size intervals: one call answers for every size of the
// class. It is owned here, by its consumer; plugin implements it over gRPC.
type Tuner interface {
	// Name identifies the policy in explanations and logs.
	Name() string
	// Tune returns size intervals [Lo, Hi) with their edits. Sizes outside every interval get
	// no edits. Intervals must be sorted and must not overlap.
	Tune(ctx context.Context, req *Request) ([]Interval, error)
}

// Request is what a tuner sees: the topology, the query class and the host's priced menu.
type Request struct {
	Topology *capabilities.Topology
	Class    Class
	Menu     *Menu
}

// Interval is a size range [Lo, Hi) in model bytes and the edits that apply to it.
type Interval struct {
	Lo, Hi int64
	Edits  []Edit
}

// EditKind is one of NCCL's tuner powers.
type EditKind int

// Edit kinds. Cell edits apply in list order to the cost the argmin sees.
const (
	Force     EditKind = iota // cost = 0: the cell wins unless an earlier cell is forced too
	Disable                   // cost = -1: the cell is skipped
	AddCost                   // cost += Value (us), a soft preference
	ScaleCost                 // cost *= Value, a soft preference
	Channels                  // nMaxChannels = Value after NCCL's own sizing (0 keeps it)
	Chunk                     // chunk bytes = Value, clamped to the buffer and rounded to the grain
)

var editNames = [...]string{"force", "disable", "add", "scale", "channels", "chunk"}

func (k EditKind) String() string {
	if k < 0 || int(k) >= len(editNames) {
		return fmt.Sprintf("EditKind(%d)", int(k))
	}
	return editNames[k]
}

// Cell names one (algorithm, protocol) pair.
type Cell struct {
	Algo  costmodel.Algo
	Proto costmodel.Proto
}

func (c Cell) String() string { return c.Algo.String() + "/" + c.Proto.String() }

// Edit is one tuner action. Cell is ignored by Channels and Chunk.
type Edit struct {
	Kind  EditKind
	Cell  Cell
	Value float64
}

func (e Edit) String() string {
	switch e.Kind {
	case Force, Disable:
		return fmt.Sprintf("%s %s", e.Kind, e.Cell)
	case Channels, Chunk:
		return fmt.Sprintf("%s %g", e.Kind, e.Value)
	}
	return fmt.Sprintf("%s %s %g", e.Kind, e.Cell, e.Value)
}

// maxChannels is NCCL's MAXCHANNELS.
const maxChannels = 64

// validate checks a tuner's answer against the menu: sorted, non-overlapping, non-empty
// intervals; known kinds and cells; finite values in range; no cost edit that would revive a cell
// the host made illegal (a plugin cannot enable what NCCL left at -1).
func validate(ivs []Interval, m *Menu) error {
	prev := int64(math.MinInt64)
	for i, iv := range ivs {
		if iv.Lo < 0 || iv.Hi <= iv.Lo {
			return fmt.Errorf("interval %d: [%d, %d) is empty or negative", i, iv.Lo, iv.Hi)
		}
		if iv.Lo < prev {
			return fmt.Errorf("interval %d: [%d, %d) overlaps or precedes the previous one", i, iv.Lo, iv.Hi)
		}
		prev = iv.Hi
		for j, e := range iv.Edits {
			if err := validateEdit(e, m); err != nil {
				return fmt.Errorf("interval %d [%d, %d) edit %d (%s): %w", i, iv.Lo, iv.Hi, j, e, err)
			}
		}
	}
	return nil
}

func validateEdit(e Edit, m *Menu) error {
	if math.IsNaN(e.Value) || math.IsInf(e.Value, 0) {
		return fmt.Errorf("value %v is not finite", e.Value)
	}
	switch e.Kind {
	case Channels:
		if e.Value < 0 || e.Value > maxChannels || e.Value != math.Trunc(e.Value) {
			return fmt.Errorf("channels %v not an integer in [0, %d]", e.Value, maxChannels)
		}
		return nil
	case Chunk:
		if e.Value < 0 || e.Value > 1<<40 || e.Value != math.Trunc(e.Value) {
			return fmt.Errorf("chunk %v not a byte count", e.Value)
		}
		return nil
	case Force, Disable, AddCost, ScaleCost:
	default:
		return fmt.Errorf("unknown edit kind %d", int(e.Kind))
	}
	a, p := e.Cell.Algo, e.Cell.Proto
	if a < 0 || a >= costmodel.NumAlgos || p < 0 || p >= costmodel.NumProtos {
		return fmt.Errorf("cell (%d, %d) out of range", int(a), int(p))
	}
	if e.Kind == Disable {
		return nil
	}
	if why := m.Cells[a][p].Reason; why != "" {
		return fmt.Errorf("cell %s is not legal here (%s); a tuner cannot enable it", e.Cell, why)
	}
	if e.Kind == ScaleCost && e.Value < 0 {
		return fmt.Errorf("scale %v is negative", e.Value)
	}
	return nil
}
