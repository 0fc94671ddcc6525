package calibrate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func nestedInline(n int) string {
	return strings.Repeat("{a = ", n) + "1" + strings.Repeat("}", n)
}

// TestManifestLimits: a manifest nested more than one level deeper than its schema (3 levels:
// sweep[i].key) is a Problem naming the file and the line (one level too deep gets the schema's
// error naming the key); one over 4 MiB is refused naming the file and the limit.
func TestManifestLimits(t *testing.T) {
	const deep = 2000
	for _, tc := range []struct {
		name, in, want string
	}{
		// sweep(1), its element (2), note(3), then a(4) a(5) on line 3.
		{"inline tables", "[[sweep]]\nfile = \"a.txt\"\nnote = " + nestedInline(deep) + "\n", "m.toml:3: nesting depth 5 exceeds the maximum of 4"},
		{"dotted key", "[[sweep]]\n" + strings.Repeat("a.", deep) + "b = 1\n", "m.toml:2: nesting depth 5 exceeds the maximum of 4"},
		{"arrays", "sweep = " + strings.Repeat("[", deep) + strings.Repeat("]", deep) + "\n", "m.toml:1: nesting depth 5 exceeds the maximum of 4"},
		{"two levels too deep", "sweep = [{file = \"a.txt\", note = [[\"x\"]]}]\n", "m.toml:1: nesting depth 5 exceeds the maximum of 4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeManifest("m.toml", []byte(tc.in))
			require.Error(t, err)
			assert.Equal(t, tc.want, err.Error())
			var p Problem
			assert.True(t, errors.As(err, &p), "a Problem, got %T", err)
		})
	}
	_, err := DecodeManifest("m.toml", []byte("sweep = [{file = \"a.txt\", note = [\"x\"]}]\n"))
	require.Error(t, err)
	assert.Equal(t, "m.toml:1: note must be a string, got an array", err.Error(), "one level too deep")

	m, err := DecodeManifest("m.toml", []byte("sweep = [{file = \"a.txt\", note = \"x\"}]\n"))
	require.NoError(t, err, "three levels, the schema's deepest")
	assert.Equal(t, "x", m.Sweeps[0].Note)

	dir := t.TempDir()
	big := filepath.Join(dir, ManifestName)
	require.NoError(t, os.WriteFile(big, []byte("# "+strings.Repeat("x", 4<<20)+"\n[[sweep]]\nfile = \"a.txt\"\n"), 0o644))
	want := "calibrate: " + big + ": larger than the limit of 4 MiB (4194304 bytes)"
	_, err = LoadManifest(big)
	require.Error(t, err)
	assert.Equal(t, want, err.Error())
	_, _, err = LoadSweeps(dir)
	require.Error(t, err)
	assert.Equal(t, want, err.Error())
}

// TestOverlayReadersNestingLimit: the readers of an existing overlay's text refuse nesting deeper
// than a node table's schema (5 levels) with the file, the line and the depth.
func TestOverlayReadersNestingLimit(t *testing.T) {
	in := "# an overlay\n[[fit.cell]]\nx = " + nestedInline(2000) + "\n"
	// fit(1), its element (2), x(3), then a(4) a(5) a(6) on line 3.
	const want = "calibrate: o.fit.toml: line 3: nesting depth 6 exceeds the maximum of 5"
	_, err := KeepFromOverlay("o.fit.toml", []byte(in), 1, 8, 8)
	require.Error(t, err)
	assert.Equal(t, want, err.Error())
	_, _, err = OverlayCorrections("o.fit.toml", []byte(in), 1, 8)
	require.Error(t, err)
	assert.Equal(t, want, err.Error())
}
