package kernels

import (
	"encoding/binary"
	"math"
	"unsafe"
)

// step is the reduction step a call performs.
type step uint8

const (
	stepReduce step = iota // d = a (op) preOp(b)
	stepLoad               // d = preOp(a)
	stepFinish             // d = postOp(d)
)

// littleEndian reports whether the host stores integers little-endian, so
// that element bytes can be reinterpreted in place.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// bounceBytes is the block size of the fallback path (a multiple of 8).
const bounceBytes = 1024

// run performs step s on operands of equal length (b is nil unless s is
// stepReduce). Operands that are aligned to the element size on a
// little-endian host are processed in place; others are moved block by block
// through aligned, native-order buffers on the stack.
func (r *Reducer) run(s step, d, a, b []byte) {
	size := r.dt.Size()
	if size == 1 || littleEndian && aligned(d, a, b, size) {
		r.native(s, d, a, b)
		return
	}
	var bufA, bufB, bufD [bounceBytes / 8]uint64
	xa, xb, xd := u64Bytes(&bufA), u64Bytes(&bufB), u64Bytes(&bufD)
	if s == stepFinish {
		xd = xa // in place
	}
	for len(d) > 0 {
		n := min(len(d), bounceBytes)
		fromLE(xa[:n], a[:n], size)
		var nb []byte
		if b != nil {
			nb = xb[:n]
			fromLE(nb, b[:n], size)
			b = b[n:]
		}
		r.native(s, xd[:n], xa[:n], nb)
		toLE(d[:n], xd[:n], size)
		d, a = d[n:], a[n:]
	}
}

func aligned(d, a, b []byte, size int) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(d))) |
		uintptr(unsafe.Pointer(unsafe.SliceData(a))) |
		uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p&uintptr(size-1) == 0
}

func u64Bytes(p *[bounceBytes / 8]uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), bounceBytes)
}

// view reinterprets b, aligned to T's size and in native order, as []T.
func view[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// fromLE copies little-endian elements of the given size into native order.
func fromLE(native, le []byte, size int) {
	if littleEndian {
		copy(native, le)
		return
	}
	for i := 0; i+size <= len(le); i += size {
		switch size {
		case 2:
			binary.NativeEndian.PutUint16(native[i:], binary.LittleEndian.Uint16(le[i:]))
		case 4:
			binary.NativeEndian.PutUint32(native[i:], binary.LittleEndian.Uint32(le[i:]))
		case 8:
			binary.NativeEndian.PutUint64(native[i:], binary.LittleEndian.Uint64(le[i:]))
		}
	}
}

// toLE copies native-order elements of the given size out as little-endian.
func toLE(le, native []byte, size int) {
	if littleEndian {
		copy(le, native)
		return
	}
	for i := 0; i+size <= len(le); i += size {
		switch size {
		case 2:
			binary.LittleEndian.PutUint16(le[i:], binary.NativeEndian.Uint16(native[i:]))
		case 4:
			binary.LittleEndian.PutUint32(le[i:], binary.NativeEndian.Uint32(native[i:]))
		case 8:
			binary.LittleEndian.PutUint64(le[i:], binary.NativeEndian.Uint64(native[i:]))
		}
	}
}

// native performs step s on aligned, native-order operands.
func (r *Reducer) native(s step, d, a, b []byte) {
	switch r.dt {
	case Int8:
		intStep(s, r, view[int8](d), view[int8](a), view[int8](b))
	case Uint8:
		intStep(s, r, d, a, b)
	case Int32:
		intStep(s, r, view[int32](d), view[int32](a), view[int32](b))
	case Uint32:
		intStep(s, r, view[uint32](d), view[uint32](a), view[uint32](b))
	case Int64:
		intStep(s, r, view[int64](d), view[int64](a), view[int64](b))
	case Uint64:
		intStep(s, r, view[uint64](d), view[uint64](a), view[uint64](b))
	case Float32:
		floatStep(s, r, view[float32](d), view[float32](a), view[float32](b),
			r.sf32, math.Float32frombits(canonicalNaN32))
	case Float64:
		floatStep(s, r, view[float64](d), view[float64](a), view[float64](b),
			r.sf64, math.Float64frombits(canonicalNaN64))
	case Float16:
		halfStep(s, r, view[uint16](d), view[uint16](a), view[uint16](b))
	case Bfloat16:
		bf16Step(s, r, view[uint16](d), view[uint16](a), view[uint16](b))
	case Fp8E4M3:
		fp8Step(s, r, e4m3Tables(), d, a, b)
	case Fp8E5M2:
		fp8Step(s, r, e5m2Tables(), d, a, b)
	}
}

func intStep[T integer](s step, r *Reducer, d, a, b []T) {
	switch s {
	case stepReduce:
		switch r.dev {
		case DevSum, DevSumPostDiv:
			sumLoop(d, a, b)
		case DevProd:
			prodLoop(d, a, b)
		case DevMinMax:
			if r.isMin {
				minLoop(d, a, b)
			} else {
				maxLoop(d, a, b)
			}
		case DevPreMulSum:
			preMulSumLoop(d, a, b, T(r.arg))
		}
	case stepLoad: // only reached for PreMulSum
		scaleLoop(d, a, T(r.arg))
	case stepFinish: // only reached for SumPostDiv
		n := r.nRanks
		switch d := any(d).(type) {
		case []int8:
			postDivSigned(d, int64(n))
		case []int32:
			postDivSigned(d, int64(n))
		case []int64:
			postDivSigned(d, int64(n))
		case []uint8:
			postDivUnsigned(d, uint64(n))
		case []uint32:
			postDivUnsigned(d, uint64(n))
		case []uint64:
			postDivUnsigned(d, uint64(n))
		}
	}
}

func floatStep[T float](s step, r *Reducer, d, a, b []T, scalar, nan T) {
	switch s {
	case stepReduce:
		switch r.dev {
		case DevSum:
			sumLoop(d, a, b)
		case DevProd:
			prodLoop(d, a, b)
		case DevMinMax:
			if r.isMin {
				fminLoop(d, a, b, nan)
			} else {
				fmaxLoop(d, a, b, nan)
			}
		case DevPreMulSum:
			preMulSumLoop(d, a, b, scalar)
		}
	case stepLoad:
		scaleLoop(d, a, scalar)
	}
}

func halfStep(s step, r *Reducer, d, a, b []uint16) {
	switch s {
	case stepReduce:
		switch r.dev {
		case DevSum:
			halfSumLoop(d, a, b)
		case DevProd:
			halfProdLoop(d, a, b)
		case DevMinMax:
			minMax16Loop(d, a, b, r.isMin, 0x7c01)
		case DevPreMulSum:
			halfPreMulSumLoop(d, a, b, r.sf32)
		}
	case stepLoad:
		halfScaleLoop(d, a, r.sf32)
	}
}

func bf16Step(s step, r *Reducer, d, a, b []uint16) {
	switch s {
	case stepReduce:
		switch r.dev {
		case DevSum:
			bf16SumLoop(d, a, b)
		case DevProd:
			bf16ProdLoop(d, a, b)
		case DevMinMax:
			minMax16Loop(d, a, b, r.isMin, 0x7f81)
		case DevPreMulSum:
			bf16PreMulSumLoop(d, a, b, r.sf32)
		}
	case stepLoad:
		bf16ScaleLoop(d, a, r.sf32)
	}
}

func fp8Step(s step, r *Reducer, t *fp8Tables, d, a, b []byte) {
	switch s {
	case stepReduce:
		switch r.dev {
		case DevSum:
			tableLoop(d, a, b, &t.sum)
		case DevProd:
			tableLoop(d, a, b, &t.prod)
		case DevMinMax:
			if r.isMin {
				tableLoop(d, a, b, &t.min)
			} else {
				tableLoop(d, a, b, &t.max)
			}
		case DevPreMulSum:
			tablePreMulSumLoop(d, a, b, &t.sum, &t.prod, byte(r.arg))
		}
	case stepLoad:
		tableScaleLoop(d, a, &t.prod, byte(r.arg))
	}
}
