package calibrate

// heldTag is the source tag of a fitted cell's latency or bandwidth that the data did not
// identify: it keeps the prior table's value (Param.Identified false), so it is not "measured".
const heldTag = "prior (not identified by the data)"

// heldKey names one [[fit.cell]] entry by the tables' spellings and its shape.
type heldKey struct {
	coll, algo, proto string
	nodes, rpn        int
}

// heldAtPrior says, per fitted cell of r as FitCells(nodes, rpn) writes it, whether its latency ([0])
// and bandwidth ([1]) were held at the prior. Cells of an earlier overlay (OverlayInput.Keep) are
// not in it.
func (r *FitResult) heldAtPrior(nodes, rpn int) map[heldKey][2]bool {
	byCell := map[Cell][2]bool{}
	for _, p := range r.Params {
		if _, ok := r.Fitted[p.Cell]; !ok || p.Identified {
			continue
		}
		h := byCell[p.Cell]
		if p.Kind == "lat_us" {
			h[0] = true
		} else {
			h[1] = true
		}
		byCell[p.Cell] = h
	}
	out := map[heldKey][2]bool{}
	for c, h := range byCell {
		out[heldKey{tableColl[c.Coll], tableAlgo[c.Algo], tableProto[c.Proto], nodes, rpn}] = h
	}
	return out
}

// valueTag is the source tag of a fitted number: measured, or heldTag.
func valueTag(held bool) string {
	if held {
		return heldTag
	}
	return "measured"
}
