package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels"
)

// TestTreeWorkers checks how many goroutines a Tree AllReduce runs per channel: the root one, any
// other rank two (reduce-up and broadcast-down, runTreeSplit) when its channel's range takes more
// than one FIFO step, and one (up, then down: runTreeUpDown) when it fits in one.
func TestTreeWorkers(t *testing.T) {
	const n = 4
	for _, proto := range protos {
		cfg := Config{Buffers: tinyBuffers(), Override: Pin(costmodel.Tree, proto)}
		comms, err := NewInProcess(n, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { closeAll(comms) })
		bufs := make([][]byte, n)
		for r := range bufs {
			bufs[r] = make([]byte, 4096*4)
		}
		for _, count := range []int{1, 4096} {
			t.Run(fmt.Sprintf("%v/count=%d", proto, count), func(t *testing.T) {
				errs := runRanks(t, comms, 10*time.Second, func(r int, c *Comm) error {
					return c.AllReduce(bg, bufs[r], bufs[r], count, kernels.Float32, kernels.Sum)
				})
				for _, err := range errs {
					require.NoError(t, err)
				}
				for r, c := range comms {
					nc := c.LastPlan().Channels
					require.Positive(t, nc)
					want := 1 // one element: channel 0 alone, in one step, on one goroutine
					if count > 1 {
						// Tiny FIFOs take at most 30 floats a step: every channel takes many.
						want = 0
						for ch := 0; ch < nc; ch++ {
							want += 2
							if c.tree[ch%2][r].Up < 0 {
								want-- // the root turns the sums around in one primitive
							}
						}
					}
					assert.Len(t, c.tasks, want, "rank %d", r)
				}
			})
		}
	}
}
