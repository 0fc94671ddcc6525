package kernels

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Errors returned by NewReducer.
var (
	ErrDtype  = errors.New("kernels: invalid data type")
	ErrOp     = errors.New("kernels: invalid reduction operator")
	ErrRanks  = errors.New("kernels: nRanks must be at least 1")
	ErrScalar = errors.New("kernels: bad PreMulSum scalar")
)

const errLengths = "kernels: operands must have equal lengths, a whole number of elements"

// Reducer applies one reduction operator to byte slices of one element type,
// in the three steps NCCL's device code uses: Load the first contribution,
// Reduce every later one into the accumulator, Finish the result once.
//
// A Reducer is a small value, safe to copy and to use from many goroutines at
// once; its methods never allocate. Build it with NewReducer; the zero value
// sums int8.
type Reducer struct {
	dt     Dtype
	op     Op
	dev    DevOp
	isMin  bool
	nRanks int
	arg    uint64  // NCCL's ncclDevRedOpFull.scalarArg
	sf32   float32 // PreMulSum scalar as float32 (float32, float16, bfloat16)
	sf64   float64 // PreMulSum scalar (float64)
}

// NewReducer returns the Reducer for user operator op on element type dt in a
// communicator of nRanks ranks, lowered as NCCL's hostToDevRedOp lowers it
// (see the package documentation). scalar is the PreMulSum factor, one
// element of type dt in little-endian order; it is required for PreMulSum and
// must be nil for every other operator.
func NewReducer(dt Dtype, op Op, nRanks int, scalar []byte) (Reducer, error) {
	switch {
	case !dt.Valid():
		return Reducer{}, fmt.Errorf("%w %d", ErrDtype, int(dt))
	case !op.Valid():
		return Reducer{}, fmt.Errorf("%w %d", ErrOp, int(op))
	case nRanks < 1:
		return Reducer{}, fmt.Errorf("%w, got %d", ErrRanks, nRanks)
	case op == PreMulSum && len(scalar) != dt.Size():
		return Reducer{}, fmt.Errorf("%w: %d bytes for %v, want %d", ErrScalar, len(scalar), dt, dt.Size())
	case op != PreMulSum && scalar != nil:
		return Reducer{}, fmt.Errorf("%w: a scalar is only taken by PreMulSum, not %v", ErrScalar, op)
	}
	r := Reducer{dt: dt, op: op, nRanks: nRanks}
	bits := uint(8 * dt.Size())
	allBits := uint64(math.MaxUint64) >> (64 - bits)
	switch op {
	case Sum:
		r.dev = DevSum
	case Prod:
		r.dev = DevProd
	case Min, Max:
		// The integer kernel compares a^mask with b^mask as unsigned: the mask
		// holds the sign bit for signed types and all bits for Max. Floats
		// only read bit 0 (set: Max).
		r.dev, r.isMin = DevMinMax, op == Min
		if dt.IsSigned() {
			r.arg ^= allBits ^ allBits>>1
		}
		if op == Max {
			r.arg ^= allBits
		}
	case Avg:
		if !dt.IsFloat() {
			r.dev = DevSumPostDiv
			r.arg = uint64(nRanks)<<1 | b2u(dt.IsSigned())
			break
		}
		r.dev = DevPreMulSum
		inv := float32(1.0 / float64(nRanks))
		switch dt {
		case Float16:
			r.setScalar(uint64(Float32ToHalf(inv)))
		case Bfloat16:
			r.setScalar(uint64(Float32ToBFloat16(inv)))
		case Float32:
			r.setScalar(uint64(math.Float32bits(inv)))
		case Float64:
			r.setScalar(math.Float64bits(1.0 / float64(nRanks)))
		case Fp8E4M3:
			r.setScalar(uint64(Float32ToE4M3(inv)))
		case Fp8E5M2:
			r.setScalar(uint64(Float32ToE5M2(inv)))
		}
	case PreMulSum:
		r.dev = DevPreMulSum
		var le [8]byte
		copy(le[:], scalar)
		r.setScalar(binary.LittleEndian.Uint64(le[:]))
	}
	return r, nil
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// setScalar records a PreMulSum scalar given as the element's bit pattern.
func (r *Reducer) setScalar(bits uint64) {
	r.arg = bits
	switch r.dt {
	case Float16:
		r.sf32 = HalfToFloat32(uint16(bits))
	case Bfloat16:
		r.sf32 = BFloat16ToFloat32(uint16(bits))
	case Float32:
		r.sf32 = math.Float32frombits(uint32(bits))
	case Float64:
		r.sf64 = math.Float64frombits(bits)
	}
}

// Dtype returns the element type.
func (r Reducer) Dtype() Dtype { return r.dt }

// Op returns the user operator the Reducer was built for.
func (r Reducer) Op() Op { return r.op }

// DevOp returns the device operator the user operator was lowered to.
func (r Reducer) DevOp() DevOp { return r.dev }

// NRanks returns the communicator size the Reducer was built for.
func (r Reducer) NRanks() int { return r.nRanks }

// Arg returns NCCL's 64-bit operator argument (ncclDevRedOpFull.scalarArg):
// the xor mask for MinMax, nRanks<<1|isSigned for SumPostDiv, the scalar's
// bit pattern (zero-extended) for PreMulSum, and 0 otherwise.
func (r Reducer) Arg() uint64 { return r.arg }

// ElemSize returns the size of one element in bytes.
func (r Reducer) ElemSize() int { return r.dt.Size() }

// Copy copies src to dst (FuncCopy). It panics if the lengths differ or are
// not a whole number of elements.
func (r Reducer) Copy(dst, src []byte) {
	if len(src) != len(dst) || len(dst)%r.ElemSize() != 0 {
		panic(errLengths)
	}
	copy(dst, src)
}

// Load stores the first contribution of a reduction: dst = preOp(src), which
// is src·scalar for PreMulSum and a plain copy otherwise. dst may be src. It
// panics if the lengths differ or are not a whole number of elements.
func (r Reducer) Load(dst, src []byte) {
	if r.dev != DevPreMulSum {
		r.Copy(dst, src)
		return
	}
	if len(src) != len(dst) || len(dst)%r.ElemSize() != 0 {
		panic(errLengths)
	}
	r.run(stepLoad, dst, src, nil)
}

// Reduce combines a raw contribution b into an accumulator a already loaded:
// dst = a (op) preOp(b). dst may be a or b, but no other overlap is allowed.
// It panics if the lengths differ or are not a whole number of elements.
func (r Reducer) Reduce(dst, a, b []byte) {
	if len(a) != len(dst) || len(b) != len(dst) || len(dst)%r.ElemSize() != 0 {
		panic(errLengths)
	}
	r.run(stepReduce, dst, a, b)
}

// Finish applies the post-operation in place once all contributions are
// reduced: SumPostDiv divides by nRanks, truncating toward zero; every other
// operator leaves dst as it is. It panics if dst is not a whole number of
// elements.
func (r Reducer) Finish(dst []byte) {
	if len(dst)%r.ElemSize() != 0 {
		panic(errLengths)
	}
	if r.dev != DevSumPostDiv {
		return
	}
	r.run(stepFinish, dst, dst, nil)
}
