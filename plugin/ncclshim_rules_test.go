package plugin_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/plugin/shimtable"
	"github.com/collplan/collplan/tables"
)

// TestShimRules: a table compiled with rules (docs/tuner-rules.md) is an ordinary table to the
// shim, which forces the rules' pins and channels: the conformance cases of a rules table, whose
// expectations come from the Go reader's Lookup, through every ABI (native run only: the reader
// and the hot path are the ones TestShimValgrind already covers).
func TestShimRules(t *testing.T) {
	b := shim(t)
	rs, err := shimtable.ParseRules("rules.toml", []byte(`[[rule]]
nodes = 2
ranks = 16
coll = "allreduce"
max_bytes = 65535
algo = "ring"
proto = "ll"
channels = 4

[[rule]]
coll = "allgather"
min_bytes = 1048576
node = "b200"
`))
	require.NoError(t, err)
	n, err := tables.Load("h100")
	require.NoError(t, err)
	tb, err := shimtable.Compile(context.Background(), shimtable.Request{Node: n, Nodes: []int{2}, Rules: rs})
	require.NoError(t, err)
	require.Equal(t, 1, tb.Lookup(2, 16, 4, 1, 8192)[0].Algo, "the pin is in the table")
	require.Equal(t, 4, tb.Lookup(2, 16, 4, 1, 8192)[0].Channels)
	data := encode(t, tb)
	table := writeFile(t, "rules.cpln", data)
	cs := conformance(rand.New(rand.NewPCG(17, 4)), tb, shimtable.Checksum(data), [][2]int{{1, 8}})
	out := run(t, cleanEnv("COLLPLAN_TUNER_TABLE="+table), b.harness, "cases", b.so, cs.write(t, "rules.cases", 1))
	t.Logf("%d case lines; %s", len(cs.lines), strings.TrimSpace(out))
}
