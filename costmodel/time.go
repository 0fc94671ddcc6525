package costmodel

import (
	"fmt"
	"math"

	"github.com/collplan/collplan/capabilities"
)

// Time is NCCL's ncclTopoGetAlgoTime (reference §6):
//
//	time_us = lat*latCount + nBytes/(1000*bw*factor)
//
// where lat and bw are the table's cell, factor is the caller's bandwidth correction for this size
// (NCCL's treeCorrectionFactor; see package correction), latCount is pipeOps for Ring and
// ceil(pipeOps/8) otherwise (NCCL_MAX_DEV_WORK_BATCH_COLLS = 8; 9, NCCL_MAX_WORK_ELEMENTS, for a
// table built for NCCL 2.21 or older: Rules.LatBatch), and multi-node Ring/Simple
// AllReduce latency is multiplied by 1.4 (1.9 below sm_80) once nBytes/(commNChannels*nRanks) >= 64
// (the ring plateau). A cell with bandwidth 0 costs -1, as in NCCL. Arithmetic is float32 as in
// NCCL; a NaN bandwidth gives NaN, which no argmin accepts.
func (tb *Table) Time(c Coll, a Algo, p Proto, nBytes int64, pipeOps int, factor float32) float32 {
	bw, lat := tb.BW[c][a][p], tb.Lat[c][a][p]
	if bw == 0 {
		return -1
	}
	bw *= factor
	if a == Ring && p == Simple && tb.NNodes > 1 && c == AllReduce && tb.CommNChannels > 0 &&
		nBytes/int64(tb.CommNChannels*tb.NRanks) >= 64 {
		if tb.MinCompCap < 80 {
			lat = f32(float64(lat) * 1.9)
		} else {
			lat = f32(float64(lat) * 1.4)
		}
	}
	latCount := pipeOps
	if a != Ring && pipeOps > 1 { // ceil(1/b) = 1 for any batch b
		if b := tb.latBatch; b > 0 && b != MaxDevWorkBatchColls {
			latCount = (pipeOps + b - 1) / b
		} else {
			latCount = (pipeOps + MaxDevWorkBatchColls - 1) / MaxDevWorkBatchColls
		}
	}
	// The explicit conversions keep Go from fusing the multiply-add, as NCCL's x86 build does not.
	return float32(lat*float32(latCount)) + float32(float32(nBytes)/float32(1000*bw))
}

// FP8Penalty is NCCL's deep-fp8-ring rule (reference §8 step 5): time *= 1024 for Ring with an
// fp8 dtype and more than 8 ranks. The multiply also hits -1 cells, which become -1024 as in NCCL.
func FP8Penalty(time float32, a Algo, dt capabilities.Dtype, nRanks int) float32 {
	if a == Ring && dt.IsFP8() && nRanks > 8 {
		return time * 1024
	}
	return time
}

// Override replaces one cell's latency (us) and algorithm bandwidth (GB/s) after Build, as a fitted
// node table does. It refuses cells the model left unusable (bandwidth 0 stays 0, so a fit cannot
// revive an illegal cell), indices out of range, and values that are not finite with latency >= 0
// and bandwidth > 0.
func (tb *Table) Override(c Coll, a Algo, p Proto, latUS, bwGBps float32) error {
	if c < 0 || c >= NumColls || a < 0 || a >= NumAlgos || p < 0 || p >= NumProtos {
		return fmt.Errorf("costmodel: override of cell (%d, %d, %d): out of range", int(c), int(a), int(p))
	}
	if why := tb.Unusable(c, a, p); why != "" {
		return fmt.Errorf("costmodel: override of %s/%s/%s: the cell is not usable (%s)", c, a, p, why)
	}
	bad := func(x float32) bool { return x != x || math.IsInf(float64(x), 0) }
	if bad(latUS) || latUS < 0 {
		return fmt.Errorf("costmodel: override of %s/%s/%s: latency %v must be finite and >= 0", c, a, p, latUS)
	}
	if bad(bwGBps) || bwGBps <= 0 {
		return fmt.Errorf("costmodel: override of %s/%s/%s: bandwidth %v must be finite and > 0", c, a, p, bwGBps)
	}
	tb.Lat[c][a][p], tb.BW[c][a][p] = latUS, bwGBps
	return nil
}

// Unusable says why the model left a cell unusable for this communicator (its bandwidth 0 or NaN):
// the cell's Reason (a legality skip, a §5 or env disable, a zero graph, one rank), or "bandwidth is
// not usable" when it has none; "" when the cell is usable. The indices must be in range.
func (tb *Table) Unusable(c Coll, a Algo, p Proto) string {
	if bw := tb.BW[c][a][p]; bw != 0 && bw == bw {
		return ""
	}
	if why := tb.Reason[c][a][p]; why != "" {
		return why
	}
	return "bandwidth is not usable"
}
