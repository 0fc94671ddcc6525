package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/plugin/shimtable"
	"github.com/collplan/collplan/service"
	"github.com/collplan/collplan/tables"
)

// equalityCase is one query, as planner explain's flags and as the service's JSON.
type equalityCase struct {
	args  []string
	query map[string]any
}

// serveHandler is a loopback service with the §13 topology files, named as the flags name them.
func serveHandler(t *testing.T) http.Handler {
	t.Helper()
	srv, err := service.New(service.Config{Listen: "127.0.0.1:7480", Log: io.Discard,
		Topologies: []string{topoDir + "s1.toml", topoDir + "s2.toml", topoDir + "s3.toml"}})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	return srv.Handler()
}

func post(t *testing.T, h http.Handler, path string, body any) *httptest.ResponseRecorder {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req := httptest.NewRequest("POST", path, bytes.NewReader(b))
	req.Host = "127.0.0.1:7480"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// s13Cases are the reference §13 scenarios: every pick of planner/testdata/picks.txt and every
// (scenario, collective) of costmodel/testdata/s13.txt at 1 MiB, on the topology files.
func s13Cases(t *testing.T) []equalityCase {
	var out []equalityCase
	add := func(topo, coll, size string) {
		out = append(out, equalityCase{
			args:  []string{"--topology", topoDir + topo + ".toml", "--coll", coll, "--bytes", size},
			query: map[string]any{"topology": topo, "coll": coll, "bytes": size}})
	}
	for _, v := range readVectors(t, "../../planner/testdata/picks.txt", 8) {
		add(v[0], v[1], v[2])
	}
	seen := map[string]bool{}
	for _, v := range readVectors(t, "../../costmodel/testdata/s13.txt", 6) {
		k := strings.ToLower(v[0]) + " " + v[1]
		if !seen[k] {
			seen[k] = true
			add(strings.ToLower(v[0]), v[1], "1M")
		}
	}
	return out
}

// randomCases are n random queries over every embedded table: node counts, collectives, sizes,
// types, ops, pipe ops, filters, fabrics, ranks per node and overlays drawn from a fixed seed.
func randomCases(n int) []equalityCase {
	r := rand.New(rand.NewPCG(14, 2026))
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	names, fabrics := tables.Names(), tables.FabricNames()
	var out []equalityCase
	for i := 0; i < n; i++ {
		name := names[i%len(names)]
		nodes := []int{1, 2, 3, 4, 8, 16, 64, 512, 4096}[r.IntN(9)]
		size := r.Int64N(1 << (3 + r.IntN(32)))
		c := equalityCase{args: []string{"--node", name, "--nodes", strconv.Itoa(nodes), "--bytes", strconv.FormatInt(size, 10)},
			query: map[string]any{"node": name, "nodes": nodes, "bytes": size}}
		flag := func(f, k string, v any) {
			c.args = append(c.args, "--"+f, fmt.Sprint(v))
			c.query[k] = v
		}
		flag("coll", "coll", pick("allreduce", "allgather", "reducescatter", "broadcast", "reduce"))
		flag("dtype", "dtype", pick("float32", "half", "bfloat16", "int8", "double", "fp8e4m3"))
		flag("op", "op", pick("sum", "max", "avg", "prod"))
		if r.IntN(3) == 0 {
			flag("pipe-ops", "pipe_ops", 1+r.IntN(4))
		}
		if r.IntN(4) == 0 {
			flag("algo", "algo", pick("ring", "tree", "^nvls", "ring,tree", "allreduce:tree;allgather:ring"))
		}
		if r.IntN(4) == 0 {
			flag("proto", "proto", pick("simple", "ll,ll128", "^ll"))
		}
		if r.IntN(5) == 0 {
			flag("fabric", "fabric", fabrics[r.IntN(len(fabrics))])
		}
		if r.IntN(6) == 0 {
			flag("gpus-per-node", "gpus_per_node", []int{1, 2, 4, 8}[r.IntN(4)])
		}
		if r.IntN(5) == 0 {
			c.args = append(c.args, "--no-overlay")
			c.query["no_overlay"] = true
		}
		if r.IntN(5) == 0 {
			c.args = append(c.args, "--reg-buff")
			c.query["reg_buff"] = true
		}
		out = append(out, c)
	}
	return out
}

// TestServeEqualsExplain: /v1/explain's body for a query is planner explain --json's stdout for
// the same flags, byte for byte, in a clean environment; /v1/plan's body is planner explain --json
// --decision's stdout, byte for byte, and has explain's values under the same keys, plus its
// policy; and a query the command refuses is a 400 with the
// command's message. The service's own NCCL_ALGO/NCCL_PROTO are set to values that would change
// the picks, and must not be read.
func TestServeEqualsExplain(t *testing.T) {
	clearNCCLEnv(t)
	h := serveHandler(t)
	cases := append(s13Cases(t), randomCases(300)...)
	refused := 0
	for i, c := range cases {
		name := fmt.Sprintf("%d %s", i, strings.Join(c.args, " "))
		os.Setenv("NCCL_ALGO", "COLLNET_DIRECT")
		os.Setenv("NCCL_PROTO", "LL")
		rec := post(t, h, "/v1/explain", c.query)
		recPlan := post(t, h, "/v1/plan", c.query)
		os.Unsetenv("NCCL_ALGO")
		os.Unsetenv("NCCL_PROTO")
		want, err := runCLI(t, "", append([]string{"explain", "--json"}, c.args...)...)
		if err != nil {
			refused++
			var ue usageError
			require.ErrorAs(t, err, &ue, name)
			assert.Equal(t, 400, rec.Code, name)
			var e service.Error
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &e), name)
			assert.Equal(t, err.Error(), e.Error, name)
			assert.Equal(t, 400, recPlan.Code, name)
			continue
		}
		require.Equal(t, 200, rec.Code, "%s: %s", name, rec.Body.String())
		assert.Equal(t, want, rec.Body.String(), name)

		require.Equal(t, 200, recPlan.Code, name)
		wantPlan, err := runCLI(t, "", append([]string{"explain", "--json", "--decision"}, c.args...)...)
		require.NoError(t, err, name)
		assert.Equal(t, wantPlan, recPlan.Body.String(), name)
		var full map[string]json.RawMessage
		require.NoError(t, json.Unmarshal([]byte(want), &full))
		var plan map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(recPlan.Body.Bytes(), &plan))
		assert.Equal(t, `"builtin"`, string(plan["policy"]), name)
		for k, v := range plan {
			if k == "policy" {
				continue
			}
			var compact bytes.Buffer
			require.NoError(t, json.Compact(&compact, full[k]), "%s: key %s", name, k)
			assert.Equal(t, compact.String(), string(v), "%s: key %s", name, k)
		}
	}
	t.Logf("%d queries, %d refused by both", len(cases), refused)
	assert.Less(t, refused, len(cases)/4, "most random queries must be answerable, or the test checks little")
}

// TestQueryServer: planner query --server URL prints what planner query prints for the same stdin
// and flags, row for row, for CSV and JSON lines, a node table and a topology, with and without a
// tuner; a line the service refuses is an error naming the stdin line.
func TestQueryServer(t *testing.T) {
	clearNCCLEnv(t)
	conf := writeFile(t, "rules.conf", "allreduce,0,65536,ring,ll,4,-1,-1\n")
	srv, err := service.New(service.Config{Listen: "127.0.0.1:7480", Log: io.Discard,
		Topologies: []string{topoDir + "s2.toml"},
		Tuners:     []plugin.Spec{{Name: filepath.Join(tunerBin, "tuner-rules"), Config: conf}}})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	stdin := "coll,bytes\nallreduce,4K\nallgather,64M,sum,bfloat16\n# a comment\n" +
		`{"coll":"allreduce","bytes":"1MiB"}` + "\n" + `{"coll":"reducescatter","bytes":65536,"dtype":"half","pipe_ops":2}` + "\n" +
		"broadcast,1G,sum,float32,3\n"
	for _, flags := range [][]string{
		{"--node", "h100"},
		{"--node", "h200", "--nodes", "4", "--proto", "^LL128"},
		{"--node", "b200", "--nodes", "2", "--fabric", "ib-ndr", "--gpus-per-node", "4"},
		{"--topology", topoDir + "s2.toml"},
		{"--node", "h100", "--nodes", "2", "--tuner", "rules"},
	} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			local := flags
			if slices.Contains(flags, "rules") {
				local = append(slices.Clone(flags[:len(flags)-1]), filepath.Join(tunerBin, "tuner-rules"), "--tuner-config", conf)
			}
			want, _, err := runTuner(t, stdin, append([]string{"query"}, local...)...)
			require.NoError(t, err)
			got, _, err := runTuner(t, stdin, append([]string{"query", "--server", ts.URL}, flags...)...)
			require.NoError(t, err)
			assert.Equal(t, want, got)
			if slices.Contains(flags, "rules") {
				assert.Contains(t, got, ",rules\n", "rows labelled with the tuner")
			}
		})
	}
	for _, tc := range []struct {
		name, stdin string
		flags       []string
		want        string
	}{
		{"refused line", "allreduce,4K\nallreduce,4K,sum,float32,100000\n", []string{"--node", "h100"}, "stdin:2: pipe_ops 100000: want 1..65536"},
		{"bad line here", "allreduce\n", []string{"--node", "h100"}, "stdin:1: want coll,bytes"},
		{"unknown topology", "allreduce,4K\n", []string{"--topology", topoDir + "s1.toml"}, `stdin:1: unknown topology "s1"`},
		{"a table file", "allreduce,4K\n", []string{"--table", "../../tables/h100.toml"}, "the service has no --table FILE"},
		{"a tuner path", "allreduce,4K\n", []string{"--node", "h100", "--tuner", "/bin/true"}, "--tuner names one of the service's tuners"},
		{"not a URL", "allreduce,4K\n", []string{"--node", "h100", "--server", "localhost:7480"}, "want an http:// or https:// URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"query", "--server", ts.URL}, tc.flags...)
			_, _, err := runTuner(t, tc.stdin, args...)
			require.Error(t, err)
			var ue usageError
			assert.ErrorAs(t, err, &ue)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	t.Setenv("NCCL_ALGO", "ring")
	_, _, err = runTuner(t, "allreduce,4K\n", "query", "--server", ts.URL, "--node", "h100")
	assert.ErrorContains(t, err, `NCCL_ALGO="ring" is set here, and the service does not read this environment`)
}

// TestServeCompileEqualsCompile: /v1/compile's download is the file planner compile writes for the
// same flags, byte for byte.
func TestServeCompileEqualsCompile(t *testing.T) {
	clearNCCLEnv(t)
	h := serveHandler(t)
	for _, tc := range []struct {
		args []string
		body map[string]any
		name string
	}{
		{[]string{"--node", "h100", "--nodes", "1,2,8"}, map[string]any{"node": "h100", "node_counts": []int{1, 2, 8}}, "h100.cptt"},
		{[]string{"--node", "cpu", "--nodes", "1,2", "--ranks-per-node", "2", "--pipe-ops", "2", "--ranked", "2", "--constants"},
			map[string]any{"node": "cpu", "node_counts": []int{1, 2}, "ranks_per_node": []int{2}, "pipe_ops": 2, "ranked": 2, "constants": true}, "cpu.cptt"},
		{[]string{"--node", "cpu", "--nodes", "2", "--no-overlay", "--fabric", "ib-ndr"},
			map[string]any{"node": "cpu", "node_counts": []int{2}, "no_overlay": true, "fabric": "ib-ndr"}, "cpu.cptt"},
		{[]string{"--topology", topoDir + "s2.toml"}, map[string]any{"topology": "s2"}, "topology.cptt"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "t.cptt")
			_, err := runCLI(t, "", append([]string{"compile", "-o", out}, tc.args...)...)
			require.NoError(t, err)
			want, err := os.ReadFile(out)
			require.NoError(t, err)
			rec := post(t, h, "/v1/compile", tc.body)
			require.Equal(t, 200, rec.Code, rec.Body.String())
			assert.Equal(t, want, rec.Body.Bytes())
			assert.Equal(t, "application/octet-stream", rec.Header().Get("Content-Type"))
			assert.Equal(t, fmt.Sprintf("attachment; filename=%q", tc.name), rec.Header().Get("Content-Disposition"))
			assert.Equal(t, fmt.Sprintf("%016x", shimtable.Checksum(want)), rec.Header().Get("Collplan-Checksum"))
		})
	}
}

// TestServeDiffEqualsDiff: /v1/diff answers planner diff --json for the same sides (compacted),
// for two tables, an overlay against none, two tuners on one table, and uploads (a table file's
// text and an overlay's), whose labels name the upload instead of the file.
func TestServeDiffEqualsDiff(t *testing.T) {
	clearNCCLEnv(t)
	conf := writeFile(t, "rules.conf", "allreduce,0,65536,ring,ll,4,-1,-1\nallgather,0,1048576,ring,simple,-1,-1,-1\n")
	srv, err := service.New(service.Config{Listen: "127.0.0.1:7480", Log: io.Discard,
		Tuners: []plugin.Spec{{Name: filepath.Join(tunerBin, "tuner-rules"), Config: conf}}})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	h := srv.Handler()
	h100, err := os.ReadFile("../../tables/h100.toml")
	require.NoError(t, err)
	cpuFit, err := os.ReadFile("../../tables/cpu.fit.toml")
	require.NoError(t, err)
	for _, tc := range []struct {
		name       string
		args       []string
		body       map[string]any
		sameLabels bool
	}{
		{"two tables", []string{"--a", "h100", "--b", "h200", "--coll", "allreduce,allgather", "--nodes", "1,2,4"},
			map[string]any{"a": map[string]any{"node": "h100"}, "b": map[string]any{"node": "h200"}, "colls": []string{"allreduce", "allgather"}, "node_counts": []int{1, 2, 4}}, true},
		{"overlay against none", []string{"--a", "cpu", "--b", "cpu", "--b-no-overlay", "--nodes", "1,2", "--min", "1K", "--max", "1G"},
			map[string]any{"a": map[string]any{"node": "cpu"}, "b": map[string]any{"node": "cpu", "no_overlay": true}, "node_counts": []int{1, 2}, "min": "1K", "max": "1G"}, true},
		{"two tuners", []string{"--a", "h100", "--b-tuner", filepath.Join(tunerBin, "tuner-rules"), "--b-tuner-config", conf, "--nodes", "1,2", "--dtype", "bfloat16"},
			map[string]any{"a": map[string]any{"node": "h100"}, "b": map[string]any{"node": "h100", "tuner": "rules"}, "node_counts": []int{1, 2}, "dtype": "bfloat16"}, true},
		{"filters on both", []string{"--a", "h100", "--b", "b200", "--proto", "^LL", "--nodes", "2", "--fabric", "ib-ndr"},
			map[string]any{"a": map[string]any{"node": "h100"}, "b": map[string]any{"node": "b200"}, "proto": "^LL", "node_counts": []int{2}, "fabric": "ib-ndr"}, true},
		{"an uploaded table", []string{"--a", "../../tables/h100.toml", "--b", "h200", "--coll", "allreduce", "--nodes", "1,2"},
			map[string]any{"a": map[string]any{"table_toml": string(h100)}, "b": map[string]any{"node": "h200"}, "colls": []string{"allreduce"}, "node_counts": []int{1, 2}}, false},
		{"an uploaded overlay", []string{"--a", "cpu", "--a-overlay", "../../tables/cpu.fit.toml", "--b", "cpu", "--b-no-overlay", "--nodes", "1"},
			map[string]any{"a": map[string]any{"node": "cpu", "overlay_toml": string(cpuFit)}, "b": map[string]any{"node": "cpu", "no_overlay": true}, "node_counts": []int{1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runTuner(t, "", append([]string{"diff", "--json"}, tc.args...)...)
			require.NoError(t, err)
			rec := post(t, h, "/v1/diff", tc.body)
			require.Equal(t, 200, rec.Code, rec.Body.String())
			var want, got map[string]any
			require.NoError(t, json.Unmarshal([]byte(out), &want))
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
			if !tc.sameLabels {
				assert.Contains(t, got["a"], "(uploaded)")
				delete(want, "a")
				delete(got, "a")
			}
			if tc.name == "two tuners" {
				assert.Equal(t, "h100 under tuner rules", got["b"])
			}
			assert.Equal(t, want, got)
			assert.Positive(t, got["changed"], "the cases are chosen so that picks change")
		})
	}
}

// TestServeCompareEqualsCompare: /v1/compare's report is planner compare's stdout for the same
// flags and sweeps (run from a directory where the sweeps lie in upload/, as the service names its
// uploads), and its notes are the command's stderr lines.
func TestServeCompareEqualsCompare(t *testing.T) {
	clearNCCLEnv(t)
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		require.NoError(t, err)
		return a
	}
	ringSimple := abs("testdata/ring_simple.conf")
	s1 := abs(topoDir + "s1.toml")
	srv, err := service.New(service.Config{Listen: "127.0.0.1:7480", Log: io.Discard, Topologies: []string{s1},
		Tuners: []plugin.Spec{{Name: filepath.Join(tunerBin, "tuner-rules"), Config: ringSimple}}})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	h := srv.Handler()
	t.Setenv("PATH", tunerBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, tc := range []struct {
		name, dir string
		args      []string
		body      map[string]any
	}{
		{"compare", "testdata/compare", []string{"--topology", s1, "--b", "rules", "--b-config", ringSimple},
			map[string]any{"topology": "s1", "b": "rules"}},
		{"partial", "testdata/compare-partial", []string{"--topology", s1, "--a", "rules", "--a-config", ringSimple, "--half", "oop"},
			map[string]any{"topology": "s1", "a": "rules", "half": "oop"}},
		{"a node table", "testdata/compare", []string{"--node", "h100", "--b", "rules", "--b-config", ringSimple},
			map[string]any{"node": "h100", "b": "rules"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sweeps := map[string]string{}
			entries, err := os.ReadDir(tc.dir)
			require.NoError(t, err)
			work := t.TempDir()
			require.NoError(t, os.Mkdir(filepath.Join(work, "upload"), 0o755))
			for _, e := range entries {
				b, err := os.ReadFile(filepath.Join(tc.dir, e.Name()))
				require.NoError(t, err)
				sweeps[e.Name()] = string(b)
				require.NoError(t, os.WriteFile(filepath.Join(work, "upload", e.Name()), b, 0o644))
			}
			tc.body["sweeps"] = sweeps
			rec := post(t, h, "/v1/compare", tc.body)
			t.Chdir(work)
			want, stderr, cmdErr := runTuner(t, "", append([]string{"compare", "--sweeps", "upload"}, tc.args...)...)
			if cmdErr != nil {
				assert.Equal(t, 400, rec.Code, rec.Body.String())
				assert.Contains(t, rec.Body.String(), strings.TrimPrefix(cmdErr.Error(), "planner: "))
				return
			}
			require.Equal(t, 200, rec.Code, rec.Body.String())
			var got service.Compared
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
			assert.Equal(t, want, got.Report)
			lines := []string{}
			for _, l := range strings.Split(strings.TrimRight(stderr, "\n"), "\n") {
				if l != "" {
					lines = append(lines, l)
				}
			}
			assert.Equal(t, lines, got.Notes)
		})
	}
}

// TestServeRefusesNonLoopback: planner serve on a non-loopback address without a token and TLS
// exits with status 2 and says what is missing, before listening.
func TestServeRefusesNonLoopback(t *testing.T) {
	// A case that started serving would hold the test until its deadline: every one must fail
	// before listening, so give them a listener that cannot collide with a real service.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"serve", "--listen", "0.0.0.0:7480"}, "refusing to start without --token-file and --tls-cert and --tls-key"},
		{[]string{"serve", "--listen", "192.0.2.7:7480", "--token-file", writeFile(t, "tok", "0123456789abcdef0123")}, "refusing to start without --tls-cert and --tls-key"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--max-batch", "0"}, "--max-batch 0: must be at least 1"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--max-body-bytes", "-1"}, "--max-body-bytes -1: must be at least 1"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--compile-queue", "0"}, "--compile-queue 0: must be at least 1"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--topology", "nope.toml"}, "--topology: open nope.toml"},
		{[]string{"serve", "--tuner", "rules", "--tuner", "fault", "--tuner-config", "x"}, "--tuner-config and --tuner-sha256 need exactly one --tuner"},
	} {
		_, err := runCLI(t, "", tc.args...)
		require.Error(t, err, tc.args)
		var ue usageError
		assert.ErrorAs(t, err, &ue, tc.args)
		assert.ErrorContains(t, err, tc.want)
	}
}

// TestServeTableFile: a --table file is named by its table name; its answers equal planner
// explain --table FILE's, with and without the overlay beside it; a reload reads the files again,
// so removing the overlay changes the answers only after it.
func TestServeTableFile(t *testing.T) {
	clearNCCLEnv(t)
	dir := t.TempDir()
	for _, f := range [][2]string{{"cpu.toml", "mycpu.toml"}, {"cpu.fit.toml", "mycpu.fit.toml"}} {
		b, err := os.ReadFile("../../tables/" + f[0])
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f[1]), b, 0o644))
	}
	file := filepath.Join(dir, "mycpu.toml")
	srv, err := service.New(service.Config{Listen: "127.0.0.1:7480", Log: io.Discard, Tables: []string{file}})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	h := srv.Handler()
	check := func(q map[string]any, args ...string) string {
		t.Helper()
		want, err := runCLI(t, "", append([]string{"explain", "--json", "--table", file}, args...)...)
		require.NoError(t, err)
		rec := post(t, h, "/v1/explain", q)
		require.Equal(t, 200, rec.Code, rec.Body.String())
		assert.Equal(t, want, rec.Body.String(), args)
		return want
	}
	withOverlay := check(map[string]any{"node": "mycpu", "nodes": 2, "bytes": "1M"}, "--nodes", "2", "--bytes", "1M")

	// compile and diff name the file's table too.
	out := filepath.Join(t.TempDir(), "t.cptt")
	_, err = runCLI(t, "", "compile", "--table", file, "--nodes", "1,2", "-o", out)
	require.NoError(t, err)
	wantTable, err := os.ReadFile(out)
	require.NoError(t, err)
	rec := post(t, h, "/v1/compile", map[string]any{"node": "mycpu", "node_counts": []int{1, 2}})
	require.Equal(t, 200, rec.Code, rec.Body.String())
	assert.Equal(t, wantTable, rec.Body.Bytes())
	wantDiff, err := runCLI(t, "", "diff", "--json", "--a", file, "--b", file, "--b-no-overlay", "--nodes", "1,2")
	require.NoError(t, err)
	rec = post(t, h, "/v1/diff", map[string]any{"a": map[string]any{"node": "mycpu"}, "b": map[string]any{"node": "mycpu", "no_overlay": true}, "node_counts": []int{1, 2}})
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var compact bytes.Buffer
	require.NoError(t, json.Compact(&compact, []byte(wantDiff)))
	assert.Equal(t, compact.String()+"\n", rec.Body.String())
	assert.Contains(t, withOverlay, `"file": "`+filepath.Join(dir, "mycpu.fit.toml")+`"`, "the overlay beside the file applied")
	check(map[string]any{"node": "mycpu", "nodes": 2, "bytes": "1M", "no_overlay": true}, "--nodes", "2", "--bytes", "1M", "--no-overlay")
	check(map[string]any{"node": "mycpu", "bytes": 4096, "coll": "allgather", "fabric": "ib-ndr", "nodes": 4}, "--bytes", "4096", "--coll", "allgather", "--fabric", "ib-ndr", "--nodes", "4")

	require.NoError(t, os.Remove(filepath.Join(dir, "mycpu.fit.toml")))
	q := map[string]any{"node": "mycpu", "nodes": 2, "bytes": "1M"}
	assert.Equal(t, withOverlay, post(t, h, "/v1/explain", q).Body.String(), "before the reload: the set read at start")
	_, err = srv.Reload()
	require.NoError(t, err)
	got := post(t, h, "/v1/explain", q).Body.String()
	assert.NotEqual(t, withOverlay, got)
	check(q, "--nodes", "2", "--bytes", "1M")

	_, err = service.New(service.Config{Listen: "127.0.0.1:7480", Log: io.Discard, Tables: []string{"../../tables/h100.toml"}})
	assert.ErrorContains(t, err, `"h100" is an embedded table's name`)
}
