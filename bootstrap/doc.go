// Package bootstrap brings the ranks of a multi-host job together: FromEnv reads who a process
// is from the variables its launcher set, and Join meets the other ranks over TCP and returns the
// Roster (every rank's record, and the ranks of each node). collbench uses it for jobs across
// hosts (--hosts, and the ranks a launcher starts on several hosts); a job on one host meets
// through engine.Join on loopback, whose connections stay open for the job's life.
//
// # Detection
//
// FromEnv tries the launchers in this order and takes the first whose rank variable is set:
//
//  1. collplan, the engine's own launcher: COLLPLAN_RANK, COLLPLAN_WORLD_SIZE, COLLPLAN_ADDR,
//     COLLPLAN_JOB. Its ranks share one host.
//  2. torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE; the node id is GROUP_RANK.
//  3. mpirun (Open MPI): OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE; the node id is
//     the hostname (Open MPI exports none).
//  4. srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID (the node id), the local
//     size from SLURM_STEP_TASKS_PER_NODE. Only a task of a step counts (SLURM_STEP_ID or
//     SLURM_STEPID set): a batch script's own environment is not a launch.
//
// The inner launcher comes first, because launchers nest: torchrun is often started by srun, and
// Open MPI starts its daemons with srun inside an allocation. A launcher whose size differs from
// the chosen one's describes an outer level and is ignored; two that claim the same size must
// agree on the rank, or FromEnv fails naming both variables. COLLPLAN_LAUNCHER=name forces one
// launcher and skips that check.
//
// The rendezvous is, first match wins: COLLPLAN_INIT (file:///shared/path, or tcp://host:port);
// COLLPLAN_ADDR; NCCL_COMM_ID ("host:port", an IPv6 host in brackets: it wins over MASTER_ADDR
// because it is the variable NCCL itself reads for its own bootstrap, and torchrun always sets
// MASTER_ADDR, so one set beside it was set on purpose); MASTER_ADDR with MASTER_PORT; under srun,
// the first host of SLURM_STEP_NODELIST (see ExpandHostlist) with MASTER_PORT, else SlurmPort of
// SLURM_JOB_ID and SLURM_STEP_ID, which every task computes alike; and for a job on one host
// (local size = size), 127.0.0.1:DefaultPort. Under torchrun's agent (TORCHELASTIC_USE_AGENT_STORE
// = True) MASTER_PORT is held by the agent's own TCPStore on rank 0's host, so the rendezvous
// takes MASTER_PORT+1. A job across hosts with none of these is an error. The node id is the
// launcher's (GROUP_RANK, SLURM_NODEID), else the hostname. A malformed or inconsistent value is
// an error naming the variable and its value.
//
// # Protocol
//
// Rank 0 listens on the rendezvous address (every interface at that port unless the address is
// loopback); with a file URL it listens on an ephemeral port and publishes its address and a
// fresh job nonce in the file (written to a temporary file and renamed, so no rank reads half of
// it), and removes the file when Join ends. Every other rank connects, retrying with a backoff of
// 10 ms doubling to 500 ms while rank 0 starts (rereading the file each time), the whole Join
// bounded by its context. Every message is a frame: a 4-byte big-endian length n (at most 4 KiB
// before a peer is authenticated, 64 KiB for a record, 16 MiB for the roster), then n bytes, a
// type and a payload. On each connection:
//
//	peer -> rank 0   Hello      "collplan-bootstrap/1", Np (32 random bytes)
//	rank 0 -> peer   Challenge  N0 (32 random bytes), HMAC-SHA256(K, "collplan-bootstrap/1 rank0" || Np || N0)
//	peer -> rank 0   Proof      HMAC-SHA256(K, "collplan-bootstrap/1 peer" || Np || N0)
//	peer -> rank 0   Record     JSON: rank, size, local rank and size, node id, host, endpoint
//	                            (addresses, the node's shm job id, a configuration digest), job nonce
//	rank 0 -> peer   Waiting    JSON: the ranks still missing (every 200 ms while that changes)
//	rank 0 -> peer   Roster     JSON, or Fatal (text): the same verdict to every rank
//
// where K is the job secret (COLLPLAN_JOB_SECRET). At any step from the Proof on, rank 0 may
// answer Rejected (text) instead: this connection is refused (a failed proof, a stale file's
// nonce) and the job goes on without it; the peer tries again. Rank 0 checks that every rank arrives exactly
// once, for the same size, that each node's local ranks are 0..k-1 with local size k, and that every
// rank's endpoint carries rank 0's configuration digest (collbench's engine configuration hash); any
// mismatch is sent to every rank as Fatal. Half a second (at most a tenth of the time left)
// before its deadline rank 0 sends Fatal naming the ranks still missing; a rank whose own deadline
// comes first names the ranks rank 0 last reported missing, and a rank that never reached rank 0
// says so. After a verdict against the job rank 0 stays up to 2 s more (not past its context) to
// give the same verdict to the ranks that arrive late.
//
// # Security
//
// Both sides prove knowledge of the job secret over two fresh nonces from crypto/rand: a recorded
// handshake does not replay (rank 0's nonce is new each time), and the two directions' HMACs have
// different labels, so rank 0's proof reflected back to it does not pass as a peer's. A peer that
// fails its proof, sends a malformed or oversized frame, or says nothing within the handshake
// deadline (3 s) is logged and dropped; the rendezvous goes on, so a stranger can neither join nor
// stop the job, nor hold the listener (each connection is handled on its own). Peers check rank
// 0's proof too, so a stranger listening on a stale address cannot hand out a roster. Off loopback
// Join refuses to run without a secret; on loopback it is optional, and without it any local user
// can join.
//
// Limits: only the handshake is authenticated. Nothing is encrypted, neither the rendezvous nor
// the data path, and the frames after the handshake carry no MAC, so an attacker on the path who
// can rewrite TCP streams can still tamper; a stranger can open many connections at once (each
// costs a descriptor for up to the handshake deadline). Over TCP (no file, so no job nonce) two
// jobs started at once on one address with one secret and size cannot be told apart. The secret
// must reach the ranks by a channel the attacker cannot read (the launcher's environment).
//
// # File rendezvous
//
// The file must be fresh for each job, as torch.distributed's file init requires: use a new path
// per job, or delete it before the job starts. A file left by a dead job (its rank 0 does not
// answer, or answers with another job's nonce) is not used silently: the peers keep rereading it
// until rank 0 overwrites it, and at the deadline report that the file is stale, with the address,
// pid, host and time it names.
package bootstrap
