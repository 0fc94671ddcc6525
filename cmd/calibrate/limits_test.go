package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
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

// TestRunCollbenchLongLine: collbench output is read line by line; a line over 16 MiB is an error
// naming the output and the line (it used to end the reading silently, the rest of the sweep lost),
// and a 2 MiB line (over the old 1 MiB buffer) is kept whole.
func TestRunCollbenchLongLine(t *testing.T) {
	dir := t.TempDir()
	fake := func(name string, n int) string {
		p := filepath.Join(dir, name)
		script := "#!/bin/sh\necho '# collbench'\necho '       8  2  float  sum  -1  1.0'\n" +
			"head -c " + strconv.Itoa(n) + " /dev/zero | tr '\\0' x\necho\necho '# end'\n"
		require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
		return p
	}
	for _, tc := range []struct {
		name  string
		n     int
		lines int    // output lines kept, when err is ""
		err   string // after the command line
	}{
		{"2 MiB", 2 << 20, 4, ""},
		{"17 MiB", 17 << 20, 0, " stdout:3: line longer than 16777216 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin := fake(strings.ReplaceAll(tc.name, " ", "_"), tc.n)
			out, err := runCollbench(context.Background(), sweepConfig{collbench: bin}, []string{"-x"}, &progress{})
			if tc.err == "" {
				require.NoError(t, err)
				ls := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
				require.Len(t, ls, tc.lines)
				assert.Len(t, ls[2], tc.n)
				assert.Equal(t, "# end", ls[3])
				return
			}
			require.Error(t, err)
			assert.Equal(t, bin+" -x: "+bin+tc.err, err.Error())
		})
	}
}
