package report

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanAppendJSON: the hand-written encoder writes what json.Encoder with a two-space indent
// writes, for random plans: strings with quotes, backslashes, HTML characters, control bytes,
// non-ASCII and invalid UTF-8; times ordinary, tiny, huge, negative, NaN or infinite; nil and
// empty slices and maps; with and without overlay, skipped cells and fabric.
func TestPlanAppendJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	strs := []string{"", "RING", "node h100 x1", `topology a"b.toml`, `c:\path`, "<script>&", "tab\there", "\x00\x1f", "é ü 日本",
		"\xff\xfe", "\u2028\u2029", "NCCL_ALGO"}
	times := []float32{0, 28.014240264892578, 1e-30, 3.4e38, -1, float32(math.NaN()), float32(math.Inf(1))}
	s := func() string { return strs[r.IntN(len(strs))] }
	f := func() F32 { return F32(times[r.IntN(len(times))] * r.Float32()) }
	strSlice := func() []string {
		switch r.IntN(3) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		out := make([]string, 1+r.IntN(3))
		for i := range out {
			out[i] = s()
		}
		return out
	}
	for i := 0; i < 300; i++ {
		p := &Plan{Pick: Pick{Query: Query{Topology: s(), NNodes: r.IntN(5000), NRanks: r.IntN(1 << 20), Coll: s(), Bytes: r.Int64() - r.Int64(),
			Op: s(), Dtype: s(), PipeOps: r.IntN(9), RegBuff: r.IntN(2) == 0, NCCL: s()},
			Algo: s(), Proto: s(), TimeUS: f(), Forced: r.IntN(2) == 0, ForcedBy: s(), Channels: r.IntN(64) - 1,
			Threads: r.IntN(1024), Warps: r.IntN(32), ChunkBytes: r.Int64(), SliceBytes: r.Int64N(1 << 40)},
			Tuner: s(), TunerNote: s(), Edits: strSlice(), Estimated: strSlice(),
			Assumed: AssumedJSON{GPUsPerNode: r.IntN(9), GPUsPerNodeSource: s(), Scale: s(), ScaleStandsIn: r.IntN(2) == 0, Graphs: s()}}
		if r.IntN(4) > 0 {
			p.Env = map[string]Setting{}
			for j := r.IntN(4); j > 0; j-- {
				p.Env[s()+"X"] = Setting{Value: s(), Source: s()}
			}
		}
		if r.IntN(4) > 0 {
			p.Menu = []Cell{}
			for j := r.IntN(22); j > 0; j-- {
				p.Menu = append(p.Menu, Cell{Algo: s(), Proto: s(), LatUS: f(), BWGBps: f(), Correction: f(), CorrSource: s(),
					ModelTimeUS: f(), TimeUS: f(), Reason: s(), Chosen: r.IntN(5) == 0})
			}
		}
		if r.IntN(2) == 0 {
			p.Overlay = &Overlay{File: s(), Embedded: r.IntN(2) == 0, Applied: r.IntN(40)}
			if r.IntN(3) > 0 {
				p.Overlay.Skipped = []Skipped{}
				for j := r.IntN(3); j > 0; j-- {
					p.Overlay.Skipped = append(p.Overlay.Skipped, Skipped{Cell: s(), Reason: s()})
				}
			}
		}
		if r.IntN(2) == 0 {
			p.Fabric = &Fabric{Name: s(), File: s(), Applied: r.IntN(2) == 0}
		}
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		require.NoError(t, enc.Encode(p))
		if !assert.Equal(t, want.String(), string(p.AppendJSON(nil)), "plan %d", i) {
			return
		}
	}
}
