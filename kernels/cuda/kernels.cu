// kernels.cu: the kernels' entry points, one extern "C" function per (algorithm, collective,
// element type, protocol), named cp_ALGO_COLL_TYPE_PROTO (cp_ring_allreduce_float32_ll, ...). The
// operator is the call's (cpWork.devOp and opArg), so one kernel serves every operator. The copy
// collectives (AllGather, Broadcast) move elements of a size, b8..b64, whatever their type.
// Every kernel takes the array of its blocks' jobs: block b runs work[b]. Blocks of 64 threads
// or a multiple (Tree splits a block into two teams of whole warps).
#include "ring.cuh"
#include "tree.cuh"
#include "nvls.cuh"

#define CP_PROTOS(X, T, NAME)     \
  X(T, NAME, CP_PROTO_LL, ll)     \
  X(T, NAME, CP_PROTO_LL128, ll128) \
  X(T, NAME, CP_PROTO_SIMPLE, simple)

#define CP_REDUCE_KERNELS(T, NAME, PROTO, PNAME)                                                    \
  extern "C" __global__ void cp_ring_allreduce_##NAME##_##PNAME(const cpWork* work)                 \
      CP_RING_BODY(T, PROTO, allReduce, true)                                                       \
  extern "C" __global__ void cp_ring_reducescatter_##NAME##_##PNAME(const cpWork* work)             \
      CP_RING_BODY(T, PROTO, reduceScatter, true)                                                   \
  extern "C" __global__ void cp_ring_reduce_##NAME##_##PNAME(const cpWork* work)                    \
      CP_RING_BODY(T, PROTO, reduce, true)                                                          \
  extern "C" __global__ void cp_tree_allreduce_##NAME##_##PNAME(const cpWork* work) {               \
    cpTreeAllReduce<T, PROTO>(work[blockIdx.x]);                                                    \
  }

#define CP_COPY_KERNELS(T, NAME, PROTO, PNAME)                                                      \
  extern "C" __global__ void cp_ring_allgather_##NAME##_##PNAME(const cpWork* work)                 \
      CP_RING_BODY(T, PROTO, allGather, false)                                                      \
  extern "C" __global__ void cp_ring_broadcast_##NAME##_##PNAME(const cpWork* work)                 \
      CP_RING_BODY(T, PROTO, broadcast, false)

// Every dtype of package kernels (layout_gen.h's COLLPLAN_DT_*), by name.
CP_PROTOS(CP_REDUCE_KERNELS, cp_i8, int8)
CP_PROTOS(CP_REDUCE_KERNELS, cp_u8, uint8)
CP_PROTOS(CP_REDUCE_KERNELS, cp_i32, int32)
CP_PROTOS(CP_REDUCE_KERNELS, cp_u32, uint32)
CP_PROTOS(CP_REDUCE_KERNELS, cp_i64, int64)
CP_PROTOS(CP_REDUCE_KERNELS, cp_u64, uint64)
CP_PROTOS(CP_REDUCE_KERNELS, __half, float16)
CP_PROTOS(CP_REDUCE_KERNELS, float, float32)
CP_PROTOS(CP_REDUCE_KERNELS, double, float64)
CP_PROTOS(CP_REDUCE_KERNELS, __nv_bfloat16, bfloat16)
CP_PROTOS(CP_REDUCE_KERNELS, cpE4M3, fp8e4m3)
CP_PROTOS(CP_REDUCE_KERNELS, cpE5M2, fp8e5m2)

CP_PROTOS(CP_COPY_KERNELS, cp_u8, b8)
CP_PROTOS(CP_COPY_KERNELS, cp_u16, b16)
CP_PROTOS(CP_COPY_KERNELS, cp_u32, b32)
CP_PROTOS(CP_COPY_KERNELS, cp_u64, b64)

// NVLS AllReduce (Simple only), for the types and operators the switch reduces (engine's
// nvlsOpOK: sum, min and max on int32, uint32, int64, uint64, float16 and bfloat16; sum on
// float32 and float64), sm_90 and newer only.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define CP_NVLS_KERNEL(T, NAME) \
  extern "C" __global__ void cp_nvls_allreduce_##NAME##_simple(const cpWork* work) { cpNvlsAllReduce<T>(work[blockIdx.x]); }
CP_NVLS_KERNEL(cp_i32, int32)
CP_NVLS_KERNEL(cp_u32, uint32)
CP_NVLS_KERNEL(cp_i64, int64)
CP_NVLS_KERNEL(cp_u64, uint64)
CP_NVLS_KERNEL(__half, float16)
CP_NVLS_KERNEL(float, float32)
CP_NVLS_KERNEL(double, float64)
CP_NVLS_KERNEL(__nv_bfloat16, bfloat16)
#endif
