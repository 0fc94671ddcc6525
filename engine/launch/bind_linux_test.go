//go:build linux

package launch

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allowedList is the Cpus_allowed_list line of a /proc status file.
func allowedList(t *testing.T, status string) string {
	b, err := os.ReadFile(status)
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("%s has no Cpus_allowed_list", status)
	return ""
}

// expandList expands a kernel CPU list ("0-3,8") into its CPUs.
func expandList(t *testing.T, list string) []int {
	var cpus []int
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		require.NoError(t, err, list)
		b := a
		if isRange {
			b, err = strconv.Atoi(hi)
			require.NoError(t, err, list)
		}
		for c := a; c <= b; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// TestLauncherBinding: with more ranks than CPUs the launcher binds rank r to the (r mod c)-th
// CPU and lists them in COLLPLAN_BIND; with as many ranks as CPUs, or BindNone, every rank keeps
// the launcher's whole mask and COLLPLAN_BIND is unset. The launcher's own threads keep their masks.
func TestLauncherBinding(t *testing.T) {
	mine := allowedList(t, "/proc/self/status")
	cpus := expandList(t, mine)
	names := make([]string, len(cpus))
	for i, c := range cpus {
		names[i] = strconv.Itoa(c)
	}
	script := `echo "$COLLPLAN_RANK $(grep Cpus_allowed_list /proc/self/status | cut -f2) ${COLLPLAN_BIND:-unset}"`
	for _, tc := range []struct {
		name  string
		n     int
		bind  Binding
		bound bool
	}{
		{"oversubscribed", len(cpus) + 1, BindAuto, true},
		{"twice oversubscribed", 2*len(cpus) + 1, BindAuto, true},
		{"a core each", len(cpus), BindAuto, false},
		{"none", len(cpus) + 1, BindNone, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			l := &Launcher{N: tc.n, Argv: []string{"sh", "-c", script}, Stdout: &out, Bind: tc.bind}
			require.NoError(t, l.Run(context.Background()))
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			require.Len(t, lines, tc.n, out.String())
			seen := map[int]bool{}
			for _, line := range lines {
				f := strings.Fields(line)
				require.Len(t, f, 3, line)
				r, err := strconv.Atoi(f[0])
				require.NoError(t, err, line)
				seen[r] = true
				if tc.bound {
					assert.Equal(t, names[r%len(cpus)], f[1], "rank %d", r)
					assert.Equal(t, strings.Join(names, ","), f[2], "rank %d", r)
				} else {
					assert.Equal(t, mine, f[1], "rank %d", r)
					assert.Equal(t, "unset", f[2], "rank %d", r)
				}
			}
			assert.Len(t, seen, tc.n)
			tasks, err := filepath.Glob("/proc/self/task/*/status")
			require.NoError(t, err)
			for _, st := range tasks {
				assert.Equal(t, mine, allowedList(t, st), st)
			}
		})
	}
}
