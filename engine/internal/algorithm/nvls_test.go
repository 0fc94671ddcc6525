package algorithm

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine/internal/wire"
	"github.com/collplan/collplan/engine/transport/nvls"
	"github.com/collplan/collplan/kernels"
)

// TestNVLSKernelAlone runs the NVLS kernel of this room without the engine: n members, each a
// goroutine with its own NVLS over one in-memory multicast object (nvls.Group on a plain
// region), int32 sum, one channel, a 64-byte step so every call wraps the NCCL_STEPS slots more
// than 3 times, and two calls in a row (the step count carries on). The expected values come
// from an oracle in the test: the elementwise sum over the members' inputs (AllReduce), the
// concatenation of their inputs (AllGather), and member r's block of the sum (ReduceScatter). A
// wait that does not end fails the call through the context's 10 s deadline.
func TestNVLSKernelAlone(t *testing.T) {
	const es, stepBytes = 4, 64
	ce := stepBytes / es
	for _, coll := range []costmodel.Coll{costmodel.AllReduce, costmodel.AllGather, costmodel.ReduceScatter} {
		for _, n := range []int{2, 3, 4} {
			// count: AllReduce's total (n shares of ce per step), else per rank (ce per step); 25
			// full steps and an odd tail, so the last step's shares are short and unaligned.
			count := 25*ce + 3
			if coll == costmodel.AllReduce {
				count = 25*n*ce + 5
			}
			t.Run(fmt.Sprintf("%v/n%d", coll, n), func(t *testing.T) {
				runNVLSAlone(t, coll, n, count, stepBytes)
			})
		}
	}
}

func runNVLSAlone(t *testing.T, coll costmodel.Coll, n, count, stepBytes int) {
	const es = 4
	l := nvls.Layout{Members: n, StepBytes: stepBytes}
	words := make([]uint64, l.Size()/8+1)
	region := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), l.Size())
	red, err := kernels.NewReducer(kernels.Int32, kernels.Sum, n, nil)
	require.NoError(t, err)

	inLen, outLen := count, count // elements of each rank's input and output
	switch coll {
	case costmodel.AllGather:
		outLen = n * count
	case costmodel.ReduceScatter:
		inLen = n * count
	}
	val := func(call, r, i int) int32 { return int32(call*100003 + r*1009 + i*7 - 500) }
	abort := new(uint64)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctls := make([]*wire.Ctl, n)
	ks := make([]*NVLS, n)
	for r := range n {
		ctls[r] = &wire.Ctl{Rank: r, N: n, Abort: abort, AbortError: func(w uint64) error { return fmt.Errorf("aborted: word %#x", w) }}
		ks[r] = &NVLS{G: nvls.NewGroup(region, l, r, 0), Red: red, Comb: red, Lo: 0, Hi: count}
	}
	for call := range 2 {
		sends, recvs := make([][]byte, n), make([][]byte, n)
		for r := range n {
			sends[r], recvs[r] = make([]byte, inLen*es), make([]byte, outLen*es)
			for i := range inLen {
				binary.LittleEndian.PutUint32(sends[r][i*es:], uint32(val(call, r, i)))
			}
			ks[r].Cl = &Call{Coll: coll, Rank: r, N: n, Dt: kernels.Int32, Send: sends[r], Recv: recvs[r], Count: count, ES: es, ChunkElems: stepBytes / es}
			ks[r].W = wire.NewWaiter(ctls[r], ctx, false, false)
		}
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = ks[r].Run()
			}()
		}
		wg.Wait()
		for r := range n {
			require.NoError(t, errs[r], "call %d rank %d", call, r)
		}
		for r := range n {
			for i := range outLen {
				var want int32
				switch coll {
				case costmodel.AllReduce:
					for q := range n {
						want += val(call, q, i)
					}
				case costmodel.AllGather:
					want = val(call, i/count, i%count)
				default:
					for q := range n {
						want += val(call, q, r*count+i)
					}
				}
				got := int32(binary.LittleEndian.Uint32(recvs[r][i*es:]))
				if !assert.Equal(t, want, got, "call %d rank %d element %d", call, r, i) {
					return
				}
			}
			assert.Equal(t, ks[0].G.Step, ks[r].G.Step, "rank %d's step count", r)
		}
	}
}
