package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/plugin/shimtable"
)

const topoDir = "../../capabilities/testdata/topology/"

func runCLI(t *testing.T, stdin string, args ...string) (string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), err
}

func explainJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	out, err := runCLI(t, "", append([]string{"explain", "--json"}, args...)...)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	return m
}

// clearNCCLEnv keeps the developer's NCCL_* variables out of the tests.
func clearNCCLEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "NCCL_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

func readVectors(t *testing.T, path string, fields int) [][]string {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var rows [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		fs := strings.Fields(line)
		require.Len(t, fs, fields, line)
		rows = append(rows, fs)
	}
	require.NoError(t, sc.Err())
	return rows
}

func menuCell(t *testing.T, m map[string]any, algo, proto string) map[string]any {
	for _, c := range m["menu"].([]any) {
		cell := c.(map[string]any)
		if cell["algo"] == algo && cell["proto"] == proto {
			return cell
		}
	}
	t.Fatalf("no menu cell %s/%s", algo, proto)
	return nil
}

// TestS13PicksJSON reproduces every §13 pick through the CLI's --json from the topology files.
func TestS13PicksJSON(t *testing.T) {
	clearNCCLEnv(t)
	for _, v := range readVectors(t, "../../planner/testdata/picks.txt", 8) {
		m := explainJSON(t, "--topology", topoDir+v[0]+".toml", "--coll", v[1], "--bytes", v[2])
		assert.Equal(t, v[3], m["algo"], v)
		assert.Equal(t, v[4], m["proto"], v)
		want, _ := strconv.ParseFloat(v[5], 64)
		assert.InDelta(t, want, m["time_us"], 0.005, v)
		assert.EqualValues(t, mustAtoi(v[6]), m["channels"], v)
		assert.EqualValues(t, mustAtoi(v[7])*32, m["threads"], v)
		assert.EqualValues(t, mustAtoi(v[7]), m["warps"], v)
		assert.Contains(t, m, "chunk_bytes")
		assert.Len(t, m["menu"], 21)
	}
}

// TestS13MenuJSON checks every §13 lat/bw entry in the JSON menu.
func TestS13MenuJSON(t *testing.T) {
	clearNCCLEnv(t)
	for _, v := range readVectors(t, "../../costmodel/testdata/s13.txt", 6) {
		m := explainJSON(t, "--topology", topoDir+strings.ToLower(v[0])+".toml", "--coll", v[1], "--bytes", "1M")
		c := menuCell(t, m, v[2], v[3])
		lat, _ := strconv.ParseFloat(v[4], 64)
		bw, _ := strconv.ParseFloat(v[5], 64)
		assert.InDelta(t, lat, c["lat_us"], 0.005, v)
		assert.InDelta(t, bw, c["bw_gbps"], 0.005+bw*1e-6, v)
		assert.Equal(t, "", c["reason"], v)
		assert.Greater(t, c["time_us"], 0.0, v)
	}
	// Illegal cells: time -1 and a reason.
	m := explainJSON(t, "--topology", topoDir+"s1.toml", "--coll", "allreduce", "--bytes", "1M")
	c := menuCell(t, m, "COLLNET_DIRECT", "SIMPLE")
	assert.EqualValues(t, -1, c["time_us"])
	assert.NotEmpty(t, c["reason"])
}

func mustAtoi(s string) int {
	v, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return v
}

// TestH100Picks is the acceptance on the embedded table: RING/LL at 4 KiB and 1 MiB,
// NVLS/SIMPLE from 2 MiB, as NCCL 2.30 on 8xH100 (seed 000, data/seed/h100-1n8g-picks.csv).
func TestH100Picks(t *testing.T) {
	clearNCCLEnv(t)
	for _, tc := range []struct{ bytes, algo, proto string }{
		{"4KiB", "RING", "LL"}, {"1MiB", "RING", "LL"}, {"2MiB", "NVLS", "SIMPLE"},
		{"64MiB", "NVLS", "SIMPLE"}, {"4GiB", "NVLS", "SIMPLE"},
	} {
		m := explainJSON(t, "--node", "h100", "--coll", "allreduce", "--bytes", tc.bytes)
		assert.Equal(t, tc.algo, m["algo"], tc.bytes)
		assert.Equal(t, tc.proto, m["proto"], tc.bytes)
	}
	out, err := runCLI(t, "", "explain", "--node", "h100", "--coll", "allreduce", "--bytes", "1MiB")
	require.NoError(t, err)
	assert.Contains(t, out, "-> RING/LL")
	assert.Contains(t, out, "COLLNET_DIRECT")
}

// TestEnvPrecedence: --algo/--proto win over the topology's [env], which wins over the process
// environment; the JSON says which source set each.
func TestEnvPrecedence(t *testing.T) {
	clearNCCLEnv(t)
	dir := t.TempDir()
	data, err := os.ReadFile(topoDir + "s1.toml")
	require.NoError(t, err)
	file := filepath.Join(dir, "s1env.toml")
	require.NoError(t, os.WriteFile(file, append(data, []byte("\n[env]\nNCCL_PROTO = \"simple\"\nNCCL_ALGO = \"tree\"\n")...), 0o644))
	t.Setenv("NCCL_PROTO", "LL")
	t.Setenv("NCCL_NTHREADS", "256")

	m := explainJSON(t, "--topology", file, "--coll", "allreduce", "--bytes", "4K")
	assert.Equal(t, "TREE", m["algo"])
	assert.Equal(t, "SIMPLE", m["proto"])
	env := m["env"].(map[string]any)
	assert.Equal(t, map[string]any{"value": "simple", "source": "topology"}, env["NCCL_PROTO"])
	assert.Equal(t, map[string]any{"value": "256", "source": "process"}, env["NCCL_NTHREADS"])

	m = explainJSON(t, "--topology", file, "--coll", "allreduce", "--bytes", "4K", "--algo", "ring", "--proto", "ll128")
	assert.Equal(t, "RING", m["algo"])
	assert.Equal(t, "LL128", m["proto"])
	env = m["env"].(map[string]any)
	assert.Equal(t, "flag", env["NCCL_ALGO"].(map[string]any)["source"])

	m = explainJSON(t, "--topology", topoDir+"s1.toml", "--coll", "allreduce", "--bytes", "64M")
	assert.Equal(t, "LL", m["proto"], "process NCCL_PROTO applies without flag or [env]")
}

// TestBadInput: each gives one error line and exit status 2 (a usageError), never a panic.
func TestBadInput(t *testing.T) {
	clearNCCLEnv(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
		return p
	}
	s1, err := os.ReadFile(topoDir + "s1.toml")
	require.NoError(t, err)
	malformed := write("malformed.toml", "n_nodes = = 1\n")
	unknown := write("unknown.toml", string(s1)+"\nbogus_key = 1\n")
	mistyped := write("mistyped.toml", strings.Replace(string(s1), "n_ranks = 8", `n_ranks = "8"`, 1))
	fewRanks := write("few.toml", strings.Replace(string(s1), "n_nodes = 1", "n_nodes = 16", 1))
	base := []string{"explain", "--topology", topoDir + "s1.toml", "--coll", "allreduce", "--bytes", "1M"}
	with := func(i int, v string) []string {
		a := append([]string(nil), base...)
		a[i] = v
		return a
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed toml", with(2, malformed), "malformed.toml"},
		{"unknown key", with(2, unknown), "bogus_key"},
		{"mistyped key", with(2, mistyped), "n_ranks"},
		{"ranks below nodes", with(2, fewRanks), "n_ranks"},
		{"missing file", with(2, filepath.Join(dir, "nope.toml")), "nope.toml"},
		{"negative size", with(6, "-4K"), "negative"},
		{"unparsable size", with(6, "lots"), "lots"},
		{"unknown coll", with(4, "alltoall"), "alltoall"},
		{"unknown op", append(base, "--op", "xor"), "xor"},
		{"unknown dtype", append(base, "--dtype", "int4"), "int4"},
		{"bad algo", append(base, "--algo", "ring,rng"), "rng"},
		{"pipe ops", append(base, "--pipe-ops", "0"), "pipe ops"},
		{"two sources", append(base, "--node", "h100"), "exactly one"},
		{"unknown node", []string{"explain", "--node", "h999", "--bytes", "1"}, "h999"},
		{"nodes zero", []string{"explain", "--node", "h100", "--nodes", "0", "--bytes", "1"}, "--nodes"},
		{"no bytes", []string{"explain", "--node", "h100"}, "--bytes"},
		{"bad flag", []string{"explain", "--frob"}, "frob"},
		{"no command", nil, "no command"},
		{"unknown command", []string{"plan"}, "plan"},
		{"query bad line", []string{"query", "--node", "h100"}, "stdin:2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdin := ""
			if tc.name == "query bad line" {
				stdin = "allreduce,1M\nallreduce,1Q\n"
			}
			_, err := runCLI(t, stdin, tc.args...)
			require.Error(t, err)
			var ue usageError
			assert.True(t, errors.As(err, &ue), "want exit status 2, got %v", err)
			assert.Contains(t, err.Error(), tc.want)
			assert.NotContains(t, strings.TrimSpace(err.Error()), "\n", "one error line")
		})
	}
}

func TestQuery(t *testing.T) {
	clearNCCLEnv(t)
	in := "coll,bytes\nallreduce,4K\n# comment\n\nallgather,64M,sum,float\n"
	out, err := runCLI(t, in, "query", "--topology", topoDir+"s1.toml")
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	assert.Equal(t, csvHeader, lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "AllReduce,4096,sum,float32,1,RING,LL,15.05"), lines[1])
	assert.True(t, strings.HasPrefix(lines[2], "AllGather,67108864,"), lines[2])

	// "none" is not an op: a clear error naming the line.
	_, err = runCLI(t, "allgather,64M,none\n", "query", "--topology", topoDir+"s1.toml")
	assert.ErrorContains(t, err, "stdin:1")

	out, err = runCLI(t, `{"coll":"allgather","bytes":"64MiB"}`+"\n"+`{"coll":"allreduce","bytes":2097152,"pipe_ops":1}`+"\n",
		"query", "--topology", topoDir+"s1.toml")
	require.NoError(t, err)
	var a, b answerJSON
	ls := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, ls, 2)
	require.NoError(t, json.Unmarshal([]byte(ls[0]), &a))
	require.NoError(t, json.Unmarshal([]byte(ls[1]), &b))
	assert.Equal(t, "RING", a.Algo)
	assert.Equal(t, "SIMPLE", a.Proto)
	assert.InDelta(t, 215.70, float64(a.TimeUS), 0.005)
	assert.Equal(t, "NVLS", b.Algo)
	assert.InDelta(t, 36.47, float64(b.TimeUS), 0.005)
	_, err = runCLI(t, `{"coll":"allreduce","bytes":1,"frob":2}`+"\n", "query", "--topology", topoDir+"s1.toml")
	assert.ErrorContains(t, err, "frob")
}

func TestMap(t *testing.T) {
	clearNCCLEnv(t)
	svg := filepath.Join(t.TempDir(), "map.svg")
	out, err := runCLI(t, "", "map", "--topology", topoDir+"s2.toml", "--coll", "allreduce", "--min", "8", "--max", "1G", "--svg", svg)
	require.NoError(t, err)
	assert.Contains(t, out, "TREE/LL -> TREE/LL128")
	assert.Contains(t, out, "-> NVLS_TREE/SIMPLE")
	data, err := os.ReadFile(svg)
	require.NoError(t, err)
	dec := xml.NewDecoder(bytes.NewReader(data))
	for {
		_, err := dec.Token()
		if err != nil {
			require.ErrorContains(t, err, "EOF", "well-formed SVG")
			break
		}
	}
	assert.Contains(t, string(data), "argmin")
	assert.Contains(t, string(data), "NVLS_TREE/SIMPLE")
	_, err = runCLI(t, "", "map", "--topology", topoDir+"s2.toml", "--min", "1G", "--max", "1K")
	assert.ErrorContains(t, err, "--min")
}

func TestTablesCommand(t *testing.T) {
	out, err := runCLI(t, "", "tables")
	require.NoError(t, err)
	for _, name := range []string{"h100", "h100-4", "h200", "a100", "v100", "l40s-pcie", "l40s-4", "gh200", "gh200-4", "b200", "cpu"} {
		assert.Contains(t, out, name)
	}
	out, err = runCLI(t, "", "tables", "h100")
	require.NoError(t, err)
	assert.Contains(t, out, "reference §13 S1")
	_, err = runCLI(t, "", "tables", "nope")
	assert.Error(t, err)
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"explain", "-h"}, {"query", "-h"}, {"map", "-h"}, {"tables", "-h"}, {"help"}} {
		_, err := runCLI(t, "", args...)
		assert.NoError(t, err, args)
	}
}

// TestAllTablesExplain: every embedded table plans every collective at 1, 2 and 4 nodes.
func TestAllTablesExplain(t *testing.T) {
	clearNCCLEnv(t)
	for _, name := range []string{"h100", "h100-4", "h200", "a100", "v100", "l40s-pcie", "l40s-4", "gh200", "gh200-4", "b200", "cpu"} {
		for _, nodes := range []string{"1", "2", "4"} {
			for _, coll := range []string{"broadcast", "reduce", "allgather", "reducescatter", "allreduce"} {
				m := explainJSON(t, "--node", name, "--nodes", nodes, "--coll", coll, "--bytes", "1M")
				assert.NotEmpty(t, m["algo"], name, nodes, coll)
			}
		}
	}
}

func TestCompile(t *testing.T) {
	clearNCCLEnv(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "h100.cptt")
	text, err := runCLI(t, "", "compile", "--node", "h100", "--nodes", "1,2", "--ranks-per-node", "8", "--constants", "-o", out)
	require.NoError(t, err)
	assert.Contains(t, text, "2 blocks")
	data, err := os.ReadFile(out)
	require.NoError(t, err)
	tb, err := shimtable.Decode(data)
	require.NoError(t, err)
	require.Len(t, tb.Blocks, 2)
	// The 1-node block's AllReduce picks agree with explain: RING/LL at 1 MiB, NVLS from 2 MiB.
	assert.Equal(t, shimtable.Plan{Algo: 1, Proto: 0, Chunk: 32768}, tb.Lookup(1, 8, 4, 1, 1<<20)[0])
	assert.Equal(t, 4, tb.Lookup(1, 8, 4, 1, 2<<20)[0].Algo)

	_, err = runCLI(t, "", "compile", "--topology", topoDir+"s2.toml", "-o", filepath.Join(dir, "s2.cptt"))
	require.NoError(t, err)
	for _, args := range [][]string{
		{"compile", "--node", "h100"},
		{"compile", "--node", "h100", "--nodes", "0", "-o", out},
		{"compile", "--node", "h100", "--topology", topoDir + "s2.toml", "-o", out},
		{"compile", "--topology", topoDir + "s2.toml", "--nodes", "2", "-o", out},
		{"compile", "--node", "h100", "--ranked", "9", "-o", out},
		{"compile", "--node", "nope", "-o", out},
	} {
		_, err := runCLI(t, "", args...)
		var ue usageError
		assert.True(t, errors.As(err, &ue), "%v: %v", args, err)
	}
}
