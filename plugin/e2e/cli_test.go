package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runTuner runs a tuner binary by hand: its exit status, stdout and stderr.
func runTuner(t *testing.T, name string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(tuner(name), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	}
	require.NoError(t, err)
	return 0, out.String(), errb.String()
}

// TestTunerHelp: every tuner binary's -h documents its configuration, what the file holds, an
// example and where the whole format is, on stdout with status 0; the examples pass -check.
func TestTunerHelp(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string
		// example pulls the example configuration out of the help text ("" when it has none to check).
		example *regexp.Regexp
	}{
		{"rules", []string{"collective,minbytes,maxbytes,algorithm,protocol,channels,nNodes,nRanks", "go doc github.com/collplan/collplan/plugin/policy/rules"},
			regexp.MustCompile(`(?m)^  (allreduce,.*)$`)},
		{"regions", []string{"[[region]]", "polygon", "go doc github.com/collplan/collplan/plugin/policy/regions"},
			regexp.MustCompile(`(?s)\n(  \[\[region\]\].*?polygon = [^\n]*)\n`)},
		{"table", []string{"node table TOML", "--tuner-config tables/h100.toml", "tables/schema.go"}, nil},
		{"nccl", []string{"configuration: none", "--tuner nccl"}, nil},
		{"fault", []string{"the first word of the --tuner-config file", "panic", "nohandshake"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, h := range []string{"-h", "--help"} {
				code, stdout, stderr := runTuner(t, tc.name, h)
				assert.Equal(t, 0, code, stderr)
				assert.Empty(t, stderr)
				assert.Contains(t, stdout, "usage: tuner-"+tc.name)
				assert.Contains(t, stdout, "configuration:")
				for _, w := range tc.want {
					assert.Contains(t, stdout, w, h)
				}
				if tc.example == nil {
					continue
				}
				m := tc.example.FindStringSubmatch(stdout)
				require.NotNil(t, m, "an example in:\n%s", stdout)
				conf := filepath.Join(t.TempDir(), "example.conf")
				require.NoError(t, os.WriteFile(conf, []byte(m[1]+"\n"), 0o644))
				code, out, errOut := runTuner(t, tc.name, "-check", conf)
				assert.Equal(t, 0, code, "the example checks: %s%s", out, errOut)
				assert.Contains(t, out, ": ok ("+tc.name+")")
			}
		})
	}
}

// TestTunerBadInvocations: a bad flag or argument is one stderr line naming it, prefixed with the
// binary's name once and a hint where the flags are, status 2; so is a configuration -check
// refuses (its bad lines come first, one a line).
func TestTunerBadInvocations(t *testing.T) {
	for _, name := range []string{"rules", "regions", "table", "nccl", "fault"} {
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
			{[]string{"extra"}, `unexpected argument "extra"`},
		} {
			t.Run(name+" "+strings.Join(tc.args, " "), func(t *testing.T) {
				code, stdout, stderr := runTuner(t, name, tc.args...)
				assert.Equal(t, 2, code, stderr)
				assert.Empty(t, stdout)
				lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
				require.Len(t, lines, 1, "one line on stderr:\n%s", stderr)
				prefix := "tuner-" + name + ": "
				assert.True(t, strings.HasPrefix(lines[0], prefix), lines[0])
				assert.NotContains(t, lines[0], prefix+prefix)
				assert.Contains(t, lines[0], tc.want)
				assert.Contains(t, lines[0], "(run 'tuner-"+name+" -h' for the flags)")
			})
		}
	}
	code, _, stderr := runTuner(t, "rules", "-check", "../policy/rules/testdata/bad.conf")
	assert.Equal(t, 2, code, "a bad configuration is bad input")
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	assert.Contains(t, lines[0], "bad.conf:")
	assert.Regexp(t, `^tuner-rules: \S*bad.conf: \d+ problems$`, lines[len(lines)-1])
	code, _, stderr = runTuner(t, "rules", "-check", filepath.Join(t.TempDir(), "nope.conf"))
	assert.Equal(t, 2, code, stderr)
	assert.Contains(t, stderr, "nope.conf")
}
