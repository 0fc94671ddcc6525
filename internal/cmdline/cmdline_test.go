package cmdline

import (
	"bytes"
	"errors"
	"flag"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newSet(out *bytes.Buffer) *flag.FlagSet {
	fs := flag.NewFlagSet("explain", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Int("nodes", 1, "node count")
	return fs
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" for no error
	}{
		{[]string{"--nodes", "2"}, ""},
		{[]string{"--frob"}, "flag provided but not defined: -frob (run 'planner explain -h' for the flags)"},
		{[]string{"--nodes", "x"}, `invalid value "x" for flag -nodes: parse error (run 'planner explain -h' for the flags)`},
		{[]string{"--nodes"}, "flag needs an argument: -nodes (run 'planner explain -h' for the flags)"},
	} {
		var out bytes.Buffer
		err := Parse(newSet(&out), tc.args, "planner explain")
		if tc.want == "" {
			assert.NoError(t, err, tc.args)
		} else {
			assert.EqualError(t, err, tc.want, tc.args)
		}
		assert.Empty(t, out.String(), "nothing printed for %v", tc.args)
	}
	for _, h := range []string{"-h", "--help", "-help"} {
		var out bytes.Buffer
		fs := newSet(&out)
		assert.ErrorIs(t, Parse(fs, []string{h}, "planner explain"), flag.ErrHelp)
		assert.Empty(t, out.String())
		assert.Equal(t, &out, fs.Output(), "the output is restored")
	}
}

func TestUsage(t *testing.T) {
	var out bytes.Buffer
	fs := newSet(&out)
	u := Usage(fs, "usage: planner explain [flags]\n\nPlans one call.\n")
	assert.Equal(t, "usage: planner explain [flags]\n\nPlans one call.\n\nflags:\n  -nodes int\n    \tnode count (default 1)\n", u)
	assert.Empty(t, out.String())
}

func TestErrorLine(t *testing.T) {
	for _, tc := range []struct{ msg, want string }{
		{"planner: no algorithm", "planner: no algorithm"},
		{"tables: no embedded table", "planner: tables: no embedded table"},
		{"plannerx: y", "planner: plannerx: y"},
	} {
		require.Equal(t, tc.want, ErrorLine("planner", errors.New(tc.msg)), tc.msg)
	}
}
