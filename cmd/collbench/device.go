package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/kernels/cuda"
)

// runtimeError marks a runtime that is missing, not bad input: exit status 3 (--device cuda on a
// machine without a CUDA driver).
type runtimeError struct{ err error }

func (e runtimeError) Error() string { return e.err.Error() }
func (e runtimeError) Unwrap() error { return e.err }

// gpuComm is what the GPU sweep asks of a communicator: cuda.Comm, or a test's stand-in.
type gpuComm interface {
	// Run runs call once, copying the inputs in and the outputs back.
	Run(call cuda.Call) error
	// Time is one call's time in microseconds, averaged over iters calls after warmup.
	Time(call cuda.Call, inPlace bool, warmup, iters int) (float64, error)
}

// runCUDA is --device cuda: n ranks of the GPU communicator (kernels/cuda.Comm) sharing device 0,
// swept as the CPU engine is, with the same input pattern and #wrong check. Without a driver it is
// cuda.ErrNoDriver ("no CUDA driver (libcuda.so.1 not found)"), one line and exit status 3.
func runCUDA(ctx context.Context, o *options, n int, stdout io.Writer) error {
	plan, err := gpuPlanOf(o, n)
	if err != nil {
		return usageError{err}
	}
	drv, err := cuda.OpenDriver()
	if err != nil {
		return runtimeError{err}
	}
	devs, err := drv.Devices()
	if err != nil {
		return runtimeError{err}
	}
	if len(devs) == 0 {
		return runtimeError{errors.New("--device cuda: the CUDA driver sees no device")}
	}
	bufs := o.buffers.WithDefaults() // NCCL's sizes where no flag gave one, as the CPU engine takes them
	comm, err := cuda.NewComm(cuda.CommConfig{Ranks: n, Channels: plan.channels, Buffers: cuda.ConnBuffers{
		LL: int(bufs.LL), LL128: int(bufs.LL128), Simple: int(bufs.Simple)}})
	if err != nil {
		return fmt.Errorf("--device cuda: %d ranks on %s: %w", n, devs[0].Name, err)
	}
	defer comm.Close()
	return sweepGPU(ctx, o, n, comm, devs[0].Name, plan, stdout)
}

// gpuPlan is what every call of a GPU sweep runs.
type gpuPlan struct {
	algo     costmodel.Algo
	proto    int
	channels int
	note     string // the preamble's account of it
}

// gpuPlanOf reads the pins: the GPU communicator runs Ring for every collective and Tree for
// AllReduce, with any protocol. No node table describes ranks that share one device (issue 16's
// h200-1dev is not made: it needs a GPU's sweeps), so an unpinned call runs Ring/Simple on 2
// channels, and the preamble says so rather than pretend the planner chose it.
func gpuPlanOf(o *options, n int) (gpuPlan, error) {
	p := gpuPlan{algo: costmodel.Ring, proto: cuda.ProtoSimple, channels: 2}
	var how []string
	if o.algo != "" {
		a, err := parseAlgo(o.algo, "--algo (or NCCL_ALGO)")
		if err != nil {
			return p, err
		}
		if a != costmodel.Ring && !(a == costmodel.Tree && o.coll == costmodel.AllReduce) {
			return p, fmt.Errorf("--device cuda: --algo %s: the GPU communicator runs Ring, and Tree for allreduce", o.algo)
		}
		p.algo = a
		how = append(how, "algorithm pinned")
	}
	if o.proto != "" {
		v, err := parseEnum(o.proto, "--proto (or NCCL_PROTO)", costmodel.NumProtos, func(i int) string { return costmodel.Proto(i).String() })
		if err != nil {
			return p, err
		}
		p.proto = v
		how = append(how, "protocol pinned")
	}
	if o.channels > 0 {
		p.channels = o.channels
		how = append(how, "channels pinned")
	}
	switch {
	case o.tuner.String() != "none" || len(o.ab) > 0:
		return p, errors.New("--device cuda: --tuner and --ab need a node table for ranks sharing one device, and there is none yet")
	case o.rpn > 0 && o.rpn < n:
		return p, fmt.Errorf("--device cuda: --ranks-per-node %d: the %d ranks share one device, one node", o.rpn, n)
	}
	if len(how) < 3 {
		how = append(how, "the rest Ring/Simple on 2 channels: no node table describes ranks sharing one device yet")
	}
	p.note = fmt.Sprintf("%v %v, %d channels, %d ranks sharing one device (%s)", p.algo, costmodel.Proto(p.proto), p.channels, n, strings.Join(how, "; "))
	return p, nil
}

// sweepGPU runs o's sweep (every type and op it names, -N sweeps of its sizes) on comm and prints
// one nccl-tests table. Each size is timed out of place and in place (-n calls after -w); with -c,
// one more call per half is checked on every rank against the closed form of the input pattern
// (pattern.go, as the CPU engine is checked). AllGather and ReduceScatter have no in-place call on
// the device (the GPU communicator runs them out of place), so their in-place half is N/A.
// Sizes of zero elements are left out: the GPU communicator runs no empty call.
func sweepGPU(ctx context.Context, o *options, n int, comm gpuComm, device string, p gpuPlan, stdout io.Writer) error {
	var rows []cuda.TableRow
	var wrong int64
	for _, dtName := range o.dtNames {
		for _, opName := range o.opNames {
			oc := *o
			oc.setCombo(dtName, opName)
			ranks := make([]*bench, n)
			for r := range ranks {
				ranks[r] = &bench{o: &oc, rank: r, n: n, es: oc.dt.Size()}
			}
			for cycle := 0; o.cycles == 0 || cycle < o.cycles; cycle++ {
				for size := o.minBytes; size <= o.maxBytes; {
					if ctx.Err() != nil {
						return writeGPUTable(o, n, device, p, rows, wrong, stdout)
					}
					row, w, err := gpuRow(&oc, ranks, comm, p, size)
					if err != nil {
						return err
					}
					if row.Count > 0 {
						rows = append(rows, row)
						wrong += w
					}
					if o.stepF > 1 {
						size = max(size, 1) * o.stepF
					} else {
						size += o.stepB
					}
				}
			}
		}
	}
	return writeGPUTable(o, n, device, p, rows, wrong, stdout)
}

func writeGPUTable(o *options, n int, device string, p gpuPlan, rows []cuda.TableRow, wrong int64, stdout io.Writer) error {
	if len(rows) == 0 {
		return usagef("--device cuda: no size of -b %d to -e %d holds one element", o.minBytes, o.maxBytes)
	}
	t := cuda.Table{Coll: o.coll, Ranks: n, Device: device, Note: p.note, Warmup: o.warmup, Iters: o.iters,
		StepFactor: o.stepF, StepBytes: o.stepB}
	if err := t.Write(stdout, rows); err != nil {
		return err
	}
	if wrong > 0 {
		return fmt.Errorf("%d wrong values", wrong)
	}
	return nil
}

// gpuRow times and checks one size; wrong is the row's wrong elements over every rank.
func gpuRow(o *options, ranks []*bench, comm gpuComm, p gpuPlan, size int64) (cuda.TableRow, int64, error) {
	n := len(ranks)
	b0 := ranks[0]
	count, printed := b0.counts(size)
	root := -1
	if o.coll == costmodel.Broadcast || o.coll == costmodel.Reduce {
		root = o.root
	}
	row := cuda.TableRow{Bytes: printed, Count: count, Type: o.dtName, Redop: o.opName, Root: root}
	if count == 0 {
		return row, 0, nil
	}
	var wrong int64
	for ip := range 2 {
		inPlace := ip == 1
		halfName := map[bool]string{false: "out of place", true: "in place"}[inPlace]
		call := cuda.Call{Algo: p.algo, Coll: o.coll, Proto: p.proto, Dtype: o.dt, Op: o.op, Count: int(count), Root: max(o.root, 0),
			Send: make([][]byte, n), Recv: make([][]byte, n)}
		if o.opName == "mulsum" {
			call.Scalars = make([][]byte, n)
		}
		sameSize := o.coll != costmodel.AllGather && o.coll != costmodel.ReduceScatter
		for r, b := range ranks {
			s, rv := b.bufBytes(size)
			call.Send[r] = make([]byte, s)
			call.Recv[r] = make([]byte, rv)
			if inPlace && sameSize {
				call.Recv[r] = call.Send[r]
			}
			if call.Scalars != nil {
				call.Scalars[r] = b.premulScalarBytes()
			}
		}
		us, err := comm.Time(call, inPlace, o.warmup, o.iters)
		if err != nil {
			return row, 0, fmt.Errorf("%d bytes, %s: %w", printed, halfName, err)
		}
		w := -1
		if o.check > 0 && (sameSize || !inPlace) {
			w = 0
			for r, b := range ranks {
				b.fill(call.Send[r], call.Recv[r], int(count), inPlace && sameSize)
			}
			if err := comm.Run(call); err != nil {
				return row, 0, fmt.Errorf("%d bytes, %s, checked call: %w", printed, halfName, err)
			}
			for r, b := range ranks {
				w += int(b.countWrong(call.Recv[r], int(count)))
			}
			wrong += int64(w)
		}
		if inPlace {
			row.IPUs, row.IPWrong = us, w
		} else {
			row.OOPUs, row.OOPWrong = us, w
		}
	}
	return row, wrong, nil
}
