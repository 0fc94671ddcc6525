// Package algorithm is the engine's algorithm room for the kernels that need nothing of the
// communicator but a call's buffers and chunk and a channel's peers (NCCL's runRing and
// runTreeSplit/runTreeUpDown, src/device/{all_reduce,all_gather,reduce_scatter,broadcast,
// reduce}.h): Ring for all five collectives and Tree's AllReduce, written on the primitives room
// (engine/internal/prims) with concrete types only. The engine sets up each channel's
// connections and hands a kernel the call (Call) and the worker's prims.Prims.
package algorithm
