package tables

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nestedInline is n inline tables, each the value of key a, around 1: {a = {a = ... 1}}.
func nestedInline(n int) string {
	return strings.Repeat("{a = ", n) + "1" + strings.Repeat("}", n)
}

// TestDecodeNestingLimit: a table or overlay nested deeper than the schema (5 levels:
// corrections.cell[i].factors[j]) is refused before the TOML decoder sees it, with the file, the
// line and the depth; 2,000 nested inline tables took the decoder 0.8 s and 470 MB before.
func TestDecodeNestingLimit(t *testing.T) {
	const deep = 2000
	for _, tc := range []struct {
		name, in, want string
	}{
		// node(1).x(2), then a(3) a(4) a(5) a(6): the sixth level is on line 3.
		{"inline tables", "[node]\ngpu = \"g\"\nx = " + nestedInline(deep) + "\n",
			"line 3: nesting depth 6 exceeds the maximum of 5"},
		// A dotted key of 2,000 parts: its sixth part is on line 2.
		{"dotted key", "# deep\n" + strings.Repeat("a.", deep) + "b = 1\n",
			"line 2: nesting depth 6 exceeds the maximum of 5"},
		// A table header of 2,000 parts.
		{"table header", "[" + strings.Repeat("a.", deep) + "b]\n",
			"line 1: nesting depth 6 exceeds the maximum of 5"},
		// constants(1).ll_max_bws(2), then one level per '[': the fourth '[' is the sixth level.
		{"arrays", "[constants]\nll_max_bws = " + strings.Repeat("[", deep) + strings.Repeat("]", deep) + "\n",
			"line 2: nesting depth 6 exceeds the maximum of 5"},
		// [[a]] is a(1) and its element (2); [a.b.c] under it is b(3) c(4); d.e(5, 6).
		{"array of tables", "[[a]]\n[a.b.c]\nd.e = 1\n", "line 3: nesting depth 6 exceeds the maximum of 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("deep.toml", []byte(tc.in))
			require.Error(t, err)
			assert.Equal(t, "tables: deep.toml: "+tc.want, err.Error())

			base, err := Load("h100")
			require.NoError(t, err)
			_, err = ApplyOverlay(base, "deep.fit.toml", []byte(tc.in))
			require.Error(t, err)
			assert.Equal(t, "tables: deep.fit.toml: "+tc.want, err.Error())
		})
	}
}

// TestDecodeNestingAtTheSchemaMaximum: testdata/good/full.toml nests as deep as the schema does
// ([constants.hw_latencies.net] tree = [...], [[corrections.cell]] factors = [...]: 5 levels) and
// decodes; one more level in it is refused.
func TestDecodeNestingAtTheSchemaMaximum(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "good", "full.toml"))
	require.NoError(t, err)
	_, err = Decode("full.toml", data)
	require.NoError(t, err)

	const row = "factors = [1.0, 1.0, 0.9]       # measured"
	require.Contains(t, string(data), row)
	line := 1 + strings.Count(string(data[:strings.Index(string(data), row)]), "\n")
	require.Equal(t, 71, line, "the row is on line 71 of full.toml")
	deeper := strings.Replace(string(data), row, "factors = [[1.0], 1.0, 0.9]", 1)
	_, err = Decode("full.toml", []byte(deeper))
	require.Error(t, err)
	assert.Equal(t, "tables: full.toml: line 71: nesting depth 6 exceeds the maximum of 5", err.Error())
}

// TestLoadFileSizeLimit: a table or overlay file over 4 MiB is refused, naming the file and the
// limit, even when it is valid TOML (here a valid table padded with a long comment).
func TestLoadFileSizeLimit(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "good", "minimal.toml"))
	require.NoError(t, err)
	pad := "# " + strings.Repeat("x", 4<<20) + "\n"
	dir := t.TempDir()

	big := filepath.Join(dir, "big.toml")
	require.NoError(t, os.WriteFile(big, append([]byte(pad), good...), 0o644))
	_, err = LoadFile(big)
	require.Error(t, err)
	assert.Equal(t, "tables: "+big+": larger than the limit of 4 MiB (4194304 bytes)", err.Error())

	base := filepath.Join(dir, "base.toml")
	require.NoError(t, os.WriteFile(base, good, 0o644))
	_, err = LoadFile(base)
	require.NoError(t, err, "the table alone loads")
	over := filepath.Join(dir, "base.fit.toml")
	require.NoError(t, os.WriteFile(over, []byte(pad+"schema_version = 1\n[node]\nnvs_count = 2\n"), 0o644))
	_, err = LoadFile(base)
	require.Error(t, err)
	assert.Equal(t, "tables: "+over+": larger than the limit of 4 MiB (4194304 bytes)", err.Error())

	_, err = Decode("big.toml", append([]byte(pad), good...))
	require.Error(t, err)
	assert.Equal(t, "tables: big.toml: larger than the limit of 4 MiB (4194304 bytes)", err.Error())
}
