//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ranks follow their launcher through PR_SET_PDEATHSIG, which only Linux has.

var rankPidRE = regexp.MustCompile(`(?m)^#  Rank +(\d+) Group  0 Pid +(\d+) `)

// TestKillLauncher: when the launcher dies (SIGKILL here; a broken pipe in `collbench | head`),
// its ranks exit within 10 s instead of waiting forever for a rank that died with it.
func TestKillLauncher(t *testing.T) {
	cmd := exec.Command(os.Args[0], "allreduce", "-np", "3", "-b", "4K", "-e", "64K", "-f", "2", "-n", "5", "-w", "0", "-N", "0")
	cmd.Env = append(os.Environ(), envTestMain+"=1")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	pids := map[int]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(pids) < 3 && time.Now().Before(deadline) {
		for _, m := range rankPidRE.FindAllStringSubmatch(out.String(), -1) {
			r, _ := strconv.Atoi(m[1])
			pids[r], _ = strconv.Atoi(m[2])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(pids) < 3 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no rank lines for 3 ranks:\n%s", out.String())
	}
	time.Sleep(200 * time.Millisecond) // let the ranks get into the sweep
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	killed := time.Now()
	for r, pid := range pids {
		for running(pid) && time.Since(killed) < 15*time.Second {
			time.Sleep(20 * time.Millisecond)
		}
		if running(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("rank %d (pid %d) still runs 15 s after its launcher died", r, pid)
			continue
		}
		assert.Less(t, time.Since(killed), 10*time.Second, "rank %d", r)
	}
}

// running reports whether process pid exists and is not a zombie (an orphan whose new parent has
// not reaped it yet has exited).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(b), ") ")
	return ok && !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}
