// Package algorithm is the engine's algorithm room: every kernel of the engine, each reading
// nothing of the communicator but a call (Call) and what the engine hands it for its channel.
//
//   - Ring (ring.go) for all five collectives and Tree's AllReduce (tree.go), NCCL's runRing and
//     runTreeSplit/runTreeUpDown, and PAT's AllGather and ReduceScatter with its schedule
//     (pat.go), runPat and PatAGAlgorithm/PatRSAlgorithm: written on the primitives room
//     (engine/internal/prims) over the channel's connections.
//   - NVLS (nvls.go): one pipelined kernel over a multicast object (engine/transport/nvls's
//     Group), NCCL's runNvls for AllReduce, AllGather and ReduceScatter; with NVLSTreeLinks
//     (nvlstree.go) NVLS_TREE's AllReduce, and with a CollNet endpoint link
//     (engine/transport/collnet's Link) over CollNetDirect's region of the same shape,
//     CollNetDirect's AllReduce, AllGather and ReduceScatter (collnet.go).
//   - CollNetChain (collnet.go): a CollNetChain head's kernel on a worker's prims; the chain's
//     other ranks run Tree's.
//
// Every type on the hot path is concrete (prims.Prims, wire.Endpoint, nvls.Group, collnet.Link):
// no step or primitive calls through an interface or allocates. The engine (package engine)
// keeps the legality, the chunk rules and the set-up: which channel gets which connections,
// multicast object and endpoint link, mapped on first use.
package algorithm
