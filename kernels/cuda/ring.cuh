// ring.cuh: the ring schedules of the five collectives, as NCCL's runRing
// (src/device/{all_reduce,all_gather,reduce_scatter,broadcast,reduce}.h) and the CPU engine's
// engine/ring.go, over one channel's element range [lo, hi) with the whole block as one team.
#pragma once
#include "primitives.cuh"

__device__ __forceinline__ int cpMod(int a, int n) { return ((a % n) + n) % n; }

template <typename T, int Proto> struct cpRing {
  const cpWork& w;
  cpPrims<T, Proto> prims;
  const T* send;
  T* recv;
  int n, ix;

  __device__ cpRing(const cpWork& work, const cpTeam& t, int* failed, bool reduction, const cpConn* const* rx,
                    const cpConn* const* tx)
      : w(work), prims(t, work, failed, reduction, rx, 1, tx, 1), send((const T*)work.sendbuff),
        recv((T*)work.recvbuff), n((int)work.nRanks), ix((int)work.ringIx) {}

  // allReduce: reduce-scatter fused with all-gather. Per loop the range is cut into n chunks; the
  // rank at ring position ix sends chunk ix-1, reduces and forwards chunks ix-2 .. ix+1, completes
  // chunk ix (postOp) and forwards it, forwards the finished chunks ix-1 .. ix+2, and receives
  // chunk ix+1.
  __device__ void allReduce() {
    cp_u64 size = w.hi - w.lo, loop = (cp_u64)n * w.chunkElems;
    cp_u64 align = sizeof(T) >= 16 ? 1 : 16 / sizeof(T);  // engine's alignElems
    for (cp_u64 off = 0; off < size; off += loop) {
      cp_u64 rem = size - off, ce = w.chunkElems;
      if (rem < loop) ce = min((((rem + n - 1) / n + align - 1) / align) * align, ce);
      auto at = [&](int chunk, cp_u64* e0) -> cp_u64 {
        cp_u64 co = (cp_u64)chunk * ce;
        *e0 = w.lo + off + co;
        return rem > co ? min(rem - co, ce) : 0;
      };
      cp_u64 e0, nel;
      if ((nel = at(cpMod(ix - 1, n), &e0)) && !prims.send(send + e0, nel)) return;
      for (int j = 2; j < n; j++)
        if ((nel = at(cpMod(ix - j, n), &e0)) && !prims.recvReduceSend(send + e0, nel)) return;
      if ((nel = at(ix, &e0)) && !prims.recvReduceCopySend(send + e0, recv + e0, nel)) return;
      for (int j = 1; j < n - 1; j++)
        if ((nel = at(cpMod(ix - j, n), &e0)) && !prims.recvCopySend(recv + e0, nel)) return;
      if ((nel = at(cpMod(ix + 1, n), &e0)) && !prims.directRecv(recv + e0, nel)) return;
    }
  }

  // allGather: per chunk, send this rank's block (copying it to the output unless in place),
  // forward the blocks of the n-2 ranks before it, receive the block of the rank after it.
  __device__ void allGather() {
    for (cp_u64 e0 = w.lo; e0 < w.hi; e0 += w.chunkElems) {
      cp_u64 nel = min(w.chunkElems, w.hi - e0);
      auto block = [&](int pos) { return recv + (cp_u64)w.ring[pos] * w.count + e0; };
      bool ok = w.inPlace ? prims.send(block(ix), nel) : prims.copySend(send + e0, block(ix), nel);
      for (int j = 1; ok && j < n - 1; j++) ok = prims.recvCopySend(block(cpMod(ix - j, n)), nel);
      if (!ok || !prims.recv(block(cpMod(ix + 1, n)), nel)) return;
    }
  }

  // reduceScatter: per chunk, send the block of the rank before this one, reduce and forward the
  // blocks of the ranks before that, complete this rank's own block (postOp) into the output.
  __device__ void reduceScatter() {
    for (cp_u64 e0 = w.lo; e0 < w.hi; e0 += w.chunkElems) {
      cp_u64 nel = min(w.chunkElems, w.hi - e0);
      auto block = [&](int pos) { return send + (cp_u64)w.ring[pos] * w.count + e0; };
      bool ok = prims.send(block(cpMod(ix - 1, n)), nel);
      for (int j = 2; ok && j < n; j++) ok = prims.recvReduceSend(block(cpMod(ix - j, n)), nel);
      if (!ok || !prims.recvReduceCopy(block(ix), recv + e0, nel)) return;
    }
  }

  // broadcast: the root sends (copying to its output unless in place), the rank before the root
  // only receives, every other rank receives, keeps and forwards.
  __device__ void broadcast() {
    int me = w.ring[ix], next = w.ring[cpMod(ix + 1, n)];
    for (cp_u64 e0 = w.lo; e0 < w.hi; e0 += w.chunkElems) {
      cp_u64 nel = min(w.chunkElems, w.hi - e0);
      bool ok;
      if (me == (int)w.root) ok = w.inPlace ? prims.send(recv + e0, nel) : prims.copySend(send + e0, recv + e0, nel);
      else if (next == (int)w.root) ok = prims.recv(recv + e0, nel);
      else ok = prims.recvCopySend(recv + e0, nel);
      if (!ok) return;
    }
  }

  // reduce: the rank after the root sends its input, the root completes the reduction (postOp)
  // into its output, every other rank reduces and forwards.
  __device__ void reduce() {
    int me = w.ring[ix], prev = w.ring[cpMod(ix - 1, n)];
    for (cp_u64 e0 = w.lo; e0 < w.hi; e0 += w.chunkElems) {
      cp_u64 nel = min(w.chunkElems, w.hi - e0);
      bool ok;
      if (prev == (int)w.root) ok = prims.send(send + e0, nel);
      else if (me == (int)w.root) ok = prims.recvReduceCopy(send + e0, recv + e0, nel);
      else ok = prims.recvReduceSend(send + e0, nel);
      if (!ok) return;
    }
  }
};

// The ring kernels' bodies: block b runs work[b].
#define CP_RING_BODY(T, PROTO, COLL, REDUCTION)                                      \
  {                                                                                  \
    __shared__ int failed;                                                           \
    const cpWork& w = work[blockIdx.x];                                              \
    cpTeam t = {(int)threadIdx.x, (int)blockDim.x, 0};                               \
    const cpConn* rx[1] = {&w.ringRecv};                                             \
    const cpConn* tx[1] = {&w.ringSend};                                             \
    cpRing<T, PROTO> r(w, t, &failed, REDUCTION, rx, tx);                            \
    r.COLL();                                                                        \
    r.prims.finish();                                                                \
  }
