package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/plugin/shimtable"
)

// TestCompileNCCLRelease: a table compiled --nccl 2.28 (and 2.22) records the release, and its
// picks are the ones `planner explain --nccl` of that release makes (the oracle: explain's own answer, per size) at sizes
// sampled across every band of AllReduce, Broadcast and Reduce (whose model size is the size
// explain takes) at 1, 2 and 4 nodes; somewhere in those samples 2.28's pick differs from the
// default (2.30.7) table's, so the release is not a no-op.
func TestCompileNCCLRelease(t *testing.T) {
	clearNCCLEnv(t)
	dir := t.TempDir()
	read := func(p string) *shimtable.Table {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		tb, err := shimtable.Decode(data)
		require.NoError(t, err)
		return tb
	}
	def := filepath.Join(dir, "h100.cptt")
	_, err := runCLI(t, "", "compile", "--node", "h100", "--nodes", "1,2,4", "--ranks-per-node", "8", "-o", def)
	require.NoError(t, err)
	base := read(def)
	assert.True(t, base.Release.IsZero())

	for _, tc := range []struct {
		rel  string
		want costmodel.Release
	}{{"2.28", costmodel.Release{Major: 2, Minor: 28, Patch: 3}}, {"2.22", costmodel.Release{Major: 2, Minor: 22, Patch: 3}}} {
		compileAgainstExplain(t, dir, base, tc.rel, tc.want)
	}

	out := filepath.Join(dir, "bad.cptt")
	_, err = runCLI(t, "", "compile", "--node", "h100", "--nccl", "2.17", "-o", out)
	var ue usageError
	require.ErrorAs(t, err, &ue)
	assert.True(t, strings.Contains(err.Error(), "--nccl"), err.Error())
}

func compileAgainstExplain(t *testing.T, dir string, base *shimtable.Table, rel string, want costmodel.Release) {
	out := filepath.Join(dir, "h100-"+rel+".cptt")
	text, err := runCLI(t, "", "compile", "--node", "h100", "--nodes", "1,2,4", "--ranks-per-node", "8", "--nccl", rel, "-o", out)
	require.NoError(t, err)
	assert.Contains(t, text, "nccl: "+want.String())
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	tb, err := shimtable.Decode(data)
	require.NoError(t, err)
	assert.Equal(t, want, tb.Release)
	checked, differ := 0, 0
	for _, b := range tb.Blocks {
		for _, c := range []costmodel.Coll{costmodel.AllReduce, costmodel.Broadcast, costmodel.Reduce} {
			starts := b.Classes[c][0].Starts
			stride := max(1, len(starts)/12)
			var sizes []int64
			for i := 0; i < len(starts); i += stride {
				sizes = append(sizes, starts[i])
				if i+1 < len(starts) {
					sizes = append(sizes, (starts[i]+starts[i+1])/2, starts[i+1]-1)
				} else {
					sizes = append(sizes, starts[i]*3+1)
				}
			}
			for _, s := range sizes {
				m := explainJSON(t, "--node", "h100", "--nodes", fmt.Sprint(b.NNodes), "--coll", c.String(), "--bytes", fmt.Sprint(s), "--nccl", rel)
				got := tb.Lookup(b.NNodes, b.NRanks, int(c), 1, s)
				require.NotEmpty(t, got)
				a, err := capabilities.ParseAlgo(m["algo"].(string))
				require.NoError(t, err)
				p, err := capabilities.ParseProto(m["proto"].(string))
				require.NoError(t, err)
				require.Equal(t, [2]int{int(a), int(p)}, [2]int{got[0].Algo, got[0].Proto}, "%d nodes %s %d bytes", b.NNodes, c, s)
				if d := base.Lookup(b.NNodes, b.NRanks, int(c), 1, s); d[0].Algo != got[0].Algo || d[0].Proto != got[0].Proto {
					differ++
				}
				checked++
			}
		}
	}
	t.Logf("%d sizes agree with explain --nccl %s; at %d of them 2.30.7's table picks otherwise", checked, rel, differ)
	assert.Positive(t, differ, "%s's model changes some pick of this grid", rel)
}
