//go:build linux

package proctree

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMarked: a child started with the marker is listed until it is killed and reaped; one
// without it never is.
func TestMarked(t *testing.T) {
	marker := "PROCTREE_TEST_MARK=" + t.Name()
	with := exec.Command("sleep", "30")
	with.Env = append(os.Environ(), marker)
	without := exec.Command("sleep", "30")
	require.NoError(t, with.Start())
	require.NoError(t, without.Start())
	assert.Equal(t, []int{with.Process.Pid}, Marked(marker))
	// Start returns once exec has happened; the child may still be running (R) on its way to
	// sleep, so wait (bounded) for it to block.
	deadline := time.Now().Add(5 * time.Second)
	for State(with.Process.Pid) == 'R' && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.Equal(t, byte('S'), State(with.Process.Pid))
	assert.Equal(t, "sleep 30", Cmdline(with.Process.Pid))
	require.NoError(t, with.Process.Kill())
	deadline = time.Now().Add(5 * time.Second)
	for State(with.Process.Pid) != 'Z' && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.Empty(t, Marked(marker), "a zombie is not live")
	with.Wait()
	assert.Zero(t, State(with.Process.Pid), "reaped")
	without.Process.Kill()
	without.Wait()
}
