package kernels

import "math"

// Canonical NaN bit patterns: what a reduction produces when it has to make a
// NaN of its own (Min or Max of two NaNs, a float-to-fp8 conversion of NaN).
// They follow CUDA: the positive NaN with every payload bit set.
const (
	canonicalNaN16  = 0x7fff // float16 and bfloat16 (__hmin/__hmax)
	canonicalNaN32  = 0x7fffffff
	canonicalNaN64  = 0x7fffffffffffffff
	canonicalNaNFP8 = 0x7f // e4m3 and e5m2 (__nv_cvt_*_to_fp8)
)

// Largest finite values and their bit patterns.
const (
	MaxFloat16 = 65504 // 0x7bff
	MaxE4M3    = 448   // 0x7e (0x7f is NaN: E4M3 has no infinities)
	MaxE5M2    = 57344 // 0x7b
	maxE4M3Pat = 0x7e  // bit pattern of MaxE4M3
	maxE5M2Pat = 0x7b  // bit pattern of MaxE5M2
	f32Inf     = 0x7f800000
	f32AbsMask = 0x7fffffff
)

// HalfToFloat32 converts an IEEE binary16 bit pattern to float32. Every value,
// including subnormals, infinities and NaN payloads, converts exactly.
func HalfToFloat32(h uint16) float32 {
	if e := h & 0x7c00; e != 0 && e != 0x7c00 { // normal: rebias the exponent
		return math.Float32frombits(uint32(h&0x8000)<<16 | (uint32(h&0x7fff)<<13 + (127-15)<<23))
	}
	return halfToFloat32Special(h)
}

// halfToFloat32Special converts zeros, subnormals, infinities and NaNs.
func halfToFloat32Special(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	m := uint32(h & 0x3ff)
	if h&0x7c00 != 0 { // Inf or NaN: keep the payload
		return math.Float32frombits(sign | 0x7f800000 | m<<13)
	}
	// zero or subnormal m·2^-24: 2^-14·(1 + m/1024) - 2^-14 is exact
	f := math.Float32frombits(113<<23|m<<13) - 0x1p-14
	return math.Float32frombits(sign | math.Float32bits(f))
}

// Float32ToHalf converts f to IEEE binary16, rounding to nearest even as
// __float2half does. Values of magnitude 65520 and above become infinity.
// A NaN stays NaN and keeps the top ten bits of its payload (CUDA would
// return the canonical NaN 0x7fff instead).
func Float32ToHalf(f float32) uint16 {
	if h, ok := float32ToHalfNormal(f); ok {
		return h
	}
	return float32ToHalfSpecial(math.Float32bits(f))
}

// float32ToHalfNormal is the inlinable common case of Float32ToHalf: it
// returns ok for 2^-14 <= |f| < 2^16 (a half normal, or an overflow to Inf).
func float32ToHalfNormal(f float32) (h uint16, ok bool) {
	u := math.Float32bits(f)
	a := u & f32AbsMask
	ok = a-113<<23 < (143-113)<<23
	a -= (127 - 15) << 23      // rebias
	a += 0xfff + (a >> 13 & 1) // round the 13 dropped bits to nearest even; may carry to Inf
	return uint16(u>>16)&0x8000 | uint16(a>>13), ok
}

// float32ToHalfSpecial converts magnitudes below 2^-14 or at least 2^16,
// infinities and NaNs.
func float32ToHalfSpecial(u uint32) uint16 {
	sign := uint16(u>>16) & 0x8000
	u &= f32AbsMask
	switch {
	case u > f32Inf: // NaN
		o := uint16(0x7c00 | u>>13&0x3ff)
		if o == 0x7c00 {
			o |= 0x200 // payload lived in the dropped bits: keep it a NaN
		}
		return sign | o
	case u >= (127+16)<<23: // |f| >= 2^16 or Inf
		return sign | 0x7c00
	default: // |f| < 2^-14: half subnormal or zero
		// Adding 0.5, whose float32 ulp is the half subnormal step 2^-24,
		// rounds |f| to a multiple of that step (nearest even); the low bits
		// of the sum are then the half mantissa (0x400 is the smallest normal).
		return sign | uint16(math.Float32bits(math.Float32frombits(u)+0.5)-0x3f000000)
	}
}

// BFloat16ToFloat32 converts a bfloat16 bit pattern to float32 (exact).
func BFloat16ToFloat32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// Float32ToBFloat16 converts f to bfloat16, rounding to nearest even as
// __float2bfloat16 does. A NaN stays NaN and keeps the top seven bits of its
// payload (CUDA would return the canonical NaN 0x7fff instead).
func Float32ToBFloat16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&f32AbsMask > f32Inf {
		o := uint16(u >> 16)
		if o&0x7f == 0 {
			o |= 0x40
		}
		return o
	}
	return uint16((u + 0x7fff + (u >> 16 & 1)) >> 16)
}

// e4m3Table holds every E4M3 pattern as float32.
var e4m3Table = func() (t [256]float32) {
	for b := range 256 {
		e, m := b>>3&0xf, b&7
		var v float64
		switch {
		case e == 0xf && m == 7:
			v = math.NaN()
		case e == 0:
			v = math.Ldexp(float64(m), -9) // subnormal: m·2^-9
		default:
			v = math.Ldexp(float64(8+m), e-7-3) // 1.m·2^(e-7)
		}
		if b&0x80 != 0 {
			v = -v
		}
		t[b] = float32(v)
	}
	return t
}()

// E4M3ToFloat32 converts an fp8 E4M3 (OCP E4M3FN) pattern to float32 (exact).
// 0x7f and 0xff are NaN; there are no infinities.
func E4M3ToFloat32(b uint8) float32 { return e4m3Table[b] }

// E5M2ToFloat32 converts an fp8 E5M2 pattern to float32 (exact). E5M2 is the
// top byte of an IEEE binary16: 0x7c is +Inf and 0x7d..0x7f are NaNs.
func E5M2ToFloat32(b uint8) float32 { return HalfToFloat32(uint16(b) << 8) }

// Float32ToE4M3 converts f to fp8 E4M3 as __nv_cvt_float_to_fp8(f,
// __NV_SATFINITE, __NV_E4M3) does: round to nearest even, magnitudes at or
// above 448 (infinities included) saturate to ±448, and NaN becomes 0x7f.
func Float32ToE4M3(f float32) uint8 { return float32ToFP8(f, 3, 7, maxE4M3Pat, MaxE4M3) }

// Float32ToE5M2 converts f to fp8 E5M2 as __nv_cvt_float_to_fp8(f,
// __NV_SATFINITE, __NV_E5M2) does: round to nearest even, magnitudes at or
// above 57344 (infinities included) saturate to ±57344, and NaN becomes 0x7f.
func Float32ToE5M2(f float32) uint8 { return float32ToFP8(f, 2, 15, maxE5M2Pat, MaxE5M2) }

// float32ToFP8 rounds f to an fp8 format with man mantissa bits and exponent
// bias bias, saturating to the finite maximum maxVal (pattern maxPat).
func float32ToFP8(f float32, man uint32, bias int32, maxPat uint8, maxVal float32) uint8 {
	u := math.Float32bits(f)
	sign := uint8(u>>24) & 0x80
	u &= f32AbsMask
	switch {
	case u > f32Inf:
		return canonicalNaNFP8
	case u >= math.Float32bits(maxVal): // SATFINITE: everything that would round past max
		return sign | maxPat
	case u < uint32(128-bias)<<23: // below the smallest normal 2^(1-bias): subnormal or zero
		// magic has a float32 ulp equal to the fp8 subnormal step 2^(1-bias-man),
		// so the addition rounds |f| to that step (nearest even).
		magic := uint32(128-bias-int32(man)+23) << 23
		return sign | uint8(math.Float32bits(math.Float32frombits(u)+math.Float32frombits(magic))-magic)
	default:
		shift := 23 - man
		u -= uint32(127-bias) << 23
		u += 1<<(shift-1) - 1 + (u >> shift & 1)
		return sign | uint8(u>>shift)
	}
}
