package kernels

import (
	"math"
	"sync"
)

// The typed inner loops. Each takes slices of equal length (the callers
// guarantee it; the reslicing lets the compiler drop the bounds checks) and
// works element by element, so dst may alias an input.

type integer interface {
	~int8 | ~uint8 | ~int32 | ~uint32 | ~int64 | ~uint64
}

type float interface{ ~float32 | ~float64 }

type number interface{ integer | float }

func sumLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + b[i]
	}
}

func prodLoop[T number](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] * b[i]
	}
}

// preMulSumLoop computes d = a + b·s, rounding the product to T before the
// addition (the explicit conversion forbids fusing into an FMA), as NCCL's
// separate preOp and reduce steps do.
func preMulSumLoop[T number](d, a, b []T, s T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = a[i] + T(b[i]*s)
	}
}

func scaleLoop[T number](d, src []T, s T) {
	src = src[:len(d)]
	for i := range d {
		d[i] = T(src[i] * s)
	}
}

func minLoop[T integer](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = min(a[i], b[i])
	}
}

func maxLoop[T integer](d, a, b []T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = max(a[i], b[i])
	}
}

// fminLoop is fminf/fmin: a NaN operand is ignored, two NaNs give nan, and
// -0 is below +0.
func fminLoop[T float](d, a, b []T, nan T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		switch {
		case x < y:
		case y < x:
			x = y
		case x == y: // equal, possibly zeros of different sign: keep the negative one
			if !math.Signbit(float64(x)) {
				x = y
			}
		case x != x: // x is NaN
			if y == y {
				x = y
			} else {
				x = nan
			}
		}
		d[i] = x // the remaining case, y NaN and x not, keeps x
	}
}

// fmaxLoop is fmaxf/fmax: a NaN operand is ignored, two NaNs give nan, and
// +0 is above -0.
func fmaxLoop[T float](d, a, b []T, nan T) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		switch {
		case x > y:
		case y > x:
			x = y
		case x == y:
			if math.Signbit(float64(x)) {
				x = y
			}
		case x != x:
			if y == y {
				x = y
			} else {
				x = nan
			}
		}
		d[i] = x
	}
}

// postDivSigned divides by n with truncation toward zero (SumPostDiv). The
// division is done in int64 so an n beyond T's range still works.
func postDivSigned[T ~int8 | ~int32 | ~int64](d []T, n int64) {
	for i := range d {
		d[i] = T(int64(d[i]) / n)
	}
}

func postDivUnsigned[T ~uint8 | ~uint32 | ~uint64](d []T, n uint64) {
	for i := range d {
		d[i] = T(uint64(d[i]) / n)
	}
}

// 16-bit floats (float16, bfloat16): decode to float32, compute, round once.

// halfTable maps every float16 pattern to its float32 value. The loops read
// it instead of calling HalfToFloat32: one load beats the branches.
var halfTable = sync.OnceValue(func() *[65536]float32 {
	t := new([65536]float32)
	for h := range t {
		t[h] = HalfToFloat32(uint16(h))
	}
	return t
})

func halfSumLoop(d, a, b []uint16) {
	t := halfTable()
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		s := t[a[i]] + t[b[i]]
		h, ok := float32ToHalfNormal(s)
		if !ok {
			h = Float32ToHalf(s)
		}
		d[i] = h
	}
}

func halfProdLoop(d, a, b []uint16) {
	t := halfTable()
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		p := t[a[i]] * t[b[i]]
		h, ok := float32ToHalfNormal(p)
		if !ok {
			h = Float32ToHalf(p)
		}
		d[i] = h
	}
}

// halfPreMulSumLoop is __hadd(a, __hmul(b, s)): two roundings to half.
func halfPreMulSumLoop(d, a, b []uint16, s float32) {
	t := halfTable()
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		m := t[b[i]] * s
		mh, ok := float32ToHalfNormal(m)
		if !ok {
			mh = Float32ToHalf(m)
		}
		p := t[a[i]] + t[mh]
		h, ok := float32ToHalfNormal(p)
		if !ok {
			h = Float32ToHalf(p)
		}
		d[i] = h
	}
}

func halfScaleLoop(d, src []uint16, s float32) {
	t := halfTable()
	src = src[:len(d)]
	for i := range d {
		m := t[src[i]] * s
		h, ok := float32ToHalfNormal(m)
		if !ok {
			h = Float32ToHalf(m)
		}
		d[i] = h
	}
}

func bf16SumLoop(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = Float32ToBFloat16(BFloat16ToFloat32(a[i]) + BFloat16ToFloat32(b[i]))
	}
}

func bf16ProdLoop(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = Float32ToBFloat16(BFloat16ToFloat32(a[i]) * BFloat16ToFloat32(b[i]))
	}
}

func bf16PreMulSumLoop(d, a, b []uint16, s float32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		p := BFloat16ToFloat32(Float32ToBFloat16(BFloat16ToFloat32(b[i]) * s))
		d[i] = Float32ToBFloat16(BFloat16ToFloat32(a[i]) + p)
	}
}

func bf16ScaleLoop(d, src []uint16, s float32) {
	src = src[:len(d)]
	for i := range d {
		d[i] = Float32ToBFloat16(BFloat16ToFloat32(src[i]) * s)
	}
}

// minMax16Loop is __hmin/__hmax on float16 or bfloat16 patterns: the result
// is one of the inputs, except that two NaNs give the canonical NaN 0x7fff.
// A NaN operand is ignored and -0 orders below +0. nanAbove is the smallest
// absolute pattern that is a NaN (0x7c01 for float16, 0x7f81 for bfloat16).
func minMax16Loop(d, a, b []uint16, isMin bool, nanAbove uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		x, y := a[i], b[i]
		xn, yn := x&0x7fff >= nanAbove, y&0x7fff >= nanAbove
		switch {
		case xn && yn:
			x = canonicalNaN16
		case xn:
			x = y
		case yn:
		case (order16(y) < order16(x)) == isMin && x != y:
			x = y
		}
		d[i] = x
	}
}

// order16 maps a non-NaN sign-magnitude pattern to an integer with the same
// order as the values, -0 just below +0.
func order16(x uint16) int32 {
	m := int32(x & 0x7fff)
	if x&0x8000 != 0 {
		return -m - 1
	}
	return m
}

// fp8 loops: every binary operation is a 64 KiB table indexed by a<<8|b.

func tableLoop(d, a, b []byte, t *[65536]byte) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = t[uint16(a[i])<<8|uint16(b[i])]
	}
}

// tablePreMulSumLoop is sum(a, prod(b, s)).
func tablePreMulSumLoop(d, a, b []byte, sum, prod *[65536]byte, s byte) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = sum[uint16(a[i])<<8|uint16(prod[uint16(b[i])<<8|uint16(s)])]
	}
}

func tableScaleLoop(d, src []byte, prod *[65536]byte, s byte) {
	src = src[:len(d)]
	for i := range d {
		d[i] = prod[uint16(src[i])<<8|uint16(s)]
	}
}
