package profile

import (
	"fmt"
	"math"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
)

// CalibratePoints turns the dump's Points into calibrate's fit points: one per (collective,
// algorithm, protocol, bytes) with the median time, credited to the one cell NCCL ran (the dump says
// which, so no envelope), Run and File the dump's path. The times are the kernel channels' GPU span
// (first channel start to last channel stop), not nccl-tests' host time per iteration, and they hold
// for the header's nNodes and nRanks: the caller fits them at that shape. Groups whose algorithm or
// protocol collplan does not model (a symmetric kernel's variant, an empty protocol) are left out and
// named in skipped.
func (d Dump) CalibratePoints() (pts []calibrate.Point, skipped []string) {
	for _, p := range d.Points() {
		coll, err1 := capabilities.ParseColl(p.Coll)
		algo, err2 := capabilities.ParseAlgo(p.Algo)
		proto, err3 := capabilities.ParseProto(p.Proto)
		if err1 != nil || err2 != nil || err3 != nil || p.Bytes > math.MaxInt64 {
			skipped = append(skipped, fmt.Sprintf("%s:%d: %s %s/%s %d bytes (%d collectives): not a modelled cell",
				d.Path, p.Line, p.Coll, p.Algo, p.Proto, p.Bytes, p.N))
			continue
		}
		pts = append(pts, calibrate.Point{File: d.Path, Line: p.Line, Coll: coll, Bytes: int64(p.Bytes),
			TimeUS: p.MedianUS, Cells: []calibrate.Cell{{Coll: coll, Algo: algo, Proto: proto}},
			Algo: algo.EnvName(), Proto: proto.EnvName(), Run: d.Path})
	}
	return pts, skipped
}
