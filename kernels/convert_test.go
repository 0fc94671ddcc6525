package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// codec is one narrow format as the package implements it.
type codec struct {
	ref *refTable
	dec func(uint32) float32
	enc func(float32) uint32
}

var codecs = []codec{
	{refHalf, func(p uint32) float32 { return HalfToFloat32(uint16(p)) }, func(f float32) uint32 { return uint32(Float32ToHalf(f)) }},
	{refBF16, func(p uint32) float32 { return BFloat16ToFloat32(uint16(p)) }, func(f float32) uint32 { return uint32(Float32ToBFloat16(f)) }},
	{refE4M3, func(p uint32) float32 { return E4M3ToFloat32(uint8(p)) }, func(f float32) uint32 { return uint32(Float32ToE4M3(f)) }},
	{refE5M2, func(p uint32) float32 { return E5M2ToFloat32(uint8(p)) }, func(f float32) uint32 { return uint32(Float32ToE5M2(f)) }},
}

// TestDecodeExhaustive checks every bit pattern of every narrow format
// against the textbook value formula.
func TestDecodeExhaustive(t *testing.T) {
	for _, c := range codecs {
		t.Run(c.ref.spec.name, func(t *testing.T) {
			bad := 0
			for p := uint32(0); p < 1<<c.ref.spec.nbits; p++ {
				got, want := float64(c.dec(p)), c.ref.spec.decode(p)
				ok := math.IsNaN(want) && math.IsNaN(got) ||
					got == want && math.Signbit(got) == math.Signbit(want)
				if !ok && bad < 5 {
					bad++
					assert.Failf(t, "decode", "pattern %#x: got %v, want %v", p, got, want)
				}
			}
		})
	}
}

// TestRoundTripExhaustive sends every pattern through float32 and back.
// float16 and bfloat16 return every pattern, NaN payloads included. fp8
// returns every finite pattern; NaNs come back as the canonical 0x7f and
// E5M2's infinities as the largest finite value (SATFINITE).
func TestRoundTripExhaustive(t *testing.T) {
	for _, c := range codecs {
		s := c.ref.spec
		t.Run(s.name, func(t *testing.T) {
			bad := 0
			for p := uint32(0); p < 1<<s.nbits; p++ {
				want := p
				v := s.decode(p)
				if s.saturating {
					switch {
					case math.IsNaN(v):
						want = 0x7f
					case math.IsInf(v, 0):
						want = p&0x80 | c.ref.maxPat()
					}
				}
				if got := c.enc(c.dec(p)); got != want && bad < 5 {
					bad++
					assert.Failf(t, "round trip", "pattern %#x: got %#x, want %#x", p, got, want)
				}
			}
		})
	}
}

// encodeInputs returns float32 values that probe every rounding boundary of
// the format: each finite value, each midpoint between neighbours (including
// the one past the largest value), and the float32 values just either side
// of each midpoint, in both signs; plus zeros, infinities and huge values.
func encodeInputs(t *testing.T, r *refTable) []float32 {
	var in []float32
	n := len(r.vals)
	next := r.vals[n-1] + (r.vals[n-1] - r.vals[n-2])
	for i, v := range r.vals {
		hi := next
		if i+1 < n {
			hi = r.vals[i+1]
		}
		mid := (v + hi) / 2
		require.Equal(t, mid, float64(float32(mid)), "midpoint %v must be a float32", mid)
		m := float32(mid)
		for _, x := range []float32{float32(v), m, math.Nextafter32(m, 0), math.Nextafter32(m, float32(math.Inf(1)))} {
			in = append(in, x, -x)
		}
	}
	inf := float32(math.Inf(1))
	return append(in, inf, -inf, math.MaxFloat32, -math.MaxFloat32, 1e30, math.SmallestNonzeroFloat32)
}

// TestEncodeBoundaries checks float32 -> format rounding at every boundary,
// and on random float32 bit patterns, against the nearest-value reference.
func TestEncodeBoundaries(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range codecs {
		t.Run(c.ref.spec.name, func(t *testing.T) {
			in := encodeInputs(t, c.ref)
			for range 100000 {
				f := math.Float32frombits(rng.Uint32())
				if !math.IsNaN(float64(f)) {
					in = append(in, f)
				}
			}
			bad := 0
			for _, f := range in {
				got, want := c.enc(f), c.ref.encode(float64(f))
				if got != want && bad < 5 {
					bad++
					assert.Failf(t, "encode", "%g (%#08x): got %#x, want %#x", f, math.Float32bits(f), got, want)
				}
			}
		})
	}
}

// TestEncodeNaN: NaN stays NaN. float16/bfloat16 keep the payload's top
// bits (and stay NaN when those are zero); fp8 gives the canonical 0x7f.
func TestEncodeNaN(t *testing.T) {
	for _, bits := range []uint32{0x7fc00000, 0xffc00000, 0x7f800001, 0xff800001, 0x7fffffff, 0x7fa00000} {
		f := math.Float32frombits(bits)
		for _, c := range codecs {
			got := c.enc(f)
			assert.True(t, c.ref.spec.isNaN(got), "%s(%#08x) = %#x is not NaN", c.ref.spec.name, bits, got)
			if c.ref.spec.saturating {
				assert.Equal(t, uint32(0x7f), got, "%s(%#08x)", c.ref.spec.name, bits)
			}
		}
	}
	assert.Equal(t, uint16(0x7e00), Float32ToHalf(math.Float32frombits(0x7fc00000)))
	assert.Equal(t, uint16(0x7fc0), Float32ToBFloat16(math.Float32frombits(0x7fc00000)))
}

// TestEncodeHandCases pins values derived by hand.
func TestEncodeHandCases(t *testing.T) {
	ldexp := func(f float64, e int) float32 { return float32(math.Ldexp(f, e)) }
	half := []struct {
		in   float32
		want uint16
		why  string
	}{
		{1, 0x3c00, "exact"},
		{ldexp(1+1.0/2048, 0), 0x3c00, "1+2^-11 is halfway between 1 and 1+2^-10: even is 1"},
		{ldexp(1+3.0/2048, 0), 0x3c02, "1+3·2^-11 is halfway between 0x3c01 and 0x3c02: even is 0x3c02"},
		{65504, 0x7bff, "largest finite"},
		{65519.996, 0x7bff, "just below max + ulp/2 = 65520"},
		{65520, 0x7c00, "max + ulp/2 ties to the even pattern 0x7c00: Inf"},
		{1e6, 0x7c00, "overflow"},
		{-1e6, 0xfc00, "negative overflow"},
		{ldexp(1, -24), 0x0001, "smallest subnormal"},
		{ldexp(1, -25), 0x0000, "half the smallest subnormal ties to 0"},
		{ldexp(3, -26), 0x0001, "0.75·2^-24 rounds up to 2^-24"},
		{ldexp(3, -25), 0x0002, "1.5·2^-24 ties to the even 2·2^-24"},
		{ldexp(1, -14) - ldexp(1, -25), 0x0400, "halfway between 0x3ff and 0x400: even is the smallest normal"},
		{-0.0, 0x0000, "float32(-0.0) is +0 in Go; checked below"},
	}
	for _, c := range half {
		assert.Equal(t, c.want, Float32ToHalf(c.in), "half(%g): %s", c.in, c.why)
	}
	assert.Equal(t, uint16(0x8000), Float32ToHalf(float32(math.Copysign(0, -1))), "-0 keeps its sign")
	assert.Equal(t, uint16(0x8000), Float32ToHalf(-ldexp(1, -26)), "a negative underflow is -0")

	bf := []struct {
		in   float32
		want uint16
		why  string
	}{
		{1, 0x3f80, "exact"},
		{ldexp(1+1.0/256, 0), 0x3f80, "1+2^-8 ties to the even 1.0"},
		{ldexp(1+3.0/256, 0), 0x3f82, "1+3·2^-8 ties to the even 0x3f82"},
		{math.MaxFloat32, 0x7f80, "float32 max is above bf16 max + ulp/2: Inf"},
		{math.SmallestNonzeroFloat32, 0x0000, "2^-149 is below half of bf16's smallest subnormal 2^-133"},
	}
	for _, c := range bf {
		assert.Equal(t, c.want, Float32ToBFloat16(c.in), "bf16(%g): %s", c.in, c.why)
	}

	e4m3 := []struct {
		in   float32
		want uint8
		why  string
	}{
		{448, 0x7e, "largest finite"},
		{464, 0x7e, "448 + ulp/2: ties to 0x7e (0x7f would be NaN)"},
		{480, 0x7e, "SATFINITE: beyond the max saturates"},
		{1e6, 0x7e, "SATFINITE"},
		{float32(math.Inf(1)), 0x7e, "SATFINITE: +Inf saturates"},
		{float32(math.Inf(-1)), 0xfe, "SATFINITE: -Inf saturates to -448"},
		{17, 0x58, "16+1 ties between 16 (0x58) and 18 (0x59): even is 16"},
		{ldexp(1, -9), 0x01, "smallest subnormal"},
		{ldexp(1, -10), 0x00, "half the smallest subnormal ties to 0"},
		{ldexp(3, -10), 0x02, "1.5·2^-9 ties to the even 2·2^-9"},
		{ldexp(1, -6), 0x08, "smallest normal"},
	}
	for _, c := range e4m3 {
		assert.Equal(t, c.want, Float32ToE4M3(c.in), "e4m3(%g): %s", c.in, c.why)
	}

	e5m2 := []struct {
		in   float32
		want uint8
		why  string
	}{
		{57344, 0x7b, "largest finite"},
		{61440, 0x7b, "max + ulp/2 would round to Inf; SATFINITE keeps the max"},
		{float32(math.Inf(1)), 0x7b, "SATFINITE: +Inf saturates"},
		{1.125, 0x3c, "1.125 ties between 1 (0x3c) and 1.25 (0x3d): even is 1"},
		{1.375, 0x3e, "1.375 ties between 1.25 and 1.5 (0x3e): even is 1.5"},
		{ldexp(1, -16), 0x01, "smallest subnormal"},
		{ldexp(1, -17), 0x00, "ties to 0"},
	}
	for _, c := range e5m2 {
		assert.Equal(t, c.want, Float32ToE5M2(c.in), "e5m2(%g): %s", c.in, c.why)
	}
	assert.True(t, math.IsInf(float64(E5M2ToFloat32(0x7c)), 1), "0x7c is +Inf")
	assert.True(t, math.IsNaN(float64(E4M3ToFloat32(0xff))), "0xff is NaN")
	assert.Equal(t, float32(-448), E4M3ToFloat32(0xfe))
}

// TestHalfArithmeticRoundsOnce checks the claim that computing in float32 and
// rounding once gives the correctly rounded float16/bfloat16 sum and product
// (what __hadd/__hmul return): float32 carries at least 2p+2 bits, so the
// double rounding is harmless. The reference rounds the exact float64 result.
func TestHalfArithmeticRoundsOnce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range codecs[:2] {
		s := c.ref.spec
		t.Run(s.name, func(t *testing.T) {
			bad := 0
			for range 200000 {
				p, q := rng.Uint32N(1<<s.nbits), rng.Uint32N(1<<s.nbits)
				x, y := s.decode(p), s.decode(q)
				if math.IsNaN(x) || math.IsNaN(y) || math.IsInf(x, 0) || math.IsInf(y, 0) {
					continue
				}
				fx, fy := c.dec(p), c.dec(q)
				for _, k := range []struct {
					op        string
					got, want uint32
				}{
					{"+", c.enc(fx + fy), c.ref.encode(x + y)},
					{"*", c.enc(fx * fy), c.ref.encode(x * y)},
				} {
					if k.got != k.want && !(s.isNaN(k.got) && s.isNaN(k.want)) && bad < 5 {
						bad++
						assert.Failf(t, "arith", "%#x %s %#x: got %#x, want %#x", p, k.op, q, k.got, k.want)
					}
				}
			}
		})
	}
}

// TestFP8TablesMatchHalfPath checks, for every pair of fp8 patterns, that the
// tables (float32 arithmetic, one rounding to fp8) equal NCCL's sm_90 path:
// the exact result rounded to half (__hadd/__hmul/__hmin/__hmax), then
// converted to fp8 with SATFINITE.
func TestFP8TablesMatchHalfPath(t *testing.T) {
	for _, f := range []struct {
		ref *refTable
		tab *fp8Tables
	}{{refE4M3, e4m3Tables()}, {refE5M2, e5m2Tables()}} {
		s := f.ref.spec
		t.Run(s.name, func(t *testing.T) {
			viaHalf := func(v float64) uint32 {
				h := refHalf.encode(v) // __hadd / __hmul result (may be Inf)
				return f.ref.encode(specHalf.decode(h))
			}
			bad := 0
			check := func(op string, p, q uint32, got byte, want uint32) {
				if uint32(got) != want && bad < 5 {
					bad++
					assert.Failf(t, "fp8 "+op, "%#x %s %#x: got %#x, want %#x", p, op, q, got, want)
				}
			}
			for i := range uint32(65536) {
				p, q := i>>8, i&0xff
				x, y := s.decode(p), s.decode(q)
				if math.IsNaN(x) || math.IsNaN(y) {
					assert.Equal(t, uint32(0x7f), uint32(f.tab.sum[i]), "NaN in, canonical NaN out")
					continue
				}
				check("+", p, q, f.tab.sum[i], viaHalf(x+y)) // x+y and x*y are exact in float64
				check("*", p, q, f.tab.prod[i], viaHalf(x*y))
				lo, hi := x, y
				if y < x || y == x && math.Signbit(y) {
					lo, hi = y, x
				}
				check("min", p, q, f.tab.min[i], viaHalf(lo))
				check("max", p, q, f.tab.max[i], viaHalf(hi))
			}
		})
	}
}

func ExampleFloat32ToE4M3() {
	for _, f := range []float32{1.0, 17, 464, 1e9, float32(math.NaN())} {
		b := Float32ToE4M3(f)
		fmt.Printf("%g -> %#02x (%g)\n", f, b, E4M3ToFloat32(b))
	}
	// Output:
	// 1 -> 0x38 (1)
	// 17 -> 0x58 (16)
	// 464 -> 0x7e (448)
	// 1e+09 -> 0x7e (448)
	// NaN -> 0x7f (NaN)
}
