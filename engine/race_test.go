//go:build unix

package engine

import (
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/transport/shm"
	"github.com/collplan/collplan/kernels"
)

// TestTreeInPlaceRace is the regression test of the data race reported by `go test -race` on the
// in-place Tree AllReduce (run it with -race; it is short). On a non-root rank the reduce-up
// worker reads chunk k of the user's buffer and the broadcast-down worker later writes the sum of
// chunk k into the same bytes. The order is real, but it runs through the peers: up's release store
// of a tail, the parent's and the root's acquire/release, down's acquire of its parent's tail. With
// the in-process transport the race detector sees that chain (the counters are Go memory); with the
// shared-memory transport the counters live in mapped files, outside the Go heap, where the race
// runtime ignores atomics, so it saw two unordered accesses. The engine now adds the edge itself in
// race builds on such transports (see wire's race.go). Both transports run here, three ranks (so rank 1
// is a middle rank of the chain), two channels (both trees), every protocol.
func TestTreeInPlaceRace(t *testing.T) {
	const n = 3
	for _, onShm := range []bool{false, true} {
		for _, p := range protos {
			for _, count := range []int{2, 1000, 5000} {
				name := fmt.Sprintf("shm=%v/%v/%d", onShm, p, count)
				t.Run(name, func(t *testing.T) {
					cfg := Config{Buffers: tinyBuffers(), Override: Pin(costmodel.Tree, p)}
					cfg.Override.Channels = 2
					comms := treeRaceComms(t, n, onShm, cfg)
					var wg sync.WaitGroup
					errs := make([]error, n)
					bufs := make([][]byte, n)
					for r, c := range comms {
						wg.Add(1)
						go func() {
							defer wg.Done()
							b := make([]byte, 4*count)
							for i := 0; i < count; i++ {
								binary.LittleEndian.PutUint32(b[4*i:], uint32(r+i))
							}
							for it := 0; it < 2 && errs[r] == nil; it++ {
								errs[r] = c.AllReduce(bg, b, b, count, kernels.Int32, kernels.Max)
							}
							bufs[r] = b
						}()
					}
					wg.Wait()
					for r := range comms {
						require.NoError(t, errs[r])
						for i := 0; i < count; i++ {
							require.Equal(t, uint32(n-1+i), binary.LittleEndian.Uint32(bufs[r][4*i:]), "rank %d element %d", r, i)
						}
					}
				})
			}
		}
	}
}

// treeRaceComms makes n ranks over the in-process transport or over n ShmTransports of one job
// (one mapping per rank, as in separate processes), closed at the end of the test.
func treeRaceComms(t *testing.T, n int, onShm bool, cfg Config) []*Comm {
	t.Helper()
	if !onShm {
		comms, err := NewInProcess(n, cfg)
		require.NoError(t, err)
		t.Cleanup(func() {
			for _, c := range comms {
				c.Close()
			}
		})
		return comms
	}
	job := newJob(t)
	comms := make([]*Comm, n)
	for r := range comms {
		tr, err := shm.NewShmTransport(job)
		require.NoError(t, err)
		comms[r], err = New(r, n, tr, cfg)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		for r := n - 1; r >= 0; r-- {
			comms[r].Close()
		}
	})
	return comms
}
