package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostsRankProcesses: collbench --hosts H --rank-processes runs every rank as its own process
// in its host's namespaces (the preamble shows a distinct pid per rank, each on its host), and
// every row is right (#wrong 0) for the three protocols and three collectives.
func TestHostsRankProcesses(t *testing.T) {
	requireHosts(t)
	for _, tc := range []struct {
		name   string
		args   []string
		n, per int
	}{
		{"allreduce 2 hosts x 2", []string{"allreduce", "--hosts", "2", "-np", "4", "-b", "8", "-e", "256K", "-f", "8"}, 4, 2},
		{"allgather 2 hosts x 2 LL128", []string{"allgather", "--hosts", "2", "-np", "4", "-b", "96", "-e", "96K", "-f", "32", "--proto", "LL128"}, 4, 2},
		{"reducescatter 3 hosts x 2 LL", []string{"reducescatter", "--hosts", "3", "-np", "6", "-b", "96", "-e", "24K", "-f", "16", "--proto", "LL", "-d", "int32"}, 6, 2},
		{"allreduce 2 hosts x 2 Simple Tree", []string{"allreduce", "--hosts", "2", "-np", "4", "-b", "8", "-e", "64K", "-f", "32", "--proto", "Simple", "--algo", "Tree"}, 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			var out, errb syncBuffer
			err := run(ctx, append(tc.args, "--rank-processes", "-n", "3", "-w", "1"), &out, &errb)
			require.NoError(t, err, "stderr: %s", errb.String())
			text := out.String()
			assert.Contains(t, text, fmt.Sprintf("net (%d emulated hosts x %d rank processes", tc.n/tc.per, tc.per))
			assert.Contains(t, text, "# Out of bounds values : 0 OK")
			pids := map[string]bool{}
			for r := range tc.n {
				m := regexp.MustCompile(fmt.Sprintf(`Rank +%d .*Pid +(\d+) on +cb-h%d `, r, r/tc.per)).FindStringSubmatch(text)
				if assert.NotNil(t, m, "rank %d's line: %s", r, text) {
					pids[m[1]] = true
				}
			}
			assert.Len(t, pids, tc.n, "a process per rank")
			rows := 0
			for _, l := range strings.Split(text, "\n") {
				if f := strings.Fields(l); len(f) >= 13 && !strings.HasPrefix(f[0], "#") {
					rows++
					assert.Equal(t, "0", f[8], "out-of-place #wrong: %s", l)
					assert.Equal(t, "0", f[12], "in-place #wrong: %s", l)
				}
			}
			assert.Greater(t, rows, 1)
		})
	}
}

// TestHostsRankProcessKilled: rank 3's process (host 1, not its applier) killed mid-sweep: the
// job ends with an error within 10 s, the other ranks naming rank 3.
func TestHostsRankProcessKilled(t *testing.T) {
	requireHosts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out, errb syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"allreduce", "--hosts", "2", "-np", "4", "--rank-processes", "-b", "8", "-e", "64K", "-f", "4", "-N", "0", "-n", "20", "-w", "1"}, &out, &errb)
	}()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "float     sum") }, 30*time.Second, 20*time.Millisecond,
		"the sweep started: %s", errb.String())
	pids := rankProcesses(t, 3)
	require.NotEmpty(t, pids, "rank 3's process")
	t0 := time.Now()
	for _, pid := range pids {
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	}
	select {
	case err := <-done:
		took := time.Since(t0)
		require.Error(t, err)
		assert.Less(t, took, 10*time.Second)
		for _, r := range []int{0, 1, 2} {
			assert.Regexp(t, fmt.Sprintf(`rank %d \(cb-h\d\): .*rank 3: lost`, r), errb.String(), "rank %d names rank 3", r)
		}
		t.Logf("ended %v after the kill: %v", took.Round(time.Millisecond), err)
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20 s after the kill: %s", errb.String())
	}
}

// rankProcesses returns the pids of this process's --rank-processes descendants for rank r
// (descendants only: other jobs on the machine may run collbench's rank processes too).
func rankProcesses(t *testing.T, r int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	want := []byte("\x00" + envHostsProc + "=" + strconv.Itoa(r) + "\x00")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(append([]byte{0}, env...), want) && descendant(pid, os.Getpid()) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// TestRankProcessesFlags: --rank-processes without --hosts, or with a CollNet pin, is bad input.
func TestRankProcessesFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"allreduce", "-np", "4", "--rank-processes"}, "--rank-processes runs the ranks of --hosts as processes: give --hosts H"},
		{[]string{"allreduce", "--hosts", "2", "-np", "4", "--rank-processes", "--algo", "CollNetDirect"}, "--rank-processes: --algo CollNetDirect: CollNet is not run with rank processes"},
	} {
		var out, errb syncBuffer
		err := run(context.Background(), tc.args, &out, &errb)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want)
		assert.Equal(t, 2, exitCode(err), "%v", tc.args)
	}
}
