package cuda

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
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

// TestGPUBusBW runs where a CUDA driver is and COLLPLAN_GPU_TABLES names a directory
// (bench/gpu/run.sh): AllReduce float32 sum with Ring and Tree and every protocol, on 2, 4 and 8
// ranks sharing the device, 8 B to 1 GiB by 4x with Simple and to 64 MiB with LL and LL128, out
// of place and in place (Comm.Time: 2 warmup calls, 5 timed, 2 from 64 MiB), one nccl-tests
// table per (algorithm, protocol, ranks) that calibrate reads (WriteTable), #wrong N/A (TestGPURing
// checks the values).
func TestGPUBusBW(t *testing.T) {
	dir := os.Getenv("COLLPLAN_GPU_TABLES")
	if dir == "" {
		t.Skip("COLLPLAN_GPU_TABLES is not set (bench/gpu/run.sh sets it on a GPU machine)")
	}
	drv, err := OpenDriver()
	require.NoError(t, err)
	devs, err := drv.Devices()
	require.NoError(t, err)
	require.NotEmpty(t, devs)
	require.NoError(t, os.MkdirAll(dir, 0o755))
	const channels = 2
	for _, n := range []int{2, 4, 8} {
		comm, err := NewComm(CommConfig{Ranks: n, Channels: channels, Buffers: ConnBuffers{LL: 8 * 16 * 1024, LL128: 8 * 128 * 512, Simple: 8 * (512 << 10)}})
		require.NoError(t, err)
		for _, algo := range []costmodel.Algo{costmodel.Ring, costmodel.Tree} {
			for proto := range 3 {
				maxBytes := int64(1 << 30)
				if proto != ProtoSimple {
					maxBytes = 64 << 20
				}
				var rows []TableRow
				for size := int64(8); size <= maxBytes; size *= 4 {
					call := Call{Algo: algo, Coll: costmodel.AllReduce, Proto: proto, Dtype: kernels.Float32, Op: kernels.Sum, Count: int(size / 4)}
					iters := 5
					if size >= 64<<20 {
						iters = 2
					}
					oop, err := comm.Time(call, false, 2, iters)
					require.NoError(t, err, "%v %s %d ranks %d B", algo, protoNames[proto], n, size)
					ip, err := comm.Time(call, true, 2, iters)
					require.NoError(t, err, "%v %s %d ranks %d B in place", algo, protoNames[proto], n, size)
					rows = append(rows, TableRow{Bytes: size, Count: size / 4, Type: "float", Redop: "sum", Root: -1,
						OOPUs: oop, IPUs: ip, OOPWrong: -1, IPWrong: -1})
				}
				name := fmt.Sprintf("allreduce_%s_%s_%dr.txt", map[costmodel.Algo]string{costmodel.Ring: "ring", costmodel.Tree: "tree"}[algo], protoNames[proto], n)
				f, err := os.Create(filepath.Join(dir, name))
				require.NoError(t, err)
				note := fmt.Sprintf("%v %s, %d channels, %d ranks sharing one device", algo, protoNames[proto], channels, n)
				require.NoError(t, WriteTable(f, costmodel.AllReduce, n, devs[0].Name, note, 5, rows))
				require.NoError(t, f.Close())
				last := rows[len(rows)-1]
				t.Logf("%s: %d B in %.1f us, busbw %.1f GB/s", name, last.Bytes, last.OOPUs, float64(last.Bytes)/1e3/last.OOPUs*BusFactor(costmodel.AllReduce, n))
			}
		}
		require.NoError(t, comm.Close())
	}
}
