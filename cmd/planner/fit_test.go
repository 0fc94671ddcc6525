package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fitted overlay beside a table file changes the pick at the node count it was fitted at.
func TestExplainAppliesFitCells(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("testdata/fit/h200.toml")
	require.NoError(t, err)
	base := filepath.Join(dir, "h200.toml")
	require.NoError(t, os.WriteFile(base, data, 0o644))
	explain := func(nodes string) string {
		var out, errb bytes.Buffer
		err := run(context.Background(), []string{"explain", "--table", base, "--nodes", nodes, "--bytes", "16MiB"}, nil, &out, &errb)
		require.NoError(t, err, errb.String())
		return out.String()
	}
	before2, before4 := explain("2"), explain("4")
	assert.Contains(t, before2, "-> RING/LL128")

	odata, err := os.ReadFile("testdata/fit/h200.fit.toml")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "h200.fit.toml"), odata, 0o644))
	after2, after4 := explain("2"), explain("4")
	assert.NotEqual(t, before2, after2)
	assert.Contains(t, after2, "-> TREE/LL128")
	assert.Contains(t, after2, "50.00  1000.00")
	// The 4-node cell (Ring/LL) applies at 4 nodes only.
	assert.NotContains(t, before4, "-> RING/LL ")
	assert.Contains(t, after4, "-> RING/LL ")
}
