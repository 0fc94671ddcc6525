package report

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecisionAppendJSON: the hand-written encoder writes what json.Marshal writes, for random answers
// whose strings hold quotes, backslashes, HTML characters, control bytes, non-ASCII and invalid
// UTF-8, and whose times are ordinary, tiny, huge, negative, NaN or infinite.
func TestDecisionAppendJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	strs := []string{"", "RING", "node h100 x1", `topology a"b.toml`, `c:\path`, "<script>&", "tab\there", "\x00\x1f", "é ü 日本",
		"\xff\xfe", "tuner fault failed, using the built-in policy: tune: plugin died (exit status 3)", "\u2028\u2029"}
	times := []float32{0, 28.014240264892578, 1e-30, 3.4e38, -1, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	s := func() string { return strs[r.IntN(len(strs))] }

	for i := 0; i < 500; i++ {
		a := Decision{Pick: Pick{Query: Query{Topology: s(), NNodes: r.IntN(5000), NRanks: r.IntN(1 << 20), Coll: s(), Bytes: r.Int64(),
			Op: s(), Dtype: s(), PipeOps: r.IntN(9), RegBuff: r.IntN(2) == 0, NCCL: s()},
			Algo: s(), Proto: s(), TimeUS: F32(times[r.IntN(len(times))] * r.Float32()), Forced: r.IntN(2) == 0,
			ForcedBy: s(), Channels: r.IntN(64) - 1, Threads: r.IntN(1024), Warps: r.IntN(32), ChunkBytes: r.Int64() - r.Int64(),
			SliceBytes: r.Int64N(1 << 40)}, Tuner: s(), TunerNote: s(), Policy: s()}
		want, err := json.Marshal(a)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(a.AppendJSON(nil)))
	}
}

// BenchmarkDecisionAppendJSON is the encoding of one /v1/plan answer, the batch path's per-answer
// cost beside json.Marshal's.
func BenchmarkDecisionAppendJSON(b *testing.B) {
	d := Decision{Pick: Pick{Query: Query{Topology: "node h200 x4", NNodes: 4, NRanks: 32, Coll: "AllReduce", Bytes: 4099000,
		Op: "sum", Dtype: "float32", PipeOps: 1}, Algo: "RING", Proto: "SIMPLE", TimeUS: 41.855430603027344, Channels: 16,
		Threads: 544, Warps: 17, ChunkBytes: 524288, SliceBytes: 524288}, Tuner: "none", Policy: "builtin"}
	buf := make([]byte, 0, 1024)
	b.Run("append", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			buf = d.AppendJSON(buf[:0])
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			_, _ = json.Marshal(&d)
		}
	})
}
