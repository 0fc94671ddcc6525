// protocols.cuh: the three wire protocols in a connection region, byte for byte as the CPU
// engine writes them (engine/conn.go), with the stores NCCL's device code uses
// (src/device/prims_ll.h, prims_ll128.h, prims_simple.h):
//
//   - LL: 16-byte lines {data 4 B, flag 4 B, data 4 B, flag 4 B}, flag = step+1. Each line is
//     one 16-byte volatile store (st.volatile.global.v4.u32), so each 8-byte half lands with its
//     flag; the receiver polls the line with one 16-byte volatile load until both flags match,
//     and needs neither fence nor tail.
//   - LL128: 128-byte lines of 15 data words and the flag (step+1) in the last word, stored by a
//     warp: 8 threads a line, each one 16-byte volatile store (st.volatile.global.v2.u64), the
//     eighth thread's second word the flag. Like NCCL this relies on a warp's 128-byte line
//     arriving whole (NCCL enables LL128 only where it does); the receiver reloads its warp's
//     lines until no thread sees an old flag (__any_sync).
//   - Simple: the payload, a system-scope fence, then tail = step+1 (one thread, after the
//     team's barrier); the receiver waits for the tail, then reads the slot.
//
// Every protocol: the sender waits for head > step - NCCL_STEPS before writing the slot of step
// (slot = step mod NCCL_STEPS), and the receiver stores head = step+1 once it has consumed it.
#pragma once
#include "common.cuh"

__device__ __forceinline__ cp_u64* cpHead(const cpConn& c) { return (cp_u64*)(c.region + COLLPLAN_CONN_HEAD_OFF); }
__device__ __forceinline__ cp_u64* cpTail(const cpConn& c) { return (cp_u64*)(c.region + COLLPLAN_CONN_TAIL_OFF); }

// The slot of step in each protocol's buffer.
__device__ __forceinline__ char* cpSlotLL(const cpConn& c, cp_u64 step) {
  return c.region + COLLPLAN_CONN_BUF_OFF + (step % COLLPLAN_NCCL_STEPS) * (c.llBytes / COLLPLAN_NCCL_STEPS);
}
__device__ __forceinline__ char* cpSlotLL128(const cpConn& c, cp_u64 step) {
  return c.region + COLLPLAN_CONN_BUF_OFF + c.llBytes +
         (step % COLLPLAN_NCCL_STEPS) * (c.ll128Bytes / COLLPLAN_NCCL_STEPS);
}
__device__ __forceinline__ char* cpSlotSimple(const cpConn& c, cp_u64 step) {
  return c.region + COLLPLAN_CONN_BUF_OFF + c.llBytes + c.ll128Bytes +
         (step % COLLPLAN_NCCL_STEPS) * (c.simpleBytes / COLLPLAN_NCCL_STEPS);
}

// cpReserve waits (one thread) until the sender may write step's slot: head > step - NCCL_STEPS.
__device__ __forceinline__ bool cpReserve(const cpConn& c, cp_u64 step, volatile cp_u32* abort) {
  if (step < COLLPLAN_NCCL_STEPS) return true;
  return cpWaitGE(cpHead(c), step - COLLPLAN_NCCL_STEPS + 1, abort);
}

// cpReleaseHead hands step's slot back to the sender (one thread, after the team's barrier).
__device__ __forceinline__ void cpReleaseHead(const cpConn& c, cp_u64 step) {
  __threadfence_system();
  cpStoreVolatile(cpHead(c), step + 1);
}

// ---- LL ----

// cpStoreLL writes one LL line: data's low and high 4 bytes, each beside the flag, in one
// 16-byte volatile store (NCCL's storeLL).
__device__ __forceinline__ void cpStoreLL(char* line, cp_u64 data, cp_u32 flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(line), "r"((cp_u32)data), "r"(flag),
               "r"((cp_u32)(data >> 32)), "r"(flag)
               : "memory");
}

// cpReadLL polls one LL line with 16-byte volatile loads until both halves carry flag (NCCL's
// readLL); false when the communicator was aborted first.
__device__ __forceinline__ bool cpReadLL(const char* line, cp_u32 flag, volatile cp_u32* abort, cp_u64* data) {
  cp_u32 d1, f1, d2, f2;
  int spins = 0;
  for (;;) {
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(d1), "=r"(f1), "=r"(d2), "=r"(f2)
                 : "l"(line)
                 : "memory");
    if (f1 == flag && f2 == flag) break;
    if (++spins == 1024) {
      spins = 0;
      if (abort != nullptr && *abort != 0) return false;
    }
  }
  *data = (cp_u64)d1 | (cp_u64)d2 << 32;
  return true;
}

// ---- LL128 ----

// Words of an LL128 line and threads per line: thread j of a line's 8 holds words 2j and 2j+1;
// thread 7's second word is the flag.
#define CP_LL128_WORDS (COLLPLAN_LL128_LINE_BYTES / 8)
#define CP_LL128_THREADS_PER_LINE (CP_LL128_WORDS / 2)
#define CP_LL128_DATA_WORDS (COLLPLAN_LL128_LINE_PAYLOAD / 8)
#define CP_LL128_FLAG_WORD (COLLPLAN_LL128_FLAG_OFF / 8)

__device__ __forceinline__ void cpStoreLL128(char* p, cp_u64 v0, cp_u64 v1) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(v0), "l"(v1) : "memory");
}

__device__ __forceinline__ void cpLoadLL128(const char* p, cp_u64* v0, cp_u64* v1) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*v0), "=l"(*v1) : "l"(p) : "memory");
}

// ---- Simple ----

// cpPublishTail ends a Simple send (one thread, after the team's barrier): the payload is made
// visible system-wide, then tail = step+1.
__device__ __forceinline__ void cpPublishTail(const cpConn& c, cp_u64 step) {
  __threadfence_system();
  cpStoreVolatile(cpTail(c), step + 1);
}

// cpWaitTail waits (one thread) for step's Simple payload: tail > step.
__device__ __forceinline__ bool cpWaitTail(const cpConn& c, cp_u64 step, volatile cp_u32* abort) {
  if (!cpWaitGE(cpTail(c), step + 1, abort)) return false;
  __threadfence_system();
  return true;
}
