package net

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// BenchmarkAllReduce: 2 hosts x 1 rank over loopback TCP, NCCL's default buffers, Ring AllReduce
// of float32 per protocol at 1 MiB and 64 MiB.
func BenchmarkAllReduce(b *testing.B) {
	for _, p := range []costmodel.Proto{costmodel.LL, costmodel.LL128, costmodel.Simple} {
		for _, size := range []int{1 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("%v/%dMiB", p, size>>20), func(b *testing.B) {
				j := startJob(b, 2, 1, engine.Config{Buffers: planner.DefaultBuffers(), Timeout: time.Minute})
				defer j.close()
				count := size / 4
				bufs := make([][2][]byte, 2)
				for r := range bufs {
					bufs[r] = [2][]byte{make([]byte, size), make([]byte, size)}
				}
				run := func() {
					errs := j.each(func(r int, c *engine.Comm) error {
						c.SetOverride(engine.Pin(costmodel.Ring, p))
						return c.AllReduce(context.Background(), bufs[r][0], bufs[r][1], count, kernels.Float32, kernels.Sum)
					})
					for _, err := range errs {
						require.NoError(b, err)
					}
				}
				run() // connections set up
				b.SetBytes(int64(size))
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					run()
				}
			})
		}
	}
}
