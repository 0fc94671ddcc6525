package plugin

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/planner"
)

type namedTuner struct{ planner.Tuner }

func (namedTuner) Name() string { return "fake" }

// badLines is a configuration error listing its bad lines.
type badLines []string

func (b badLines) Error() string     { return "bad lines" }
func (b badLines) Details() []string { return b }

func fakeFactory(path string) (planner.Tuner, error) {
	switch path {
	case "good.conf":
		return namedTuner{}, nil
	case "bad.conf":
		return nil, badLines{"bad.conf:1: one", "bad.conf:3: two"}
	}
	return nil, errors.New("fake: " + path + ": no such file")
}

// TestRunCommand: -h documents the configuration on stdout; bad flags and arguments are one-line
// usage errors with the hint; -check reports ok, or the bad lines and a usage error.
func TestRunCommand(t *testing.T) {
	const doc = "configuration: one word a line, for example\n\n  hello\n"
	for _, tc := range []struct {
		args       []string
		err        string // "" for none
		stdout     []string
		stderr     string
		usageError bool
	}{
		{[]string{"-h"}, "", []string{"usage: tuner-fake [-check FILE]", "--tuner fake", doc, "flags:\n  -check string"}, "", false},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus (run 'tuner-fake -h' for the flags)", nil, "", true},
		{[]string{"x"}, `unexpected argument "x" (run 'tuner-fake -h' for the flags)`, nil, "", true},
		{[]string{"-check", "good.conf"}, "", []string{"good.conf: ok (fake)\n"}, "", false},
		{[]string{"-check", "bad.conf"}, "bad.conf: 2 problems", nil, "bad.conf:1: one\nbad.conf:3: two\n", true},
		{[]string{"-check", "nope.conf"}, "fake: nope.conf: no such file", nil, "", true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			err := RunCommand(context.Background(), "tuner-fake", doc, fakeFactory, tc.args, &out, &errb)
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.EqualError(t, err, tc.err)
			}
			var ue UsageError
			assert.Equal(t, tc.usageError, errors.As(err, &ue))
			for _, w := range tc.stdout {
				assert.Contains(t, out.String(), w)
			}
			if tc.stdout == nil {
				assert.Empty(t, out.String())
			}
			assert.Equal(t, tc.stderr, errb.String())
		})
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
		line string
	}{
		{nil, 0, ""},
		{errors.New("rules: x.conf: no such file"), 1, "tuner-rules: rules: x.conf: no such file\n"},
		{UsageError{errors.New("bad flag")}, 2, "tuner-rules: bad flag\n"},
		{UsageError{errors.New("tuner-rules: already prefixed")}, 2, "tuner-rules: already prefixed\n"},
	} {
		var errb bytes.Buffer
		assert.Equal(t, tc.code, ExitStatus(&errb, "tuner-rules", tc.err), tc.err)
		assert.Equal(t, tc.line, errb.String())
	}
}
