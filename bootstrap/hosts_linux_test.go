package bootstrap_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/bootstrap"
	"github.com/collplan/collplan/emuhost"
)

// Launches across emulated hosts (issue 15, "Launchers"): a 2-host job of 4 ranks started by Open
// MPI's mpirun across two network namespaces, and by torchrun's and srun's environments, with no
// collplan variable but COLLPLAN_JOB_SECRET (the rendezvous is off loopback, so it must be
// authenticated). Each rank is this test binary re-run (TestHostsRank), on its host: it reads its
// identity with FromEnv, joins, and prints its identity and the roster as one JSON line, which the
// test checks against what it knows of the lab (which host each rank ran on).

const (
	rankEnv   = "BOOTSTRAP_HOSTS_RANK" // set in a rank process
	secretEnv = "COLLPLAN_JOB_SECRET"
	secret    = "hosts-test-secret-0123456789"
)

// report is one rank's line.
type report struct {
	Rank, Size, LocalRank, LocalSize int
	Launcher, Node, Host, Rendezvous string
	Nodes                            []bootstrap.NodeRanks
	Err                              string
}

// TestHostsRank is one rank of the tests below; it does nothing in a plain test run.
func TestHostsRank(t *testing.T) {
	if os.Getenv(rankEnv) != "1" {
		return
	}
	out := json.NewEncoder(os.Stdout)
	host, _ := os.Hostname()
	id, err := bootstrap.FromEnv(os.LookupEnv, host)
	if err != nil {
		require.NoError(t, out.Encode(report{Err: "FromEnv: " + err.Error()}))
		return
	}
	r := report{Rank: id.Rank, Size: id.Size, LocalRank: id.LocalRank, LocalSize: id.LocalSize,
		Launcher: string(id.Launcher), Node: id.Node, Host: host, Rendezvous: id.Rendezvous}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	roster, err := bootstrap.Join(ctx, id, bootstrap.Endpoint{Addrs: []string{net.JoinHostPort(host, strconv.Itoa(41000+id.Rank))}})
	if err != nil {
		r.Err = "Join: " + err.Error()
	}
	r.Nodes = roster.Nodes
	require.NoError(t, out.Encode(r))
}

// requireLab makes a lab of hosts hosts, or skips (fails with COLLPLAN_REQUIRE_NETNS=1) where
// emulated hosts cannot be made.
func requireLab(t *testing.T, hosts int) *emuhost.Lab {
	t.Helper()
	if err := emuhost.Check(); err != nil {
		requireOrSkip(t, "COLLPLAN_REQUIRE_NETNS", "emulated hosts cannot be made: "+err.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lab, err := emuhost.Create(ctx, emuhost.Spec{Hosts: hosts, Name: "bs"})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, lab.Close()) })
	return lab
}

// requireOrSkip fails the test when the variable env is 1 and skips it otherwise.
func requireOrSkip(t *testing.T, env, why string) {
	t.Helper()
	if os.Getenv(env) == "1" {
		t.Fatalf("%s=1, but %s", env, why)
	}
	t.Skipf("%s (%s=1 makes this a failure)", why, env)
}

// parseReports reads the ranks' JSON lines out of out (the lines that do not start with '{' are
// the launcher's and the test framework's) and returns them by rank.
func parseReports(t *testing.T, out []byte, size int) []report {
	t.Helper()
	var reps []report
	for _, line := range bytes.Split(out, []byte("\n")) {
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var r report
		require.NoError(t, json.Unmarshal(line, &r), "line %q", line)
		require.Empty(t, r.Err, "a rank failed; all output:\n%s", out)
		reps = append(reps, r)
	}
	require.Len(t, reps, size, "one line per rank; all output:\n%s", out)
	sort.Slice(reps, func(i, j int) bool { return reps[i].Rank < reps[j].Rank })
	for i, r := range reps {
		require.Equal(t, i, r.Rank, "every rank once; all output:\n%s", out)
	}
	return reps
}

// checkJob checks a 4-rank, 2-host job: ranks 0-1 on host 0 and 2-3 on host 1 (as the launcher
// placed them, which the test knows from the hostname each rank saw), every rank's roster two
// nodes of ranks {0, 1} and {2, 3} named as the launcher names them (node0, node1).
func checkJob(t *testing.T, lab *emuhost.Lab, reps []report, launcher string, node0, node1 string) {
	t.Helper()
	for _, r := range reps {
		assert.Equal(t, launcher, r.Launcher, "rank %d", r.Rank)
		assert.Equal(t, 4, r.Size, "rank %d", r.Rank)
		assert.Equal(t, lab.Hostname(r.Rank/2), r.Host, "rank %d ran on host %d", r.Rank, r.Rank/2)
		assert.Equal(t, r.Rank%2, r.LocalRank, "rank %d", r.Rank)
		assert.Equal(t, 2, r.LocalSize, "rank %d", r.Rank)
		assert.Equal(t, []bootstrap.NodeRanks{{Node: node0, Ranks: []int{0, 1}}, {Node: node1, Ranks: []int{2, 3}}}, r.Nodes, "rank %d", r.Rank)
	}
}

// TestMpirunAcrossHosts starts the job with Open MPI's mpirun, run on host 0 with a hostfile of both
// hosts and an rsh agent that enters a host's namespaces (what ssh would do between machines);
// mpirun's own traffic (its daemons' out-of-band channel) is held to the lab's interface, and the
// ranks get only -x MASTER_ADDR -x MASTER_PORT and the secret.
func TestMpirunAcrossHosts(t *testing.T) {
	mpirun, err := exec.LookPath("mpirun")
	if err != nil {
		requireOrSkip(t, "COLLPLAN_REQUIRE_MPI", "Open MPI's mpirun is not on PATH")
	}
	lab := requireLab(t, 2)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	agentPath := filepath.Join(dir, "agent.sh")
	require.NoError(t, lab.WriteRshAgent(agentPath))
	hostfile := filepath.Join(dir, "hostfile")
	require.NoError(t, os.WriteFile(hostfile, []byte(fmt.Sprintf("%s slots=2\n%s slots=2\n", lab.Hostname(0), lab.Hostname(1))), 0o644))

	port := strconv.Itoa(29400 + os.Getpid()%500)
	cmd := lab.Command(ctx, 0, mpirun, "--allow-run-as-root", "-np", "4", "--hostfile", hostfile, "--map-by", "slot",
		"--mca", "plm_rsh_agent", agentPath, "--mca", "oob_tcp_if_include", emuhost.HostInterface,
		"--mca", "btl_tcp_if_include", emuhost.HostInterface, "--mca", "btl", "self,tcp",
		"-x", rankEnv, "-x", "MASTER_ADDR", "-x", "MASTER_PORT", "-x", secretEnv, "-x", "PATH",
		os.Args[0], "-test.run=^TestHostsRank$", "-test.count=1")
	cmd.Env = append(cleanEnv(), rankEnv+"=1", "MASTER_ADDR="+lab.Addr(0).String(), "MASTER_PORT="+port, secretEnv+"="+secret)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "mpirun: %s", out)
	reps := parseReports(t, out, 4)
	// Open MPI exports no node id: the node is the hostname.
	checkJob(t, lab, reps, "mpirun", lab.Hostname(0), lab.Hostname(1))
	for _, r := range reps {
		assert.Equal(t, net.JoinHostPort(lab.Addr(0).String(), port), r.Rendezvous, "rank %d", r.Rank)
	}
}

// TestEnvLaunchersAcrossHosts starts the 4 ranks on their hosts directly with the environment that
// torchrun and srun give their processes, nothing collplan-specific but the secret. srun's job has no
// MASTER_ADDR: rank 0's host is the first of SLURM_STEP_NODELIST, a hostlist expression the hosts
// resolve through their /etc/hosts, and the port is derived from the job and step ids.
func TestEnvLaunchersAcrossHosts(t *testing.T) {
	lab := requireLab(t, 2)
	name := lab.Hostname(0)
	prefix := strings.TrimSuffix(name, "0") // "<lab>-h": the hostlist bs-h[0-1]
	require.Equal(t, prefix+"1", lab.Hostname(1))
	for _, tc := range []struct {
		name, launcher string
		env            func(rank int) []string
		node0, node1   string
	}{
		{"torchrun", "torchrun", func(r int) []string {
			return []string{"RANK=" + strconv.Itoa(r), "WORLD_SIZE=4", "LOCAL_RANK=" + strconv.Itoa(r%2), "LOCAL_WORLD_SIZE=2",
				"GROUP_RANK=" + strconv.Itoa(r/2), "MASTER_ADDR=" + lab.Addr(0).String(), "MASTER_PORT=29511"}
		}, "0", "1"},
		{"srun", "srun", func(r int) []string {
			return []string{"SLURM_PROCID=" + strconv.Itoa(r), "SLURM_NTASKS=4", "SLURM_LOCALID=" + strconv.Itoa(r%2),
				"SLURM_NODEID=" + strconv.Itoa(r/2), "SLURM_STEP_NODELIST=" + prefix + "[0-1]",
				"SLURM_STEP_TASKS_PER_NODE=2(x2)", "SLURM_JOB_ID=4242", "SLURM_STEP_ID=0"}
		}, "0", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			outs := make([]bytes.Buffer, 4)
			var cmds []*exec.Cmd
			for r := range 4 {
				cmd := lab.Command(ctx, r/2, os.Args[0], "-test.run=^TestHostsRank$", "-test.count=1")
				cmd.Env = append(append(cleanEnv(), rankEnv+"=1", secretEnv+"="+secret), tc.env(r)...)
				cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
				require.NoError(t, cmd.Start())
				cmds = append(cmds, cmd)
			}
			var wg sync.WaitGroup
			errs := make([]error, 4)
			for r, cmd := range cmds {
				wg.Go(func() { errs[r] = cmd.Wait() })
			}
			wg.Wait()
			var all []byte
			for r := range 4 {
				require.NoError(t, errs[r], "rank %d: %s", r, outs[r].String())
				all = append(all, outs[r].Bytes()...)
			}
			reps := parseReports(t, all, 4)
			checkJob(t, lab, reps, tc.launcher, tc.node0, tc.node1)
			if tc.launcher == "srun" {
				// The rendezvous is rank 0's host by name, as the hostlist gives it.
				host, _, err := net.SplitHostPort(reps[0].Rendezvous)
				require.NoError(t, err)
				assert.Equal(t, name, host)
			}
		})
	}
}

// cleanEnv is this process's environment without any variable a launcher or collplan reads, so that
// only what a test sets names a rank.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "COLLPLAN_"), strings.HasPrefix(k, "SLURM_"), strings.HasPrefix(k, "OMPI_"),
			strings.HasPrefix(k, "PMIX_"), strings.HasPrefix(k, "TORCHELASTIC_"), strings.HasPrefix(k, "NCCL_"):
		case k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK", k == "LOCAL_WORLD_SIZE", k == "GROUP_RANK",
			k == "MASTER_ADDR", k == "MASTER_PORT":
		default:
			env = append(env, kv)
		}
	}
	return env
}
