package main

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/collplan/collplan/engine"
	"github.com/collplan/collplan/kernels"
	"github.com/collplan/collplan/planner"
)

// setPolicy records the table the communicator starts with and, on rank 0 of a run with tables,
// starts watching for SIGHUP.
func (b *bench) setPolicy(cfg engine.Config, rank int) {
	if len(cfg.Tables) == 0 || len(b.o.ab) > 0 {
		return
	}
	b.table = cfg.Tables[0]
	if rank == 0 {
		b.watch = newReloadWatch()
	}
}

// compileNew compiles the policy again (the tuner re-reads --tuner-config). A tuner that fails is a
// failure here: the running policy stays rather than falling back to the built-in one.
func (b *bench) compileNew(ctx context.Context) (*planner.DecisionTable, error) {
	dt, err := compileTable(ctx, b.o.benchTable(), b.o.tablePins(), b.o.coll, b.n, b.o.rpn, b.o.noOverlay, b.o.tuner, b.log)
	if err != nil {
		return nil, err
	}
	if b.o.tuner.String() != "none" && dt.TunerNote != "" {
		return nil, fmt.Errorf("%s", dt.TunerNote)
	}
	return dt, nil
}

// agreeStop agrees, between two sizes, whether to stop (any rank may ask) and whether to switch
// policy. Rank 0, when a SIGHUP came, compiles the new table first; if it compiles, rank 0
// announces the switch in this same call (the maximum of every rank's words): the table hash and
// the sequence number of the first call to run with it. Every other rank compiles the table too
// and checks the hash; one more call agrees that every rank has it, and every rank swaps its
// tables in at the announced sequence number (the engine refuses a swap anywhere else). Any
// failure leaves the old policy on every rank.
func (b *bench) agreeStop(ctx context.Context, stop bool) (bool, error) {
	var w [4]uint64 // stop, announce, hash, switch sequence
	if stop {
		w[0] = 1
	}
	var next *planner.DecisionTable
	if b.watch != nil && b.watch.requested() {
		dt, err := b.compileNew(ctx)
		if err != nil {
			fmt.Fprintf(b.log, "# collbench: rank 0: SIGHUP: the new policy did not compile, keeping the old one (table hash %016x): %v\n", tableHash(b.table), err)
		} else {
			next = dt
			// This call, the check that every rank has the table, then the switch.
			w[1], w[2], w[3] = 1, tableHash(dt), b.c.Seq()+3
			fmt.Fprintf(b.log, "# collbench: rank 0: SIGHUP: compiled the new policy (table hash %016x); switching at sequence %d\n", w[2], w[3])
		}
	}
	buf := b.scratch[:32]
	for i, v := range w {
		binary.LittleEndian.PutUint64(buf[8*i:], v)
	}
	restore := b.unpinned()
	err := b.c.AllReduce(ctx, buf, buf, 4, kernels.Uint64, kernels.Max)
	restore()
	if err != nil {
		return false, fmt.Errorf("agreeing on stop and switch: %w", err)
	}
	for i := range w {
		w[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	if w[1] == 0 {
		return w[0] != 0, nil
	}
	ok := int64(1)
	if b.rank != 0 {
		dt, err := b.compileNew(ctx)
		switch {
		case err != nil:
			fmt.Fprintf(b.log, "# collbench: rank %d: the new policy did not compile: %v\n", b.rank, err)
			ok = 0
		case tableHash(dt) != w[2]:
			fmt.Fprintf(b.log, "# collbench: rank %d: the new policy's table hash is %016x, rank 0's %016x\n", b.rank, tableHash(dt), w[2])
			ok = 0
		default:
			next = dt
		}
	}
	all, err := b.allReduceInt64(ctx, ok, kernels.Min)
	if err != nil {
		return false, err
	}
	if all == 0 {
		fmt.Fprintf(b.log, "# collbench: rank %d: not every rank compiled table %016x; keeping the old policy (table hash %016x)\n", b.rank, w[2], tableHash(b.table))
		return w[0] != 0, nil
	}
	if err := b.c.SwapTables(w[3], []*planner.DecisionTable{next}); err != nil {
		return false, fmt.Errorf("switching policy: %w", err)
	}
	_, first := b.counts(b.o.minBytes)
	mb := first
	fmt.Fprintf(b.log, "# collbench: rank %d: switched policy at sequence %d: table hash %016x -> %016x, %d bytes: %s -> %s\n",
		b.rank, w[3], tableHash(b.table), w[2], mb, cell(b.table.Lookup(mb)), cell(next.Lookup(mb)))
	b.table = next
	b.switched = true
	return w[0] != 0, nil
}

// noteSwitch logs the first measured call after a switch: its sequence number and plan as run.
func (b *bench) noteSwitch() {
	if !b.switched {
		return
	}
	b.switched = false
	fmt.Fprintf(b.log, "# collbench: rank %d: sequence %d, the first measured call after the switch, ran %s\n", b.rank, b.c.Seq(), cell(b.c.LastPlan()))
}
