package capabilities

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const topoDir = "testdata/topology"

// sameChannelsGraph is a §13 tree/ring graph: sameChannels 1, typeInter PIX, latencyInter 0.
func sameChannelsGraph(nCh int, bwIntra, bwInter float64, typeIntra PathType) Graph {
	return Graph{NChannels: nCh, BwIntra: bwIntra, BwInter: bwInter, TypeIntra: typeIntra, TypeInter: PathPIX,
		SameChannels: true}
}

// The §13 scenarios, written out by hand from reference/nccl-costmodel.md §13.
var (
	topoS1 = Topology{
		NNodes: 1, NRanks: 8, MinCompCap: 90, MaxCompCap: 90, CPUArch: ArchX86, CPUVendor: VendorIntel,
		NVSCount: 4, NVLSSupport: true, MaxTreePattern: 1, NetDeviceType: NetHost,
		CommNChannels: 32, NVLSChannels: 16, MaxLocalRanks: 8, LocalRanks: 8, CUDARTVersion: 12080,
		Graphs: Graphs{
			Tree: sameChannelsGraph(16, 20, 20, PathNVL),
			Ring: sameChannelsGraph(16, 20, 20, PathNVL),
			NVLS: Graph{NChannels: 8, BwIntra: 40, BwInter: 40, TypeIntra: PathNVL, TypeInter: PathPIX},
		},
	}
	topoS2 = Topology{
		NNodes: 4, NRanks: 32, MinCompCap: 90, MaxCompCap: 90, CPUArch: ArchX86, CPUVendor: VendorIntel,
		NVSCount: 4, NVLSSupport: true, MaxTreePattern: 1, NetDeviceType: NetHost,
		CommNChannels: 16, NVLSChannels: 16, MaxLocalRanks: 8, LocalRanks: 8, CUDARTVersion: 12080,
		Graphs: Graphs{
			Tree: sameChannelsGraph(8, 20, 12.5, PathNVL),
			Ring: sameChannelsGraph(8, 20, 12.5, PathNVL),
			NVLS: Graph{NChannels: 8, BwIntra: 40, BwInter: 25, TypeIntra: PathNVL, TypeInter: PathPIX},
		},
	}
	topoS3 = Topology{
		NNodes: 1, NRanks: 4, MinCompCap: 80, MaxCompCap: 80, CPUArch: ArchX86, CPUVendor: VendorIntel,
		MaxTreePattern: 1, NetDeviceType: NetHost,
		CommNChannels: 4, MaxLocalRanks: 4, LocalRanks: 4, CUDARTVersion: 12080,
		Graphs: Graphs{
			Tree: sameChannelsGraph(2, 12, 12, PathPXB),
			Ring: sameChannelsGraph(2, 12, 12, PathPXB),
		},
	}
)

func TestLoadTopologyGood(t *testing.T) {
	tests := []struct {
		file string
		want Topology
	}{
		{"s1.toml", topoS1},
		{"s2.toml", topoS2},
		{"s3.toml", topoS3},
		{"minimal.toml", Topology{
			NNodes: 2, NRanks: 4, MinCompCap: 70, MaxCompCap: 70, CPUArch: ArchPower, CPUVendor: VendorUndefined,
			MaxTreePattern: 1, NetDeviceType: NetHost, CommNChannels: 2, MaxLocalRanks: 2, LocalRanks: 2,
			CUDARTVersion: 12080,
		}},
		{"full.toml", Topology{
			NNodes: 2, NRanks: 14, MinCompCap: 90, MaxCompCap: 100, CPUArch: ArchARM, CPUVendor: VendorMixed,
			NVSCount: 2, CollNetEnable: true, CollNetChainSupport: true, CollNetHeadsNum: 4, CollNetDirectNHeads: 2,
			CollNetPluginIAllGather: true, CollNetPluginIReduceScatter: true,
			CollNetSupport: []OpDtype{{Sum, Float32}, {Max, Bfloat16}, {PreMulSum, Float16}},
			NVLSSupport:    true, MaxTreePattern: 3, NetDeviceType: NetUnpack, CommNChannels: 24, NVLSChannels: 24,
			MaxLocalRanks: 8, LocalRanks: 6, CUDARTVersion: 12090,
			Env: Env{
				Algo:             Setting{"ring;allreduce:^tree", SourceTopology},
				Proto:            Setting{"", SourceTopology},
				NThreads:         Setting{"256", SourceTopology},
				LL128NThreads:    Setting{"640", SourceTopology},
				NetOverhead:      Setting{"1000", SourceTopology},
				PATEnable:        Setting{"0", SourceTopology},
				LL128C2C:         Setting{"0", SourceTopology},
				ThreadThresholds: Setting{"8 8 64", SourceTopology},
			},
			Graphs: Graphs{
				Tree: Graph{NChannels: 12, BwIntra: 20.5, BwInter: 6, TypeIntra: PathC2C, TypeInter: PathNET,
					LatencyInter: 1.25, SameChannels: true},
				CollNetChain: Graph{NChannels: 3, BwIntra: 30, BwInter: 10.5, TypeIntra: PathNVB, TypeInter: PathNET,
					LatencyInter: 2.5},
			},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := LoadTopology(filepath.Join(topoDir, tt.file))
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

// The design's example file is scenario S1; s1.toml is a copy of it. The check runs where the shared
// design directory sits beside the module, as in the project's workspace.
func TestTopologyExampleIsS1(t *testing.T) {
	path := filepath.Join("..", "..", "shared", "design", "topology-example.toml")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not present: %v", path, err)
	}
	got, err := LoadTopology(path)
	require.NoError(t, err)
	assert.Equal(t, topoS1, got)
}

func TestLoadTopologyBad(t *testing.T) {
	tests := map[string][]string{ // file in bad/ -> substrings of the error after the file prefix
		"unknown_key.toml":           {`unknown key "n_node"`},
		"unknown_keys.toml":          {`unknown keys "alpha", "zeta"`},
		"unknown_case.toml":          {`unknown key "N_NODES"`},
		"unknown_graph.toml":         {`unknown key "graphs.pat"`},
		"unknown_graph_key.toml":     {`unknown key "graphs.ring.bandwidth"`},
		"int_as_float.toml":          {"n_nodes: want an integer, got float 1"},
		"int_as_string.toml":         {`n_ranks: want an integer, got string "4"`},
		"int_as_datetime.toml":       {"min_comp_cap: want an integer, got datetime"},
		"channels_as_float.toml":     {"graphs.ring.n_channels: want an integer, got float 2"},
		"float_as_string.toml":       {`graphs.ring.bw_intra: want a number, got string "12"`},
		"float_inf.toml":             {"graphs.ring.bw_inter: want a finite number, got +Inf"},
		"float_nan.toml":             {"graphs.ring.latency_inter: want a finite number, got NaN"},
		"bool_as_int.toml":           {"nvls_support: want a boolean, got integer 0"},
		"bool_as_string.toml":        {`graphs.ring.same_channels: want a boolean, got string "true"`},
		"string_as_int.toml":         {"cpu_arch: want a string, got integer 86"},
		"bad_cpu_arch.toml":          {`cpu_arch: unknown cpu_arch "sparc"`},
		"bad_cpu_vendor.toml":        {`cpu_vendor: unknown cpu_vendor "via"`},
		"bad_net_device_type.toml":   {`net_device_type: unknown net_device_type "gpu"`},
		"bad_path_type.toml":         {`graphs.ring.type_intra: unknown path type "NVLINK"`},
		"bad_collnet_entry.toml":     {`collnet_support[1]: want "op:dtype", got "sum"`},
		"bad_collnet_dtype.toml":     {`collnet_support[0]: unknown dtype "float33"`},
		"bad_collnet_op.toml":        {`collnet_support[0]: unknown op "add"`},
		"bad_collnet_type.toml":      {`collnet_support[0]: want an "op:dtype" string, got integer 1`},
		"bad_collnet_list.toml":      {`collnet_support: want an array of "op:dtype" strings, got string "sum:float32"`},
		"bad_env_name.toml":          {`unknown key "env.NCCL_ALGOS"`},
		"bad_env_type.toml":          {"env.NCCL_NTHREADS: want a string, got integer 256"},
		"bad_env_algo.toml":          {`env: NCCL_ALGO: unknown algorithm "rng" in "allreduce:tree,rng"`},
		"bad_env_proto.toml":         {`env: NCCL_PROTO: token "Simple" has no function prefix`},
		"env_not_table.toml":         {`env: want a table, got string "NCCL_ALGO=ring"`},
		"graphs_not_table.toml":      {"graphs: want a table, got integer 3"},
		"graph_array.toml":           {"graphs.ring: want a table, got array of tables"},
		"graph_not_table.toml":       {"graphs.ring: want a table, got integer 2"},
		"missing_required.toml":      {`missing required key "n_ranks"`},
		"missing_required_many.toml": {`missing required keys "n_nodes", "cpu_vendor", "max_local_ranks"`},
		"ranks_lt_nodes.toml":        {"n_ranks: 1 is less than n_nodes 2"},
		"comp_cap_order.toml":        {"max_comp_cap: 70 must be >= min_comp_cap 80"},
		"negative_channels.toml":     {"comm_n_channels: must not be negative, got -1", "nvls_channels: must not be negative, got -2"},
		"too_many_channels.toml":     {"graphs.ring.n_channels: must be 0..64, got 65"},
		"tree_pattern_zero.toml":     {"max_tree_pattern: must be 1..3, got 0"},
		"tree_pattern_four.toml":     {"max_tree_pattern: must be 1..3, got 4"},
		"malformed.toml":             {"line 6"},
		"malformed_table.toml":       {"line 11"},
		"duplicate_key.toml":         {"line 10", "n_ranks"},
		"empty.toml":                 {`missing required keys "n_nodes", "n_ranks"`},
	}
	entries, err := os.ReadDir(filepath.Join(topoDir, "bad"))
	require.NoError(t, err)
	for _, e := range entries {
		assert.Contains(t, tests, e.Name(), "testdata/topology/bad/%s has no expected error", e.Name())
	}
	for name, want := range tests {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(topoDir, "bad", name)
			got, err := LoadTopology(path)
			require.Error(t, err)
			assert.Equal(t, Topology{}, got)
			msg := err.Error()
			require.True(t, strings.HasPrefix(msg, "capabilities: "+path+": "), "error %q lacks the file prefix", msg)
			for _, w := range want {
				assert.Contains(t, msg, w)
			}
		})
	}
}

func TestLoadTopologyMissingFile(t *testing.T) {
	path := filepath.Join(topoDir, "no-such-file.toml")
	_, err := LoadTopology(path)
	require.Error(t, err)
	assert.True(t, errors.Is(err, fs.ErrNotExist), "got %v", err)
	assert.True(t, strings.HasPrefix(err.Error(), "capabilities: "+path+": "), "got %v", err)
}

func TestDecodeTopologyInline(t *testing.T) {
	const base = "n_nodes = 1\nn_ranks = 2\nmin_comp_cap = 80\nmax_comp_cap = 80\ncpu_arch = \"x86\"\n" +
		"cpu_vendor = \"amd\"\ncomm_n_channels = 2\nmax_local_ranks = 2\n"
	t.Run("integer literal for a float", func(t *testing.T) {
		got, err := DecodeTopology("x.toml", []byte(base+"[graphs.ring]\nbw_intra = 20\nbw_inter = 0\n"))
		require.NoError(t, err)
		assert.Equal(t, Graph{BwIntra: 20}, got.Graphs.Ring, "absent keys of a present graph are zero")
		assert.Equal(t, VendorAMD, got.CPUVendor)
	})
	t.Run("explicit local_ranks", func(t *testing.T) {
		got, err := DecodeTopology("x.toml", []byte(base+"local_ranks = 1\n"))
		require.NoError(t, err)
		assert.Equal(t, 1, got.LocalRanks)
		assert.Equal(t, 2, got.MaxLocalRanks)
	})
	t.Run("empty collnet_support is nil", func(t *testing.T) {
		got, err := DecodeTopology("x.toml", []byte(base+"collnet_support = []\n"))
		require.NoError(t, err)
		assert.Nil(t, got.CollNetSupport)
	})
	t.Run("empty env table", func(t *testing.T) {
		got, err := DecodeTopology("x.toml", []byte(base+"[env]\n"))
		require.NoError(t, err)
		assert.Equal(t, Env{}, got.Env)
	})
	t.Run("file name as given", func(t *testing.T) {
		_, err := DecodeTopology("some/dir/t.toml", []byte(base+"bogus = 1\n"))
		require.Error(t, err)
		assert.Equal(t, `capabilities: some/dir/t.toml: unknown key "bogus"`, err.Error())
	})
	for _, tt := range []struct{ extra, want string }{
		{"nvs_count = [4]\n", "nvs_count: want an integer, got array"},
		{"nvs_count = {n = 4}\n", "nvs_count: want an integer, got table"},
		{"nvls_support = 1.5\n", "nvls_support: want a boolean, got float 1.5"},
		{"[graphs.tree]\nbw_intra = true\n", "graphs.tree.bw_intra: want a number, got boolean true"},
		{"[graphs.nvls]\ntype_inter = \"IB\"\n", `graphs.nvls.type_inter: unknown path type "IB" (want LOC NVL NVB C2C PIX PXB P2C PXN PHB SYS NET DIS)`},
		{"[graphs.nvls]\nn_channels = 1\nfoo = 1\nbar = 2\n", `unknown keys "graphs.nvls.bar", "graphs.nvls.foo"`},
	} {
		t.Run(tt.want, func(t *testing.T) {
			_, err := DecodeTopology("x.toml", []byte(base+tt.extra))
			require.Error(t, err)
			assert.Equal(t, "capabilities: x.toml: "+tt.want, err.Error())
		})
	}
	t.Run("syntax error", func(t *testing.T) {
		_, err := DecodeTopology("t.toml", []byte(base+"= 3\n"))
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "capabilities: t.toml: line 9"), "got %v", err)
	})
	t.Run("not UTF-8", func(t *testing.T) {
		_, err := DecodeTopology("t.toml", []byte("\x00\x01"))
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "capabilities: t.toml: "), "got %v", err)
	})
}

// FuzzDecodeTopology checks that DecodeTopology never panics, that its errors carry the file prefix,
// and that whatever it accepts validates.
func FuzzDecodeTopology(f *testing.F) {
	for _, dir := range []string{topoDir, filepath.Join(topoDir, "bad")} {
		entries, err := os.ReadDir(dir)
		require.NoError(f, err)
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			data, err := os.ReadFile(filepath.Join(dir, e.Name()))
			require.NoError(f, err)
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		topo, err := DecodeTopology("fuzz.toml", data)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "capabilities: fuzz.toml: ") {
				t.Fatalf("error without the file prefix: %v", err)
			}
			return
		}
		if err := topo.Validate(); err != nil {
			t.Fatalf("accepted a topology that does not validate: %v", err)
		}
		if topo.MaxTreePattern < 1 || topo.MaxTreePattern > 3 {
			t.Fatalf("accepted max_tree_pattern %d", topo.MaxTreePattern)
		}
		if _, err := ParseAlgoEnv(topo.Env.Algo.Value); err != nil {
			t.Fatalf("accepted NCCL_ALGO %q: %v", topo.Env.Algo.Value, err)
		}
	})
}
