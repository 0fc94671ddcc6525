package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/collplan/collplan/calibrate"
	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/kernels"
)

// tuningCall is one collective of the TUNING log test and the decision it must log.
type tuningCall struct {
	coll     costmodel.Coll
	count    int
	dt       kernels.Dtype
	over     engine.Override
	bytes    int64 // count * element size, as NCCL prints it
	chLo     int
	chHi     int
	wantAlgo capabilities.Algo
}

// runTuningCalls runs calls on a fresh n-rank in-process communicator whose DebugLog is the
// returned buffer.
func runTuningCalls(t *testing.T, n int, calls []tuningCall) *bytes.Buffer {
	t.Helper()
	var log bytes.Buffer
	comms, err := engine.NewInProcess(n, engine.Config{DebugLog: &log, Channels: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	for _, tc := range calls {
		for _, c := range comms {
			c.SetOverride(tc.over)
		}
		es := tc.dt.Size()
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r, c := range comms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				send := make([]byte, tc.count*es*n)
				recv := make([]byte, tc.count*es*n)
				ctx := context.Background()
				switch tc.coll {
				case costmodel.AllReduce:
					errs[r] = c.AllReduce(ctx, send, recv, tc.count, tc.dt, kernels.Sum)
				case costmodel.AllGather:
					errs[r] = c.AllGather(ctx, send, recv, tc.count, tc.dt)
				case costmodel.ReduceScatter:
					errs[r] = c.ReduceScatter(ctx, send, recv, tc.count, tc.dt, kernels.Sum)
				case costmodel.Broadcast:
					errs[r] = c.Broadcast(ctx, send, recv, tc.count, tc.dt, 0)
				case costmodel.Reduce:
					errs[r] = c.Reduce(ctx, send, recv, tc.count, tc.dt, kernels.Sum, 0)
				}
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%v rank %d: %v", tc.coll, r, err)
			}
		}
	}
	return &log
}

func TestTuningLogParses(t *testing.T) {
	t.Setenv("NCCL_DEBUG", "INFO")
	t.Setenv("NCCL_DEBUG_SUBSYS", "INIT,TUNING")
	ringLL := engine.Pin(costmodel.Ring, costmodel.LL)
	treeLL128 := engine.Pin(costmodel.Tree, costmodel.LL128)
	ring2 := engine.Pin(costmodel.Ring, costmodel.Simple)
	ring2.Channels = 2
	calls := []tuningCall{
		// A 4 KiB AllReduce on 4 channels of 1024 floats each: 256 per channel, all four used.
		{coll: costmodel.AllReduce, count: 1024, dt: kernels.Float32, over: ringLL, bytes: 4096, chLo: 0, chHi: 3, wantAlgo: capabilities.Ring},
		// 2 floats: one 16-byte-aligned piece, channel 0 only.
		{coll: costmodel.AllReduce, count: 2, dt: kernels.Float32, over: ringLL, bytes: 8, chLo: 0, chHi: 0, wantAlgo: capabilities.Ring},
		{coll: costmodel.AllReduce, count: 1 << 16, dt: kernels.Float64, over: treeLL128, bytes: 8 << 16, chLo: 0, chHi: 3, wantAlgo: capabilities.Tree},
		// AllGather and ReduceScatter print the per-rank bytes, not the model's n times more.
		{coll: costmodel.AllGather, count: 1000, dt: kernels.Int32, over: ring2, bytes: 4000, chLo: 0, chHi: 1, wantAlgo: capabilities.Ring},
		{coll: costmodel.ReduceScatter, count: 3000, dt: kernels.Float16, over: ring2, bytes: 6000, chLo: 0, chHi: 1, wantAlgo: capabilities.Ring},
		{coll: costmodel.Broadcast, count: 100, dt: kernels.Int8, over: ring2, bytes: 100, chLo: 0, chHi: 1, wantAlgo: capabilities.Ring},
	}
	log := runTuningCalls(t, 3, calls)
	text := log.String()
	decs, _, err := calibrate.ParseTuning("tuning.log", strings.NewReader(text))
	if err != nil {
		t.Fatalf("ParseTuning: %v\n%s", err, text)
	}
	if len(decs) != len(calls) {
		t.Fatalf("%d decisions, want %d (only rank 0 logs, one line a call):\n%s", len(decs), len(calls), text)
	}
	host, _ := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	for i, d := range decs {
		tc := calls[i]
		want := fmt.Sprintf("%v %d B %v/%v ch %d..%d", tc.coll, tc.bytes, tc.wantAlgo, tc.over.Proto, tc.chLo, tc.chHi)
		got := fmt.Sprintf("%v %d B %v/%v ch %d..%d", d.Coll, d.Bytes, d.Algo, d.Proto, d.ChannelLo, d.ChannelHi)
		if !d.CollKnown || got != want || d.Format != calibrate.Format224 {
			t.Errorf("decision %d: %s (format %s), want %s\nline: %s", i, got, d.Format, want, strings.Split(text, "\n")[i])
		}
		if d.Host != host || d.PID != os.Getpid() || d.Dev != 0 {
			t.Errorf("decision %d: prefix host %q pid %d rank %d, want %q %d 0", i, d.Host, d.PID, d.Dev, host, os.Getpid())
		}
	}
	if !strings.Contains(text, "NCCL INFO AllReduce: 4096 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..3}\n") {
		t.Errorf("no NCCL-formatted 4 KiB line in\n%s", text)
	}
}

func TestTuningLogOff(t *testing.T) {
	for _, env := range [][2]string{
		{"", "TUNING"},
		{"WARN", "TUNING"},
		{"INFO", ""}, // NCCL's default subsystems do not include TUNING
		{"INFO", "INIT,ENV"},
		{"INFO", "^TUNING"},
		{"INFO", "^INIT,TUNING"},
	} {
		t.Run(env[0]+"/"+env[1], func(t *testing.T) {
			t.Setenv("NCCL_DEBUG", env[0])
			t.Setenv("NCCL_DEBUG_SUBSYS", env[1])
			log := runTuningCalls(t, 2, []tuningCall{{coll: costmodel.AllReduce, count: 64, dt: kernels.Float32}})
			if log.Len() != 0 {
				t.Errorf("logged with NCCL_DEBUG=%q NCCL_DEBUG_SUBSYS=%q:\n%s", env[0], env[1], log)
			}
		})
	}
	for _, sub := range []string{"ALL", "tuning", "^INIT", "INIT, TUNING"} {
		t.Run("TRACE/"+sub, func(t *testing.T) {
			t.Setenv("NCCL_DEBUG", "TRACE")
			t.Setenv("NCCL_DEBUG_SUBSYS", sub)
			log := runTuningCalls(t, 2, []tuningCall{{coll: costmodel.AllReduce, count: 64, dt: kernels.Float32}})
			if n := strings.Count(log.String(), " Bytes -> Algo "); n != 1 {
				t.Errorf("NCCL_DEBUG_SUBSYS=%q: %d lines, want 1:\n%s", sub, n, log)
			}
		})
	}
}
