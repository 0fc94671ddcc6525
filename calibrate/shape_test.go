package calibrate

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSweepShape: ranks per node come from the rank lines (ranks per distinct host), else the
// manifest's gpus_per_node (or ranks_per_node), else the flag, else an error naming the file.
func TestSweepShape(t *testing.T) {
	const rank = "#  Rank %d Group  0 Pid  100 on %s device  0 [0000:1b:00] NVIDIA H100 80GB HBM3\n"
	head := "# nccl-tests version 2.19.6 nccl-headers=23007 nccl-library=23007\n# Collective test starting: all_reduce_perf\n#\n# Using devices\n"
	lines := func(hosts ...string) string {
		var b strings.Builder
		b.WriteString(head)
		for i, h := range hosts {
			b.WriteString(strings.NewReplacer("%d", strconv.Itoa(i), "%s", h).Replace(rank))
		}
		return b.String() + "#\n"
	}
	for _, tc := range []struct {
		name, text string
		flag       int
		want       Shape
		from       string
		err        string
	}{
		{"2x4 rank lines", lines("a", "a", "a", "a", "b", "b", "b", "b"), 0, Shape{2, 4}, ShapeFromRankLines, ""},
		{"rank lines win over the flag", lines("a", "a"), 8, Shape{1, 2}, ShapeFromRankLines, ""},
		{"no rank lines: the flag", head, 4, Shape{0, 4}, ShapeFromFlag, ""},
		{"no rank lines, no flag", head, 0, Shape{}, "", "s.txt:1: nothing gives the ranks per node"},
		{"uneven hosts", lines("a", "a", "a", "b"), 0, Shape{}, "", "s.txt:1: its rank lines spread 4 ranks unevenly over 2 hosts"},
		{"uneven hosts, the flag", lines("a", "a", "a", "b"), 2, Shape{2, 2}, ShapeFromFlag, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseSweep("s.txt", strings.NewReader(tc.text))
			require.NoError(t, err)
			got, from, err := SweepShape(s, tc.flag)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.from, from)
		})
	}
	// The manifest fills what the file does not say: gpus_per_node, or its synonym ranks_per_node.
	for _, key := range []string{"gpus_per_node", "ranks_per_node"} {
		s, err := ParseSweep("s.txt", strings.NewReader(head))
		require.NoError(t, err)
		m, err := DecodeManifest("sweeps.toml", []byte("[[sweep]]\nfile = \"s.txt\"\nnodes = 2\n"+key+" = 4\n"))
		require.NoError(t, err)
		applyEntry(s, m.File, &m.Sweeps[0])
		got, from, err := SweepShape(s, 0)
		require.NoError(t, err, key)
		assert.Equal(t, Shape{2, 4}, got, key)
		assert.Equal(t, ShapeFromManifest, from, key)
	}
	_, err := DecodeManifest("sweeps.toml", []byte("[[sweep]]\nfile = \"s.txt\"\ngpus_per_node = 8\nranks_per_node = 4\n"))
	assert.ErrorContains(t, err, "sweeps.toml:4: ranks_per_node = 4, but gpus_per_node = 8")

	assert.Equal(t, "2 nodes x 4 ranks per node (8 ranks)", Shape{2, 4}.String())
	assert.Equal(t, "1 node x 1 rank per node (1 rank)", Shape{1, 1}.String())
}
