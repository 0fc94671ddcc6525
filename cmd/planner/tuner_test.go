package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tunerBin holds tuner-rules and tuner-fault, built once by TestMain.
var tunerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "collplan-planner-tuners-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tunerBin = dir
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goTool, "build", "-o", dir+string(os.PathSeparator),
		"github.com/collplan/collplan/cmd/tuner-rules", "github.com/collplan/collplan/cmd/tuner-fault").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "building the tuner binaries: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	openTuners.closeAll()
	os.RemoveAll(dir)
	os.Exit(code)
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

// TestTunerFallback: a broken plugin leaves explain, map and query on the built-in policy, with
// the note in the output and the reason logged to stderr once.
func TestTunerFallback(t *testing.T) {
	clearNCCLEnv(t)
	fault := filepath.Join(tunerBin, "tuner-fault")
	base, _, err := runTuner(t, "", "explain", "--json", "--node", "h100", "--nodes", "2", "--bytes", "4K")
	require.NoError(t, err)
	var want map[string]any
	require.NoError(t, json.Unmarshal([]byte(base), &want))

	conf := writeFile(t, "fault.conf", "exit\n")
	out, stderr, err := runTuner(t, "", "explain", "--json", "--node", "h100", "--nodes", "2", "--bytes", "4K",
		"--tuner", fault, "--tuner-config", conf)
	require.NoError(t, err)
	var got map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	assert.Equal(t, want["algo"], got["algo"])
	assert.Equal(t, want["proto"], got["proto"])
	assert.Equal(t, "fault", got["tuner"])
	assert.Contains(t, got["tuner_note"], "tuner fault failed, using the built-in policy")
	assert.Contains(t, got["tuner_note"], "exiting mid-compile")
	assert.Equal(t, 1, strings.Count(stderr, "tuner failed; using the built-in policy"), stderr)

	out, _, err = runTuner(t, "", "explain", "--node", "h100", "--nodes", "2", "--bytes", "4K", "--tuner", fault, "--tuner-config", conf)
	require.NoError(t, err)
	assert.Contains(t, out, "   note: tuner fault failed, using the built-in policy")

	out, _, err = runTuner(t, "", "map", "--node", "h100", "--nodes", "2", "--tuner", fault, "--tuner-config", conf)
	require.NoError(t, err)
	assert.Contains(t, out, "tuner: fault tuner fault failed, using the built-in policy")

	conf = writeFile(t, "fault.conf", "garbage\n")
	out, stderr, err = runTuner(t, "allreduce,4K\nallgather,1M\n", "query", "--node", "h100", "--nodes", "2", "--tuner", fault,
		"--tuner-config", conf, "--tuner-timeout", "3s")
	require.NoError(t, err)
	assert.Contains(t, out, "AllReduce,4096,sum,float32,1,TREE,LL") // the built-in answer
	assert.Contains(t, stderr, "planner: tuner fault failed, using the built-in policy: tune: invalid reply")
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
	t.Run("pinned", func(t *testing.T) {
		out, _, err := runTuner(t, "", "explain", "--node", "h100", "--bytes", "4K", "--tuner", rules, "--tuner-config", conf,
			"--tuner-sha256", strings.Repeat("00", 32))
		require.NoError(t, err)
		assert.Contains(t, out, "checksums did not match")
	})
	t.Run("none", func(t *testing.T) {
		out, _, err := runTuner(t, "", "explain", "--node", "h100", "--bytes", "4K", "--tuner", "none")
		require.NoError(t, err)
		assert.Contains(t, out, "tuner: none")
	})
}
