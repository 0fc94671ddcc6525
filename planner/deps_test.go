package planner

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoHeavyDeps keeps the pricing core free of gRPC, NVML and cgo (ARCHITECTURE.md): the hot path
// and the tuner plugins link costmodel and planner, and must build anywhere.
func TestNoHeavyDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to list dependencies")
	for _, pkg := range []string{"github.com/collplan/collplan/costmodel", "github.com/collplan/collplan/planner"} {
		out, err := exec.Command(goBin, "list", "-deps", pkg).CombinedOutput()
		require.NoError(t, err, string(out))
		for _, dep := range strings.Fields(string(out)) {
			assert.NotContains(t, dep, "grpc", pkg)
			assert.NotContains(t, dep, "nvml", pkg)
			assert.NotEqual(t, "runtime/cgo", dep, pkg)
			assert.NotEqual(t, "C", dep, pkg)
		}
	}
}
