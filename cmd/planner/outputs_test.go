package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOutputPathsFirst: an output path that cannot be written (a directory, or a file in a
// missing directory) is a usage error naming the flag and the path, before any work: nothing is
// printed and nothing compiled.
func TestOutputPathsFirst(t *testing.T) {
	clearNCCLEnv(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing", "out")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"map --svg directory", []string{"map", "--node", "h100", "--svg", dir}, "--svg " + dir + ": is a directory"},
		{"map --svg missing directory", []string{"map", "--node", "h100", "--svg", missing}, "--svg " + missing + ": directory"},
		{"compile -o directory", []string{"compile", "--node", "h100", "-o", dir}, "-o " + dir + ": is a directory"},
		{"compile -o missing directory", []string{"compile", "--node", "h100", "-o", missing}, "-o " + missing + ": directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, "", tc.args...)
			require.Error(t, err)
			var ue usageError
			assert.ErrorAs(t, err, &ue, "exit status 2")
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, out, "nothing computed before the check")
		})
	}
	_, err := os.Stat(filepath.Dir(missing))
	assert.ErrorIs(t, err, os.ErrNotExist, "no directory created")
}
