// nvls.cuh: NVLS AllReduce through an NVLink switch's multicast object, as NCCL's runNvls and
// the CPU engine's engine/nvls.go: per step each member scatters the step's n shares of its
// input into its up buffer (its own physical copy) and posts; once every member has posted, it
// ld_reduces its own share across every member's up buffer (multimem.ld_reduce on the multicast
// address: the switch adds) and st's the sum into every member's down buffer (multimem.st), and
// publishes reduced; once every member has reduced, it gathers the step out of its down buffer
// and publishes done. Counters are published with multimem.st (release), so each member reads
// every member's counter in its own copy. A step's up and down slots are reused NCCL_STEPS steps
// later, after every member's done. The phases run in sequence in the block (NCCL runs them in
// separate warps, pipelined).
//
// multimem needs sm_90: everything here compiles only for __CUDA_ARCH__ >= 900, and a module
// built for an older architecture has no NVLS kernels.
#pragma once
#include "primitives.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900

#define CP_NVLS_SUM 0
#define CP_NVLS_MIN 1
#define CP_NVLS_MAX 2

// cpMultimem<T>::reduceSt ld_reduces one word (W bytes) at mc address src across every member
// and st's the result to mc address dst. Word types are the switch's: f32 and f64 add; u32/s32,
// u64/s64 add, min and max; f16x2 and bf16x2 (two elements a word) add, min and max.
template <typename T> struct cpMultimem;

#define CP_MM_LDST(OPNAME, PTXT, CONS, CT)                                                               \
  {                                                                                                     \
    CT v;                                                                                               \
    asm volatile("multimem.ld_reduce.relaxed.sys.global." OPNAME "." PTXT " %0, [%1];"                  \
                 : "=" CONS(v)                                                                          \
                 : "l"(src)                                                                             \
                 : "memory");                                                                           \
    asm volatile("multimem.st.relaxed.sys.global." PTXT " [%0], %1;" ::"l"(dst), CONS(v) : "memory");   \
  }

template <> struct cpMultimem<float> {
  enum { W = 4 };
  static __device__ __forceinline__ void reduceSt(const char* src, char* dst, int) { CP_MM_LDST("add", "f32", "f", float) }
};
template <> struct cpMultimem<double> {
  enum { W = 8 };
  static __device__ __forceinline__ void reduceSt(const char* src, char* dst, int) { CP_MM_LDST("add", "f64", "d", double) }
};

#define CP_MM_INT(T, W_, ADDT, SIGNEDT, CONS, CT)                                                  \
  template <> struct cpMultimem<T> {                                                               \
    enum { W = W_ };                                                                               \
    static __device__ __forceinline__ void reduceSt(const char* src, char* dst, int op) {          \
      if (op == CP_NVLS_SUM) CP_MM_LDST("add", ADDT, CONS, CT)                                     \
      else if (op == CP_NVLS_MIN) CP_MM_LDST("min", SIGNEDT, CONS, CT)                             \
      else CP_MM_LDST("max", SIGNEDT, CONS, CT)                                                    \
    }                                                                                              \
  };
CP_MM_INT(cp_i32, 4, "s32", "s32", "r", cp_u32)
CP_MM_INT(cp_u32, 4, "u32", "u32", "r", cp_u32)
CP_MM_INT(cp_i64, 8, "u64", "s64", "l", cp_u64)  // add wraps: the same bits as u64
CP_MM_INT(cp_u64, 8, "u64", "u64", "l", cp_u64)
CP_MM_INT(__half, 4, "f16x2", "f16x2", "r", cp_u32)
CP_MM_INT(__nv_bfloat16, 4, "bf16x2", "bf16x2", "r", cp_u32)

__device__ __forceinline__ void cpMultimemPublish(cp_u64* mc, cp_u64 v) {
  asm volatile("multimem.st.release.sys.global.u64 [%0], %1;" ::"l"(mc), "l"(v) : "memory");
}

template <typename T> __device__ void cpNvlsAllReduce(const cpWork& w) {
  __shared__ int failed;
  const cpNvls& g = w.nvls;
  cpTeam t = {(int)threadIdx.x, (int)blockDim.x, 0};
  int nvOp = w.devOp == COLLPLAN_DEVOP_MINMAX ? ((w.opArg & 1) ? CP_NVLS_MAX : CP_NVLS_MIN) : CP_NVLS_SUM;
  const T* send = (const T*)w.sendbuff;
  T* recv = (T*)w.recvbuff;
  cp_u64 members = g.members, slotBytes = members * g.stepBytes;
  cp_u64 dataOff = COLLPLAN_NVLS_DATA_OFF + members * COLLPLAN_NVLS_DATA_MEMBER;
  cp_u64 upOff = dataOff, downOff = dataOff + COLLPLAN_NCCL_STEPS * slotBytes;
  auto ctr = [&](char* base, cp_u64 m, int k) {
    return (cp_u64*)(base + COLLPLAN_NVLS_CTR_OFF + m * COLLPLAN_NVLS_CTR_MEMBER + k * COLLPLAN_NVLS_CTR_K);
  };
  // waitAll: thread 0 waits for every member's counter k >= want, then the barrier.
  auto waitAll = [&](int k, cp_u64 want) {
    if (t.tid == 0) {
      for (cp_u64 m = 0; m < members && failed == 0; m++)
        if (!cpWaitGE(ctr(g.uc, m, k), want, w.abort)) failed = 1;
      __threadfence_system();
    }
    t.sync();
    return failed == 0;
  };
  auto publish = [&](int k, cp_u64 v) {
    t.sync();
    if (t.tid == 0) {
      __threadfence_system();
      cpMultimemPublish(ctr(g.mc, g.me, k), v);
    }
  };
  if (t.tid == 0) failed = 0;
  cp_u64 s = *g.step;
  cp_u64 stepElems = g.stepBytes / sizeof(T), se = members * stepElems;
  for (cp_u64 e0 = w.lo; e0 < w.hi; e0 += se, s++) {
    cp_u64 nel = min(se, w.hi - e0);
    cp_u64 slot = (s % COLLPLAN_NCCL_STEPS) * slotBytes;
    // The slots of step s-NCCL_STEPS are free once every member is done with it.
    if (s >= COLLPLAN_NCCL_STEPS && !waitAll(COLLPLAN_NVLS_DONE, s - COLLPLAN_NCCL_STEPS + 1)) break;
    cpCopy<T>(t, (T*)(g.uc + upOff + slot), send + e0, nel);  // scatter: every share of the step
    publish(COLLPLAN_NVLS_POSTED, s + 1);
    if (!waitAll(COLLPLAN_NVLS_POSTED, s + 1)) break;
    // ld_reduce and st this member's share, one word a thread at a time.
    cp_u64 shareOff = slot + g.me * g.stepBytes;
    cp_u64 shareBytes = g.me * stepElems < nel ? min(stepElems, nel - g.me * stepElems) * sizeof(T) : 0;
    for (cp_u64 o = (cp_u64)t.tid * cpMultimem<T>::W; o < shareBytes; o += (cp_u64)t.nthreads * cpMultimem<T>::W)
      cpMultimem<T>::reduceSt(g.mc + upOff + shareOff + o, g.mc + downOff + shareOff + o, nvOp);
    publish(COLLPLAN_NVLS_REDUCED, s + 1);
    if (!waitAll(COLLPLAN_NVLS_REDUCED, s + 1)) break;
    cpCopy<T>(t, recv + e0, (const T*)(g.uc + downOff + slot), nel);  // gather
    publish(COLLPLAN_NVLS_DONE, s + 1);
  }
  t.sync();
  if (t.tid == 0) *g.step = s;
}

#endif  // __CUDA_ARCH__ >= 900
