package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/kernels"
)

// cpuReference runs call on the CPU engine (in process, the call's algorithm and protocol, 2 channels)
// with the same inputs and returns every rank's output.
func cpuReference(t *testing.T, call Call, n int) [][]byte {
	t.Helper()
	comms, err := engine.NewInProcess(n, engine.Config{Override: engine.Pin(call.Algo, costmodel.Proto(call.Proto))})
	require.NoError(t, err)
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	out := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range comms {
		out[r] = make([]byte, len(call.Recv[r]))
		wg.Go(func() {
			ctx := context.Background()
			send := call.Send[r]
			switch call.Coll {
			case costmodel.AllReduce:
				errs[r] = c.AllReduce(ctx, send, out[r], call.Count, call.Dtype, call.Op)
			case costmodel.AllGather:
				errs[r] = c.AllGather(ctx, send, out[r], call.Count, call.Dtype)
			case costmodel.ReduceScatter:
				errs[r] = c.ReduceScatter(ctx, send, out[r], call.Count, call.Dtype, call.Op)
			case costmodel.Broadcast:
				errs[r] = c.Broadcast(ctx, send, out[r], call.Count, call.Dtype, call.Root)
			default:
				errs[r] = c.Reduce(ctx, send, out[r], call.Count, call.Dtype, call.Op, call.Root)
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return out
}

// TestGPURing runs where a CUDA driver is (bench/gpu/run.sh; COLLPLAN_REQUIRE_CUDA=1 fails it
// without one): Ring for every collective and Tree for AllReduce, with every protocol on 2, 4 and
// 8 ranks sharing the device,
// against the CPU engine on the same seeded inputs: exact for integers (sum, prod, min, max and
// avg wrap and truncate alike in any order), and for float32 sum within n ulps of the largest
// partial sum (the ring orders of the two differ).
func TestGPURing(t *testing.T) {
	if _, err := OpenDriver(); errors.Is(err, ErrNoDriver) {
		if os.Getenv("COLLPLAN_REQUIRE_CUDA") == "1" {
			t.Fatalf("COLLPLAN_REQUIRE_CUDA=1, but: %v", err)
		}
		t.Skipf("%v: this test needs a GPU (bench/gpu/run.sh runs it there)", err)
	}
	paths := []struct {
		algo costmodel.Algo
		coll costmodel.Coll
	}{{costmodel.Ring, costmodel.AllReduce}, {costmodel.Ring, costmodel.AllGather}, {costmodel.Ring, costmodel.ReduceScatter},
		{costmodel.Ring, costmodel.Broadcast}, {costmodel.Ring, costmodel.Reduce}, {costmodel.Tree, costmodel.AllReduce}}
	types := []struct {
		dt kernels.Dtype
		op kernels.Op
	}{{kernels.Int32, kernels.Sum}, {kernels.Uint8, kernels.Max}, {kernels.Int64, kernels.Avg}, {kernels.Float32, kernels.Sum}}
	for _, n := range []int{2, 4, 8} {
		comm, err := NewComm(CommConfig{Ranks: n, Channels: 2, Buffers: ConnBuffers{LL: 8 * 16 * 64, LL128: 8 * 128 * 16, Simple: 8 * 16384}})
		require.NoError(t, err)
		for _, path := range paths {
			coll := path.coll
			for proto := range 3 {
				for _, ty := range types {
					name := fmt.Sprintf("%d ranks/%v %v/%s/%v %v", n, path.algo, coll, protoNames[proto], ty.dt, ty.op)
					t.Run(name, func(t *testing.T) {
						count := 3001 // not a multiple of any step
						rng := rand.New(rand.NewPCG(uint64(n), uint64(proto)))
						es := ty.dt.Size()
						in, out := count, count
						switch coll {
						case costmodel.AllGather:
							out *= n
						case costmodel.ReduceScatter:
							in *= n
						}
						call := Call{Algo: path.algo, Coll: coll, Proto: proto, Dtype: ty.dt, Op: ty.op, Count: count, Root: n - 1,
							Send: make([][]byte, n), Recv: make([][]byte, n)}
						for r := range n {
							call.Send[r] = make([]byte, in*es)
							call.Recv[r] = make([]byte, out*es)
							for i := range in {
								v := rng.Uint64()
								if ty.dt == kernels.Float32 {
									v = uint64(math.Float32bits(float32(rng.IntN(2000)-1000) / 64))
								}
								for b := range es {
									call.Send[r][i*es+b] = byte(v >> (8 * b))
								}
							}
						}
						want := cpuReference(t, call, n)
						require.NoError(t, comm.Run(call))
						for r := range n {
							if coll == costmodel.Reduce && r != call.Root {
								continue // only the root's output is defined
							}
							if ty.dt != kernels.Float32 {
								assert.Equal(t, want[r], call.Recv[r], "rank %d", r)
								continue
							}
							wrong := 0
							for i := 0; i < len(want[r]); i += 4 {
								a := math.Float32frombits(binary.LittleEndian.Uint32(want[r][i:]))
								b := math.Float32frombits(binary.LittleEndian.Uint32(call.Recv[r][i:]))
								if math.Abs(float64(a-b)) > float64(n)*(1000.0/64*float64(n))*math.Pow(2, -23) {
									wrong++
								}
							}
							assert.Zero(t, wrong, "rank %d: elements beyond the bound", r)
						}
					})
				}
			}
		}
		require.NoError(t, comm.Close())
	}
}
