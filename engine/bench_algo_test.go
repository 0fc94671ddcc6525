package engine

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// BenchmarkAllReduceAlgo runs in-process AllReduce, float32 sum, in place, with NCCL's default
// buffers, on 2 ranks pinned to NVLS (one virtual node) and to CollNetDirect (two nodes of one
// rank, through this test binary's aggregation endpoint), at 8 B, 1 MiB and 64 MiB: the hot
// path of the kernels in engine/internal/algorithm's nvls.go and collnet.go, without process
// start-up or the launcher. It reports the time per call (us/op).
func BenchmarkAllReduceAlgo(b *testing.B) {
	for _, k := range []struct {
		algo costmodel.Algo
		rpn  int
	}{{costmodel.NVLS, 2}, {costmodel.CollNetDirect, 1}} {
		for _, size := range []int{8, 1 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("%v/%s", k.algo, sizeName(size)), func(b *testing.B) {
				cfg := Config{RanksPerNode: k.rpn, Override: Pin(k.algo, costmodel.Simple)}
				if k.algo == costmodel.CollNetDirect {
					cfg.CollNet.Addr = testCollNetAddr(b)
				}
				timeAlgoAllReduce(b, 2, cfg, size)
			})
		}
	}
}

func timeAlgoAllReduce(b *testing.B, n int, cfg Config, size int) {
	comms, err := NewInProcess(n, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer closeAll(comms)
	bufs := make([][]byte, n)
	for r := range bufs {
		bufs[r] = make([]byte, size)
	}
	count := size / 4
	run := func(iters int) error {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < iters && errs[r] == nil; i++ {
					errs[r] = c.AllReduce(bg, bufs[r], bufs[r], count, kernels.Float32, kernels.Sum)
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
	b.ReportMetric(time.Since(start).Seconds()/float64(b.N)*1e6, "us/op")
}
