package bootstrap_test

import (
	"fmt"

	"github.com/collplan/collplan/bootstrap"
)

func ExampleExpandHostlist() {
	hosts, err := bootstrap.ExpandHostlist("gpu[01-03,07],login1,rack[1-2]-n[8-9]")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(hosts)
	_, err = bootstrap.ExpandHostlist("gpu[01-03")
	fmt.Println(err)
	// Output:
	// [gpu01 gpu02 gpu03 gpu07 login1 rack1-n8 rack1-n9 rack2-n8 rack2-n9]
	// bootstrap: hostlist "gpu[01-03": position 3: '[' without ']'
}

func ExampleFromEnv() {
	// What srun sets for task 5 of 8, two per node on gpu[01-04], in job 123456's step 0.
	env := map[string]string{
		"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
		"SLURM_STEP_NODELIST": "gpu[01-04]", "SLURM_STEP_TASKS_PER_NODE": "2(x4)",
		"SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0",
	}
	id, err := bootstrap.FromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, "gpu03")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: rank %d of %d, local %d of %d on node %s; rank 0 at %s (%s)\n",
		id.Launcher, id.Rank, id.Size, id.LocalRank, id.LocalSize, id.Node, id.Rendezvous, id.RendezvousFrom)
	// Output:
	// srun: rank 5 of 8, local 1 of 2 on node 2; rank 0 at gpu01:25296 (SLURM_STEP_NODELIST, SLURM_JOB_ID and SLURM_STEP_ID)
}
