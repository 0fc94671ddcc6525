// primitives.cuh: NCCL's primitives (src/device/prims_*.h) over the three protocols, run by a
// team of warps on up to CP_MAX_PEERS receive and send connections: send, recv,
// recvReduceSend, recvReduceCopy, recvReduceCopySend, recvCopySend, copySend and directRecv.
//
// A primitive moves its elements one FIFO step (a piece of at most pieceBytes) at a time. Per
// step: receive from every receive peer; combine with the local input as the CPU engine does
// (engine/prims.go: the first peer's partial (op) pre(input), then (op) every other peer's
// partial; pre only on the local input, NCCL's PreOpSrcs); apply the post-operation where the
// reduction completes (SumPostDiv's divide); store to the local output; send to every send
// peer; then hand the received slots back (head = step+1).
#pragma once
#include "protocols.cuh"
#include "reduce.cuh"

// What a primitive does with one step, as engine/prims.go's prim bits.
#define CP_IN 1
#define CP_OUT 2
#define CP_RECV 4
#define CP_SEND 8
#define CP_POST 16

template <typename T, int Proto> struct cpPrims {
  cpTeam team;
  cpRed<T> red;
  volatile cp_u32* abort;
  int* failed;    // the team's shared word: set when a wait gave up
  bool reducing;  // a reduction collective: send and copySend pre-multiply their input
  cp_u64 pieceBytes;
  const cpConn* recvs[CP_MAX_PEERS];
  const cpConn* sends[CP_MAX_PEERS];
  cp_u64 recvStep[CP_MAX_PEERS], sendStep[CP_MAX_PEERS];
  int nRecv, nSend;

  __device__ cpPrims(const cpTeam& t, const cpWork& w, int* failedWord, bool reduction, const cpConn* const* rs, int nr,
                     const cpConn* const* ss, int ns)
      : team(t), red(w.devOp, w.opArg), abort(w.abort), failed(failedWord), reducing(reduction),
        pieceBytes(w.pieceBytes), nRecv(nr), nSend(ns) {
    for (int i = 0; i < nr; i++) {
      recvs[i] = rs[i];
      recvStep[i] = *rs[i]->step;
    }
    for (int i = 0; i < ns; i++) {
      sends[i] = ss[i];
      sendStep[i] = *ss[i]->step;
    }
    if (team.tid == 0) *failed = 0;
    team.sync();
  }

  // finish stores the step counts back, for the next call on the same connections.
  __device__ void finish() {
    team.sync();
    if (team.tid == 0) {
      for (int i = 0; i < nRecv; i++) *recvs[i]->step = recvStep[i];
      for (int i = 0; i < nSend; i++) *sends[i]->step = sendStep[i];
    }
  }

  __device__ bool send(const T* in, cp_u64 n) { return run(CP_IN | CP_SEND, in, nullptr, n); }
  __device__ bool copySend(const T* in, T* out, cp_u64 n) { return run(CP_IN | CP_OUT | CP_SEND, in, out, n); }
  __device__ bool recv(T* out, cp_u64 n) { return run(CP_RECV | CP_OUT, nullptr, out, n); }
  // directRecv is the ring's last receive into the user's output. NCCL's direct form lets the
  // sender write straight into it through a peer pointer; here the step comes through the FIFO
  // as every other, as in the CPU engine.
  __device__ bool directRecv(T* out, cp_u64 n) { return recv(out, n); }
  __device__ bool recvReduceSend(const T* in, cp_u64 n) { return run(CP_RECV | CP_IN | CP_SEND, in, nullptr, n); }
  __device__ bool recvReduceCopy(const T* in, T* out, cp_u64 n) {
    return run(CP_RECV | CP_IN | CP_OUT | CP_POST, in, out, n);
  }
  __device__ bool recvReduceCopySend(const T* in, T* out, cp_u64 n) {
    return run(CP_RECV | CP_IN | CP_OUT | CP_SEND | CP_POST, in, out, n);
  }
  __device__ bool recvCopySend(T* out, cp_u64 n) { return run(CP_RECV | CP_OUT | CP_SEND, nullptr, out, n); }

  // run applies primitive p to n elements, one FIFO step per piece. run and piece are not
  // inlined: one copy per (type, protocol) instead of one per call site keeps NVRTC and ptxas
  // at seconds per architecture.
  __device__ __noinline__ bool run(int p, const T* in, T* out, cp_u64 n) {
    cp_u64 nb = n * sizeof(T);
    for (cp_u64 off = 0; off < nb; off += pieceBytes) {
      cp_u64 end = min(off + pieceBytes, nb);
      const char* pi = (p & CP_IN) ? (const char*)in + off : nullptr;
      char* po = (p & CP_OUT) ? (char*)out + off : nullptr;
      if (!piece(p, pi, po, (int)(end - off))) return false;
    }
    return true;
  }

  // value combines one pack's contributions: the received partials r[0..nr) and the input x.
  __device__ __forceinline__ cp_u64 value(int p, const cp_u64* r, int nr, bool hasIn, cp_u64 x) const {
    cp_u64 v;
    if (nr == 0) return reducing ? cpPre<T>(red, x) : x;
    v = hasIn ? cpReduce<T>(red, r[0], x) : r[0];
    for (int i = 1; i < nr; i++) v = cpCombine<T>(red, v, r[i]);
    if (p & CP_POST) v = cpPost<T>(red, v);
    return v;
  }

  // reserveAll waits for every send slot (thread 0), then the team barrier.
  __device__ bool begin(int p) {
    if (team.tid == 0) {
      bool ok = true;
      if (p & CP_SEND)
        for (int i = 0; i < nSend && ok; i++) ok = cpReserve(*sends[i], sendStep[i], abort);
      if (Proto == CP_PROTO_SIMPLE && (p & CP_RECV))
        for (int i = 0; i < nRecv && ok; i++) ok = cpWaitTail(*recvs[i], recvStep[i], abort);
      if (!ok) *failed = 1;
    }
    team.sync();
    return *failed == 0;
  }

  // end publishes the sends (Simple's tail), releases the received slots and counts the step.
  __device__ bool end(int p) {
    team.sync();
    if (*failed != 0) return false;
    if (team.tid == 0) {
      if (Proto == CP_PROTO_SIMPLE && (p & CP_SEND))
        for (int i = 0; i < nSend; i++) cpPublishTail(*sends[i], sendStep[i]);
      if (p & CP_RECV)
        for (int i = 0; i < nRecv; i++) cpReleaseHead(*recvs[i], recvStep[i]);
    }
    if (p & CP_SEND)
      for (int i = 0; i < nSend; i++) sendStep[i]++;
    if (p & CP_RECV)
      for (int i = 0; i < nRecv; i++) recvStep[i]++;
    return true;
  }

  __device__ __noinline__ bool piece(int p, const char* in, char* out, int nb) {
    if (!begin(p)) return false;
    int nr = (p & CP_RECV) ? nRecv : 0, ns = (p & CP_SEND) ? nSend : 0;
    if constexpr (Proto == CP_PROTO_SIMPLE) {
      pieceSimple(p, (const T*)in, (T*)out, nb / (int)sizeof(T), nr, ns);
    } else if constexpr (Proto == CP_PROTO_LL) {
      pieceLL(p, in, out, nb, nr, ns);
    } else {
      pieceLL128(p, in, out, nb, nr, ns);
    }
    return end(p);
  }

  __device__ void pieceSimple(int p, const T* in, T* out, int ne, int nr, int ns) {
    const T* rs[CP_MAX_PEERS];
    T* ss[CP_MAX_PEERS];
    for (int i = 0; i < nr; i++) rs[i] = (const T*)cpSlotSimple(*recvs[i], recvStep[i]);
    for (int i = 0; i < ns; i++) ss[i] = (T*)cpSlotSimple(*sends[i], sendStep[i]);
    for (int e = team.tid; e < ne; e += team.nthreads) {
      T v;
      if (nr == 0) {
        v = reducing ? red.pre(in[e]) : in[e];
      } else {
        v = in != nullptr ? red.reduce(rs[0][e], in[e]) : rs[0][e];
        for (int i = 1; i < nr; i++) v = red.combine(v, rs[i][e]);
        if (p & CP_POST) v = red.post(v);
      }
      if (out != nullptr) out[e] = v;
      for (int i = 0; i < ns; i++) ss[i][e] = v;
    }
  }

  __device__ void pieceLL(int p, const char* in, char* out, int nb, int nr, int ns) {
    int lines = (nb + COLLPLAN_LL_LINE_PAYLOAD - 1) / COLLPLAN_LL_LINE_PAYLOAD;
    for (int l = team.tid; l < lines; l += team.nthreads) {
      int o = l * COLLPLAN_LL_LINE_PAYLOAD, b = min(COLLPLAN_LL_LINE_PAYLOAD, nb - o);
      cp_u64 r[CP_MAX_PEERS];
      bool ok = true;
      for (int i = 0; i < nr && ok; i++)
        ok = cpReadLL(cpSlotLL(*recvs[i], recvStep[i]) + l * COLLPLAN_LL_LINE_BYTES, (cp_u32)(recvStep[i] + 1), abort,
                      &r[i]);
      if (!ok) {
        *failed = 1;
        return;
      }
      cp_u64 x = in != nullptr ? cpLoadBytes<T>(in + o, b) : 0;
      cp_u64 v = value(p, r, nr, in != nullptr, x);
      if (out != nullptr) cpStoreBytes<T>(out + o, v, b);
      for (int i = 0; i < ns; i++)
        cpStoreLL(cpSlotLL(*sends[i], sendStep[i]) + l * COLLPLAN_LL_LINE_BYTES, v, (cp_u32)(sendStep[i] + 1));
    }
  }

  // pieceLL128: each warp takes 4 lines at a time, 8 threads a line; the loop is warp-uniform
  // so that every lane takes part in the flag vote.
  __device__ void pieceLL128(int p, const char* in, char* out, int nb, int nr, int ns) {
    const int lpw = 32 / CP_LL128_THREADS_PER_LINE;  // lines per warp
    int lines = (nb + COLLPLAN_LL128_LINE_PAYLOAD - 1) / COLLPLAN_LL128_LINE_PAYLOAD;
    int warp = team.tid / 32, nwarps = team.nthreads / 32, lane = team.tid % 32;
    int j = lane % CP_LL128_THREADS_PER_LINE;
    bool flagThread = j == CP_LL128_THREADS_PER_LINE - 1;
    for (int base = warp * lpw; base < lines; base += nwarps * lpw) {
      int l = base + lane / CP_LL128_THREADS_PER_LINE;
      bool active = l < lines;
      int lineOff = l * COLLPLAN_LL128_LINE_BYTES + 16 * j;
      cp_u64 r0[CP_MAX_PEERS], r1[CP_MAX_PEERS];
      for (int i = 0; i < nr; i++) {
        const char* src = cpSlotLL128(*recvs[i], recvStep[i]) + lineOff;
        cp_u64 flag = recvStep[i] + 1;
        int spins = 0;
        for (;;) {
          if (active) cpLoadLL128(src, &r0[i], &r1[i]);
          bool stale = active && flagThread && r1[i] != flag;
          if (!__any_sync(0xffffffffu, stale)) break;
          if (++spins == 1024) {
            spins = 0;
            if (__any_sync(0xffffffffu, abort != nullptr && *abort != 0)) {
              *failed = 1;
              return;
            }
          }
        }
      }
      if (!active) continue;
      // Word 2j, then word 2j+1 unless it is the flag.
      cp_u64 v[2];
      for (int k = 0; k < 2; k++) {
        int w = 2 * j + k;
        if (w == CP_LL128_FLAG_WORD) break;
        int o = l * COLLPLAN_LL128_LINE_PAYLOAD + 8 * w, b = max(0, min(8, nb - o));
        cp_u64 r[CP_MAX_PEERS];
        for (int i = 0; i < nr; i++) r[i] = k == 0 ? r0[i] : r1[i];
        cp_u64 x = (in != nullptr && b > 0) ? cpLoadBytes<T>(in + o, b) : 0;
        v[k] = value(p, r, nr, in != nullptr, x);
        if (out != nullptr && b > 0) cpStoreBytes<T>(out + o, v[k], b);
      }
      for (int i = 0; i < ns; i++)
        cpStoreLL128(cpSlotLL128(*sends[i], sendStep[i]) + lineOff, v[0], flagThread ? sendStep[i] + 1 : v[1]);
    }
  }
};
