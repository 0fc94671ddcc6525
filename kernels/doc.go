// Package kernels holds the compute at the bottom of the collective engine:
// the element-wise reduce and copy primitives that NCCL's device code applies
// in its primitives (recvReduceSend, recvReduceCopySend, ...), for every NCCL
// data type and reduction operator, written in Go.
//
// # Data layout
//
// Every primitive works on byte slices that hold whole elements in
// little-endian order, the layout a GPU buffer has. On little-endian hosts
// (amd64, arm64) slices whose addresses are aligned to the element size are
// reinterpreted in place with unsafe.Slice, so the inner loops are plain typed
// loops; unaligned slices go through small aligned buffers on the stack,
// filled by copy (or, on a big-endian host, element by element with
// encoding/binary). Neither path allocates.
//
// # Operators
//
// NewReducer resolves a user operator (Op) to the device operator NCCL lowers
// it to (DevOp, see hostToDevRedOp in NCCL's src/enqueue.cc):
//
//   - Sum and Prod stay as they are (integers wrap).
//   - Min and Max become MinMax.
//   - Avg on an integer type becomes SumPostDiv: the contributions are summed
//     in the element type, wrapping, and the final value is divided by nRanks
//     once, truncating toward zero.
//   - Avg on a float type becomes PreMulSum with the scalar float(1.0/nRanks)
//     converted to the element type (float64 uses 1.0/nRanks directly); every
//     contribution is multiplied by it as it is loaded, so the result is
//     Σ(x_i·s), not Σx_i/n.
//   - PreMulSum (ncclRedOpCreatePreMulSum) multiplies every contribution by
//     the user's scalar as it is loaded.
//
// A Reducer applies the operator the way NCCL does: the first contribution is
// loaded (Load: pre-multiplied when the operator needs it), every later one is
// pre-multiplied as it is loaded and combined with the accumulator (Reduce),
// and the final value is post-processed once (Finish: SumPostDiv's divide).
//
// # Low-precision floats
//
// float16, bfloat16 and the two fp8 formats are stored as their bit patterns
// and computed in float32, rounding the exact result once to the element type
// per operation (round to nearest, ties to even), which is what __hadd and
// __hmul do on sm_80 and later. NCCL computes fp8 in half precision and
// converts back with __NV_SATFINITE; because float32 and half both carry at
// least 2p+2 significand bits for p-bit fp8 operands, rounding through either
// gives the same fp8 result (the tests check this exhaustively), and the
// conversion to fp8 saturates to the largest finite value instead of
// producing NaN (e4m3) or infinity (e5m2).
//
// Min and Max on floats follow fminf/fmaxf and __hmin/__hmax: a NaN operand
// is ignored (the other operand is the result), two NaN operands give the
// type's canonical NaN, and -0 orders below +0.
package kernels
