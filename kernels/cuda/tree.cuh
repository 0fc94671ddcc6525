// tree.cuh: Tree AllReduce with split teams, as NCCL's runTreeSplit (src/device/all_reduce.h)
// and the CPU engine's engine/tree.go: the root receives its children's partial sums, adds its
// input, completes the reduction into its output and sends it back down in one primitive
// (recvReduceCopySend, whole block). Every other rank splits the block into two teams of warps
// with their own barriers, running concurrently, chunk by chunk: reduce-up (recvReduceSend from
// the children to the parent, send at a leaf) and broadcast-down (recvCopySend from the parent to
// the children, recv at a leaf).
#pragma once
#include "primitives.cuh"

template <typename T, int Proto> __device__ void cpTreeAllReduce(const cpWork& w) {
  __shared__ int failed[2];
  const T* send = (const T*)w.sendbuff;
  T* recv = (T*)w.recvbuff;
  const cpConn* fromKids[CP_MAX_PEERS];
  const cpConn* toKids[CP_MAX_PEERS];
  int nk = (int)w.nKids;
  for (int i = 0; i < nk; i++) {
    fromKids[i] = &w.fromKid[i];
    toKids[i] = &w.toKid[i];
  }
  if (!w.treeUp) {
    cpTeam t = {(int)threadIdx.x, (int)blockDim.x, 0};
    cpPrims<T, Proto> p(t, w, &failed[0], true, fromKids, nk, toKids, nk);
    for (cp_u64 e0 = w.lo; e0 < w.hi; e0 += w.chunkElems) {
      cp_u64 nel = min(w.chunkElems, w.hi - e0);
      if (!p.recvReduceCopySend(send + e0, recv + e0, nel)) break;
    }
    p.finish();
    return;
  }
  // Two teams of whole warps: reduce-up on barrier 1, broadcast-down on barrier 2.
  int half = ((int)blockDim.x / 64) * 32;
  bool up = (int)threadIdx.x < half;
  cpTeam t = up ? cpTeam{(int)threadIdx.x, half, 1} : cpTeam{(int)threadIdx.x - half, (int)blockDim.x - half, 2};
  const cpConn* parentTx[1] = {&w.toUp};
  const cpConn* parentRx[1] = {&w.fromUp};
  if (up) {
    cpPrims<T, Proto> p(t, w, &failed[0], true, fromKids, nk, parentTx, 1);
    for (cp_u64 e0 = w.lo; e0 < w.hi; e0 += w.chunkElems) {
      cp_u64 nel = min(w.chunkElems, w.hi - e0);
      if (!(nk == 0 ? p.send(send + e0, nel) : p.recvReduceSend(send + e0, nel))) break;
    }
    p.finish();
  } else {
    cpPrims<T, Proto> p(t, w, &failed[1], true, parentRx, 1, toKids, nk);
    for (cp_u64 e0 = w.lo; e0 < w.hi; e0 += w.chunkElems) {
      cp_u64 nel = min(w.chunkElems, w.hi - e0);
      if (!(nk == 0 ? p.recv(recv + e0, nel) : p.recvCopySend(recv + e0, nel))) break;
    }
    p.finish();
  }
}
