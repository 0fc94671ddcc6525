package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/emuhost"
)

// Jobs across emulated hosts that a launcher started, not collbench (issue 15, "Launchers"): 4 ranks
// on 2 hosts, each rank this test binary run as collbench (envTestMain) in its host's namespaces,
// by Open MPI's mpirun across the two namespaces and with the environments torchrun and srun give
// their processes, with no collplan variable but COLLPLAN_JOB_SECRET. Every rank is its own
// process: shm inside a host, the network transport between them.

const launchedSecret = "launched-test-secret-0123456789"

// launchedEnvs is the environment of rank r of a 4-rank job on lab's 2 hosts, as torchrun and srun
// give it.
func launchedEnvs(lab *emuhost.Lab, port int) map[string]func(r int) []string {
	prefix := strings.TrimSuffix(lab.Hostname(0), "0") // "<lab>-h": the hostlist <lab>-h[0-1]
	return map[string]func(int) []string{
		"torchrun": func(r int) []string {
			return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=4", "LOCAL_RANK=" + strconv.Itoa(r%2), "LOCAL_WORLD_SIZE=2",
				"GROUP_RANK=" + strconv.Itoa(r/2), "MASTER_ADDR=" + lab.Addr(0).String(), "MASTER_PORT=" + strconv.Itoa(port)}
		},
		"srun": func(r int) []string {
			return []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=4", "SLURM_LOCALID=" + strconv.Itoa(r%2),
				"SLURM_NODEID=" + strconv.Itoa(r/2), "SLURM_STEP_NODELIST=" + prefix + "[0-1]",
				"SLURM_STEP_TASKS_PER_NODE=2(x2)", "SLURM_JOB_ID=4243", "SLURM_STEP_ID=0", "MASTER_PORT=" + strconv.Itoa(port)}
		},
	}
}

// launcherEnv is this process's environment without any variable a launcher or collplan reads,
// with the test binary made collbench and the job's secret.
func launcherEnv() []string {
	env := []string{envTestMain + "=1", "COLLPLAN_JOB_SECRET=" + launchedSecret}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "COLLPLAN_"), strings.HasPrefix(k, "COLLBENCH_"), strings.HasPrefix(k, "SLURM_"),
			strings.HasPrefix(k, "OMPI_"), strings.HasPrefix(k, "PMIX_"), strings.HasPrefix(k, "PMI_"),
			strings.HasPrefix(k, "TORCHELASTIC_"), strings.HasPrefix(k, "NCCL_"):
		case k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "LOCAL_WORLD_SIZE", k == "GROUP_RANK",
			k == "MASTER_ADDR", k == "MASTER_PORT", k == "GOMAXPROCS":
		default:
			env = append(env, kv)
		}
	}
	// Four rank processes share this machine's cores: one P each, as --hosts gives them.
	return append(env, "GOMAXPROCS=1")
}

// launchedLab is a lab of 2 emulated hosts, or a skip where none can be made.
func launchedLab(t *testing.T, name string) *emuhost.Lab {
	t.Helper()
	requireHosts(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lab, err := emuhost.Create(ctx, emuhost.Spec{Hosts: 2, Name: name})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, lab.Close()) })
	return lab
}

// startRanks starts the 4 ranks on their hosts with env(r) and args, and returns their commands
// and outputs (stdout and stderr together).
func startRanks(t *testing.T, ctx context.Context, lab *emuhost.Lab, env func(r int) []string, args func(r int) []string) ([]*exec.Cmd, []*syncBuffer) {
	t.Helper()
	cmds := make([]*exec.Cmd, 4)
	outs := make([]*syncBuffer, 4)
	for r := range 4 {
		cmds[r] = lab.Command(ctx, r/2, os.Args[0], args(r)...)
		cmds[r].Env = append(launcherEnv(), env(r)...)
		outs[r] = &syncBuffer{}
		cmds[r].Stdout, cmds[r].Stderr = outs[r], outs[r]
		require.NoError(t, cmds[r].Start(), "rank %d", r)
	}
	return cmds, outs
}

// waitRanks waits for every command and returns their errors.
func waitRanks(cmds []*exec.Cmd) []error {
	errs := make([]error, len(cmds))
	var wg sync.WaitGroup
	for r, cmd := range cmds {
		wg.Go(func() { errs[r] = cmd.Wait() })
	}
	wg.Wait()
	return errs
}

var launchedArgs = []string{"allreduce", "-b", "8", "-e", "64K", "-f", "8", "-n", "3", "-w", "1"}

// checkLaunched checks rank 0's table of a launched job: the transport line names the launcher,
// each rank's line its own process on its host, and every row is right.
func checkLaunched(t *testing.T, lab *emuhost.Lab, text, launcher string) {
	t.Helper()
	assert.Contains(t, text, "net (2 hosts x 2 rank processes from "+launcher)
	assert.Contains(t, text, "# Out of bounds values : 0 OK")
	pids := map[string]bool{}
	for r := range 4 {
		m := regexp.MustCompile(fmt.Sprintf(`Rank +%d .*Pid +(\d+) on +%s `, r, regexp.QuoteMeta(lab.Hostname(r/2)))).FindStringSubmatch(text)
		if assert.NotNil(t, m, "rank %d's line: %s", r, text) {
			pids[m[1]] = true
		}
	}
	assert.Len(t, pids, 4, "a process per rank")
	rows := 0
	for _, l := range strings.Split(text, "\n") {
		if f := strings.Fields(l); len(f) >= 13 && !strings.HasPrefix(f[0], "#") {
			rows++
			assert.Equal(t, "0", f[8], "out-of-place #wrong: %s", l)
			assert.Equal(t, "0", f[12], "in-place #wrong: %s", l)
		}
	}
	assert.Equal(t, 5, rows, "8 B to 64 KiB by 8: %s", text)
}

// TestLaunchedAcrossHosts: collbench under torchrun's and srun's environments, each rank started on
// its host directly, and under Open MPI's mpirun run on host 0 with a hostfile of both hosts and an
// rsh agent that enters a host's namespaces (what ssh would do between machines), its traffic held
// to the lab's interface; the ranks get only -x MASTER_ADDR -x MASTER_PORT and the secret.
func TestLaunchedAcrossHosts(t *testing.T) {
	lab := launchedLab(t, "la")
	port := 29700 + os.Getpid()%200
	envs := launchedEnvs(lab, port)
	for _, launcher := range []string{"torchrun", "srun"} {
		t.Run(launcher, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			cmds, outs := startRanks(t, ctx, lab, envs[launcher], func(int) []string { return launchedArgs })
			for r, err := range waitRanks(cmds) {
				require.NoError(t, err, "rank %d: %s", r, outs[r].String())
			}
			checkLaunched(t, lab, outs[0].String(), launcher)
			for r := 1; r < 4; r++ {
				assert.NotContains(t, outs[r].String(), "# Out of bounds", "only rank 0 prints the table")
			}
		})
	}
	t.Run("mpirun", func(t *testing.T) {
		mpirun, err := exec.LookPath("mpirun")
		if err != nil {
			if os.Getenv("COLLPLAN_REQUIRE_MPI") == "1" {
				t.Fatal("COLLPLAN_REQUIRE_MPI=1, but Open MPI's mpirun is not on PATH")
			}
			t.Skip("Open MPI's mpirun is not on PATH (COLLPLAN_REQUIRE_MPI=1 makes this a failure)")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		dir := t.TempDir()
		agent := filepath.Join(dir, "agent.sh")
		require.NoError(t, lab.WriteRshAgent(agent))
		hostfile := filepath.Join(dir, "hostfile")
		require.NoError(t, os.WriteFile(hostfile, []byte(lab.Hostname(0)+" slots=2\n"+lab.Hostname(1)+" slots=2\n"), 0o644))
		args := []string{"--allow-run-as-root", "-np", "4", "--hostfile", hostfile, "--map-by", "slot", "--bind-to", "none",
			"--mca", "plm_rsh_agent", agent, "--mca", "oob_tcp_if_include", emuhost.HostInterface,
			"--mca", "btl_tcp_if_include", emuhost.HostInterface, "--mca", "btl", "self,tcp",
			"-x", envTestMain, "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", "COLLPLAN_JOB_SECRET", "-x", "PATH", "-x", "GOMAXPROCS",
			os.Args[0]}
		cmd := lab.Command(ctx, 0, mpirun, append(args, launchedArgs...)...)
		cmd.Env = append(launcherEnv(), "MASTER_ADDR="+lab.Addr(0).String(), "MASTER_PORT="+strconv.Itoa(port+1))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "mpirun: %s", out)
		checkLaunched(t, lab, string(out), "mpirun")
	})
}

// TestLaunchedMismatch: a rank started with other flags (-n 4 against -n 3) fails the job at the
// rendezvous, every rank naming it, before any collective runs.
func TestLaunchedMismatch(t *testing.T) {
	lab := launchedLab(t, "lm")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmds, outs := startRanks(t, ctx, lab, launchedEnvs(lab, 29700+os.Getpid()%200)["torchrun"], func(r int) []string {
		if r == 3 {
			return []string{"allreduce", "-b", "8", "-e", "64K", "-f", "8", "-n", "4", "-w", "1"}
		}
		return launchedArgs
	})
	for r, err := range waitRanks(cmds) {
		require.Error(t, err, "rank %d: %s", r, outs[r].String())
		assert.Contains(t, outs[r].String(), "rank 3's configuration digest", "rank %d", r)
		assert.NotContains(t, outs[r].String(), "float     sum", "rank %d ran no collective", r)
	}
}

// TestLaunchedRankKilled: rank 3 (host 1, not its local rank 0) killed mid-sweep: every other rank
// exits with an error naming rank 3 within 10 s.
func TestLaunchedRankKilled(t *testing.T) {
	lab := launchedLab(t, "lk")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmds, outs := startRanks(t, ctx, lab, launchedEnvs(lab, 29700+os.Getpid()%200)["torchrun"], func(int) []string {
		return []string{"allreduce", "-b", "8", "-e", "64K", "-f", "4", "-N", "0", "-n", "20", "-w", "1"}
	})
	require.Eventually(t, func() bool { return strings.Contains(outs[0].String(), "float     sum") }, 30*time.Second, 20*time.Millisecond,
		"the sweep started: %s", outs[0].String())
	t0 := time.Now()
	require.NoError(t, syscall.Kill(-cmds[3].Process.Pid, syscall.SIGKILL)) // nsenter and the rank: their group
	done := make(chan []error, 1)
	go func() { done <- waitRanks(cmds[:3]) }()
	select {
	case errs := <-done:
		took := time.Since(t0)
		assert.Less(t, took, 10*time.Second)
		for r, err := range errs {
			require.Error(t, err, "rank %d: %s", r, outs[r].String())
			assert.Regexp(t, `rank 3: lost`, outs[r].String(), "rank %d names rank 3", r)
		}
		t.Logf("ended %v after the kill", took.Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatalf("still running 20 s after the kill: %s", bytes.Join([][]byte{[]byte(outs[0].String()), []byte(outs[1].String()), []byte(outs[2].String())}, []byte("\n---\n")))
	}
	cmds[3].Wait()
}

// TestLaunchedOneHost: a launcher's job on one host runs on shared memory as one job of 2 ranks:
// under srun (whose variables engine/launch does not read) and under torchrun naming this host
// rather than loopback in MASTER_ADDR (which engine/launch refuses). Before, each srun task ran a
// job of its own and the torchrun job failed ("only loopback").
func TestLaunchedOneHost(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	port := 29900 + os.Getpid()%90
	file := filepath.Join(t.TempDir(), "rendezvous")
	for _, tc := range []struct {
		name string
		env  func(r int) []string
	}{
		{"srun", func(r int) []string {
			return []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=2", "SLURM_LOCALID=" + strconv.Itoa(r),
				"SLURM_NODEID=0", "SLURM_STEP_NODELIST=" + host, "SLURM_STEP_TASKS_PER_NODE=2", "SLURM_JOB_ID=4244",
				"SLURM_STEP_ID=0", "MASTER_PORT=" + strconv.Itoa(port)}
		}},
		{"torchrun", func(r int) []string {
			return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=2", "LOCAL_RANK=" + strconv.Itoa(r), "LOCAL_WORLD_SIZE=2",
				"GROUP_RANK=0", "MASTER_ADDR=" + host, "MASTER_PORT=" + strconv.Itoa(port+1)}
		}},
		{"mpirun with a file rendezvous", func(r int) []string {
			return []string{"OMPI_COMM_WORLD_RANK=" + strconv.Itoa(r), "OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_LOCAL_RANK=" + strconv.Itoa(r),
				"OMPI_COMM_WORLD_LOCAL_SIZE=2", "COLLPLAN_INIT=file://" + file, "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + strconv.Itoa(port+2)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmds := make([]*exec.Cmd, 2)
			outs := make([]*syncBuffer, 2)
			for r := range cmds {
				cmds[r] = exec.CommandContext(ctx, os.Args[0], launchedArgs...)
				cmds[r].Env = append(launcherEnv(), tc.env(r)...)
				outs[r] = &syncBuffer{}
				cmds[r].Stdout, cmds[r].Stderr = outs[r], outs[r]
				require.NoError(t, cmds[r].Start())
			}
			for r, err := range waitRanks(cmds) {
				require.NoError(t, err, "rank %d: %s", r, outs[r].String())
			}
			text := outs[0].String()
			assert.Contains(t, text, "# collbench transport: shm")
			assert.Contains(t, text, "# Out of bounds values : 0 OK")
			for r, cmd := range cmds {
				assert.Regexp(t, fmt.Sprintf(`Rank +%d .*Pid +%d `, r, cmd.Process.Pid), text, "rank %d is process %d", r, cmd.Process.Pid)
			}
			assert.NotContains(t, outs[1].String(), "# Out of bounds", "one job: only rank 0 prints a table")
		})
	}
}
