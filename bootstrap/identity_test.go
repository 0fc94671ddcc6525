package bootstrap

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func lookupIn(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// without returns m less the keys.
func without(m map[string]string, keys ...string) map[string]string {
	out := merge(m)
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// merge returns the union of maps, later ones winning.
func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

var (
	torchEnv = map[string]string{
		"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
		"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True",
	}
	slurmEnv = map[string]string{
		"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
		"SLURM_STEP_NODELIST": "gpu[01-04]", "SLURM_STEP_TASKS_PER_NODE": "2(x4)",
		"SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0",
	}
	ompiEnv = map[string]string{
		"OMPI_COMM_WORLD_RANK": "2", "OMPI_COMM_WORLD_SIZE": "4",
		"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
	}
)

func TestFromEnv(t *testing.T) {
	const host = "hostA"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want Identity
	}{
		{"torchrun: agent store holds MASTER_PORT", torchEnv, Identity{
			Rank: 3, Size: 8, LocalRank: 1, LocalSize: 2, Node: "1", Host: host, Launcher: Torchrun,
			Rendezvous: "10.0.0.1:29501", RendezvousFrom: "MASTER_ADDR, MASTER_PORT+1 (torchrun's agent store holds MASTER_PORT)",
		}},
		{"torchrun-style env without the agent, no GROUP_RANK", merge(torchEnv, map[string]string{"TORCHELASTIC_USE_AGENT_STORE": "False"}, nil), Identity{
			Rank: 3, Size: 8, LocalRank: 1, LocalSize: 2, Node: "1", Host: host, Launcher: Torchrun,
			Rendezvous: "10.0.0.1:29500", RendezvousFrom: "MASTER_ADDR, MASTER_PORT",
		}},
		// 16*123456 + 0 = 1975296; mod 10000 = 5296; + 20000.
		{"srun: first host of the nodelist, port from the job and step", slurmEnv, Identity{
			Rank: 5, Size: 8, LocalRank: 1, LocalSize: 2, Node: "2", Host: host, Launcher: Srun,
			Rendezvous: "gpu01:25296", RendezvousFrom: "SLURM_STEP_NODELIST, SLURM_JOB_ID and SLURM_STEP_ID",
		}},
		// 16*77 + 3 = 1235.
		{"srun: old variable names", merge(without(slurmEnv, "SLURM_JOB_ID", "SLURM_STEP_ID"), map[string]string{"SLURM_JOBID": "77", "SLURM_STEPID": "3"}), Identity{}},
		{"srun: MASTER_PORT set", merge(slurmEnv, map[string]string{"MASTER_PORT": "12345"}), Identity{
			Rank: 5, Size: 8, LocalRank: 1, LocalSize: 2, Node: "2", Host: host, Launcher: Srun,
			Rendezvous: "gpu01:12345", RendezvousFrom: "SLURM_STEP_NODELIST, MASTER_PORT",
		}},
		{"srun: MASTER_ADDR without MASTER_PORT", merge(slurmEnv, map[string]string{"MASTER_ADDR": "head"}), Identity{
			Rank: 5, Size: 8, LocalRank: 1, LocalSize: 2, Node: "2", Host: host, Launcher: Srun,
			Rendezvous: "head:25296", RendezvousFrom: "MASTER_ADDR, SLURM_JOB_ID and SLURM_STEP_ID",
		}},
		{"srun: uneven tasks per node", merge(slurmEnv, map[string]string{
			"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "0", "SLURM_NODEID": "1",
			"SLURM_STEP_NODELIST": "a[7-8]", "SLURM_STEP_TASKS_PER_NODE": "3,1",
		}), Identity{
			Rank: 3, Size: 4, LocalRank: 0, LocalSize: 1, Node: "1", Host: host, Launcher: Srun,
			Rendezvous: "a7:25296", RendezvousFrom: "SLURM_STEP_NODELIST, SLURM_JOB_ID and SLURM_STEP_ID",
		}},
		{"mpirun -x MASTER_ADDR -x MASTER_PORT", merge(ompiEnv, map[string]string{"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": "4000"}), Identity{
			Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Node: host, Host: host, Launcher: Mpirun,
			Rendezvous: "10.1.2.3:4000", RendezvousFrom: "MASTER_ADDR, MASTER_PORT",
		}},
		{"mpirun with a file rendezvous", merge(ompiEnv, map[string]string{"COLLPLAN_INIT": "file:///shared/jobs/../job.rdv", "MASTER_ADDR": "x", "MASTER_PORT": "1"}), Identity{
			Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Node: host, Host: host, Launcher: Mpirun,
			Rendezvous: "file:///shared/job.rdv", RendezvousFrom: "COLLPLAN_INIT",
		}},
		{"mpirun with tcp:// init", merge(ompiEnv, map[string]string{"COLLPLAN_INIT": "tcp://10.0.0.9:7000"}), Identity{
			Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Node: host, Host: host, Launcher: Mpirun,
			Rendezvous: "10.0.0.9:7000", RendezvousFrom: "COLLPLAN_INIT",
		}},
		{"mpirun on one host, no address", merge(ompiEnv, map[string]string{"OMPI_COMM_WORLD_LOCAL_SIZE": "4"}), Identity{
			Rank: 2, Size: 4, LocalRank: 0, LocalSize: 4, Node: host, Host: host, Launcher: Mpirun,
			Rendezvous: "127.0.0.1:29517", RendezvousFrom: "default (one host)",
		}},
		{"NCCL_COMM_ID wins over MASTER_ADDR (IPv6)", merge(torchEnv, map[string]string{"NCCL_COMM_ID": "[2001:db8::1]:5000"}), Identity{
			Rank: 3, Size: 8, LocalRank: 1, LocalSize: 2, Node: "1", Host: host, Launcher: Torchrun,
			Rendezvous: "[2001:db8::1]:5000", RendezvousFrom: "NCCL_COMM_ID",
		}},
		{"COLLPLAN_INIT wins over NCCL_COMM_ID", merge(torchEnv, map[string]string{"NCCL_COMM_ID": "h:1", "COLLPLAN_INIT": "tcp://g:2"}), Identity{
			Rank: 3, Size: 8, LocalRank: 1, LocalSize: 2, Node: "1", Host: host, Launcher: Torchrun,
			Rendezvous: "g:2", RendezvousFrom: "COLLPLAN_INIT",
		}},
		{"the engine's launcher", map[string]string{"COLLPLAN_RANK": "1", "COLLPLAN_WORLD_SIZE": "3", "COLLPLAN_ADDR": "127.0.0.1:4000", "COLLPLAN_JOB": "12.ab"}, Identity{
			Rank: 1, Size: 3, LocalRank: 1, LocalSize: 3, Node: host, Host: host, Launcher: Collplan,
			Rendezvous: "127.0.0.1:4000", RendezvousFrom: "COLLPLAN_ADDR", Job: "12.ab",
		}},
		{"torchrun under srun: sizes differ, the inner launcher wins", merge(slurmEnv, torchEnv, map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "1(x4)", "SLURM_LOCALID": "0", "SLURM_NODEID": "1"}), Identity{
			Rank: 3, Size: 8, LocalRank: 1, LocalSize: 2, Node: "1", Host: host, Launcher: Torchrun,
			Rendezvous: "10.0.0.1:29501", RendezvousFrom: "MASTER_ADDR, MASTER_PORT+1 (torchrun's agent store holds MASTER_PORT)",
		}},
		{"agreeing launchers", merge(ompiEnv, map[string]string{"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "9"}), Identity{
			Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Node: host, Host: host, Launcher: Torchrun,
			Rendezvous: "m:9", RendezvousFrom: "MASTER_ADDR, MASTER_PORT",
		}},
		{"COLLPLAN_LAUNCHER picks one of two that disagree", merge(ompiEnv, torchEnv, map[string]string{"WORLD_SIZE": "4", "COLLPLAN_LAUNCHER": "mpirun"}), Identity{
			Rank: 2, Size: 4, LocalRank: 0, LocalSize: 2, Node: host, Host: host, Launcher: Mpirun,
			Rendezvous: "10.0.0.1:29501", RendezvousFrom: "MASTER_ADDR, MASTER_PORT+1 (torchrun's agent store holds MASTER_PORT)",
		}},
		{"a secret", merge(ompiEnv, map[string]string{"OMPI_COMM_WORLD_LOCAL_SIZE": "4", "COLLPLAN_JOB_SECRET": "0123456789abcdef"}), Identity{
			Rank: 2, Size: 4, LocalRank: 0, LocalSize: 4, Node: host, Host: host, Launcher: Mpirun,
			Rendezvous: "127.0.0.1:29517", RendezvousFrom: "default (one host)", Secret: "0123456789abcdef",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FromEnv(lookupIn(tc.env), host)
			require.NoError(t, err)
			if tc.want.Size == 0 { // the old Slurm names: only the port is checked
				assert.Equal(t, "gpu01:21235", got.Rendezvous)
				return
			}
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestFromEnvErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // the error names the variable and the value
	}{
		{"RANK >= WORLD_SIZE", merge(torchEnv, map[string]string{"RANK": "8"}), "RANK=8 is not below WORLD_SIZE=8"},
		{"LOCAL_RANK >= LOCAL_WORLD_SIZE", merge(torchEnv, map[string]string{"LOCAL_RANK": "2"}), "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2"},
		{"LOCAL_WORLD_SIZE > WORLD_SIZE", merge(torchEnv, map[string]string{"LOCAL_WORLD_SIZE": "9"}), "LOCAL_WORLD_SIZE=9 is not between 1 and WORLD_SIZE=8"},
		{"non-numeric RANK", merge(torchEnv, map[string]string{"RANK": "three"}), `RANK="three" is not a non-negative integer`},
		{"negative GROUP_RANK", merge(torchEnv, map[string]string{"GROUP_RANK": "-1"}), `GROUP_RANK="-1" is not a non-negative integer`},
		{"WORLD_SIZE=0", merge(torchEnv, map[string]string{"RANK": "0", "WORLD_SIZE": "0"}), "WORLD_SIZE=0: a job has at least one rank"},
		{"LOCAL_RANK missing", map[string]string{"RANK": "0", "WORLD_SIZE": "2"}, "LOCAL_RANK is not set"},
		{"port out of range", merge(torchEnv, map[string]string{"MASTER_PORT": "70000"}), `MASTER_PORT="70000" is not a port (1-65535)`},
		{"port zero", merge(torchEnv, map[string]string{"MASTER_PORT": "0"}), `MASTER_PORT="0" is not a port`},
		{"port with no next port", merge(torchEnv, map[string]string{"MASTER_PORT": "65535"}), `MASTER_PORT="65535": torchrun's agent store holds it`},
		{"MASTER_ADDR without MASTER_PORT", merge(ompiEnv, map[string]string{"MASTER_ADDR": "h"}), `MASTER_ADDR="h" is set without MASTER_PORT`},
		{"MASTER_PORT without MASTER_ADDR", merge(ompiEnv, map[string]string{"MASTER_PORT": "5"}), "MASTER_PORT is set without MASTER_ADDR"},
		{"mpirun across hosts without an address", ompiEnv, "pass MASTER_ADDR and MASTER_PORT (mpirun -x), NCCL_COMM_ID, or COLLPLAN_INIT=file:///shared/path"},
		{"NCCL_COMM_ID: IPv6 without brackets", merge(ompiEnv, map[string]string{"NCCL_COMM_ID": "2001:db8::1:5000"}), `NCCL_COMM_ID="2001:db8::1:5000": want host:port`},
		{"NCCL_COMM_ID: bad port", merge(ompiEnv, map[string]string{"NCCL_COMM_ID": "h:http"}), `NCCL_COMM_ID="http" is not a port`},
		{"COLLPLAN_INIT: relative file", merge(ompiEnv, map[string]string{"COLLPLAN_INIT": "file://shared/x"}), `COLLPLAN_INIT="file://shared/x": a file URL names no host`},
		{"COLLPLAN_INIT: unknown scheme", merge(ompiEnv, map[string]string{"COLLPLAN_INIT": "env://"}), `COLLPLAN_INIT="env://": want file:///shared/path or tcp://host:port`},
		{"two launchers disagree on the rank", merge(ompiEnv, map[string]string{"RANK": "1", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "m", "MASTER_PORT": "9"}),
			"RANK=1 and OMPI_COMM_WORLD_RANK=2 disagree on this process's rank (both say 4 ranks); set COLLPLAN_LAUNCHER"},
		{"srun and mpirun disagree", merge(ompiEnv, slurmEnv, map[string]string{"SLURM_NTASKS": "4", "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_PROCID": "3", "SLURM_NODEID": "1"}),
			"OMPI_COMM_WORLD_RANK=2 and SLURM_PROCID=3 disagree"},
		{"unknown COLLPLAN_LAUNCHER", merge(ompiEnv, map[string]string{"COLLPLAN_LAUNCHER": "pbs"}), `COLLPLAN_LAUNCHER="pbs": want one of collplan, torchrun, mpirun, srun`},
		{"COLLPLAN_LAUNCHER names an absent launcher", merge(ompiEnv, map[string]string{"COLLPLAN_LAUNCHER": "srun"}), `COLLPLAN_LAUNCHER="srun" but that launcher's rank variable is not set`},
		{"short secret", merge(ompiEnv, map[string]string{"COLLPLAN_JOB_SECRET": "hunter2"}), "COLLPLAN_JOB_SECRET is 7 bytes long, want at least 16"},
		{"srun: rank 0 not on the first host", merge(slurmEnv, map[string]string{"SLURM_PROCID": "0", "SLURM_LOCALID": "0"}), `SLURM_PROCID=0 runs on SLURM_NODEID=2, not on the first host of SLURM_STEP_NODELIST="gpu[01-04]"`},
		{"srun: malformed nodelist", merge(slurmEnv, map[string]string{"SLURM_STEP_NODELIST": "gpu[01-04"}), `SLURM_STEP_NODELIST: bootstrap: hostlist "gpu[01-04": position 3: '[' without ']'`},
		{"srun: SLURM_NODEID past the nodes", merge(slurmEnv, map[string]string{"SLURM_STEP_TASKS_PER_NODE": "4(x2)"}), `SLURM_NODEID=2 but SLURM_STEP_TASKS_PER_NODE="4(x2)" lists 2 nodes`},
		{"srun: no tasks per node", without(slurmEnv, "SLURM_STEP_TASKS_PER_NODE"), "SLURM_STEP_TASKS_PER_NODE is not set"},
		{"srun: no job id for the port", without(slurmEnv, "SLURM_JOB_ID"), "neither MASTER_PORT nor SLURM_JOB_ID is set"},
		{"srun: tasks per node sum", merge(slurmEnv, map[string]string{"SLURM_STEP_TASKS_PER_NODE": "2(x3),1"}), `SLURM_STEP_TASKS_PER_NODE="2(x3),1" adds up to 7 tasks, SLURM_NTASKS=8`},
		{"srun: SLURM_LOCALID past the node's tasks", merge(slurmEnv, map[string]string{"SLURM_LOCALID": "2"}), "SLURM_LOCALID=2 is not below node 2's 2 tasks"},
		{"srun: nodelist and tasks per node disagree", merge(slurmEnv, map[string]string{"SLURM_STEP_NODELIST": "gpu[01-03]"}), `SLURM_STEP_NODELIST="gpu[01-03]" names 3 hosts, SLURM_STEP_TASKS_PER_NODE="2(x4)" 4 nodes`},
		{"srun: bad job id", merge(slurmEnv, map[string]string{"SLURM_JOB_ID": "12x"}), `SLURM_JOB_ID="12x" is not a job id`},
		{"srun: empty nodelist", merge(slurmEnv, map[string]string{"SLURM_STEP_NODELIST": ""}), `SLURM_STEP_NODELIST: bootstrap: hostlist "": position 0: empty host name`},
		{"srun: no nodelist", without(slurmEnv, "SLURM_STEP_NODELIST"), "SLURM_STEP_NODELIST is not set and neither is MASTER_ADDR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := FromEnv(lookupIn(tc.env), "hostA")
			require.ErrorIs(t, err, ErrEnv)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestFromEnvNoLauncher(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"empty": {},
		// A batch script's own environment: SLURM_PROCID, but no step.
		"sbatch script": {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_ID": "9", "MASTER_ADDR": "x"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromEnv(lookupIn(env), "h")
			assert.ErrorIs(t, err, ErrNoLauncher)
		})
	}
	_, err := FromEnv(lookupIn(torchEnv), "")
	assert.ErrorContains(t, err, "empty hostname")
}

func TestSecretRedacted(t *testing.T) {
	id := Identity{Secret: "0123456789abcdef-very-secret"}
	for _, s := range []string{fmt.Sprint(id), fmt.Sprintf("%+v", id), fmt.Sprintf("%#v", id)} {
		assert.NotContains(t, s, "very-secret")
		assert.Contains(t, s, "[redacted]")
	}
}
