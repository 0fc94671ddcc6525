package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestQueryLongLines: a line of up to 16 MiB is read like any other; a longer one is a usage error
// (exit status 2) naming stdin and its line number.
func TestQueryLongLines(t *testing.T) {
	clearNCCLEnv(t)
	const mib = 1 << 20
	valid := `{"coll":"allreduce","bytes":4096}`
	// A valid JSON query padded to 2 MiB with blanks between its fields.
	padded := `{"coll":"allreduce",` + strings.Repeat(" ", 2*mib) + `"bytes":4096}`
	// 2 MiB of an unknown field: the query schema rejects unknown fields.
	unknown := `{"coll":"allreduce","bytes":4096,"pad":"` + strings.Repeat("x", 2*mib) + `"}`
	// 17 MiB: over the 16 MiB line limit.
	huge := `{"coll":"allreduce","bytes":4096,"pad":"` + strings.Repeat("x", 17*mib) + `"}`
	for _, tc := range []struct {
		name    string
		stdin   string
		answers int    // JSON lines answered, when want is ""
		want    string // the usage error's prefix
		wantHas string // and what it says after the prefix
	}{
		{"2 MiB valid line", valid + "\n" + padded + "\n", 2, "", ""},
		{"2 MiB unknown field", valid + "\n" + unknown + "\n", 0, "stdin:2: ", "unknown field"},
		{"17 MiB line", valid + "\n# note\n" + huge + "\n" + valid + "\n", 0, "stdin:3: ", "longer than"},
		{"17 MiB last line without newline", valid + "\n" + huge, 0, "stdin:2: ", "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := runCLI(t, tc.stdin, "query", "--topology", topoDir+"s1.toml")
			if tc.want == "" {
				require.NoError(t, err)
				ls := strings.Split(strings.TrimSpace(out), "\n")
				require.Len(t, ls, tc.answers)
				for _, l := range ls {
					var a answerJSON
					require.NoError(t, json.Unmarshal([]byte(l), &a))
					assert.Equal(t, "AllReduce", a.Coll)
					assert.Equal(t, int64(4096), a.Bytes)
				}
				return
			}
			require.Error(t, err)
			var ue usageError
			assert.True(t, errors.As(err, &ue), "want exit status 2, got %v", err)
			assert.True(t, strings.HasPrefix(err.Error(), tc.want), "want prefix %q, got %.200s", tc.want, err.Error())
			assert.Contains(t, err.Error(), tc.wantHas)
			assert.Less(t, len(err.Error()), 400, "the error does not echo the line")
		})
	}
}
