package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/plugin/shimtable"
)

// TestCompileRules: --rules bakes a pin into the table (the file's 2x16 AllReduce at 8 KiB is
// RING/LL with 4 channels, where the rule-less compile is something else) and prints what each
// rule did; a bad rules file is bad input (exit 2) naming the file, line and field.
func TestCompileRules(t *testing.T) {
	clearNCCLEnv(t)
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.toml")
	require.NoError(t, os.WriteFile(rules, []byte(`# small AllReduce of 2-node jobs on ring/LL
[[rule]]
nodes = 2
ranks = 16
coll = "allreduce"
max_bytes = 65535
algo = "ring"
proto = "ll"
channels = 4
`), 0o644))
	plain := filepath.Join(dir, "plain.cptt")
	_, err := runCLI(t, "", "compile", "--node", "h100", "--nodes", "1,2", "-o", plain)
	require.NoError(t, err)
	out := filepath.Join(dir, "rules.cptt")
	text, err := runCLI(t, "", "compile", "--node", "h100", "--nodes", "1,2", "--rules", rules, "-o", out)
	require.NoError(t, err)
	assert.Contains(t, text, "rule 1: "+rules+":2: AllReduce bytes 0..65535 -> RING/LL 4 channels: 4 classes")
	read := func(p string) *shimtable.Table {
		data, err := os.ReadFile(p)
		require.NoError(t, err)
		tb, err := shimtable.Decode(data)
		require.NoError(t, err)
		return tb
	}
	ring := shimtable.Plan{Algo: 1, Proto: 0, Channels: 4}
	require.NotEqual(t, ring, read(plain).Lookup(2, 16, 4, 1, 8192)[0], "the rule must change something")
	assert.Equal(t, ring, read(out).Lookup(2, 16, 4, 1, 8192)[0])
	assert.Equal(t, read(plain).Lookup(2, 16, 4, 1, 65536), read(out).Lookup(2, 16, 4, 1, 65536))

	// A rule naming communicators: a block of its own, listed with its pattern.
	namedRules := filepath.Join(dir, "named.toml")
	require.NoError(t, os.WriteFile(namedRules, []byte("[[rule]]\ncomm = \"dp-*\"\nranks = 16\ncoll = \"allreduce\"\nalgo = \"tree\"\nproto = \"simple\"\n"), 0o644))
	text, err = runCLI(t, "", "compile", "--node", "h100", "--nodes", "1,2", "--rules", namedRules, "-o", out)
	require.NoError(t, err)
	assert.Contains(t, text, "     2 nodes     16 ranks  pipe ops 1..4  communicators named \"dp-*\"")
	assert.Equal(t, []shimtable.Named{{Comm: "dp-*", Block: 4}}, read(out).Named)

	bad := filepath.Join(dir, "bad.toml")
	require.NoError(t, os.WriteFile(bad, []byte("[[rule]]\nnodes = 2\ncoll = \"allreduce\"\nalgo = \"ring\"\nproto = \"ll256\"\n"), 0o644))
	for _, tc := range []struct {
		file, want string
	}{
		{bad, bad + ":5: rule 1: proto:"},
		{filepath.Join(dir, "none.toml"), "none.toml"},
	} {
		_, err = runCLI(t, "", "compile", "--node", "h100", "--nodes", "1,2", "--rules", tc.file, "-o", out)
		var ue usageError
		require.True(t, errors.As(err, &ue), "%v", err)
		assert.Contains(t, err.Error(), tc.want)
	}
}
