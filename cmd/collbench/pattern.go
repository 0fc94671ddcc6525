package main

import (
	"encoding/binary"
	"math"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// The initialisation pattern: rank r's element i of its send buffer is pattern(r, i), a small
// positive integer, so that every sum, product, maximum and minimum over a few ranks is exact in
// every type; products use 1 and 2 only (powers of two). The checker compares with the results
// computed in closed form from the pattern, never with another run of the engine.
func (b *bench) pattern(r, i int) float64 {
	if b.o.op == kernels.Prod && b.o.coll != costmodel.AllGather && b.o.coll != costmodel.Broadcast {
		return float64(1 + (r+i)%2)
	}
	return float64(1 + (r+i)%3)
}

// premulScalar is rank r's scalar for -o mulsum, as nccl-tests' ncclVerifiablePremulScalar: 1 on
// even ranks, 2 on odd ones (exact in every type). The expected result of a mulsum is then
// sum over p of premulScalar(p) * pattern(p, i), in closed form like the others.
func premulScalar(r int) float64 { return float64(1 + r%2) }

// premulScalarBytes is this rank's mulsum scalar as one element of the call's type.
func (b *bench) premulScalarBytes() []byte {
	buf := make([]byte, b.o.dt.Size())
	b.put(buf, 0, premulScalar(b.rank))
	return buf
}

// fill writes the pattern into this rank's input and poisons the output.
func (b *bench) fill(send, recv []byte, count int, inPlace bool) {
	o := b.o
	if !inPlace {
		for i := range recv {
			recv[i] = 0xa5
		}
	}
	switch o.coll {
	case costmodel.ReduceScatter:
		for i := 0; i < count*b.n; i++ {
			b.put(send, i, b.pattern(b.rank, i))
		}
	case costmodel.Broadcast:
		if b.rank == o.root {
			for i := 0; i < count; i++ {
				b.put(send, i, b.pattern(b.rank, i))
			}
		}
	default:
		for i := 0; i < count; i++ {
			b.put(send, i, b.pattern(b.rank, i))
		}
	}
}

// expected is element i of this rank's output in closed form.
func (b *bench) expected(i int) float64 {
	o := b.o
	switch o.coll {
	case costmodel.Broadcast:
		return b.pattern(o.root, i)
	case costmodel.ReduceScatter:
		return b.reduced(func(p int) float64 { return b.pattern(p, b.rank*b.curCount+i) })
	}
	return b.reduced(func(p int) float64 { return b.pattern(p, i) })
}

// reduced applies the operator over the ranks' values, in the element type's arithmetic for
// integers (wrapping) and exactly for floats.
func (b *bench) reduced(v func(p int) float64) float64 {
	o := b.o
	if o.opName == "mulsum" {
		w := v
		v = func(p int) float64 { return premulScalar(p) * w(p) }
	}
	acc := v(0)
	for p := 1; p < b.n; p++ {
		x := v(p)
		switch o.op {
		case kernels.Sum, kernels.Avg, kernels.PreMulSum:
			acc += x
		case kernels.Prod:
			acc *= x
		case kernels.Max:
			acc = math.Max(acc, x)
		case kernels.Min:
			acc = math.Min(acc, x)
		}
	}
	if !o.dt.IsFloat() {
		acc = float64(b.wrap(int64(acc)))
		if o.op == kernels.Avg {
			acc = float64(b.wrap(int64(acc) / int64(b.n)))
		}
		return acc
	}
	if o.op == kernels.Avg {
		acc /= float64(b.n)
	}
	return acc
}

// countWrong counts the elements of this rank's output that differ from the closed form.
func (b *bench) countWrong(recv []byte, count int) int64 {
	o := b.o
	b.curCount = count
	var wrong int64
	switch o.coll {
	case costmodel.AllGather:
		for p := 0; p < b.n; p++ {
			for i := 0; i < count; i++ {
				if !b.same(b.get(recv, p*count+i), b.pattern(p, i)) {
					wrong++
				}
			}
		}
		return wrong
	case costmodel.Reduce:
		if b.rank != o.root {
			return 0
		}
	}
	for i := 0; i < count; i++ {
		if !b.same(b.get(recv, i), b.expected(i)) {
			wrong++
		}
	}
	return wrong
}

// same compares a result with its closed form: exactly for integers, within a tolerance of the
// type's precision for floats (avg multiplies by 1/n before summing).
func (b *bench) same(got, want float64) bool {
	if !b.o.dt.IsFloat() {
		return got == want
	}
	if got == want {
		return true
	}
	tol := 1e-12
	switch b.o.dt {
	case kernels.Float32:
		tol = 1e-6
	case kernels.Float16:
		tol = 2e-3
	case kernels.Bfloat16:
		tol = 1.6e-2
	case kernels.Fp8E4M3:
		tol = 0.125
	case kernels.Fp8E5M2:
		tol = 0.25
	}
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

// wrap truncates v to the element type, as its arithmetic wraps.
func (b *bench) wrap(v int64) int64 {
	switch b.o.dt {
	case kernels.Int8:
		return int64(int8(v))
	case kernels.Uint8:
		return int64(uint8(v))
	case kernels.Int32:
		return int64(int32(v))
	case kernels.Uint32:
		return int64(uint32(v))
	}
	return v
}

func (b *bench) put(buf []byte, i int, v float64) {
	switch b.o.dt {
	case kernels.Int8, kernels.Uint8:
		buf[i] = byte(int64(v))
	case kernels.Int32, kernels.Uint32:
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(int64(v)))
	case kernels.Int64, kernels.Uint64:
		binary.LittleEndian.PutUint64(buf[8*i:], uint64(int64(v)))
	case kernels.Float16:
		binary.LittleEndian.PutUint16(buf[2*i:], kernels.Float32ToHalf(float32(v)))
	case kernels.Bfloat16:
		binary.LittleEndian.PutUint16(buf[2*i:], kernels.Float32ToBFloat16(float32(v)))
	case kernels.Float32:
		binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(v)))
	case kernels.Float64:
		binary.LittleEndian.PutUint64(buf[8*i:], math.Float64bits(v))
	case kernels.Fp8E4M3:
		buf[i] = kernels.Float32ToE4M3(float32(v))
	case kernels.Fp8E5M2:
		buf[i] = kernels.Float32ToE5M2(float32(v))
	}
}

func (b *bench) get(buf []byte, i int) float64 {
	switch b.o.dt {
	case kernels.Int8:
		return float64(int8(buf[i]))
	case kernels.Uint8:
		return float64(buf[i])
	case kernels.Int32:
		return float64(int32(binary.LittleEndian.Uint32(buf[4*i:])))
	case kernels.Uint32:
		return float64(binary.LittleEndian.Uint32(buf[4*i:]))
	case kernels.Int64:
		return float64(int64(binary.LittleEndian.Uint64(buf[8*i:])))
	case kernels.Uint64:
		return float64(binary.LittleEndian.Uint64(buf[8*i:]))
	case kernels.Float16:
		return float64(kernels.HalfToFloat32(binary.LittleEndian.Uint16(buf[2*i:])))
	case kernels.Bfloat16:
		return float64(kernels.BFloat16ToFloat32(binary.LittleEndian.Uint16(buf[2*i:])))
	case kernels.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])))
	case kernels.Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(buf[8*i:]))
	case kernels.Fp8E4M3:
		return float64(kernels.E4M3ToFloat32(buf[i]))
	case kernels.Fp8E5M2:
		return float64(kernels.E5M2ToFloat32(buf[i]))
	}
	return math.NaN()
}
