package capabilities

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTopologyEstimates: keys whose trailing comment is "# estimate" are listed by their dotted
// paths; other comments, commented-out keys and a "#" inside a string are not tags.
func TestTopologyEstimates(t *testing.T) {
	text := `n_nodes = 1
n_ranks = 8                 # NCCL log line 4
min_comp_cap = 90           # estimate
max_comp_cap = 90           # estimate
cpu_arch = "x86"            # estimate
cpu_vendor = "intel"        # reference, not an estimate
comm_n_channels = 32
max_local_ranks = 8
# nvs_count = 4             # estimate

[env]
NCCL_PROTO = "LL128"
NCCL_THREAD_THRESHOLDS = "1 # estimate"

[graphs.ring]
n_channels = 16
latency_inter = 0.0         #   estimate   
same_channels = true
`
	assert.Equal(t, []string{"cpu_arch", "graphs.ring.latency_inter", "max_comp_cap", "min_comp_cap"}, TopologyEstimates([]byte(text)))
	path := filepath.Join(t.TempDir(), "t.toml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	topo, est, err := LoadTopologyEstimates(path)
	require.NoError(t, err)
	assert.Equal(t, 8, topo.NRanks)
	assert.Len(t, est, 4)
	_, _, err = LoadTopologyEstimates(filepath.Join(t.TempDir(), "missing.toml"))
	assert.ErrorContains(t, err, "no such file")
}
