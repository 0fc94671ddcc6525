// Package regions is a region tuner in the manner of aws-ofi-nccl's (reference/tuner-ecosystem.md
// §2): per collective, polygons in log2(bytes) x log2(ranks) space, each naming a cell; the first
// region that contains the point (size, ranks), boundary included, wins.
//
// The file is TOML, one [[region]] per polygon:
//
//	[[region]]
//	name = "small messages"   # optional, for messages
//	coll = "allreduce"
//	algo = "tree"             # NCCL_ALGO or log names: tree, ring, nvls_tree, CollNetDirect ...
//	proto = "ll"
//	action = "force"          # optional: force (default), disable, add (value us), scale (value x)
//	value = 0.0               # add and scale only
//	channels = 8              # optional, 1..64: channel count wherever this region wins
//	chunk = 131072            # optional, bytes: chunk size wherever this region wins
//	polygon = [[0, 1], [16, 1], [16, 4], [0, 4]]   # [log2(bytes), log2(ranks)] vertices
//
// One Tune call covers every size at the communicator's rank count, so each polygon is cut by the
// line y = log2(nRanks) into exact size intervals. Regions of other collectives, and regions whose
// cell is not legal for the class (NCCL's IGNORE), are skipped.
package regions

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/internal/configfile"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin/policy"
)

// Region is one polygon with its action.
type Region struct {
	Name     string
	Coll     costmodel.Coll
	Cell     planner.Cell
	Action   planner.EditKind // Force, Disable, AddCost or ScaleCost
	Value    float64
	Channels int   // 0: keep
	Chunk    int64 // 0: keep
	Polygon  []Point
}

// Policy is a parsed regions file; it implements planner.Tuner.
type Policy struct {
	File    string
	Regions []Region
}

var _ planner.Tuner = (*Policy)(nil)

type fileRegion struct {
	Name     string      `toml:"name"`
	Coll     string      `toml:"coll"`
	Algo     string      `toml:"algo"`
	Proto    string      `toml:"proto"`
	Action   string      `toml:"action"`
	Value    *float64    `toml:"value"`
	Channels int         `toml:"channels"`
	Chunk    int64       `toml:"chunk"`
	Polygon  [][]float64 `toml:"polygon"`
}

type file struct {
	Region []fileRegion `toml:"region"`
}

// New loads a regions file; it is the plugin's Factory.
func New(path string) (planner.Tuner, error) { return Load(path) }

// Load reads and parses a regions file; a file over configfile.MaxBytes (4 MiB) is an error.
func Load(path string) (*Policy, error) {
	if path == "" {
		return nil, fmt.Errorf("regions: no configuration file (give --tuner-config FILE)")
	}
	data, err := configfile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("regions: %w", err)
	}
	return Parse(path, data)
}

// maxDepth is how deeply a regions file nests (as configfile.CheckTOML counts): its deepest path is
// region[i].polygon[j][k], 5 levels. The schema is a typed struct, so there is no slack.
const maxDepth = 5

var actions = map[string]planner.EditKind{"": planner.Force, "force": planner.Force, "disable": planner.Disable,
	"add": planner.AddCost, "scale": planner.ScaleCost}

// Parse decodes a regions file strictly (unknown keys are errors) and checks every region; errors
// name the file and the region. Text over configfile.MaxBytes (4 MiB) or nested deeper than the
// schema (region[i].polygon[j][k]) is refused before it is decoded.
func Parse(name string, data []byte) (*Policy, error) {
	var f file
	md, err := configfile.DecodeTOML(name, data, maxDepth, &f)
	if err != nil {
		return nil, fmt.Errorf("regions: %w", err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		keys := make([]string, len(und))
		for i, k := range und {
			keys[i] = k.String()
		}
		return nil, fmt.Errorf("regions: %s: unknown keys: %s", name, strings.Join(keys, ", "))
	}
	if len(f.Region) == 0 {
		return nil, fmt.Errorf("regions: %s: no [[region]]", name)
	}
	p := &Policy{File: name}
	var errs []error
	for i, fr := range f.Region {
		r, err := fr.region()
		if err != nil {
			label := fmt.Sprintf("region %d", i+1)
			if fr.Name != "" {
				label += fmt.Sprintf(" (%s)", fr.Name)
			}
			errs = append(errs, fmt.Errorf("regions: %s: %s: %w", name, label, err))
			continue
		}
		p.Regions = append(p.Regions, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

func (fr *fileRegion) region() (Region, error) {
	r := Region{Name: fr.Name}
	var err error
	if r.Coll, err = capabilities.ParseColl(fr.Coll); err != nil {
		return r, fmt.Errorf("coll: %w", err)
	}
	algo := strings.ReplaceAll(fr.Algo, "_", "")
	if r.Cell.Algo, err = capabilities.ParseAlgo(algo); err != nil {
		if r.Cell.Algo, err = capabilities.ParseAlgo(fr.Algo); err != nil {
			return r, fmt.Errorf("algo: %w", err)
		}
	}
	if r.Cell.Proto, err = capabilities.ParseProto(fr.Proto); err != nil {
		return r, fmt.Errorf("proto: %w", err)
	}
	var ok bool
	if r.Action, ok = actions[strings.ToLower(fr.Action)]; !ok {
		return r, fmt.Errorf("action %q: want force, disable, add or scale", fr.Action)
	}
	switch r.Action {
	case planner.AddCost, planner.ScaleCost:
		if fr.Value == nil {
			return r, fmt.Errorf("action %s needs a value", fr.Action)
		}
		r.Value = *fr.Value
		if math.IsNaN(r.Value) || math.IsInf(r.Value, 0) || math.Abs(r.Value) > 1e9 || (r.Action == planner.ScaleCost && r.Value < 0) {
			return r, fmt.Errorf("value %v out of range", r.Value)
		}
	default:
		if fr.Value != nil {
			return r, fmt.Errorf("value applies to add and scale only")
		}
	}
	if fr.Channels < 0 || fr.Channels > 64 {
		return r, fmt.Errorf("channels %d: want 1..64 (or leave it out)", fr.Channels)
	}
	r.Channels = fr.Channels
	if fr.Chunk < 0 || fr.Chunk > 1<<40 {
		return r, fmt.Errorf("chunk %d: want a byte count in [1, 2^40] (or leave it out)", fr.Chunk)
	}
	r.Chunk = fr.Chunk
	for i, v := range fr.Polygon {
		if len(v) != 2 {
			return r, fmt.Errorf("polygon vertex %d has %d coordinates, want [log2(bytes), log2(ranks)]", i, len(v))
		}
		r.Polygon = append(r.Polygon, Point{v[0], v[1]})
	}
	if n := len(r.Polygon); n > 3 && r.Polygon[0] == r.Polygon[n-1] {
		r.Polygon = r.Polygon[:n-1] // closed ring given
	}
	if err := checkPolygon(r.Polygon); err != nil {
		return r, fmt.Errorf("polygon: %w", err)
	}
	return r, nil
}

// Name identifies the policy.
func (p *Policy) Name() string { return "regions" }

// edits is what a region does where it wins.
func (r *Region) edits() []planner.Edit {
	out := []planner.Edit{{Kind: r.Action, Cell: r.Cell, Value: r.Value}}
	if r.Channels > 0 {
		out = append(out, planner.Edit{Kind: planner.Channels, Value: float64(r.Channels)})
	}
	if r.Chunk > 0 {
		out = append(out, planner.Edit{Kind: planner.Chunk, Value: float64(r.Chunk)})
	}
	return out
}

// Tune cuts every applicable region at y = log2(nRanks) and lets the first region win per size.
func (p *Policy) Tune(_ context.Context, req *planner.Request) ([]planner.Interval, error) {
	y := math.Log2(float64(req.Topology.NRanks))
	var cands []policy.Candidate
	for i := range p.Regions {
		r := &p.Regions[i]
		if r.Coll != req.Class.Coll || req.Menu.Cells[r.Cell.Algo][r.Cell.Proto].Reason != "" {
			continue
		}
		for _, s := range lineSpans(r.Polygon, y) {
			if lo, hi, ok := byteRange(s); ok {
				cands = append(cands, policy.Candidate{Lo: lo, Hi: hi, Edits: r.edits()})
			}
		}
	}
	return policy.FirstMatch(cands), nil
}
