// Package algorithm is the engine's algorithm room for the kernels that need nothing of the
// communicator but a call and a channel's peers (NCCL's runRing, runTreeSplit/runTreeUpDown and
// runPat, src/device/{all_reduce,all_gather,reduce_scatter,broadcast,reduce}.h): Ring for all
// five collectives, Tree's AllReduce, and PAT's AllGather and ReduceScatter with its schedule,
// written on the primitives room (engine/internal/prims) with concrete types only. The engine
// sets up each channel's connections and hands a kernel the call (Call) and the worker's
// prims.Prims.
package algorithm
