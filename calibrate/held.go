package calibrate

// heldTag is the source tag of a fitted cell's latency or bandwidth that the data did not
// identify: it keeps the prior table's value (Param.Identified false), so it is not "measured".
const heldTag = "prior (not identified by the data)"

// inferredTag is the source tag of a fitted cell's latency or bandwidth that only envelope points
// (partial or free sweeps, where NCCL chose among cells) constrain (Param.Inferred): the value the
// envelope implies, applied, but never a measurement of the cell.
const inferredTag = "inferred (from envelope sweeps only: no pinned sweep measured this cell)"

// Source of a fitted number in an overlay.
type valueSource int

const (
	srcMeasured valueSource = iota
	srcHeld
	srcInferred
)

// heldKey names one [[fit.cell]] entry by the tables' spellings and its shape.
type heldKey struct {
	coll, algo, proto string
	nodes, rpn        int
}

// valueSources says, per fitted cell of r as FitCells(nodes, rpn) writes it, where its latency
// ([0]) and bandwidth ([1]) come from: measured (identified by pinned points), held at the prior,
// or inferred from envelope points. Cells of an earlier overlay (OverlayInput.Keep) are not in it.
func (r *FitResult) valueSources(nodes, rpn int) map[heldKey][2]valueSource {
	byCell := map[Cell][2]valueSource{}
	for _, p := range r.Params {
		if _, ok := r.Fitted[p.Cell]; !ok {
			continue
		}
		src := srcMeasured
		switch {
		case p.Inferred:
			src = srcInferred
		case !p.Identified:
			src = srcHeld
		}
		h := byCell[p.Cell]
		if p.Kind == "lat_us" {
			h[0] = src
		} else {
			h[1] = src
		}
		byCell[p.Cell] = h
	}
	out := map[heldKey][2]valueSource{}
	for c, h := range byCell {
		out[heldKey{tableColl[c.Coll], tableAlgo[c.Algo], tableProto[c.Proto], nodes, rpn}] = h
	}
	return out
}

// valueTag is the source tag of a fitted number: "measured", heldTag or inferredTag.
func valueTag(s valueSource) string {
	switch s {
	case srcHeld:
		return heldTag
	case srcInferred:
		return inferredTag
	}
	return "measured"
}
