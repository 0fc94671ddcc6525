package outpath

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChecks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	missing := filepath.Join(dir, "nope")
	for _, tc := range []struct {
		name  string
		check func(flag, path string) error
		path  string
		want  string // "" for no error
	}{
		{"file: unset", File, "", ""},
		{"file: new in a directory", File, filepath.Join(dir, "new.svg"), ""},
		{"file: existing file", File, file, ""},
		{"file: a directory", File, dir, "is a directory"},
		{"file: missing directory", File, filepath.Join(missing, "x.svg"), "directory " + missing + " does not exist"},
		{"file: under a file", File, filepath.Join(file, "x.svg"), file + " is not a directory"},
		{"dir: unset", Dir, "", ""},
		{"dir: existing", Dir, dir, ""},
		{"dir: new, nested", Dir, filepath.Join(missing, "a", "b"), ""},
		{"dir: a file", Dir, file, "is a file, want a directory"},
		{"dir: under a file", Dir, filepath.Join(file, "sub"), file + " is not a directory"},
		{"readable: file", Readable, file, ""},
		{"readable: missing", Readable, missing, "no such file"},
		{"readable: a directory", Readable, dir, "is a directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.check("--out", tc.path)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), "--out "+tc.path+": ")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "the checks leave nothing behind")
}

// TestUnwritable: a directory without write permission (meaningless as root, who may write anyway).
func TestUnwritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into read-only directories")
	}
	ro := filepath.Join(t.TempDir(), "ro")
	require.NoError(t, os.Mkdir(ro, 0o555))
	assert.ErrorContains(t, File("--svg", filepath.Join(ro, "x.svg")), "not writable")
	assert.ErrorContains(t, Dir("--sweeps-out", filepath.Join(ro, "sub")), "not writable")
}
