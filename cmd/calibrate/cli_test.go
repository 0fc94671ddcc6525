package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runMain runs the command's main in a child process (TestMain's hook): status, stdout, stderr.
func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	for _, a := range args {
		require.NotContains(t, a, " ", "CALIBRATE_TEST_ARGS splits on spaces")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CALIBRATE_TEST_MAIN=1", "CALIBRATE_TEST_ARGS="+strings.Join(args, " "))
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

// TestBadInvocations: bad command lines exit 2 with one line on stderr, prefixed "calibrate: "
// once; a flag error names the flag and says where the flags are, instead of listing them all.
func TestBadInvocations(t *testing.T) {
	hint := "(run 'calibrate -h' for the flags)"
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--bogus"}, []string{"-bogus", hint}},
		{[]string{"--node", "h200", "--nodes", "x"}, []string{`invalid value "x" for flag -nodes`, hint}},
		{[]string{"--node", "h200", "--sweeps", fixtures, "extra"}, []string{`"extra"`, hint}},
		{[]string{"--node", "nope", "--sweeps", fixtures}, []string{`"nope"`}},
		{[]string{"--node", "h200", "--sweeps", "/does/not/exist"}, []string{"/does/not/exist"}},
		{[]string{"--node", "h200", "--sweeps", fixtures, "--holdout", "1"}, []string{"--holdout 1"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := runMain(t, tc.args...)
			assert.Equal(t, 2, code, stderr)
			assert.Empty(t, stdout)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			require.Len(t, lines, 1, "one line on stderr:\n%s", stderr)
			assert.True(t, strings.HasPrefix(lines[0], "calibrate: "), lines[0])
			assert.NotContains(t, lines[0], "calibrate: calibrate:")
			for _, w := range tc.want {
				assert.Contains(t, lines[0], w)
			}
		})
	}
}

// TestHelpOutput: -h and --help print the usage and every flag to stdout and exit 0.
func TestHelpOutput(t *testing.T) {
	for _, h := range []string{"-h", "--help"} {
		code, stdout, stderr := runMain(t, h)
		assert.Equal(t, 0, code)
		assert.Empty(t, stderr)
		for _, w := range []string{"usage: calibrate --node NAME", "--run", "flags:", "-sweeps-out", "-svg"} {
			assert.Contains(t, stdout, w, h)
		}
	}
}

// TestOutputPathsFirst: every output path is checked before any work. A directory as a file
// path, a file in a missing directory, a file as a directory: a usage error naming the flag and
// path, with nothing fitted or written and (with --run) no sweep started.
func TestOutputPathsFirst(t *testing.T) {
	bin := needCollbench(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	missing := filepath.Join(dir, "missing", "x")
	fit := []string{"--node", "h200", "--sweeps", fixtures}
	quick := []string{"--node", "cpu", "--run", "--quick", "--collbench", bin, "--no-progress"}
	with := func(base []string, more ...string) []string { return append(append([]string(nil), base...), more...) }
	// Each case gets a good --out (ok) and --sweeps-out (sw), which must stay unwritten.
	for _, tc := range []struct {
		name string
		args func(ok, sw string) []string
		want string
	}{
		{"--out directory", func(ok, sw string) []string { return with(fit, "--out", dir) }, "--out " + dir + ": is a directory"},
		{"--out missing directory", func(ok, sw string) []string { return with(fit, "--out", missing) }, "--out " + missing + ": directory"},
		{"--svg directory", func(ok, sw string) []string { return with(fit, "--out", ok, "--svg", dir) }, "--svg " + dir + ": is a directory"},
		{"--svg missing directory", func(ok, sw string) []string { return with(fit, "--out", ok, "--svg", missing) }, "--svg " + missing + ": directory"},
		{"--check overlay missing", func(ok, sw string) []string { return []string{"--node", "h200", "--check", fixtures, "--out", missing} },
			"the overlay to evaluate: --out " + missing},
		{"--run --out directory", func(ok, sw string) []string { return with(quick, "--sweeps-out", sw, "--out", dir) }, "--out " + dir + ": is a directory"},
		{"--run --svg missing directory", func(ok, sw string) []string { return with(quick, "--sweeps-out", sw, "--out", ok, "--svg", missing) },
			"--svg " + missing + ": directory"},
		{"--run --sweeps-out file", func(ok, sw string) []string { return with(quick, "--sweeps-out", file, "--out", ok) },
			"--sweeps-out " + file + ": is a file"},
		{"--run --sweeps-out under a file", func(ok, sw string) []string {
			return with(quick, "--sweeps-out", filepath.Join(file, "d"), "--out", ok)
		},
			file + " is not a directory"},
		{"--run --check file", func(ok, sw string) []string { return with(quick, "--check", file, "--out", file) }, "--check " + file + ": is a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			ok, sw := filepath.Join(tmp, "ok.fit.toml"), filepath.Join(tmp, "sweeps")
			var out, errb bytes.Buffer
			err := run(context.Background(), tc.args(ok, sw), &out, &errb)
			require.Error(t, err)
			var ue usageError
			assert.ErrorAs(t, err, &ue, "exit status 2")
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, out.String())
			assert.NotContains(t, errb.String(), "running", "no sweep started")
			entries, err := os.ReadDir(tmp)
			require.NoError(t, err)
			assert.Empty(t, entries, "no overlay or sweep written")
		})
	}
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing written beside the file either")
}
