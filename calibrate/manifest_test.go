package calibrate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/internal/linescan"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadManifest(t *testing.T) {
	path := filepath.Join("testdata", "sweeps", "sweeps.toml")
	m, err := LoadManifest(path)
	require.NoError(t, err)
	assert.Equal(t, &Manifest{File: path, Sweeps: []ManifestEntry{
		{Line: 3, File: "ar_old_12col_v100.txt", Algo: "Ring", Proto: "Simple", Coll: "allreduce", Nodes: 1,
			GPUsPerNode: 4, NCCLVersion: "2.7.8", Note: "DGX-1V, NCCL_MAX_NCHANNELS=12"},
		{Line: 13, File: "ar_srun_2n8g_ll128.txt", Algo: "Tree"},
		{Line: 17, File: "ar_pre2196_a100_tree_simple.txt", Proto: "LL128", Nodes: 1},
	}}, m)

	_, err = LoadManifest(filepath.Join("testdata", "manifests", "absent.toml"))
	assert.EqualError(t, err, "calibrate: testdata/manifests/absent.toml: no such file or directory")
}

func TestDecodeManifestRejects(t *testing.T) {
	keys := "file, algo, proto, coll, nodes, gpus_per_node, ranks_per_node, nccl_version, note"
	tests := []struct {
		file string
		want []string
	}{
		{"unknown_key.toml", []string{`testdata/manifests/unknown_key.toml:7: unknown key "gpus_per_nodes" in [[sweep]] (want ` + keys + `)`}},
		{"syntax.toml", []string{"testdata/manifests/syntax.toml:3: TOML: "}},
		{"bad_values.toml", []string{
			`testdata/manifests/bad_values.toml:1: unknown key "title" (want [[sweep]] tables)`,
			`testdata/manifests/bad_values.toml:6: nodes must be an integer, got a string`,
			`testdata/manifests/bad_values.toml:5: algo: NCCL_ALGO: unknown algorithm "Rign"`,
			`testdata/manifests/bad_values.toml:12: gpus_per_node must be a positive count, got 0`,
			`testdata/manifests/bad_values.toml:11: proto: NCCL_PROTO: token "Simple" has no function prefix`,
			`testdata/manifests/bad_values.toml:10: coll: unknown collective "alltoall"`,
			`testdata/manifests/bad_values.toml:15: file "a.txt" is listed twice (first on line 4)`,
			`testdata/manifests/bad_values.toml:16: nccl_version "latest" is not a version like 2.30.7`,
			`testdata/manifests/bad_values.toml:18: [[sweep]] without file`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			_, err := LoadManifest(filepath.Join("testdata", "manifests", tt.file))
			require.Error(t, err)
			lines := strings.Split(err.Error(), "\n")
			require.Len(t, lines, len(tt.want), "%v", err)
			for i, w := range tt.want {
				assert.True(t, strings.HasPrefix(lines[i], w), "problem %d:\n got %s\nwant %s...", i, lines[i], w)
			}
		})
	}
}

func TestDecodeManifestInline(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "m.toml:1: no [[sweep]] table"},
		{"sweep = 3\n", "m.toml:1: sweep must be an array of tables ([[sweep]])"},
		{"[other]\nx = 1\n[[sweep]]\nfile = \"a\"\n", `m.toml:1: unknown key "other" (want [[sweep]] tables)`},
		{"[[sweep]]\nfile = 7\n", "m.toml:2: file must be a string, got an integer"},
		{"[[sweep]]\nfile = \" \"\n", "m.toml:2: file is empty"},
		{"[[sweep]]\nfile = \"a\"\nnodes = 2.0\n", "m.toml:3: nodes must be an integer, got a float"},
		{"[[sweep]]\nfile = \"a\"\nnote = true\n", "m.toml:3: note must be a string, got a boolean"},
		{"[[sweep]]\nfile = \"a\"\nnote = [1]\n", "m.toml:3: note must be a string, got an array"},
		{"[[sweep]]\nfile = \"a\"\n[sweep.extra]\nk = 1\n", `m.toml:1: unknown key "extra" in [[sweep]]`},
		{"[[sweep]]\nfile = \"a\"\nnodes = 2000000\n", "m.toml:3: nodes must be a positive count, got 2000000"},
	}
	for _, tt := range tests {
		_, err := DecodeManifest("m.toml", []byte(tt.in))
		require.Error(t, err, tt.in)
		assert.True(t, strings.HasPrefix(err.Error(), tt.want), "input %q:\n got %v\nwant %s", tt.in, err, tt.want)
	}
	m, err := DecodeManifest("m.toml", []byte("sweep = [{file = \"a\"}, {file = \"b\", proto = \"LL\"}]\n"))
	require.NoError(t, err)
	assert.Equal(t, []ManifestEntry{{Line: 1, File: "a"}, {Line: 1, File: "b", Proto: "LL"}}, m.Sweeps)
	_, err = DecodeManifest("m.toml", []byte("sweep = [{file = \"a\"}, 3]\n"))
	assert.EqualError(t, err, "m.toml:1: sweep must be an array of tables ([[sweep]])")
	m, err = DecodeManifest("m.toml", []byte("[[ sweep ]] # one\n\"file\" = \"a\"\n'algo' = \"^NVLS\"\n"))
	require.NoError(t, err)
	assert.Equal(t, []ManifestEntry{{Line: 1, File: "a", Algo: "^NVLS"}}, m.Sweeps)
}

func TestLoadSweepsDirectory(t *testing.T) {
	dir := filepath.Join("testdata", "sweeps")
	sweeps, probs, err := LoadSweeps(dir)
	require.NoError(t, err)
	byFile := map[string][]*Sweep{}
	for _, s := range sweeps {
		byFile[filepath.Base(s.File)] = append(byFile[filepath.Base(s.File)], s)
	}
	assert.Len(t, sweeps, 13, "12 files with a table, one of them with two runs")
	assert.Len(t, byFile["multi_run.txt"], 2)
	assert.NotContains(t, byFile, "notes.txt")

	old := byFile["ar_old_12col_v100.txt"][0]
	assert.True(t, old.CollKnown)
	assert.Equal(t, capabilities.AllReduce, old.Coll)
	assert.Equal(t, Pin{Algo: "Ring", Proto: "Simple", Source: "manifest", AlgoSource: "manifest", ProtoSource: "manifest"}, old.Pin)
	assert.Equal(t, "2.7.8", old.NCCLVersion)
	assert.Empty(t, old.Warnings, "the manifest names the collective; nodes and GPUs agree")

	srun := byFile["ar_srun_2n8g_ll128.txt"][0]
	assert.Equal(t, Pin{Algo: "Tree", Proto: "LL128", Source: "manifest+file", AlgoSource: "manifest", ProtoSource: "file"}, srun.Pin)

	pre := byFile["ar_pre2196_a100_tree_simple.txt"][0]
	assert.Equal(t, Pin{Algo: "Tree", Proto: "LL128", Source: "manifest+file", AlgoSource: "file", ProtoSource: "manifest"}, pre.Pin)
	require.Len(t, pre.Warnings, 1)
	assert.Equal(t, filepath.Join(dir, "sweeps.toml")+`:17: ar_pre2196_a100_tree_simple.txt: manifest proto "LL128" overrides NCCL_PROTO=Simple in the file`, pre.Warnings[0].Error())

	cb := byFile["collbench_ring_ll128.txt"][0]
	assert.Equal(t, Pin{Algo: "Ring", Proto: "LL128", Source: "file", AlgoSource: "file", ProtoSource: "file"}, cb.Pin)
	assert.Equal(t, "free", byFile["ar_current_h100_1n8g.txt"][0].Pin.Source)

	var msgs []string
	for _, p := range probs {
		msgs = append(msgs, p.Error())
	}
	assert.Contains(t, msgs, filepath.Join(dir, "notes.txt")+":3: no nccl-tests table (no header and no data row) in the file")
	assert.Contains(t, msgs, pre.Warnings[0].Error())
	for _, p := range probs {
		assert.NotEmpty(t, p.File)
		assert.Positive(t, p.Line, p.Error())
	}
	// Every sweep's Bad and Warnings are among the problems.
	n := 1 // notes.txt
	for _, s := range sweeps {
		n += len(s.Bad) + len(s.Warnings)
	}
	assert.Len(t, probs, n)
}

func TestLoadSweepsManifest(t *testing.T) {
	man := filepath.Join("testdata", "manifests", "pins.toml")
	sweeps, probs, err := LoadSweeps(man)
	require.NoError(t, err)
	require.Len(t, sweeps, 2)
	assert.Equal(t, filepath.Join("testdata", "sweeps", "ar_current_h100_1n8g.txt"), sweeps[0].File)
	assert.Equal(t, Pin{Proto: "^LL128", Source: "manifest", AlgoSource: "free", ProtoSource: "manifest"}, sweeps[0].Pin)
	assert.Equal(t, "2.30.7", sweeps[0].NCCLVersion, "the file's version is kept")
	assert.Equal(t, "Ring", sweeps[1].Pin.Algo)
	var msgs []string
	for _, p := range probs {
		msgs = append(msgs, p.Error())
	}
	assert.Equal(t, []string{
		man + ":6: ../sweeps/ar_current_h100_1n8g.txt: nccl_version 2.29.1, but the file says 2.30.7",
	}, msgs)
}

func TestLoadSweepsErrors(t *testing.T) {
	_, _, err := LoadSweeps(filepath.Join("testdata", "nowhere"))
	assert.Error(t, err)
	_, _, err = LoadSweeps(filepath.Join("testdata", "manifests", "unknown_key.toml"))
	assert.ErrorContains(t, err, "unknown_key.toml:7: unknown key")

	// A directory whose manifest does not decode is an error; a file that cannot be read is a problem.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestName), []byte("[[sweep]]\nfile = 1\n"), 0o644))
	_, _, err = LoadSweeps(dir)
	assert.ErrorContains(t, err, "file must be a string")

	dir = t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub.txt"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.log"), []byte("nothing\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "b.out"), []byte(strings.Repeat("x", linescan.MaxBytes+1)), 0o644))
	sweeps, probs, err := LoadSweeps(dir)
	require.NoError(t, err)
	assert.Empty(t, sweeps)
	require.Len(t, probs, 2)
	assert.Equal(t, filepath.Join(dir, "a.log")+":1: no nccl-tests table (no header and no data row) in the file", probs[0].Error())
	assert.Equal(t, filepath.Join(dir, "b.out")+":1: line longer than 16777216 bytes", probs[1].Error())

	// Manifest facts that disagree with the file, and a collective the file names differently.
	dir = t.TempDir()
	data, err := os.ReadFile(filepath.Join("testdata", "sweeps", "ar_failed.txt"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "f.txt"), data, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "g.txt"), []byte(strings.Replace(string(data),
		"# Collective test starting: all_reduce_perf", "# Collective test starting: alltoall_perf", 1)), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "m.toml"), []byte(
		"[[sweep]]\nfile = \"f.txt\"\ncoll = \"allgather\"\nnodes = 2\ngpus_per_node = 4\nnccl_version = \"2.26.5\"\n"+
			"[[sweep]]\nfile = \""+filepath.Join(dir, "g.txt")+"\"\ncoll = \"allreduce\"\nalgo = \"NVLS\"\n"), 0o644))
	sweeps, _, err = LoadSweeps(filepath.Join(dir, "m.toml"))
	require.NoError(t, err)
	require.Len(t, sweeps, 2)
	var msgs []string
	for _, w := range sweeps[0].Warnings[1:] {
		msgs = append(msgs, w.Msg)
	}
	assert.Equal(t, []string{`f.txt: coll "allgather", but the file runs AllReduce`,
		"f.txt: nodes = 2, but the file's rank lines give 1",
		"f.txt: gpus_per_node = 4, but the file's rank lines give 8"}, msgs)
	last := sweeps[1].Warnings[len(sweeps[1].Warnings)-1]
	assert.Contains(t, last.Msg, `coll "allreduce", but the file runs alltoall_perf`)
	assert.False(t, sweeps[1].CollKnown)
}
