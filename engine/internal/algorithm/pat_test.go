package algorithm

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
)

// patRankOp is one PAT op as rank r sees it, in absolute ranks: the peer it sends to and the rank
// whose block (data for AllGather, partial for ReduceScatter) it sends, the peer it receives from
// and the rank whose block it receives.
type patRankOp struct{ to, sendBlock, from, recvBlock int }

func patRankOps(coll costmodel.Coll, n, r int) []patRankOp {
	var out []patRankOp
	for _, op := range PATSchedule(coll, n) {
		to, from := PATPeers(coll, r, n, op.Dim)
		out = append(out, patRankOp{to, (r + op.SendOff) % n, from, (r + op.RecvOff) % n})
	}
	return out
}

// TestPATSchedule checks the schedule against a hand derivation from NCCL's description (pat.go):
// op s = 1 .. n-1 (AllGather) or n-1 .. 1 (ReduceScatter) runs on dimension d = fbs(s); AllGather
// sends block r+s-2^d to r-2^d and receives block r+s from r+2^d; ReduceScatter sends the partial
// of block r+s to r+2^d and receives a partial of block r+s-2^d from r-2^d.
func TestPATSchedule(t *testing.T) {
	ag, rs := costmodel.AllGather, costmodel.ReduceScatter
	cases := []struct {
		coll    costmodel.Coll
		n, rank int
		want    []patRankOp
	}{
		// n = 8, rank 0, AllGather: s=1 (d0), 2 (d1), 3 (d0), 4 (d2), 5 (d0), 6 (d1), 7 (d0).
		{ag, 8, 0, []patRankOp{{7, 0, 1, 1}, {6, 0, 2, 2}, {7, 2, 1, 3}, {4, 0, 4, 4}, {7, 4, 1, 5}, {6, 4, 2, 6}, {7, 6, 1, 7}}},
		// n = 8, rank 3: the same offsets, shifted.
		{ag, 8, 3, []patRankOp{{2, 3, 4, 4}, {1, 3, 5, 5}, {2, 5, 4, 6}, {7, 3, 7, 7}, {2, 7, 4, 0}, {1, 7, 5, 1}, {2, 1, 4, 2}}},
		// n = 5, rank 0: dimensions 0, 1, 2 (4 = 0-4 mod 5 = 1 for the last send).
		{ag, 5, 0, []patRankOp{{4, 0, 1, 1}, {3, 0, 2, 2}, {4, 2, 1, 3}, {1, 0, 4, 4}}},
		// n = 5, rank 2.
		{ag, 5, 2, []patRankOp{{1, 2, 3, 3}, {0, 2, 4, 4}, {1, 4, 3, 0}, {3, 2, 1, 1}}},
		// n = 8, rank 0, ReduceScatter: s = 7 .. 1.
		{rs, 8, 0, []patRankOp{{1, 7, 7, 6}, {2, 6, 6, 4}, {1, 5, 7, 4}, {4, 4, 4, 0}, {1, 3, 7, 2}, {2, 2, 6, 0}, {1, 1, 7, 0}}},
		// n = 5, rank 0: s = 4 (d2: to 4, from 0-4 = 1), 3, 2, 1.
		{rs, 5, 0, []patRankOp{{4, 4, 1, 0}, {1, 3, 4, 2}, {2, 2, 3, 0}, {1, 1, 4, 0}}},
		// n = 5, rank 3.
		{rs, 5, 3, []patRankOp{{2, 2, 4, 3}, {4, 1, 2, 0}, {0, 0, 1, 3}, {4, 4, 2, 3}}},
	}
	for _, k := range cases {
		assert.Equal(t, k.want, patRankOps(k.coll, k.n, k.rank), "%v n=%d rank %d", k.coll, k.n, k.rank)
	}
}

// TestPATScheduleSimulated runs the schedule symbolically for n = 1..33: at every op, what a rank
// sends is what its peer receives at the same op from it (so each connection carries the same
// sequence at both ends); AllGather's sends only forward blocks the rank already holds and every
// rank ends with every block once; ReduceScatter's partials are sent only once complete, and every
// rank's contribution to every block reaches its owner exactly once.
func TestPATScheduleSimulated(t *testing.T) {
	for n := 1; n <= 33; n++ {
		for _, coll := range []costmodel.Coll{costmodel.AllGather, costmodel.ReduceScatter} {
			ops := make([][]patRankOp, n)
			for r := range ops {
				ops[r] = patRankOps(coll, n, r)
				require.Len(t, ops[r], n-1)
			}
			// held[r][b]: AllGather, rank r holds block b; ReduceScatter, the set of ranks whose
			// input for block b has been reduced into r's partial of b (bitmask).
			held := make([][]uint64, n)
			sent := make([][]bool, n) // ReduceScatter: r sent its partial of b
			for r := range held {
				held[r], sent[r] = make([]uint64, n), make([]bool, n)
				for b := range held[r] {
					if coll == costmodel.AllGather {
						if b == r {
							held[r][b] = 1
						}
					} else {
						held[r][b] = 1 << r
					}
				}
			}
			for i := 0; i < n-1; i++ {
				moved := make([]uint64, n)
				for r := 0; r < n; r++ {
					op := ops[r][i]
					peer := ops[op.to][i]
					require.Equal(t, r, peer.from, "n=%d %v op %d: rank %d sends to %d, which receives from %d", n, coll, i, r, op.to, peer.from)
					require.Equal(t, op.sendBlock, peer.recvBlock, "n=%d %v op %d", n, coll, i)
					if coll == costmodel.AllGather {
						require.NotZero(t, held[r][op.sendBlock], "n=%d op %d: rank %d forwards block %d it has not received", n, i, r, op.sendBlock)
						moved[op.to] = uint64(op.sendBlock)
					} else {
						require.False(t, sent[r][op.sendBlock], "n=%d op %d: rank %d sends block %d twice", n, i, r, op.sendBlock)
						require.NotEqual(t, r, op.sendBlock, "n=%d: rank %d sends its own block", n, r)
						sent[r][op.sendBlock] = true
						moved[op.to] = held[r][op.sendBlock]
					}
				}
				for r := 0; r < n; r++ {
					b := ops[r][i].recvBlock
					if coll == costmodel.AllGather {
						require.Zero(t, held[r][b], "n=%d op %d: rank %d receives block %d twice", n, i, r, b)
						held[r][b] = 1
						continue
					}
					require.False(t, sent[r][b], "n=%d op %d: rank %d receives into block %d after sending it", n, i, r, b)
					require.Zero(t, held[r][b]&moved[r], "n=%d op %d: a contribution reaches rank %d twice", n, i, r)
					held[r][b] |= moved[r]
				}
			}
			all := uint64(1)<<n - 1
			for r := 0; r < n; r++ {
				for b := 0; b < n; b++ {
					if coll == costmodel.AllGather {
						assert.NotZero(t, held[r][b], "n=%d: rank %d lacks block %d", n, r, b)
					} else if b == r {
						assert.Equal(t, all, held[r][r], "n=%d: rank %d's block lacks contributions", n, r)
					} else if b != r {
						assert.True(t, sent[r][b], "n=%d: rank %d never sent its partial of block %d", n, r, b)
					}
				}
			}
		}
	}
}

// patXfer is one FIFO transfer of a PAT chunk as a rank sees it: a send or a receive, its
// dimension, and the rank whose block (data or partial) it carries.
type patXfer struct {
	send       bool
	dim, block int
}

// TestPATTransfersMatchNCCL: per chunk, the engine's schedule moves exactly the transfers NCCL's
// does. The reference vectors are the op sequences of NCCL 2.30's PatAGAlgorithm and
// PatRSAlgorithm (src/include/collectives.h) for one chunk that fills its slot (stepSize =
// channel bytes, stepDepth NCCL_STEPS, maxParallelFactor 16, as the proxy builds them), with
// skipped ops dropped and an op that re-reads a received slot or adds into a send slot already
// written counted once; they are in NCCL's order (largest distances first: for AllGather, n = 8,
// rank 0 sends its block to distances 4 and 2, forwards block 4, then sends on distance 1, and
// the leaves receive last). The engine runs the same set in its own order (pat.go).
func TestPATTransfersMatchNCCL(t *testing.T) {
	ag, rs := costmodel.AllGather, costmodel.ReduceScatter
	cases := []struct {
		coll    costmodel.Coll
		n, rank int
		nccl    []patXfer
	}{
		{ag, 8, 0, []patXfer{{true, 2, 0}, {true, 1, 0}, {true, 1, 4}, {false, 2, 4}, {true, 0, 0}, {true, 0, 2}, {false, 1, 2}, {true, 0, 4}, {true, 0, 6}, {false, 1, 6}, {false, 0, 1}, {false, 0, 3}, {false, 0, 5}, {false, 0, 7}}},
		{ag, 8, 3, []patXfer{{true, 2, 3}, {true, 1, 3}, {true, 1, 7}, {false, 2, 7}, {true, 0, 3}, {true, 0, 5}, {false, 1, 5}, {true, 0, 7}, {true, 0, 1}, {false, 1, 1}, {false, 0, 4}, {false, 0, 6}, {false, 0, 0}, {false, 0, 2}}},
		{ag, 5, 0, []patXfer{{true, 2, 0}, {true, 1, 0}, {true, 0, 2}, {false, 1, 2}, {false, 0, 3}, {true, 0, 0}, {false, 2, 4}, {false, 0, 1}}},
		{ag, 5, 2, []patXfer{{true, 2, 2}, {true, 1, 2}, {true, 0, 4}, {false, 1, 4}, {false, 0, 0}, {true, 0, 2}, {false, 2, 1}, {false, 0, 3}}},
		{rs, 8, 0, []patXfer{{true, 0, 7}, {true, 0, 3}, {true, 0, 5}, {true, 0, 1}, {true, 1, 6}, {false, 0, 6}, {true, 1, 2}, {false, 0, 2}, {true, 2, 4}, {false, 1, 4}, {false, 1, 0}, {false, 0, 4}, {false, 2, 0}, {false, 0, 0}}},
		{rs, 5, 0, []patXfer{{true, 0, 3}, {true, 1, 2}, {false, 0, 2}, {true, 2, 4}, {false, 1, 0}, {true, 0, 1}, {false, 2, 0}, {false, 0, 0}}},
		{rs, 5, 3, []patXfer{{true, 0, 1}, {true, 1, 0}, {false, 0, 0}, {true, 2, 2}, {false, 1, 3}, {true, 0, 4}, {false, 2, 3}, {false, 0, 3}}},
	}
	for _, k := range cases {
		var ours []patXfer
		for i, op := range PATSchedule(k.coll, k.n) {
			ro := patRankOps(k.coll, k.n, k.rank)[i]
			ours = append(ours, patXfer{true, op.Dim, ro.sendBlock}, patXfer{false, op.Dim, ro.recvBlock})
		}
		assert.ElementsMatch(t, k.nccl, ours, "%v n=%d rank %d", k.coll, k.n, k.rank)
	}
}
