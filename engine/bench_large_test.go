package engine

import (
	"fmt"
	"testing"

	"github.com/collplan/collplan/costmodel"
)

// BenchmarkAllReduceLarge runs 2-rank in-process ring AllReduce, float32 sum, Simple, out of place
// (collbench's first column), at DRAM-resident sizes, on 1 and 2 channels. It reports busbw in GB/s.
func BenchmarkAllReduceLarge(b *testing.B) {
	for _, size := range []int{16 << 20, 64 << 20} {
		for _, nc := range []int{1, 2} {
			b.Run(fmt.Sprintf("%s/channels=%d", sizeName(size), nc), func(b *testing.B) {
				benchAllReduceOOP(b, 2, nc, size)
			})
		}
	}
}

func benchAllReduceOOP(b *testing.B, n, nc, size int) {
	send, recv := make([][]byte, n), make([][]byte, n)
	for r := range send {
		send[r], recv[r] = make([]byte, size), make([]byte, size)
	}
	timeAllReduce(b, n, nc, costmodel.Simple, size, send, recv, false)
}
