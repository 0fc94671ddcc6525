package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
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
	cfg := Config{Override: Pin(costmodel.Ring, costmodel.Simple)}
	cfg.Override.Channels = nc
	comms, err := NewInProcess(n, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer closeAll(comms)
	count := size / 4
	send, recv := make([][]byte, n), make([][]byte, n)
	for r := range send {
		send[r], recv[r] = make([]byte, size), make([]byte, size)
	}
	run := func(iters int) error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iters && errs[r] == nil; i++ {
					errs[r] = c.AllReduce(bg, send[r], recv[r], count, kernels.Float32, kernels.Sum)
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}
	if err := run(2); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	start := time.Now()
	if err := run(b.N); err != nil {
		b.Fatal(err)
	}
	sec := time.Since(start).Seconds()
	b.ReportMetric(float64(size)*float64(b.N)/sec/1e9*2*float64(n-1)/float64(n), "busbw_GB/s")
}
