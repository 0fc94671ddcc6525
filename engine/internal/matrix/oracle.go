package matrix

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// The oracle: expected results computed here from the inputs alone, in float64 (floats) or exact
// modular integer arithmetic (integers), never from another engine run.

// Seed is the seed of the matrix's inputs.
const Seed = 7

// splitmix is a stateless hash: the test inputs are a function of (seed, rank, index).
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func hash3(a, b, c uint64) uint64 { return splitmix(splitmix(splitmix(a)^b) ^ c) }

// prodValues keep float products of up to 9 ranks normal and far from fp8's saturation.
var prodValues = [...]float64{0.75, 1, 1.25, 1.5, -1, -0.75, 1, 0.875}

// FillInput writes count elements of rank's input, element index base+i at position i. Integers
// take full-range random bits (so sums wrap); floats take multiples of 1/4 in [-2, 2], or factors
// near 1 for Prod, all exactly representable in every float type.
func FillInput(b []byte, dt kernels.Dtype, op kernels.Op, seed uint64, rank, base, count int) {
	es := dt.Size()
	for i := 0; i < count; i++ {
		h := hash3(seed, uint64(rank), uint64(base+i))
		e := b[i*es : (i+1)*es]
		switch {
		case !dt.IsFloat():
			for k := range e {
				e[k] = byte(h >> (8 * k))
			}
		case op == kernels.Prod:
			kernels.SetValue(dt, e, prodValues[h%uint64(len(prodValues))])
		default:
			kernels.SetValue(dt, e, float64(int(h%17)-8)/4)
		}
	}
}

// Input returns rank's count elements of input (FillInput from index 0).
func Input(dt kernels.Dtype, op kernels.Op, seed uint64, rank, count int) []byte {
	b := make([]byte, count*dt.Size())
	FillInput(b, dt, op, seed, rank, 0, count)
	return b
}

// PremulScalar is rank r's PreMulSum scalar (every rank has its own, as in NCCL).
func PremulScalar(dt kernels.Dtype, r int) []byte {
	b := make([]byte, dt.Size())
	if dt.IsFloat() {
		kernels.SetValue(dt, b, [...]float64{0.5, 1.5, 2, 0.75}[r%4])
	} else {
		kernels.SetValue(dt, b, [...]float64{1, 2, 3, -1}[r%4])
	}
	return b
}

// epsOf is the machine epsilon of a float type (2^-(mantissa bits)).
func epsOf(dt kernels.Dtype) float64 {
	switch dt {
	case kernels.Float16:
		return 0x1p-10
	case kernels.Bfloat16:
		return 0x1p-7
	case kernels.Float32:
		return 0x1p-23
	case kernels.Float64:
		return 0x1p-52
	case kernels.Fp8E4M3:
		return 0x1p-3
	case kernels.Fp8E5M2:
		return 0x1p-2
	}
	return 0
}

// rawBits returns the element's bits, zero-extended.
func rawBits(b []byte) uint64 {
	var le [8]byte
	copy(le[:], b)
	return binary.LittleEndian.Uint64(le[:])
}

func signExtend(v uint64, bits uint) int64 { return int64(v<<(64-bits)) >> (64 - bits) }

// intExpect reduces the contributions xs (raw bits) of an integer type exactly: modular sums and
// products, signed or unsigned comparisons, the average as the wrapped sum divided once with
// truncation toward zero, PreMulSum as the wrapped sum of x_i*s_i.
func intExpect(dt kernels.Dtype, op kernels.Op, xs []uint64, scalars [][]byte) uint64 {
	bits := uint(8 * dt.Size())
	mask := uint64(math.MaxUint64) >> (64 - bits)
	signed := dt.IsSigned()
	less := func(a, b uint64) bool {
		if signed {
			return signExtend(a, bits) < signExtend(b, bits)
		}
		return a < b
	}
	acc := xs[0]
	switch op {
	case kernels.Prod:
		for _, x := range xs[1:] {
			acc *= x
		}
	case kernels.Min, kernels.Max:
		for _, x := range xs[1:] {
			if less(x, acc) == (op == kernels.Min) && x != acc {
				acc = x
			}
		}
	case kernels.PreMulSum:
		acc = 0
		for r, x := range xs {
			acc += x * rawBits(scalars[r])
		}
	default: // Sum, Avg
		for _, x := range xs[1:] {
			acc += x
		}
		if op == kernels.Avg {
			acc &= mask
			if signed {
				acc = uint64(signExtend(acc, bits) / int64(len(xs)))
			} else {
				acc /= uint64(len(xs))
			}
		}
	}
	return acc & mask
}

// floatExpect reduces float contributions in float64 and returns the tolerance the engine's result
// must meet: n * eps * sum|x_i| for sums (x_i the pre-multiplied contribution), n * eps * |product|
// for products, exact for min and max.
func floatExpect(dt kernels.Dtype, op kernels.Op, xs []float64, scalars [][]byte) (want, tol float64) {
	n := float64(len(xs))
	eps := epsOf(dt)
	switch op {
	case kernels.Prod:
		want = 1
		for _, x := range xs {
			want *= x
		}
		return want, n * eps * math.Abs(want)
	case kernels.Min, kernels.Max:
		want = xs[0]
		for _, x := range xs[1:] {
			if (op == kernels.Min) == (x < want) && x != want {
				want = x
			}
		}
		return want, 0
	}
	var abs float64
	for r, x := range xs {
		c := x
		switch op {
		case kernels.Avg:
			c = x / n
		case kernels.PreMulSum:
			c = x * kernels.Value(dt, scalars[r])
		}
		want += c
		abs += math.Abs(c)
	}
	if op == kernels.Avg {
		abs *= n // the brief's bound, n*eps*sum|x_i|, on the raw inputs
	}
	return want, n * eps * abs
}

// Want is the oracle's verdict on one result element: the exact bits of an integer result, or a
// float result and its tolerance.
type Want struct {
	bits     uint64
	f, tol   float64
	floating bool
}

// Expect is the oracle over the contributions ins[r][off:] (at most 16 ranks).
func Expect(dt kernels.Dtype, op kernels.Op, ins [][]byte, off int, scalars [][]byte) Want {
	es := dt.Size()
	if !dt.IsFloat() {
		var buf [16]uint64
		xs := buf[:len(ins)]
		for r := range ins {
			xs[r] = rawBits(ins[r][off : off+es])
		}
		return Want{bits: intExpect(dt, op, xs, scalars)}
	}
	var fbuf [16]float64
	xs := fbuf[:len(ins)]
	for r := range ins {
		xs[r] = kernels.Value(dt, ins[r][off:off+es])
	}
	want, tol := floatExpect(dt, op, xs, scalars)
	return Want{f: want, tol: tol, floating: true}
}

// Check compares got with the verdict; the error names the inputs at off.
func (w Want) Check(dt kernels.Dtype, got []byte, ins [][]byte, off int) error {
	es := dt.Size()
	if !w.floating {
		if g := rawBits(got[:es]); g != w.bits {
			xs := make([]uint64, len(ins))
			for r := range ins {
				xs[r] = rawBits(ins[r][off : off+es])
			}
			return fmt.Errorf("got %#x, want %#x (inputs %#x)", g, w.bits, xs)
		}
		return nil
	}
	if g := kernels.Value(dt, got[:es]); math.IsNaN(g) || math.Abs(g-w.f) > w.tol {
		xs := make([]float64, len(ins))
		for r := range ins {
			xs[r] = kernels.Value(dt, ins[r][off:off+es])
		}
		return fmt.Errorf("got %v, want %v within %v (inputs %v)", g, w.f, w.tol, xs)
	}
	return nil
}

// CheckElem compares one result element with the oracle over the contributions ins[r][off:].
func CheckElem(dt kernels.Dtype, op kernels.Op, got []byte, ins [][]byte, off int, scalars [][]byte) error {
	return Expect(dt, op, ins, off, scalars).Check(dt, got, ins, off)
}

// CheckRank checks rank r's output out of one call of coll against every rank's inputs ins:
// reductions element by element with the oracle, copies byte for byte. expect, when set, gives the
// oracle's verdict for the contributions at byte offset off (a cache of Expect over the same
// inputs); nil computes each one.
func CheckRank(fail func(string, ...any), coll costmodel.Coll, dt kernels.Dtype, op kernels.Op,
	count, root, r int, ins [][]byte, out []byte, scalars [][]byte, expect func(off int) Want) {
	n, es := len(ins), dt.Size()
	if expect == nil {
		expect = func(off int) Want { return Expect(dt, op, ins, off, scalars) }
	}
	switch coll {
	case costmodel.AllReduce, costmodel.Reduce:
		if coll == costmodel.Reduce && r != root {
			break
		}
		for i := 0; i < count; i++ {
			if err := expect(i*es).Check(dt, out[i*es:], ins, i*es); err != nil {
				fail("rank %d element %d: %v", r, i, err)
			}
		}
	case costmodel.ReduceScatter:
		for i := 0; i < count; i++ {
			off := (r*count + i) * es
			if err := expect(off).Check(dt, out[i*es:], ins, off); err != nil {
				fail("rank %d element %d: %v", r, i, err)
			}
		}
	case costmodel.AllGather:
		for p := 0; p < n; p++ {
			if !bytes.Equal(out[p*count*es:(p+1)*count*es], ins[p][:count*es]) {
				fail("rank %d: block of rank %d differs", r, p)
			}
		}
	case costmodel.Broadcast:
		if !bytes.Equal(out[:count*es], ins[root][:count*es]) {
			fail("rank %d: broadcast result differs from root %d's input", r, root)
		}
	}
}

// CheckResults checks every rank's output (recvs) of one call of coll against the inputs ins:
// each rank with CheckRank, and every AllReduce rank's result equal to rank 0's. With every false,
// ranks after 0 of an AllReduce are checked by that equality alone (a result equal to a correct
// one is correct), which the full matrix uses to save time.
func CheckResults(fail func(string, ...any), coll costmodel.Coll, dt kernels.Dtype, op kernels.Op,
	count, root int, ins, recvs [][]byte, scalars [][]byte, every bool, expect func(off int) Want) {
	es := dt.Size()
	for r := range recvs {
		out := recvs[r]
		if coll == costmodel.AllReduce && r > 0 {
			if !bytes.Equal(out[:count*es], recvs[0][:count*es]) {
				fail("rank %d's result differs from rank 0's", r)
			}
			if !every {
				continue
			}
		}
		CheckRank(fail, coll, dt, op, count, root, r, ins, out, scalars, expect)
	}
}
