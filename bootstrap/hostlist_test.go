package bootstrap

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// seq writes prefix+i+suffix for i in [lo, hi], zero-padded to width: an oracle for ranges,
// independent of the parser.
func seq(prefix string, lo, hi, width int, suffix string) []string {
	var out []string
	for i := lo; i <= hi; i++ {
		out = append(out, fmt.Sprintf("%s%0*d%s", prefix, width, i, suffix))
	}
	return out
}

func cat(lists ...[]string) []string {
	var out []string
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func TestExpandHostlist(t *testing.T) {
	for _, tc := range []struct {
		list string
		want []string
	}{
		{"a[1-3,5],b7,c[01-02]-x", []string{"a1", "a2", "a3", "a5", "b7", "c01-x", "c02-x"}},
		{"node1", []string{"node1"}},
		{"alpha,beta,gamma", []string{"alpha", "beta", "gamma"}},
		// The forms in Slurm's documentation (scontrol show hostnames, the hostlist man pages).
		{"linux[0-64,128]", cat(seq("linux", 0, 64, 1, ""), []string{"linux128"})},
		{"lx[10-20]", seq("lx", 10, 20, 1, "")},
		{"lx[15,18,32-33]", []string{"lx15", "lx18", "lx32", "lx33"}},
		{"tux[2,1-2]", []string{"tux2", "tux1", "tux2"}}, // order and duplicates kept
		{"linux[00-17]", seq("linux", 0, 17, 2, "")},
		{"rack[0-1]_blade[0-1]", []string{"rack0_blade0", "rack0_blade1", "rack1_blade0", "rack1_blade1"}},
		// Zero-padding follows the lower bound as written.
		{"n[8-10]", []string{"n8", "n9", "n10"}},
		{"n[001-100]", seq("n", 1, 100, 3, "")},
		{"n[09-11]", []string{"n09", "n10", "n11"}},
		{"gpu-a100-[1-2].cluster", []string{"gpu-a100-1.cluster", "gpu-a100-2.cluster"}},
		{"[1-2]", []string{"1", "2"}},
		{"a[0]", []string{"a0"}},
		{"x[1-2]y,z", []string{"x1y", "x2y", "z"}},
	} {
		t.Run(tc.list, func(t *testing.T) {
			got, err := ExpandHostlist(tc.list)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			first, err := FirstHost(tc.list)
			require.NoError(t, err)
			assert.Equal(t, tc.want[0], first)
		})
	}
}

func TestExpandHostlistErrors(t *testing.T) {
	for _, tc := range []struct {
		list string
		pos  int
		msg  string
	}{
		{"", 0, "empty host name"},
		{"a,,b", 2, "empty host name"},
		{",a", 0, "empty host name"},
		{"a,", 2, "after the last comma"},
		{"a[1-3", 1, "'[' without ']'"},
		{"a[1,2", 1, "'[' without ']'"},
		{"a[3-1]", 4, "runs backwards"},
		{"a[1-x]", 4, `want a number, found 'x'`},
		{"a[]", 2, `want a number, found ']'`},
		{"a[1,]", 4, `want a number, found ']'`},
		{"a]", 1, "']' without '['"},
		{"a[1]]", 4, "']' without '['"},
		{"a[1[2]]", 3, "nested '['"},
		{"a[1:2]", 3, `unexpected ':'`},
		{"a b", 1, "space"},
		{"a[0-99999999999]", 4, "too large"},
		{"n[0-2000000]", 12, "expands past"},
		{"r[0-1023]n[0-1023]x[0-1]", 24, "expands past"},
	} {
		t.Run(tc.list, func(t *testing.T) {
			_, err := ExpandHostlist(tc.list)
			var he *HostlistError
			require.ErrorAs(t, err, &he)
			assert.Equal(t, tc.pos, he.Pos)
			assert.Contains(t, he.Msg, tc.msg)
			assert.Contains(t, err.Error(), fmt.Sprintf("%q: position %d", tc.list, tc.pos))
		})
	}
}

func TestTasksPerNode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  string
	}{
		{in: "2(x3),1", want: []int{2, 2, 2, 1}},
		{in: "4", want: []int{4}},
		{in: "1,3(x2)", want: []int{1, 3, 3}},
		{in: "0", err: "not a positive integer"},
		{in: "2(x0)", err: "repeat count"},
		{in: "2(x3", err: "want N or N(xM)"},
		{in: "x", err: "not a positive integer"},
		{in: "", err: "not a positive integer"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := tasksPerNode(tc.in)
			if tc.err != "" {
				assert.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}
