package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCalibrateOverlaySizeLimit: an overlay over 4 MiB at --out, read to keep its other cells or to
// evaluate it (--check), is a usage error naming the file and the limit.
func TestCalibrateOverlaySizeLimit(t *testing.T) {
	dir := t.TempDir()
	data, err := os.ReadFile("../../tables/h200.toml")
	require.NoError(t, err)
	base := filepath.Join(dir, "h200.toml")
	require.NoError(t, os.WriteFile(base, data, 0o644))
	big := filepath.Join(dir, "big.fit.toml")
	require.NoError(t, os.WriteFile(big, []byte("# "+strings.Repeat("x", 4<<20)+"\n[node]\n"), 0o644))
	limit := big + ": larger than the limit of 4 MiB (4194304 bytes)"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"overlay to update", []string{"--node", base, "--sweeps", fixtures, "--out", big}, "the overlay to update: " + limit},
		{"overlay to check", []string{"--node", base, "--check", fixtures, "--out", big}, "--check: the overlay to evaluate: " + limit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := run(context.Background(), tc.args, &out, &errb)
			require.Error(t, err)
			var ue usageError
			assert.ErrorAs(t, err, &ue, "exit status 2")
			assert.Equal(t, tc.want, err.Error())
		})
	}
}
