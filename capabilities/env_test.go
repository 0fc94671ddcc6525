package capabilities

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Columns of the hand-written expected matrices:
//
//	AlgoMatrix rows:  {Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT}
//	ProtoMatrix rows: {LL, LL128, Simple}
//
// and rows are Broadcast, Reduce, AllGather, ReduceScatter, AllReduce.

var (
	algoAll  = [NumAlgos]int8{1, 1, 1, 1, 1, 1, 1}
	protoDef = [NumProtos]int8{1, 2, 1}
)

func TestDefaultMatrices(t *testing.T) {
	assert.Equal(t, AlgoMatrix{algoAll, algoAll, algoAll, algoAll, algoAll}, DefaultAlgoMatrix())
	assert.Equal(t, ProtoMatrix{protoDef, protoDef, protoDef, protoDef, protoDef}, DefaultProtoMatrix())
}

func TestParseAlgoEnv(t *testing.T) {
	tests := []struct {
		name, in string
		want     AlgoMatrix
	}{
		{"unset", "", AlgoMatrix{algoAll, algoAll, algoAll, algoAll, algoAll}},
		{"all spaces", "  \t ", AlgoMatrix{algoAll, algoAll, algoAll, algoAll, algoAll}},
		{
			// reference §7 and tuner-ecosystem.md: the first token targets all five functions, then
			// AllReduce and Broadcast are reset by their own tokens.
			"§7 example", "ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring",
			AlgoMatrix{
				Broadcast:     {0, 1, 0, 0, 0, 0, 0},
				Reduce:        {0, 1, 1, 0, 0, 0, 0},
				AllGather:     {0, 1, 1, 0, 0, 0, 0},
				ReduceScatter: {0, 1, 1, 0, 0, 0, 0},
				AllReduce:     {1, 0, 1, 0, 0, 0, 0},
			},
		},
		{
			// addendum 10: a first token with a prefix leaves the other functions at their defaults.
			"addendum prefix-first", "allreduce:tree",
			AlgoMatrix{algoAll, algoAll, algoAll, algoAll, {1, 0, 0, 0, 0, 0, 0}},
		},
		{
			"plain single", "Tree",
			AlgoMatrix{
				{1, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0},
				{1, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0},
			},
		},
		{
			"caret all", "^NVLS,NVLSTree",
			AlgoMatrix{
				{1, 1, 1, 1, 0, 0, 1}, {1, 1, 1, 1, 0, 0, 1}, {1, 1, 1, 1, 0, 0, 1},
				{1, 1, 1, 1, 0, 0, 1}, {1, 1, 1, 1, 0, 0, 1},
			},
		},
		{
			"every name", "tree,ring,collnetdirect,collnetchain,nvls,nvlstree,pat",
			AlgoMatrix{algoAll, algoAll, algoAll, algoAll, algoAll},
		},
		{
			"later token overrides earlier", "allreduce:tree;allreduce:ring",
			AlgoMatrix{algoAll, algoAll, algoAll, algoAll, {0, 1, 0, 0, 0, 0, 0}},
		},
		{
			"later caret overrides plain", "ring;allreduce:tree;allreduce:^pat",
			AlgoMatrix{
				{0, 1, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 0},
				{0, 1, 0, 0, 0, 0, 0}, {1, 1, 1, 1, 1, 1, 0},
			},
		},
		{
			"case-insensitive", "RING;ALLREDUCE:NvLsTrEe,pat;bRoAdCaSt:COLLNETCHAIN;AllGather:^collnetDIRECT",
			AlgoMatrix{
				Broadcast:     {0, 0, 0, 1, 0, 0, 0},
				Reduce:        {0, 1, 0, 0, 0, 0, 0},
				AllGather:     {1, 1, 0, 1, 1, 1, 1},
				ReduceScatter: {0, 1, 0, 0, 0, 0, 0},
				AllReduce:     {0, 0, 0, 0, 0, 1, 1},
			},
		},
		{
			"whitespace trimmed", "  ring , tree ; reducescatter : ^ pat , nvls ;reduce:pat ",
			AlgoMatrix{
				Broadcast:     {1, 1, 0, 0, 0, 0, 0},
				Reduce:        {0, 0, 0, 0, 0, 0, 1},
				AllGather:     {1, 1, 0, 0, 0, 0, 0},
				ReduceScatter: {1, 1, 1, 1, 0, 1, 0},
				AllReduce:     {1, 1, 0, 0, 0, 0, 0},
			},
		},
		{
			"repeated element", "ring,ring",
			AlgoMatrix{
				{0, 1, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 0},
				{0, 1, 0, 0, 0, 0, 0}, {0, 1, 0, 0, 0, 0, 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseAlgoEnv(tt.in)
			require.NoError(t, err, "ParseAlgoEnv(%q)", tt.in)
			assert.Equal(t, tt.want, got, "ParseAlgoEnv(%q)", tt.in)
		})
	}
}

func TestParseProtoEnv(t *testing.T) {
	tests := []struct {
		name, in string
		want     ProtoMatrix
	}{
		{"unset", "", ProtoMatrix{protoDef, protoDef, protoDef, protoDef, protoDef}},
		{
			// reference §7: LL128 off everywhere except AllReduce, where it is the only protocol.
			"§7 example", "^LL128;allreduce:LL128",
			ProtoMatrix{{1, 0, 1}, {1, 0, 1}, {1, 0, 1}, {1, 0, 1}, {0, 1, 0}},
		},
		{
			// reference §5: ^LL sets LL128 to 1 (user-enabled), which skips the hardware gate.
			"§5 caret LL force-enables LL128", "^LL",
			ProtoMatrix{{0, 1, 1}, {0, 1, 1}, {0, 1, 1}, {0, 1, 1}, {0, 1, 1}},
		},
		{
			// design/topology-example.toml's commented [env] line.
			"caret LL128", "^LL128",
			ProtoMatrix{{1, 0, 1}, {1, 0, 1}, {1, 0, 1}, {1, 0, 1}, {1, 0, 1}},
		},
		{
			"plain LL128 is user-enabled", "ll128",
			ProtoMatrix{{0, 1, 0}, {0, 1, 0}, {0, 1, 0}, {0, 1, 0}, {0, 1, 0}},
		},
		{
			"simple only", "Simple",
			ProtoMatrix{{0, 0, 1}, {0, 0, 1}, {0, 0, 1}, {0, 0, 1}, {0, 0, 1}},
		},
		{
			"prefix-first keeps auto elsewhere", "reducescatter:^LL",
			ProtoMatrix{protoDef, protoDef, protoDef, {0, 1, 1}, protoDef},
		},
		{
			"later token overrides earlier", "broadcast:LL;broadcast:simple,LL128;reduce:LL",
			ProtoMatrix{{0, 1, 1}, {1, 0, 0}, protoDef, protoDef, protoDef},
		},
		{
			"case-insensitive", "SIMPLE,ll;ALLGATHER:^sImPlE",
			ProtoMatrix{{1, 0, 1}, {1, 0, 1}, {1, 1, 0}, {1, 0, 1}, {1, 0, 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProtoEnv(tt.in)
			require.NoError(t, err, "ParseProtoEnv(%q)", tt.in)
			assert.Equal(t, tt.want, got, "ParseProtoEnv(%q)", tt.in)
		})
	}
}

func TestParseEnvErrors(t *testing.T) {
	tests := []struct {
		name, variable, in string
		want               []string // substrings of the error
	}{
		{"brief example", "NCCL_ALGO", "allreduce:tree,rng", []string{`NCCL_ALGO: unknown algorithm "rng" in "allreduce:tree,rng"`}},
		{"unknown algorithm", "NCCL_ALGO", "ring,rng", []string{"NCCL_ALGO", `unknown algorithm "rng"`}},
		{"log name is not an env name", "NCCL_ALGO", "COLLNET_DIRECT", []string{"NCCL_ALGO", `unknown algorithm "COLLNET_DIRECT"`}},
		{"log name NVLS_TREE", "NCCL_ALGO", "allreduce:NVLS_TREE", []string{`unknown algorithm "NVLS_TREE"`}},
		{"protocol in NCCL_ALGO", "NCCL_ALGO", "simple", []string{`unknown algorithm "simple"`}},
		{"unknown protocol", "NCCL_PROTO", "Simple,LL129", []string{"NCCL_PROTO", `unknown protocol "LL129"`}},
		{"algorithm in NCCL_PROTO", "NCCL_PROTO", "ring", []string{"NCCL_PROTO", `unknown protocol "ring"`}},
		{"unknown prefix", "NCCL_ALGO", "ring;allreduc:tree", []string{"NCCL_ALGO", `unknown function "allreduc"`}},
		{"unknown prefix first", "NCCL_PROTO", "all_reduce:LL", []string{"NCCL_PROTO", `unknown function "all_reduce"`}},
		{"empty prefix", "NCCL_ALGO", ":tree", []string{"NCCL_ALGO", `unknown function ""`}},
		{"missing prefix after first", "NCCL_ALGO", "ring;tree", []string{"NCCL_ALGO", `token "tree" has no function prefix`}},
		{"missing prefix after prefixed", "NCCL_PROTO", "allreduce:LL;^LL128", []string{"NCCL_PROTO", `token "^LL128" has no function prefix`}},
		{"empty list", "NCCL_ALGO", "allreduce:", []string{"NCCL_ALGO", `empty algorithm list in token "allreduce:"`}},
		{"empty caret list", "NCCL_PROTO", "allreduce:^", []string{"NCCL_PROTO", `empty protocol list in token "allreduce:^"`}},
		{"bare caret", "NCCL_ALGO", "^", []string{"NCCL_ALGO", `empty algorithm list in token "^"`}},
		{"lone semicolon", "NCCL_ALGO", ";", []string{"NCCL_ALGO", `empty token 1`, `in ";"`}},
		{"trailing semicolon", "NCCL_PROTO", "LL;", []string{"NCCL_PROTO", `empty token 2`, `in "LL;"`}},
		{"empty element", "NCCL_ALGO", "ring,,tree", []string{"NCCL_ALGO", `empty algorithm name in list "ring,,tree"`}},
		{"trailing comma", "NCCL_PROTO", "allreduce:LL,", []string{"NCCL_PROTO", `empty protocol name in list "LL,"`}},
		{"two colons", "NCCL_ALGO", "allreduce:tree:ring", []string{"NCCL_ALGO", `unknown algorithm "tree:ring"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.variable == "NCCL_ALGO" {
				var m AlgoMatrix
				m, err = ParseAlgoEnv(tt.in)
				assert.Equal(t, DefaultAlgoMatrix(), m, "the matrix on error")
			} else {
				var m ProtoMatrix
				m, err = ParseProtoEnv(tt.in)
				assert.Equal(t, DefaultProtoMatrix(), m, "the matrix on error")
			}
			require.Error(t, err, "%s=%q", tt.variable, tt.in)
			assert.Regexp(t, "^"+tt.variable+": ", err.Error())
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w, "%s=%q", tt.variable, tt.in)
			}
		})
	}
}

func TestEnvFromProcess(t *testing.T) {
	vars := map[string]string{"NCCL_ALGO": "ring", "NCCL_PROTO": "", "NCCL_THREAD_THRESHOLDS": "8 8 64", "HOME": "/root"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	got := EnvFromProcess(lookup)
	want := Env{
		Algo:             Setting{Value: "ring", Source: SourceProcess},
		Proto:            Setting{Value: "", Source: SourceProcess},
		ThreadThresholds: Setting{Value: "8 8 64", Source: SourceProcess},
	}
	assert.Equal(t, want, got)
	assert.True(t, got.Proto.IsSet(), "an empty variable is still set")
	assert.False(t, got.NThreads.IsSet())

	assert.Equal(t, Env{}, EnvFromProcess(func(string) (string, bool) { return "", false }))

	// A nil lookup reads the process environment.
	for _, name := range EnvVars {
		t.Setenv(name, "x") // restores the variable after the test
		require.NoError(t, os.Unsetenv(name))
	}
	t.Setenv("NCCL_NTHREADS", "256")
	t.Setenv("NCCL_LL128_C2C", "0")
	assert.Equal(t, Env{
		NThreads: Setting{Value: "256", Source: SourceProcess},
		LL128C2C: Setting{Value: "0", Source: SourceProcess},
	}, EnvFromProcess(nil))
}
