package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/plugin"
)

// tunerBin holds tuner-rules and tuner-fault, built once by TestMain.
var tunerBin string

func TestMain(m *testing.M) {
	plugin.MainWithCommands(m, &tunerBin, openTuners.closeAll, "tuner-rules", "tuner-fault")
}

func runTuner(t *testing.T, stdin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	t.Cleanup(openTuners.closeAll)
	var out, errb bytes.Buffer
	err = run(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), err
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
	return p
}

// TestExplainTuner: explain shows the tuner's edits, by name (resolved on PATH) and by path.
func TestExplainTuner(t *testing.T) {
	clearNCCLEnv(t)
	t.Setenv("PATH", tunerBin+string(os.PathListSeparator)+os.Getenv("PATH"))
	conf := writeFile(t, "rules.conf", "allreduce,0,65536,ring,ll,4,-1,-1\nallreduce,4294967296,18446744073709551615,tree,simple,-1,-1,-1\n")
	for _, tuner := range []string{"rules", filepath.Join(tunerBin, "tuner-rules")} {
		out, _, err := runTuner(t, "", "explain", "--json", "--node", "h100", "--nodes", "2", "--bytes", "4K",
			"--tuner", tuner, "--tuner-config", conf)
		require.NoError(t, err)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &m))
		assert.Equal(t, "rules", m["tuner"])
		assert.Equal(t, "RING", m["algo"])
		assert.Equal(t, "LL", m["proto"])
		assert.EqualValues(t, 4, m["channels"])
		assert.Equal(t, []any{"force RING/LL", "channels 4"}, m["edits"])
		assert.Nil(t, m["tuner_note"])
	}
	out, _, err := runTuner(t, "", "explain", "--node", "h100", "--nodes", "2", "--bytes", "8G", "--tuner", "rules", "--tuner-config", conf)
	require.NoError(t, err)
	assert.Contains(t, out, "-> TREE/SIMPLE")
	assert.Contains(t, out, "tuner: rules; edits here: force TREE/SIMPLE")
}

// TestTunerFailureIsAnError: explain, map and compare answer offline questions, so a broken plugin
// is an error (exit status 2, one line naming the tuner and why), never the built-in policy's
// answer under the tuner's name. (They printed the built-in plan and exited 0 before.)
func TestTunerFailureIsAnError(t *testing.T) {
	clearNCCLEnv(t)
	fault := filepath.Join(tunerBin, "tuner-fault")
	rules := filepath.Join(tunerBin, "tuner-rules")
	exit := writeFile(t, "fault.conf", "exit\n")
	sweeps := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(sweeps, "ring_simple.txt"), []byte(mustRead(t, "testdata/compare/ring_simple.txt")), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"explain crash", []string{"explain", "--node", "h100", "--nodes", "2", "--bytes", "4K", "--tuner", fault, "--tuner-config", exit},
			"tuner fault failed: tune: plugin died or dropped the connection"},
		{"explain json crash", []string{"explain", "--json", "--node", "h100", "--nodes", "2", "--bytes", "4K", "--tuner", fault, "--tuner-config", exit},
			"exiting mid-compile"},
		{"map crash", []string{"map", "--node", "h100", "--nodes", "2", "--tuner", fault, "--tuner-config", exit}, "tuner fault failed"},
		{"checksum", []string{"explain", "--node", "h100", "--bytes", "4K", "--tuner", rules, "--tuner-config", writeFile(t, "r.conf", "allreduce,0,65536,ring,ll,4,-1,-1\n"),
			"--tuner-sha256", strings.Repeat("00", 32)}, "checksums did not match"},
		{"not a plugin", []string{"explain", "--node", "h100", "--bytes", "4K", "--tuner", "/bin/true"},
			"/bin/true exited without printing go-plugin's handshake line"},
		{"rules without config", []string{"explain", "--node", "h100", "--bytes", "4K", "--tuner", rules}, "tuner rules failed: configure:"},
		{"config is a directory", []string{"explain", "--node", "h100", "--bytes", "4K", "--tuner", rules, "--tuner-config", t.TempDir()},
			"a directory, not a configuration file"},
		{"config is a binary", []string{"explain", "--node", "h100", "--bytes", "4K", "--tuner", rules, "--tuner-config", rules},
			"a binary file, not a tuner configuration"},
		{"compare rules without config", []string{"compare", "--node", "h100", "--a", "none", "--b", rules, "--sweeps", sweeps},
			"tuner B: tuner rules failed: configure:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, err := runTuner(t, "", tc.args...)
			require.Error(t, err, "stdout:\n%s", out)
			var ue usageError
			assert.ErrorAs(t, err, &ue, "exit status 2")
			assert.ErrorContains(t, err, tc.want)
			assert.NotContains(t, err.Error(), "\n", "one line")
			assert.Empty(t, out, "nothing printed as if the tuner had answered")
			assert.NotContains(t, stderr, "using the built-in policy", "the planner does not fall back")
		})
	}
}

// TestQueryPolicyColumn: every query row names the policy that produced it. A tuner that dies
// between two classes leaves the first class's rows its own and the second's the built-in
// policy's, labelled so, and the run exits with status 2 once every line is answered.
func TestQueryPolicyColumn(t *testing.T) {
	clearNCCLEnv(t)
	fault := filepath.Join(tunerBin, "tuner-fault")
	conf := writeFile(t, "fault.conf", "exitsecond\n")
	in := "allreduce,4K\nallgather,1M\nallreduce,8K\n{\"coll\":\"allgather\",\"bytes\":\"2M\"}\n"
	out, stderr, err := runTuner(t, in, "query", "--node", "h100", "--nodes", "2", "--tuner", fault, "--tuner-config", conf)
	var ue usageError
	require.ErrorAs(t, err, &ue, "exit status 2 at the end")
	assert.ErrorContains(t, err, "the tuner failed for 1 classes (first at stdin:2: AllGather")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5, out)
	assert.True(t, strings.HasSuffix(lines[0], ",policy"), lines[0])
	assert.True(t, strings.HasPrefix(lines[1], "AllReduce,4096,") && strings.HasSuffix(lines[1], ",fault"), lines[1])
	assert.True(t, strings.HasPrefix(lines[2], "AllGather,1048576,") && strings.HasSuffix(lines[2], ",builtin"), lines[2])
	assert.True(t, strings.HasPrefix(lines[3], "AllReduce,8192,") && strings.HasSuffix(lines[3], ",fault"), lines[3])
	var a map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[4]), &a))
	assert.Equal(t, "builtin", a["policy"])
	assert.Contains(t, a["tuner_note"], "exiting at the second class")
	assert.Equal(t, 1, strings.Count(stderr, "tuner fault failed"), stderr)

	// Without a tuner every row is the built-in policy's.
	out, _, err = runTuner(t, "allreduce,4K\n", "query", "--node", "h100")
	require.NoError(t, err)
	assert.True(t, strings.HasSuffix(strings.TrimSpace(out), ",builtin"), out)
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestTunerFlags(t *testing.T) {
	clearNCCLEnv(t)
	conf := writeFile(t, "rules.conf", "allreduce,0,65536,ring,ll,4,-1,-1\n")
	rules := filepath.Join(tunerBin, "tuner-rules")
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"config without tuner", []string{"--tuner-config", conf}, "need --tuner"},
		{"timeout without tuner", []string{"--tuner-timeout", "1s"}, "need --tuner"},
		{"unknown tuner", []string{"--tuner", "nosuchpolicy"}, `tuner "nosuchpolicy" not found`},
		{"missing config", []string{"--tuner", rules, "--tuner-config", "/nonexistent.conf"}, "nonexistent.conf"},
		{"bad sha", []string{"--tuner", rules, "--tuner-sha256", "abc"}, "want 64 hex digits"},
		{"negative timeout", []string{"--tuner", rules, "--tuner-timeout", "-1s"}, "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"explain", "--node", "h100", "--bytes", "4K"}, tc.args...)
			_, _, err := runTuner(t, "", args...)
			require.Error(t, err)
			var ue usageError
			assert.ErrorAs(t, err, &ue)
			assert.ErrorContains(t, err, tc.err)
		})
	}
	t.Run("none", func(t *testing.T) {
		out, _, err := runTuner(t, "", "explain", "--node", "h100", "--bytes", "4K", "--tuner", "none")
		require.NoError(t, err)
		assert.Contains(t, out, "tuner: none")
	})
}
