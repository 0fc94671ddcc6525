package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/emuhost"
)

// requireHosts skips where emulated hosts cannot be made (root, ip, nsenter), or fails with
// COLLPLAN_REQUIRE_NETNS=1 (as CI runs).
func requireHosts(t *testing.T) {
	t.Helper()
	err := emuhost.Check()
	if err == nil {
		return
	}
	why := err.Error()
	if os.Getenv("COLLPLAN_REQUIRE_NETNS") == "1" {
		t.Fatalf("COLLPLAN_REQUIRE_NETNS=1 but emulated hosts cannot be made: %s", why)
	}
	t.Skipf("--hosts needs emulated hosts (%s)", why)
}

// TestHostsJob: collbench --hosts runs the job across emulated hosts (this test binary is the
// launcher and, re-run by it in each host's namespaces, the host processes): every row checked
// (#wrong 0), the preamble naming the network transport, for ranks per host 1 and 2, the three
// protocols, and a CollNet pin (host 0 serves the endpoint on the lab's network).
func TestHostsJob(t *testing.T) {
	requireHosts(t)
	for _, tc := range []struct {
		name   string
		args   []string
		want   string
		n, per int // ranks, ranks per host
		env    map[string]string
	}{
		{"allreduce 2 hosts x 2", []string{"allreduce", "--hosts", "2", "-np", "4", "-b", "8", "-e", "256K", "-f", "8"}, "net (2 emulated hosts x 2 ranks", 4, 2, nil},
		{"allgather 3 hosts x 1 LL128", []string{"allgather", "--hosts", "3", "-np", "3", "-b", "96", "-e", "96K", "-f", "32", "--proto", "LL128"}, "net (3 emulated hosts x 1 ranks", 3, 1, nil},
		{"reducescatter 2 hosts x 2 LL", []string{"reducescatter", "--hosts", "2", "-np", "4", "-b", "64", "-e", "64K", "-f", "32", "--proto", "LL", "-d", "int32"}, "net (2 emulated hosts x 2 ranks", 4, 2, nil},
		{"allreduce CollNetDirect", []string{"allreduce", "--hosts", "2", "-np", "4", "-b", "1K", "-e", "1M", "-f", "32", "--algo", "CollNetDirect"}, "net (2 emulated hosts x 2 ranks", 4, 2, nil},
		// 1 thread x 3 sockets: steps of 512 KiB striped in 64 KiB+ tasks; 200 us per frame.
		{"allreduce 2 hosts x 1, 3 data sockets, delay", []string{"allreduce", "--hosts", "2", "-np", "2", "-b", "8", "-e", "4M", "-f", "64"}, "net (2 emulated hosts x 1 ranks", 2, 1,
			map[string]string{"NCCL_SOCKET_NTHREADS": "1", "NCCL_NSOCKS_PERTHREAD": "3", "COLLPLAN_NET_DELAY_US": "200"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var out, errb syncBuffer
			err := run(ctx, append(tc.args, "-n", "5", "-w", "1"), &out, &errb)
			require.NoError(t, err, "stderr: %s", errb.String())
			text := out.String()
			assert.Contains(t, text, tc.want)
			assert.Contains(t, text, "# Out of bounds values : 0 OK")
			// The preamble names each rank's own host (calibrate reads the ranks per node from it).
			for r := range tc.n {
				assert.Regexp(t, fmt.Sprintf(`Rank +%d .* on +cb-h%d `, r, r/tc.per), text)
			}
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

// TestHostsFlags: --hosts that cannot hold the job is bad input (exit status 2), named before any
// lab is made.
func TestHostsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		env  map[string]string
	}{
		{[]string{"allreduce", "--hosts", "3", "-np", "4"}, "--hosts 3: -np 4 does not spread evenly over the hosts", nil},
		{[]string{"allreduce", "--hosts", "2", "-np", "4", "--ranks-per-node", "1"}, "--ranks-per-node 1, but each host holds 2 of the 4 ranks", nil},
		{[]string{"allreduce", "--hosts", "2", "--device", "cuda"}, "--hosts runs the engine on CPUs (--device cpu)", nil},
		{[]string{"allreduce", "--hosts", "-1"}, "--hosts -1: want 1..250 emulated hosts", nil},
		{[]string{"allreduce", "--hosts", "2"}, "NCCL_SOCKET_NTHREADS=16 x NCCL_NSOCKS_PERTHREAD=8 = 128 sockets: at most 64",
			map[string]string{"NCCL_SOCKET_NTHREADS": "16", "NCCL_NSOCKS_PERTHREAD": "8"}},
		{[]string{"allreduce", "--hosts", "2"}, `NCCL_NSOCKS_PERTHREAD="x": want an integer`, map[string]string{"NCCL_NSOCKS_PERTHREAD": "x"}},
		{[]string{"allreduce", "--hosts", "2"}, `COLLPLAN_NET_DELAY_US="-3": want whole microseconds`, map[string]string{"COLLPLAN_NET_DELAY_US": "-3"}},
	} {
		for k, v := range tc.env {
			t.Setenv(k, v)
		}
		var out, errb syncBuffer
		err := run(context.Background(), tc.args, &out, &errb)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want)
		assert.Equal(t, 2, exitCode(err), "%v", tc.args)
		for k := range tc.env {
			os.Unsetenv(k) // t.Setenv restores at the end of the test; the next case starts clean
		}
	}
}

// TestHostsLost: a host's process killed (SIGKILL), or its link cut (its interface down), mid-sweep:
// the job ends with an error within 10 s, host 0's ranks naming the lost host's first rank, and the
// lab is gone afterwards (host 1's network namespace removed).
func TestHostsLost(t *testing.T) {
	requireHosts(t)
	for _, how := range []string{"kill", "linkdown"} {
		t.Run(how, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out, errb syncBuffer
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"allreduce", "--hosts", "2", "-np", "4", "-b", "8", "-e", "64K", "-f", "4", "-N", "0", "-n", "20", "-w", "1"}, &out, &errb)
			}()
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "float     sum") }, 30*time.Second, 20*time.Millisecond,
				"the sweep started: %s", errb.String())
			pid := hostProcess(t, "1")
			require.NotZero(t, pid, "host 1's process")
			idOut, err := exec.Command("ip", "netns", "identify", strconv.Itoa(pid)).CombinedOutput()
			require.NoError(t, err, "%s", idOut)
			ns := strings.TrimSpace(string(idOut))
			require.NotEmpty(t, ns, "host 1's network namespace")
			require.Contains(t, netnsList(t), ns)
			t0 := time.Now()
			if how == "kill" {
				require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			} else {
				o, err := exec.Command("ip", "-n", ns, "link", "set", "eth0", "down").CombinedOutput()
				require.NoError(t, err, "%s", o)
			}
			select {
			case err := <-done:
				took := time.Since(t0)
				require.Error(t, err)
				assert.Less(t, took, 10*time.Second)
				assert.Contains(t, errb.String(), "rank 2", "host 0's ranks name the lost host's first rank")
				t.Logf("%s: ended %v after the fault: %v", how, took.Round(time.Millisecond), err)
			case <-time.After(20 * time.Second):
				t.Fatalf("still running 20 s after the fault: %s", errb.String())
			}
			assert.NotContains(t, netnsList(t), ns, "the lab's namespaces are removed")
		})
	}
}

// hostProcess returns the pid of this process's --hosts child for host h (its environment holds
// COLLBENCH_HOSTS_RANK=h), or 0. Descendants only: another job's host processes on the machine
// (another test binary's) hold the same variable.
func hostProcess(t *testing.T, h string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	require.NoError(t, err)
	want := []byte(envHostsRank + "=" + h + "\x00")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err == nil && bytes.Contains(env, want) && descendant(pid, os.Getpid()) {
			return pid
		}
	}
	return 0
}

// descendant reports whether pid is a descendant of ancestor (through /proc's parent links): the
// host processes of this test's own job, never those of another job on the machine (another
// package's tests, or a benchmark, running collbench --hosts at the same time; this test once
// killed a benchmark's host 1 so).
func descendant(pid, ancestor int) bool {
	for range 64 {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			return false
		}
		ppid, err := strconv.Atoi(f[1])
		if err != nil || ppid <= 1 {
			return false
		}
		if ppid == ancestor {
			return true
		}
		pid = ppid
	}
	return false
}

// netnsList lists the network namespaces now present (ip netns list).
func netnsList(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var ns []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 {
			ns = append(ns, f[0])
		}
	}
	return ns
}

// TestDescendant: the host-process finder's ancestry check: a child of this process is its
// descendant, this process's parent and an unrelated pid are not.
func TestDescendant(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	require.NoError(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	assert.True(t, descendant(cmd.Process.Pid, os.Getpid()))
	assert.False(t, descendant(os.Getppid(), os.Getpid()))
	assert.False(t, descendant(os.Getpid(), cmd.Process.Pid))
}
