// common.cuh: integer types, the kernels' argument structs and the block's barriers and waits.
//
// One thread block runs one rank's share of one channel (NCCL's one block per channel). Every
// block of a collective runs in one launch, so a block that spins on a peer's counter only waits
// for a block that is resident too.
#pragma once
#include "layout_gen.h"

typedef unsigned char cp_u8;
typedef signed char cp_i8;
typedef unsigned short cp_u16;
typedef unsigned int cp_u32;
typedef int cp_i32;
typedef unsigned long long cp_u64;
typedef long long cp_i64;

// The tree's fan-out: NCCL_MAX_TREE_ARITY.
#define CP_MAX_PEERS 3

// Protocols, numbered as costmodel's (NCCL_PROTO_LL, NCCL_PROTO_LL128, NCCL_PROTO_SIMPLE).
#define CP_PROTO_LL 0
#define CP_PROTO_LL128 1
#define CP_PROTO_SIMPLE 2

// cpConn is one side of a connection: a region laid out as engine/layout.go says (layout word,
// head, tail, then NCCL_STEPS slots of LL, LL128 and Simple), in device memory, and the address
// of this side's step count, which carries on across calls as NCCL's conn->step does.
struct cpConn {
  char* region;
  cp_u64* step;
  cp_u32 llBytes, ll128Bytes, simpleBytes, pad;
};

// cpNvls is one channel's multicast object (engine.NVLSLayout): counters and every member's up
// and down buffers. uc is this member's own physical copy (unicast), mc the multicast address
// that multimem instructions take. On a device each member's copy holds its own up and down
// buffer at member 0's offsets (COLLPLAN_NVLS_DATA_OFF + members*DATA_MEMBER): a multimem
// ld_reduce reads the same offset of every copy, where the CPU twin, with one copy standing for
// all, gives each member its own offsets.
struct cpNvls {
  char* uc;
  char* mc;
  cp_u64* step;
  cp_u32 members, me;
  cp_u64 stepBytes;
};

// cpWork is one thread block's job: one rank's one channel of one call. Element counts and
// offsets are in elements of the call's dtype.
struct cpWork {
  const char* sendbuff;
  char* recvbuff;
  cp_u64 count;       // the call's count (per rank for AllGather and ReduceScatter)
  cp_u64 lo, hi;      // the channel's element range
  cp_u64 chunkElems;  // elements per chunk
  cp_u64 pieceBytes;  // payload bytes per FIFO step
  cp_u64 opArg;       // ncclDevRedOpFull.scalarArg (kernels.Reducer.Arg)
  volatile cp_u32* abort;  // nonzero: the communicator was aborted; every wait gives up
  const cp_i32* ring; // the channel's ring order (ranks)
  cp_u32 devOp, nRanks, ringIx, root;
  cp_u32 inPlace, treeUp, nKids, pad;  // treeUp: 1 when the rank has a tree parent
  cpConn ringRecv, ringSend;
  cpConn fromUp, toUp;                        // tree parent
  cpConn fromKid[CP_MAX_PEERS], toKid[CP_MAX_PEERS];  // tree children
  cpNvls nvls;
};

// cpTeam is a set of warps that run primitives together: NCCL's thread group with its own named
// barrier (runTreeSplit gives reduce-up and broadcast-down one each).
struct cpTeam {
  int tid, nthreads, bar;
  __device__ void sync() const {
    asm volatile("bar.sync %0, %1;" ::"r"(bar), "r"(nthreads) : "memory");
  }
};

__device__ __forceinline__ cp_u64 cpLoadVolatile(const cp_u64* p) {
  cp_u64 v;
  asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void cpStoreVolatile(cp_u64* p, cp_u64 v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

// cpWaitGE spins until *p >= want, giving up (returning false) when the abort word is set.
__device__ __forceinline__ bool cpWaitGE(const cp_u64* p, cp_u64 want, volatile cp_u32* abort) {
  int spins = 0;
  while (cpLoadVolatile(p) < want) {
    if (++spins == 1024) {
      spins = 0;
      if (abort != nullptr && *abort != 0) return false;
    }
  }
  return true;
}
