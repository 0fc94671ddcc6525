package kernels

import (
	"encoding/binary"
	"math"
)

// Value returns the first element of b, a little-endian element of type dt,
// as a float64 (exact for every type except 64-bit integers beyond 2^53). It
// panics if b is shorter than one element.
func Value(dt Dtype, b []byte) float64 {
	switch dt {
	case Int8:
		return float64(int8(b[0]))
	case Uint8:
		return float64(b[0])
	case Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	case Float16:
		return float64(HalfToFloat32(binary.LittleEndian.Uint16(b)))
	case Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	case Float64:
		return math.Float64frombits(binary.LittleEndian.Uint64(b))
	case Bfloat16:
		return float64(BFloat16ToFloat32(binary.LittleEndian.Uint16(b)))
	case Fp8E4M3:
		return float64(E4M3ToFloat32(b[0]))
	case Fp8E5M2:
		return float64(E5M2ToFloat32(b[0]))
	}
	panic(ErrDtype)
}

// SetValue stores v as the first element of b, little-endian, in type dt.
// Integer types take v converted as Go converts (truncation toward zero; v
// must be in range). Narrow float types take float32(v) rounded as CUDA's
// __float2half, __float2bfloat16 and SATFINITE fp8 conversions round it. It
// panics if b is shorter than one element.
func SetValue(dt Dtype, b []byte, v float64) {
	switch dt {
	case Int8:
		b[0] = byte(int8(v))
	case Uint8:
		b[0] = uint8(v)
	case Int32:
		binary.LittleEndian.PutUint32(b, uint32(int32(v)))
	case Uint32:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case Int64:
		binary.LittleEndian.PutUint64(b, uint64(int64(v)))
	case Uint64:
		binary.LittleEndian.PutUint64(b, uint64(v))
	case Float16:
		binary.LittleEndian.PutUint16(b, Float32ToHalf(float32(v)))
	case Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	case Bfloat16:
		binary.LittleEndian.PutUint16(b, Float32ToBFloat16(float32(v)))
	case Fp8E4M3:
		b[0] = Float32ToE4M3(float32(v))
	case Fp8E5M2:
		b[0] = Float32ToE5M2(float32(v))
	default:
		panic(ErrDtype)
	}
}
