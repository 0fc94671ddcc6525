package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExplainFabric: --fabric reaches the model and the output names it. efa-p4d has 4 NICs of
// 100 Gb/s = 12.5 GB/s; h100's 8-channel ring at 16 nodes (128 ranks) gets bw_inter
// 12.5 x 4 / 8 = 6.25, so Ring AllReduce Simple: busBw 8 x 6.25 = 50, algBw 50 x 128/254 (by hand,
// reference §2). Without --fabric the table's own 12.5 gives twice that.
func TestExplainFabric(t *testing.T) {
	ringSimple := func(m map[string]any) float64 {
		for _, c := range m["menu"].([]any) {
			cell := c.(map[string]any)
			if cell["algo"] == "RING" && cell["proto"] == "SIMPLE" {
				return cell["bw_gbps"].(float64)
			}
		}
		t.Fatal("no RING/SIMPLE cell")
		return 0
	}
	m := explainJSON(t, "--node", "h100", "--nodes", "16", "--fabric", "efa-p4d", "--bytes", "1G")
	assert.InEpsilon(t, 50.0*128/254, ringSimple(m), 1e-5)
	assert.Equal(t, map[string]any{"name": "efa-p4d", "file": "efa-p4d.toml", "applied": true}, m["fabric"])
	assert.Equal(t, "node h100 x16 fabric efa-p4d", m["query"].(map[string]any)["topology"])
	base := explainJSON(t, "--node", "h100", "--nodes", "16", "--bytes", "1G")
	assert.InEpsilon(t, 100.0*128/254, ringSimple(base), 1e-5)
	assert.Nil(t, base["fabric"])

	one := explainJSON(t, "--node", "h100", "--nodes", "1", "--fabric", "efa-p4d", "--bytes", "1G")
	assert.Equal(t, false, one["fabric"].(map[string]any)["applied"])

	out, err := runCLI(t, "", "explain", "--node", "h100", "--nodes", "16", "--fabric", "efa-p4d", "--bytes", "1G")
	require.NoError(t, err)
	assert.Contains(t, out, "fabric: efa-p4d.toml: inter-node")
}

// TestFabricFlagErrors: a bad --fabric is a usage error naming the fabric (file and key for a bad
// file); --fabric with --topology is refused.
func TestFabricFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "--node", "h100", "--nodes", "2", "--fabric", "nope", "--bytes", "1M"}, `no embedded fabric "nope"`},
		{[]string{"explain", "--node", "h100", "--nodes", "2", "--fabric", "../../tables/testdata/fabric/missing.toml", "--bytes", "1M"}, "missing.toml: line 1: fabric.nics_per_node: missing"},
		{[]string{"explain", "--topology", "../../tables/testdata/none.toml", "--fabric", "ib-ndr", "--bytes", "1M"}, "--fabric applies to --node or --table"},
		{[]string{"compile", "--node", "h100", "--fabric", "nope", "-o", t.TempDir() + "/t.bin"}, `no embedded fabric "nope"`},
		{[]string{"tables", "--fabric", "ib-ndr"}, "--fabric needs a node table NAME"},
	} {
		_, err := runCLI(t, "", tc.args...)
		require.Error(t, err, "%v", tc.args)
		assert.ErrorContains(t, err, tc.want)
		var ue usageError
		assert.ErrorAs(t, err, &ue, "exit status 2")
	}
}

// TestTablesFabrics: planner tables lists the fabrics; --fabrics --json gives each one's derived
// device bandwidth (nic_gbps x nics_per_net_device / 8); NAME --fabric shows the composed graphs.
func TestTablesFabrics(t *testing.T) {
	out, err := runCLI(t, "", "tables")
	require.NoError(t, err)
	for _, name := range []string{"ib-ndr", "ib-hdr", "roce-400", "efa-p4d", "efa-p5", "efa-p5en", "slingshot-11", "gcp-tcpx", "gcp-tcpxo"} {
		assert.Contains(t, out, name)
	}
	out, err = runCLI(t, "", "tables", "--fabrics", "--json")
	require.NoError(t, err)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 9)
	byName := map[string]float64{}
	for _, r := range rows {
		byName[r["name"].(string)] = r["net_device_gbps"].(float64)
	}
	assert.Equal(t, 400.0/8, byName["ib-ndr"])
	assert.Equal(t, 100.0*4/8, byName["efa-p5"])
	assert.Equal(t, 200.0*2/8, byName["efa-p5en"])
	out, err = runCLI(t, "", "tables", "h100", "--fabric", "efa-p4d")
	require.NoError(t, err)
	assert.Contains(t, out, "fabric: efa-p4d.toml")
	assert.Contains(t, out, "bw 20/6.25")
	out, err = runCLI(t, "", "tables", "h100", "--fabric", "efa-p4d", "--json")
	require.NoError(t, err)
	var one map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &one))
	assert.Equal(t, "efa-p4d.toml", one["fabric"])
	assert.Contains(t, one["sources"].(map[string]any)["scale.4.graphs.ring.bw_inter"], "fabric efa-p4d.toml")
}

// TestCompileFabric: planner compile --fabric names the fabric on stdout; it changes the compiled
// table at 16 nodes (checksum) and leaves it byte for byte the same at 1 node.
func TestCompileFabric(t *testing.T) {
	dir := t.TempDir()
	out, err := runCLI(t, "", "compile", "--node", "h100", "--nodes", "16", "--fabric", "efa-p4d", "-o", dir+"/a.bin")
	require.NoError(t, err)
	assert.Contains(t, out, "fabric: efa-p4d.toml")
	base, err := runCLI(t, "", "compile", "--node", "h100", "--nodes", "16", "-o", dir+"/b.bin")
	require.NoError(t, err)
	assert.NotContains(t, base, "fabric:")
	sum := func(s string) string { _, rest, _ := strings.Cut(s, "checksum "); return strings.Fields(rest)[0] }
	assert.NotEqual(t, sum(base), sum(out), "the fabric changes the compiled 16-node block")
	one, err := runCLI(t, "", "compile", "--node", "h100", "--nodes", "1", "--fabric", "efa-p4d", "-o", dir+"/c.bin")
	require.NoError(t, err)
	one0, err := runCLI(t, "", "compile", "--node", "h100", "--nodes", "1", "-o", dir+"/c.bin")
	require.NoError(t, err)
	assert.Equal(t, sum(one0), sum(one), "1 node: the fabric changes nothing")
}
