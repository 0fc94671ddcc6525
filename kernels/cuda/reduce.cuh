// reduce.cuh: element-wise reduce and copy for every dtype and device operator of package
// kernels, with NCCL's semantics (src/device/reduce_kernel.h):
//
//   - Sum and Prod in the element type (integers wrap: computed unsigned);
//   - MinMax: min or max chosen by bit 0 of the argument (set: max), fminf/fmaxf and
//     __hmin/__hmax on floats (a NaN operand is ignored);
//   - PreMulSum (float avg, ncclRedOpCreatePreMulSum): every local contribution is multiplied by
//     the scalar (the argument's low bytes, an element of the dtype) as it is loaded;
//   - SumPostDiv (integer avg): the sum in the element type, divided once by nRanks (the
//     argument >> 1), truncating toward zero;
//   - float16 and bfloat16 through cuda_fp16.h / cuda_bf16.h (__hadd, __hmul, __hmin, __hmax);
//   - fp8 e4m3 / e5m2: computed in float, converted back with __NV_SATFINITE (kernels/doc.go:
//     through float or half the fp8 result is the same).
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include "common.cuh"

// fp8 elements, stored as their bit patterns.
struct cpE4M3 { __nv_fp8_storage_t x; };
struct cpE5M2 { __nv_fp8_storage_t x; };

template <typename T> struct cpArith;

// Integers: arithmetic in the unsigned type of the same width (wrapping, no undefined overflow).
template <typename T, typename U> struct cpIntArith {
  static __device__ __forceinline__ T add(T a, T b) { return (T)(U)((U)a + (U)b); }
  static __device__ __forceinline__ T mul(T a, T b) { return (T)(U)((U)a * (U)b); }
  static __device__ __forceinline__ T mn(T a, T b) { return b < a ? b : a; }
  static __device__ __forceinline__ T mx(T a, T b) { return a < b ? b : a; }
  // div is SumPostDiv's divide, truncating toward zero, in 64 bits so that an n beyond T's range
  // (int8 with more than 127 ranks) still divides as the CPU kernels' postDivSigned does.
  static __device__ __forceinline__ T div(T a, cp_u64 n) {
    if ((T)-1 < (T)0) return (T)((cp_i64)a / (cp_i64)n);
    return (T)((cp_u64)a / n);
  }
};
template <> struct cpArith<cp_i8> : cpIntArith<cp_i8, cp_u8> {};
template <> struct cpArith<cp_u8> : cpIntArith<cp_u8, cp_u8> {};
template <> struct cpArith<cp_u16> : cpIntArith<cp_u16, cp_u16> {};  // the b16 copy kernels' elements
template <> struct cpArith<cp_i32> : cpIntArith<cp_i32, cp_u32> {};
template <> struct cpArith<cp_u32> : cpIntArith<cp_u32, cp_u32> {};
template <> struct cpArith<cp_i64> : cpIntArith<cp_i64, cp_u64> {};
template <> struct cpArith<cp_u64> : cpIntArith<cp_u64, cp_u64> {};

template <> struct cpArith<float> {
  static __device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
  static __device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
  static __device__ __forceinline__ float mn(float a, float b) { return fminf(a, b); }
  static __device__ __forceinline__ float mx(float a, float b) { return fmaxf(a, b); }
  static __device__ __forceinline__ float div(float a, cp_u64) { return a; }
};
template <> struct cpArith<double> {
  static __device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
  static __device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
  static __device__ __forceinline__ double mn(double a, double b) { return fmin(a, b); }
  static __device__ __forceinline__ double mx(double a, double b) { return fmax(a, b); }
  static __device__ __forceinline__ double div(double a, cp_u64) { return a; }
};
template <> struct cpArith<__half> {
  static __device__ __forceinline__ __half add(__half a, __half b) { return __hadd(a, b); }
  static __device__ __forceinline__ __half mul(__half a, __half b) { return __hmul(a, b); }
  static __device__ __forceinline__ __half mn(__half a, __half b) { return __hmin(a, b); }
  static __device__ __forceinline__ __half mx(__half a, __half b) { return __hmax(a, b); }
  static __device__ __forceinline__ __half div(__half a, cp_u64) { return a; }
};
template <> struct cpArith<__nv_bfloat16> {
  typedef __nv_bfloat16 B;
  static __device__ __forceinline__ B add(B a, B b) { return __hadd(a, b); }
  static __device__ __forceinline__ B mul(B a, B b) { return __hmul(a, b); }
  static __device__ __forceinline__ B mn(B a, B b) { return __hmin(a, b); }
  static __device__ __forceinline__ B mx(B a, B b) { return __hmax(a, b); }
  static __device__ __forceinline__ B div(B a, cp_u64) { return a; }
};

// fp8: decode to float (exact), operate, round once back with saturation to the largest finite
// value (NaN becomes the canonical 0x7f).
template <typename F, __nv_fp8_interpretation_t K> struct cpFp8Arith {
  static __device__ __forceinline__ float dec(F a) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(a.x, K)));
  }
  static __device__ __forceinline__ F enc(float f) {
    F r;
    r.x = __nv_cvt_float_to_fp8(f, __NV_SATFINITE, K);
    return r;
  }
  // Not inlined: the conversions are long before sm_89 (no cvt instruction for fp8), and every
  // call site would carry a copy (the fp8 kernels' PTX was 4 times any other type's).
  static __device__ __noinline__ F add(F a, F b) { return enc(dec(a) + dec(b)); }
  static __device__ __noinline__ F mul(F a, F b) { return enc(dec(a) * dec(b)); }
  static __device__ __noinline__ F mn(F a, F b) { return enc(fminf(dec(a), dec(b))); }
  static __device__ __noinline__ F mx(F a, F b) { return enc(fmaxf(dec(a), dec(b))); }
  static __device__ __forceinline__ F div(F a, cp_u64) { return a; }
};
template <> struct cpArith<cpE4M3> : cpFp8Arith<cpE4M3, __NV_E4M3> {};
template <> struct cpArith<cpE5M2> : cpFp8Arith<cpE5M2, __NV_E5M2> {};

// cpRed is one call's device operator on T: NCCL's ncclDevRedOpFull (op and scalarArg).
template <typename T> struct cpRed {
  typedef cpArith<T> A;
  cp_u32 op;
  bool isMax;
  cp_u64 divisor;
  T scalar;

  __device__ cpRed(cp_u32 devOp, cp_u64 arg) : op(devOp), isMax((arg & 1) != 0), divisor(arg >> 1) {
    // The scalar is the argument's low sizeof(T) bytes (little-endian), as Reducer.Arg holds it.
    union { cp_u64 u; T t; } b;
    b.u = arg;
    scalar = b.t;
  }

  // pre is the operator's pre-operation on a local contribution: x*scalar for PreMulSum.
  __device__ __forceinline__ T pre(T x) const { return op == COLLPLAN_DEVOP_PREMULSUM ? A::mul(x, scalar) : x; }

  // combine reduces two partial results (neither pre-multiplied again).
  __device__ __forceinline__ T combine(T a, T b) const {
    switch (op) {
      case COLLPLAN_DEVOP_PROD: return A::mul(a, b);
      case COLLPLAN_DEVOP_MINMAX: return isMax ? A::mx(a, b) : A::mn(a, b);
      default: return A::add(a, b);  // Sum, PreMulSum, SumPostDiv
    }
  }

  // reduce is a partial result combined with a raw local contribution: a (op) pre(b).
  __device__ __forceinline__ T reduce(T a, T b) const { return combine(a, pre(b)); }

  // post is the post-operation, applied once where the reduction completes.
  __device__ __forceinline__ T post(T x) const {
    return op == COLLPLAN_DEVOP_SUMPOSTDIV ? A::div(x, divisor) : x;
  }
};

// cpPack is 8 bytes of elements: one LL line's payload, one LL128 word.
template <typename T> union cpPack {
  cp_u64 u;
  T e[8 / sizeof(T)];
};

// Pack-wise forms of cpRed's steps, applied to every element of a pack.
template <typename T> __device__ __forceinline__ cp_u64 cpPre(const cpRed<T>& r, cp_u64 x) {
  cpPack<T> p;
  p.u = x;
#pragma unroll
  for (int i = 0; i < 8 / (int)sizeof(T); i++) p.e[i] = r.pre(p.e[i]);
  return p.u;
}
template <typename T> __device__ __forceinline__ cp_u64 cpCombine(const cpRed<T>& r, cp_u64 a, cp_u64 b) {
  cpPack<T> p, q;
  p.u = a;
  q.u = b;
#pragma unroll
  for (int i = 0; i < 8 / (int)sizeof(T); i++) p.e[i] = r.combine(p.e[i], q.e[i]);
  return p.u;
}
template <typename T> __device__ __forceinline__ cp_u64 cpReduce(const cpRed<T>& r, cp_u64 a, cp_u64 b) {
  return cpCombine(r, a, cpPre(r, b));
}
template <typename T> __device__ __forceinline__ cp_u64 cpPost(const cpRed<T>& r, cp_u64 x) {
  cpPack<T> p;
  p.u = x;
#pragma unroll
  for (int i = 0; i < 8 / (int)sizeof(T); i++) p.e[i] = r.post(p.e[i]);
  return p.u;
}

// cpLoadBytes reads nb (1..8) bytes of elements at p as a pack, zero-padded: one 8-byte load when
// p is 8-byte aligned and the pack is whole, else element by element (p is aligned to T).
template <typename T> __device__ __forceinline__ cp_u64 cpLoadBytes(const char* p, int nb) {
  if (nb == 8 && ((unsigned long long)p & 7) == 0) return *(const cp_u64*)p;
  cpPack<T> v;
  v.u = 0;
  for (int i = 0; i < nb / (int)sizeof(T); i++) v.e[i] = ((const T*)p)[i];
  return v.u;
}

// cpStoreBytes writes the first nb (1..8) bytes of pack v to p.
template <typename T> __device__ __forceinline__ void cpStoreBytes(char* p, cp_u64 v, int nb) {
  if (nb == 8 && ((unsigned long long)p & 7) == 0) {
    *(cp_u64*)p = v;
    return;
  }
  cpPack<T> q;
  q.u = v;
  for (int i = 0; i < nb / (int)sizeof(T); i++) ((T*)p)[i] = q.e[i];
}

// cpCopy copies n elements from src to dst with the team's threads (FuncCopy).
template <typename T> __device__ void cpCopy(const cpTeam& t, T* dst, const T* src, cp_u64 n) {
  for (cp_u64 i = t.tid; i < n; i += t.nthreads) dst[i] = src[i];
}
