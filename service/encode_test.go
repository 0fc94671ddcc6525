package service

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/report"
)

// TestAppendAnswers: a batch of decisions is written as json.Marshal writes the Batch.
func TestAppendAnswers(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	strs := []string{"", "RING", "node h100 x1", `a"b`, "<&>", "\xff", "é"}
	s := func() string { return strs[r.IntN(len(strs))] }
	var as []report.Decision
	for i := 0; i < 50; i++ {
		as = append(as, report.Decision{Pick: report.Pick{Query: report.Query{Topology: s(), Coll: s(), Bytes: r.Int64()}, Algo: s(), Proto: s(),
			TimeUS: report.F32(r.Float32()), Channels: r.IntN(64)}, Tuner: s(), TunerNote: s(), Policy: s()})
	}
	for _, n := range []int{0, 1, 50} {
		want, err := json.Marshal(Batch[report.Decision]{Generation: 17, Results: as[:n]})
		require.NoError(t, err)
		assert.Equal(t, string(want), string(appendAnswers(nil, 17, as[:n])))
	}
}
