package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runMain runs the test binary as the collbench command (main, exit status and all).
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int, took time.Duration) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), envTestMain+"=1")
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took = time.Since(start)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return out.String(), errb.String(), code, took
}

// TestFlags: -h prints the flags to stdout and exits 0; bad input is one line (with the hint to
// run -h for a bad flag), exit status 2, found once before any rank starts (a launcher's ranks each
// printed the same error before), and never a usage dump.
func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"allreduce", "--help"}, {"allgather", "-h"}} {
		out, stderr, code, _ := runMain(t, args...)
		assert.Equal(t, 0, code, "%q: stderr %s", args, stderr)
		assert.Contains(t, out, "usage: collbench allreduce|allgather|reducescatter|broadcast|reduce [flags]", "%q", args)
		assert.Contains(t, out, "-np int", "%q: the flags", args)
		assert.Contains(t, out, "-timeout duration", "%q", args)
		assert.Empty(t, stderr, "%q", args)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no collective", nil, "missing collective"},
		{"unknown collective", []string{"allreduc"}, `unknown collective "allreduc"`},
		{"flag typo", []string{"allreduce", "--nosuchflag"}, "flag provided but not defined: -nosuchflag (run 'collbench allreduce -h' for the flags)"},
		{"bad value", []string{"allreduce", "-n", "x"}, `invalid value "x" for flag -n`},
		{"algorithm typo", []string{"allreduce", "--algo", "Rnig"}, `--algo (or NCCL_ALGO) "Rnig"`},
		{"protocol typo", []string{"allreduce", "--proto", "LL256"}, `--proto (or NCCL_PROTO) "LL256"`},
		{"channels", []string{"allreduce", "--channels", "1000"}, "--channels 1000: want 1..64"},
		{"tuner not found", []string{"allreduce", "--tuner", "nosuch"}, `plugin: tuner "nosuch" not found: no executable tuner-nosuch beside this program or on PATH; build the tuners with`},
		{"negative ranks", []string{"allreduce", "-np", "-3"}, "-np -3: want a positive rank count"},
		{"too many ranks", []string{"allreduce", "-np", "100000"}, "-np 100000: above this host's limit of"},
		{"max-np", []string{"allreduce", "-np", "100000", "--max-np", "100"}, "-np 100000: above this host's limit of 100 ranks (--max-np)"},
		{"memory", []string{"allreduce", "-b", "64G", "-e", "64G"}, "-e 64 GiB needs about 256.1 GiB of memory for 2 ranks here"},
		{"negative timeout", []string{"allreduce", "--timeout", "-1s"}, "--timeout -1s"},
		{"tuner with a pinned plan", []string{"allreduce", "--tuner", "rules", "--algo", "ring", "--proto", "simple", "--channels", "2"}, "--tuner and --ab need the planner's tables"},
		// A pin the engine would refuse on every rank is refused once, before any rank starts.
		{"PAT at 2 ranks per node", []string{"allgather", "-np", "4", "--ranks-per-node", "2", "--algo", "PAT"}, "--algo PAT: engine: invalid argument: PAT with 2 ranks per node"},
		{"NVLS with LL", []string{"allreduce", "-np", "3", "--algo", "NVLS", "--proto", "LL"}, "--algo NVLS: engine: invalid argument: NVLS with LL"},
		{"NVLSTree on one node", []string{"allreduce", "-np", "4", "--algo", "NVLSTree"}, "--algo NVLSTree: engine: invalid argument: NVLS_TREE on 4 ranks in virtual nodes of 4"},
		{"Tree broadcast", []string{"broadcast", "--algo", "Tree"}, "--algo Tree: engine: TREE for Broadcast: not implemented in the engine"},
		{"CollNet on one node", []string{"allreduce", "-np", "4", "--algo", "CollNetDirect"}, "--algo CollNetDirect: engine: invalid argument: COLLNET_DIRECT on one virtual node of 4 ranks (NCCL builds CollNet for 2 or more nodes)"},
		{"CollNetChain allgather", []string{"allgather", "-np", "4", "--ranks-per-node", "2", "--algo", "CollNetChain"}, "--algo CollNetChain: engine: invalid argument: COLLNET_CHAIN for AllGather"},
		{"serve-collnet with a collective", []string{"allreduce", "--serve-collnet", "127.0.0.1:0"}, "--serve-collnet runs an aggregation endpoint alone"},
		{"serve-collnet without an address", []string{"--serve-collnet"}, "--serve-collnet ADDR: missing the address"},
		{"serve-collnet bad address", []string{"--serve-collnet", "nohost"}, `--serve-collnet "nohost": want host:port`},
		{"two algorithms", []string{"allreduce", "--algo", "Ring,Tree"}, `--algo (or NCCL_ALGO) "Ring,Tree": collbench pins one algorithm`},
		{"unknown device", []string{"allreduce", "--device", "gpu"}, `--device "gpu": want cpu or cuda`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "memory" {
				if avail, ok := memAvailable(); !ok || avail > 256<<30 {
					t.Skip("the host has no MemAvailable, or 256 GiB of memory: the size fits")
				}
			}
			out, stderr, code, took := runMain(t, tc.args...)
			assert.Equal(t, 2, code, "exit status 2 for bad input\nstderr: %s", stderr)
			assert.Empty(t, out)
			lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
			assert.Len(t, lines, 1, "one line:\n%s", stderr)
			assert.Contains(t, stderr, "collbench: "+tc.want)
			assert.Equal(t, 1, strings.Count(stderr, "collbench:"), "prefixed once: %s", stderr)
			assert.NotContains(t, stderr, "collbench: rank ", "found before any rank started")
			assert.Less(t, took, 5*time.Second, "refused at once, not after starting ranks")
		})
	}
}

// TestDeviceCUDAWithoutDriver: --device cuda on a machine without a CUDA driver (COLLPLAN_LIBCUDA
// names a file that does not exist, so the test means the same on a GPU machine) prints one line
// and exits 3, a missing runtime rather than bad input (2); bad flags are still found first.
func TestDeviceCUDAWithoutDriver(t *testing.T) {
	t.Setenv("COLLPLAN_LIBCUDA", t.TempDir()+"/libcuda.so.1")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"allreduce", "--device", "cuda"}, 3, "collbench: no CUDA driver (libcuda.so.1 not found)\n"},
		{[]string{"allgather", "--device", "cuda", "-np", "4", "--transport", "inproc"}, 3, "collbench: no CUDA driver (libcuda.so.1 not found)\n"},
		{[]string{"allreduce", "--device", "cuda", "-n", "0"}, 2, "collbench: -n and -m must be at least 1; -w, -N and -c at least 0\n"},
	} {
		out, stderr, code, _ := runMain(t, tc.args...)
		assert.Equal(t, tc.code, code, "%q: stderr %s", tc.args, stderr)
		assert.Empty(t, out, "%q", tc.args)
		assert.Equal(t, tc.want, stderr, "%q", tc.args)
	}
}

// TestExitCode: the exit status of each kind of error.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, 0}, {errHelp, 0}, {usagef("bad"), 2}, {runtimeError{errors.New("no driver")}, 3},
		{fmt.Errorf("wrapped: %w", runtimeError{errors.New("no driver")}), 3}, {errors.New("rank 1 failed"), 1},
	} {
		assert.Equal(t, tc.want, exitCode(tc.err), "%v", tc.err)
	}
}
