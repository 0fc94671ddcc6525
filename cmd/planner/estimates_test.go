package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExplainTopologyEstimates: a topology file's keys tagged "# estimate" (as calibrate nccl-log
// writes the inputs a log lacks) are the estimated inputs explain lists, in JSON and in text.
func TestExplainTopologyEstimates(t *testing.T) {
	data, err := os.ReadFile("../../capabilities/testdata/topology/s1.toml")
	require.NoError(t, err)
	text := string(data)
	for _, key := range []string{"cpu_vendor", "comm_n_channels"} {
		lines := strings.Split(text, "\n")
		for i, l := range lines {
			if strings.HasPrefix(l, key+" ") || strings.HasPrefix(l, key+"=") {
				code, _, _ := strings.Cut(l, "#")
				lines[i] = strings.TrimSpace(code) + "  # estimate"
			}
		}
		text = strings.Join(lines, "\n")
	}
	path := filepath.Join(t.TempDir(), "t.toml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	var out, errb bytes.Buffer
	require.NoError(t, run(context.Background(), []string{"explain", "--topology", path, "--bytes", "1M", "--json"}, nil, &out, &errb), errb.String())
	var ex struct {
		Estimated []string `json:"estimated_inputs"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &ex))
	assert.Equal(t, []string{"comm_n_channels", "cpu_vendor"}, ex.Estimated)
	out.Reset()
	require.NoError(t, run(context.Background(), []string{"explain", "--topology", path, "--bytes", "1M"}, nil, &out, &errb), errb.String())
	assert.Contains(t, out.String(), "estimated inputs (no measured or published source): comm_n_channels, cpu_vendor")
}
