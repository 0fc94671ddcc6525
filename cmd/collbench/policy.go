package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/collplan/collplan/capabilities"
	"github.com/collplan/collplan/costmodel"
	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/node"
	"github.com/collplan/collplan/planner"
	"github.com/collplan/collplan/plugin"
	"github.com/collplan/collplan/tables"
)

// envReload names the file through which the launcher forwards SIGHUP to rank 0: a generation
// number that grows with each SIGHUP.
const envReload = "COLLBENCH_RELOAD_FILE"

// tunerSpec chooses a policy: the planner alone ("none") or the planner with a tuner plugin.
type tunerSpec = plugin.Spec

// compileTable compiles the planner's DecisionTable for coll on the node table named table (cpu, or
// cpu-net across emulated hosts: benchTable; ranks per node
// set to the communicator's virtual nodes; its fitted overlay applied unless noOverlay,
// node.PlannerConfig, the cells this shape makes illegal skipped and named in the table's Overlay)
// with the tuner of spec: one Init and one Tune round trip, then the plugin is closed, so each
// compile re-reads its configuration file. A tuner that fails leaves the planner's built-in policy,
// with the reason in the table's TunerNote.
//
// pins are --algo and --proto as NCCL_ALGO and NCCL_PROTO (tablePins): the table chooses among the
// cells they allow, as NCCL does, so that a protocol-only pin never meets an algorithm that does
// not run it (PAT with LL128 across 3 emulated hosts, refused by the engine on every rank).
func compileTable(ctx context.Context, table string, pins capabilities.Env, coll costmodel.Coll, n, rpn int, noOverlay bool, spec tunerSpec, logTo io.Writer) (*planner.DecisionTable, error) {
	if rpn <= 0 || rpn > n {
		rpn = n
	}
	load := tables.Load
	if noOverlay {
		load = tables.LoadBase
	}
	nt, err := load(table)
	if err != nil {
		return nil, fmt.Errorf("loading the %s node table: %w", table, err)
	}
	nt.Node.GPUsPerNode = rpn
	topo, err := capabilities.FromNode(nt, (n+rpn-1)/rpn)
	if err != nil {
		return nil, fmt.Errorf("topology for %d ranks, %d per node: %w", n, rpn, err)
	}
	pins.Overlay(topo.Env)
	topo.Env = pins
	cfg, err := node.PlannerConfig(nt, &topo) // with the fitted overlay, when the table has one
	if err != nil {
		return nil, err
	}
	cl, err := plugin.Open(spec, logTo)
	if err != nil {
		return nil, err
	}
	var pl *planner.Planner
	if cl == nil {
		pl, err = planner.New(&topo, cfg)
	} else {
		defer cl.Close()
		pl, err = cl.Planner(ctx, &topo, cfg)
	}
	if err != nil {
		return nil, fmt.Errorf("planner for %d ranks: %w", n, err)
	}
	dt, err := pl.Compile(ctx, planner.Class{Coll: coll, Op: capabilities.Sum, Dtype: capabilities.Float32, PipeOps: 1})
	if err != nil {
		if alt, ok := enginePins(pins, coll, n, rpn); ok {
			// The table has no cell of the pinned algorithm (cpu-net declares no reducing network,
			// yet the engine runs CollNet through its endpoint): the table chooses among the
			// protocols the engine runs that algorithm with, and the pin overrides the algorithm.
			return compileTable(ctx, table, alt, coll, n, rpn, noOverlay, spec, logTo)
		}
		return nil, fmt.Errorf("compiling the %v decision table: %w (pin --algo and --proto, or pass --planner=false)", coll, err)
	}
	return dt, nil
}

// enginePins is pins without the algorithm, the protocol restricted to those the engine runs the
// pinned algorithm with at this shape (engine.PinError), for a table without the algorithm's
// cells; ok is false when pins has no algorithm or the engine runs it with no protocol allowed.
func enginePins(pins capabilities.Env, coll costmodel.Coll, n, rpn int) (capabilities.Env, bool) {
	if pins.Algo.Value == "" {
		return pins, false
	}
	a, err := capabilities.ParseAlgo(pins.Algo.Value)
	if err != nil {
		return pins, false
	}
	var protos []string
	for p := range costmodel.NumProtos {
		name := costmodel.Proto(p).String()
		if pins.Proto.Value != "" && !strings.EqualFold(pins.Proto.Value, name) {
			continue
		}
		if engine.PinError(coll, costmodel.Algo(a), costmodel.Proto(p), n, rpn, kernels.Float32, kernels.Sum) == nil {
			protos = append(protos, name)
		}
	}
	if len(protos) == 0 {
		return pins, false
	}
	alt := capabilities.Env{Proto: capabilities.Setting{Value: strings.Join(protos, ","), Source: capabilities.SourceFlag}}
	return alt, true
}

// tableHash is what every rank must agree on about a table: its class and entries.
func tableHash(dt *planner.DecisionTable) uint64 {
	h := fnv.New64a()
	if dt != nil {
		fmt.Fprintf(h, "%+v %+v", dt.Class, dt.Entries())
	}
	return h.Sum64()
}

// cell names a decision's algorithm, protocol and channels.
func cell(d planner.Decision) string {
	return fmt.Sprintf("%v/%v/%d", d.Algo, d.Proto, d.Channels)
}

// benchTable is the node table collbench plans with: cpu-net for a job across emulated hosts
// (--hosts: one rank per host, TCP between them), cpu otherwise.
func (o *options) benchTable() string {
	if o.hosts > 0 || o.netHosts > 0 {
		return "cpu-net"
	}
	return "cpu"
}

// tablePins is --algo and --proto (or NCCL_ALGO and NCCL_PROTO) as the planner's NCCL_ALGO and
// NCCL_PROTO settings (compileTable).
func (o *options) tablePins() capabilities.Env {
	var e capabilities.Env
	if o.algo != "" {
		if a, err := capabilities.ParseAlgo(o.algo); err == nil {
			e.Algo = capabilities.Setting{Value: a.EnvName(), Source: capabilities.SourceFlag}
		}
	}
	if o.proto != "" {
		e.Proto = capabilities.Setting{Value: o.proto, Source: capabilities.SourceFlag}
	}
	return e
}

// describeTable is the plans line of a table: its overlay (and the fitted cells it could not use
// here, and why), its tuner, and why the tuner fell back if it did.
func describeTable(dt *planner.DecisionTable, spec tunerSpec, table string) string {
	s := "planner DecisionTable for the " + table + " node table"
	if ov := dt.Overlay; ov != nil && ov.File != "" {
		s += " with overlay " + ov.File
		if note := ov.Note(); note != "" {
			s += " (" + note + ")"
		}
	} else {
		s += " without overlay"
	}
	if spec.String() != "none" {
		s += ", tuner " + spec.String()
		if dt.Tuner != "" {
			s += " as " + dt.Tuner
		}
		if dt.TunerNote != "" {
			s += "; FALLBACK: " + dt.TunerNote
		}
	}
	return s + fmt.Sprintf(", table hash %016x", tableHash(dt))
}

// hups counts the SIGHUPs this process received (or, in a launched rank 0, the launcher forwarded).
var hups atomic.Int64

// reloadWatch tells rank 0 when a reload was asked for since it last looked: a SIGHUP to this
// process, or a new generation in the launcher's reload file.
type reloadWatch struct {
	file         string
	seenHup      int64
	seenFileData string
}

func newReloadWatch() *reloadWatch {
	w := &reloadWatch{file: os.Getenv(envReload), seenHup: hups.Load()}
	if w.file != "" {
		b, _ := os.ReadFile(w.file)
		w.seenFileData = string(b)
	}
	return w
}

func (w *reloadWatch) requested() bool {
	got := false
	if h := hups.Load(); h != w.seenHup {
		w.seenHup, got = h, true
	}
	if w.file != "" {
		if b, err := os.ReadFile(w.file); err == nil && string(b) != w.seenFileData {
			w.seenFileData, got = string(b), true
		}
	}
	return got
}

// forwardHups writes each SIGHUP the launcher gets into the reload file for rank 0, until ctx ends.
func forwardHups(ctx context.Context, file string) {
	seen := hups.Load()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if h := hups.Load(); h != seen {
			seen = h
			tmp := file + ".tmp"
			if err := os.WriteFile(tmp, []byte(fmt.Sprint(h)), 0o600); err == nil {
				os.Rename(tmp, file)
			}
		}
	}
}
