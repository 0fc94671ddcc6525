package tables

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFabricsShipped: the fabrics are all embedded, each loads strictly, and every value of
// [fabric] (number or word) carries a non-empty source comment on its line. The check reads the
// raw TOML lines, independently of the loader's scanner.
func TestFabricsShipped(t *testing.T) {
	want := []string{"efa-p4d", "efa-p5", "efa-p5en", "gcp-tcpx", "gcp-tcpxo", "ib-hdr", "ib-ndr", "roce-400", "slingshot-11"}
	assert.Equal(t, want, FabricNames())
	keyLine := regexp.MustCompile(`^\s*([a-z_0-9]+)\s*=\s*(.*)$`)
	for _, name := range FabricNames() {
		t.Run(name, func(t *testing.T) {
			f, err := LoadFabric(name)
			require.NoError(t, err)
			assert.Equal(t, name, f.Name)
			assert.NotEmpty(t, f.Provenance.Sources, "provenance.sources")
			data, err := embeddedFabrics.ReadFile(fabricDir + "/" + name + ".toml")
			require.NoError(t, err)
			section := ""
			seen := 0
			for i, line := range strings.Split(string(data), "\n") {
				tl := strings.TrimSpace(line)
				if strings.HasPrefix(tl, "[") {
					section = strings.Trim(tl, "[]")
					continue
				}
				m := keyLine.FindStringSubmatch(line)
				if m == nil || section != "fabric" || m[1] == "description" {
					continue
				}
				seen++
				code, comment, ok := strings.Cut(m[2], "#")
				assert.True(t, ok && strings.TrimSpace(comment) != "", "%s.toml:%d: %s = %s has no source comment", name, i+1, m[1], strings.TrimSpace(code))
			}
			assert.Equal(t, len(fabricRequired)-1, seen, "valued keys of [fabric] checked")
		})
	}
}

// TestFabricErrors: bad fabric files are errors naming the file, the line and the key.
func TestFabricErrors(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"unknown-key.toml", []string{"unknown-key.toml: line 9: fabric.nic_speed: unknown key"}},
		{"missing.toml", []string{"missing.toml: line 1: fabric.nics_per_node: missing"}},
		{"wrong-type.toml", []string{"wrong-type.toml", `line 3 (last key "fabric.nic_gbps")`}},
		{"bad-value.toml", []string{
			"bad-value.toml: line 5: fabric.nics_per_net_device: 3 does not divide nics_per_node 8",
			`bad-value.toml: line 6: fabric.type_inter: "XYZ" is not one of`,
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			_, err := LoadFabricFile(filepath.Join("testdata", "fabric", tc.file))
			require.Error(t, err)
			for _, w := range tc.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	_, err := LoadFabric("no-such-fabric")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ib-ndr")
}

// TestWithFabric: efa-p4d (4 x 100 Gbps EFA, one net device per NIC) on the h100 table. By hand:
// a device is 100 Gb/s = 12.5 GB/s and there are 4, so an 8-channel graph gets at most
// 12.5 x 4 / 8 = 6.25 GB/s per channel, below h100's bw_intra (20 ring/tree, 40 nvls). ib-ndr (8
// devices of 400/8 = 50 GB/s) caps at min(bw_intra, 50): 20 for ring and 40 for nvls. Scale 1 keeps
// h100's own values. Every h100 multi-node graph has 8 channels.
func TestWithFabric(t *testing.T) {
	n, err := LoadBase("h100")
	require.NoError(t, err)
	for _, tc := range []struct {
		fabric              string
		ring, tree, nvls    float64
		typeInter, srcSpell string
	}{
		{"efa-p4d", 6.25, 6.25, 6.25, "PIX", "fabric efa-p4d.toml"},
		{"ib-ndr", 20, 20, 40, "PIX", "fabric ib-ndr.toml"},
		// 4 devices of 200/8 = 25 GB/s shared by 8 channels: 25 x 4 / 8 = 12.5 per channel.
		{"slingshot-11", 12.5, 12.5, 12.5, "PHB", "fabric slingshot-11.toml"},
	} {
		t.Run(tc.fabric, func(t *testing.T) {
			f, err := LoadFabric(tc.fabric)
			require.NoError(t, err)
			c, err := WithFabric(n, f)
			require.NoError(t, err)
			assert.Same(t, f, c.Fabric)
			for _, key := range []string{"2", "4"} {
				g := c.Scale[key].Graphs
				assert.InDelta(t, tc.ring, g["ring"].BwInter, 1e-12, "scale %s ring", key)
				assert.InDelta(t, tc.tree, g["tree"].BwInter, 1e-12, "scale %s tree", key)
				assert.InDelta(t, tc.nvls, g["nvls"].BwInter, 1e-12, "scale %s nvls", key)
				assert.Equal(t, tc.typeInter, g["ring"].TypeInter)
				assert.Equal(t, n.Scale[key].Graphs["ring"].BwIntra, g["ring"].BwIntra, "intra-node values stay the node table's")
				assert.Equal(t, n.Scale[key].Graphs["ring"].NChannels, g["ring"].NChannels)
				assert.True(t, strings.HasPrefix(c.Sources["scale."+key+".graphs.ring.bw_inter"], tc.srcSpell))
			}
			assert.Equal(t, n.Scale["1"], c.Scale["1"], "scale 1 untouched")
			assert.Equal(t, 12.5, n.Scale["4"].Graphs["ring"].BwInter, "the base table is not modified")
		})
	}
}
