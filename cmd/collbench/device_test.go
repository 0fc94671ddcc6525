package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/kernels/cuda"
)

// cpuGPU stands in for the GPU communicator in the GPU sweep's tests: it runs each call on the CPU
// engine's in-process ranks with the call's algorithm and protocol, so the sweep's buffers,
// pattern, in-place halves, PreMulSum scalars and #wrong check are tested without a GPU. Time
// returns a made-up time that grows with the size, so the table's columns can be checked. corrupt
// flips one byte of the last rank's output after each Run.
type cpuGPU struct {
	n       int
	corrupt bool
	calls   []cuda.Call // every Run, as given
}

func (g *cpuGPU) Time(call cuda.Call, inPlace bool, warmup, iters int) (float64, error) {
	if iters < 1 {
		return 0, fmt.Errorf("%d iterations", iters)
	}
	us := 5 + float64(call.Count*call.Dtype.Size())/1e3
	if inPlace {
		us += 1
	}
	return us, nil
}

func (g *cpuGPU) Run(call cuda.Call) error {
	g.calls = append(g.calls, call)
	comms, err := engine.NewInProcess(g.n, engine.Config{Override: engine.Pin(call.Algo, costmodel.Proto(call.Proto))})
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	errs := make([]error, g.n)
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			ctx := context.Background()
			op := call.Op
			if op == kernels.PreMulSum {
				if op, errs[r] = c.RedOpCreatePreMulSum(call.Scalars[r], call.Dtype); errs[r] != nil {
					return
				}
				defer c.RedOpDestroy(op)
			}
			send, recv := call.Send[r], call.Recv[r]
			switch call.Coll {
			case costmodel.AllReduce:
				errs[r] = c.AllReduce(ctx, send, recv, call.Count, call.Dtype, op)
			case costmodel.AllGather:
				errs[r] = c.AllGather(ctx, send, recv, call.Count, call.Dtype)
			case costmodel.ReduceScatter:
				errs[r] = c.ReduceScatter(ctx, send, recv, call.Count, call.Dtype, op)
			case costmodel.Broadcast:
				errs[r] = c.Broadcast(ctx, send, recv, call.Count, call.Dtype, call.Root)
			default:
				errs[r] = c.Reduce(ctx, send, recv, call.Count, call.Dtype, op, call.Root)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if g.corrupt {
		victim := g.n - 1
		if call.Coll == costmodel.Reduce {
			victim = call.Root
		}
		call.Recv[victim][0] ^= 0x40
	}
	return nil
}

func gpuOptions(t *testing.T, args ...string) (*options, int) {
	t.Helper()
	o, err := parseArgs(args, io.Discard)
	require.NoError(t, err)
	n := o.np
	if n == 0 {
		n = 2
	}
	return o, n
}

// TestGPUSweep: the GPU sweep's calls, checked against the closed form of the input pattern, are
// right for every collective, in and out of place, with a root, with PreMulSum, and with sizes that
// are not multiples of anything; the table reads back with calibrate's parser, sizes and times as
// given.
func TestGPUSweep(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"allreduce float sum", []string{"allreduce", "-np", "3", "-b", "8", "-e", "8K", "-f", "4"}},
		{"allreduce tree int32 all ops", []string{"allreduce", "-np", "4", "-b", "12", "-e", "1200", "-f", "10", "-d", "int32", "-o", "all", "--algo", "Tree", "--proto", "LL"}},
		{"allgather LL128", []string{"allgather", "-np", "3", "-b", "96", "-e", "96K", "-f", "32", "--proto", "LL128"}},
		{"reducescatter mulsum", []string{"reducescatter", "-np", "2", "-b", "64", "-e", "4K", "-f", "8", "-d", "double", "-o", "mulsum"}},
		{"broadcast root 2", []string{"broadcast", "-np", "3", "-b", "5", "-e", "5000", "-f", "10", "-d", "int8", "-root", "2"}},
		{"reduce root 1 max", []string{"reduce", "-np", "3", "-b", "100", "-e", "300", "-i", "100", "-d", "half", "-o", "max", "-root", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, n := gpuOptions(t, tc.args...)
			p, err := gpuPlanOf(o, n)
			require.NoError(t, err)
			g := &cpuGPU{n: n}
			var out bytes.Buffer
			require.NoError(t, sweepGPU(context.Background(), o, n, g, "test device", p, &out))
			require.NotEmpty(t, g.calls, "the sweep checked its calls")
			text := out.String()
			assert.Contains(t, text, "# Out of bounds values : 0 OK")
			s, err := calibrate.ParseSweep("gpu.txt", strings.NewReader(text))
			require.NoError(t, err)
			assert.Equal(t, cuda.Programs[o.coll], s.Program)
			for _, row := range s.Rows {
				assert.InDelta(t, 5+float64(row.Bytes)/1e3/scaleOf(o.coll, n), row.OOP.TimeUS, 0.006, "%d B", row.Bytes)
				assert.Equal(t, int64(0), row.OOP.Wrong, "%d B", row.Bytes)
				if o.coll == costmodel.AllGather || o.coll == costmodel.ReduceScatter {
					assert.Equal(t, int64(-1), row.IP.Wrong, "%d B: no in-place call on the device", row.Bytes)
				} else {
					assert.Equal(t, int64(0), row.IP.Wrong, "%d B", row.Bytes)
				}
			}
			for _, c := range g.calls {
				assert.Equal(t, p.algo, c.Algo)
				assert.Equal(t, p.proto, c.Proto)
			}
		})
	}
}

// scaleOf turns a printed size into the bytes of one rank's call count (the stand-in's time is
// 5 us + count x element size / 1e3).
func scaleOf(c costmodel.Coll, n int) float64 {
	if c == costmodel.AllGather || c == costmodel.ReduceScatter {
		return float64(n)
	}
	return 1
}

// TestGPUSweepWrong: an output the device got wrong is counted, the table says FAILED and the sweep
// fails, as the CPU engine's does with COLLPLAN_CORRUPT=1.
func TestGPUSweepWrong(t *testing.T) {
	for _, args := range [][]string{
		{"allreduce", "-np", "2", "-b", "64", "-e", "256", "-f", "2"},
		{"reduce", "-np", "3", "-b", "64", "-e", "64", "-root", "1"},
	} {
		o, n := gpuOptions(t, args...)
		p, err := gpuPlanOf(o, n)
		require.NoError(t, err)
		var out bytes.Buffer
		err = sweepGPU(context.Background(), o, n, &cpuGPU{n: n, corrupt: true}, "test device", p, &out)
		require.Error(t, err, "%v", args)
		assert.Contains(t, out.String(), "FAILED", "%v", args)
		assert.Regexp(t, `^\d+ wrong values$`, err.Error())
	}
}

// TestGPUPlan: the pins the GPU communicator can run, and a clear error for the rest; an unpinned
// sweep says it is not the planner's choice.
func TestGPUPlan(t *testing.T) {
	o, n := gpuOptions(t, "allreduce")
	p, err := gpuPlanOf(o, n)
	require.NoError(t, err)
	assert.Equal(t, costmodel.Ring, p.algo)
	assert.Equal(t, cuda.ProtoSimple, p.proto)
	assert.Contains(t, p.note, "no node table describes ranks sharing one device")

	o, n = gpuOptions(t, "allreduce", "--algo", "Tree", "--proto", "LL128", "--channels", "3")
	p, err = gpuPlanOf(o, n)
	require.NoError(t, err)
	assert.Equal(t, costmodel.Tree, p.algo)
	assert.Equal(t, cuda.ProtoLL128, p.proto)
	assert.Equal(t, 3, p.channels)
	assert.NotContains(t, p.note, "no node table")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"allgather", "--algo", "Tree"}, "the GPU communicator runs Ring, and Tree for allreduce"},
		{[]string{"allreduce", "--algo", "NVLS"}, "the GPU communicator runs Ring, and Tree for allreduce"},
		{[]string{"allreduce", "-np", "4", "--ranks-per-node", "2"}, "--ranks-per-node 2: the 4 ranks share one device"},
	} {
		o, n := gpuOptions(t, tc.args...)
		_, err := gpuPlanOf(o, n)
		require.Error(t, err, "%v", tc.args)
		assert.Contains(t, err.Error(), tc.want)
	}
}
