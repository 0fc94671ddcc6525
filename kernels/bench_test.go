package kernels

import (
	"fmt"
	"testing"
)

// BenchmarkReduce measures Reduce(acc, acc, in) on 1 MiB operands; the
// throughput counts the 1 MiB of output per call.
func BenchmarkReduce(b *testing.B) {
	const size = 1 << 20
	cases := []struct {
		dt     Dtype
		op     Op
		offset int // 1: unaligned, through the encoding/binary fallback
	}{
		{Float32, Sum, 0}, {Float16, Sum, 0}, {Bfloat16, Sum, 0}, {Int32, Sum, 0},
		{Float32, Avg, 0}, {Float16, Avg, 0}, {Bfloat16, Avg, 0}, {Int32, Avg, 0},
		{Float64, Sum, 0}, {Int8, Sum, 0}, {Fp8E4M3, Sum, 0}, {Fp8E4M3, Avg, 0}, {Float32, Max, 0},
		{Float32, Sum, 1},
	}
	for _, c := range cases {
		name := fmt.Sprintf("%v/%v", c.dt, c.op)
		if c.offset != 0 {
			name += "/unaligned"
		}
		b.Run(name, func(b *testing.B) {
			r, err := NewReducer(c.dt, c.op, 8, nil)
			if err != nil {
				b.Fatal(err)
			}
			acc := make([]byte, size+c.offset)[c.offset:]
			in := make([]byte, size+c.offset)[c.offset:]
			for i := 0; i+c.dt.Size() <= size; i += c.dt.Size() {
				SetValue(c.dt, in[i:], float64(i%17)/4)
			}
			r.Load(acc, in)
			r.Reduce(acc, acc, in) // builds any lazy table outside the timing
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				r.Reduce(acc, acc, in)
			}
		})
	}
}
