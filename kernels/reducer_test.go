package kernels

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var allDtypes = []Dtype{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16, Fp8E4M3, Fp8E5M2}

var allOps = []Op{Sum, Prod, Max, Min, Avg, PreMulSum}

// narrowSpec returns the reference format of a narrow float type.
func narrowSpec(dt Dtype) (*refTable, bool) {
	switch dt {
	case Float16:
		return refHalf, true
	case Bfloat16:
		return refBF16, true
	case Fp8E4M3:
		return refE4M3, true
	case Fp8E5M2:
		return refE5M2, true
	}
	return nil, false
}

// decodeF returns element i of a float buffer, decoded by the test's own
// reference (not the package's conversions).
func decodeF(dt Dtype, b []byte, i int) float64 {
	sz := dt.Size()
	e := b[i*sz : (i+1)*sz]
	switch dt {
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(e)))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(e))
	case Float16, Bfloat16:
		r, _ := narrowSpec(dt)
		return r.spec.decode(uint32(binary.LittleEndian.Uint16(e)))
	default:
		r, _ := narrowSpec(dt)
		return r.spec.decode(uint32(e[0]))
	}
}

// decodeI returns element i of an integer buffer as an exact integer.
func decodeI(dt Dtype, b []byte, i int) *big.Int {
	sz := dt.Size()
	var u uint64
	for k := sz - 1; k >= 0; k-- {
		u = u<<8 | uint64(b[i*sz+k])
	}
	v := new(big.Int).SetUint64(u)
	if dt.IsSigned() && u>>(8*sz-1)&1 == 1 {
		v.Sub(v, new(big.Int).Lsh(big.NewInt(1), uint(8*sz)))
	}
	return v
}

// wrap reduces v modulo 2^bits into the range of dt.
func wrap(dt Dtype, v *big.Int) *big.Int {
	bits := uint(8 * dt.Size())
	mod := new(big.Int).Lsh(big.NewInt(1), bits)
	m := new(big.Int).Mod(v, mod) // Euclidean: 0 <= m < 2^bits
	if dt.IsSigned() && m.Cmp(new(big.Int).Rsh(mod, 1)) >= 0 {
		m.Sub(m, mod)
	}
	return m
}

// valueClass says what random floats a test case needs.
type valueClass int

const (
	classSum    valueClass = iota // |x| <= a bound that keeps 9-rank sums finite
	classProd                     // 0.75 <= |x| <= 1.5, so 9-rank products stay normal
	classAny                      // any finite value (Min/Max)
	classScalar                   // 0.25 <= |x| <= 1 (PreMulSum scalar)
)

var sumBound = map[Dtype]float64{Float16: 1000, Bfloat16: 1e6, Float32: 1e6, Float64: 1e6, Fp8E4M3: 32, Fp8E5M2: 4096}

func inClass(dt Dtype, c valueClass, v float64) bool {
	a := math.Abs(v)
	switch c {
	case classSum:
		return a <= sumBound[dt]
	case classProd:
		return a >= 0.75 && a <= 1.5
	case classScalar:
		return a >= 0.25 && a <= 1
	}
	return !math.IsNaN(v) && !math.IsInf(v, 0)
}

// randElem writes one random element of dt into e. Narrow floats draw random
// patterns until one fits the class (log-uniform, subnormals included);
// integers are uniform over all patterns.
func randElem(rng *rand.Rand, dt Dtype, c valueClass, e []byte) {
	if !dt.IsFloat() {
		var buf [8]byte
		binary.LittleEndian.PutUint64(buf[:], rng.Uint64())
		copy(e, buf[:dt.Size()])
		return
	}
	if r, ok := narrowSpec(dt); ok {
		for {
			p := rng.Uint32N(1 << r.spec.nbits)
			v := r.spec.decode(p)
			if !math.IsNaN(v) && !math.IsInf(v, 0) && inClass(dt, c, v) {
				if dt.Size() == 2 {
					binary.LittleEndian.PutUint16(e, uint16(p))
				} else {
					e[0] = byte(p)
				}
				return
			}
		}
	}
	var v float64
	switch c {
	case classSum:
		v = (2*rng.Float64() - 1) * sumBound[dt] * math.Pow(2, -float64(rng.IntN(40)))
	case classProd:
		v = 0.75 + 0.75*rng.Float64()
	case classScalar:
		v = 0.25 + 0.75*rng.Float64()
	default:
		v = math.Ldexp(rng.Float64(), rng.IntN(200)-100)
	}
	if rng.IntN(2) == 0 {
		v = -v
	}
	if rng.IntN(20) == 0 {
		v = math.Copysign(0, v)
	}
	if dt == Float32 {
		binary.LittleEndian.PutUint32(e, math.Float32bits(float32(v)))
	} else {
		binary.LittleEndian.PutUint64(e, math.Float64bits(v))
	}
}

func epsOf(dt Dtype) (eps, minSub float64) {
	switch dt {
	case Float32:
		return math.Ldexp(1, -23), math.Ldexp(1, -149)
	case Float64:
		return math.Ldexp(1, -52), math.Ldexp(1, -1074)
	}
	r, _ := narrowSpec(dt)
	return r.spec.eps()
}

// reduceNCCL runs a reduction the way NCCL's ring does it on one chunk: the
// first rank's input is loaded, every later input is reduced into the
// accumulator, and the result is finished once.
func reduceNCCL(r Reducer, inputs [][]byte) []byte {
	acc := make([]byte, len(inputs[0]))
	r.Load(acc, inputs[0])
	for _, in := range inputs[1:] {
		r.Reduce(acc, acc, in)
	}
	r.Finish(acc)
	return acc
}

// TestReduceOracle reduces random inputs for every dtype × op × nRanks 1..9
// and compares with an oracle that shares no code with the package: exact
// integers with explicit wrapping, float64 arithmetic for floats within
// (n+1)·eps·Σ|term| + (n+1)·(smallest subnormal) (the extra term covers the
// pre-multiplication's rounding and underflow), and exact Min/Max.
func TestReduceOracle(t *testing.T) {
	const nElems = 67
	rng := rand.New(rand.NewPCG(5, 6))
	for _, dt := range allDtypes {
		for _, op := range allOps {
			for n := 1; n <= 9; n++ {
				t.Run(fmt.Sprintf("%v/%v/n=%d", dt, op, n), func(t *testing.T) {
					sz := dt.Size()
					class := classSum
					switch op {
					case Prod:
						class = classProd
					case Min, Max:
						class = classAny
					}
					var scalar []byte
					if op == PreMulSum {
						scalar = make([]byte, sz)
						randElem(rng, dt, classScalar, scalar)
					}
					r, err := NewReducer(dt, op, n, scalar)
					require.NoError(t, err)
					inputs := make([][]byte, n)
					for k := range inputs {
						inputs[k] = make([]byte, nElems*sz)
						for i := range nElems {
							randElem(rng, dt, class, inputs[k][i*sz:])
						}
					}
					got := reduceNCCL(r, inputs)
					for i := range nElems {
						if dt.IsFloat() {
							checkFloat(t, dt, op, scalar, inputs, got, i)
						} else {
							checkInt(t, dt, op, scalar, inputs, got, i)
						}
					}
				})
			}
		}
	}
}

func checkInt(t *testing.T, dt Dtype, op Op, scalar []byte, inputs [][]byte, got []byte, i int) {
	n := len(inputs)
	xs := make([]*big.Int, n)
	for k := range inputs {
		xs[k] = decodeI(dt, inputs[k], i)
	}
	want := new(big.Int).Set(xs[0])
	switch op {
	case Sum:
		for _, x := range xs[1:] {
			want.Add(want, x)
		}
		want = wrap(dt, want)
	case Prod:
		for _, x := range xs[1:] {
			want.Mul(want, x)
		}
		want = wrap(dt, want)
	case Min, Max:
		for _, x := range xs[1:] {
			if c := x.Cmp(want); c < 0 && op == Min || c > 0 && op == Max {
				want.Set(x)
			}
		}
	case Avg: // wrapping sum, then one division truncating toward zero
		for _, x := range xs[1:] {
			want.Add(want, x)
		}
		want = new(big.Int).Quo(wrap(dt, want), big.NewInt(int64(n)))
	case PreMulSum:
		s := decodeI(dt, scalar, 0)
		want.SetInt64(0)
		for _, x := range xs {
			want.Add(want, new(big.Int).Mul(x, s))
		}
		want = wrap(dt, want)
	}
	g := decodeI(dt, got, i)
	assert.Zero(t, g.Cmp(want), "element %d: got %v, want %v (inputs %v)", i, g, want, xs)
}

func checkFloat(t *testing.T, dt Dtype, op Op, scalar []byte, inputs [][]byte, got []byte, i int) {
	n := len(inputs)
	eps, minSub := epsOf(dt)
	xs := make([]float64, n)
	for k := range inputs {
		xs[k] = decodeF(dt, inputs[k], i)
	}
	g := decodeF(dt, got, i)
	switch op {
	case Min, Max: // exact; -0 orders below +0
		want := xs[0]
		for _, x := range xs[1:] {
			less := x < want || x == want && math.Signbit(x)
			if less == (op == Min) && x != want || x == want && less == (op == Min) {
				want = x
			}
		}
		assert.True(t, g == want && math.Signbit(g) == math.Signbit(want),
			"element %d: got %v, want %v (inputs %v)", i, g, want, xs)
		return
	case Prod:
		want := 1.0
		for _, x := range xs {
			want *= x
		}
		tol := float64(n+1)*eps*math.Abs(want) + minSub
		assert.InDelta(t, want, g, tol, "element %d: inputs %v", i, xs)
		return
	}
	w := 1.0 // the weight of each term: Σ x_i·w
	switch op {
	case Avg:
		w = 1 / float64(n)
	case PreMulSum:
		w = decodeF(dt, scalar, 0)
	}
	var want, abs float64
	for _, x := range xs {
		want += x * w
		abs += math.Abs(x * w)
	}
	tol := float64(n+1)*eps*abs + float64(n+1)*minSub
	assert.InDelta(t, want, g, tol, "element %d: inputs %v, weight %v", i, xs, w)
}

// TestNarrowFloatsRoundPerOperation replays NCCL's arithmetic with the test's
// reference rounding (exact float64 operation, nearest-value rounding) and
// requires bit-identical results for float16, bfloat16 and fp8: the product
// by the scalar and every addition are each rounded to the element type.
func TestNarrowFloatsRoundPerOperation(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, dt := range []Dtype{Float16, Bfloat16, Fp8E4M3, Fp8E5M2} {
		ref, _ := narrowSpec(dt)
		sz := dt.Size()
		rnd := func(v float64) float64 { return ref.spec.decode(ref.encode(v)) }
		for _, op := range []Op{Sum, Prod, Avg, PreMulSum} {
			for n := 1; n <= 9; n++ {
				t.Run(fmt.Sprintf("%v/%v/n=%d", dt, op, n), func(t *testing.T) {
					class := classSum
					if op == Prod {
						class = classProd
					}
					var scalar []byte
					if op == PreMulSum {
						scalar = make([]byte, sz)
						randElem(rng, dt, classScalar, scalar)
					}
					r, err := NewReducer(dt, op, n, scalar)
					require.NoError(t, err)
					s := 1.0
					switch op {
					case Avg: // float(1.0/n) rounded to the element type
						s = rnd(float64(float32(1.0 / float64(n))))
					case PreMulSum:
						s = decodeF(dt, scalar, 0)
					}
					pre := func(x float64) float64 {
						if op == Avg || op == PreMulSum {
							return rnd(x * s)
						}
						return x
					}
					const nElems = 64
					inputs := make([][]byte, n)
					for k := range inputs {
						inputs[k] = make([]byte, nElems*sz)
						for i := range nElems {
							randElem(rng, dt, class, inputs[k][i*sz:])
						}
					}
					got := reduceNCCL(r, inputs)
					for i := range nElems {
						acc := pre(decodeF(dt, inputs[0], i))
						for _, in := range inputs[1:] {
							x := pre(decodeF(dt, in, i))
							if op == Prod {
								acc = rnd(acc * x)
							} else {
								acc = rnd(acc + x)
							}
						}
						g := decodeF(dt, got, i)
						assert.True(t, g == acc && math.Signbit(g) == math.Signbit(acc),
							"element %d: got %v, want %v", i, g, acc)
					}
				})
			}
		}
	}
}

// bytesOf packs values of one dtype into a little-endian buffer.
func bytesOf(dt Dtype, vals ...float64) []byte {
	b := make([]byte, len(vals)*dt.Size())
	for i, v := range vals {
		SetValue(dt, b[i*dt.Size():], v)
	}
	return b
}

func u16s(vals ...uint16) []byte {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], v)
	}
	return b
}

// TestDecisiveCases pins results derived by hand; each one tells NCCL's
// semantics apart from a plausible alternative.
func TestDecisiveCases(t *testing.T) {
	reduce := func(t *testing.T, dt Dtype, op Op, scalar []byte, inputs ...[]byte) []byte {
		r, err := NewReducer(dt, op, len(inputs), scalar)
		require.NoError(t, err)
		return reduceNCCL(r, inputs)
	}
	t.Run("float16 avg premultiplies", func(t *testing.T) {
		// 60000 = 1875·2^5 is a half (0x7b53). The scalar is half(0.5), so
		// each term is 30000 (exact) and the sum 60000 (exact). Summing first
		// would overflow: 120000 > 65504 gives +Inf.
		x := u16s(0x7b53)
		assert.Equal(t, u16s(0x7b53), reduce(t, Float16, Avg, nil, x, x))
		assert.Equal(t, u16s(0x7c00), reduce(t, Float16, Sum, nil, x, x), "the sum alone overflows")
	})
	t.Run("int32 avg truncates toward zero", func(t *testing.T) {
		// (-3 + 0)/2 = -1.5: truncation gives -1, floor would give -2.
		assert.Equal(t, bytesOf(Int32, -1), reduce(t, Int32, Avg, nil, bytesOf(Int32, -3), bytesOf(Int32, 0)))
		assert.Equal(t, bytesOf(Int32, 1), reduce(t, Int32, Avg, nil, bytesOf(Int32, 3), bytesOf(Int32, 0)))
	})
	t.Run("int8 sum wraps", func(t *testing.T) {
		// 100 + 100 = 200 = 256 - 56.
		assert.Equal(t, []byte{0xc8}, reduce(t, Int8, Sum, nil, []byte{100}, []byte{100}))
		assert.Equal(t, bytesOf(Int8, -56), reduce(t, Int8, Sum, nil, []byte{100}, []byte{100}))
	})
	t.Run("uint8 avg sums with wrap then divides", func(t *testing.T) {
		// 255+255+1 = 511 ≡ 255 (mod 256); 255/3 = 85. The true mean is 170.
		assert.Equal(t, []byte{85}, reduce(t, Uint8, Avg, nil, []byte{255}, []byte{255}, []byte{1}))
		// 7+8 = 15; 15/2 = 7 (truncated).
		assert.Equal(t, []byte{7}, reduce(t, Uint8, Avg, nil, []byte{7}, []byte{8}))
	})
	t.Run("int8 avg divisor beyond int8", func(t *testing.T) {
		r, err := NewReducer(Int8, Avg, 200, nil)
		require.NoError(t, err)
		b := bytesOf(Int8, -128, 127, -100)
		r.Finish(b) // -128/200, 127/200 and -100/200 all truncate to 0
		assert.Equal(t, []byte{0, 0, 0}, b)
		r, err = NewReducer(Int8, Avg, 128, nil)
		require.NoError(t, err)
		b = bytesOf(Int8, -128, 127)
		r.Finish(b) // -128/128 = -1, 127/128 = 0
		assert.Equal(t, bytesOf(Int8, -1, 0), b)
	})
	t.Run("int64 min max with negatives", func(t *testing.T) {
		i64 := func(vals ...int64) []byte {
			b := make([]byte, 8*len(vals))
			for i, v := range vals {
				binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
			}
			return b
		}
		in := [][]byte{i64(-5, 7), i64(3, -1), i64(math.MinInt64, 0), i64(-1, math.MaxInt64)}
		want := i64
		assert.Equal(t, want(math.MinInt64, -1), reduce(t, Int64, Min, nil, in...))
		assert.Equal(t, want(3, math.MaxInt64), reduce(t, Int64, Max, nil, in...))
		// The same bits read as uint64: -1 (2^64-1) is the largest, 0 the smallest.
		assert.Equal(t, want(-1, -1), reduce(t, Uint64, Max, nil, in...))
		assert.Equal(t, want(3, 0), reduce(t, Uint64, Min, nil, in...))
	})
	t.Run("fp8e4m3 sum saturates", func(t *testing.T) {
		// 448+448 = 896 and 240+240 = 480 exceed the max 448: SATFINITE gives
		// 0x7e (448), not the NaN 0x7f. -448 + -32 gives 0xfe (-448).
		got := reduce(t, Fp8E4M3, Sum, nil, []byte{0x7e, 0x77, 0xfe}, []byte{0x7e, 0x77, 0xd8})
		assert.Equal(t, []byte{0x7e, 0x7e, 0xfe}, got)
		// e5m2: 57344+57344 saturates to 0x7b; Inf is an input too: Inf+1 → max.
		got = reduce(t, Fp8E5M2, Sum, nil, []byte{0x7b, 0x7c}, []byte{0x7b, 0x3c})
		assert.Equal(t, []byte{0x7b, 0x7b}, got)
	})
	t.Run("bf16 premulsum rounds each step", func(t *testing.T) {
		// scalar 0.5 (0x3f00); inputs 256 (0x4380), 1, 1. Terms: 128, 0.5, 0.5.
		// bf16 has 8 significant bits, so near 128 the step is 1:
		// 128 + 0.5 ties to the even 128, twice: the result is 128 (0x4300),
		// where exact arithmetic rounded once would give 129 (0x4301).
		got := reduce(t, Bfloat16, PreMulSum, u16s(0x3f00), u16s(0x4380), u16s(0x3f80), u16s(0x3f80))
		assert.Equal(t, u16s(0x4300), got)
		// Load alone pre-multiplies: 3 (0x4040) · 0.5 = 1.5 (0x3fc0).
		assert.Equal(t, u16s(0x3fc0), reduce(t, Bfloat16, PreMulSum, u16s(0x3f00), u16s(0x4040)))
	})
	t.Run("float32 avg is a sum of premultiplied terms", func(t *testing.T) {
		// n = 3, s = float(1/3) = 0x3eaaaaab = 11184811·2^-25. For x = 7:
		// 7s = 9786709.625·2^-22 rounds to 9786710·2^-22 (ulp 2^-22 in [2,4));
		// doubling is exact: 9786710·2^-21; adding 9786710·2^-22 gives
		// 14680065·2^-21 = 7 + 2^-21 exactly (ulp 2^-21 in [4,8)).
		// Σx/n would give 7 (0x40e00000); NCCL's order gives 0x40e00001.
		b := bytesOf(Float32, 7)
		got := reduce(t, Float32, Avg, nil, b, b, b)
		assert.Equal(t, uint32(0x40e00001), binary.LittleEndian.Uint32(got))
	})
}

// TestMinMaxSpecialValues pins the NaN and signed-zero rule for every float
// type: a NaN operand is ignored, two NaNs give the canonical NaN, -0 < +0.
func TestMinMaxSpecialValues(t *testing.T) {
	type pats struct {
		nan, otherNaN, one, posZero, negZero, canon uint64
	}
	cases := map[Dtype]pats{
		Float16:  {0x7e00, 0xfc01, 0x3c00, 0x0000, 0x8000, 0x7fff},
		Bfloat16: {0x7fc0, 0xff81, 0x3f80, 0x0000, 0x8000, 0x7fff},
		Float32:  {0x7fc00000, 0xff800001, 0x3f800000, 0, 0x80000000, 0x7fffffff},
		Float64:  {0x7ff8000000000000, 0xfff0000000000001, 0x3ff0000000000000, 0, 1 << 63, 0x7fffffffffffffff},
		Fp8E4M3:  {0x7f, 0xff, 0x38, 0x00, 0x80, 0x7f},
		Fp8E5M2:  {0x7e, 0xfd, 0x3c, 0x00, 0x80, 0x7f},
	}
	for dt, p := range cases {
		sz := dt.Size()
		enc := func(v uint64) []byte {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], v)
			return b[:sz]
		}
		for _, c := range []struct {
			op         Op
			a, b, want uint64
		}{
			{Min, p.nan, p.one, p.one}, {Min, p.one, p.nan, p.one},
			{Max, p.nan, p.one, p.one}, {Max, p.one, p.nan, p.one},
			{Min, p.nan, p.otherNaN, p.canon}, {Max, p.otherNaN, p.nan, p.canon},
			{Min, p.posZero, p.negZero, p.negZero}, {Min, p.negZero, p.posZero, p.negZero},
			{Max, p.posZero, p.negZero, p.posZero}, {Max, p.negZero, p.posZero, p.posZero},
		} {
			r, err := NewReducer(dt, c.op, 2, nil)
			require.NoError(t, err)
			got := make([]byte, sz)
			r.Reduce(got, enc(c.a), enc(c.b))
			assert.Equal(t, enc(c.want), got, "%v %v(%#x, %#x)", dt, c.op, c.a, c.b)
		}
	}
	// fp8 results are converted back with SATFINITE, as __nv_fp8_e5m2(__hmax(...))
	// does, so even Max(Inf, 1) on e5m2 is the largest finite value.
	r, err := NewReducer(Fp8E5M2, Max, 2, nil)
	require.NoError(t, err)
	got := []byte{0}
	r.Reduce(got, []byte{0x7c}, []byte{0x3c})
	assert.Equal(t, []byte{0x7b}, got)
	r, err = NewReducer(Float16, Max, 2, nil)
	require.NoError(t, err)
	got16 := make([]byte, 2)
	r.Reduce(got16, u16s(0x7c00), u16s(0x3c00))
	assert.Equal(t, u16s(0x7c00), got16, "float16 keeps Inf")
}

// TestLowering checks the device operator and NCCL's scalar argument.
func TestLowering(t *testing.T) {
	cases := []struct {
		dt     Dtype
		op     Op
		n      int
		scalar []byte
		dev    DevOp
		arg    uint64
	}{
		{Float32, Sum, 4, nil, DevSum, 0},
		{Int8, Prod, 4, nil, DevProd, 0},
		{Int8, Min, 4, nil, DevMinMax, 0x80}, // sign bit
		{Int8, Max, 4, nil, DevMinMax, 0x7f}, // sign bit ^ all bits
		{Uint32, Min, 4, nil, DevMinMax, 0},  // unsigned min: no mask
		{Uint32, Max, 4, nil, DevMinMax, 0xffffffff},
		{Int64, Max, 4, nil, DevMinMax, 0x7fffffffffffffff},
		{Float16, Max, 4, nil, DevMinMax, 0xffff}, // floats read bit 0: max
		{Int32, Avg, 6, nil, DevSumPostDiv, 6<<1 | 1},
		{Uint64, Avg, 6, nil, DevSumPostDiv, 6 << 1},
		{Float32, Avg, 4, nil, DevPreMulSum, uint64(math.Float32bits(0.25))},
		{Float32, Avg, 3, nil, DevPreMulSum, 0x3eaaaaab}, // float(1.0/3)
		{Float64, Avg, 3, nil, DevPreMulSum, math.Float64bits(1.0 / 3)},
		{Float16, Avg, 3, nil, DevPreMulSum, 0x3555},  // half(0.33333334): 0x3555 = 0.333251953
		{Bfloat16, Avg, 3, nil, DevPreMulSum, 0x3eab}, // bf16(0x3eaaaaab) rounds up
		{Fp8E4M3, Avg, 3, nil, DevPreMulSum, 0x2b},    // 1/3 ≈ 1.333·2^-2: 1.375·2^-2 (e=5, m=3)
		{Fp8E5M2, Avg, 3, nil, DevPreMulSum, 0x35},    // 1.333·2^-2 → 1.25·2^-2 (e=13, m=1)
		{Fp8E4M3, Avg, 1024, nil, DevPreMulSum, 0x00}, // 2^-10 ties to 0: NCCL's avg is then 0
		{Int32, PreMulSum, 2, []byte{3, 0, 0, 0}, DevPreMulSum, 3},
		{Bfloat16, PreMulSum, 2, []byte{0x00, 0x3f}, DevPreMulSum, 0x3f00},
	}
	for _, c := range cases {
		r, err := NewReducer(c.dt, c.op, c.n, c.scalar)
		require.NoError(t, err, "%v %v", c.dt, c.op)
		assert.Equal(t, c.dev, r.DevOp(), "%v %v", c.dt, c.op)
		assert.Equal(t, c.arg, r.Arg(), "%v %v n=%d: arg %#x", c.dt, c.op, c.n, r.Arg())
		assert.Equal(t, c.dt, r.Dtype())
		assert.Equal(t, c.op, r.Op())
		assert.Equal(t, c.n, r.NRanks())
		assert.Equal(t, c.dt.Size(), r.ElemSize())
	}
}

func TestNewReducerErrors(t *testing.T) {
	cases := []struct {
		dt     Dtype
		op     Op
		n      int
		scalar []byte
		want   error
	}{
		{Dtype(12), Sum, 2, nil, ErrDtype},
		{Dtype(-1), Sum, 2, nil, ErrDtype},
		{Float32, Op(6), 2, nil, ErrOp},
		{Float32, Sum, 0, nil, ErrRanks},
		{Float32, PreMulSum, 2, nil, ErrScalar},
		{Float32, PreMulSum, 2, []byte{1, 2}, ErrScalar},
		{Float32, Sum, 2, []byte{0, 0, 0, 0}, ErrScalar},
	}
	for _, c := range cases {
		_, err := NewReducer(c.dt, c.op, c.n, c.scalar)
		assert.ErrorIs(t, err, c.want, "%v %v n=%d scalar %v", c.dt, c.op, c.n, c.scalar)
	}
}

// TestUnalignedMatchesAligned runs every dtype × op on operands offset by one
// byte (the encoding/binary fallback) and on aligned operands, and requires
// identical bytes, for lengths that cross the fallback's block size.
func TestUnalignedMatchesAligned(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, dt := range allDtypes {
		for _, op := range allOps {
			sz := dt.Size()
			var scalar []byte
			if op == PreMulSum {
				scalar = make([]byte, sz)
				randElem(rng, dt, classScalar, scalar)
			}
			r, err := NewReducer(dt, op, 3, scalar)
			require.NoError(t, err)
			nElems := 3*bounceBytes/sz + 5
			aligned := make([][]byte, 3)
			shifted := make([][]byte, 3)
			for k := range aligned {
				aligned[k] = make([]byte, nElems*sz)
				for i := range nElems {
					randElem(rng, dt, classSum, aligned[k][i*sz:])
				}
				buf := make([]byte, nElems*sz+1)
				shifted[k] = buf[1:]
				copy(shifted[k], aligned[k])
			}
			want := reduceNCCL(r, aligned)
			// The accumulator is shifted too, and Reduce writes to a third buffer.
			accBuf := make([]byte, nElems*sz+1)
			acc := accBuf[1:]
			r.Load(acc, shifted[0])
			out := make([]byte, nElems*sz+3)[3:]
			r.Reduce(out, acc, shifted[1])
			r.Reduce(acc, out, shifted[2])
			r.Finish(acc)
			assert.Equal(t, want, acc, "%v %v", dt, op)
		}
	}
}

// TestByteOrderPath forces the path a big-endian host takes (every operand
// moved through encoding/binary) and requires the same bytes as the direct
// path. On a little-endian host binary.NativeEndian is little-endian, so the
// forced path must be a faithful copy.
func TestByteOrderPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, dt := range allDtypes {
		for _, op := range allOps {
			sz := dt.Size()
			var scalar []byte
			if op == PreMulSum {
				scalar = make([]byte, sz)
				randElem(rng, dt, classScalar, scalar)
			}
			r, err := NewReducer(dt, op, 2, scalar)
			require.NoError(t, err)
			nElems := bounceBytes/sz + 3
			in := [][]byte{make([]byte, nElems*sz), make([]byte, nElems*sz)}
			for k := range in {
				for i := range nElems {
					randElem(rng, dt, classSum, in[k][i*sz:])
				}
			}
			want := reduceNCCL(r, in)
			saved := littleEndian
			littleEndian = false
			got := reduceNCCL(r, in)
			littleEndian = saved
			assert.Equal(t, want, got, "%v %v", dt, op)
		}
	}
}

// TestConcurrentUse shares one Reducer between goroutines (run with -race).
func TestConcurrentUse(t *testing.T) {
	r, err := NewReducer(Float16, Avg, 4, nil)
	require.NoError(t, err)
	want := reduceNCCL(r, [][]byte{bytesOf(Float16, 1, 2), bytesOf(Float16, 3, 4)})
	done := make(chan []byte)
	for range 8 {
		go func() {
			done <- reduceNCCL(r, [][]byte{bytesOf(Float16, 1, 2), bytesOf(Float16, 3, 4)})
		}()
	}
	for range 8 {
		assert.Equal(t, want, <-done)
	}
	assert.Equal(t, bytesOf(Float16, 1, 1.5), want, "(1+3)/4, (2+4)/4")
}

// TestAliasing: dst may be either input of Reduce, or the source of Load.
func TestAliasing(t *testing.T) {
	r, err := NewReducer(Float32, PreMulSum, 2, bytesOf(Float32, 2))
	require.NoError(t, err)
	a, b := bytesOf(Float32, 1, 2), bytesOf(Float32, 10, 20)
	r.Reduce(b, a, b) // b = a + 2b
	assert.Equal(t, bytesOf(Float32, 21, 42), b)
	r.Load(a, a) // a = 2a
	assert.Equal(t, bytesOf(Float32, 2, 4), a)
}

func TestLengthMismatchPanics(t *testing.T) {
	r, err := NewReducer(Int32, Avg, 2, nil)
	require.NoError(t, err)
	p, err := NewReducer(Int32, PreMulSum, 2, []byte{1, 0, 0, 0})
	require.NoError(t, err)
	assert.PanicsWithValue(t, errLengths, func() { r.Reduce(make([]byte, 8), make([]byte, 8), make([]byte, 4)) })
	assert.PanicsWithValue(t, errLengths, func() { r.Reduce(make([]byte, 6), make([]byte, 6), make([]byte, 6)) })
	assert.PanicsWithValue(t, errLengths, func() { r.Load(make([]byte, 8), make([]byte, 4)) })
	assert.PanicsWithValue(t, errLengths, func() { p.Load(make([]byte, 8), make([]byte, 4)) })
	assert.PanicsWithValue(t, errLengths, func() { r.Copy(make([]byte, 3), make([]byte, 3)) })
	assert.PanicsWithValue(t, errLengths, func() { r.Finish(make([]byte, 5)) })
	assert.NotPanics(t, func() { r.Reduce(nil, nil, nil) })
}

// TestNoAllocs: the primitives never allocate, aligned or not.
func TestNoAllocs(t *testing.T) {
	for _, dt := range allDtypes {
		for _, op := range allOps {
			sz := dt.Size()
			var scalar []byte
			if op == PreMulSum {
				scalar = bytesOf(dt, 1)
			}
			r, err := NewReducer(dt, op, 4, scalar)
			require.NoError(t, err)
			buf := make([]byte, 4096*sz+1)
			for _, off := range []int{0, 1} {
				d, a, b := buf[off:off+1024*sz], buf[1024*sz+1:2048*sz+1], buf[2048*sz:3072*sz]
				allocs := testing.AllocsPerRun(10, func() {
					r.Load(d, a)
					r.Reduce(d, d, b)
					r.Finish(d)
					r.Copy(a, d)
				})
				assert.Zero(t, allocs, "%v %v offset %d", dt, op, off)
			}
		}
	}
}

func TestValueRoundTrip(t *testing.T) {
	for _, dt := range allDtypes {
		b := make([]byte, dt.Size())
		for _, v := range []float64{0, 1, -1, 2.5, 96} { // exact in every type
			if !dt.IsSigned() && !dt.IsFloat() && v < 0 {
				continue
			}
			want := v
			if !dt.IsFloat() {
				want = math.Trunc(v)
			}
			SetValue(dt, b, v)
			assert.Equal(t, want, Value(dt, b), "%v %v", dt, v)
		}
	}
	assert.Panics(t, func() { Value(Dtype(99), []byte{0}) })
	assert.Panics(t, func() { SetValue(Dtype(99), []byte{0}, 1) })
}

func TestNames(t *testing.T) {
	assert.Equal(t, "bfloat16", Bfloat16.String())
	assert.Equal(t, "fp8e5m2", Fp8E5M2.String())
	assert.Equal(t, "Dtype(12)", Dtype(12).String())
	assert.Equal(t, 0, Dtype(12).Size())
	assert.Equal(t, "avg", Avg.String())
	assert.Equal(t, "Op(-1)", Op(-1).String())
	assert.Equal(t, "SumPostDiv", DevSumPostDiv.String())
	assert.Equal(t, "DevOp(5)", DevOp(5).String())
	// ncclDataType_t numbering.
	for i, dt := range allDtypes {
		assert.Equal(t, i, int(dt))
	}
	assert.Equal(t, []int{1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1}, func() (s []int) {
		for _, dt := range allDtypes {
			s = append(s, dt.Size())
		}
		return s
	}())
}

// Example shows an average all-reduce of three ranks' float16 buffers, one
// contribution at a time, as a ring would do it.
func Example() {
	const n = 3
	r, err := NewReducer(Float16, Avg, n, nil)
	if err != nil {
		panic(err)
	}
	inputs := [n][]byte{bytesOf(Float16, 1, 60000), bytesOf(Float16, 2, 60000), bytesOf(Float16, 3, 60000)}
	acc := make([]byte, len(inputs[0]))
	r.Load(acc, inputs[0])
	for _, in := range inputs[1:] {
		r.Reduce(acc, acc, in)
	}
	r.Finish(acc)
	fmt.Println(r.DevOp(), Value(Float16, acc), Value(Float16, acc[2:]))
	// Output: PreMulSum 2 60000
}
