package rules_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/plugin/policy/rules"
)

// TestLoadSizeLimit: a rules file over 4 MiB is refused, naming the file and the limit, even when
// every line of it is valid (the shipped example after a long comment); the example loads.
func TestLoadSizeLimit(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "nccl_tuner.conf"))
	require.NoError(t, err)
	_, err = rules.Parse("nccl_tuner.conf", good)
	require.NoError(t, err)

	big := filepath.Join(t.TempDir(), "big.conf")
	require.NoError(t, os.WriteFile(big, append([]byte("# "+strings.Repeat("x", 4<<20)+"\n"), good...), 0o644))
	_, err = rules.Load(big)
	require.Error(t, err)
	assert.Equal(t, "rules: "+big+": larger than the limit of 4 MiB (4194304 bytes)", err.Error())
}
