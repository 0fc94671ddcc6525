// Package prims is the engine's primitives room (NCCL's src/device/prims_*.h and common.h's
// runPrims): send, recv, copySend, recvReduceSend, recvReduceCopy, recvReduceCopySend and
// recvCopySend, each cut into FIFO steps of one piece and run over the endpoints of
// engine/internal/wire with the call's protocol and reducer. The engine's worker embeds Prims, so
// an algorithm's primitive is a direct call: no interface between the algorithms and the steps.
package prims
