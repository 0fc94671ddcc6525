package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// requireHosts skips where emulated hosts cannot be made (root, ip, nsenter), or fails with
// COLLPLAN_REQUIRE_NETNS=1 (as CI runs).
func requireHosts(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root"
	}
	for _, tool := range []string{"ip", "tc", "nsenter", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil && why == "" {
			why = tool + " not on PATH"
		}
	}
	if why == "" {
		return
	}
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
		name string
		args []string
		want string
		env  map[string]string
	}{
		{"allreduce 2 hosts x 2", []string{"allreduce", "--hosts", "2", "-np", "4", "-b", "8", "-e", "256K", "-f", "8"}, "net (2 emulated hosts x 2 ranks", nil},
		{"allgather 3 hosts x 1 LL128", []string{"allgather", "--hosts", "3", "-np", "3", "-b", "96", "-e", "96K", "-f", "32", "--proto", "LL128"}, "net (3 emulated hosts x 1 ranks", nil},
		{"reducescatter 2 hosts x 2 LL", []string{"reducescatter", "--hosts", "2", "-np", "4", "-b", "64", "-e", "64K", "-f", "32", "--proto", "LL", "-d", "int32"}, "net (2 emulated hosts x 2 ranks", nil},
		{"allreduce CollNetDirect", []string{"allreduce", "--hosts", "2", "-np", "4", "-b", "1K", "-e", "1M", "-f", "32", "--algo", "CollNetDirect"}, "net (2 emulated hosts x 2 ranks", nil},
		// 1 thread x 3 sockets: steps of 512 KiB striped in 64 KiB+ tasks; 200 us per frame.
		{"allreduce 2 hosts x 1, 3 data sockets, delay", []string{"allreduce", "--hosts", "2", "-np", "2", "-b", "8", "-e", "4M", "-f", "64"}, "net (2 emulated hosts x 1 ranks",
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
