package regions

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseNestingLimit: a regions file nested deeper than its schema (5 levels:
// region[i].polygon[j][k]) is refused before the TOML decoder sees it, with the file, the line and
// the depth.
func TestParseNestingLimit(t *testing.T) {
	const deep = 2000
	head := "[[region]]\ncoll = \"allreduce\"\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		// region(1), its element (2), name(3), then a(4) a(5) a(6) on line 3.
		{"inline tables", head + "name = " + strings.Repeat("{a = ", deep) + "1" + strings.Repeat("}", deep) + "\n",
			"line 3: nesting depth 6 exceeds the maximum of 5"},
		{"dotted key", head + strings.Repeat("a.", deep) + "b = 1\n", "line 3: nesting depth 6 exceeds the maximum of 5"},
		// polygon(3), a vertex (4), a coordinate (5): one '[' more is the sixth level.
		{"one level too deep", head + "polygon = [[0, 1], [16, [1]], [16, 4]]\n", "line 3: nesting depth 6 exceeds the maximum of 5"},
		{"arrays", head + "polygon = " + strings.Repeat("[", deep) + strings.Repeat("]", deep) + "\n",
			"line 3: nesting depth 6 exceeds the maximum of 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("r.toml", []byte(tc.in))
			require.Error(t, err)
			assert.Equal(t, "regions: r.toml: "+tc.want, err.Error())
		})
	}
}

// TestLoadSizeLimit: a regions file over 4 MiB is refused, naming the file and the limit, even
// when it is valid (the shipped example padded with a long comment); the example itself, at the
// schema's deepest nesting, loads.
func TestLoadSizeLimit(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "regions.toml"))
	require.NoError(t, err)
	_, err = Parse("regions.toml", good)
	require.NoError(t, err)

	big := filepath.Join(t.TempDir(), "big.toml")
	require.NoError(t, os.WriteFile(big, append([]byte("# "+strings.Repeat("x", 4<<20)+"\n"), good...), 0o644))
	_, err = Load(big)
	require.Error(t, err)
	assert.Equal(t, "regions: "+big+": larger than the limit of 4 MiB (4194304 bytes)", err.Error())
}
