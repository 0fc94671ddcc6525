package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// benchSizes are the AllReduce sizes in bytes: 8 B to 64 MiB, by 8x.
var benchSizes = []int{8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 2 << 20, 16 << 20, 64 << 20}

func sizeName(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%dMiB", b>>20)
	case b >= 1<<10:
		return fmt.Sprintf("%dKiB", b>>10)
	}
	return fmt.Sprintf("%dB", b)
}

// BenchmarkAllReduce runs in-process ring AllReduce, float32 sum, in place, with NCCL's default
// buffer sizes, on 2 and 4 ranks, each protocol, one channel (these hosts have 2 cores: more
// goroutines than cores only adds switching). It reports nccl-tests' bus bandwidth,
// busbw = algbw * 2(n-1)/n, in GB/s; compare it with BenchmarkKernelReduce, one core's reduce
// bandwidth, the physical reference (every byte of the result is produced by a reduce or a copy
// of that speed on some core).
func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, proto := range protos {
			for _, size := range benchSizes {
				b.Run(fmt.Sprintf("ranks=%d/%v/%s", n, proto, sizeName(size)), func(b *testing.B) {
					benchAllReduce(b, n, 1, proto, size)
				})
			}
		}
	}
}

// BenchmarkAllReduceChannels runs 2 ranks at 16 MiB on 1, 2 and 4 channels.
func BenchmarkAllReduceChannels(b *testing.B) {
	for _, proto := range protos {
		for _, nc := range []int{1, 2, 4} {
			b.Run(fmt.Sprintf("ranks=2/%v/16MiB/channels=%d", proto, nc), func(b *testing.B) {
				benchAllReduce(b, 2, nc, proto, 16<<20)
			})
		}
	}
}

func benchAllReduce(b *testing.B, n, nc int, proto costmodel.Proto, size int) {
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = make([]byte, size)
	}
	timeAllReduce(b, n, nc, proto, size, bufs, bufs, true)
}

// timeAllReduce times b.N ring AllReduces (float32 sum, size bytes, nc channels, proto) of send
// into recv on n in-process ranks, after two untimed ones that connect and warm up, and reports
// busbw in GB/s (and, with perOp, the time per call).
func timeAllReduce(b *testing.B, n, nc int, proto costmodel.Proto, size int, send, recv [][]byte, perOp bool) {
	cfg := Config{Override: Pin(costmodel.Ring, proto)}
	cfg.Override.Channels = nc
	comms, err := NewInProcess(n, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer closeAll(comms)
	count := size / 4
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
	algbw := float64(size) * float64(b.N) / sec / 1e9
	b.ReportMetric(algbw*2*float64(n-1)/float64(n), "busbw_GB/s")
	if perOp {
		b.ReportMetric(sec/float64(b.N)*1e6, "us/op")
	}
}

// BenchmarkKernelReduce is the physical reference: one core's kernels.Reducer.Reduce bandwidth
// (float32 sum, acc = acc + in, counted as output bytes per second) at a cache-resident and a
// memory-bound size.
func BenchmarkKernelReduce(b *testing.B) {
	for _, size := range []int{256 << 10, 64 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			r, err := kernels.NewReducer(kernels.Float32, kernels.Sum, 2, nil)
			if err != nil {
				b.Fatal(err)
			}
			acc, in := make([]byte, size), make([]byte, size)
			r.Reduce(acc, acc, in)
			b.SetBytes(int64(size))
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				r.Reduce(acc, acc, in)
			}
			b.ReportMetric(float64(size)*float64(b.N)/time.Since(start).Seconds()/1e9, "GB/s")
		})
	}
}
