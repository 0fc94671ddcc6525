package kernels

import (
	"math"
	"sync"
)

// fp8Tables holds, for one fp8 format, the result of every binary operation
// on every pair of patterns, indexed by a<<8|b. The tables are built from the
// scalar definitions (decode to float32, operate, convert back with
// SATFINITE), so they are exactly as correct as the conversions.
type fp8Tables struct {
	sum, prod, min, max [65536]byte
}

var (
	e4m3Tables = sync.OnceValue(func() *fp8Tables { return buildFP8Tables(E4M3ToFloat32, Float32ToE4M3) })
	e5m2Tables = sync.OnceValue(func() *fp8Tables { return buildFP8Tables(E5M2ToFloat32, Float32ToE5M2) })
)

func buildFP8Tables(dec func(uint8) float32, enc func(float32) uint8) *fp8Tables {
	t := new(fp8Tables)
	nan := math.Float32frombits(canonicalNaN32)
	for i := range 65536 {
		x, y := dec(uint8(i>>8)), dec(uint8(i))
		t.sum[i] = enc(x + y)
		t.prod[i] = enc(x * y)
		t.min[i] = enc(fmin32(x, y, nan))
		t.max[i] = enc(fmax32(x, y, nan))
	}
	return t
}

func fmin32(x, y, nan float32) float32 {
	var d [1]float32
	fminLoop(d[:], []float32{x}, []float32{y}, nan)
	return d[0]
}

func fmax32(x, y, nan float32) float32 {
	var d [1]float32
	fmaxLoop(d[:], []float32{x}, []float32{y}, nan)
	return d[0]
}
