// Package engine executes collectives the way NCCL does, on CPUs: a communicator of n ranks; each
// call split across channels, each channel with its own ring order, tree and connections; each
// connection a FIFO of NCCL_STEPS = 8 slots with head and tail counters; three real wire
// protocols; algorithms built from NCCL's primitives.
//
// # Communicators
//
// A Comm is one rank. NewInProcess makes the n ranks of a communicator whose ranks are goroutines
// of one process; New makes one rank over any Transport (a shared-memory transport runs one rank
// per process). Every rank calls the same collectives in the same order, each from its own
// goroutine: AllReduce, AllGather, ReduceScatter, Broadcast and Reduce, in place or out of place,
// with NCCL's counts (per rank for AllGather and ReduceScatter) on byte slices of little-endian
// elements. The dtypes and operators are the kernels package's, with NCCL's semantics (float avg
// pre-multiplies every input by 1/n as it is loaded; integer avg sums in the element type and
// divides once; RedOpCreatePreMulSum makes per-rank scalar operators).
//
// # Agreement
//
// Every rank posts a descriptor of its call (collective, count, dtype, op, root, plan) in the
// control region and starts moving data at once; it reads the peers' descriptors while it waits
// for data, and returns only once it has read them all. A difference is a *MismatchError on every
// rank (the same one); an argument one rank rejects is ErrInvalid there and ErrRejected elsewhere.
// Either aborts the communicator, since data of the call may sit in the FIFOs, except a call every
// rank rejected. The descriptors alternate between two lines by call parity, which is safe because
// no rank can post call k+2 before every rank has read call k (agree.go). Checking before any data
// moved, as this engine did first, cost a quarter of a 2-rank 8-byte AllReduce.
//
// # Channels and virtual nodes
//
// A call's elements are cut into contiguous ranges, one per channel (the plan's channel count);
// each channel runs on its own goroutine per rank. Config.RanksPerNode groups consecutive ranks
// into virtual nodes: rings visit the nodes in order (each channel rotates the ranks inside the
// nodes, odd channels run backwards), and the trees are NCCL's double binary tree over the nodes
// (capabilities.Dtree) with a chain inside each node, even channels on tree 0 and odd channels on
// tree 1.
//
// # Connections and protocols
//
// A connection (one channel, one sender, one receiver) is a region of NCCL_STEPS slots per protocol
// plus a head counter (written by the receiver) and a tail counter (written by the sender). A step
// fills one slot; the sender waits for head > step-8, so it never runs more than 8 slots ahead and
// the staging memory of a connection is fixed, whatever the message size. The formats (see
// engine/internal/wire, conn.go and layout.go, for the bytes):
//
//   - Simple: the payload, then a release store of tail = step+1; the receiver acquires the tail.
//   - LL: 16-byte lines {data 4 B, flag 4 B, data 4 B, flag 4 B}, each 8-byte half one 8-byte
//     store with flag = step+1; the receiver polls the halves and needs neither fence nor tail.
//   - LL128: 128-byte lines of 120 payload bytes and an 8-byte flag (the last word), stored with
//     release after the payload; the receiver acquires the flag, then reads the payload.
//
// Receivers poll without allocating: a few plain polls, then, when every polling goroutine of the
// job has a core, polls for up to 20 us, then for a millisecond polls with
// runtime.Gosched (so that with more ranks and channels than cores the rank being waited for runs;
// when the ranks are processes and outnumber the cores, also sched_yield, which hands the core to
// another process), then polls separated by sleeps that double up to 256 us. A Launcher that starts
// more rank processes than cores sets GOMAXPROCS=1 in their environment unless it is set. A
// transport whose own goroutines store into the regions (the network transport's proxy and socket
// readers) may offer a bell (wire.Parker): its ranks' sleeps then block on it, and where its hosts
// outnumber the cores the yield phase is 10 us instead of a millisecond.
//
// # Algorithms
//
// Ring, for all five collectives, as NCCL's runRing: AllReduce is reduce-scatter fused with
// all-gather in one loop (send, recvReduceSend..., recvReduceCopySend, recvCopySend..., recv).
// Tree, for AllReduce, as runTreeSplit: the root receives, reduces and sends back down in one
// primitive; every other rank runs reduce-up (recvReduceSend, or send at a leaf) and broadcast-down
// (recvCopySend, or recv at a leaf) concurrently on two goroutines, chunk by chunk; a channel whose
// range is one FIFO step runs the two halves in sequence on one goroutine, as runTreeUpDown does
// (nothing to overlap there, and a second goroutine costs a wake-up). PAT, for AllGather and
// ReduceScatter at one rank per node with Simple, as NCCL's PatAGAlgorithm and PatRSAlgorithm
// (engine/internal/algorithm's pat.go): binomial trees over power-of-two distances, one connection
// to and one from each distance 2^d < n per channel (made by the first PAT call, so Ring and Tree
// jobs map none of them); per chunk n-1 ops, each sending and receiving one FIFO step on one
// distance, AllGather forwarding blocks down the trees, ReduceScatter reducing partials up them
// (NCCL's aggregation of several ops into one slot is not reproduced; pat.go says what is). Chunk
// and step sizes come from the plan, capped by the connection buffers as NCCL's calcCollChunking
// caps them (and, on a cycling ring, at half the FIFO so every rank's first chunk fits before it
// receives).
//
// NVLS, for AllReduce, AllGather and ReduceScatter with Simple in one virtual node of every rank
// (set-up in nvls.go, kernel in engine/internal/algorithm's nvls.go), as runNvls: each channel has a multicast object, region "nvls/NODE/CH", in which every
// member (rank) has an up and a down buffer of NCCL_STEPS steps of one NVLS chunk per head
// (nvlsChunkSize, NCCL_NVLS_CHUNKSIZE, capped at a Simple slot), as ncclNvlsBufferSetup lays
// them out, and two operations that stand for the switch's multimem instructions: ldReduce (the
// reduction of a range across every member's up buffer) and st (the same bytes into every member's
// down buffer). AllReduce scatters each step's n shares of its input into its up buffer, ld_reduces
// and st's its own share, and gathers the step out of its down buffer; AllGather st's its block and
// gathers; ReduceScatter scatters the n blocks and ld_reduces its own into the output. Per-member
// counters (posted, reduced, done) say when a step's data is in and when a slot is free again, with
// the connections' 8-step discipline, so staging is fixed whatever the size. On CPU the rank that
// issues ldReduce does the adds the switch would do (it reads every member's buffer), and st is a
// copy per member; no byte moves through a point-to-point connection (ChannelStats counts
// LdReduceBytes and StBytes instead). One goroutine per channel pipelines the steps through the
// phases (NCCL runs them in separate warps): it runs whichever phase's next step is ready, so a
// rank scatters up to NCCL_STEPS steps ahead while it waits for the others' shares.
//
// NVLS_TREE, for AllReduce with Simple on 2 or more virtual nodes of the same size, at least 2
// ranks each (nvlstree.go here and in engine/internal/algorithm), as NCCL's NVLS_TREE kernel and connectNvls compose them: NVLS inside
// each node (a multicast object per node and channel, "nvls/NODE/CH"; every rank scatters each
// step's shares and gathers the step) and NCCL's double binary tree between the nodes. Every rank
// of a node is a head and owns its share of every step, as NCCL's nHeads = localRanks: head h
// ld_reduces share h across its node, adds the partial sums of share h from its tree children,
// and sends the result to its tree parent; the final share comes back down, and head h st's it
// into every member's down buffer and sends it on to its children (at the root the sum turns
// around in one phase). The tree of head h joins the local ranks h of the nodes, over
// capabilities.Dtree (even channels tree 0, odd channels tree 1), with ordinary Simple
// connections, one share per FIFO step; no connection inside a node carries a byte. The tree
// phases join the NVLS worker's pipeline on its goroutine, each running only when its counters
// and connections are ready.
//
// CollNetDirect and CollNetChain, for AllReduce with Simple on 2 or more virtual nodes, and
// CollNetDirect for AllGather and ReduceScatter (collnet.go here and in engine/internal/algorithm),
// as NCCL's COLLNET_DIRECT and COLLNET_CHAIN kernels: the network's reduction across the nodes is the aggregation endpoint's (engine/transport/collnet), a server standing for a
// reducing switch that every head reaches over TCP (Config.CollNet; COLLPLAN_COLLNET_ADDR for rank
// processes). CollNetDirect: every rank of a node is a head, of share h of every step, as NCCL's
// nHeads = localRanks; inside the node it runs on the NVLS worker over a region of NVLS's shape
// ("collnet/NODE/CH"), which stands for NCCL's direct pointers: every rank scatters each step's
// shares of its input (with the pre-op) into its up buffer, head h reduces share h across the
// members' up buffers into a frame and sends it to the endpoint, receives the sum over the nodes,
// applies the post-op and writes it into every member's down buffer, and every rank gathers the
// step; no point-to-point connection carries a byte, and up to NCCL_STEPS steps are in flight to
// the endpoint. CollNetChain: the node's ranks form a chain (Simple connections, one chunk per FIFO
// step) to its first rank, the head: Tree's reduce-up and broadcast-down along it, and a head
// worker that sends each step's node sum to the endpoint as soon as its child's partial is in and a
// credit is free, and sends each result (post-op applied) down as soon as it is back.
// CollNetDirect AllGather and ReduceScatter use the endpoint's iallgather and ireducescatter and
// the same region, one region step per (chunk, node): AllGather's head h sends its own chunk,
// gets every node's back and st's each into every member's down buffer, from which every rank
// copies the blocks of the node's heads; ReduceScatter's ranks scatter (with the pre-op) the
// chunks of the blocks each head owns, head h reduces them across the node into one frame of
// nNodes parts, and the endpoint returns the sum of its own node's part, which is the head's
// output chunk (post-op applied).
//
// # Plans
//
// Each call's plan comes from Config.Plan (a function of collective and model byte count), else
// the first matching Config.Tables (compiled planner.DecisionTables; a table of the call's
// collective for another op or dtype only where its pick can run the call), else Ring/Simple on
// Config.Channels; Config.Override (or SetOverride) pins the algorithm, protocol or channel count; a
// pinned algorithm that NCCL runs with Simple only (NVLS, NVLS_TREE, CollNet, PAT) runs with Simple
// unless the protocol is pinned too. Tree outside AllReduce is refused with ErrNotImplemented ("not
// implemented in the engine") on every rank. PAT where NCCL would not run it (a collective other
// than AllGather and ReduceScatter, more than one rank per node, LL or LL128, ReduceScatter with avg
// or PreMulSum) is ErrInvalid on every rank; a PAT chunk is NCCL's (the Simple slot, halved while
// chunk*channels*32, or 16 for ReduceScatter, exceeds the model bytes, floor 64 KiB) and is also its
// FIFO step. An NVLS plan NCCL would not run is ErrInvalid on every rank: a collective other than
// AllReduce, AllGather or ReduceScatter; LL or LL128; one rank, or more than one virtual node
// (across nodes NCCL needs CollNet or NVLS_TREE); AllGather or ReduceScatter on more than 32 ranks;
// and, except for AllGather, an op/dtype the switch does not reduce (NCCL's ncclNvlsSupported: sum or
// min/max on int32, uint32, int64, uint64, float16 and bfloat16, sum only on float32 and float64;
// never int8, uint8, fp8, prod, avg or PreMulSum). Its chunk is NCCL's NVLS chunk, shrunk for small
// calls as calcCollChunking does. An NVLS_TREE plan NCCL would not run is ErrInvalid on every
// rank: a collective other than AllReduce; LL or LL128; one virtual node, nodes of one rank, or
// nodes of different sizes (RanksPerNode not dividing n); an op/dtype the switch does not reduce
// (NVLS's rule). Its chunk is NCCL's NVLS_TREE chunk: the NVLS step, at most 64 KiB on 4 or more
// nodes, shrunk to 256, 128, 64 and 32 KiB below 32, 16, 4 and 1 times RanksPerNode chunks. A
// CollNet plan NCCL would not run is ErrInvalid on every rank: a collective other than AllReduce
// (and, for CollNetDirect, AllGather and ReduceScatter, which the endpoint's iallgather and
// ireducescatter run); LL or LL128; one virtual node; for CollNetDirect nodes of different
// sizes or of more than 8 ranks (NCCL_MAX_DIRECT_ARITY+1); an op/dtype outside the endpoint's
// collNetSupportMatrix, AllGather excepted (sum, min and max of int32, uint32, int64, uint64, float16, bfloat16, float32
// and float64, looked up with avg and PreMulSum as sum, as getCollNetSupport does: their pre- and
// post-ops run on the ranks). Without an endpoint (Config.CollNet.Addr empty) a CollNet call is
// ErrConfig on every rank. Its chunk, one FIFO step (per head for CollNetDirect), is NCCL's CollNet
// chunk (calcCollChunking: from the Simple step, or min(256 KiB, it) for the chain, halved while
// the call is small for its channels, heads and depth), capped for CollNetDirect at the NVLS step.
//
// # Failures
//
// A rank whose context is done, or whose Comm is closed, while it takes part in a call aborts the
// communicator: it stores its rank and reason in the shared abort word, which every wait checks,
// so every rank's call ends with an error (the cause on that rank, *AbortError elsewhere) and every
// later call fails. Comm.Abort does the same on purpose (ncclCommAbort), and a launcher can store
// AbortWord at CtrlAbortOffset of the control region for a rank whose process died. A rank waiting
// for a peer that closed without joining gets ErrPeerClosed. A rank whose CollNet endpoint
// connection fails (the endpoint died, or failed the job for a bad frame or a lost contributor)
// aborts the communicator the same way, and a Launcher whose endpoint process exits aborts it for
// every rank. A wait for the endpoint is a wait for "rank n" to the watchdog: past the timeout it
// names a rank that shows no sign of life (the endpoint waits for its node), else the endpoint
// itself (stopped or hung), never a live rank.
//
// # Transports
//
// transport.Transport (engine/transport) is the seam for other memories (see its documentation):
// regions named "ctrl" and "conn/C/FROM-TO" (and "nvls/NODE/CH" for NVLS's multicast objects,
// "collnet/NODE/CH" for CollNetDirect's intra-node buffers), zeroed, aligned, identical for every
// rank that asks, holding nothing but bytes and 64-bit words used with sync/atomic, so they can
// live in a file mapped by several processes. The CollNet network is not a region: each head's
// connection to the aggregation endpoint is a TCP stream with a small framed protocol
// (engine/transport/collnet: a hello naming job, channel, share, node and node count; data and
// result frames of one step; error and goodbye frames), NCCL_STEPS credits per connection, and a
// deadline on every frame once begun.
//
// # Rooms
//
// The engine is split into packages the way NCCL keeps src/device, the algorithms and
// src/transport apart; each imports only the rooms below it, and none imports this one:
//
//   - engine: the communicator (Comm, Config, the call path, channels, agreement, plans,
//     errors, sessions and the TUNING log, swap), each algorithm's legality, chunk and channel
//     set-up (ringtasks.go, tree.go, pattasks.go, nvls.go, nvlstree.go, collnet.go: which
//     channel gets which connections, multicast object and endpoint link), the workers and
//     their job switch (worker.go, and nvls.go's nvlsWorker) and the topology (topology.go).
//     NCCL: src/init.cc, src/enqueue.cc, src/graph (connectNvls, connectCollNet).
//   - engine/internal/algorithm: every kernel: Ring for all five collectives, Tree's AllReduce,
//     PAT's AllGather and ReduceScatter with its schedule, NVLS's AllReduce, AllGather and
//     ReduceScatter, NVLS_TREE's AllReduce and CollNetDirect's AllReduce, AllGather and
//     ReduceScatter (one pipelined kernel, algorithm.NVLS, over a multicast object or
//     CollNetDirect's region of its shape, with tree connections or an endpoint link), and
//     CollNetChain's head (algorithm.CollNetChain; the chain's other ranks run Tree's kernel).
//     Each runs over a call (algorithm.Call: its buffers, dtype, chunk, rank and size) and its
//     channel's peers, written on the prims room or on the concrete nvls.Group and
//     collnet.Link. NCCL: runRing, runTreeSplit/runTreeUpDown, runPat, runNvls and the
//     NVLS_TREE, COLLNET_DIRECT and COLLNET_CHAIN kernels of
//     src/device/{all_reduce,all_gather,reduce_scatter,broadcast,reduce}.h, and
//     PatAGAlgorithm/PatRSAlgorithm of src/include/collectives.h.
//   - engine/internal/wire: region layouts, connection endpoints and the Simple, LL and LL128
//     wire protocols on their slots, release stores, and the bounded waits with the watchdog.
//     NCCL: src/device/prims_{simple,ll,ll128}.h, the FIFO of src/include/device.h.
//   - engine/internal/prims: the primitives (send, recv, recvReduceSend, recvReduceCopySend,
//     recvCopySend, ...) over wire endpoints, cut into FIFO steps. NCCL: src/device/prims_*.h'
//     genericOp and common.h.
//   - engine/transport: the Transport seam, region names, the in-process transport, job ids.
//     NCCL: src/transport.cc (its ncclTransport table).
//   - engine/transport/shm: regions in files mapped by rank processes, the job lock, stale-job
//     removal, a launcher's abort through the control region. NCCL: src/transport/shm.cc.
//   - engine/transport/net: ranks on different hosts over TCP: per host a local copy of each
//     crossing connection's region and of "ctrl", a proxy that forwards what local senders
//     completed (LL and LL128 lines as their flags show them, Simple slots as the tail does) and
//     local receivers' heads, mirrors each local rank's control lines and the abort word, and aborts
//     on a lost host; same-host regions go to the local transport. NCCL: src/transport/net.cc, its
//     proxy (src/proxy.cc) and the socket net plugin (src/transport/net_socket.cc).
//   - engine/transport/collnet: the CollNet aggregation endpoint (server and framed protocol)
//     and a head's client connection to it (Link). NCCL: src/transport/coll_net.cc and a
//     collnet plugin.
//   - engine/transport/nvls: the NVLS multicast object: its geometry (Layout: counters, up and
//     down buffers, the layout word, the region name; engine.NVLSLayout is an alias) and one
//     rank's view of a mapped region (Group, engine's nvlsGroup) with the switch's operations,
//     LdReduce and St. NCCL: src/transport/nvls.cc.
//   - engine/launch: the Launcher, CPU binding, the rank-process environment and the
//     rendezvous over loopback TCP (Connect; Join in this package keeps its connections as the
//     Session). NCCL: mpirun's side and src/bootstrap.cc.
//
// Where Go's import rules, or the hot path, forced a different map than NCCL's:
//
//   - The kernels read nothing of the Comm: the engine copies the call into an algorithm.Call
//     once per call (dtype included, for the endpoint's frames), and hands each kernel its
//     channel's peers and objects (PAT's state, algorithm.PAT, is the Comm's per channel; the
//     NVLS kernel is the nvlsWorker's embedded algorithm.NVLS, filled per call with the
//     channel's nvls.Group, its algorithm.NVLSTreeLinks or collnet.Link, the operators, and, for
//     CollNet, the node count and the endpoint's address for errors) and the worker's
//     prims.Prims, which the worker embeds (a kernel's primitive is a direct call). The set-up
//     of every algorithm stays here, as Comm methods over the Comm's channel state (rings,
//     trees, mapped endpoints, multicast objects and links, made on first use).
//   - So the algorithm room imports two transport rooms, engine/transport/nvls (Group) and
//     engine/transport/collnet (Link), where NCCL's device code knows only its own structs:
//     the NVLS, NVLS_TREE and CollNet kernels call the multicast object's LdReduce, St and
//     Behind and the link's SendReady, Payload, Send, RecvReady, Result and Release on every
//     step, and an interface of the algorithm room there would make each a dynamic call (Go's
//     generics over pointer types dispatch through a dictionary too). Neither transport room
//     imports the algorithm room. engine maps the multicast object's region through the Comm's
//     transport (nodeGroup) and dials the links (collNetLink).
//   - A wait (wire.Waiter) checks the rank's control words through a wire.Ctl that the Comm
//     owns, not the Comm itself: the wire room cannot import this package. The Ctl's two
//     functions (AgreePoll, AbortError) are the only calls through a function value, and they
//     run only while a call's agreement is unfinished (at most until every peer's descriptor is
//     read) or once the communicator is aborted: never per FIFO step or primitive.
//   - The errors the rooms return (ErrInvalid, ErrClosed, ErrConfig, ErrAborted, AbortError) and
//     the abort word's encoding are defined in the wire room and re-exported here (the same
//     values and type); so are the wire layout constants (LineBytes, ...) that the CUDA kernels'
//     generated header reads.
//
// The network transport (engine/transport/net, TCP between hosts) is one more package below
// engine/transport that implements transport.Transport; a rank passes it to New. The engine asks
// little else of a transport: every region it maps goes through Transport.Region; the in-process
// transport (transport.Rank) is told apart, to know its ranks are goroutines; and a transport may
// say how many ranks it places per host (RanksPerHost, which New holds Config.RanksPerNode to) and
// how many of its ranks are goroutines of this process (ProcessRanks: the network transport's host
// processes), which sets how the waits yield (waiter.go).
//
// # Shared memory
//
// shm.ShmTransport (engine/transport/shm) keeps each region in a file of ShmDir: /dev/shm, or the
// directory that COLLPLAN_SHM_DIR names (a larger tmpfs where /dev/shm is small, as in containers).
// A rank allocates a region's memory when it maps it (fallocate), so a directory without room is an
// error naming the region, its size and the space free, never SIGBUS at the first touch. A job's
// files live as long as some process of the job holds its lock file (JobLock): the last one to let
// go removes them, and RemoveStaleShm (which a Launcher and rank 0 of a job started by hand run
// first) removes those of jobs whose processes all died, in whatever PID namespace they ran.
//
// # Lost and stopped ranks
//
// Join keeps the rendezvous connections open for the communicator's life (Session): rank 0 holds
// one to every other rank, each of them one to rank 0, and a rank that closes cleanly says goodbye
// first. A connection that ends without one (the rank's process died: the kernel closed it; or the
// connection was cut) aborts the attached communicator on every rank, naming the rank at the other
// end, so a job of ranks started by hand ends when one dies, as one under a Launcher does (which
// also aborts for a rank it sees exit). A rank that stops without dying (SIGSTOP, a debugger, a
// hang) is found by the watchdog (Config.Timeout; engine/internal/wire's wait.go): a wait that sees
// no progress that long aborts the communicator, naming the rank that shows no sign of life, and a
// Launcher then kills that rank at once. Comm.Aborted says whether and why; a rank of an aborted
// job that no launcher watches calls shm.ShmTransport.Abandon so that its Close removes the job's
// files even while a stopped peer still holds them.
//
// # The race detector
//
// With the in-process transport the regions are Go memory and the race detector sees every
// handshake, so a report there is a bug. With ShmTransport it sees none: the race runtime ignores
// atomic operations outside the Go heap and data segments (the regions are mapped files), and an
// ordering that runs through other processes is beyond it anyway. The one place where the engine's
// own goroutines depend on such an ordering is the in-place Tree AllReduce: broadcast-down writes
// chunk k of the user's buffer where reduce-up read it, after the sum of chunk k has come back from
// the root. In race builds on such transports the engine states that edge itself (wire's race.go),
// so `go test -race` and collbench built with -race are clean on both transports.
package engine
