package tables

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var wantNames = []string{"a100", "b200", "cpu", "cpu-net", "gh200", "gh200-4", "h100", "h100-4", "h200", "l40s-4", "l40s-pcie", "v100"}

func TestNamesListsBaseTables(t *testing.T) {
	assert.Equal(t, wantNames, Names())
}

func TestEveryEmbeddedTableLoads(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			n, err := Load(name)
			require.NoError(t, err)
			assert.Equal(t, name, n.Name)
			assert.Equal(t, name+".toml", n.File)
			assert.NotEmpty(t, n.Node.GPU)
			assert.NotEmpty(t, n.Provenance.Sources, "provenance.sources")
			for _, nodes := range []int{1, 2, 4} {
				key, s, err := n.ScaleFor(nodes)
				require.NoError(t, err, "scale for %d nodes", nodes)
				assert.Equal(t, fmt.Sprint(nodes), key)
				assert.Contains(t, s.Graphs, "ring", "scale.%s has a ring graph", key)
				assert.Contains(t, s.Graphs, "tree", "scale.%s has a tree graph", key)
				if !n.Node.NVLSSupport && (n.Emulation == nil || !n.Emulation.MulticastSwitch) {
					assert.NotContains(t, s.Graphs, "nvls", "no NVLS graph without NVLS support or an emulated multicast switch")
				}
			}
		})
	}
}

// allowedTag reports whether a source tag is one the project accepts ("predicted by the fit across
// N, M nodes": a cell calibrate --predict-nodes wrote at a node count nobody measured).
func allowedTag(tag string) bool {
	if tag == "estimate" {
		return true
	}
	for _, p := range []string{"reference §", "seed 000", "seed 001", "data/seed", "NCCL constant", "NCCL default", "vendor spec", "measured", "predicted by the fit across"} {
		if strings.HasPrefix(tag, p) {
			return true
		}
	}
	return false
}

// numericLeaves walks a decoded TOML tree and lists the dotted paths of its numeric values (numbers
// and arrays of numbers), spelling array-of-tables elements "[i]" as the loader does.
func numericLeaves(prefix string, v any, out map[string]bool) {
	join := func(k string) string {
		if prefix == "" {
			return k
		}
		return prefix + "." + k
	}
	switch x := v.(type) {
	case map[string]any:
		for k, vv := range x {
			numericLeaves(join(k), vv, out)
		}
	case []map[string]any:
		for i, m := range x {
			numericLeaves(fmt.Sprintf("%s[%d]", prefix, i), m, out)
		}
	case int64, float64:
		out[prefix] = true
	case []any:
		if len(x) > 0 && allNumbers(x) {
			out[prefix] = true
		}
	}
}

func allNumbers(xs []any) bool {
	for _, x := range xs {
		switch y := x.(type) {
		case int64, float64:
		case []any:
			if !allNumbers(y) {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func TestSourceTagCoverage(t *testing.T) {
	files, err := fs.Glob(embedded, "*.toml")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, file := range files {
		t.Run(file, func(t *testing.T) {
			data, err := embedded.ReadFile(file)
			require.NoError(t, err)
			var tree map[string]any
			_, err = toml.Decode(string(data), &tree)
			require.NoError(t, err)
			leaves := map[string]bool{}
			delete(tree, versionKey) // an overlay's format version, not a number with a source
			numericLeaves("", tree, leaves)
			require.NotEmpty(t, leaves)

			sc := scanSource(data)
			for p := range leaves {
				tag, ok := sc.sources[p]
				if assert.True(t, ok, "%s: numeric key %s has no source tag", file, p) {
					assert.True(t, allowedTag(tag), "%s: %s has tag %q", file, p, tag)
				}
			}
			for p, tag := range sc.sources {
				assert.True(t, leaves[p], "%s: tag %q on %s, which is not a numeric key", file, tag, p)
			}
		})
	}
}

func TestH100Scale1IsReferenceS1(t *testing.T) {
	n, err := Load("h100")
	require.NoError(t, err)

	// reference/nccl-costmodel.md §13 S1: 1 node x 8 GPUs, cc 90, NVSwitch; Tree/Ring nCh 16,
	// bwIntra = bwInter = 20, typeIntra NVL; NVLS nCh 8, bw 40/40; comm->nChannels 32,
	// nvlsChannels 16. Shared settings: maxTreePattern 1, collnetEnable 0, x86 Intel,
	// latencyInter 0, sameChannels 1, typeInter PIX. nvs_count 4 as in design/topology-example.toml.
	assert.Equal(t, 8, n.Node.GPUsPerNode)
	assert.Equal(t, 90, n.Node.ComputeCapability)
	assert.Equal(t, "x86", n.Node.CPUArch)
	assert.Equal(t, "intel", n.Node.CPUVendor)
	assert.Equal(t, 4, n.Node.NVSCount)
	assert.True(t, n.Node.NVLSSupport)
	assert.Equal(t, 1, n.Node.MaxTreePattern)
	assert.False(t, n.Node.CollNetEnable)
	assert.Nil(t, n.Constants, "NCCL's default constants")
	assert.Nil(t, n.Corrections, "NCCL's default corrections")

	_, s, err := n.ScaleFor(1)
	require.NoError(t, err)
	treeRing := Graph{NChannels: 16, BwIntra: 20, BwInter: 20, TypeIntra: "NVL", TypeInter: "PIX", LatencyInter: 0, SameChannels: true}
	want := Scale{
		CommNChannels: 32,
		NVLSChannels:  16,
		Graphs: map[string]Graph{
			"tree": treeRing,
			"ring": treeRing,
			"nvls": {NChannels: 8, BwIntra: 40, BwInter: 40, TypeIntra: "NVL", TypeInter: "PIX", LatencyInter: 0, SameChannels: true},
		},
	}
	assert.Equal(t, want, s)
	for p, tag := range n.Sources {
		if strings.HasPrefix(p, "scale.1.") {
			assert.Equal(t, "reference §13 S1", tag, p)
		}
	}
}

func TestH100Scale4IsReferenceS2(t *testing.T) {
	n, err := Load("h100")
	require.NoError(t, err)
	// §13 S2: 4 nodes x 8 GPUs, cc 90; Tree/Ring nCh 8, bwIntra 20, bwInter 12.5; NVLS nCh 8,
	// bwIntra 40, bwInter 25; comm->nChannels 16, nvlsChannels 16; shared settings as S1.
	for _, nodes := range []int{3, 4, 32} {
		key, s, err := n.ScaleFor(nodes)
		require.NoError(t, err)
		assert.Equal(t, "4", key)
		treeRing := Graph{NChannels: 8, BwIntra: 20, BwInter: 12.5, TypeIntra: "NVL", TypeInter: "PIX", SameChannels: true}
		assert.Equal(t, Scale{
			CommNChannels: 16,
			NVLSChannels:  16,
			Graphs: map[string]Graph{
				"tree": treeRing,
				"ring": treeRing,
				"nvls": {NChannels: 8, BwIntra: 40, BwInter: 25, TypeIntra: "NVL", TypeInter: "PIX", SameChannels: true},
			},
		}, s)
	}
	for _, p := range n.Estimated() {
		assert.True(t, strings.HasPrefix(p, "scale.2.") || p == "node.cudart_version", "h100 estimates only scale 2 and the CUDA version, not %s", p)
	}
	assert.Contains(t, n.Estimated(), "scale.2.graphs.ring.bw_inter")
}

func TestTableFacts(t *testing.T) {
	cases := []struct {
		name        string
		cc          int
		arch, vend  string
		nvs         int
		nvls        bool
		nvlsCh      map[string]int
		typeIntra1  string
		gpusPerNode int
		overlay     string // the embedded fitted overlay, if any
	}{
		{name: "h100", cc: 90, arch: "x86", vend: "intel", nvs: 4, nvls: true, nvlsCh: map[string]int{"1": 16, "2": 16, "4": 16}, typeIntra1: "NVL", gpusPerNode: 8},
		// 4 GPUs of the HGX H100 board: NCCL 2.29.2's log says 16 NVLS channels (h100-4.toml).
		{name: "h100-4", cc: 90, arch: "x86", vend: "intel", nvs: 4, nvls: true, nvlsCh: map[string]int{"1": 16, "2": 16, "4": 16}, typeIntra1: "NVL", gpusPerNode: 4},
		{name: "h200", cc: 90, arch: "x86", vend: "intel", nvs: 4, nvls: true, nvlsCh: map[string]int{"1": 16, "2": 16, "4": 16}, typeIntra1: "NVL", gpusPerNode: 8},
		{name: "a100", cc: 80, arch: "x86", vend: "amd", nvs: 6, nvlsCh: map[string]int{"1": 0, "2": 0, "4": 0}, typeIntra1: "NVL", gpusPerNode: 8},
		{name: "v100", cc: 70, arch: "x86", vend: "intel", nvs: 0, nvlsCh: map[string]int{"1": 0, "2": 0, "4": 0}, typeIntra1: "NVL", gpusPerNode: 8},
		{name: "l40s-pcie", cc: 89, arch: "x86", vend: "intel", nvs: 0, nvlsCh: map[string]int{"1": 0, "2": 0, "4": 0}, typeIntra1: "SYS", gpusPerNode: 8},
		{name: "gh200", cc: 90, arch: "arm", vend: "undefined", nvs: 0, nvlsCh: map[string]int{"1": 0, "2": 0, "4": 0}, typeIntra1: "LOC", gpusPerNode: 1},
		// 4 superchips all-to-all over NVLink 4, no NVSwitch; 4 L40S under one socket's PCIe switches (§13 S3's PXB).
		{name: "gh200-4", cc: 90, arch: "arm", vend: "undefined", nvs: 0, nvlsCh: map[string]int{"1": 0, "2": 0, "4": 0}, typeIntra1: "NVL", gpusPerNode: 4},
		{name: "l40s-4", cc: 89, arch: "x86", vend: "intel", nvs: 0, nvlsCh: map[string]int{"1": 0, "2": 0, "4": 0}, typeIntra1: "PXB", gpusPerNode: 4},
		// §0.1 / addendum 3: SM100 nvlsChannels 24 on one node, 32 multi-node (24 for > 2 nodes when nicBw >= 48).
		{name: "b200", cc: 100, arch: "x86", vend: "intel", nvs: 2, nvls: true, nvlsCh: map[string]int{"1": 24, "2": 32, "4": 24}, typeIntra1: "NVL", gpusPerNode: 8},
		// cpu: the host has no NVSwitch (nvs 0, nvls_support false); its NVLS channels are the
		// emulated switch's ([emulation] multicast_switch).
		{name: "cpu", cc: 60, arch: "x86", vend: "intel", nvs: 0, nvlsCh: map[string]int{"1": 1, "2": 1, "4": 1}, typeIntra1: "PHB", gpusPerNode: 2, overlay: "cpu.fit.toml"},
		// cpu-net: one CPU rank per emulated host, no switch of any kind.
		{name: "cpu-net", cc: 60, arch: "x86", vend: "intel", nvs: 0, nvlsCh: map[string]int{"1": 0, "2": 0, "4": 0}, typeIntra1: "PHB", gpusPerNode: 1, overlay: "cpu-net.fit.toml"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := Load(c.name)
			require.NoError(t, err)
			assert.Equal(t, c.gpusPerNode, n.Node.GPUsPerNode)
			assert.Equal(t, c.cc, n.Node.ComputeCapability)
			assert.Equal(t, c.arch, n.Node.CPUArch)
			assert.Equal(t, c.vend, n.Node.CPUVendor)
			assert.Equal(t, c.nvs, n.Node.NVSCount)
			assert.Equal(t, c.nvls, n.Node.NVLSSupport)
			for k, want := range c.nvlsCh {
				assert.Equal(t, want, n.Scale[k].NVLSChannels, "scale.%s.nvls_channels", k)
			}
			assert.Equal(t, c.typeIntra1, n.Scale["1"].Graphs["ring"].TypeIntra)
			assert.Equal(t, c.overlay, n.Overlay, "only cpu ships a fitted overlay (fitted on this project's host)")
			assert.False(t, n.Node.CollNetEnable, "no table assumes CollNet/SHARP")
			if n.Emulation != nil {
				assert.Equal(t, "cpu", c.name, "only the emulated cpu table declares [emulation]")
				assert.True(t, n.Emulation.ReducingNetwork, "the cpu table declares the engine's CollNet endpoint")
			}
			for k, s := range n.Scale {
				if n.Emulation != nil && n.Emulation.ReducingNetwork && k != "1" {
					assert.Contains(t, s.Graphs, "collnet_direct", k)
					assert.Contains(t, s.Graphs, "collnet_chain", k)
					continue
				}
				assert.NotContains(t, s.Graphs, "collnet_direct", k)
				assert.NotContains(t, s.Graphs, "collnet_chain", k)
			}
		})
	}
}

func TestScaleFor(t *testing.T) {
	n, err := Load("h100")
	require.NoError(t, err)
	cases := []struct {
		nodes   int
		key     string
		wantErr string
	}{
		{nodes: 1, key: "1"},
		{nodes: 2, key: "2"},
		{nodes: 3, key: "4"}, // NCCL's index2 = nNodes <= 2 ? nNodes-1 : 2
		{nodes: 4, key: "4"},
		{nodes: 1000, key: "4"},
		{nodes: 0, wantErr: "node count 0 < 1"},
		{nodes: -3, wantErr: "node count -3 < 1"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.nodes), func(t *testing.T) {
			key, s, err := n.ScaleFor(c.nodes)
			if c.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.key, key)
			assert.Equal(t, n.Scale[c.key], s)
		})
	}

	data, err := os.ReadFile("testdata/good/minimal.toml")
	require.NoError(t, err)
	m, err := Decode("minimal.toml", data)
	require.NoError(t, err)
	key, _, err := m.ScaleFor(2)
	require.Error(t, err)
	assert.Equal(t, "2", key)
	assert.Contains(t, err.Error(), "minimal: no [scale.2] for 2 nodes")
}

func TestDecodeBadInputs(t *testing.T) {
	cases := []struct {
		file string
		want []string // substrings of the error, besides the file name
	}{
		{"unknown_key.toml", []string{"line 13: node.gpu_count: unknown key"}},
		{"unknown_table.toml", []string{"line 32: topology: unknown key"}},
		{"unknown_graph_key.toml", []string{"line 24: scale.1.graphs.tree.pattern: unknown key"}},
		{"mistyped_int.toml", []string{"line 4", `"node.gpus_per_node"`, "type string; destination has type integer"}},
		{"mistyped_float_int.toml", []string{"line 15", `"scale.1.comm_n_channels"`, "type float64; destination has type integer"}},
		{"mistyped_bool.toml", []string{"line 9", `"node.nvls_support"`, "destination has type boolean"}},
		{"bad_constants_type.toml", []string{"line 33", `"constants.ll_max_bws"`, "incompatible types"}},
		{"malformed.toml", []string{"line 7", "strings cannot contain newlines"}},
		{"malformed_header.toml", []string{"line 26", "table name"}},
		{"duplicate_key.toml", []string{"line 9", "already been defined"}},
		{"bad_cpu_arch.toml", []string{"line 6: node.cpu_arch", `"sparc" is not one of x86 | power | arm`}},
		{"bad_cpu_vendor.toml", []string{"line 7: node.cpu_vendor", `"Intel" is not one of`}},
		{"bad_net_device.toml", []string{"line 10: node.net_device_type", `"gpu"`}},
		{"bad_path_type.toml", []string{"line 22: scale.1.graphs.tree.type_intra", `"NVLINK" is not one of LOC | NVL`}},
		{"bad_scale_key.toml", []string{"line 32: scale.3", `scale key "3" is not one of 1 | 2 | 4`}},
		{"bad_graph_name.toml", []string{"line 32: scale.1.graphs.nvls_tree", `graph "nvls_tree"`}},
		{"bad_n_channels.toml", []string{"line 19: scale.1.graphs.tree.n_channels: 65 out of range 0..64", "line 26: scale.1.graphs.ring.n_channels"}},
		{"bad_bw.toml", []string{"line 21: scale.1.graphs.tree.bw_inter: -1 must be finite and >= 0"}},
		{"bad_bw_nan.toml", []string{"line 20: scale.1.graphs.tree.bw_intra: NaN"}},
		{"bad_gpus_per_node.toml", []string{"line 4: node.gpus_per_node: 0 must be >= 1"}},
		{"bad_cc.toml", []string{"line 5: node.compute_capability: 900 out of range 30..200"}},
		{"bad_tree_pattern.toml", []string{"line 12: node.max_tree_pattern: 4 out of range 1..3"}},
		{"bad_nvls_no_switch.toml", []string{"line 9: node.nvls_support: NVLS needs an NVSwitch"}},
		{"bad_tree_ring_channels.toml", []string{"line 19: scale.1.graphs.tree.n_channels: 8 differs from ring's 16"}},
		{"no_scale.toml", []string{"scale: at least one of"}},
		{"bad_gpu_empty.toml", []string{"line 3: node.gpu: must name"}},
		{"bad_nvls_cc.toml", []string{"line 9: node.nvls_support: NVLS needs compute capability >= 90 (have 80)"}},
		{"bad_nvls_channels.toml", []string{"line 16: scale.1.nvls_channels: 16 but node.nvls_support is false"}},
		{"bad_comm_channels.toml", []string{"line 15: scale.1.comm_n_channels: 0 out of range 1..64"}},
		// [emulation] only on an emulated node (gpu = "cpu"): each key a GPU table sets is named at
		// its line, the table header when it sets none.
		{"bad_emulation_gpu.toml", []string{
			`line 33: emulation.multicast_switch: only an emulated node (node.gpu = "cpu", collplan's CPU engine) declares what it emulates; node.gpu is "test-gpu"`,
			"line 34: emulation.nvls_efficiency: only an emulated node"}},
		{"bad_emulation_gpu_empty.toml", []string{`line 32: emulation: only an emulated node (node.gpu = "cpu"`}},
		{"bad_emulation_no_efficiency.toml", []string{"line 32: emulation.nvls_efficiency: 0: emulation.multicast_switch needs 0 < nvls_efficiency <= 1"}},
		{"bad_emulation_efficiency.toml", []string{"line 34: emulation.nvls_efficiency: 1.5: emulation.multicast_switch needs 0 < nvls_efficiency <= 1"}},
		{"bad_emulation_keys.toml", []string{
			"line 33: emulation.nvls_efficiency: 0.5 without emulation.multicast_switch = true",
			`line 34: emulation.reducing_network: needs node.collnet_support: the "op:dtype" pairs the emulated network reduces`}},
		{"bad_emulation_nvls_channels.toml", []string{"line 16: scale.1.nvls_channels: 1 but node.nvls_support is false and no emulation.multicast_switch"}},
		{"bad_negative_counts.toml", []string{
			"line 10: node.cudart_version: -1 must be >= 0",
			"line 12: node.nvs_count: -2 must be >= 0",
			"line 13: node.collnet_heads_num: -1",
			"line 14: node.collnet_direct_n_heads: -1",
			`line 15: node.collnet_support[0]: "sum" is not "op:dtype"`,
			`line 15: node.collnet_support[2]: "max: int8"`,
		}},
		{"bad_constants_rows.toml", []string{"line 33: constants.ll_max_bws: want 4 rows of 3, got 3 rows"}},
		{"bad_constants_cols.toml", []string{"line 33: constants.per_ch_max_tree_bws[0]: want 3 values, got 2"}},
		{"bad_constants_row.toml", []string{"line 33: constants.base_latencies.tree: want 3 values, got 2"}},
		{"bad_constants_algo.toml", []string{"line 33: constants.base_latencies.nvlstree", `algorithm "nvlstree"`}},
		{"bad_constants_hw.toml", []string{"line 32: constants.hw_latencies.nvswitch", `hardware class "nvswitch"`}},
		{"bad_correction_names.toml", []string{
			"line 33: corrections.cell[0].coll", `"alltoall"`,
			"line 34: corrections.cell[0].algo", `"nvlstree"`,
			"line 35: corrections.cell[0].proto", `"LL" is not one of ll | ll128 | simple`,
		}},
		{"bad_correction_factors.toml", []string{
			"line 42: corrections.cell[1].factors: want 1..24 factors, got 25",
			"line 48: corrections.cell[2].factors[1]: 0 must be finite and > 0",
			"corrections.cell[2].factors[2]: +Inf",
			"corrections.cell[3]: duplicate cell allreduce/tree/ll (also corrections.cell[0])",
		}},
		// A row with a shape names both nodes and ranks_per_node; one cell may have a row per shape
		// and one without, but not two at one shape.
		{"bad_correction_shape.toml", []string{
			"corrections.cell[2]: duplicate cell allreduce/tree/ll at 2 x 8 (also corrections.cell[0])",
			"corrections.cell[3].ranks_per_node: 0 out of range",
			"corrections.cell[4].nodes: 0 out of range",
		}},
		{"bad_provenance.toml", []string{
			"line 33: provenance.fitted_from[0].file: must name the sweep file",
			"line 34: provenance.fitted_from[0].sha256",
			"line 41: provenance.fitted_from[1]: nodes 2, ranks_per_node 0: give both (>= 1), or neither",
			"line 37: provenance.residual.points: -1",
			"line 39: provenance.residual.max_rel: -0.5",
		}},
	}
	files, err := filepath.Glob("testdata/bad/*.toml")
	require.NoError(t, err)
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.file] = true
		t.Run(c.file, func(t *testing.T) {
			p := filepath.Join("testdata", "bad", c.file)
			data, err := os.ReadFile(p)
			require.NoError(t, err)
			n, err := Decode(p, data)
			require.Error(t, err)
			assert.Nil(t, n)
			msg := err.Error()
			assert.True(t, strings.HasPrefix(msg, "tables: "+p+": "), "error names the file: %s", msg)
			for _, w := range c.want {
				assert.Contains(t, msg, w)
			}
			for _, line := range strings.Split(msg, "\n") {
				assert.True(t, strings.HasPrefix(line, "tables: "+p+": "), "every joined error names the file: %s", line)
			}
		})
	}
	for _, f := range files {
		assert.True(t, covered[filepath.Base(f)], "testdata/bad/%s has no case", filepath.Base(f))
	}
}

func TestKeyErrorFields(t *testing.T) {
	p := filepath.Join("testdata", "bad", "unknown_key.toml")
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	_, err = Decode(p, data)
	var ke *KeyError
	require.True(t, errors.As(err, &ke), "%v", err)
	assert.Equal(t, KeyError{File: p, Line: 13, Key: "node.gpu_count", Msg: "unknown key"}, *ke)
	assert.Equal(t, "tables: f.toml: a.b: bad", (&KeyError{File: "f.toml", Key: "a.b", Msg: "bad"}).Error())
}

func TestDecodeFullSchemaAndSources(t *testing.T) {
	data, err := os.ReadFile("testdata/good/full.toml")
	require.NoError(t, err)
	n, err := Decode("dir/full.toml", data)
	require.NoError(t, err)
	assert.Equal(t, "full", n.Name)
	assert.Equal(t, "dir/full.toml", n.File)
	assert.Equal(t, "test # not a comment", n.Node.GPU)
	assert.Equal(t, 90, n.Node.ComputeCapability)
	assert.Equal(t, 12080, n.Node.CUDARTVersion)
	assert.Equal(t, []string{"sum:float32", "max:int32"}, n.Node.CollNetSupport)
	assert.Contains(t, n.Node.Note, "gpus_per_node = 99")
	assert.Equal(t, 4, n.Node.GPUsPerNode, "a key inside a multi-line string is not a key")

	require.NotNil(t, n.Constants)
	assert.Equal(t, []float64{6.8, 14.0, 8.4}, n.Constants.BaseLatencies["tree"])
	assert.Equal(t, []float64{0, 0, 20.9}, n.Constants.HWLatencies["net"]["nvls_tree"])
	assert.Equal(t, [][]float64{{39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {282.0, 90.0, 70.0}}, n.Constants.LLMaxBws)
	require.NotNil(t, n.Corrections)
	assert.Equal(t, []CorrectionCell{
		{Coll: "allreduce", Algo: "tree", Proto: "ll", Factors: []float64{1.0, 1.0, 0.9}},
		{Coll: "allgather", Algo: "ring", Proto: "simple", Factors: []float64{0.95}},
	}, n.Corrections.Cell)
	assert.Equal(t, Graph{NChannels: 8, BwIntra: 25, BwInter: 12.5, TypeIntra: "NVL", TypeInter: "NET", LatencyInter: 1.5}, n.Scale["4"].Graphs["collnet_direct"])
	require.NotNil(t, n.Provenance.Residual)
	assert.Equal(t, Residual{Points: 120, MedianRel: 0.03, MaxRel: 0.21}, *n.Provenance.Residual)

	want := map[string]string{
		"node.gpus_per_node":                          "vendor spec",
		"node.compute_capability":                     "vendor spec",
		"node.nvs_count":                              "vendor spec",
		"node.cudart_version":                         "estimate",
		"node.max_tree_pattern":                       "NCCL default",
		"node.collnet_heads_num":                      "estimate",
		"node.collnet_direct_n_heads":                 "estimate",
		"scale.1.comm_n_channels":                     "reference §13 S1",
		"scale.1.nvls_channels":                       "reference §13 S1",
		"scale.1.graphs.nvls.n_channels":              "reference §13 S1",
		"scale.1.graphs.nvls.bw_intra":                "reference §13 S1",
		"scale.1.graphs.nvls.bw_inter":                "reference §13 S1",
		"scale.4.graphs.collnet_direct.n_channels":    "estimate",
		"scale.4.graphs.collnet_direct.bw_intra":      "estimate",
		"scale.4.graphs.collnet_direct.bw_inter":      "estimate",
		"scale.4.graphs.collnet_direct.latency_inter": "measured",
		"scale.4.comm_n_channels":                     "reference §13 S2",
		"scale.4.nvls_channels":                       "reference §13 S2",
		"constants.base_latencies.tree":               "NCCL constant",
		"constants.base_latencies.pat":                "NCCL constant",
		"constants.ll_max_bws":                        "NCCL constant", // first line of a multi-line array
		"constants.per_ch_max_tree_bws":               "reference §1",  // its closing line
		"constants.hw_latencies.net.tree":             "reference §1",
		"constants.hw_latencies.net.nvls_tree":        "reference §1",
		"corrections.cell[0].factors":                 "measured",
		"corrections.cell[1].factors":                 "estimate",
		"provenance.residual.points":                  "measured",
		"provenance.residual.median_rel":              "measured",
		"provenance.residual.max_rel":                 "measured",
	}
	assert.Equal(t, want, n.Sources)
	assert.Equal(t, []string{
		"corrections.cell[1].factors",
		"node.collnet_direct_n_heads",
		"node.collnet_heads_num",
		"node.cudart_version",
		"scale.4.graphs.collnet_direct.bw_inter",
		"scale.4.graphs.collnet_direct.bw_intra",
		"scale.4.graphs.collnet_direct.n_channels",
	}, n.Estimated())
}

func decodeFile(t *testing.T, p string) *Node {
	t.Helper()
	data, err := os.ReadFile(p)
	require.NoError(t, err)
	n, err := Decode(p, data)
	require.NoError(t, err)
	return n
}

func TestApplyOverlayReplacesExactlyTheKeysItSets(t *testing.T) {
	base := decodeFile(t, "testdata/overlay/base.toml")
	baseCopy := decodeFile(t, "testdata/overlay/base.toml")
	odata, err := os.ReadFile("testdata/overlay/base.fit.toml")
	require.NoError(t, err)

	got, err := ApplyOverlay(base, "base.fit.toml", odata)
	require.NoError(t, err)
	assert.Equal(t, baseCopy, base, "the base is not modified")

	want := decodeFile(t, "testdata/overlay/base.toml")
	s1 := want.Scale["1"]
	s1.CommNChannels = 24
	ring := s1.Graphs["ring"]
	ring.BwIntra = 22.5
	s1.Graphs["ring"] = ring
	want.Scale["1"] = s1
	want.Node.NVSCount = 2
	want.Corrections = &Corrections{Cell: []CorrectionCell{{Coll: "allreduce", Algo: "ring", Proto: "simple", Factors: []float64{0.9, 0.8}}}}
	want.Provenance.Date = "2026-12-01"
	want.Provenance.FittedFrom = []InputFile{{File: "sweeps/ring.txt", SHA256: "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}}
	want.Provenance.Residual = &Residual{Points: 10, MedianRel: 0.02, MaxRel: 0.1}
	want.Overlay = "base.fit.toml"
	// Tags: the overlay's replace the base's for the keys it sets; a key it sets without a tag loses
	// the base's; the replaced corrections array drops all its old tags.
	want.Sources["scale.1.graphs.ring.bw_intra"] = "measured"
	want.Sources["scale.1.comm_n_channels"] = "measured"
	delete(want.Sources, "node.nvs_count")
	delete(want.Sources, "corrections.cell[1].factors")
	want.Sources["corrections.cell[0].factors"] = "measured"
	want.Sources["provenance.residual.points"] = "measured"
	want.Sources["provenance.residual.median_rel"] = "measured"
	want.Sources["provenance.residual.max_rel"] = "measured"

	assert.Equal(t, want, got)
	assert.Equal(t, "reference §13 S1", got.Sources["scale.1.graphs.tree.bw_intra"], "untouched tags stay")
	assert.Equal(t, []string{"node.compute_capability", "node.cudart_version", "node.gpus_per_node"}, got.Estimated())
}

func TestApplyEmptyOverlayRoundTripsEveryTable(t *testing.T) {
	for _, name := range Names() {
		t.Run(name, func(t *testing.T) {
			n, err := Load(name)
			require.NoError(t, err)
			got, err := ApplyOverlay(n, name+".fit.toml", []byte("schema_version = 1\n"))
			require.NoError(t, err)
			want := *n
			want.Overlay = name + ".fit.toml"
			assert.Equal(t, &want, got)
		})
	}
}

func TestApplyEmptyOverlayRoundTripsTheWholeSchema(t *testing.T) {
	n := decodeFile(t, "testdata/good/full.toml")
	got, err := ApplyOverlay(n, "full.fit.toml", []byte("# nothing but the version\nschema_version = 1\n"))
	require.NoError(t, err)
	want := *n
	want.Overlay = "full.fit.toml"
	assert.Equal(t, &want, got)
}

func TestApplyOverlayErrors(t *testing.T) {
	base := decodeFile(t, "testdata/overlay/base.toml")
	cases := []struct {
		file string
		want []string
	}{
		{"unknown_key.fit.toml", []string{"tables: unknown_key.fit.toml: line 5: scale.1.graphs.ring.bandwidth: unknown key"}},
		{"mistyped.fit.toml", []string{"tables: mistyped.fit.toml: toml: line 4", `"scale.1.comm_n_channels"`, "incompatible types"}},
		{"malformed.fit.toml", []string{"tables: malformed.fit.toml: toml: line 4", "table name"}},
		{"bad_value.fit.toml", []string{
			"tables: bad_value.fit.toml: line 4: scale.1.graphs.tree.n_channels: 99 out of range 0..64",
			"tables: bad_value.fit.toml: line 4: scale.1.graphs.tree.n_channels: 99 differs from ring's 16",
		}},
		{"emulation_on_gpu.fit.toml", []string{`tables: emulation_on_gpu.fit.toml: line 5: emulation.multicast_switch: only an emulated node (node.gpu = "cpu", collplan's CPU engine) declares what it emulates; node.gpu is "test-gpu"`}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join("testdata", "overlay", c.file))
			require.NoError(t, err)
			n, err := ApplyOverlay(base, c.file, data)
			require.Error(t, err)
			assert.Nil(t, n)
			for _, w := range c.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}
	_, err := ApplyOverlay(nil, "x.fit.toml", nil)
	assert.ErrorContains(t, err, "tables: x.fit.toml: overlay applied to a nil table")
}

func TestLoadFile(t *testing.T) {
	t.Run("with sibling overlay", func(t *testing.T) {
		p := filepath.Join("testdata", "overlay", "base.toml")
		n, err := LoadFile(p)
		require.NoError(t, err)
		assert.Equal(t, "base", n.Name)
		assert.Equal(t, p, n.File)
		assert.Equal(t, filepath.Join("testdata", "overlay", "base.fit.toml"), n.Overlay)
		assert.Equal(t, 22.5, n.Scale["1"].Graphs["ring"].BwIntra)
		assert.Equal(t, "measured", n.Sources["scale.1.graphs.ring.bw_intra"])
	})
	t.Run("without overlay", func(t *testing.T) {
		p := filepath.Join("testdata", "good", "minimal.toml")
		n, err := LoadFile(p)
		require.NoError(t, err)
		assert.Empty(t, n.Overlay)
		assert.Equal(t, 20.0, n.Scale["1"].Graphs["ring"].BwIntra)
	})
	t.Run("bad sibling overlay", func(t *testing.T) {
		dir := t.TempDir()
		data, err := os.ReadFile(filepath.Join("testdata", "good", "minimal.toml"))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "m.toml"), data, 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "m.fit.toml"), []byte("schema_version = 1\n[node]\nbogus = 1  # measured\n"), 0o644))
		_, err = LoadFile(filepath.Join(dir, "m.toml"))
		assert.ErrorContains(t, err, filepath.Join(dir, "m.fit.toml")+": line 3: node.bogus: unknown key")
	})
	t.Run("unreadable overlay", func(t *testing.T) {
		dir := t.TempDir()
		data, err := os.ReadFile(filepath.Join("testdata", "good", "minimal.toml"))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "m.toml"), data, 0o644))
		require.NoError(t, os.Mkdir(filepath.Join(dir, "m.fit.toml"), 0o755)) // a directory, not a file
		_, err = LoadFile(filepath.Join(dir, "m.toml"))
		assert.ErrorContains(t, err, "m.fit.toml")
	})
	t.Run("bad base", func(t *testing.T) {
		p := filepath.Join("testdata", "bad", "bad_cc.toml")
		_, err := LoadFile(p)
		assert.ErrorContains(t, err, p+": line 5: node.compute_capability")
	})
	t.Run("missing", func(t *testing.T) {
		_, err := LoadFile(filepath.Join("testdata", "nope.toml"))
		assert.ErrorContains(t, err, "nope.toml")
	})
	t.Run("overlay named directly", func(t *testing.T) {
		_, err := LoadFile(filepath.Join("testdata", "overlay", "base.fit.toml"))
		assert.ErrorContains(t, err, "is a fitted overlay")
	})
}

func TestLoadErrors(t *testing.T) {
	for _, name := range []string{"", "../h100", "h100.fit", "nope"} {
		_, err := Load(name)
		assert.Error(t, err, "%q", name)
	}
	_, err := Load("nope")
	assert.ErrorContains(t, err, `no embedded table "nope" (have a100, b200, cpu`)
	n, err := Load("h100.toml")
	require.NoError(t, err, "the .toml suffix is accepted")
	assert.Equal(t, "h100", n.Name)
}

func TestScanSource(t *testing.T) {
	src := `# comment
top = 1   # estimate
"quoted.key" = 2.5   # measured
str = "a # b"   # not numeric, not recorded
hex = 0xff   # vendor spec
neg = -3   # seed 000
inf_val = inf   # estimate
notag = 7
empty = []   # estimate
date = "2026-01-01"   # estimate
arr = [ # reference §1
  1, 2,   # not the tag
  3,
]
inline = { a = 1, b = 2 }   # data/seed
ml = """
x = 5   # inside a string
"""
[ t . "sub" ]
v = 1e3   # NCCL default
[[a.b]]
x = 1   # estimate
[a.b.c]
y = 2   # measured
[[a.b]]
x = 3   # seed 001
[[a.b.d]]
z = 4   # estimate
`
	sc := scanSource([]byte(src))
	assert.Equal(t, map[string]string{
		"top":           "estimate",
		"quoted.key":    "measured",
		"hex":           "vendor spec",
		"neg":           "seed 000",
		"inf_val":       "estimate",
		"arr":           "reference §1",
		"inline":        "data/seed",
		"t.sub.v":       "NCCL default",
		"a.b[0].x":      "estimate",
		"a.b[0].c.y":    "measured",
		"a.b[1].x":      "seed 001",
		"a.b[1].d[0].z": "estimate",
	}, sc.sources)
	assert.Equal(t, 2, sc.lines["top"])
	assert.Equal(t, 11, sc.lines["arr"])
	assert.Equal(t, 21, sc.lines["a.b[0]"])
	assert.Equal(t, 21, sc.flat["a.b"])
	assert.Equal(t, 25, sc.lines["a.b[1]"])
	assert.Equal(t, 28, sc.lines["a.b[1].d[0].z"])
	assert.Equal(t, 28, sc.lineOf("a.b[1].d[0].z[3]"))
	assert.Equal(t, 25, sc.lineOf("a.b[1].nope"))
	assert.Equal(t, 0, sc.lineOf("nowhere"))
	assert.Equal(t, []string{"a.b", "a.b[1].d"}, sc.arrays)
	_, ok := sc.lines["x"]
	assert.False(t, ok, "keys inside a multi-line string are not keys")

	var nilScan *scan
	assert.Equal(t, 0, nilScan.lineOf("a"))
}

func TestWordListsFollowNCCLOrder(t *testing.T) {
	// The lists must keep NCCL's order where it is an index (§0): path types and algorithms.
	assert.Equal(t, []string{"LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"}, pathTypes)
	assert.Equal(t, []string{"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}, algoNames)
	assert.True(t, sort.StringsAreSorted(scaleKeys))
}
