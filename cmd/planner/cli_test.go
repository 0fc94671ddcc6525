package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/tables"
)

var (
	plannerOnce sync.Once
	plannerPath string
	plannerErr  error
)

// plannerBinary builds this command once, beside the tuners TestMain built (and removes).
func plannerBinary(t *testing.T) string {
	t.Helper()
	plannerOnce.Do(func() {
		p := filepath.Join(tunerBin, "planner")
		out, err := exec.Command("go", "build", "-o", p, "github.com/collplan/collplan/cmd/planner").CombinedOutput()
		if err != nil {
			plannerErr = errors.New(string(out))
		}
		plannerPath = p
	})
	require.NoError(t, plannerErr)
	return plannerPath
}

// runBinary runs the planner binary: its exit status, stdout and stderr.
func runBinary(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runBinaryStdin(t, "", args...)
}

// runBinaryStdin runs the planner binary with stdin.
func runBinaryStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(plannerBinary(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Env = append(os.Environ(), "PATH="+tunerBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, out.String(), errb.String()
}

// TestBadInvocations: every bad command line exits with status 2 and prints one line on stderr,
// prefixed "planner: " once, naming the problem; a flag error adds the hint where the flags are.
func TestBadInvocations(t *testing.T) {
	clearNCCLEnv(t)
	dir := t.TempDir()
	hint := func(cmd string) string { return "(run 'planner " + cmd + " -h' for the flags)" }
	for _, tc := range []struct {
		name  string
		args  []string
		want  []string
		stdin string
	}{
		{"explain unknown flag", []string{"explain", "--frob"}, []string{"-frob", hint("explain")}, ""},
		{"explain bad value", []string{"explain", "--node", "h100", "--nodes", "x"}, []string{`invalid value "x" for flag -nodes`, hint("explain")}, ""},
		{"explain stray argument", []string{"explain", "--node", "h100", "--bytes", "1M", "extra"}, []string{`"extra"`, hint("explain")}, ""},
		{"query unknown flag", []string{"query", "--frob"}, []string{"-frob", hint("query")}, ""},
		{"map unknown flag", []string{"map", "--frob"}, []string{"-frob", hint("map")}, ""},
		{"map bad value", []string{"map", "--node", "h100", "--pipe-ops", "two"}, []string{"-pipe-ops", hint("map")}, ""},
		{"tables unknown flag", []string{"tables", "--frob"}, []string{"-frob", hint("tables")}, ""},
		{"tables two names", []string{"tables", "h100", "h200"}, []string{"at most one", hint("tables")}, ""},
		{"compile unknown flag", []string{"compile", "--frob"}, []string{"-frob", hint("compile")}, ""},
		{"compare unknown flag", []string{"compare", "--frob"}, []string{"-frob", hint("compare")}, ""},
		{"no command", nil, []string{"no command", "planner -h"}, ""},
		{"unknown command", []string{"plan"}, []string{`"plan"`, "planner -h"}, ""},
		{"unknown node table", []string{"explain", "--node", "h999", "--bytes", "1M"}, []string{"h999"}, ""},
		{"missing topology", []string{"explain", "--topology", filepath.Join(dir, "nope.toml"), "--bytes", "1M"}, []string{"nope.toml"}, ""},
		{"bad bytes", []string{"explain", "--node", "h100", "--bytes", "1Q"}, []string{"--bytes", "1Q"}, ""},
		{"bad algo", []string{"explain", "--node", "h100", "--bytes", "1M", "--algo", "bogus"}, []string{"NCCL_ALGO", "bogus"}, ""},
		{"nothing left", []string{"explain", "--node", "h100", "--bytes", "1M", "--algo", "nvls", "--proto", "ll"}, []string{"no algorithm/protocol"}, ""},
		{"missing tuner config", []string{"explain", "--node", "h100", "--bytes", "1M", "--tuner", "rules", "--tuner-config", filepath.Join(dir, "nope.conf")}, []string{"nope.conf"}, ""},
		{"unknown tuner", []string{"explain", "--node", "h100", "--bytes", "1M", "--tuner", "nosuchtuner"}, []string{"nosuchtuner"}, ""},
		{"map range", []string{"map", "--node", "h100", "--min", "1G", "--max", "1K"}, []string{"--min"}, ""},
		{"unknown table", []string{"tables", "nope"}, []string{`"nope"`}, ""},
		{"compile without -o", []string{"compile", "--node", "h100"}, []string{"-o FILE"}, ""},
		{"query: nothing left", []string{"query", "--node", "h100", "--algo", "nvls", "--proto", "ll"}, []string{"stdin:1: no algorithm/protocol"}, "allreduce,1M\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runBinaryStdin(t, tc.stdin, tc.args...)
			assert.Equal(t, 2, code, stderr)
			assert.Empty(t, stdout)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			require.Len(t, lines, 1, "one line on stderr:\n%s", stderr)
			assert.True(t, strings.HasPrefix(lines[0], "planner: "), lines[0])
			assert.Equal(t, 1, strings.Count(lines[0], "planner: "), "prefixed once: %s", lines[0])
			for _, w := range tc.want {
				assert.Contains(t, lines[0], w)
			}
		})
	}
}

// TestHelpOutput: -h and --help print the command's whole usage to stdout and exit 0.
func TestHelpOutput(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // in stdout
	}{
		{[]string{"-h"}, []string{"usage: planner COMMAND", "explain", "compare"}},
		{[]string{"help"}, []string{"usage: planner COMMAND"}},
		{[]string{"explain", "-h"}, []string{"usage: planner explain", "-bytes", "-tuner-config", "flags:"}},
		{[]string{"explain", "--help"}, []string{"usage: planner explain", "-bytes"}},
		{[]string{"help", "explain"}, []string{"usage: planner explain", "-bytes"}},
		{[]string{"query", "-h"}, []string{"usage: planner query", "stdin", "-coll"}},
		{[]string{"map", "-h"}, []string{"usage: planner map", "-svg", "-min"}},
		{[]string{"compile", "-h"}, []string{"usage: planner compile", "-o"}},
		{[]string{"compare", "-h"}, []string{"usage: planner compare", "-sweeps"}},
		{[]string{"tables", "--help"}, []string{"usage: planner tables [--json] [NAME]", "planner tables NAME shows one table", "-json", "one JSON array"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runBinary(t, tc.args...)
			assert.Equal(t, 0, code)
			assert.Empty(t, stderr)
			for _, w := range tc.want {
				assert.Contains(t, stdout, w)
			}
		})
	}
}

// TestTablesJSON: planner tables --json lists every embedded table with the list's columns, and
// planner tables NAME --json (or --json NAME) shows one with its sources; both checked against
// tables.Names and tables.Load.
func TestTablesJSON(t *testing.T) {
	out, err := runCLI(t, "", "tables", "--json")
	require.NoError(t, err)
	var list []map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	names := tables.Names()
	require.Len(t, list, len(names))
	want := func(n *tables.Node) map[string]any {
		return map[string]any{"name": n.Name, "gpu": n.Node.GPU, "gpus_per_node": float64(n.Node.GPUsPerNode),
			"compute_capability": float64(n.Node.ComputeCapability), "cpu_arch": n.Node.CPUArch,
			"cpu_vendor": n.Node.CPUVendor, "nvls": n.Node.NVLSSupport, "estimated_inputs": float64(len(n.Estimated())),
			"overlay": n.Overlay}
	}
	for i, name := range names {
		n, err := tables.Load(name)
		require.NoError(t, err)
		assert.Equal(t, want(n), list[i], name)
	}
	for _, args := range [][]string{{"tables", "cpu", "--json"}, {"tables", "--json", "cpu"}} {
		out, err := runCLI(t, "", args...)
		require.NoError(t, err, args)
		var one map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &one), args)
		n, err := tables.Load("cpu")
		require.NoError(t, err)
		require.NotEmpty(t, n.Overlay, "cpu ships a fitted overlay")
		w := want(n)
		w["file"] = n.File
		sources := map[string]any{}
		for k, v := range n.Sources {
			sources[k] = v
		}
		w["sources"] = sources
		require.NotNil(t, n.Emulation, "cpu is an emulated node")
		w["emulation"] = map[string]any{"multicast_switch": n.Emulation.MulticastSwitch,
			"nvls_efficiency": n.Emulation.NVLSEfficiency, "reducing_network": n.Emulation.ReducingNetwork}
		assert.Equal(t, w, one, args)
	}
	_, err = runCLI(t, "", "tables", "--json", "nope")
	var ue usageError
	assert.ErrorAs(t, err, &ue)
}
