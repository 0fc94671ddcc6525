package capabilities

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDecodeTopologyNestingLimit: a topology file nested more than one level deeper than its schema
// (3 levels: graphs.NAME.key) is refused before the TOML decoder sees it, with the file, the line
// and the depth; one level too deep gets the schema's error naming the key.
func TestDecodeTopologyNestingLimit(t *testing.T) {
	const deep = 2000
	const base = "n_nodes = 1\nn_ranks = 2\nmin_comp_cap = 80\nmax_comp_cap = 80\ncpu_arch = \"x86\"\n" +
		"cpu_vendor = \"amd\"\ncomm_n_channels = 2\nmax_local_ranks = 2\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		// env(1), then a(2) a(3) a(4) a(5): the fifth level is on line 2.
		{"inline tables", "n_nodes = 1\nenv = " + strings.Repeat("{a = ", deep) + "1" + strings.Repeat("}", deep) + "\n",
			"line 2: nesting depth 5 exceeds the maximum of 4"},
		{"dotted key", strings.Repeat("a.", deep) + "b = 1\n", "line 1: nesting depth 5 exceeds the maximum of 4"},
		{"table header", "n_nodes = 1\n\n[" + strings.Repeat("graphs.", deep) + "ring]\n",
			"line 3: nesting depth 5 exceeds the maximum of 4"},
		// collnet_support(1), its elements (2), then one level per '['.
		{"arrays", "collnet_support = " + strings.Repeat("[", deep) + strings.Repeat("]", deep) + "\n",
			"line 1: nesting depth 5 exceeds the maximum of 4"},
		// graphs(1).collnet_chain(2).n_channels(3) is the schema's deepest: two arrays under it are
		// two levels too deep; one is left to the schema's check.
		{"two levels too deep", "graphs.collnet_chain = { n_channels = [[3]] }\n",
			"line 1: nesting depth 5 exceeds the maximum of 4"},
		{"one level too deep", base + "graphs.collnet_chain = { n_channels = [3] }\n",
			"graphs.collnet_chain.n_channels: want an integer, got array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeTopology("deep.toml", []byte(tc.in))
			require.Error(t, err)
			assert.Equal(t, "capabilities: deep.toml: "+tc.want, err.Error())
		})
	}
}

// TestLoadTopologySizeLimit: a topology file over 4 MiB is refused, naming the file and the limit,
// even when it is valid TOML (a valid topology padded with a long comment).
func TestLoadTopologySizeLimit(t *testing.T) {
	good, err := os.ReadFile(filepath.Join(topoDir, "full.toml"))
	require.NoError(t, err)
	_, err = DecodeTopology("full.toml", good)
	require.NoError(t, err, "full.toml nests as deep as the schema (graphs.collnet_chain = {n_channels = 3})")

	big := filepath.Join(t.TempDir(), "big.toml")
	require.NoError(t, os.WriteFile(big, append([]byte("# "+strings.Repeat("x", 4<<20)+"\n"), good...), 0o644))
	_, err = LoadTopology(big)
	require.Error(t, err)
	assert.Equal(t, "capabilities: "+big+": larger than the limit of 4 MiB (4194304 bytes)", err.Error())
}
